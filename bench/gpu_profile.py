"""Where one prefill's and one decode step's time goes, by kind of work (torch.profiler):
GPU time of copies, GEMM kernels and other kernels with the top kernels, and the CPU's
own time with its synchronisations. decode.py's --profile; bench/report.py prints it."""

import gpu_timeline


def cpu_breakdown(run, top=12):
    """The CPU's `top` self times (each event's own, not its children's) and the
    synchronisations while `run` runs (torch.profiler, CPU only): a GPU waiting for the
    CPU shows here as hooks, allocations or synchronisations."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
        torch.cuda.synchronize()
    events = prof.key_averages()
    heaviest = sorted(((e.self_cpu_time_total / 1e3, e.count, e.key[:60]) for e in events), reverse=True)[:top]
    syncs = {e.key: e.count for e in events if "ynchronize" in e.key or e.key in ("aten::item", "aten::_local_scalar_dense")}
    return {"cpu_self_top": [{"ms": round(ms, 2), "calls": calls, "name": name} for ms, calls, name in heaviest],
            "synchronisations": syncs}


def device_time(prof, top=8):
    """GPU time of a finished CUDA-only torch.profiler run by kind of work (copies, GEMM
    kernels, other kernels) and its `top` kernels by time."""
    kind = gpu_timeline.kind
    by_kind, heaviest = {}, []
    for event in prof.key_averages():
        device_us = getattr(event, "device_time_total", None)
        if device_us is None:
            device_us = getattr(event, "cuda_time_total", 0)
        if not device_us:
            continue
        by_kind[kind(event.key)] = by_kind.get(kind(event.key), 0) + device_us / 1e3
        heaviest.append((device_us / 1e3, event.count, event.key[:90]))
    heaviest.sort(reverse=True)
    return {"ms_by_kind": {k: round(v, 2) for k, v in by_kind.items()},
            "top": [{"ms": round(ms, 2), "calls": calls, "name": name} for ms, calls, name in heaviest[:top]]}


def gpu_time_breakdown(forward, prompt):
    """GPU time of one prefill and one decode step by kind of work, from torch.profiler:
    copies (the shim's staging copies are host-to-device cuMemcpyAsync), GEMM kernels,
    other kernels; the top kernels by time. Explains what limits a configuration. Call
    it with no KV cache held, as the timed prefills run."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    result = {}
    state = {}

    def prefill():
        state["token"], state["cache"] = forward(prompt)

    for label, run in (("prefill", prefill), ("decode_step", lambda: forward(state["token"], state["cache"]))):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
        # Where the CPU's time went, in a second run profiled on the CPU only. (No GPU
        # idle figure: a profiled run's wall time is mostly the profiler's own.)
        result[label] = {**device_time(prof), "cpu_self_top": cpu_breakdown(run, top=10)["cpu_self_top"]}
    return result
