//! Where each kernel's parameters lie: (offset, size) per parameter, as the driver
//! reports them (cuFuncGetParamInfo, CUDA 12.4; cuKernelGetParamInfo for a `CUkernel`
//! handle passed in place of a function), asked once per function and kept.
//!
//! Looked up on every launch from any thread: the table is a `CowMap`, read without a
//! lock; a function seen for the first time is asked and added (two threads may both
//! ask; the second insert wins, with the same answer).

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

/// `function`'s parameter layout, asked of the driver the first time.
pub fn of(function: CuFunction) -> Arc<Layout> {
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
