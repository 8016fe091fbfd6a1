//! The process's counters (exit summary, `greenboost_shim_stats`): plain atomics that
//! every layer may bump; `budget` owns what counts as in use. Those that every kernel
//! launch, copy and memset bumps are kept per thread (`LaunchCounts`, in `shards`), so
//! that threads launching at once do not write one line; a read sums them.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::sys::shards::{Counts, Shard, Shards, Zeroed};

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
    /// Staged products computed in slices as their operand landed, and shapes whose
    /// sliced result differed from the whole product's (never sliced).
    pub gemm_sliced: AtomicU64,
    pub gemm_slices_differed: AtomicU64,
    /// Allocations sent to T2 (or split) because VRAM left on the device would have
    /// fallen below the headroom.
    pub headroom_spills: AtomicU64,
    /// Live tiering: movable T2 allocations made; bytes of them in VRAM now; bytes and
    /// allocations moved each way, and the wall time of the moves (issue to arrival).
    pub movable_allocs: AtomicU64,
    pub tier_vram: AtomicU64,
    pub promoted_bytes: AtomicU64,
    pub demoted_bytes: AtomicU64,
    pub promotions: AtomicU64,
    pub demotions: AtomicU64,
    pub promote_ns: AtomicU64,
    pub demote_ns: AtomicU64,
    /// Of the moves' wall time, what the tier thread spent in the prefetch calls (the
    /// driver does part of a migration inside the call), the rest being the wait.
    pub move_issue_ns: AtomicU64,
    /// Live tiering: of the demotions, those that made room for a hotter T2 allocation
    /// (a swap of roles), not for another process.
    pub swaps: AtomicU64,
    /// Look-ahead staging: products that read an operand copied while the product before
    /// them ran, and such copies not used (something named the operand, or another
    /// product came).
    pub gemm_ahead: AtomicU64,
    pub gemm_ahead_dropped: AtomicU64,
    /// Kernel launches timed whose time changed their function's read share
    /// (`launch::kernel_times`).
    pub launches_timed: AtomicU64,
    /// Of the launches sampled for their time (`launch::kernel_times`): all of them, those
    /// given up at the launch (refused, naming nothing the shim knows, no end event),
    /// those whose time could not be read, and those whose time bounded nothing (over
    /// VRAM, as long as reading all it named); the rest are `launches_timed`.
    pub samples_started: AtomicU64,
    pub samples_given_up: AtomicU64,
    pub samples_unmeasured: AtomicU64,
    pub samples_silent: AtomicU64,
    /// Work that may write through pointers kept in device memory, which nothing the
    /// shim reads names (`launch::indirect`): cuBLAS routines over device arrays of
    /// pointers and cuBLASLt products whose output is one, copies and memsets into
    /// `__device__` globals (direct, or nodes at each launch of their graph). Each may
    /// have written anything, as a launch not fully read.
    pub indirect_writers: AtomicU64,
    /// Live tiering: VRAM the driver kept of managed pages moved out that the shim gave
    /// back as free VRAM (`engine::give_back`), and the give-backs that did.
    pub given_back_bytes: AtomicU64,
    pub give_backs: AtomicU64,
    /// Room made at once for an allocation while computing (`engine::make_room`): the
    /// bytes demoted for it, and the time the allocating thread spent making it (the
    /// program waits that long).
    pub room_made_bytes: AtomicU64,
    pub room_made_ns: AtomicU64,
    /// Matrix products that read an operand in T2 in place, over the link (staging off
    /// for them: the stream captured, no scratch to be had, a copy failed, the operand
    /// above GREENBOOST_STAGE_MAX), and those operands' bytes.
    pub gemm_in_place: AtomicU64,
    pub gemm_in_place_bytes: AtomicU64,
    /// VRAM the driver keeps for parts moved out to T2 (`movable_part`'s `chunks_kept`):
    /// in use as nvidia-smi counts it, holding nothing, given to any allocation that finds
    /// no free VRAM; and its peak.
    pub kept_vram: AtomicU64,
    pub kept_vram_peak: AtomicU64,
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
    headroom_spills: AtomicU64::new(0),
    movable_allocs: AtomicU64::new(0),
    tier_vram: AtomicU64::new(0),
    promoted_bytes: AtomicU64::new(0),
    demoted_bytes: AtomicU64::new(0),
    promotions: AtomicU64::new(0),
    demotions: AtomicU64::new(0),
    promote_ns: AtomicU64::new(0),
    demote_ns: AtomicU64::new(0),
    move_issue_ns: AtomicU64::new(0),
    gemm_sliced: AtomicU64::new(0),
    gemm_slices_differed: AtomicU64::new(0),
    swaps: AtomicU64::new(0),
    gemm_ahead: AtomicU64::new(0),
    gemm_ahead_dropped: AtomicU64::new(0),
    launches_timed: AtomicU64::new(0),
    samples_started: AtomicU64::new(0),
    samples_given_up: AtomicU64::new(0),
    samples_unmeasured: AtomicU64::new(0),
    samples_silent: AtomicU64::new(0),
    indirect_writers: AtomicU64::new(0),
    given_back_bytes: AtomicU64::new(0),
    give_backs: AtomicU64::new(0),
    room_made_bytes: AtomicU64::new(0),
    room_made_ns: AtomicU64::new(0),
    gemm_in_place: AtomicU64::new(0),
    gemm_in_place_bytes: AtomicU64::new(0),
    kept_vram: AtomicU64::new(0),
    kept_vram_peak: AtomicU64::new(0),
};

/// Launch observation's counters, one shard per thread (`launch_counts`): kernels
/// launched (graph kernel nodes at each graph launch), those whose parameters could not
/// all be read, allocations named by them, launches recorded into a graph being captured
/// (not run), graph launches and those of graphs not fully read, copies and memsets,
/// direct or in graphs (graph nodes at each graph launch; not those recorded into a graph
/// being captured, nor those of zero bytes), host functions run.
#[derive(Debug)]
pub struct LaunchCounts {
    pub launches: AtomicU64,
    pub launches_unread: AtomicU64,
    pub launch_namings: AtomicU64,
    pub captured_launches: AtomicU64,
    pub graph_launches: AtomicU64,
    pub graphs_unread: AtomicU64,
    pub memory_ops: AtomicU64,
    pub host_funcs: AtomicU64,
}

impl Zeroed for LaunchCounts {
    #[allow(clippy::declare_interior_mutable_const)]
    const ZERO: LaunchCounts = LaunchCounts {
        launches: AtomicU64::new(0),
        launches_unread: AtomicU64::new(0),
        launch_namings: AtomicU64::new(0),
        captured_launches: AtomicU64::new(0),
        graph_launches: AtomicU64::new(0),
        graphs_unread: AtomicU64::new(0),
        memory_ops: AtomicU64::new(0),
        host_funcs: AtomicU64::new(0),
    };
}

/// Shards of the launch counters: threads past this many share them.
const LAUNCH_SHARDS: usize = 16;

static LAUNCH_COUNTS: Shards<LaunchCounts, LAUNCH_SHARDS> = Shards::new();

/// The launch counters of `shard` (the calling thread's, `Shard::mine`), to count in.
pub fn launch_counts(shard: Shard) -> Counts<'static, LaunchCounts> {
    LAUNCH_COUNTS.of(shard)
}

/// One launch counter summed over the threads.
pub fn launch_total(counter: impl Fn(&LaunchCounts) -> &AtomicU64) -> u64 {
    LAUNCH_COUNTS.sum(counter)
}

pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

pub fn load(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// Answers with the out-of-memory counter bumped.
pub fn out_of_memory<T>(answer: T) -> T {
    bump(&STATS.oom_returned);
    answer
}

/// Adds to a figure in use, raising its peak.
pub fn add_in_use(used: &AtomicU64, peak: &AtomicU64, bytes: u64) {
    let now = used.fetch_add(bytes, Ordering::Relaxed).saturating_add(bytes);
    peak.fetch_max(now, Ordering::Relaxed);
}

/// Subtracts from a figure in use, never below zero.
pub fn sub_in_use(used: &AtomicU64, bytes: u64) {
    let _ = used.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(bytes)));
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
    pub headroom_spills: u64,
    /// From here on, only through `greenboost_shim_stats_sized` (see exports.rs).
    /// Always 0: it counted the products of a staging prefetch (removed), and keeps the
    /// fields after it where callers read them.
    pub unused_prefetched: u64,
    pub movable_allocs: u64,
    pub tier_vram: u64,
    pub promoted_bytes: u64,
    pub demoted_bytes: u64,
    pub promotions: u64,
    pub demotions: u64,
    pub promote_ns: u64,
    pub demote_ns: u64,
    pub move_issue_ns: u64,
    pub gemm_sliced: u64,
    pub gemm_slices_differed: u64,
    pub launches: u64,
    pub launches_unread: u64,
    pub launch_namings: u64,
    pub captured_launches: u64,
    pub graph_launches: u64,
    pub graphs_unread: u64,
    pub memory_ops: u64,
    pub host_funcs: u64,
    pub swaps: u64,
    pub gemm_ahead: u64,
    pub gemm_ahead_dropped: u64,
    pub launches_timed: u64,
    pub indirect_writers: u64,
    pub given_back_bytes: u64,
    pub give_backs: u64,
    pub room_made_bytes: u64,
    pub room_made_ns: u64,
    pub gemm_in_place: u64,
    pub gemm_in_place_bytes: u64,
    pub kept_vram: u64,
    pub kept_vram_peak: u64,
}

/// The backend fields of `ShimStats`: (backend code, DMABUF_FD result, OPAQUE_FD result).
pub(super) type BackendSummary = (u32, i32, i32);

pub fn snapshot(backend: BackendSummary) -> ShimStats {
    let (backend, import_dmabuf_result, import_opaque_result) = backend;
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
        headroom_spills: load(&STATS.headroom_spills),
        unused_prefetched: 0,
        movable_allocs: load(&STATS.movable_allocs),
        tier_vram: load(&STATS.tier_vram),
        promoted_bytes: load(&STATS.promoted_bytes),
        demoted_bytes: load(&STATS.demoted_bytes),
        promotions: load(&STATS.promotions),
        demotions: load(&STATS.demotions),
        promote_ns: load(&STATS.promote_ns),
        demote_ns: load(&STATS.demote_ns),
        move_issue_ns: load(&STATS.move_issue_ns),
        gemm_sliced: load(&STATS.gemm_sliced),
        gemm_slices_differed: load(&STATS.gemm_slices_differed),
        launches: launch_total(|counts| &counts.launches),
        launches_unread: launch_total(|counts| &counts.launches_unread),
        launch_namings: launch_total(|counts| &counts.launch_namings),
        captured_launches: launch_total(|counts| &counts.captured_launches),
        graph_launches: launch_total(|counts| &counts.graph_launches),
        graphs_unread: launch_total(|counts| &counts.graphs_unread),
        memory_ops: launch_total(|counts| &counts.memory_ops),
        host_funcs: launch_total(|counts| &counts.host_funcs),
        swaps: load(&STATS.swaps),
        gemm_ahead: load(&STATS.gemm_ahead),
        gemm_ahead_dropped: load(&STATS.gemm_ahead_dropped),
        launches_timed: load(&STATS.launches_timed),
        indirect_writers: load(&STATS.indirect_writers),
        given_back_bytes: load(&STATS.given_back_bytes),
        give_backs: load(&STATS.give_backs),
        room_made_bytes: load(&STATS.room_made_bytes),
        room_made_ns: load(&STATS.room_made_ns),
        gemm_in_place: load(&STATS.gemm_in_place),
        gemm_in_place_bytes: load(&STATS.gemm_in_place_bytes),
        kept_vram: load(&STATS.kept_vram),
        kept_vram_peak: load(&STATS.kept_vram_peak),
    }
}

/// In the child of a fork: the counters start again, so that the child's summary (a
/// forked worker that exits through `exit` runs the inherited atexit handler) shows only
/// what the child did, and nothing when it did nothing. What is in use stays.
pub fn start_afresh_in_child() {
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
        &STATS.headroom_spills,
        &STATS.movable_allocs,
        &STATS.promoted_bytes,
        &STATS.demoted_bytes,
        &STATS.promotions,
        &STATS.demotions,
        &STATS.promote_ns,
        &STATS.demote_ns,
        &STATS.move_issue_ns,
        &STATS.gemm_sliced,
        &STATS.gemm_slices_differed,
        &STATS.swaps,
        &STATS.gemm_ahead,
        &STATS.gemm_ahead_dropped,
        &STATS.launches_timed,
        &STATS.samples_started,
        &STATS.samples_given_up,
        &STATS.samples_unmeasured,
        &STATS.samples_silent,
        &STATS.indirect_writers,
        &STATS.given_back_bytes,
        &STATS.give_backs,
        &STATS.room_made_bytes,
        &STATS.room_made_ns,
        &STATS.gemm_in_place,
        &STATS.gemm_in_place_bytes,
    ] {
        counter.store(0, Ordering::Relaxed);
    }
    for counts in LAUNCH_COUNTS.each() {
        for counter in [
            &counts.launches,
            &counts.launches_unread,
            &counts.launch_namings,
            &counts.captured_launches,
            &counts.graph_launches,
            &counts.graphs_unread,
            &counts.memory_ops,
            &counts.host_funcs,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
    }
    STATS.t1_peak.store(load(&STATS.t1_used), Ordering::Relaxed);
    STATS.t2_peak.store(load(&STATS.t2_used), Ordering::Relaxed);
}
