//! NUMA placement: a STRICT allocation on node N has every page on node N.

use crate::gb::*;
use crate::harness::*;
use greenboost_abi::*;

const MIB: u64 = 1 << 20;

/// Node of every page of the mapping (move_pages with nodes = NULL only queries).
fn page_nodes(m: &Mapping) -> Result<Vec<i32>, String> {
    let pg = page_size() as usize;
    // SAFETY (add): every offset is inside the mapping.
    let pages: Vec<*mut libc::c_void> = (0..m.len() / pg).map(|i| unsafe { m.ptr().add(i * pg) } as *mut libc::c_void).collect();
    let mut status = vec![i32::MIN; pages.len()];
    // SAFETY: pages and status are arrays of pages.len() entries; nodes NULL = query only.
    let r = unsafe {
        libc::syscall(libc::SYS_move_pages, 0, pages.len(), pages.as_ptr(), std::ptr::null::<i32>(), status.as_mut_ptr(), 0)
    };
    if r == 0 {
        return Ok(status);
    }
    if errno() != libc::ENOSYS {
        return Err(format!("move_pages query: {}", errname(errno())));
    }
    // Kernels without CONFIG_MIGRATION (the minimal test kernel) lack move_pages;
    // get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR) answers the node of one page.
    pages
        .iter()
        .map(|&p| {
            let mut node: i32 = -1;
            // SAFETY: node is a valid int; no nodemask is requested.
            let r = unsafe {
                libc::syscall(libc::SYS_get_mempolicy, &mut node as *mut i32, std::ptr::null_mut::<u64>(), 0usize, p, 3usize)
            };
            if r < 0 {
                Err(format!("get_mempolicy(MPOL_F_NODE|MPOL_F_ADDR): {}", errname(errno())))
            } else {
                Ok(node)
            }
        })
        .collect()
}

pub fn numa_placement() -> TestResult {
    let nodes = memory_nodes();
    if nodes.len() < 2 {
        return Ok(Outcome::Skip(format!("guest has {} NUMA node(s) with memory; placement needs 2 (the runner boots with 2)", nodes.len())));
    }
    let dev = Dev::open()?;
    for &node in &nodes {
        for (size, flags) in [(8 * MIB, GB_ALLOC_NODE_STRICT), (2 * MIB + page_size(), GB_ALLOC_NODE_STRICT), (4 * MIB, 0)] {
            let buf = dev.try_alloc_on(size, flags, node)
                .map_err(|e| format!("ALLOC({size}, node {node}, flags {flags}): {}", errname(e)))?;
            let m = buf.map()?;
            m.fill(node as u64, page_words());
            let placed = page_nodes(&m)?;
            let off: Vec<(usize, i32)> = placed.iter().copied().enumerate().filter(|&(_, n)| n != node).collect();
            // Preferred (non-strict) placement may fall back, but not in an idle guest with free memory on the node.
            ensure(off.is_empty(), || {
                format!("ALLOC on node {node} (flags {flags}): {} of {} pages elsewhere, first page {} on {}", off.len(), placed.len(), off[0].0, off[0].1)
            })?;
        }
    }
    note(&format!("nodes {nodes:?}: every page where asked"));
    Ok(Outcome::Pass)
}

/// A node without memory (online for its CPU) cannot be asked for: EINVAL, strict or
/// not, nothing allocated. A strict ALLOC for "this CPU's node" from that node's CPU
/// gets the nearest node with memory instead (the kernel's numa_mem_id).
pub fn numa_memoryless_node() -> TestResult {
    let with_memory = memory_nodes();
    let Some(node) = online_nodes().into_iter().find(|n| !with_memory.contains(n)) else {
        return Ok(Outcome::Skip("no memoryless node online (the runner boots node 2 with a CPU and no memory)".into()));
    };
    let dev = Dev::open()?;
    let base = dev.pool()?;
    for flags in [0, GB_ALLOC_NODE_STRICT] {
        expect_errno(&format!("ALLOC on memoryless node {node} (flags {flags})"), dev.try_alloc_on(4 * MIB, flags, node).map(|_| ()), libc::EINVAL)?;
    }
    let Some(&cpu) = node_cpus(node).first() else {
        return Ok(Outcome::Skip(format!("memoryless node {node} has no CPU to run on")));
    };
    // From a thread of its own pinned to that CPU (affinity is per thread).
    let buf = std::thread::scope(|scope| {
        scope.spawn(|| {
            pin_to_cpu(cpu as usize)?;
            dev.try_alloc_on(4 * MIB, GB_ALLOC_NODE_STRICT, -1).map_err(|e| {
                format!("strict ALLOC for this CPU's node from CPU {cpu} of memoryless node {node}: {}", errname(e))
            })
        })
        .join()
        .map_err(|_| "the pinned thread panicked".to_string())?
    })?;
    let m = buf.map()?;
    m.fill(7, page_words());
    let nodes = page_nodes(&m)?;
    ensure(nodes.iter().all(|n| with_memory.contains(n)), || format!("pages on nodes {nodes:?}, expected nodes with memory {with_memory:?}"))?;
    note(&format!("node {node} is memoryless: EINVAL when named; from its CPU {cpu} a strict ALLOC landed on node {}", nodes[0]));
    drop(m);
    drop(buf);
    dev.settle_to(&base, std::time::Duration::from_secs(5))?;
    Ok(Outcome::Pass)
}
