"""The results page of bench/report.py: the report (figures, T2 reads, decode table,
profiles, limits, problems) as markdown."""

from report_limits import fmt


def markdown(report):
    env = report["environment"]
    lines = [f"# GreenBoost benchmark, {report['date']}, commit {report['commit']}", ""]
    lines += [f"- {k}: {v}" for k, v in env.items()]
    lines += ["", "Each ratio divides the GreenBoost figure by the baseline measured in the same run "
              "(bench/README.md defines them). Goals are issues 4's and 13's; nothing asserts them.", "",
              "| figure | GreenBoost | baseline | unit | ratio | goal | met |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for name, f in report["figures"].items():
        met = {True: "yes", False: "no", None: "—"}[f["met"]]
        lines.append(f"| {name} | {fmt(f['value'])} | {fmt(f['baseline'])} | {f['unit']} | {fmt(f['ratio'])} | "
                     f"{f['goal']} | {met} |")
    sources = {f["detail"]["file"]: f["detail"] for f in report["figures"].values()
               if (f.get("detail") or {}).get("comparison")}
    if sources:
        lines += ["", "The llama.cpp figures come from `make bench-llamacpp` (llama-bench, same GPU), each "
                  "comparison's own page in this folder:", ""]
        lines += [f"- {d['comparison']}: `{name}`, {d['date']}, commit {d['commit']}"
                  + ("" if d["same_commit_as_bench"] else f" (not this run's {report['commit']})")
                  for name, d in sources.items()]
    missing = [(n, f["missing"]) for n, f in report["figures"].items() if f.get("missing")]
    if missing:
        lines += ["", "Missing figures:", ""] + [f"- {n}: {why}" for n, why in missing]
    if report.get("limits"):
        lines += ["", "What limits the goals not met (from this run's own measurements):", ""]
        lines += [f"- {name}: {text}" for name, text in report["limits"].items()]

    sizes = report["figures"].get("t2_read_ratio", {}).get("detail", {}).get("sizes_gib", {})
    if sizes:
        lines += ["", "## T2 reads by size (GB/s)", "",
                  "Every read kernel runs over each buffer in the same process; the columns give the best kernel's "
                  "median pass (kernel named in brackets), the table after it every kernel.", "",
                  "| GiB | T2 read (shim) | pinned memcpy H2D | naive zero-copy read | HBM read | ratio | placement |",
                  "| --- | --- | --- | --- | --- | --- | --- |"]
        def best(row, value, kernel):
            return fmt(row.get(value)) + (f" ({row[kernel]})" if row.get(kernel) else "")
        for size, row in sizes.items():
            lines.append(f"| {size} | {best(row, 't2_read_GBps', 't2_best_kernel')} | "
                         f"{fmt(row.get('pinned_memcpy_h2d_GBps'))} | "
                         f"{best(row, 'naive_zero_copy_read_GBps', 'naive_zero_copy_best_kernel')} | "
                         f"{best(row, 'hbm_read_GBps', 'hbm_best_kernel')} | "
                         f"{fmt(row.get('ratio'))} | {row.get('placement', '—')} |")
        kernels = sorted({k for row in sizes.values() for key in ("t2_by_kernel", "naive_zero_copy_by_kernel", "hbm_by_kernel")
                          for k in (row.get(key) or {})})
        if kernels:
            lines += ["", "| GiB | kernel | T2 read (shim) | naive zero-copy read | HBM read |", "| --- | --- | --- | --- | --- |"]
            for size, row in sizes.items():
                for kernel in kernels:
                    lines.append(f"| {size} | {kernel} | {fmt((row.get('t2_by_kernel') or {}).get(kernel))} | "
                                 f"{fmt((row.get('naive_zero_copy_by_kernel') or {}).get(kernel))} | "
                                 f"{fmt((row.get('hbm_by_kernel') or {}).get(kernel))} |")
    hooks = [(n, report["figures"][n]) for n in ("hook_overhead_ratio", "hook_overhead_ratio_meminfo")
             if report["figures"].get(n, {}).get("detail", {}).get("pair_ratios")]
    if hooks:
        lines += ["", "## Hook overhead", "", "Ratio with/without the shim per pair of processes (run back to back, which one "
                  "first alternating; the figure is the median pair):", ""]
        for name, f in hooks:
            d = f["detail"]
            lines.append(f"- {name}: pairs " + ", ".join(f"{r:.3f}" for r in d["pair_ratios"]) +
                         f" (spread {d['pair_ratio_min']:.3f}-{d['pair_ratio_max']:.3f})")
    alloc = report["figures"].get("t2_alloc_ratio", {}).get("detail", {})
    if alloc.get("t2_phases_each"):
        lines += ["", "## T2 allocation phases (shim debug log)", "",
                  "| process | cold: map ms | populate ms (threads) | register ms | warm |", "| --- | --- | --- | --- | --- |"]
        for i, phases in enumerate(alloc["t2_phases_each"], 1):
            # gbbench alloc makes two 1 GiB T2 allocations: cold, then warm.
            big = [p for p in phases if p.get("mib", 0) >= 1024]
            cold = big[0] if big else {}
            warm = big[1] if len(big) > 1 else {}
            warm_text = "reused from the T2 cache" if warm.get("reused") else (
                f"new buffer, register {fmt(warm.get('register_ms'))} ms" if warm else "—")
            lines.append(f"| {i} | {fmt(cold.get('map_ms'))} | {fmt(cold.get('populate_ms'))} "
                         f"({cold.get('populate_threads', '—')}) | {fmt(cold.get('register_ms'))} | {warm_text} |")
    dec = report.get("decode") or {}
    if dec.get("configs"):
        model = dec.get("model") or {}
        lines += ["", "## Decode", ""]
        if model:
            lines += [f"Llama-architecture, {model.get('shape')} shape, {model.get('layers')} layers, "
                  f"{fmt((model.get('weight_bytes') or 0) / 1e9)} GB of bf16 weights (random), VRAM budget "
                  f"{fmt((model.get('budget_bytes') or 0) / 1e9)} GB, batch 1, {model.get('prompt_tokens')}-token prompt, "
                      f"greedy; torch {model.get('torch')}, transformers {model.get('transformers')}.", ""]
        lines += ["Decode is timed on the second of two passes over the same tokens; the first pass meets each "
                  "key length for the first time (PyTorch's cuDNN attention then works on the CPU for it).", "",
                  "| configuration | prefill tok/s | decode tok/s (median step) | first pass tok/s | tokens "
                  "| weights GB by placement | tokens match vram |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for config, row in dec["configs"].items():
            if "missing" in row:
                lines.append(f"| {config} | — | — | — | — | {row['missing'][:200]} | — |")
                continue
            where = ", ".join(f"{k} {v / 1e9:.2f}" for k, v in sorted(row["weights_by_placement"].items()))
            kv = row.get("kv_cache_by_placement") or {}
            if set(kv) - {"vram"}:
                where += "; KV cache " + ", ".join(f"{k} {v / 1e9:.3f}" for k, v in sorted(kv.items()))
            match = row.get("tokens_match_vram")
            repeated = row.get("same_tokens_when_repeated")
            reference_text = "reference" + {True: " (passes agree)", False: " (passes DIFFER)",
                                            None: ""}[repeated]
            match_text = reference_text if config == "vram" else {True: f"yes ({row.get('tokens_compared')})",
                                                               False: f"no (from token {row.get('first_divergence_at')})",
                                                               None: "—"}[match]
            cold = fmt(row["cold_pass_tok_s"]) if row.get("cold_pass_tok_s") else "—"
            if config != "vram" and repeated is False:
                match_text += "; its passes DIFFER"
            lines.append(f"| {config} | {fmt(row['prefill_tok_s'])} | {fmt(row['decode_tok_s'])} | {cold} | {row['new_tokens']} "
                         f"| {where} | {match_text} |")
        for config, row in dec["configs"].items():
            for line in row.get("shim_summary", []):
                lines.append(f"\nShim ({config}): `{line}`")
        profiled = {c: row["profile"] for c, row in dec["configs"].items()
                    if row.get("profile") and "error" not in row["profile"]}
        if profiled:
            lines += ["", "GPU time of one prefill and one decode step by kind of work (torch.profiler, ms; copies "
                          "include GreenBoost's staging copies):", "",
                      "| configuration | step | copies | GEMM kernels | other kernels | top kernels |",
                      "| --- | --- | --- | --- | --- | --- |"]
            for config, prof in profiled.items():
            # A CPU-only part (generate's synchronisation count) has no GPU kinds.
                for step, part in ((s, p) for s, p in prof.items() if "ms_by_kind" in p):
                    kinds = part["ms_by_kind"]
                    top = "; ".join(f"{t['name']} {t['ms']} ms x{t['calls']}" for t in part["top"][:3])
                    lines.append(f"| {config} | {step} | {kinds.get('copy', 0)} | {kinds.get('gemm', 0)} "
                                 f"| {kinds.get('other kernels', 0)} | {top} |")
        gapped = {f"{c}{label}": prof[key] for c, prof in profiled.items()
                  for key, label in (("decode_gaps", ""), ("prefill_gaps", " (prefill)")) if prof.get(key)}
        if gapped:
            lines += ["", f"Where the GPU waited in decode steps run back to back and in one prefill (torch.profiler, "
                          f"CUDA activity only; ms per step; \"CPU late\": the work after the gap was launched during it, nothing was "
                          f"queued; \"dependency\": it was queued before, the gap is the wait for the work before it):", "",
                      "| configuration | steps | busy | idle | of it stalls >= 10 ms | CPU late | dependency "
                      "| longest gap | CPU blocked in (calls >= 0.2 ms) |",
                      "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
            for config, gaps in gapped.items():
                units = gaps["units"]
                causes = gaps["idle_by_cause_ms"]
                longest = (gaps["long_gaps"]["longest"] or [{}])[0]
                longest_text = (f"{longest['us'] / 1e3:.1f} ms before {longest['before'][:40]}" if longest else "—")
                blocked = "; ".join(f"{name} {e['ms'] / units:.1f} ms x{e['count']}"
                                    for name, e in (gaps.get("cpu_blocked_in") or {}).get("calls", {}).items()) or "—"
                stalls = (gaps.get("stalls") or {}).get("ms", 0) / units
                lines.append(f"| {config} | {units} | {gaps['busy_ms_each']:.1f} | {gaps['idle_ms_each']:.1f} "
                             f"| {stalls:.1f} | {causes.get('cpu late', 0) / units:.1f} | {causes.get('gpu dependency', 0) / units:.1f} "
                             f"| {longest_text} | {blocked} |")
        split = report["figures"].get("decode_vs_uvm", {}).get("detail", {})
        if split.get("greenboost_vs_uvm_split"):
            lines += ["", f"`uvm_split` is the Unified Memory allocator with GreenBoost's placement rule (VRAM while the "
                          f"budget lasts, host-preferred managed memory beyond it), so it measures only how the spilled "
                          f"bytes are served: {fmt(split['uvm_split_tok_s'])} tokens/s, GreenBoost / uvm_split = "
                          f"{fmt(split['greenboost_vs_uvm_split'])}."]
        bound = report["figures"].get("decode_vs_bound", {}).get("detail", {})
        if bound.get("bound_tok_s"):
            lines += ["", f"Bandwidth bound: {bound['bytes_per_token_vram'] / 1e9:.2f} GB/token from VRAM at "
                          f"{bound['hbm_GBps']:.0f} GB/s + {bound['bytes_per_token_t2'] / 1e9:.2f} GB/token from T2 at "
                          f"{bound['link_GBps']:.1f} GB/s (the link's best rate in this run, the faster of zero-copy and the copy engine, at {bound['link_measured_at_gib']:g} GiB)"
                          f" = {bound['bound_tok_s']:.2f} tokens/s."]
        if bound.get("sliced_tok_s"):
            lines += ["", f"With pipelined staging (`greenboost_sliced`, GREENBOOST_STAGE_SLICES=4) the same run decoded "
                          f"{fmt(bound['sliced_tok_s'])} tokens/s, {fmt(bound['sliced_vs_bound'])} of the bound."]
        for name in ("decode_vs_bound", "decode_hf_vs_bound"):
            detail = report["figures"].get(name, {}).get("detail") or {}
            if detail.get("cold_pass_vs_bound"):
                lines += ["", f"{name} on the first pass (every key length new): {fmt(detail['cold_pass_tok_s'])} "
                              f"tokens/s, {fmt(detail['cold_pass_vs_bound'])} of the bound"
                              + (f"; transformers' generate all in VRAM {fmt(detail['hf_all_vram_cold_tok_s'])} "
                                 f"tokens/s on its first pass, {fmt(detail['hf_all_vram_tok_s'])} on the second"
                                 if detail.get("hf_all_vram_cold_tok_s") else "") + "."]
    problems = [p for p in report["problems"]]
    if problems:
        lines += ["", "## Problems in this run", ""] + [f"- {p}" for p in problems]
    return "\n".join(lines) + "\n"
