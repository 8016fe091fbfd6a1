#!/usr/bin/env python3
"""Turns the raw measurements of bench/run.sh (one LABEL.out/.err/.rc per process)
into bench/results/<date>-<commit>.json and bench/results/<date>-<commit>.md, and
bench/results/latest.json from the newest dated report (results_latest.py). Each figure
carries the GreenBoost value, the baseline measured in the same run, their ratio, and
the goal of issue 4; a figure that could not be measured says why. Nothing here judges a
timing as pass or fail."""

import argparse
import datetime
import json
import os
import re
import statistics
import sys

import report_llamacpp
import report_longctx
import results_latest
from report_limits import limits
from report_markdown import markdown

GOALS = {
    "t2_read_ratio": (">=", 0.97),
    "t2_alloc_ratio": ("<=", 0.10),
    "t2_alloc_ratio_warm": ("<=", 0.10),
    "hook_overhead_ratio": ("<=", 1.02),
    "hook_overhead_ratio_meminfo": ("<=", 1.02),
    "launch_overhead_ratio": ("<=", 1.05),
    "launch_overhead_ratio_4_threads": ("<=", 1.05),
    "launch_overhead_ratio_movable": ("<=", 1.05),
    # transformers' generate, all in VRAM, with the shim over without (tokens/s).
    "launch_generate_vs_plain": (">=", 0.98),
    # T2 reads against the best zero-copy read of cudaHostAlloc memory, same kernels.
    "t2_read_vs_zero_copy": (">=", 0.98),
    # Decode against the bound at the faster of the zero-copy and copy-engine rates.
    "decode_vs_bound": (">=", 0.95),
    # transformers' generate under the shim against the same bound.
    "decode_hf_vs_bound": (">=", 0.90),
    "decode_vs_cpu_offload": (">=", 3.0),
    "decode_vs_uvm": (">=", 1.5),
    "prefill_vs_vram": (">=", 0.30),
    # Prefill against what the link allows: max(T2 weight bytes / pinned copy rate,
    # the all-VRAM prefill), default and with GREENBOOST_STAGE_SLICES=4 (what slices gain).
    "prefill_vs_bound": (">=", 0.90),
    "prefill_sliced_vs_bound": (">=", 0.90),
    # The same with look-ahead staging (GREENBOOST_STAGE_LOOKAHEAD=on): issue 35's goal.
    "prefill_ahead_vs_bound": (">=", 0.93),
    # Against an earlier shim (BENCH_BASELINE_SHIM) in the same run: no worse.
    "decode_vs_baseline_shim": (">=", 1.0),
    "prefill_vs_baseline_shim": (">=", 1.0),
    # Long prompts beside a foreign process (report_longctx.py): prefill under the shim
    # over the free GPU's, and decode against the best placement's bound.
    "longctx_hf_prefill_vs_free": ("<=", 1.5),
    "longctx_hf_decode_vs_bound": (">=", 0.90),
}


def load(raw):
    runs = {}
    for name in sorted(os.listdir(raw)):
        if not name.endswith(".rc"):
            continue
        label = name[:-3]
        rc = int(open(os.path.join(raw, name)).read().strip() or 0)
        out = open(os.path.join(raw, label + ".out")).read() if os.path.exists(os.path.join(raw, label + ".out")) else ""
        err = open(os.path.join(raw, label + ".err"), errors="replace").read()
        parsed = None
        for line in reversed(out.splitlines()):
            if line.startswith("{"):
                try:
                    parsed = json.loads(line)
                except json.JSONDecodeError:
                    pass
                break
        problem = None
        if parsed is None or "error" in parsed:
            # A Python traceback's exception line says more than its last line.
            exception = [l for l in err.splitlines() if re.match(r"[A-Za-z_.]+(Error|Exception|Exit)\b", l)]
            reason = ((parsed or {}).get("error") or (exception or [None])[-1]
                      or (err.strip().splitlines() or [f"exit status {rc}"])[-1])
            problem = f"{label}: {'timed out' if rc == 124 else 'exit ' + str(rc)}: {reason}"
        runs[label] = {"rc": rc, "result": parsed if problem is None else None, "problem": problem,
                       "stderr_tail": err[-2000:] if problem else "",
                       # The shim's per-process summary (GREENBOOST_LOG=info): peak T1/T2.
                       "shim_summary": [l.strip() for l in err.splitlines() if "summary:" in l],
                       "t2_phases": t2_phases(err)}
    return runs


def t2_phases(err):
    """The shim's debug lines about T2 allocations (GREENBOOST_LOG=debug), in order: a
    new buffer's map/populate times (userspace backend) and registration time, or a reuse
    from the shim's T2 cache."""
    phases = []
    for line in err.splitlines():
        backend = re.search(r"userspace backend: ([\d.]+) MiB: map ([\d.]+) ms, populate ([\d.]+) ms \((\d+) thread", line)
        if backend:
            phases.append({"mib": float(backend.group(1)), "map_ms": float(backend.group(2)),
                           "populate_ms": float(backend.group(3)), "populate_threads": int(backend.group(4))})
            continue
        registered = re.search(r"T2 0x[0-9a-f]+: ([\d.]+) MiB \(.*register ([\d.]+) ms", line)
        if registered:
            if phases and "register_ms" not in phases[-1] and "reused" not in phases[-1]:
                phases[-1]["register_ms"] = float(registered.group(2))
            else:
                phases.append({"mib": float(registered.group(1)), "register_ms": float(registered.group(2))})
            continue
        reused = re.search(r"T2 0x[0-9a-f]+: ([\d.]+) MiB reused from the T2 cache", line)
        if reused:
            phases.append({"mib": float(reused.group(1)), "reused": True})
    return phases


def result(runs, label):
    entry = runs.get(label)
    return entry["result"] if entry else None


def why_missing(runs, labels):
    problems = [runs[l]["problem"] for l in labels if l in runs and runs[l]["problem"]]
    absent = [l for l in labels if l not in runs]
    if problems:
        return "; ".join(problems)
    if absent:
        return "not run: " + ", ".join(absent)
    return "no data"


def figure(name, value, baseline, ratio, unit, detail=None, missing=None):
    op, goal = GOALS[name]
    entry = {"ratio": ratio, "value": value, "baseline": baseline, "unit": unit, "goal": f"{op} {goal}"}
    if ratio is None:
        entry["missing"] = missing or "no data"
        entry["met"] = None
    else:
        entry["met"] = ratio >= goal if op == ">=" else ratio <= goal
    if detail:
        entry["detail"] = detail
    return entry


def labels_with(runs, prefix):
    return sorted(l for l in runs if l.startswith(prefix))


def variant_rates(variants):
    """{kernel: median GB/s} from gbbench's per-variant reads (absent in old runs)."""
    return {name: v["GBps"] for name, v in (variants or {}).items()}


def t2_read(runs, sizes):
    per_size = {}
    for size in sizes:
        t2, base = result(runs, f"t2read-{size}"), result(runs, f"hostbuf-{size}")
        row = {}
        if base:
            row.update(pinned_memcpy_h2d_GBps=base["memcpy_h2d_GBps"],
                       naive_zero_copy_read_GBps=base["zero_copy_read_GBps"], hbm_read_GBps=base["hbm_read_GBps"],
                       baseline_checksum_ok=base["checksum_ok"],
                       naive_zero_copy_best_kernel=base.get("zero_copy_read_variant"),
                       hbm_best_kernel=base.get("hbm_read_variant"),
                       naive_zero_copy_by_kernel=variant_rates(base.get("zero_copy_read_variants")),
                       hbm_by_kernel=variant_rates(base.get("hbm_read_variants")))
        if t2:
            row.update(t2_read_GBps=t2["read_GBps"], placement=t2["placement"], checksum_ok=t2["checksum_ok"],
                       shim_alloc_s=t2["alloc_s"], t2_best_kernel=t2.get("read_variant"),
                       t2_by_kernel=variant_rates(t2.get("read_variants")))
            if t2["placement"] != "host":
                row["note"] = f"the buffer landed in {t2['placement']}, not T2: the budget was not applied"
        if t2 and base:
            row["ratio"] = t2["read_GBps"] / base["memcpy_h2d_GBps"]
        else:
            row["missing"] = why_missing(runs, [f"t2read-{size}", f"hostbuf-{size}"])
        per_size[str(size)] = row
    measured = {s: r for s, r in per_size.items() if "ratio" in r and r.get("placement") == "host"}
    if not measured:
        reasons = [r.get("missing") or r.get("note", "") for r in per_size.values()]
        return figure("t2_read_ratio", None, None, None, "GB/s", {"sizes_gib": per_size}, "; ".join(reasons))
    worst = min(measured, key=lambda s: measured[s]["ratio"])
    row = measured[worst]
    return figure("t2_read_ratio", row["t2_read_GBps"], row["pinned_memcpy_h2d_GBps"], row["ratio"], "GB/s",
                  {"worst_at_gib": float(worst), "sizes_gib": per_size})


def t2_read_vs_zero_copy(read):
    """T2 reads against the same kernels reading cudaHostAlloc memory zero-copy (the best
    kernel of each), at the worst size of t2_read_ratio's rows."""
    rows = {s: r for s, r in (read.get("detail") or {}).get("sizes_gib", {}).items()
            if r.get("t2_read_GBps") and r.get("naive_zero_copy_read_GBps") and r.get("placement") == "host"}
    if not rows:
        return figure("t2_read_vs_zero_copy", None, None, None, "GB/s", None, read.get("missing") or "not run")
    worst = min(rows, key=lambda s: rows[s]["t2_read_GBps"] / rows[s]["naive_zero_copy_read_GBps"])
    row = rows[worst]
    return figure("t2_read_vs_zero_copy", row["t2_read_GBps"], row["naive_zero_copy_read_GBps"],
                  row["t2_read_GBps"] / row["naive_zero_copy_read_GBps"], "GB/s",
                  {"worst_at_gib": float(worst), "t2_kernel": row.get("t2_best_kernel"),
                   "zero_copy_kernel": row.get("naive_zero_copy_best_kernel")})


def median_of(runs, prefix, key):
    values = [r[key] for r in (result(runs, l) for l in labels_with(runs, prefix)) if r]
    return (statistics.median(values), values) if values else (None, [])


def t2_alloc(runs):
    t2_labels, host_labels = labels_with(runs, "alloc-t2-"), labels_with(runs, "alloc-hostalloc-")
    missing = why_missing(runs, t2_labels + host_labels) if t2_labels or host_labels else "not run"
    placements = sorted({r["placement"] for r in (result(runs, l) for l in t2_labels) if r})
    usable = all(r["usable"] for r in (result(runs, l) for l in t2_labels + host_labels) if r)
    figures = {}
    for name, key in (("t2_alloc_ratio", "cold_ms"), ("t2_alloc_ratio_warm", "warm_ms")):
        t2, t2_all = median_of(runs, "alloc-t2-", key)
        host, host_all = median_of(runs, "alloc-hostalloc-", key)
        detail = {"t2_ms_each": t2_all, "cudaHostAlloc_ms_each": host_all, "t2_placement": placements,
                  "all_usable": usable,
                  # Per process, the shim's own account of its T2 allocations (cold, then warm).
                  "t2_phases_each": [runs[l]["t2_phases"] for l in t2_labels if runs[l]["t2_phases"]]}
        if placements and placements != ["host"]:
            detail["note"] = f"the 1 GiB allocation landed in {placements}, not T2"
        ratio = t2 / host if t2 is not None and host else None
        figures[name] = figure(name, t2, host, ratio, "ms", detail, missing)
    return figures


def paired(runs, name, prefix, key, unit, ratio_of):
    """Pairs r ran PREFIX-plain-r and PREFIX-shim-r back to back (bench/run.sh's
    `paired`): the figure is the median of the pairs' ratios (a drift of the machine
    between pairs cancels out), with their spread; value and baseline are the medians of
    the per-process figures. `ratio_of(with_shim, without)` is a pair's ratio, in the
    figure's direction (GOALS)."""
    labels = labels_with(runs, prefix)
    pairs = sorted({l.rsplit("-", 1)[1] for l in labels}, key=lambda r: int(r) if r.isdigit() else 0)
    shim, shim_all = median_of(runs, f"{prefix}shim-", key)
    plain, plain_all = median_of(runs, f"{prefix}plain-", key)
    pair_ratios = []
    for r in pairs:
        with_shim, without = result(runs, f"{prefix}shim-{r}"), result(runs, f"{prefix}plain-{r}")
        if with_shim and without and with_shim[key] and without[key]:
            pair_ratios.append(ratio_of(with_shim[key], without[key]))
    ratio = statistics.median(pair_ratios) if pair_ratios else None
    per_process = "us_each_process" if unit == "us" else "each_process"
    detail = {"pair_ratios": pair_ratios, f"with_shim_{per_process}": shim_all, f"without_{per_process}": plain_all}
    if pair_ratios:
        detail["pair_ratio_min"], detail["pair_ratio_max"] = min(pair_ratios), max(pair_ratios)
    missing = why_missing(runs, labels) if labels else "not run"
    return figure(name, shim, plain, ratio, unit, detail, missing)


def hook(runs):
    """The hooks' cost: time per call, with over without the shim."""
    return {name: paired(runs, name, "hook-", key, "us", lambda with_shim, without: with_shim / without)
            for name, key in (("hook_overhead_ratio", "malloc_free_us"), ("hook_overhead_ratio_meminfo", "meminfo_us"))}


def launch(runs):
    """Launch observation's cost: launch rates (a kernel with 8 pointers and a 256-byte
    struct) from 1 and from 4 threads, and from 1 with its buffers movable and cut into
    parts (live tiering on: starts noted, kernel times sampled), without over with the
    shim; and transformers' generate all in VRAM, its tokens/s with over without."""
    figures = {name: paired(runs, name, prefix, "launches_per_s", "launches/s",
                            lambda with_shim, without: without / with_shim)
               for name, prefix in (("launch_overhead_ratio", "launch1-"), ("launch_overhead_ratio_4_threads", "launch4-"),
                                    ("launch_overhead_ratio_movable", "launch-movable1-"))}
    figures["launch_generate_vs_plain"] = paired(runs, "launch_generate_vs_plain", "launch-generate-", "decode_tok_s",
                                                 "tok/s", lambda with_shim, without: with_shim / without)
    return figures


def bandwidths(runs):
    """HBM read bandwidth (the largest buffer measured) and, at each size, the link's
    rate for T2 reads: the faster of the naive zero-copy read of pinned memory and the
    pinned copy (staging reads at the latter), all from this run."""
    hostbufs = [r for r in (result(runs, l) for l in labels_with(runs, "hostbuf-")) if r]
    if not hostbufs:
        return None, {}
    largest = max(hostbufs, key=lambda r: r["gib"])
    return largest["hbm_read_GBps"], {r["gib"]: max(r["zero_copy_read_GBps"], r["memcpy_h2d_GBps"]) for r in hostbufs}


def decode_bound(run, hbm, link):
    """Tokens/s the bandwidths allow for `run`'s placement: 1 / (bytes in VRAM / HBM rate
    + bytes in T2 / the link's best rate, the faster of zero-copy and the copy engine at
    whichever size the run measured it fastest: a bound must not fall with one slow
    measurement, and the copy engine, which staging reads T2 with, moves any size past a
    GiB at one rate); (None, {}) without data."""
    if not (run and hbm and link):
        return None, {}
    per_token = run["bytes_per_token_by_placement"]
    in_vram, in_t2 = per_token.get("vram", 0), per_token.get("host", 0)
    fastest_at = max(link, key=lambda gib: link[gib])
    rate = link[fastest_at]
    bound = 1.0 / (in_vram / (hbm * 1e9) + in_t2 / (rate * 1e9))
    detail = {"bytes_per_token_vram": in_vram, "bytes_per_token_t2": in_t2, "hbm_GBps": hbm,
              "link_GBps": rate, "link_measured_at_gib": fastest_at, "bound_tok_s": bound}
    if in_t2 == 0:
        detail["note"] = "no weight landed in T2: the shim did not apply the budget"
    if not run.get("shim_loaded"):
        detail["note"] = "the shim was not loaded in the greenboost process"
    return bound, detail


def cold_pass_tok_s(run):
    """The first pass's tokens/s (each key length met for the first time; decode.py
    times the second), or None where the run has none."""
    cold_ms = (run or {}).get("cold_decode_step_ms_median")
    return 1e3 / cold_ms if cold_ms else None


def add_cold_pass(detail, run, bound):
    """The first pass's rate and its ratio to the bound, beside a decode figure."""
    cold = cold_pass_tok_s(run)
    if cold:
        detail["cold_pass_tok_s"] = cold
        if bound:
            detail["cold_pass_vs_bound"] = cold / bound


def prefill_bound(run, vram_run, copy_rate, prompt):
    """(bound ms, detail): a prefill must copy each T2 weight byte once over the link and
    cannot beat the all-VRAM prefill; (None, detail) without the data."""
    in_t2 = (run or {}).get("weights_by_placement", {}).get("host", 0)
    if not (run and vram_run and copy_rate and prompt and in_t2):
        return None, {}
    copy_ms = in_t2 / (copy_rate * 1e9) * 1e3
    vram_ms = prompt / vram_run["prefill_tok_s"] * 1e3
    return max(copy_ms, vram_ms), {"t2_weight_bytes": in_t2, "pinned_copy_GBps": copy_rate, "copy_ms": copy_ms,
                                   "all_vram_ms": vram_ms, "measured_ms": prompt / run["prefill_tok_s"] * 1e3}


def decode(runs):
    order = ["vram", "greenboost", "greenboost_sliced", "greenboost_ahead", "greenboost_baseline", "hf_vram", "hf_greenboost", "cpu_offload", "uvm", "uvm_split"]
    names = sorted((l[len("decode-"):] for l in labels_with(runs, "decode-")),
                   key=lambda c: (order.index(c) if c in order else len(order), c))
    configs = {c: result(runs, "decode-" + c) for c in names}
    table = {}
    for config, r in configs.items():
        if r is None:
            table[config] = {"missing": runs["decode-" + config]["problem"]}
            continue
        table[config] = {k: r[k] for k in ("prefill_tok_s", "prefill_s_each", "decode_tok_s", "decode_tok_s_mean", "decode_step_ms_median",
                                           "cold_decode_step_ms_median",
                                           "new_tokens", "same_tokens_when_repeated", "weights_by_placement", "bytes_per_token_by_placement", "kv_cache_by_placement",
                                           "setup_s", "shim_loaded", "profile") if k in r}
        if cold_pass_tok_s(r):
            table[config]["cold_pass_tok_s"] = cold_pass_tok_s(r)
        for k in ("uvm_vram_peak_bytes", "uvm_managed_peak_bytes", "device_map_cpu_modules"):
            if k in r:
                table[config][k] = r[k]
        if runs["decode-" + config]["shim_summary"]:
            table[config]["shim_summary"] = runs["decode-" + config]["shim_summary"]
    reference = configs.get("vram")
    for config, r in configs.items():
        if r is None or config == "vram":
            continue
        if reference is None:
            table[config]["tokens_match_vram"] = None
            continue
        n = min(len(r["tokens"]), len(reference["tokens"]))
        diverge = next((i for i in range(n) if r["tokens"][i] != reference["tokens"][i]), None)
        table[config]["tokens_compared"] = n
        table[config]["tokens_match_vram"] = diverge is None
        if diverge is not None:
            table[config]["first_divergence_at"] = diverge
    model = None
    any_result = next((r for r in configs.values() if r), None)
    if any_result:
        model = {k: any_result[k] for k in ("shape", "layers", "weight_bytes", "budget_bytes", "prompt_tokens", "torch",
                                            "transformers")}
        model["budget_bytes"] = max((r["budget_bytes"] for r in configs.values() if r), default=0)

    gb = configs.get("greenboost")
    hbm, link = bandwidths(runs)
    figures = {}
    bound, bound_detail = decode_bound(gb, hbm, link)

    def config_missing(name):
        label = "decode-" + name
        return runs[label]["problem"] if label in runs else "not run"

    gb_tok = gb["decode_tok_s"] if gb else None
    add_cold_pass(bound_detail, gb, bound)
    sliced = configs.get("greenboost_sliced")
    if sliced and bound:
        # The same run with pipelined staging (GREENBOOST_STAGE_SLICES=4).
        bound_detail["sliced_tok_s"] = sliced["decode_tok_s"]
        bound_detail["sliced_vs_bound"] = sliced["decode_tok_s"] / bound
    if gb and bound:
        figures["decode_vs_bound"] = figure("decode_vs_bound", gb_tok, bound, gb_tok / bound, "tokens/s", bound_detail)
    else:
        figures["decode_vs_bound"] = figure("decode_vs_bound", gb_tok, bound, None, "tokens/s", bound_detail,
                                            config_missing("greenboost") if not gb else "bandwidths not measured (bw)")
    hf = configs.get("hf_greenboost")
    if "decode-hf_greenboost" in runs:
        hf_bound, hf_detail = decode_bound(hf, hbm, link)
        hf_tok = hf["decode_tok_s"] if hf else None
        add_cold_pass(hf_detail, hf, hf_bound)
        if configs.get("hf_vram"):
            hf_detail["hf_all_vram_tok_s"] = configs["hf_vram"]["decode_tok_s"]
            if cold_pass_tok_s(configs["hf_vram"]):
                hf_detail["hf_all_vram_cold_tok_s"] = cold_pass_tok_s(configs["hf_vram"])
        if gb:
            hf_detail["bench_loop_tok_s"] = gb_tok
        figures["decode_hf_vs_bound"] = figure(
            "decode_hf_vs_bound", hf_tok, hf_bound, hf_tok / hf_bound if hf and hf_bound else None, "tokens/s", hf_detail,
            config_missing("hf_greenboost") if not hf else "bandwidths not measured (bw)")
    for name, other in (("decode_vs_cpu_offload", "cpu_offload"), ("decode_vs_uvm", "uvm")):
        base = configs.get(other)
        base_tok = base["decode_tok_s"] if base else None
        ratio = gb_tok / base_tok if gb and base else None
        missing = "; ".join(m for m in (None if gb else config_missing("greenboost"),
                                        None if base else config_missing(other)) if m)
        figures[name] = figure(name, gb_tok, base_tok, ratio, "tokens/s", None, missing)
    # uvm_split (the same allocator with GreenBoost's placement rule) is not issue 4's
    # contender; its ratio is a detail of decode_vs_uvm.
    split = configs.get("uvm_split")
    if split:
        figures["decode_vs_uvm"]["detail"] = {
            "uvm_split_tok_s": split["decode_tok_s"],
            "greenboost_vs_uvm_split": gb_tok / split["decode_tok_s"] if gb and split["decode_tok_s"] else None}
    vram_prefill = reference["prefill_tok_s"] if reference else None
    gb_prefill = gb["prefill_tok_s"] if gb else None
    ratio = gb_prefill / vram_prefill if gb and reference else None
    missing = "; ".join(m for m in (None if gb else config_missing("greenboost"),
                                    None if reference else config_missing("vram")) if m)
    figures["prefill_vs_vram"] = figure("prefill_vs_vram", gb_prefill, vram_prefill, ratio, "tokens/s", None, missing)
    copy_rates = [r["memcpy_h2d_GBps"] for r in (result(runs, l) for l in labels_with(runs, "hostbuf-")) if r]
    prompt = model["prompt_tokens"] if model else None
    for name, config in (("prefill_vs_bound", "greenboost"), ("prefill_sliced_vs_bound", "greenboost_sliced"),
                         ("prefill_ahead_vs_bound", "greenboost_ahead")):
        if "decode-" + config not in runs:
            continue
        run = configs.get(config)
        bound_ms, detail = prefill_bound(run, reference, max(copy_rates, default=None), prompt)
        missing = "; ".join(m for m in (None if run else config_missing(config),
                                        None if reference else config_missing("vram"),
                                        None if copy_rates else "bandwidths not measured (bw)") if m)
        figures[name] = figure(name, detail.get("measured_ms"), bound_ms,
                               bound_ms / detail["measured_ms"] if bound_ms else None, "ms", detail, missing or None)
    if "decode-greenboost_baseline" in runs:
        earlier = configs.get("greenboost_baseline")
        missing = "; ".join(m for m in (None if gb else config_missing("greenboost"),
                                        None if earlier else config_missing("greenboost_baseline")) if m)
        for name, key in (("decode_vs_baseline_shim", "decode_tok_s"), ("prefill_vs_baseline_shim", "prefill_tok_s")):
            ours, theirs = (gb or {}).get(key), (earlier or {}).get(key)
            figures[name] = figure(name, ours, theirs, ours / theirs if ours and theirs else None, "tokens/s", None, missing)
    return figures, {"model": model, "configs": table}


def environment(raw):
    env = {}
    path = os.path.join(raw, "environment.txt")
    if os.path.exists(path):
        for line in open(path):
            key, _, value = line.partition(":")
            if value:
                env[key.strip()] = value.strip()
    return env


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--raw", required=True)
    parser.add_argument("--results", required=True)
    parser.add_argument("--sections", default="")
    args = parser.parse_args()
    runs = load(args.raw)
    env = environment(args.raw)
    sizes = sorted({l.split("-", 1)[1] for l in runs if l.startswith(("t2read-", "hostbuf-"))}, key=float)
    now = datetime.datetime.now(datetime.timezone.utc)
    commit = env.get("commit", "unknown")
    figures = {}
    figures["t2_read_ratio"] = t2_read(runs, sizes)
    figures["t2_read_vs_zero_copy"] = t2_read_vs_zero_copy(figures["t2_read_ratio"])
    figures.update(t2_alloc(runs))
    figures.update(hook(runs))
    figures.update(launch(runs))
    decode_figures, decode_table = decode(runs)
    figures.update(decode_figures)
    figures.update(report_llamacpp.figures(args.results, commit))
    figures.update(report_longctx.figures(runs, result, figure, bandwidths(runs)))
    report = {
        "schema": 1,
        "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit,
        "environment": env,
        "sections": [s for s in args.sections.split(",") if s],
        "figures": figures,
        "decode": decode_table,
        "problems": [r["problem"] for r in runs.values() if r["problem"]],
        "measurements": {label: r["result"] for label, r in runs.items() if r["result"]},
    }
    report["limits"] = limits(report) | report_llamacpp.limits(figures)
    os.makedirs(args.results, exist_ok=True)
    stem = f"{now.strftime('%Y-%m-%d')}-{commit}"
    with open(os.path.join(args.results, stem + ".json"), "w") as out:
        out.write(json.dumps(report, indent=1, sort_keys=False) + "\n")
    # latest.json is generated, not committed: the newest dated report, this one.
    results_latest.write(args.results)
    md = markdown(report)
    with open(os.path.join(args.results, stem + ".md"), "w") as out:
        out.write(md)
    sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
