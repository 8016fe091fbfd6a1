//! Kernel launch hooks: every driver form of a kernel launch, and host functions. Each
//! calls the real function first, unchanged, and tells `launch` what the driver
//! accepted: the program's work is never delayed or altered, only observed. Graphs and
//! captures are in `graphs`, tensor maps in `tensor_maps`.

use std::ffi::{c_uint, c_void};

use crate::cuda::ffi::*;
use crate::cuda::launch_ffi::*;
use crate::cuda::real::pfn;
use crate::launch::kernel_times::{self, Timing};
use crate::launch::kernels;

/// What every kernel launch form shares once the driver answered: observed only when
/// it accepted the launch; `timing`'s sample (started before it) ends either way.
///
/// # Safety
/// `params`/`extra` are the launch's own arguments for `function`.
unsafe fn after_launch(
    status: CuResult,
    function: CuFunction,
    stream: Stream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
    timing: Timing,
) -> CuResult {
    if status == CuResult::SUCCESS {
        // SAFETY: the driver accepted these values for `function` (the contract).
        unsafe { kernels::launched(function, stream, params, extra, timing) };
    } else if let Some(sampling) = timing.sampling {
        kernel_times::after_launch(sampling, false, stream, &[]);
    }
    status
}

/// # Safety
/// The program's arguments, as cuLaunchKernel takes them.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_kernel(
    real: pfn::cuLaunchKernel,
    function: CuFunction,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_bytes: c_uint,
    stream: Stream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult {
    let timing = kernel_times::before_launch(function, stream);
    // SAFETY: the real launch with the program's arguments; observed with the same.
    unsafe {
        let status =
            real(function, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream, params, extra);
        after_launch(status, function, stream, params, extra, timing)
    }
}

/// # Safety
/// The program's arguments, as cuLaunchKernel_ptsz takes them.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_kernel_ptsz(
    real: pfn::cuLaunchKernel_ptsz,
    function: CuFunction,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_bytes: c_uint,
    stream: Stream,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult {
    // Stream 0 means the thread's default stream here.
    let observed = stream.per_thread_default();
    let timing = kernel_times::before_launch(function, observed);
    // SAFETY: as in `launch_kernel`.
    unsafe {
        let status =
            real(function, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream, params, extra);
        after_launch(status, function, observed, params, extra, timing)
    }
}

/// # Safety
/// The program's arguments, as cuLaunchKernelEx takes them.
pub unsafe fn launch_kernel_ex(
    real: pfn::cuLaunchKernelEx,
    config: *const CuLaunchConfig,
    function: CuFunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult {
    // SAFETY: the configuration, where not null, is the program's launch configuration,
    // which the driver reads as well.
    let stream = if config.is_null() { Stream::NULL } else { unsafe { (*config).stream } };
    let timing = kernel_times::before_launch(function, stream);
    // SAFETY: the real launch with the program's arguments; observed with the same.
    unsafe {
        let status = real(config, function, params, extra);
        after_launch(status, function, stream, params, extra, timing)
    }
}

/// # Safety
/// The program's arguments, as cuLaunchKernelEx_ptsz takes them.
pub unsafe fn launch_kernel_ex_ptsz(
    real: pfn::cuLaunchKernelEx_ptsz,
    config: *const CuLaunchConfig,
    function: CuFunction,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> CuResult {
    // SAFETY: as in `launch_kernel_ex`; stream 0 means the thread's default stream here.
    let observed = if config.is_null() { Stream::NULL } else { unsafe { (*config).stream } }.per_thread_default();
    let timing = kernel_times::before_launch(function, observed);
    // SAFETY: as in `launch_kernel_ex`.
    unsafe {
        let status = real(config, function, params, extra);
        after_launch(status, function, observed, params, extra, timing)
    }
}

/// # Safety
/// The program's arguments, as cuLaunchCooperativeKernel takes them.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_cooperative_kernel(
    real: pfn::cuLaunchCooperativeKernel,
    function: CuFunction,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_bytes: c_uint,
    stream: Stream,
    params: *mut *mut c_void,
) -> CuResult {
    let timing = kernel_times::before_launch(function, stream);
    // SAFETY: as in `launch_kernel` (a cooperative launch has no `extra`).
    unsafe {
        let status = real(function, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream, params);
        after_launch(status, function, stream, params, std::ptr::null_mut(), timing)
    }
}

/// # Safety
/// The program's arguments, as cuLaunchCooperativeKernel_ptsz takes them.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch_cooperative_kernel_ptsz(
    real: pfn::cuLaunchCooperativeKernel_ptsz,
    function: CuFunction,
    grid_x: c_uint,
    grid_y: c_uint,
    grid_z: c_uint,
    block_x: c_uint,
    block_y: c_uint,
    block_z: c_uint,
    shared_bytes: c_uint,
    stream: Stream,
    params: *mut *mut c_void,
) -> CuResult {
    // Stream 0 means the thread's default stream here.
    let observed = stream.per_thread_default();
    let timing = kernel_times::before_launch(function, observed);
    // SAFETY: as in `launch_cooperative_kernel`.
    unsafe {
        let status = real(function, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream, params);
        after_launch(status, function, observed, params, std::ptr::null_mut(), timing)
    }
}

/// # Safety
/// The program's arguments, as cuLaunchHostFunc takes them.
pub unsafe fn launch_host_func(
    real: pfn::cuLaunchHostFunc,
    stream: Stream,
    function: *mut c_void,
    user_data: *mut c_void,
) -> CuResult {
    // SAFETY: the real call with the program's arguments.
    let status = unsafe { real(stream, function, user_data) };
    if status == CuResult::SUCCESS {
        kernels::host_function_enqueued(stream);
    }
    status
}

/// # Safety
/// The program's arguments, as cuLaunchHostFunc_ptsz takes them.
pub unsafe fn launch_host_func_ptsz(
    real: pfn::cuLaunchHostFunc_ptsz,
    stream: Stream,
    function: *mut c_void,
    user_data: *mut c_void,
) -> CuResult {
    // SAFETY: the real call with the program's arguments.
    let status = unsafe { real(stream, function, user_data) };
    if status == CuResult::SUCCESS {
        kernels::host_function_enqueued(stream.per_thread_default());
    }
    status
}
