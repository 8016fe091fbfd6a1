"""What limits each goal of bench/report.py's figures that a run did not meet, in words
computed from that run's own measurements; and the formatting helpers both use."""

import statistics


def fmt(value, digits=3):
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def median_measured(values):
    """The median of the values a run measured (None: not measured), or None."""
    measured = [v for v in values if v is not None]
    return statistics.median(measured) if measured else None


def limits(report):
    """For each goal not met, what limits it, computed from this run's own measurements."""
    figures = report["figures"]
    out = {}

    def unmet(name):
        return figures.get(name, {}).get("met") is False

    read = figures.get("t2_read_ratio", {})
    if unmet("t2_read_ratio") and read.get("detail", {}).get("sizes_gib"):
        size = f"{read['detail']['worst_at_gib']:g}"
        row = read["detail"]["sizes_gib"].get(size, {})
        t2, naive, copy = row.get("t2_read_GBps"), row.get("naive_zero_copy_read_GBps"), row.get("pinned_memcpy_h2d_GBps")
        kernels = len(row.get("t2_by_kernel") or {})
        if t2 and naive and copy:
            out["t2_read_ratio"] = (
                f"GPU loads over PCIe: at {size} GiB the best of {kernels} read kernels reads T2 at {t2:.1f} GB/s and "
                f"plain cudaHostAlloc memory at {naive:.1f} GB/s (T2 / naive zero-copy = {t2 / naive:.3f}): the shim's "
                f"memory reads as fast as the best zero-copy memory there is. The baseline is the copy engine "
                f"({copy:.1f} GB/s), which SM loads do not reach on this link; where it matters, the shim uses the "
                f"copy engine instead (GEMM staging).")
    alloc = figures.get("t2_alloc_ratio", {})
    phases = [next((p for p in each if p.get("mib", 0) >= 1024 and not p.get("reused")), None)
              for each in alloc.get("detail", {}).get("t2_phases_each", [])]
    phases = [p for p in phases if p]
    if unmet("t2_alloc_ratio") and phases:
        populate = median_measured(p.get("populate_ms") for p in phases)
        register = median_measured(p.get("register_ms") for p in phases)
        threads = phases[0].get("populate_threads", "?")
        out["t2_alloc_ratio"] = (
            f"Fresh pages: of the cold {fmt(alloc['value'])} ms, populating 1 GiB ({threads} threads, the kernel "
            f"zeroing newly faulted pages) took a median {fmt(populate)} ms and cuMemHostRegister {fmt(register)} ms; "
            f"cudaHostAlloc ({fmt(alloc['baseline'])} ms) does the same work single-threaded. Under 0.10 needs pages "
            f"zeroed before the call: the module's pre-zeroed pool (greenboost.ko cannot be loaded on this machine) "
            f"or the shim's T2 cache, whose reuse is the warm figure.")
    for name in ("hook_overhead_ratio", "hook_overhead_ratio_meminfo"):
        detail = figures.get(name, {}).get("detail") or {}
        if unmet(name) and detail.get("pair_ratios"):
            value, baseline = figures[name]["value"], figures[name]["baseline"]
            spread = f"the {len(detail['pair_ratios'])} process pairs range {detail['pair_ratio_min']:.3f}-{detail['pair_ratio_max']:.3f}"
            verdict = ("every pair is above 1: a real cost of the hook's own work around the real call"
                       if detail["pair_ratio_min"] > 1 else "the goal lies within the run-to-run spread")
            out[name] = f"{(value - baseline) * 1e3:.0f} ns per call ({fmt(value)} vs {fmt(baseline)} us); {spread}: {verdict}."
    prefill = figures.get("prefill_vs_vram", {})
    # prefill_vs_bound's detail has the copy floor and both prefill times of this run.
    bound = figures.get("prefill_vs_bound", {}).get("detail") or {}
    if unmet("prefill_vs_vram") and bound:
        in_t2, copy_rate = bound["t2_weight_bytes"], bound["pinned_copy_GBps"]
        floor_ms, vram_ms, gb_ms = bound["copy_ms"], bound["all_vram_ms"], bound["measured_ms"]
        out["prefill_vs_vram"] = (
            f"PCIe: a prefill reads each of the {in_t2 / 1e9:.2f} GB of T2 weights once (staged by the copy engine); "
            f"at the run's best pinned copy rate ({copy_rate:.1f} GB/s) that alone takes {floor_ms:.0f} ms, against "
            f"{vram_ms:.0f} ms for the whole all-VRAM prefill: the ratio cannot pass {vram_ms / floor_ms:.2f} at this "
            f"budget however the copies overlap the compute, and {vram_ms / (floor_ms + vram_ms):.2f} with them in "
            f"series. Measured: {gb_ms:.0f} ms per prefill ({fmt(prefill['ratio'])}).")
    for name, config in (("decode_vs_bound", "greenboost"), ("prefill_vs_bound", "greenboost")):
        text = link_in_series(report, name, config)
        if unmet(name) and text:
            out[name] = text
    hf = figures.get("decode_hf_vs_bound", {})
    configs = (report.get("decode") or {}).get("configs") or {}
    if unmet("decode_hf_vs_bound") and configs.get("hf_greenboost") and configs.get("greenboost"):
        hf_step = configs["hf_greenboost"]["decode_step_ms_median"]
        loop_step = configs["greenboost"]["decode_step_ms_median"]
        generate = ((configs["hf_greenboost"].get("profile") or {}).get("hf_generate_4_tokens") or {}).get("cpu_self_top", [])
        syncs = next((e["calls"] for e in generate if e["name"] == "cudaStreamSynchronize"), None)
        attention = cpu_ms(configs["greenboost"], "decode_step", "aten::_cudnn_attention_forward")
        tokens = (((configs["hf_greenboost"].get("profile") or {}).get("hf_generate_gaps") or {})
                  .get("decode_tokens") or {})
        out["decode_hf_vs_bound"] = (
            f"The client, not the link: transformers' generate decodes a token in {hf_step:.0f} ms where the bench's "
            f"loop, same weights and placement, takes {loop_step:.0f} ms ({loop_step / hf_step:.2f}); generate "
            f"synchronises with the GPU {syncs if syncs is not None else '?'} times in 4 tokens, and after each the "
            f"GPU waits for the CPU to launch the next layers"
            + (f" (profiled: busy {tokens['busy_ms_each']:.0f} ms and idle {tokens['idle_ms_each']:.1f} ms a token)"
               if tokens.get("idle_ms_each") is not None else "")
            + ". The layers read first after that wait are the first allocated, which the placement keeps in VRAM: "
              "the GPU runs them faster than the CPU launches them"
            + (f". On a key length met for the first time PyTorch's cuDNN attention adds {attention:.0f} ms of CPU "
               f"time a step in every configuration (the first pass, in the decode table)" if attention else "") + ".")
    return out


def cpu_ms(config, step, name):
    """CPU self time of one operator in a profiled step of a decode configuration."""
    top = ((config.get("profile") or {}).get(step) or {}).get("cpu_self_top", [])
    return next((e["ms"] for e in top if e["name"] == name), None)


def link_in_series(report, figure_name, config_name):
    """What bounds a decode step or a prefill under the shim: the link's time (the bound),
    the GPU's other work, which runs between the copies in series with them (no copy may
    start before the work ahead of its product, which might write the operand), and the
    GPU's idle time, from the run's profile."""
    figure = report["figures"].get(figure_name, {})
    config = ((report.get("decode") or {}).get("configs") or {}).get(config_name) or {}
    step = "decode_step" if figure_name.startswith("decode") else "prefill"
    kinds = ((config.get("profile") or {}).get(step) or {}).get("ms_by_kind")
    if not (kinds and figure.get("value") and figure.get("baseline")):
        return None
    if step == "decode_step":
        bound_ms, measured_ms = 1e3 / figure["baseline"], 1e3 / figure["value"]
    else:
        bound_ms, measured_ms = figure["baseline"], figure["value"]
    busy = sum(kinds.values())
    besides = busy - bound_ms
    what = "a decode step" if step == "decode_step" else "a prefill"
    return (f"Work in series with the link: {what} moves its T2 bytes in {bound_ms:.1f} ms at the run's rates (the bound); "
            f"the GPU was busy {busy:.1f} ms in all (copies {kinds.get('copy', 0):.1f}, GEMM kernels "
            f"{kinds.get('gemm', 0):.1f}, other kernels {kinds.get('other kernels', 0):.1f}), so {max(besides, 0):.1f} ms "
            f"of products and other kernels ran between the copies rather than beside them, and it idled "
            f"{max(measured_ms - busy, 0):.1f} ms{idle_causes(config, step)}: at most {bound_ms / busy:.3f} with the "
            f"work in series, measured {measured_ms:.1f} ms ({bound_ms / measured_ms:.3f}).")


def idle_causes(config, step):
    """Why the GPU idled in a decode step or a prefill, from the profile of steps run back
    to back (of one prefill): the gaps between its GPU work; the rest of the measured time
    is before the first GPU work and after the last (launch, the result's read-back)."""
    decode = step == "decode_step"
    gaps = (config.get("profile") or {}).get("decode_gaps" if decode else "prefill_gaps")
    if not gaps:
        return " (launches, synchronisation)"
    units, causes = gaps["units"], gaps["idle_by_cause_ms"]
    blocked = (gaps.get("cpu_blocked_in") or {}).get("calls") or {}
    blocked_text = ("; the CPU waited in " + ", ".join(f"{name} ({e['ms'] / units:.1f} ms)" for name, e in blocked.items())
                    if blocked else "; no CUDA call held the CPU 0.2 ms or more")
    stalls = gaps.get("stalls") or {"count": 0, "ms": 0}
    stall_text = (f", and {stalls['count']} stall of {stalls['ms']:.0f} ms in all (one-off CPU work, e.g. cuDNN "
                  f"planning attention for a new length)" if stalls["count"] else "")
    profiled = f"{units} steps back to back" if decode else "one prefill profiled"
    return (f" ({profiled}: {gaps['span_ms_each']:.1f} ms a {'step' if decode else 'prefill'} from its first GPU "
            f"work to its last, {gaps['idle_ms_each']:.1f} ms of it between GPU work, of which "
            f"{causes.get('cpu late', 0) / units:.1f} ms with nothing queued — the program's CPU behind the GPU — and "
            f"{causes.get('gpu dependency', 0) / units:.1f} ms between work already queued{stall_text}{blocked_text})")
