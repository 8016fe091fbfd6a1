//! Counters kept per thread: a fixed array of shards, each on cache lines of its own, a
//! thread writing the shard its number picks and a reader summing them all. Counting on
//! every kernel launch from several threads then writes no line another thread writes,
//! so none bounces between cores; threads past the array's length share shards, still
//! counted exactly (a shard's counters are atomics).
//!
//! A thread's number is given on its first count, in the order threads come (a thread
//! local with a constant initialiser: no allocation, no destructor), and never given
//! back: a thread that exits leaves its counts in its shard, where the sums still see
//! them.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Numbers given to threads so far.
static THREADS: AtomicUsize = AtomicUsize::new(0);

/// A thread's number before it is given one.
const NONE: usize = usize::MAX;

thread_local! {
    static NUMBER: Cell<usize> = const { Cell::new(NONE) };
}

/// A thread's number, which picks its shard in every `Shards` (taken once per launch and
/// handed down, so that each counter bumped does not ask for it again).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard(usize);

impl Shard {
    /// The calling thread's (shard 0 for a thread whose locals are gone: exiting).
    pub fn mine() -> Shard {
        let number = NUMBER.try_with(|number| {
            if number.get() == NONE {
                number.set(THREADS.fetch_add(1, Ordering::Relaxed));
            }
            number.get()
        });
        Shard(number.unwrap_or(0))
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

/// `N` shards of counters `T`, one per thread number (modulo `N`).
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
    /// `shard`'s counters, for it to bump.
    pub fn of(&self, shard: Shard) -> &T {
        &self.0[shard.0 % N].0
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

    struct Counts {
        a: AtomicU64,
        b: AtomicU64,
    }

    impl Zeroed for Counts {
        #[allow(clippy::declare_interior_mutable_const)]
        const ZERO: Counts = Counts { a: AtomicU64::new(0), b: AtomicU64::new(0) };
    }

    #[test]
    fn each_thread_counts_in_its_own_lines_and_the_sums_see_every_thread() {
        let shards: Shards<Counts, 4> = Shards::new();
        let at = |number| std::ptr::from_ref(shards.of(Shard(number))) as usize;
        assert_eq!((at(0) % 64, at(1) - at(0)), (0, 64), "each shard starts a cache line of its own");
        assert_eq!(at(4), at(0), "numbers past the shards wrap around");
        std::thread::scope(|scope| {
            for _ in 0..6 {
                scope.spawn(|| {
                    let mine = shards.of(Shard::mine());
                    for _ in 0..1000 {
                        mine.a.fetch_add(1, Ordering::Relaxed);
                    }
                    mine.b.fetch_add(2, Ordering::Relaxed);
                });
            }
        });
        assert_eq!(shards.sum(|counts| &counts.a), 6000, "six threads over four shards, none lost");
        assert_eq!(shards.sum(|counts| &counts.b), 12);
        let (first, second) = (Shard::mine(), Shard::mine());
        assert_eq!(first, second, "a thread keeps its number");
        let other = std::thread::spawn(Shard::mine).join().expect("a thread of its own");
        assert_ne!(first, other, "another thread is given another number");
    }
}
