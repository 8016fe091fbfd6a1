"""The long-prompt figures (bench/run.sh's `longctx` section, bench/longctx.py): each
cache mode's prefill under the shim beside a foreign process over the same program's
on the free GPU, its decode against the best placement's bound, and whether its tokens
are the free GPU's. report.py calls `figures`."""

GIB = 1 << 30
BF16_BYTES = 2


def modes_of(run):
    return (run or {}).get("modes", {})


def decode_bound(run, hbm, link):
    """Tokens/s the best placement allows beside the foreign process: the bytes a token
    reads (every weight and the KV cache) that the VRAM left (free VRAM at the start less
    the shim's headroom) cannot hold read at the link's best rate, the rest at HBM's."""
    if not (run and hbm and link):
        return None, {}
    per_token = run["weight_bytes"] + run["kv_bytes"]
    left = max(0, run["free_vram_bytes"] - run["headroom_bytes"])
    in_t2 = max(0, per_token - left)
    rate = max(link.values())
    bound = 1.0 / ((per_token - in_t2) / (hbm * 1e9) + in_t2 / (rate * 1e9))
    return bound, {"bytes_per_token": per_token, "vram_left": left, "bytes_per_token_t2": in_t2,
                   "hbm_GBps": hbm, "link_GBps": rate, "bound_tok_s": bound}


def free_gpu_plus_link(free_decode, decode, bound_detail):
    """The decode against a bound that keeps the CPU's share: the free GPU's own time per
    token (transformers' generate at batch 1 is bound by the CPU launching kernels) plus
    the bytes a token reads from T2 at the link's best rate. The figure's bound counts
    neither CPU nor launches, which the free GPU itself does not reach."""
    detail = {"free_gpu_decode_tok_s": free_decode}
    if free_decode and bound_detail:
        per_token_s = 1.0 / free_decode + bound_detail["bytes_per_token_t2"] / (bound_detail["link_GBps"] * 1e9)
        detail["free_gpu_plus_link_tok_s"] = 1.0 / per_token_s
        detail["decode_vs_free_gpu_plus_link"] = decode * per_token_s if decode else None
    return detail


def figures(runs, result, figure, bandwidths):
    """{figure name: entry} for every token count measured: `longctx_hf_prefill_vs_free`
    and `longctx_hf_decode_vs_bound` per cache mode (named `..._<mode>_<tokens>`), with
    the baseline shim's prefill, the run with BENCH_LONGCTX_SETTINGS's, and whether the
    tokens match the free GPU's."""
    out = {}
    hbm, link = bandwidths
    counts = sorted({label.rsplit("-", 1)[1] for label in runs if label.startswith("longctx-free-")}, key=int)
    for tokens in counts:
        free = result(runs, f"longctx-free-{tokens}")
        shim = result(runs, f"longctx-greenboost-{tokens}")
        baseline = result(runs, f"longctx-greenboost_baseline-{tokens}")
        settings = result(runs, f"longctx-greenboost_settings-{tokens}")
        labels = [f"longctx-{c}-{tokens}" for c in ("free", "greenboost")]
        for mode in sorted(set(modes_of(free)) | set(modes_of(shim))):
            ours, reference = modes_of(shim).get(mode, {}), modes_of(free).get(mode, {})
            earlier = modes_of(baseline).get(mode, {})
            missing = ours.get("error") or reference.get("error") or ("not run: " + ", ".join(labels))
            ratio = None
            if "prefill_s" in ours and "prefill_s" in reference:
                ratio = ours["prefill_s"] / reference["prefill_s"]
            detail = {"tokens_identical": ours.get("ids") == reference.get("ids") if "ids" in ours else None,
                      "baseline_shim_prefill_s": earlier.get("prefill_s"), "baseline_shim_error": earlier.get("error"),
                      "shim_summary": (runs.get(f"longctx-greenboost-{tokens}") or {}).get("shim_summary")}
            if "prefill_s" in earlier and "prefill_s" in ours:
                detail["prefill_vs_baseline_shim"] = earlier["prefill_s"] / ours["prefill_s"]
            given = modes_of(settings).get(mode)
            if given:
                # The run with BENCH_LONGCTX_SETTINGS: its prefill over the free GPU's, its tokens.
                detail["settings_prefill_s"], detail["settings_error"] = given.get("prefill_s"), given.get("error")
                detail["settings_decode_tok_s"] = given.get("decode_tok_s")
                if "prefill_s" in given and "prefill_s" in reference:
                    detail["settings_prefill_vs_free"] = given["prefill_s"] / reference["prefill_s"]
                detail["settings_tokens_identical"] = given.get("ids") == reference.get("ids") if "ids" in given else None
                detail["settings_shim_summary"] = (runs.get(f"longctx-greenboost_settings-{tokens}") or {}).get(
                    "shim_summary")
            out[f"longctx_hf_prefill_vs_free_{mode}_{tokens}"] = figure(
                "longctx_hf_prefill_vs_free", ours.get("prefill_s"), reference.get("prefill_s"), ratio, "s",
                detail, missing)
            bound, bound_detail = decode_bound(shim, hbm, link)
            decode = ours.get("decode_tok_s")
            out[f"longctx_hf_decode_vs_bound_{mode}_{tokens}"] = figure(
                "longctx_hf_decode_vs_bound", decode, bound, decode / bound if decode and bound else None, "tok/s",
                bound_detail | free_gpu_plus_link(reference.get("decode_tok_s"), decode, bound_detail)
                | {"decode_tail_tok_s": ours.get("decode_tail_tok_s")},
                missing if not decode else "no bandwidths measured (bw section)")
    return out
