//! Process-wide state: load-time initialisation, the re-entry guard, counters and the
//! summary at exit.
//!
//! Lock order (the shim's only locks): `tiers::REGISTRY` before `tiers::VMM`; neither is
//! held across a CUDA call or a backend call.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

use crate::config::{self, Config};
use crate::log::{self, Mib};

const NOT_INITIALISED: u8 = 0;
const ACTIVE: u8 = 1;
const DISABLED: u8 = 2;
const FORKED_AFTER_CUDA: u8 = 3;

static PHASE: AtomicU8 = AtomicU8::new(NOT_INITIALISED);
static CONFIG: OnceLock<Config> = OnceLock::new();

/// Runs from `.init_array` when the shim is loaded, before the program's `main`.
extern "C" fn initialise() {
    let config = CONFIG.get_or_init(|| {
        config::from_lookup(config::getenv, |name, value, instead| {
            warn!("{}={:?} is not valid; using {}", name, std::str::from_utf8(value).unwrap_or("(not UTF-8)"), instead);
        })
    });
    log::set_level(config.log);
    if config.disabled {
        PHASE.store(DISABLED, Ordering::Release);
        info!("disabled by GREENBOOST_DISABLE");
        return;
    }
    // Registered once per loaded copy of the shim, whatever runs the constructor again.
    static HANDLERS_REGISTERED: AtomicBool = AtomicBool::new(false);
    if !HANDLERS_REGISTERED.swap(true, Ordering::AcqRel) {
        // SAFETY: plain function pointers without captured state.
        unsafe {
            libc::atexit(summary_at_exit);
            libc::pthread_atfork(Some(crate::tiers::before_fork), Some(crate::tiers::after_fork_in_parent), Some(crate::tiers::after_fork_in_child));
        }
    }
    PHASE.store(ACTIVE, Ordering::Release);
    debug!("loaded: {:?}", config);
}

#[used]
#[link_section = ".init_array"]
static INITIALISE: extern "C" fn() = initialise;

/// Hooks apply policy only after initialisation and when not disabled.
pub fn active() -> bool {
    PHASE.load(Ordering::Acquire) == ACTIVE
}

/// In the child of a fork after CUDA use: hooks pass everything to the real functions.
pub fn step_aside_after_fork() {
    PHASE.store(FORKED_AFTER_CUDA, Ordering::Release);
}

/// Disabled by GREENBOOST_DISABLE (routing then passes everything through).
pub fn disabled() -> bool {
    PHASE.load(Ordering::Acquire) == DISABLED
}

pub fn config() -> Config {
    CONFIG.get().copied().unwrap_or_default()
}

thread_local! {
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Marks the current thread as inside a hook; nested hooks pass straight through.
pub struct ReentryGuard(());

impl ReentryGuard {
    pub fn enter() -> Option<ReentryGuard> {
        let entered = IN_HOOK.try_with(|flag| !flag.replace(true)).unwrap_or(false);
        // Built only when entered: a guard built and dropped for a nested call would
        // clear the outer hook's flag (`then_some` builds its argument eagerly).
        entered.then(|| ReentryGuard(()))
    }
}

impl Drop for ReentryGuard {
    fn drop(&mut self) {
        let _ = IN_HOOK.try_with(|flag| flag.set(false));
    }
}

/// Counters for the exit summary and `greenboost_shim_stats`.
pub struct Stats {
    pub t1_used: AtomicU64,
    pub t1_peak: AtomicU64,
    pub t2_used: AtomicU64,
    pub t2_peak: AtomicU64,
    pub t1_allocs: AtomicU64,
    pub t2_allocs: AtomicU64,
    /// T2 allocations made after the driver answered out-of-memory for VRAM.
    pub t2_after_vram_oom: AtomicU64,
    /// Out-of-memory errors returned to the program.
    pub oom_returned: AtomicU64,
    /// VMM (cuMemCreate) allocations moved to host NUMA memory.
    pub vmm_host: AtomicU64,
    /// Stream-ordered frees of T2 memory waiting for their stream.
    pub deferred_frees: AtomicU64,
    /// Allocations split between a VRAM head and a T2 tail (each also counts once in
    /// `t1_allocs` and once in `t2_allocs`).
    pub split_allocs: AtomicU64,
    /// Matrix products whose T2 operands were copied into VRAM first, and the bytes.
    pub gemm_staged: AtomicU64,
    pub gemm_staged_bytes: AtomicU64,
}

pub static STATS: Stats = Stats {
    t1_used: AtomicU64::new(0),
    t1_peak: AtomicU64::new(0),
    t2_used: AtomicU64::new(0),
    t2_peak: AtomicU64::new(0),
    t1_allocs: AtomicU64::new(0),
    t2_allocs: AtomicU64::new(0),
    t2_after_vram_oom: AtomicU64::new(0),
    oom_returned: AtomicU64::new(0),
    vmm_host: AtomicU64::new(0),
    deferred_frees: AtomicU64::new(0),
    split_allocs: AtomicU64::new(0),
    gemm_staged: AtomicU64::new(0),
    gemm_staged_bytes: AtomicU64::new(0),
};

impl Stats {
    pub fn add_t1(&self, bytes: u64) {
        let now = self.t1_used.fetch_add(bytes, Ordering::Relaxed).saturating_add(bytes);
        self.t1_peak.fetch_max(now, Ordering::Relaxed);
        self.t1_allocs.fetch_add(1, Ordering::Relaxed);
    }

    pub fn sub_t1(&self, bytes: u64) {
        let _ = self.t1_used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(bytes)));
    }

    pub fn sub_t2(&self, bytes: u64) {
        let _ = self.t2_used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(bytes)));
    }
}

/// The counters as C sees them (`greenboost_shim_stats`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ShimStats {
    pub t1_used: u64,
    pub t1_peak: u64,
    pub t2_used: u64,
    pub t2_peak: u64,
    pub t1_allocs: u64,
    pub t2_allocs: u64,
    pub t2_after_vram_oom: u64,
    pub oom_returned: u64,
    pub vmm_host: u64,
    pub deferred_frees: u64,
    /// 0: no T2 backend yet, 1: kmod, 2: userspace, 3: none available.
    pub backend: u32,
    /// Result of the one cuImportExternalMemory attempt on a DMA-BUF fd (DMABUF_FD
    /// type), -1 if not tried.
    pub import_dmabuf_result: i32,
    /// The same for the OPAQUE_FD type.
    pub import_opaque_result: i32,
    pub reserved: u32,
    /// Appended after the fields above, so that a caller built against the shorter
    /// struct still reads them where they were.
    pub split_allocs: u64,
    pub gemm_staged: u64,
    pub gemm_staged_bytes: u64,
}

pub fn snapshot() -> ShimStats {
    let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
    let (backend, import_dmabuf_result, import_opaque_result) = crate::tiers::backend_summary();
    ShimStats {
        t1_used: load(&STATS.t1_used),
        t1_peak: load(&STATS.t1_peak),
        t2_used: load(&STATS.t2_used),
        t2_peak: load(&STATS.t2_peak),
        t1_allocs: load(&STATS.t1_allocs),
        t2_allocs: load(&STATS.t2_allocs),
        t2_after_vram_oom: load(&STATS.t2_after_vram_oom),
        oom_returned: load(&STATS.oom_returned),
        vmm_host: load(&STATS.vmm_host),
        deferred_frees: load(&STATS.deferred_frees),
        backend,
        import_dmabuf_result,
        import_opaque_result,
        reserved: 0,
        split_allocs: load(&STATS.split_allocs),
        gemm_staged: load(&STATS.gemm_staged),
        gemm_staged_bytes: load(&STATS.gemm_staged_bytes),
    }
}

/// Copies the shim's counters into `*out` (for tests and tools that `dlsym` it).
/// Returns 0, or -1 for a null pointer.
///
/// # Safety
/// `out` is null or valid for writing a `ShimStats`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn greenboost_shim_stats(out: *mut ShimStats) -> i32 {
    if out.is_null() {
        return -1;
    }
    // SAFETY: per the contract.
    unsafe { out.write(snapshot()) };
    0
}

/// Whether this process printed its summary (a forked child starts with false).
static SUMMARY_PRINTED: AtomicBool = AtomicBool::new(false);

/// In the child of a fork: the counters start again, so that the child's summary (a
/// forked worker that exits through `exit` runs the inherited atexit handler) shows
/// only what the child did, and nothing when it did nothing. What is in use stays.
pub fn counters_start_afresh_in_child() {
    for counter in [
        &STATS.t1_allocs,
        &STATS.t2_allocs,
        &STATS.t2_after_vram_oom,
        &STATS.oom_returned,
        &STATS.vmm_host,
        &STATS.deferred_frees,
        &STATS.split_allocs,
        &STATS.gemm_staged,
        &STATS.gemm_staged_bytes,
    ] {
        counter.store(0, Ordering::Relaxed);
    }
    STATS.t1_peak.store(STATS.t1_used.load(Ordering::Relaxed), Ordering::Relaxed);
    STATS.t2_peak.store(STATS.t2_used.load(Ordering::Relaxed), Ordering::Relaxed);
    SUMMARY_PRINTED.store(false, Ordering::Relaxed);
}

extern "C" fn summary_at_exit() {
    // A child that stepped aside after fork has no VRAM of its own to report.
    if active() {
        crate::tiers::final_report();
    }
    let stats = snapshot();
    if stats.t1_allocs == 0 && stats.t2_allocs == 0 {
        return;
    }
    if SUMMARY_PRINTED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    info!(
        "summary: pid {}: peak T1 {}, peak T2 {}; allocations T1 {}, T2 {} ({} after a VRAM out-of-memory, {} VMM on host), split {}; GEMMs staged {} ({}); out-of-memory returned {}; backend {}",
        pid,
        Mib(stats.t1_peak),
        Mib(stats.t2_peak),
        stats.t1_allocs,
        stats.t2_allocs,
        stats.t2_after_vram_oom,
        stats.vmm_host,
        stats.split_allocs,
        stats.gemm_staged,
        Mib(stats.gemm_staged_bytes),
        stats.oom_returned,
        crate::tiers::backend_name(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_hooks_pass_through_until_the_outermost_guard_is_dropped() {
        let outer = ReentryGuard::enter().expect("outermost hook");
        assert!(ReentryGuard::enter().is_none());
        assert!(ReentryGuard::enter().is_none(), "a nested call cleared the outer hook's flag");
        drop(outer);
        let again = ReentryGuard::enter();
        assert!(again.is_some());
    }

    #[test]
    fn stats_export_copies_the_counters_and_refuses_null() {
        // SAFETY: null is allowed; `out` is a valid ShimStats.
        assert_eq!(unsafe { greenboost_shim_stats(std::ptr::null_mut()) }, -1);
        STATS.add_t1(4096);
        let mut out = ShimStats::default();
        // SAFETY: as above.
        assert_eq!(unsafe { greenboost_shim_stats(&mut out) }, 0);
        assert!(out.t1_allocs >= 1 && out.t1_peak >= 4096, "{out:?}");
        assert_eq!(out.import_dmabuf_result, -1, "no import attempted in unit tests");
    }
}
