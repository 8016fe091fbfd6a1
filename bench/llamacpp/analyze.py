#!/usr/bin/env python3
"""Helpers of bench/llamacpp/run.sh: plan the partial-offload -ngl, read llama-bench's
logs, and write the report. Standard library only, except `fit-ngl`, which reads the
GGUF with the carried gguf-py package.

  analyze.py fit-ngl MODEL --budget-mib B --compute-mib C --ctx N [--gguf-py DIR]
      prints a JSON plan: per-layer weight and KV bytes, and the most layers whose
      weights + KV cache + compute buffer fit the budget
  analyze.py fit-ncmoe MODEL --budget-mib B --compute-mib C --ctx N [--gguf-py DIR]
      the same for a mixture-of-experts model run with -ngl 99: the fewest layers whose
      experts go to the CPU (--n-cpu-moe) so that the rest fits the budget
  analyze.py buffers STDERR_LOG
      prints the device buffers llama.cpp reported (-v log) as JSON, in MiB
  analyze.py report RAW_DIR OUT_DIR
      reads what run.sh captured in RAW_DIR and writes OUT_DIR/llamacpp-<kind>-<date>-<commit>.md
      and OUT_DIR/llamacpp-<kind>-latest.json (kind: dense, moe, longctx), with the bounds
      of bound.py; prints the markdown path
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
from pathlib import Path

import bound

MIB = 1024 * 1024
# llama.cpp rounds the KV cache length up to a multiple of 256 cells.
KV_PAD = 256

# Order and meaning of the configurations run.sh captures (file stem -> title).
CONFIGS = {
    "vram": "all in VRAM (-ngl 99, no shim)",
    "partial": "llama.cpp partial offload (-ngl N fitted to the budget)",
    "cpu_moe": "llama.cpp experts on the CPU (-ngl 99 --n-cpu-moe N fitted to the budget)",
    "ot_cpu": "llama.cpp every expert on the CPU (-ngl 99 -ot exps=CPU)",
    "nkvo": "llama.cpp KV cache and attention on the CPU (-ngl 99 -nkvo 1)",
    "greenboost": "GreenBoost (-ngl 99, LD_PRELOAD shim, GREENBOOST_VRAM_BUDGET)",
    "greenboost_tiering": "GreenBoost with live tiering on (GREENBOOST_TIERING=on: buffers in 2 MiB parts placed by heat)",
}

# The shim's live-tiering summary: what moved to VRAM, and the launches timed.
PROMOTED_RE = re.compile(r"live tiering: (\d+) movable allocations; promoted ([\d.]+) MiB in (\d+) moves")
# (Before the samples' outcomes were added: "not fully read, N timed)".)
TIMED_RE = re.compile(r"not fully read[,;] (\d+) timed\b")

EXPERT_RE = re.compile(r"blk\.(\d+)\.ffn_(gate|up|down)_exps\.")

BUFFER_RE = re.compile(r"\b(\w+) (model|KV|compute|RS|output) buffer size =\s*([\d.]+) MiB")


def gguf_tensors(args: argparse.Namespace) -> tuple[list[tuple[str, int]], int | None]:
    """(name, bytes) of every tensor of `args.model`, and the width of a layer's K (and V)
    rows, which sizes the KV cache (None without attention blocks)."""
    if args.gguf_py:
        sys.path.insert(0, args.gguf_py)
    from gguf import GGUFReader  # noqa: E402

    tensors, kv_dim = [], None
    for t in GGUFReader(args.model).tensors:
        tensors.append((t.name, int(t.n_bytes)))
        if t.name == "blk.0.attn_k.weight":
            kv_dim = int(t.shape[1])  # GGUF order: (n_embd, n_embd_k_gqa)
    return tensors, kv_dim


def kv_cells(ctx: int) -> int:
    return math.ceil(ctx / KV_PAD) * KV_PAD


def fit_ngl(args: argparse.Namespace) -> int:
    tensors, kv_dim = gguf_tensors(args)
    layer_bytes: dict[int, int] = {}
    for name, n_bytes in tensors:
        m = re.match(r"blk\.(\d+)\.", name)
        if m:
            layer_bytes[int(m.group(1))] = layer_bytes.get(int(m.group(1)), 0) + n_bytes
    if not layer_bytes or kv_dim is None:
        print(f"fit-ngl: {args.model} has no llama blocks", file=sys.stderr)
        return 1
    n_layer = len(layer_bytes)
    per_layer = max(layer_bytes.values())
    cells = kv_cells(args.ctx)
    kv_per_layer = 2 * cells * kv_dim * 2  # K and V, f16
    budget = args.budget_mib * MIB
    room = budget - args.compute_mib * MIB
    ngl = max(0, min(n_layer, room // (per_layer + kv_per_layer)))
    print(json.dumps({
        "n_layer": n_layer, "layer_bytes": per_layer, "kv_bytes_per_layer": kv_per_layer,
        "kv_cells": cells, "budget_mib": args.budget_mib, "compute_mib": args.compute_mib,
        "ngl": int(ngl),
        "planned_mib": round((ngl * (per_layer + kv_per_layer)) / MIB + args.compute_mib, 1),
    }))
    return 0


def fit_ncmoe(args: argparse.Namespace) -> int:
    tensors, kv_dim = gguf_tensors(args)
    experts: dict[int, int] = {}
    on_gpu = 0  # with -ngl 99: every block tensor and the output; token_embd stays on the CPU
    for name, n_bytes in tensors:
        m = EXPERT_RE.match(name)
        if m:
            experts[int(m.group(1))] = experts.get(int(m.group(1)), 0) + n_bytes
        elif name != "token_embd.weight":
            on_gpu += n_bytes
    if not experts or kv_dim is None:
        print(f"fit-ncmoe: {args.model} has no expert tensors", file=sys.stderr)
        return 1
    n_layer = len(experts)
    per_layer = max(experts.values())
    cells = kv_cells(args.ctx)
    kv = n_layer * 2 * cells * kv_dim * 2  # K and V, f16
    room = args.budget_mib * MIB - args.compute_mib * MIB - on_gpu - kv
    # --n-cpu-moe N keeps the experts of the first N layers on the CPU.
    on_device_layers = max(0, min(n_layer, room // per_layer))
    ncmoe = n_layer - on_device_layers
    print(json.dumps({
        "n_layer": n_layer, "expert_bytes_per_layer": per_layer, "other_gpu_bytes": on_gpu, "kv_bytes": kv,
        "kv_cells": cells, "budget_mib": args.budget_mib, "compute_mib": args.compute_mib, "ncmoe": int(ncmoe),
        "planned_mib": round((on_gpu + kv + on_device_layers * per_layer) / MIB + args.compute_mib, 1),
        "fits": room >= 0,
    }))
    return 0


def device_buffers(log_text: str) -> dict[str, float]:
    """Largest size of each device buffer kind llama.cpp logged (a context is created per
    test, so compute buffers repeat); keys like "CUDA0 model"."""
    found: dict[str, float] = {}
    for name, kind, mib in BUFFER_RE.findall(log_text):
        key = f"{name} {kind}"
        found[key] = max(found.get(key, 0.0), float(mib))
    return found


def vram_buffers_mib(buffers: dict[str, float]) -> float | None:
    """Sum of the buffers llama.cpp placed on the GPU (CUDA0, not CUDA_Host)."""
    dev = [v for k, v in buffers.items() if re.match(r"CUDA\d+ ", k)]
    return round(sum(dev), 1) if dev else None


def read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def bench_results(jsonl: str) -> dict[str, dict]:
    """pp and tg results from llama-bench -o jsonl output (lines that do not parse, e.g.
    a run cut short, are skipped)."""
    out: dict[str, dict] = {}
    for line in jsonl.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if r.get("n_prompt", 0) > 0 and r.get("n_gen", 0) == 0:
            key = f"pp{r['n_prompt']}"
        elif r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0:
            key = f"tg{r['n_gen']}"
        else:
            continue
        out[key] = {"tok_s": round(float(r["avg_ts"]), 2),
                    "stddev": round(float(r.get("stddev_ts", 0.0)), 2),
                    "reps": len(r.get("samples_ts", [])) or None,
                    "n_gpu_layers": r.get("n_gpu_layers"),
                    "build_commit": r.get("build_commit"),
                    "gpu_info": r.get("gpu_info"),
                    "model_size": r.get("model_size"),
                    "flash_attn": r.get("flash_attn")}
    return out


def vram_peaks(samples: str) -> dict:
    """Peaks from run.sh's poller lines: '<epoch> <gpu used MiB> <pid,used;pid,used;...>'."""
    gpu, proc, n = [], [], 0
    for line in samples.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        n += 1
        if parts[1].isdigit():
            gpu.append(int(parts[1]))
        for app in parts[2].split(";"):
            fields = app.split(",")
            if len(fields) == 2 and fields[1].isdigit():
                proc.append(int(fields[1]))
    return {"samples": n, "gpu_used_peak_mib": max(gpu) if gpu else None,
            "process_peak_mib": max(proc) if proc else None}


def report(args: argparse.Namespace) -> int:
    raw, out_dir = Path(args.raw), Path(args.out)
    meta = json.loads(read_text(raw / "meta.json") or "{}")
    baseline = meta.get("gpu_used_baseline_mib")
    configs = {}
    for stem, title in CONFIGS.items():
        rc_text = read_text(raw / f"{stem}.rc").strip()
        if not rc_text and stem in ("partial", "cpu_moe", "ot_cpu", "nkvo", "greenboost_tiering"):
            continue  # the other model kind's comparison, or a run from before it existed
        if not rc_text:
            configs[stem] = {"title": title, "status": "not run"}
            continue
        if rc_text == "skipped":
            configs[stem] = {"title": title, "status": "skipped: the run's time limit was spent"}
            continue
        if rc_text == "asked":
            configs[stem] = {"title": title, "status": "skipped: LLAMACPP_SKIP"}
            continue
        err = read_text(raw / f"{stem}.err")
        results = bench_results(read_text(raw / f"{stem}.jsonl"))
        buffers = device_buffers(err)
        peaks = vram_peaks(read_text(raw / f"{stem}.vram"))
        if peaks["gpu_used_peak_mib"] is not None and isinstance(baseline, int):
            peaks["gpu_used_peak_minus_idle_mib"] = peaks["gpu_used_peak_mib"] - baseline
        summary = [ln.strip() for ln in err.splitlines() if "summary:" in ln]
        rc = int(rc_text) if rc_text.lstrip("-").isdigit() else rc_text
        status = "ok" if rc == 0 and results else (
            "timed out" if rc in (124, 137) else f"failed (exit {rc})")
        if rc == 0 and not results:
            status = "failed (no results parsed)"
        failure = None
        if status != "ok":
            tail = [ln for ln in err.splitlines() if ln.strip()][-6:]
            failure = "\n".join(tail)
        configs[stem] = {
            "title": title, "status": status, "exit": rc,
            "ngl": read_text(raw / f"{stem}.ngl").strip() or None,
            "wall_s": float(read_text(raw / f"{stem}.wall").strip() or "nan"),
            "results": results, "device_buffers_mib": buffers,
            "vram_buffers_mib": vram_buffers_mib(buffers), "vram": peaks,
            "buffers_within_budget": (vram_buffers_mib(buffers) <= meta["budget_mib"]
                                      if vram_buffers_mib(buffers) and meta.get("budget_mib")
                                      else None),
            "shim_summary": summary[-1] if summary else None, "failure_tail": failure,
        }
        if stem in ("greenboost", "greenboost_tiering"):
            configs[stem]["tiering"] = tiering_summary(summary)

    def ts(stem: str, test: str) -> float | None:
        return configs.get(stem, {}).get("results", {}).get(test, {}).get("tok_s")

    pp, tg = f"pp{meta.get('n_prompt', 512)}", f"tg{meta.get('n_gen', 128)}"
    pairs = [("greenboost", "cpu_moe"), ("greenboost", "ot_cpu"), ("greenboost", "nkvo"), ("greenboost", "partial"),
             ("greenboost", "vram"), ("cpu_moe", "vram"), ("ot_cpu", "vram"), ("nkvo", "vram"), ("partial", "vram")]
    pairs += [("greenboost_tiering", b) for b in ("cpu_moe", "ot_cpu", "nkvo", "partial", "vram", "greenboost")]
    ratios = {f"{a}_vs_{b}_{test}": bound.ratio(ts(a, test), ts(b, test))
              for a, b in pairs if a in configs and b in configs for test in (tg, pp)}
    kind = "longctx" if meta.get("depth") else "moe" if (meta.get("model") or {}).get("experts") else "dense"
    limits = bound.bounds(raw, configs, meta)
    figures = headline_figures(kind, configs, limits, ts, pp, tg)
    date = meta.get("date") or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    commit = meta.get("greenboost_commit", "unknown")
    doc = {"kind": f"llamacpp-{kind}", "date": date, "meta": meta, "configs": configs, "ratios": ratios,
           "bounds": limits, "figures": figures}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"llamacpp-{kind}-latest.json").write_text(json.dumps(doc, indent=2) + "\n")
    md_path = out_dir / f"llamacpp-{kind}-{date}-{commit}.md"
    md_path.write_text(markdown(doc, pp, tg))
    print(md_path)
    return 0


def headline_figures(kind: str, configs: dict, limits: dict, ts, pp: str, tg: str) -> dict:
    """The figures #13 names: GreenBoost against its tg bound, and against llama.cpp's
    best own answer at the same VRAM (the faster of --n-cpu-moe and -ot for experts,
    -nkvo for a long context)."""
    if kind == "dense":
        return {}
    rivals = ["cpu_moe", "ot_cpu"] if kind == "moe" else ["nkvo"]
    out = {f"llamacpp_{kind}_tg_vs_bound": limits.get("greenboost", {}).get("tg_vs_bound")}
    if "greenboost_tiering" in limits:
        out[f"llamacpp_{kind}_tg_tiering_vs_bound"] = limits["greenboost_tiering"].get("tg_vs_bound")
    for test, name in ((tg, "tg"), (pp, "pp")):
        best = max((ts(r, test) or 0 for r in rivals), default=0)
        out[f"llamacpp_{kind}_{name}"] = bound.ratio(ts("greenboost", test), best or None)
        if (configs.get("greenboost_tiering") or {}).get("status") == "ok":
            out[f"llamacpp_{kind}_{name}_tiering"] = bound.ratio(ts("greenboost_tiering", test), best or None)
    # What live tiering moved into VRAM: the parts kernels kept reading.
    for stem, name in (("greenboost", "promoted_mib"), ("greenboost_tiering", "tiering_promoted_mib")):
        promoted = ((configs.get(stem) or {}).get("tiering") or {}).get("promoted_mib")
        if promoted is not None:
            out[f"llamacpp_{kind}_{name}"] = promoted
    return out


def tiering_summary(summary: list[str]) -> dict:
    """What the shim's exit summary says live tiering did: movable allocations, MiB
    promoted to VRAM and in how many moves, launches timed (None where not said)."""
    text = "\n".join(summary)
    moved, timed = PROMOTED_RE.search(text), TIMED_RE.search(text)
    return {"movable_allocs": int(moved.group(1)) if moved else None,
            "promoted_mib": float(moved.group(2)) if moved else None,
            "promotions": int(moved.group(3)) if moved else None,
            "launches_timed": int(timed.group(1)) if timed else None}


def fmt(v, unit: str = "") -> str:
    return "-" if v is None else f"{v}{unit}"


def bench_identity(configs: dict) -> str:
    """build commit, GPU and model size as llama-bench itself printed them (first result)."""
    for cfg in configs.values():
        for r in cfg.get("results", {}).values():
            return (f"build {r.get('build_commit') or '?'}, GPU {r.get('gpu_info') or '-'}, "
                    f"model {r.get('model_size') or '?'} bytes, flash_attn {r.get('flash_attn')}")
    return "-"


def plan_text(plan: dict | None) -> str:
    if not plan:
        return "-"
    if "ncmoe" in plan:
        return (f"--n-cpu-moe {plan['ncmoe']} of {plan['n_layer']} layers: "
                f"{plan['expert_bytes_per_layer'] / MIB:.1f} MiB of experts per layer, "
                f"{plan['other_gpu_bytes'] / MIB:.0f} MiB of other weights, {plan['kv_bytes'] / MIB:.0f} MiB KV "
                f"({plan['kv_cells']} cells), compute buffer {plan['compute_mib']} MiB (probe run) -> "
                f"{plan['planned_mib']} MiB of {plan['budget_mib']} MiB")
    return (f"-ngl {plan['ngl']} of {plan['n_layer']} layers: "
            f"{plan['layer_bytes'] / MIB:.1f} MiB weights + {plan['kv_bytes_per_layer'] / MIB:.1f} MiB "
            f"KV ({plan['kv_cells']} cells) per layer, compute buffer {plan['compute_mib']} MiB "
            f"(probe run) -> {plan['planned_mib']} MiB of {plan['budget_mib']} MiB")


def markdown(doc: dict, pp: str, tg: str) -> str:
    m, c = doc["meta"], doc["configs"]
    model = m.get("model", {})
    lines = [
        f"# llama.cpp vs GreenBoost ({doc['date']}, GreenBoost {m.get('greenboost_commit', '?')})",
        "",
        f"- device: {m.get('gpu') or '?'}, driver {m.get('driver') or '?'}, CUDA {m.get('cuda') or '?'}",
        f"- host: {m.get('cpu', '?')}, {m.get('cpus', '?')} CPUs, {m.get('ram', '?')} RAM",
        f"- llama.cpp: {m.get('llama_version', '?')}; llama-bench built "
        f"{m.get('llama_build', '?')}",
        f"- shim: {m.get('shim') or '?'} (shim commit {m.get('shim_commit') or '?'})",
        f"- llama-bench reports: {bench_identity(c)}",
        f"- model: random-weight {model.get('arch', 'llama')}, shape {model.get('shape', '?')} (hidden "
        f"{model.get('hidden')}, {model.get('layers')} layers, "
        + (f"{model['experts']} experts of ffn {model.get('expert_ffn')}, {model.get('experts_used')} used per "
           f"token, " if model.get("experts") else f"ffn {model.get('ffn')}, ")
        + f"{model.get('heads')}/{model.get('kv_heads')} heads, vocab {model.get('vocab')}), F16, "
        f"{fmt(model.get('file_bytes'))} bytes; written in {fmt(model.get('seconds'))} s",
        f"- VRAM budget: {m.get('budget_mib', '?')} MiB; llama-bench {pp} and {tg}, "
        f"-r {m.get('reps', '?')}, same binary and flags for every configuration",
        f"- {'experts-on-CPU' if (m.get('ngl_plan') or {}).get('ncmoe') is not None else 'partial-offload'} "
        f"plan: {plan_text(m.get('ngl_plan'))}",
        "",
        f"| configuration | placement flags | {pp} tok/s | {tg} tok/s | llama.cpp GPU buffers MiB "
        f"| process peak VRAM MiB | GPU used peak - idle MiB | status |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for stem, cfg in c.items():
        if "results" not in cfg:
            lines.append(f"| {cfg['title']} | - | - | - | - | - | - | {cfg['status']} |")
            continue
        r, v = cfg["results"], cfg["vram"]

        def cell(test: str) -> str:
            x = r.get(test)
            return "-" if not x else f"{x['tok_s']} ± {x['stddev']}"
        lines.append(
            f"| {cfg['title']} | {fmt(cfg['ngl'])} | {cell(pp)} | {cell(tg)} "
            f"| {fmt(cfg['vram_buffers_mib'])} | {fmt(v.get('process_peak_mib'))} "
            f"| {fmt(v.get('gpu_used_peak_minus_idle_mib'))} | {cfg['status']} |")
    lines += ["", "| ratio | value |", "|---|---|"]
    lines += [f"| {k} | {fmt(v)} |" for k, v in {**doc.get("figures", {}), **doc["ratios"]}.items()]
    lines += bounds_markdown(doc.get("bounds") or {}, c)
    lines += ["", "## Per configuration", ""]
    for stem, cfg in c.items():
        lines.append(f"### {cfg['title']}")
        if "results" not in cfg:
            lines += [cfg["status"], ""]
            continue
        lines.append(f"- status: {cfg['status']}, wall {cfg['wall_s']} s")
        bufs = ", ".join(f"{k} {v}" for k, v in sorted(cfg["device_buffers_mib"].items()))
        lines.append(f"- buffers llama.cpp reported (MiB): {bufs or '-'}; GPU buffers within "
                     f"the budget: {fmt(cfg['buffers_within_budget'])}")
        lines.append(f"- VRAM samples: {cfg['vram']['samples']} (every 0.2 s)")
        if cfg.get("shim_summary"):
            lines.append(f"- shim: `{cfg['shim_summary']}`")
        if cfg.get("tiering"):
            t = cfg["tiering"]
            lines.append(f"- live tiering: {fmt(t['movable_allocs'])} movable allocations, {fmt(t['promoted_mib'])} MiB "
                         f"promoted to VRAM in {fmt(t['promotions'])} moves, {fmt(t['launches_timed'])} launches timed")
        if cfg.get("failure_tail"):
            lines += ["- last log lines:", "", "```", cfg["failure_tail"], "```"]
        lines.append("")
    if m.get("notes"):
        lines += ["## Notes", ""] + [f"- {n}" for n in m["notes"]] + [""]
    return "\n".join(lines)


def bounds_markdown(limits: dict, configs: dict) -> list[str]:
    """What bounds each configuration's generation, from the run's own measurements."""
    rates = limits.get("rates")
    if not rates:
        return ["", "No bounds: the layout or the rates were not measured (see Notes)."]
    lines = ["", "## What bounds generation", "",
             f"Measured in this run on the idle GPU: pinned memcpy over the link {rates['link_gbs']} GB/s, "
             f"HBM reads {rates['hbm_gbs']} GB/s, host RAM reads by {rates.get('cpu_threads')} CPU threads "
             f"{rates['host_ram_gbs']} GB/s. A generated token reads the weights of the model buffer (of the "
             "experts, the used share) and the KV cache; the bound is the time to stream those bytes from "
             "where they are at those rates, one place after the other. Where live tiering moved memory "
             "(on, or at the defaults once the budget binds: the shim's summary counts movable allocations), "
             "where each 2 MiB part sits is not logged: its row is the best placement in the budget (less the "
             "compute buffer), the bytes read most per byte held in VRAM, issue 36's bound.", "",
             "| configuration | GB per token from VRAM | over the link (T2) | host RAM (CPU) | tg bound tok/s "
             "| measured / bound |", "|---|---|---|---|---|---|"]
    for stem, b in limits.items():
        if stem == "rates":
            continue
        r = b["read_per_token_gb"]
        lines.append(f"| {configs[stem]['title']} | {r['vram']} | {r['t2']} | {r['host_ram']} "
                     f"| {fmt(b['tg_bound_tok_s'])} | {fmt(b['tg_vs_bound'])} |")
    below = limits.get("greenboost", {}).get("below_bound")
    if below:
        lines += ["", shortfall_text(below, rates)]
    share = configs.get("greenboost", {}).get("t2_share")
    if share:
        lines += ["", f"GreenBoost's placement (the shim's log): {share['model'] * 100:.1f}% of the model "
                  f"buffer in T2, KV cache share in T2 {fmt(share['kv'])}."]
    return lines


def shortfall_text(below: dict, rates: dict) -> str:
    """Where GreenBoost's token time goes beyond its bound, from `bound.below_bound`."""
    zero_copy = rates.get("zero_copy_gbs")
    t2 = f"{below['t2_at_link']} ms at the copy engine's {rates['link_gbs']} GB/s that the bound takes"
    if below.get("t2_at_zero_copy"):
        t2 += (f", {below['t2_at_zero_copy']} ms at the {zero_copy} GB/s of a GPU kernel reading pinned memory in "
               "place (zero-copy, measured in this run)")
    elif rates.get("zero_copy_error"):
        t2 += f" (a GPU kernel's zero-copy read was not measured: {rates['zero_copy_error']})"
    effective = (f" That leaves {below['t2_effective_gbs']} GB/s as the rate its kernels really read T2 at."
                 if below.get("t2_effective_gbs") else "")
    return (f"GreenBoost takes {below['measured_token']} ms a token. llama.cpp's kernels read T2 in place (zero-copy), "
            f"not through the copy engine: its T2 bytes take {t2}; its VRAM bytes take {below['vram']} ms; and a "
            f"token's work that is not streaming bytes (launches, routing, small kernels) takes {below['not_bytes']} ms, "
            f"what the all-VRAM run spends beyond its own bytes ({below['vram_run_token']} ms a token against "
            f"{below['vram_run_bytes']} ms).{effective} In series these allow {below['ceiling_tok_s']} tokens/s; "
            f"measured / that = {fmt(below['measured_vs_ceiling'])}.")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fit-ngl")
    f.add_argument("model")
    f.add_argument("--budget-mib", type=int, required=True)
    f.add_argument("--compute-mib", type=float, required=True)
    f.add_argument("--ctx", type=int, required=True)
    f.add_argument("--gguf-py")
    e = sub.add_parser("fit-ncmoe")
    for name, kind in (("--budget-mib", int), ("--compute-mib", float), ("--ctx", int)):
        e.add_argument(name, type=kind, required=True)
    e.add_argument("model")
    e.add_argument("--gguf-py")
    b = sub.add_parser("buffers")
    b.add_argument("log")
    r = sub.add_parser("report")
    r.add_argument("raw")
    r.add_argument("out")
    args = ap.parse_args()
    if args.cmd == "fit-ngl":
        return fit_ngl(args)
    if args.cmd == "fit-ncmoe":
        return fit_ncmoe(args)
    if args.cmd == "buffers":
        print(json.dumps(device_buffers(read_text(Path(args.log)))))
        return 0
    return report(args)


if __name__ == "__main__":
    sys.exit(main())
