//! Where each kernel's parameters lie: (offset, size) per parameter, as the driver
//! reports them (cuFuncGetParamInfo, CUDA 12.4; cuKernelGetParamInfo for a `CUkernel`
//! handle passed in place of a function), asked once per function and kept.
//!
//! Looked up on every launch from any thread: the table is a `CowMap`, read without a
//! lock; a function seen for the first time is asked and added (two threads may both
//! ask; the second insert wins, with the same answer). Each thread keeps the layouts it
//! looked up lately in a small table of its own, read first: the shared table's lookup
//! (hash, probe, a reference count taken and dropped on a line every launching thread
//! shares) was about a twentieth of the shim's time per launch on the fake CUDA. The
//! shared table never forgets a layout, so neither need the threads' tables.

use std::cell::Cell;
use std::sync::Arc;

use crate::cuda::ffi::{CuFunction, CuResult};
use crate::cuda::launch_ffi::CuKernel;
use crate::cuda::real;
use crate::sys::cow_map::CowMap;

/// One parameter: its offset in the packed parameter buffer and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Param {
    pub offset: u32,
    pub size: u32,
}

/// A kernel's parameters, or why they are unknown.
#[derive(Debug, PartialEq, Eq)]
pub enum Layout {
    Known(Box<[Param]>),
    /// The driver cannot say (older than 12.4, or a handle it does not know): a launch
    /// of this function cannot be read.
    Unknown,
}

/// The most parameters asked for: a kernel's parameters fit in 32 764 bytes, so at most
/// that many of one byte; past this the layout is called unknown.
const MAX_PARAMS: usize = 32_764;

static LAYOUTS: CowMap<Layout> = CowMap::new();

/// Layouts a thread keeps, in sets of two: a model's step launches a few dozen kernels
/// in turn, which a table of one per slot kept badly (two of them sharing a slot pushed
/// each other out at every launch, and every launch of theirs went to the shared table).
const SETS: usize = 64;

/// One handle's layout as a thread keeps it.
type Kept = Option<(usize, Arc<Layout>)>;

/// The layouts a thread looked up lately, each with its function's handle, in the set
/// the handle hashes to: the one used last first.
struct Recent([[Kept; 2]; SETS]);

impl Default for Recent {
    fn default() -> Recent {
        Recent(std::array::from_fn(|_| [None, None]))
    }
}

impl Recent {
    /// The set of handle `key`, by Fibonacci hashing: handles are addresses, alike in
    /// their low and high bits.
    fn set_of(key: usize) -> usize {
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (usize::BITS - SETS.ilog2())) % SETS
    }

    /// The layout of the function whose handle is `key`: the one kept, else `look_up`'s
    /// (kept in place of the set's one used less lately).
    fn get(&mut self, key: usize, look_up: impl FnOnce() -> Arc<Layout>) -> &Layout {
        let set = &mut self.0[Recent::set_of(key)];
        let holds = |kept: &Kept| kept.as_ref().is_some_and(|(handle, _)| *handle == key);
        if holds(&set[1]) {
            set.swap(0, 1);
        } else if !holds(&set[0]) {
            // Emptied for the key's own, below.
            set[1] = set[0].take();
        }
        &set[0].get_or_insert_with(|| (key, look_up())).1
    }
}

thread_local! {
    /// Taken for a launch and put back after it (`None` meanwhile, so that a nested
    /// lookup would use a table of its own).
    static RECENT_LAYOUTS: Cell<Option<Box<Recent>>> = const { Cell::new(None) };
}

/// Calls `f` with `function`'s parameter layout, asked of the driver the first time.
pub fn with<R>(function: CuFunction, f: impl FnOnce(&Layout) -> R) -> R {
    // A table of its own where the thread's is in use (a nested call) or gone (exiting).
    let mut recent = RECENT_LAYOUTS.try_with(Cell::take).ok().flatten().unwrap_or_default();
    let answer = f(recent.get(function.0 as usize, || of(function)));
    let _ = RECENT_LAYOUTS.try_with(|slot| slot.set(Some(recent)));
    answer
}

/// `function`'s parameter layout from the shared table, asked of the driver the first
/// time.
fn of(function: CuFunction) -> Arc<Layout> {
    let key = function.0 as usize;
    if let Some(known) = LAYOUTS.get(key) {
        return known;
    }
    let layout = Arc::new(ask(function));
    LAYOUTS.set(key, Some(Arc::clone(&layout)));
    layout
}

/// Asks the driver for every parameter of `function` until it answers that there is no
/// such index (CUDA_ERROR_INVALID_VALUE). The function form is asked first; only a handle
/// it does not know (a `CUkernel`) is asked again in the kernel form.
fn ask(function: CuFunction) -> Layout {
    let by_function = real::cuFuncGetParamInfo();
    let by_kernel = real::cuKernelGetParamInfo();
    let query = |index: usize, as_kernel: bool| -> Option<Result<Param, CuResult>> {
        let (mut offset, mut size) = (0usize, 0usize);
        let status = if as_kernel {
            // SAFETY: the driver's own query with two writable locals; the function
            // form has refused the handle, so it is not a function (the driver checks
            // a handle's kind before using it).
            by_kernel.map(|ask| unsafe { ask(CuKernel(function.0), index, &mut offset, &mut size) })?
        } else {
            // SAFETY: the driver's own query with two writable locals; a handle it does
            // not know is answered with an error, not followed.
            by_function.map(|ask| unsafe { ask(function, index, &mut offset, &mut size) })?
        };
        let param = Param { offset: u32::try_from(offset).ok()?, size: u32::try_from(size).ok()? };
        Some(if status == CuResult::SUCCESS { Ok(param) } else { Err(status) })
    };
    let as_kernel = match query(0, false) {
        Some(Ok(_)) => false,
        Some(Err(CuResult::INVALID_VALUE)) => return Layout::Known(Box::new([])),
        _ => true,
    };
    let mut params = Vec::new();
    loop {
        match query(params.len(), as_kernel) {
            Some(Ok(param)) if params.len() < MAX_PARAMS => params.push(param),
            Some(Err(CuResult::INVALID_VALUE)) if as_kernel || !params.is_empty() => break,
            _ => return Layout::Unknown,
        }
    }
    Layout::Known(params.into_boxed_slice())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_each_handle_with_its_own_layout_two_to_a_set() {
        let known = |size| Arc::new(Layout::Known(Box::new([Param { offset: 0, size }])));
        let mut recent = Recent::default();
        let first = 0x7f00_0000_1000usize;
        let mut same_set = (1..).map(|n| first + 0x10 * n).filter(|&key| Recent::set_of(key) == Recent::set_of(first));
        let (second, third) = (same_set.next().unwrap_or(first), same_set.next().unwrap_or(first));
        assert!(first != second && second != third, "three handles sharing a set");
        assert_eq!(*recent.get(first, || known(8)), *known(8));
        assert_eq!(*recent.get(second, || known(16)), *known(16));
        assert_eq!(*recent.get(first, || unreachable!("both kept")), *known(8));
        assert_eq!(*recent.get(second, || unreachable!("both kept")), *known(16));
        // The third pushes out the one used less lately: the first.
        assert_eq!(*recent.get(third, || known(24)), *known(24));
        assert_eq!(*recent.get(second, || unreachable!("used last but one")), *known(16));
        assert_eq!(*recent.get(first, || known(8)), *known(8), "asked again, with its own layout");
    }
}
