//! Graph and stream-capture hooks: instantiation, exec updates and launches of CUDA
//! graphs, captures begun and ended. Each calls the real function first, unchanged, and
//! tells `launch` what the driver accepted.

use std::ffi::{c_char, c_int, c_void};

use crate::cuda::ffi::*;
use crate::cuda::launch_ffi::*;
use crate::cuda::real::pfn;
use crate::launch::{capture, graphs};

/// After an instantiation that answered `status`: the new exec is read from `graph`.
///
/// # Safety
/// `exec` is the program's out-pointer, written by the driver when it succeeded.
unsafe fn after_instantiate(status: CuResult, exec: *mut GraphExec, graph: Graph) -> CuResult {
    if status == CuResult::SUCCESS && !exec.is_null() {
        // SAFETY: the driver wrote the new exec (the contract).
        graphs::instantiated(unsafe { *exec }, graph);
    }
    status
}

/// # Safety
/// The program's arguments, as cuGraphInstantiateWithFlags takes them.
pub unsafe fn graph_instantiate_with_flags(
    real: pfn::cuGraphInstantiateWithFlags,
    exec: *mut GraphExec,
    graph: Graph,
    flags: u64,
) -> CuResult {
    // SAFETY: the real call with the program's arguments, then its out-pointer.
    unsafe { after_instantiate(real(exec, graph, flags), exec, graph) }
}

/// # Safety
/// The program's arguments, as cuGraphInstantiate_v2 takes them.
pub unsafe fn graph_instantiate_v2(
    real: pfn::cuGraphInstantiate_v2,
    exec: *mut GraphExec,
    graph: Graph,
    error_node: *mut GraphNode,
    log: *mut c_char,
    log_size: usize,
) -> CuResult {
    // SAFETY: the real call with the program's arguments, then its out-pointer.
    unsafe { after_instantiate(real(exec, graph, error_node, log, log_size), exec, graph) }
}

/// # Safety
/// The program's arguments, as cuGraphInstantiateWithParams takes them.
pub unsafe fn graph_instantiate_with_params(
    real: pfn::cuGraphInstantiateWithParams,
    exec: *mut GraphExec,
    graph: Graph,
    params: *mut c_void,
) -> CuResult {
    // SAFETY: the real call with the program's arguments, then its out-pointer.
    unsafe { after_instantiate(real(exec, graph, params), exec, graph) }
}

/// # Safety
/// The program's arguments, as cuGraphInstantiateWithParams_ptsz takes them.
pub unsafe fn graph_instantiate_with_params_ptsz(
    real: pfn::cuGraphInstantiateWithParams_ptsz,
    exec: *mut GraphExec,
    graph: Graph,
    params: *mut c_void,
) -> CuResult {
    // SAFETY: the real call with the program's arguments, then its out-pointer.
    unsafe { after_instantiate(real(exec, graph, params), exec, graph) }
}

/// # Safety
/// The program's arguments, as cuGraphLaunch takes them.
pub unsafe fn graph_launch(real: pfn::cuGraphLaunch, exec: GraphExec, stream: Stream) -> CuResult {
    // SAFETY: the real call with the program's arguments.
    let status = unsafe { real(exec, stream) };
    if status == CuResult::SUCCESS {
        graphs::launched(exec, stream);
    }
    status
}

/// # Safety
/// The program's arguments, as cuGraphLaunch_ptsz takes them.
pub unsafe fn graph_launch_ptsz(real: pfn::cuGraphLaunch_ptsz, exec: GraphExec, stream: Stream) -> CuResult {
    // SAFETY: the real call with the program's arguments.
    let status = unsafe { real(exec, stream) };
    if status == CuResult::SUCCESS {
        graphs::launched(exec, stream.per_thread_default());
    }
    status
}

/// # Safety
/// The program's arguments, as cuGraphExecDestroy takes them.
pub unsafe fn graph_exec_destroy(real: pfn::cuGraphExecDestroy, exec: GraphExec) -> CuResult {
    // Forgotten first: once destroyed, the driver may hand the handle out again.
    graphs::destroyed(exec);
    // SAFETY: the real call with the program's arguments.
    unsafe { real(exec) }
}

/// # Safety
/// The program's arguments, as cuGraphExecKernelNodeSetParams_v2 takes them.
pub unsafe fn graph_exec_kernel_node_set_params_v2(
    real: pfn::cuGraphExecKernelNodeSetParams_v2,
    exec: GraphExec,
    node: GraphNode,
    params: *const KernelNodeParams,
) -> CuResult {
    // SAFETY: the real call; the parameters are read only once the driver accepted them.
    unsafe {
        let status = real(exec, node, params);
        if status == CuResult::SUCCESS && !params.is_null() {
            graphs::kernel_node_set(exec, node, &*params);
        }
        status
    }
}

/// # Safety
/// The program's arguments, as cuGraphExecKernelNodeSetParams (`_v1`) takes them.
pub unsafe fn graph_exec_kernel_node_set_params(
    real: pfn::cuGraphExecKernelNodeSetParams,
    exec: GraphExec,
    node: GraphNode,
    params: *const KernelNodeParams,
) -> CuResult {
    // SAFETY: the real call; the `_v1` struct ends at `extra`, so only its prefix is
    // copied (the `_v2` fields stay empty: the function is the one the node names).
    unsafe {
        let status = real(exec, node, params);
        if status == CuResult::SUCCESS && !params.is_null() {
            let given = &*params;
            let prefix = KernelNodeParams {
                function: given.function,
                grid: given.grid,
                block: given.block,
                shared_bytes: given.shared_bytes,
                params: given.params,
                extra: given.extra,
                ..KernelNodeParams::empty()
            };
            graphs::kernel_node_set(exec, node, &prefix);
        }
        status
    }
}

/// # Safety
/// The program's arguments, as cuGraphExecNodeSetParams takes them.
pub unsafe fn graph_exec_node_set_params(
    real: pfn::cuGraphExecNodeSetParams,
    exec: GraphExec,
    node: GraphNode,
    params: *mut GraphNodeParamsPrefix,
) -> CuResult {
    // SAFETY: the real call; the node's type is read once the driver accepted it, and
    // the kernel member only for a kernel node.
    unsafe {
        let status = real(exec, node, params);
        if status == CuResult::SUCCESS && !params.is_null() {
            match (*params).node_type {
                node_type::KERNEL => graphs::kernel_node_set(exec, node, &(*params).kernel),
                node_type::MEMCPY | node_type::MEMSET | node_type::HOST => {}
                _ => graphs::changed_unread(exec),
            }
        }
        status
    }
}

/// # Safety
/// The program's arguments, as cuGraphExecUpdate_v2 takes them.
pub unsafe fn graph_exec_update_v2(
    real: pfn::cuGraphExecUpdate_v2,
    exec: GraphExec,
    graph: Graph,
    result_info: *mut c_void,
) -> CuResult {
    // SAFETY: the real call with the program's arguments.
    let status = unsafe { real(exec, graph, result_info) };
    if status == CuResult::SUCCESS {
        graphs::updated(exec, graph);
    }
    status
}

/// # Safety
/// The program's arguments, as cuGraphExecUpdate (`_v1`) takes them.
pub unsafe fn graph_exec_update(
    real: pfn::cuGraphExecUpdate,
    exec: GraphExec,
    graph: Graph,
    error_node: *mut GraphNode,
    result: *mut c_int,
) -> CuResult {
    // SAFETY: the real call with the program's arguments.
    let status = unsafe { real(exec, graph, error_node, result) };
    if status == CuResult::SUCCESS {
        graphs::updated(exec, graph);
    }
    status
}

fn after_begin_capture(status: CuResult) -> CuResult {
    if status == CuResult::SUCCESS {
        capture::began();
    }
    status
}

/// # Safety
/// The program's arguments, as cuStreamBeginCapture (`_v1`) takes them.
pub unsafe fn stream_begin_capture(real: pfn::cuStreamBeginCapture, stream: Stream) -> CuResult {
    // SAFETY: the real call with the program's arguments.
    after_begin_capture(unsafe { real(stream) })
}

/// # Safety
/// The program's arguments, as cuStreamBeginCapture_ptsz takes them.
pub unsafe fn stream_begin_capture_ptsz(real: pfn::cuStreamBeginCapture_ptsz, stream: Stream) -> CuResult {
    // SAFETY: the real call with the program's arguments.
    after_begin_capture(unsafe { real(stream) })
}

/// # Safety
/// The program's arguments, as cuStreamBeginCapture_v2 takes them.
pub unsafe fn stream_begin_capture_v2(real: pfn::cuStreamBeginCapture_v2, stream: Stream, mode: c_int) -> CuResult {
    // SAFETY: the real call with the program's arguments.
    after_begin_capture(unsafe { real(stream, mode) })
}

/// # Safety
/// The program's arguments, as cuStreamBeginCapture_v2_ptsz takes them.
pub unsafe fn stream_begin_capture_v2_ptsz(
    real: pfn::cuStreamBeginCapture_v2_ptsz,
    stream: Stream,
    mode: c_int,
) -> CuResult {
    // SAFETY: the real call with the program's arguments.
    after_begin_capture(unsafe { real(stream, mode) })
}

/// # Safety
/// The program's arguments, as cuStreamBeginCaptureToGraph takes them.
pub unsafe fn stream_begin_capture_to_graph(
    real: pfn::cuStreamBeginCaptureToGraph,
    stream: Stream,
    graph: Graph,
    dependencies: *const GraphNode,
    edge_data: *const c_void,
    count: usize,
    mode: c_int,
) -> CuResult {
    // SAFETY: the real call with the program's arguments.
    after_begin_capture(unsafe { real(stream, graph, dependencies, edge_data, count, mode) })
}

/// # Safety
/// The program's arguments, as cuStreamBeginCaptureToGraph_ptsz takes them.
pub unsafe fn stream_begin_capture_to_graph_ptsz(
    real: pfn::cuStreamBeginCaptureToGraph_ptsz,
    stream: Stream,
    graph: Graph,
    dependencies: *const GraphNode,
    edge_data: *const c_void,
    count: usize,
    mode: c_int,
) -> CuResult {
    // SAFETY: the real call with the program's arguments.
    after_begin_capture(unsafe { real(stream, graph, dependencies, edge_data, count, mode) })
}

/// The graph cuStreamEndCapture* answered `status` and wrote to `graph` (null: none).
///
/// # Safety
/// `graph` is the program's out pointer the driver was given: null, or valid for reads.
unsafe fn captured_graph(status: CuResult, graph: *mut Graph) -> Graph {
    if status != CuResult::SUCCESS || graph.is_null() {
        return Graph::NULL;
    }
    // SAFETY: non-null, and written by the driver on success (the contract).
    unsafe { *graph }
}

/// # Safety
/// The program's arguments, as cuStreamEndCapture takes them.
pub unsafe fn stream_end_capture(real: pfn::cuStreamEndCapture, stream: Stream, graph: *mut Graph) -> CuResult {
    // SAFETY: the real call with the program's arguments.
    let status = unsafe { real(stream, graph) };
    // SAFETY: the program's out pointer, as the driver was given it.
    capture::ended(status, unsafe { captured_graph(status, graph) });
    status
}

/// # Safety
/// The program's arguments, as cuStreamEndCapture_ptsz takes them.
pub unsafe fn stream_end_capture_ptsz(
    real: pfn::cuStreamEndCapture_ptsz,
    stream: Stream,
    graph: *mut Graph,
) -> CuResult {
    // SAFETY: the real call with the program's arguments.
    let status = unsafe { real(stream, graph) };
    // SAFETY: the program's out pointer, as the driver was given it.
    capture::ended(status, unsafe { captured_graph(status, graph) });
    status
}
