//! Look-ahead staging (GREENBOOST_STAGE_LOOKAHEAD, off by default): while a product whose
//! one T2 operand is staged whole runs, the operand of the product that followed it last
//! time on the same stream (a model's next layer) is copied into one of two VRAM buffers
//! on the scratch's side stream, so that its copy overlaps this product instead of
//! preceding the next one.
//!
//! Correct by construction, as far as the shim sees writers: the next product reads the
//! copy only if, since that operand was last read by a staged product, nothing named its
//! allocation — no kernel launch among its parameters (read or written: a kernel's
//! parameters do not say which), no copy or memset, no graph node — and nothing ran that
//! may have written anything: no launch or graph the shim could not fully read
//! (the launch counters `launches_unread`, `graphs_unread`; a graph captured while a writer
//! through pointer arrays was enqueued is one), and no writer through pointers kept in
//! device memory (`STATS.indirect_writers`: a cuBLAS routine over pointer arrays, a
//! cuBLASLt product whose output layout is one, a copy or memset into a `__device__`
//! global). Then every writer of the operand was enqueued before its last read, on the
//! stream the copy is ordered after. The copy is ordered after everything its stream
//! held when the product before it was staged, and after the last reader of its buffer.
//! Still not seen, and so not guarded against: a kernel that writes pointers into memory
//! that another kernel then dereferences (any pointer the program builds on the device),
//! and a cuBLAS linked statically into the program (its routines are not hooked); the
//! setting stays off until the H200 measures it.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::cuda;
use crate::cuda::ffi::*;
use crate::gemm::product::KEPT_ALIGNMENT;
use crate::gemm::staging_slices::{Copier, SpanCopy};
use crate::gemm::vram_buffer::VramBuffer;
use crate::memory::address_index;
use crate::memory::registry::T2Kind;
use crate::sys::log::Mib;
use crate::sys::stats::{self, STATS};

/// A staged operand: where it starts and how many bytes it spans.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Key {
    pub address: CuDevicePtr,
    pub bytes: u64,
}

/// What had named an operand's allocation by some moment: the index entry (a new
/// allocation at the same address is another entry), its counters, and the count of
/// what may have written anything (launches and graphs that could not be read, writers
/// through pointers kept in device memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Uses {
    entry: usize,
    launches: u64,
    writes: u64,
    unreadable: u64,
}

fn uses_now(address: CuDevicePtr) -> Option<Uses> {
    let snapshot = address_index::load();
    let range = snapshot.as_deref()?.find(address)?;
    Some(Uses {
        entry: Arc::as_ptr(&range.uses) as usize,
        launches: range.uses.launches(),
        writes: range.uses.writes(),
        unreadable: stats::launch_total(|counts| &counts.launches_unread)
            .wrapping_add(stats::launch_total(|counts| &counts.graphs_unread))
            .wrapping_add(stats::load(&STATS.indirect_writers)),
    })
}

/// A VRAM buffer copies ahead land in: `copied` is recorded after the last copy into it,
/// `read_done` after the last product that read it (null: none yet).
struct Buffer {
    memory: VramBuffer,
    copied: Event,
    read_done: Event,
}

impl Buffer {
    const EMPTY: Buffer = Buffer { memory: VramBuffer::EMPTY, copied: Event::NULL, read_done: Event::NULL };

    /// At least `bytes` of VRAM (the old buffer freed once its copy and reader ran).
    fn hold(&mut self, bytes: u64, device: CuDevice) -> bool {
        let grown = self.memory.bytes() < bytes;
        let held = self.memory.grow_to(bytes, device, &[self.copied, self.read_done], None).is_ok();
        if held && grown {
            debug!("GEMM look-ahead buffer: {} in VRAM", Mib(bytes));
        }
        held
    }
}

/// `event`, made on first use, recorded on `stream`.
fn record(event: &mut Event, stream: Stream) -> bool {
    if event.is_null() {
        *event = cuda::event_create().unwrap_or(Event::NULL);
    }
    !event.is_null() && cuda::event_record(*event, stream) == CuResult::SUCCESS
}

/// A copy made ahead, not yet read.
struct Pending {
    key: Key,
    stream: Stream,
    buffer: usize,
    uses: Uses,
}

/// An operand to copy ahead, as `next` found it.
pub(super) struct Next {
    key: Key,
    pub kind: T2Kind,
    uses: Uses,
}

/// A context's look-ahead: the order products came in, what each operand's allocation had
/// been named by when it was last read, and the two buffers.
pub(super) struct LookAhead {
    previous: Option<(Stream, Key)>,
    successors: FxHashMap<Key, (Key, T2Kind)>,
    clean: FxHashMap<Key, Uses>,
    buffers: [Buffer; 2],
    turn: usize,
    pending: Option<Pending>,
    /// Recorded on a product's stream before its own copies: what the copy ahead waits for.
    before: Event,
}

impl LookAhead {
    pub(super) fn new() -> LookAhead {
        LookAhead {
            previous: None,
            successors: FxHashMap::default(),
            clean: FxHashMap::default(),
            buffers: [Buffer::EMPTY, Buffer::EMPTY],
            turn: 0,
            pending: None,
            before: Event::NULL,
        }
    }

    /// Marks what `stream` holds before this product's own work: a copy ahead issued for the
    /// next product is ordered after it.
    pub(super) fn mark_before(&mut self, stream: Stream) -> bool {
        record(&mut self.before, stream)
    }

    /// Where to read `key` from for a product on `stream` — the copy made ahead, which
    /// `stream` now waits for — if one was made and nothing named the operand since; the
    /// buffer it is in. An unusable copy is dropped.
    pub(super) fn ready(&mut self, key: Key, stream: Stream) -> Option<(CuDevicePtr, usize)> {
        let pending = self.pending.take()?;
        let buffer = &self.buffers[pending.buffer];
        let usable = pending.key == key
            && pending.stream == stream
            && uses_now(key.address) == Some(pending.uses)
            && cuda::stream_wait_event(stream, buffer.copied) == CuResult::SUCCESS;
        if !usable {
            stats::bump(&STATS.gemm_ahead_dropped);
            return None;
        }
        stats::bump(&STATS.gemm_ahead);
        Some((buffer.memory.base + key.address % KEPT_ALIGNMENT, pending.buffer))
    }

    /// A product that read `key` (of `kind`) on `stream` was enqueued, from `buffer` when
    /// it read a copy made ahead: what named the operand so far is noted, and the order.
    pub(super) fn read(&mut self, key: Key, kind: T2Kind, stream: Stream, buffer: Option<usize>) {
        if let Some(index) = buffer {
            if !record(&mut self.buffers[index].read_done, stream) {
                // Without the event the next copy into this buffer cannot be ordered.
                cuda::stream_synchronize(stream);
            }
        }
        if let Some(uses) = uses_now(key.address) {
            self.clean.insert(key, uses);
        }
        if let Some((previous_stream, previous)) = self.previous {
            if previous_stream == stream && previous != key {
                self.successors.insert(previous, (key, kind));
            }
        }
        self.previous = Some((stream, key));
    }

    /// The operand that followed `key` last time, if nothing named it since it was read.
    pub(super) fn next(&mut self, key: Key) -> Option<Next> {
        if self.pending.take().is_some() {
            stats::bump(&STATS.gemm_ahead_dropped);
        }
        let &(next, kind) = self.successors.get(&key)?;
        let uses = uses_now(next.address)?;
        (next != key && self.clean.get(&next) == Some(&uses)).then_some(Next { key: next, kind, uses })
    }

    /// Copies `next` ahead on `side` with `copier`, for a product on `stream`: after what
    /// `stream` held at `mark_before`, and after its buffer's last reader.
    pub(super) fn copy(&mut self, next: Next, copier: Copier, side: Stream, stream: Stream, device: CuDevice) {
        let index = self.turn;
        let buffer = &mut self.buffers[index];
        if self.before.is_null() || !buffer.hold(next.key.bytes + KEPT_ALIGNMENT, device) {
            return;
        }
        let ordered = cuda::stream_wait_event(side, self.before) == CuResult::SUCCESS
            && (buffer.read_done.is_null() || cuda::stream_wait_event(side, buffer.read_done) == CuResult::SUCCESS);
        let target = buffer.memory.base + next.key.address % KEPT_ALIGNMENT;
        let copy = SpanCopy { source: next.key.address, target, bytes: next.key.bytes };
        if !ordered || copier.copy(copy, side) != CuResult::SUCCESS || !record(&mut buffer.copied, side) {
            return;
        }
        self.pending = Some(Pending { key: next.key, stream, buffer: index, uses: next.uses });
        self.turn ^= 1;
    }
}
