"""Where a GPU waits: the gaps between the GPU work of a profiled stretch (torch.profiler,
CUDA activity only, so that the CPU runs at nearly its own pace), by the kinds of work on
either side, and by who was late: the CPU (the work after the gap was launched only
during the gap: the GPU had nothing queued) or the GPU itself (the work was queued before
the gap opened: what separates it is a dependency's latency, e.g. a kernel waiting for a
copy on the same stream to be signalled done).

decode.py profiles several decode steps back to back with it; the report says how much
of a step's idle time each cause takes (bench/report_limits.py)."""

import json
import os
import tempfile

# A gap at least this long is a stall (µs): one-off CPU work such as a library building a
# plan for a new shape (cuDNN's attention, at a new sequence length), counted apart so
# that a few steps' profile gives the steady state too.
STALL_US = 10000.0

# A CUDA call at least this long counts as one the CPU was blocked in (µs): a launch or
# an asynchronous copy returns in microseconds unless the driver's queue is full or the
# call synchronises.
LONG_CALL_US = 200.0

# A gap at least this long counts in "long" (µs): longer than any launch-to-launch
# latency of queued work, so it is the CPU, a synchronisation, or a slow dependency.
LONG_GAP_US = 100.0


def kind(name):
    """The kind of a GPU operation by its name: copy, gemm or other kernels."""
    lowered = name.lower()
    if "memcpy" in lowered:
        return "copy"
    if "gemm" in lowered or "gemv" in lowered or "sm90" in lowered or "cutlass" in lowered or "cublas" in lowered:
        return "gemm"
    return "other kernels"


def trace_events(prof):
    """The profile's Chrome-trace events (the only export with timestamps that every
    torch version writes)."""
    with tempfile.TemporaryDirectory() as scratch:
        path = os.path.join(scratch, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as trace:
            document = json.load(trace)
    return document.get("traceEvents", document) if isinstance(document, dict) else document


def gaps(events):
    """Idle time between the GPU operations of `events` (Chrome-trace dicts), from the
    first operation's start to the last one's end."""
    launches = {}
    blocked = {}
    ops = []
    for event in events:
        if event.get("ph") != "X" or "ts" not in event:
            continue
        category = event.get("cat", "")
        correlation = (event.get("args") or {}).get("correlation")
        start, end = float(event["ts"]), float(event["ts"]) + float(event.get("dur", 0))
        if category in ("kernel", "gpu_memcpy", "gpu_memset"):
            ops.append((start, end, kind(event.get("name", "")), event.get("name", "")[:70], correlation))
        elif category in ("cuda_runtime", "cuda_driver"):
            if correlation is not None:
                launches[correlation] = end
            if end - start >= LONG_CALL_US:
                entry = blocked.setdefault(event.get("name", "")[:60], {"ms": 0.0, "count": 0})
                entry["ms"] += (end - start) / 1e3
                entry["count"] += 1
    if not ops:
        return None
    ops.sort()
    by_transition, by_cause = {}, {"cpu late": 0.0, "gpu dependency": 0.0, "unknown": 0.0}
    long_gaps = []
    busy = idle = 0.0
    covered_until, before = ops[0][0], None
    for start, end, what, name, correlation in ops:
        if start > covered_until:
            gap = start - covered_until
            idle += gap
            transition = f"{before[2]} > {what}" if before else f"start > {what}"
            entry = by_transition.setdefault(transition, {"ms": 0.0, "count": 0})
            entry["ms"] += gap / 1e3
            entry["count"] += 1
            launched = launches.get(correlation)
            cause = "unknown" if launched is None else ("cpu late" if launched > covered_until else "gpu dependency")
            by_cause[cause] += gap / 1e3
            if gap >= LONG_GAP_US:
                long_gaps.append((gap, before[3] if before else "", name, cause))
        busy += max(end - max(start, covered_until), 0.0)
        if end > covered_until:
            covered_until, before = end, (start, end, what, name)
    long_gaps.sort(reverse=True)
    return {
        "span_ms": round((covered_until - ops[0][0]) / 1e3, 3),
        "busy_ms": round(busy / 1e3, 3),
        "idle_ms": round(idle / 1e3, 3),
        "idle_by_cause_ms": {cause: round(ms, 3) for cause, ms in by_cause.items() if ms},
        "idle_by_transition": {t: {"ms": round(e["ms"], 3), "count": e["count"]}
                               for t, e in sorted(by_transition.items(), key=lambda item: -item[1]["ms"])},
        "stalls": {"at_least_us": STALL_US, "count": sum(1 for gap, *_ in long_gaps if gap >= STALL_US),
                   "ms": round(sum(gap for gap, *_ in long_gaps if gap >= STALL_US) / 1e3, 3)},
        "long_gaps": {"at_least_us": LONG_GAP_US, "count": len(long_gaps),
                      "ms": round(sum(gap for gap, *_ in long_gaps) / 1e3, 3),
                      "longest": [{"us": round(gap, 1), "after": after, "before": name, "cause": cause}
                                  for gap, after, name, cause in long_gaps[:6]]},
        "cpu_blocked_in": {"at_least_us": LONG_CALL_US,
                           "calls": {name: {"ms": round(e["ms"], 3), "count": e["count"]}
                                     for name, e in sorted(blocked.items(), key=lambda item: -item[1]["ms"])}},
    }


def without(total, part, units):
    """The idle time of `total` less that of `part` (a profile of the same program's
    first stretch alone, e.g. a prefill), per unit of what `total` did beyond it."""
    if not (total and part):
        return None
    causes = set(total["idle_by_cause_ms"]) | set(part["idle_by_cause_ms"])
    return {"units": units,
            "idle_ms_each": round((total["idle_ms"] - part["idle_ms"]) / units, 3),
            "busy_ms_each": round((total["busy_ms"] - part["busy_ms"]) / units, 3),
            "idle_by_cause_ms_each": {cause: round((total["idle_by_cause_ms"].get(cause, 0)
                                                    - part["idle_by_cause_ms"].get(cause, 0)) / units, 3)
                                      for cause in causes}}


def profile_gaps(run, units):
    """Runs `run` under a CUDA-only torch.profiler and returns its gaps, each figure
    also per unit (`units` decode steps or tokens)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    result = gaps(trace_events(prof))
    if result:
        result["units"] = units
        for key in ("span_ms", "busy_ms", "idle_ms"):
            result[key + "_each"] = round(result[key] / units, 3)
        result["idle_ms_each_without_stalls"] = round((result["idle_ms"] - result["stalls"]["ms"]) / units, 3)
    return result
