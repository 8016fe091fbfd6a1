"""The llama.cpp comparisons' headline figures in the bench report, so that latest.json
and the dated page hold every figure of issue 13. `make bench-llamacpp` measures them
(bench/llamacpp/, a llama-bench built on the GPU machine) and writes
llamacpp-<kind>-latest.json into the results folder; the report reads them from there,
each with the commit and date it was measured at, and says so where that is not the
bench's own commit."""

import json
import os

from report_limits import fmt

# Each comparison: its kind (llamacpp-<kind>-latest.json), what it is, and llama.cpp's own
# answers to the same VRAM (the figure takes the faster of them, as analyze.py does).
COMPARISONS = {
    "moe": ("mixture of experts that do not fit", {"cpu_moe": "--n-cpu-moe", "ot_cpu": "-ot exps=CPU"}),
    "longctx": ("a KV cache that does not fit", {"nkvo": "-nkvo 1"}),
}

# Issue 13's goal for GreenBoost's generation against its bound; the side-by-side
# ratios are reported with what bounds each side, without a goal.
TG_VS_BOUND_GOAL = {"moe": 0.90}


def load(results, kind):
    path = os.path.join(results, f"llamacpp-{kind}-latest.json")
    try:
        with open(path) as source:
            return json.load(source), None
    except OSError:
        return None, f"no {path}: run `make bench-llamacpp` for it on the GPU machine (bench/llamacpp/README.md)"
    except ValueError as error:
        return None, f"{path} is not JSON: {error}"


def entry(ratio, value, baseline, unit, goal, detail, missing):
    """One figure as report.figure writes them: `goal` None is a figure without a goal."""
    out = {"ratio": ratio, "value": value, "baseline": baseline, "unit": unit,
           "goal": f">= {goal}" if goal is not None else "none"}
    if ratio is None:
        out["missing"] = missing or "no data"
        out["met"] = None
    else:
        out["met"] = ratio >= goal if goal is not None else None
    if detail:
        out["detail"] = detail
    return out


def tok_s(doc, config, test):
    return ((doc.get("configs") or {}).get(config) or {}).get("results", {}).get(test, {}).get("tok_s")


def figures(results, bench_commit):
    """{name: figure} for every llama.cpp headline figure; a comparison not measured gives
    its figures with the reason they are missing."""
    out = {}
    for kind, (what, rivals) in COMPARISONS.items():
        doc, missing = load(results, kind)
        doc = doc or {}
        meta = doc.get("meta") or {}
        commit = meta.get("greenboost_commit", "unknown")
        source = {"comparison": what, "file": f"llamacpp-{kind}-{doc.get('date')}-{commit}.md",
                  "commit": commit, "date": doc.get("date"), "same_commit_as_bench": commit == bench_commit,
                  "budget_mib": meta.get("budget_mib"), "depth": meta.get("depth")}
        pp, tg = f"pp{meta.get('n_prompt', 512)}", f"tg{meta.get('n_gen', 128)}"
        bound = (doc.get("bounds") or {}).get("greenboost") or {}
        goal = TG_VS_BOUND_GOAL.get(kind)
        measured = source if doc else None
        out[f"llamacpp_{kind}_tg_vs_bound"] = entry(
            bound.get("tg_vs_bound"), tok_s(doc, "greenboost", tg), bound.get("tg_bound_tok_s"), "tokens/s", goal,
            measured and dict(measured, read_per_token_gb=bound.get("read_per_token_gb"),
                              below_bound=bound.get("below_bound")),
            missing or "the GreenBoost configuration has no bound (see the comparison's page)")
        # GreenBoost at the defaults, and with live tiering on where that ran (its buffers
        # in 2 MiB parts placed by heat; its bound the best placement in the budget).
        tiering_ran = ((doc.get("configs") or {}).get("greenboost_tiering") or {}).get("status") == "ok"
        if tiering_ran:
            tiering = (doc.get("bounds") or {}).get("greenboost_tiering") or {}
            out[f"llamacpp_{kind}_tg_tiering_vs_bound"] = entry(
                tiering.get("tg_vs_bound"), tok_s(doc, "greenboost_tiering", tg), tiering.get("tg_bound_tok_s"),
                "tokens/s", goal, dict(source, read_per_token_gb=tiering.get("read_per_token_gb")),
                "the live-tiering configuration has no bound (see the comparison's page)")
        for config, suffix in (("greenboost", ""), ("greenboost_tiering", "_tiering")):
            if suffix and not tiering_ran:
                continue
            for test, name in ((tg, "tg"), (pp, "pp")):
                speeds = {flag: tok_s(doc, rival, test) for rival, flag in rivals.items()}
                best = max((flag for flag in speeds if speeds[flag]), key=speeds.get, default=None)
                ratio = (doc.get("figures") or {}).get(f"llamacpp_{kind}_{name}{suffix}")
                out[f"llamacpp_{kind}_{name}{suffix}"] = entry(
                    ratio, tok_s(doc, config, test), speeds.get(best), "tokens/s", None,
                    measured and dict(measured, test=test, rival=best, rivals=speeds),
                    missing or f"a configuration of {test} did not run (see the comparison's page)")
    return out


def limits(figures_by_name):
    """For the llama.cpp goal not met, what bounds it, from that comparison's own run."""
    out = {}
    for kind, goal in TG_VS_BOUND_GOAL.items():
        name = f"llamacpp_{kind}_tg_vs_bound"
        fig = figures_by_name.get(name) or {}
        below = (fig.get("detail") or {}).get("below_bound") or {}
        if fig.get("met") is not False or not fig.get("baseline") or not below.get("ceiling_tok_s"):
            continue
        reads = fig["detail"].get("read_per_token_gb") or {}
        out[name] = (
            f"Zero-copy reads in llama.cpp's own kernels (the comparison's own run): a token reads {fmt(reads.get('t2'))} GB from T2 and "
            f"{fmt(reads.get('vram'))} GB from VRAM; the bound takes T2 at the copy engine's rate "
            f"({fmt(below.get('t2_at_link'))} ms a token), but llama.cpp's kernels read it in place at "
            f"{fmt(below.get('t2_effective_gbs'))} GB/s (the shim stages cuBLAS products only, and the experts a token "
            f"uses are chosen on the GPU), and {fmt(below.get('not_bytes'))} ms of a token is work that streams no "
            f"bytes (what the all-VRAM run spends beyond its own reads: launches, routing, small kernels). In series "
            f"these allow {fmt(below.get('ceiling_tok_s'))} tokens/s, {fmt(below['ceiling_tok_s'] / fig['baseline'])} "
            f"of the bound; measured {fmt(fig['value'])} ({fmt(below.get('measured_vs_ceiling'))} of that).")
    return out
