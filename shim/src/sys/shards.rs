//! Counters kept per thread: a fixed array of shards, each on cache lines of its own, a
//! thread writing the shard its number picks and a reader summing them all. Counting on
//! every kernel launch from several threads then writes no line another thread writes,
//! so none bounces between cores.
//!
//! A thread's number is given on its first count, in the order threads come (a thread
//! local with a constant initialiser: no allocation, no destructor), and never given
//! back: a thread that exits leaves its counts in its shard, where the sums still see
//! them. Invariant: each shard but the last has one writer, the thread of its number,
//! which therefore counts with a load and a store (a locked add was about a quarter of
//! the shim's time per launch naming 8 allocations); threads past them, and threads
//! whose locals are gone, share the last shard and count there with locked adds, exactly.

use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Numbers given to threads so far.
static THREADS: AtomicUsize = AtomicUsize::new(0);

/// A thread's number before it is given one.
const NONE: usize = usize::MAX;

thread_local! {
    static NUMBER: Cell<usize> = const { Cell::new(NONE) };
}

/// A thread's number, which picks its shard in every `Shards` (taken once per launch and
/// handed down, so that each counter bumped does not ask for it again). Not `Send`: a
/// shard with one writer must be counted in by its own thread only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    number: usize,
    _this_thread: PhantomData<*const ()>,
}

impl Shard {
    /// The calling thread's (a shared one for a thread whose locals are gone: exiting).
    pub fn mine() -> Shard {
        let number = NUMBER.try_with(|number| {
            if number.get() == NONE {
                number.set(THREADS.fetch_add(1, Ordering::Relaxed));
            }
            number.get()
        });
        Shard { number: number.unwrap_or(NONE), _this_thread: PhantomData }
    }
}

/// The thread that counts first in a table every thread may count in (a large
/// allocation's starts, `memory::start_counts`): it then adds to counters of its own
/// with a load and a store, the others to counters beside them with locked adds, and a
/// reader sums both. Tables too large to keep per thread are mostly counted in by the
/// one thread that launches the program's kernels.
#[derive(Debug)]
pub struct FirstWriter(AtomicUsize);

impl FirstWriter {
    pub const fn new() -> FirstWriter {
        FirstWriter(AtomicUsize::new(NONE))
    }

    /// Whether `shard`'s thread is the first writer (made so if there is none yet; never
    /// a thread whose locals are gone, which has no number of its own).
    pub fn is(&self, shard: Shard) -> bool {
        match self.0.load(Ordering::Relaxed) {
            writer if writer == shard.number => shard.number != NONE,
            NONE if shard.number != NONE => {
                self.0.compare_exchange(NONE, shard.number, Ordering::Relaxed, Ordering::Relaxed).is_ok()
            }
            _ => false,
        }
    }
}

/// Adds `amount` to a counter the calling thread alone writes (`FirstWriter`, `Counts`):
/// a load and a store count exactly, and a reader sees the count before or after.
pub fn add_alone(counter: &AtomicU64, amount: u64) {
    counter.store(counter.load(Ordering::Relaxed).wrapping_add(amount), Ordering::Relaxed);
}

/// One shard's counters as the calling thread counts in them (not `Send`, as `Shard`).
#[derive(Clone, Copy, Debug)]
pub struct Counts<'a, T> {
    counters: &'a T,
    /// Whether the calling thread is the shard's only writer (see the module's invariant).
    only_writer: bool,
    _this_thread: PhantomData<*const ()>,
}

impl<'a, T> Counts<'a, T> {
    /// Adds `amount` to one of the counters.
    pub fn add(&self, counter: impl FnOnce(&'a T) -> &'a AtomicU64, amount: u64) {
        if amount == 0 {
            return;
        }
        let counter = counter(self.counters);
        if self.only_writer {
            add_alone(counter, amount);
        } else {
            counter.fetch_add(amount, Ordering::Relaxed);
        }
    }

    /// Adds one to one of the counters.
    pub fn bump(&self, counter: impl FnOnce(&'a T) -> &'a AtomicU64) {
        self.add(counter, 1);
    }

    /// The shard's fields, for those that are not its counters.
    pub fn fields(&self) -> &'a T {
        self.counters
    }
}

/// What a shard holds: counters that start at zero.
pub trait Zeroed {
    const ZERO: Self;
}

/// A `T` on cache lines no other field shares.
#[repr(align(64))]
#[derive(Debug)]
struct Padded<T>(T);

/// `N` shards of counters `T`: one for each of the first `N - 1` thread numbers, and one
/// that the threads numbered past them share.
#[derive(Debug)]
pub struct Shards<T, const N: usize>([Padded<T>; N]);

impl<T: Zeroed, const N: usize> Shards<T, N> {
    pub const fn new() -> Shards<T, N> {
        Shards([const { Padded(T::ZERO) }; N])
    }
}

impl<T: Zeroed, const N: usize> Default for Shards<T, N> {
    fn default() -> Shards<T, N> {
        Shards::new()
    }
}

impl<T, const N: usize> Shards<T, N> {
    /// `shard`'s counters, for its thread to count in.
    pub fn of(&self, shard: Shard) -> Counts<'_, T> {
        let shared = N - 1;
        Counts {
            counters: &self.0[shard.number.min(shared)].0,
            only_writer: shard.number < shared,
            _this_thread: PhantomData,
        }
    }

    /// The sum of one counter over every shard (each read once, so a sum read while
    /// threads count lies between the totals before and after the read).
    pub fn sum(&self, counter: impl Fn(&T) -> &AtomicU64) -> u64 {
        self.0.iter().fold(0, |sum, shard| sum.wrapping_add(counter(&shard.0).load(Ordering::Relaxed)))
    }

    /// The first shard's counters (for what every shard holds alike).
    pub fn first(&self) -> &T {
        &self.0[0].0
    }

    /// Every shard's counters (to set them all).
    pub fn each(&self) -> impl Iterator<Item = &T> {
        self.0.iter().map(|shard| &shard.0)
    }

    /// Every shard's counters, to fill in before the shards are shared.
    pub fn each_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.0.iter_mut().map(|shard| &mut shard.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Pair {
        a: AtomicU64,
        b: AtomicU64,
    }

    impl Zeroed for Pair {
        #[allow(clippy::declare_interior_mutable_const)]
        const ZERO: Pair = Pair { a: AtomicU64::new(0), b: AtomicU64::new(0) };
    }

    fn shard(number: usize) -> Shard {
        Shard { number, _this_thread: PhantomData }
    }

    #[test]
    fn each_thread_counts_in_its_own_lines_and_the_sums_see_every_thread() {
        let shards: Shards<Pair, 4> = Shards::new();
        let at = |number| std::ptr::from_ref(shards.of(shard(number)).fields()) as usize;
        assert_eq!((at(0) % 64, at(1) - at(0)), (0, 64), "each shard starts a cache line of its own");
        assert_eq!((at(3), at(4), at(NONE)), (at(3), at(3), at(3)), "numbers past the shards share the last");
        assert!(shards.of(shard(2)).only_writer && !shards.of(shard(3)).only_writer);
        // Eight threads over four shards: five share the last one, all at once.
        let start = std::sync::Barrier::new(8);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    let mine = shards.of(Shard::mine());
                    start.wait();
                    for _ in 0..100_000 {
                        mine.bump(|counts| &counts.a);
                    }
                    mine.add(|counts| &counts.b, 2);
                });
            }
        });
        assert_eq!(shards.sum(|counts| &counts.a), 800_000, "none lost where threads share a shard");
        assert_eq!(shards.sum(|counts| &counts.b), 16);
        let writer = FirstWriter::new();
        assert!(!writer.is(shard(NONE)), "a thread without a number never writes alone");
        assert!(writer.is(shard(5)) && writer.is(shard(5)), "the first to ask is the writer, and stays it");
        assert!(!writer.is(shard(6)) && !writer.is(shard(NONE)));
        let (first, second) = (Shard::mine(), Shard::mine());
        assert_eq!(first, second, "a thread keeps its number");
        let other = std::thread::spawn(|| Shard::mine().number).join().expect("a thread of its own");
        assert_ne!(first.number, other, "another thread is given another number");
    }
}
