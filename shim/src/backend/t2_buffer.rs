//! What a T2 backend hands out: a host mapping (`HostBuffer`) of whole 2 MiB chunks,
//! the errors, and the `Backend` trait both sources implement (`kmod_backend`,
//! `userspace`). `memory::t2` registers the mappings with CUDA.

use std::ffi::{c_int, c_void};

use greenboost_abi as abi;

/// A host mapping backing one T2 allocation.
#[derive(Debug)]
pub struct HostBuffer {
    pub address: usize,
    pub len: usize,
    /// The module's buffer id (0 for userspace memory), for log lines.
    pub id: u64,
}

impl HostBuffer {
    pub fn ptr(&self) -> *mut c_void {
        self.address as *mut c_void
    }
}

/// Why a backend could not provide memory; all become the CUDA out-of-memory error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendError {
    /// The module refused (cap, reserve, per-user cap: ENOMEM) or RAM ran out.
    OutOfMemory(c_int),
    /// Another errno from the module or mmap.
    Failed(c_int),
}

pub trait Backend: Send + Sync {
    fn name(&self) -> &'static str;
    /// A mapping of at least `len` bytes (2 MiB-aligned, populated), preferring `numa_node`.
    fn alloc(&self, len: usize, numa_node: Option<c_int>) -> Result<HostBuffer, BackendError>;
    fn release(&self, buffer: HostBuffer);
    /// T2 capacity when GREENBOOST_T2_CAP is not set.
    fn default_cap(&self) -> u64;
    /// Tells the module the process's VRAM use, at most every 100 ms unless `now`
    /// (a skipped report is sent by a later `flush_t1_report`). No-op for userspace.
    fn report_t1(&self, _vram_used: u64, _vram_budget: u64, _now: bool) {}
    /// Sends a report that throttling held back, when it is due.
    fn flush_t1_report(&self) {}
    /// Whether the system is short of RAM now, as the module sees it (its reserve): the
    /// T2 cache then gives its pinned pages back rather than keep them. Cheap enough for
    /// every T2 allocation and free. Always false for userspace.
    fn memory_pressure(&self) -> bool {
        false
    }
}

/// T2 allocations are whole 2 MiB chunks.
pub fn round_to_chunk(len: usize) -> Option<usize> {
    let chunk = abi::GB_CHUNK_SIZE as usize;
    len.checked_add(chunk - 1).map(|end| end & !(chunk - 1))
}

pub fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_round_up_and_never_wrap() {
        assert_eq!(round_to_chunk(1), Some(2 << 20));
        assert_eq!(round_to_chunk(2 << 20), Some(2 << 20));
        assert_eq!(round_to_chunk((2 << 20) + 1), Some(4 << 20));
        assert_eq!(round_to_chunk(usize::MAX), None);
    }
}
