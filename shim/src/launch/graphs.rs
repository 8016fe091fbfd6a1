//! CUDA graphs: what each executable graph launches, read once from its graph's nodes
//! when it is instantiated (kernel nodes named as launches are, child graphs followed),
//! kept up to date by the exec updates the program makes, and counted at every
//! cuGraphLaunch as the kernels it runs; its copy and memset nodes name what they write
//! and read, as direct ones do (`memory_ops`).
//!
//! An executable graph's nodes cannot be listed, only the graph's it came from: a graph
//! instantiated through a path the shim does not see, a node kind whose work cannot be
//! read (conditional nodes, batched memory operations), an update the shim cannot
//! follow, or a capture that may have recorded a writer through pointers kept in device
//! memory (`capture`) leaves the graph "not fully read", and each of its launches is
//! counted so. A copy or memset node writing a `__device__` global counts as such a
//! writer at each launch (`indirect`).

use std::ffi::c_int;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::cuda::ffi::{CuDevicePtr, CuFunction, CuResult, Stream};
use crate::cuda::launch_ffi::{node_type, Graph, GraphExec, GraphNode, KernelNodeParams, Memcpy3D, MemsetNodeParams};
use crate::cuda::real;
use crate::launch::capture::{self, Enqueued};
use crate::launch::indirect;
use crate::launch::kernel_times;
use crate::launch::naming::{self, Named};
use crate::memory::address_index::{self, Snapshot};
use crate::memory::recent_ranges;
use crate::sys::cow_map::CowMap;
use crate::sys::shards::Shard;
use crate::sys::stats;

/// What one kernel node names.
#[derive(Clone, Debug)]
struct KernelNode {
    /// The function it launches (its read share weighs its namings, `kernel_times`).
    function: CuFunction,
    /// The addresses of allocations its parameters named when it was read, each with
    /// whether it was the node's first naming of its allocation (`naming::Named`).
    named: Box<[(CuDevicePtr, bool)]>,
    read: bool,
}

/// What one copy or memset node writes and reads: the addresses of its first byte written
/// and read, when it was read, if they lay in allocations of the index (`None`: not an
/// allocation of the index, or a memset's value), and whether it writes a `__device__`
/// global.
#[derive(Clone, Copy, Debug, Default)]
struct MemoryNode {
    written: Option<CuDevicePtr>,
    read: Option<CuDevicePtr>,
    writes_global: bool,
}

/// What one executable graph runs at each launch.
#[derive(Clone, Debug, Default)]
struct ExecRecord {
    kernels: FxHashMap<usize, KernelNode>,
    memory_nodes: Vec<MemoryNode>,
    memory_ops: u64,
    host_funcs: u64,
    /// Every node's work known.
    read: bool,
}

static EXECS: CowMap<ExecRecord> = CowMap::new();

/// Child graphs followed this deep at most (a graph cannot contain itself; this bounds a
/// malformed answer).
const MAX_DEPTH: usize = 8;

/// `exec` was instantiated from `graph`.
pub fn instantiated(exec: GraphExec, graph: Graph) {
    let mut record = ExecRecord { read: !capture::may_hold_indirect_writer(graph), ..ExecRecord::default() };
    let snapshot = address_index::load();
    read_graph(graph, &mut record, snapshot.as_deref(), 0);
    store(exec, Some(record));
}

/// `exec` was updated from `graph` (cuGraphExecUpdate succeeded): its nodes are now
/// `graph`'s.
pub fn updated(exec: GraphExec, graph: Graph) {
    instantiated(exec, graph);
}

/// `exec`'s kernel node `node` now runs with `params`.
///
/// # Safety
/// `params` is a kernel node's parameters that the driver accepted for this node.
pub unsafe fn kernel_node_set(exec: GraphExec, node: GraphNode, params: &KernelNodeParams) {
    let Some(current) = EXECS.get(exec.0 as usize) else { return };
    let mut record = ExecRecord::clone(&current);
    let snapshot = address_index::load();
    // SAFETY: per this function's contract.
    let kernel = unsafe { read_kernel(params, snapshot.as_deref()) };
    record.kernels.insert(node.0 as usize, kernel);
    store(exec, Some(record));
}

/// `exec` was changed in a way the shim does not follow.
pub fn changed_unread(exec: GraphExec) {
    let Some(current) = EXECS.get(exec.0 as usize) else { return };
    store(exec, Some(ExecRecord { read: false, ..ExecRecord::clone(&current) }));
}

/// `exec` is being destroyed.
pub fn destroyed(exec: GraphExec) {
    store(exec, None);
}

/// `exec` was launched on `stream` (cuGraphLaunch succeeded): its kernels, copies and
/// host functions run once more, unless the stream is being captured (the graph is then
/// a child node of the graph captured, counted when that one launches).
pub fn launched(exec: GraphExec, stream: Stream) {
    if capture::enqueued_on(stream) == Enqueued::Captured {
        return;
    }
    let shard = Shard::mine();
    let counts = stats::launch_counts(shard);
    counts.bump(|counts| &counts.graph_launches);
    let Some(record) = EXECS.get(exec.0 as usize) else {
        counts.bump(|counts| &counts.graphs_unread);
        return;
    };
    if !record.read {
        counts.bump(|counts| &counts.graphs_unread);
    }
    let snapshot = address_index::load();
    let mut namings = 0;
    if let Some(snapshot) = snapshot.as_ref() {
        // Each node looked up as a launch of its own, through the thread's memo: a
        // graph's nodes name the same few buffers one after another, as launches do.
        recent_ranges::with_finder(snapshot, |finder| {
            for kernel in record.kernels.values() {
                finder.next_launch();
                let weight = kernel_times::weight(kernel.function);
                for &(address, first) in &kernel.named {
                    if let Some(found) = finder.find(address) {
                        Named { start: found.start, uses: found.uses, address, first }.note(weight, shard);
                        namings += u64::from(first);
                    }
                }
            }
        });
    }
    for node in &record.memory_nodes {
        if let Some(snapshot) = snapshot.as_deref() {
            address_index::note_copy(snapshot.locate(node.written), snapshot.locate(node.read), shard);
        }
        if node.writes_global {
            indirect::global_written();
        }
    }
    let unread = record.kernels.values().filter(|kernel| !kernel.read).count();
    counts.add(|counts| &counts.launches, record.kernels.len() as u64);
    counts.add(|counts| &counts.launches_unread, unread as u64);
    counts.add(|counts| &counts.launch_namings, namings);
    counts.add(|counts| &counts.memory_ops, record.memory_ops);
    counts.add(|counts| &counts.host_funcs, record.host_funcs);
}

fn store(exec: GraphExec, record: Option<ExecRecord>) {
    EXECS.set(exec.0 as usize, record.map(Arc::new));
}

/// Adds `graph`'s nodes to `record`; marks it not fully read where a node's work cannot
/// be known.
fn read_graph(graph: Graph, record: &mut ExecRecord, snapshot: Option<&Snapshot>, depth: usize) {
    let Some(nodes) = nodes_of(graph).filter(|_| depth < MAX_DEPTH) else {
        record.read = false;
        return;
    };
    for node in nodes {
        let Some(get_type) = real::cuGraphNodeGetType() else {
            record.read = false;
            return;
        };
        let mut kind: c_int = -1;
        // SAFETY: a node of `graph` (listed by the driver just now) and a writable local.
        if unsafe { get_type(node, &mut kind) } != CuResult::SUCCESS {
            record.read = false;
            continue;
        }
        match kind {
            node_type::KERNEL => {
                let unread = || KernelNode { function: CuFunction::NULL, named: Box::default(), read: false };
                let kernel = kernel_params(node).map_or_else(unread, |params| {
                    // SAFETY: the driver's own answer for this node, read while the
                    // graph lives (the caller holds it through instantiation).
                    unsafe { read_kernel(&params, snapshot) }
                });
                record.kernels.insert(node.0 as usize, kernel);
            }
            node_type::MEMCPY | node_type::MEMSET => {
                record.memory_ops += 1;
                match memory_node(node, kind, snapshot) {
                    Some(memory) => record.memory_nodes.push(memory),
                    None => record.read = false,
                }
            }
            node_type::HOST => record.host_funcs += 1,
            node_type::GRAPH => match child_graph(node) {
                Some(child) => read_graph(child, record, snapshot, depth + 1),
                None => record.read = false,
            },
            node_type::EMPTY
            | node_type::WAIT_EVENT
            | node_type::EVENT_RECORD
            | node_type::EXT_SEMAS_SIGNAL
            | node_type::EXT_SEMAS_WAIT
            | node_type::MEM_ALLOC
            | node_type::MEM_FREE => {}
            _ => record.read = false,
        }
    }
}

/// The nodes of `graph`, as the driver lists them.
fn nodes_of(graph: Graph) -> Option<Vec<GraphNode>> {
    let get_nodes = real::cuGraphGetNodes()?;
    let mut count = 0usize;
    // SAFETY: a null array asks only for the count, written to a local.
    if unsafe { get_nodes(graph, std::ptr::null_mut(), &mut count) } != CuResult::SUCCESS {
        return None;
    }
    let mut nodes = vec![GraphNode::NULL; count];
    // SAFETY: `nodes` has room for `count` handles, and `count` says so.
    if unsafe { get_nodes(graph, nodes.as_mut_ptr(), &mut count) } != CuResult::SUCCESS {
        return None;
    }
    nodes.truncate(count);
    Some(nodes)
}

/// A kernel node's parameters (the `_v2` query, else the `_v1` one, which fills the
/// prefix up to `extra`).
fn kernel_params(node: GraphNode) -> Option<KernelNodeParams> {
    let mut params = KernelNodeParams::empty();
    let status = match (real::cuGraphKernelNodeGetParams_v2(), real::cuGraphKernelNodeGetParams()) {
        // SAFETY: a kernel node and room for the whole `_v2` struct.
        (Some(get), _) => unsafe { get(node, &mut params) },
        // SAFETY: a kernel node; the `_v1` struct is a prefix of the room given.
        (None, Some(get)) => unsafe { get(node, &mut params) },
        (None, None) => return None,
    };
    (status == CuResult::SUCCESS).then_some(params)
}

/// What a copy or memset node writes and reads (`kind` is its type); `None` when the
/// driver does not say.
fn memory_node(node: GraphNode, kind: c_int, snapshot: Option<&Snapshot>) -> Option<MemoryNode> {
    let start =
        |address: Option<CuDevicePtr>| address.filter(|&address| snapshot.and_then(|s| s.find(address)).is_some());
    let writes_global =
        |target: Option<CuDevicePtr>, bytes: u64| target.is_some_and(|t| indirect::writes_global(t, bytes));
    if kind == node_type::MEMSET {
        let get = real::cuGraphMemsetNodeGetParams()?;
        let mut params = MemsetNodeParams::default();
        // SAFETY: a memset node and room for its parameters, written by the driver.
        (unsafe { get(node, &mut params) } == CuResult::SUCCESS).then(|| MemoryNode {
            written: start(Some(params.dst)),
            read: None,
            writes_global: writes_global(Some(params.dst), params.bytes()),
        })
    } else {
        let get = real::cuGraphMemcpyNodeGetParams()?;
        let mut copy = Memcpy3D::zeroed();
        // SAFETY: a copy node and room for its descriptor, written by the driver.
        (unsafe { get(node, &mut copy) } == CuResult::SUCCESS).then(|| MemoryNode {
            written: start(copy.target_start()),
            read: start(copy.source_start()),
            writes_global: writes_global(copy.target_start(), copy.bytes()),
        })
    }
}

fn child_graph(node: GraphNode) -> Option<Graph> {
    let get = real::cuGraphChildGraphNodeGetGraph()?;
    let mut graph = Graph::NULL;
    // SAFETY: a child-graph node and a writable local.
    (unsafe { get(node, &mut graph) } == CuResult::SUCCESS).then_some(graph)
}

/// What a kernel node with `params` names.
///
/// # Safety
/// `params` are a kernel node's parameters the driver gave or accepted.
unsafe fn read_kernel(params: &KernelNodeParams, snapshot: Option<&Snapshot>) -> KernelNode {
    let mut named = Vec::new();
    // SAFETY: the node's values as the driver holds them, for the function it launches.
    let naming = unsafe {
        let visit = |n: Named<'_>| named.push((n.address, n.first));
        match snapshot {
            Some(snapshot) => recent_ranges::with_local_finder(snapshot, |finder| {
                naming::name_launch(params.launched(), params.params, params.extra, Some(finder), visit)
            }),
            None => naming::name_launch(params.launched(), params.params, params.extra, None, visit),
        }
    };
    KernelNode { function: params.launched(), named: named.into_boxed_slice(), read: naming.read }
}
