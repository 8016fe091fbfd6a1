#!/usr/bin/env python3
"""Draws the committed results as PNGs in bench/results/plots/ (`make plots`):

  recovery.png    live tiering: decode tokens/s, second by second, after the foreign
                  process holding the VRAM is killed, against the same program on a
                  free GPU (the per-token times in the tiering run's raw tarball)
  decode.png      decode and prefill tokens/s of the newest report that measured the
                  all-VRAM baseline beside budgeted runs: against the VRAM budget when
                  the report swept budgets (bench/run.sh's `sweep` configuration), per
                  configuration otherwise
  free_vram.png   free VRAM over time during each shared-GPU test, a panel per test,
                  against the suite's floor and the shim's headroom, from the newest
                  committed series file (gpu-test-<date>-<commit>-free-vram.json, which
                  tests/gpu/run.sh writes beside its page; format: python/gbgpu/free_vram.py);
                  where none is committed, the lowest free VRAM of each test in each GPU
                  suite page (the pages keep only each test's minimum)

  python3 bench/plots.py [--results DIR] [--out DIR]

Each plot's title names the file its numbers come from. Only the drawing needs
matplotlib (python3-matplotlib); bench/test_plots.py checks the data functions without it.
"""

import argparse
import json
import os
import re
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))  # gbgpu: the series file's format

from gbgpu import free_vram  # noqa: E402

RESULTS = os.path.join(HERE, "results")
PLOTS = ("recovery.png", "decode.png", "free_vram.png")
GIB = 1 << 30


# --- the data: read from the committed files only -----------------------------------------

def tiering_source(results):
    """The newest live-tiering raw tarball (tiering-<date>-<commit>-raw.tar.gz), or None."""
    names = sorted(n for n in os.listdir(results) if re.match(r"^tiering-\d{4}-\d{2}-\d{2}-\w+-raw\.tar\.gz$", n))
    return os.path.join(results, names[-1]) if names else None


def tiering_json(tarball):
    """The tiering.json inside a raw tarball (bench/tiering.py's output)."""
    with tarfile.open(tarball) as tar:
        member = next(m for m in tar.getmembers() if os.path.basename(m.name) == "tiering.json")
        return json.load(tar.extractfile(member))


def tokens_per_second(after_kill, seconds):
    """Tokens generated in each whole second after the kill, [0, 1), [1, 2), ...: the
    binning of bench/tiering.py's recovery_tok_s_by_second, over `seconds` seconds."""
    counts = [0] * seconds
    for t in after_kill:
        if 0 <= t < seconds:
            counts[int(t)] += 1
    return counts


def recovery_series(tiering):
    """{run name: tokens/s by second} for the run beside the killed process and the free
    runs before and after it, over the seconds all three cover."""
    runs = {name: tiering[name]["after_kill_s"] for name in ("decode_recovery", "decode_free_before", "decode_free_after")
            if tiering.get(name, {}).get("after_kill_s")}
    seconds = int(min(times[-1] for times in runs.values()))
    return {name: tokens_per_second(times, seconds) for name, times in runs.items()}


DATED = re.compile(r"^\d{4}-\d{2}-\d{2}-.+\.json$")


def decode_runs(report):
    """[(measurement, decode tokens/s, prefill tokens/s, VRAM budget bytes)] of a report's
    decode measurements (budget 0: no budget, the weights all in VRAM)."""
    runs = []
    for name, m in sorted(report.get("measurements", {}).items()):
        if name.startswith("decode-") and isinstance(m, dict) and m.get("decode_tok_s") and m.get("prefill_tok_s"):
            runs.append((name, m["decode_tok_s"], m["prefill_tok_s"], m.get("budget_bytes", 0)))
    return runs


def decode_source(results):
    """The newest dated report (by its own date) whose decode runs include the all-VRAM
    baseline and at least one budgeted configuration, or None. Partial reports (one
    configuration and its baseline shim) have no all-VRAM run to compare with."""
    best = None
    for name in os.listdir(results):
        if not DATED.match(name):
            continue
        with open(os.path.join(results, name)) as f:
            report = json.load(f)
        budgets = [run[3] for run in decode_runs(report)]
        if 0 in budgets and any(budgets) and (best is None or report["date"] > best[0]):
            best = (report["date"], os.path.join(results, name))
    return best[1] if best else None


FLOOR_LINE = re.compile(r"^(PASS|FAIL) ([\w.]+)\.free_floor: free VRAM (?:never below|fell to) (\d+) MiB "
                        r"\(floor (\d+) MiB\)")


def free_floor_minima(results):
    """{gpu-test page: [(test, lowest free MiB, floor MiB, passed)]}, the pages in date
    order, from the `.free_floor` lines of bench/results/gpu-test-*.md."""
    pages = {}
    for name in sorted(n for n in os.listdir(results) if re.match(r"^gpu-test-.*\.md$", n)):
        with open(os.path.join(results, name)) as f:
            rows = [m.groups() for m in map(FLOOR_LINE.match, f) if m]
        if rows:
            pages[name] = [(test.removeprefix("shared."), int(low), int(floor), verdict == "PASS")
                           for verdict, test, low, floor in rows]
    return pages


SERIES = re.compile(r"^gpu-test-\d{4}-\d{2}-\d{2}-.+-free-vram\.json$")


def free_vram_series(results):
    """(file name, {test: its entry}) of the newest series file that reads (by the date in
    its name, then by when its first test started: the commit in the name says nothing
    of time), or None: the bar chart of minima is drawn then. A file that does not read
    is named on stderr and passed over."""
    names = [n for n in os.listdir(results) if SERIES.match(n)]
    newest_first = sorted(names, key=lambda n: (n[len("gpu-test-"):][:10], free_vram.started_unix(
        os.path.join(results, n)), n), reverse=True)
    for name in newest_first:
        try:
            return name, free_vram.load(os.path.join(results, name))
        except (OSError, ValueError) as error:
            print(f"bench/plots.py: {name} passed over: {error}", file=sys.stderr)
    return None


# --- the drawing ------------------------------------------------------------------------------

def source_title(ax, title, source):
    ax.set_title(f"{title}\nsource: bench/results/{source}", fontsize=10)


def draw_recovery(plt, results, out):
    tarball = tiering_source(results)
    tiering = tiering_json(tarball)
    series = recovery_series(tiering)
    fig, ax = plt.subplots(figsize=(9, 4.8))
    styles = {"decode_recovery": ("beside the foreign process, killed at 0 s", "C3", 2.2),
              "decode_free_before": ("GPU free (run before)", "C0", 1.2),
              "decode_free_after": ("GPU free (run after)", "C2", 1.2)}
    for name, counts in series.items():
        label, colour, width = styles[name]
        ax.stairs(counts, range(len(counts) + 1), baseline=None, label=label, color=colour, linewidth=width)
    free = tiering.get("free_tok_s")
    if free:
        ax.axhline(0.9 * free, color="grey", linestyle="--", linewidth=1,
                   label=f"0.9 of the free runs' rate ({0.9 * free:.1f} tokens/s)")
    to_rate = tiering.get("recovery_time_to_rate_s")
    if to_rate is not None:
        ax.axvline(to_rate, color="C3", linestyle=":", linewidth=1, label=f"back at that rate after {to_rate:.2f} s")
    pre, in_t2 = tiering.get("recovery_pre_kill_tok_s"), tiering["decode_recovery"].get("weights_t2_at_start")
    if pre and in_t2:
        ax.text(0.99, 0.04, f"before the kill, {in_t2 / 1e9:.2f} GB of the weights in T2: {pre:.2f} tokens/s",
                transform=ax.transAxes, ha="right", fontsize=8, color="C3")
    ax.set_xlabel("seconds after the kill (free runs: after the same token)")
    ax.set_ylabel("tokens in that second")
    ax.set_ylim(0, max(max(counts) for counts in series.values()) * 1.4)  # room above the curves for the legend
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", ncol=2)
    source_title(ax, "Live tiering: decode recovers when the other process exits (8B shape, HF generate, H200)",
                 os.path.basename(tarball) + " (tiering.json)")
    return save(plt, fig, out, "recovery.png")


def draw_budget_sweep(plt, report, path, out):
    """Decode and prefill tokens/s of the shim's runs against their VRAM budget, beside
    the all-VRAM run's (a horizontal line)."""
    runs = decode_runs(report)
    swept = sorted((budget, decode, prefill) for _, decode, prefill, budget in runs if budget)
    baseline = [(decode, prefill) for _, decode, prefill, budget in runs if budget == 0][0]
    weights = report.get("decode", {}).get("model", {}).get("weight_bytes")
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    budgets = [budget / GIB for budget, *_ in swept]
    for ax, column, unit in ((left, 1, "decode, tokens/s"), (right, 2, "prefill, tokens/s")):
        ax.plot(budgets, [point[column] for point in swept], "o-", color="C0", label="GreenBoost under the budget")
        ax.axhline(baseline[column - 1], color="C2", linestyle="--", label="no budget: all weights in VRAM")
        ax.set_xlabel("VRAM budget, GiB" + (f" (weights {weights / GIB:.2f} GiB)" if weights else ""))
        ax.set_ylabel(unit)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    left.legend(fontsize=8, loc="upper left")
    fig.suptitle(f"Decode and prefill against the VRAM budget (H200)\nsource: bench/results/{os.path.basename(path)}",
                 fontsize=10)
    fig.tight_layout()
    return save(plt, fig, out, "decode.png")


def draw_decode(plt, results, out):
    path = decode_source(results)
    with open(path) as f:
        report = json.load(f)
    if len({budget for *_, budget in decode_runs(report) if budget}) > 1:
        return draw_budget_sweep(plt, report, path, out)
    runs = sorted(decode_runs(report), key=lambda run: run[1])
    weights = report.get("decode", {}).get("model", {}).get("weight_bytes")
    labels = [name.removeprefix("decode-") for name, *_ in runs]
    colours = ["C2" if budget == 0 else "C0" for *_, budget in runs]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.6), sharey=True)
    prompt = report.get("decode", {}).get("model", {}).get("prompt_tokens")
    for ax, column, unit, fmt in ((left, 1, "decode, tokens/s", "{:.3g}"),
                                  (right, 2, f"prefill of {prompt} tokens, tokens/s (log)", "{:,.0f}")):
        values = [run[column] for run in runs]
        ax.barh(labels, values, color=colours)
        for y, value in enumerate(values):
            ax.text(value, y, " " + fmt.format(value), va="center", fontsize=8)
        ax.set_xlabel(unit)
        ax.grid(axis="x", alpha=0.3)
    right.set_xscale("log")
    left.set_xlim(right=max(run[1] for run in runs) * 1.2)
    right.set_xlim(right=max(run[2] for run in runs) * 3)
    budgets = sorted({budget for *_, budget in runs if budget})
    budget_text = ", ".join(f"{b / GIB:.2f} GiB" for b in budgets)
    weight_text = f" of {weights / GIB:.2f} GiB of weights" if weights else ""
    left.bar(0, 0, color="C2", label="no budget: all weights in VRAM")
    left.bar(0, 0, color="C0", label=f"VRAM budget {budget_text}{weight_text}")
    left.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"Decode and prefill per configuration (8B shape, H200), one budget: no budget sweep is committed\n"
                 f"source: bench/results/{os.path.basename(path)}", fontsize=10)
    fig.tight_layout()
    return save(plt, fig, out, "decode.png")


def draw_free_vram(plt, results, out):
    series = free_vram_series(results)
    if series is None:
        return draw_free_vram_minima(plt, results, out)
    source, tests = series
    columns = 1 if len(tests) == 1 else 2 if len(tests) <= 4 else 3
    rows = -(-len(tests) // columns)
    # At least 9 inches wide: the title and the legend's three columns must fit one panel.
    fig, axes = plt.subplots(rows, columns, figsize=(max(4 * columns + 1, 9), 2.4 * rows + 1.4), squeeze=False)
    legend = {}
    for ax, (test, entry) in zip(axes.flat, tests.items()):
        label = "free VRAM (nvml), " + ("the test passed" if entry["passed"] else "the test failed")
        # Log scale: the floor and headroom (about 1 GiB) beside a card's worth; 0 MiB drawn at 1.
        legend[label], = ax.plot(entry["t_s"], [max(mib, 1) for mib in entry["free_mib"]],
                                 color="C0" if entry["passed"] else "C3", linewidth=1.2)
        ax.set_yscale("log")
        if entry.get("test_s"):
            legend["the test's command running"] = ax.axvspan(*entry["test_s"], color="grey", alpha=0.12, linewidth=0)
        if entry.get("headroom_mib"):
            legend[f"the shim's headroom ({entry['headroom_mib']} MiB)"] = ax.axhline(
                entry["headroom_mib"], color="grey", linestyle=":", linewidth=1.2)
        legend[f"floor ({entry['floor_mib']} MiB): the test fails below"] = ax.axhline(
            entry["floor_mib"], color="C3", linestyle="--", linewidth=1.2)
        lowest = min(entry["free_mib"])
        ax.set_title(f"{test.removeprefix('shared.')}: {'PASS' if entry['passed'] else 'FAIL'}, lowest {lowest} MiB",
                     fontsize=9, color="black" if entry["passed"] else "C3")
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(tests):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("free VRAM, MiB (log)", fontsize=8)
    for ax in axes.flat[max(0, len(tests) - columns):len(tests)]:  # the lowest panel of each column
        ax.set_xlabel("seconds from the first reading", fontsize=8)
    fig.legend(legend.values(), legend.keys(), loc="lower center", ncol=3, fontsize=8)
    old = " (old_shim: the shim before the headroom, expected to fail)" if any("old_shim" in t for t in tests) else ""
    fig.suptitle(f"Sharing a GPU: free VRAM during each shared-GPU test{old}\nsource: bench/results/{source}",
                 fontsize=10)
    legend_inches = 0.2 * -(-len(legend) // 3) + 0.1
    fig.tight_layout(rect=(0, legend_inches / fig.get_figheight(), 1, 1))
    return save(plt, fig, out, "free_vram.png")


def draw_free_vram_minima(plt, results, out):
    """free_vram.png where no series file is committed: the lowest free VRAM of each
    shared-GPU test per GPU suite page (the pages keep only the minima)."""
    pages = free_floor_minima(results)
    tests = []
    for rows in pages.values():
        tests += [test for test, *_ in rows if test not in tests]
    tests.sort(key=lambda test: test.startswith("old_shim."))  # the expected failures last, together
    fig, ax = plt.subplots(figsize=(10, 4.8))
    width = 0.8 / len(pages)
    for i, (page, rows) in enumerate(pages.items()):
        lowest = {test: low for test, low, *_ in rows}
        xs = [k + (i - (len(pages) - 1) / 2) * width for k, test in enumerate(tests) if test in lowest]
        values = [lowest[test] for test in tests if test in lowest]
        ax.bar(xs, values, width, label=page.removesuffix(".md"))
        for x, (test, low, floor, passed) in zip(xs, (row for test in tests for row in rows if row[0] == test)):
            if not passed:  # a few MiB: too short a bar to read
                ax.text(x, low, f"{low}", ha="center", va="bottom", fontsize=7, rotation=90)
    for floor in sorted({floor for rows in pages.values() for _, _, floor, _ in rows}):
        ax.axhline(floor, color="C3", linestyle="--", linewidth=1.2, label=f"floor {floor} MiB (the test fails below)")
    ax.set_xticks(range(len(tests)))
    ax.set_xticklabels(tests, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("lowest free VRAM during the test, MiB")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    source_title(ax, "Sharing a GPU: lowest free VRAM per test (old_shim: the shim before the headroom, expected to fail)",
                 "gpu-test-*.md (the pages keep each test's minimum, not its samples)")
    fig.tight_layout()
    return save(plt, fig, out, "free_vram.png")


def save(plt, fig, out, name):
    path = os.path.join(out, name)
    # No timestamps or software tag in the PNG: a redraw of unchanged data rewrites the same bytes.
    fig.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(fig)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", default=RESULTS, help="the results folder (default bench/results)")
    parser.add_argument("--out", default=os.path.join(RESULTS, "plots"), help="where the PNGs go")
    opts = parser.parse_args()
    try:
        import matplotlib
    except ImportError:
        sys.exit(f"bench/plots.py: matplotlib is not importable by {sys.executable} (Debian: apt install python3-matplotlib)")
    matplotlib.use("Agg")  # files only: no display on the build machine
    import matplotlib.pyplot as plt

    os.makedirs(opts.out, exist_ok=True)
    for draw in (draw_recovery, draw_decode, draw_free_vram):
        path = draw(plt, opts.results, opts.out)
        print(f"{path}: {os.path.getsize(path) // 1024} KiB")


if __name__ == "__main__":
    main()
