#!/usr/bin/env python3
"""Tests of bench/plots.py (make plots-test). Ends with `N passed, M failed`.

1. The data functions against what the committed results say themselves: the recovery
   curve's binning reproduces tiering.json's own recovery_tok_s_by_second; the free-VRAM
   minima are every `.free_floor` line of the GPU suite pages, each PASS at or above
   its floor and each FAIL below; the decode plot's report has the all-VRAM baseline.
2. The committed PNGs (bench/results/plots/): one per plot, each a PNG under 150 KB.
3. With matplotlib: `bench/plots.py --out TMP` runs and writes those PNGs. Skipped with
   the reason where matplotlib is not importable.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import plots  # noqa: E402

results = {"passed": 0, "failed": 0}
MAX_BYTES = 150 * 1000


def check(name, condition, detail=""):
    results["passed" if condition else "failed"] += 1
    print(f"{'ok  ' if condition else 'FAIL'} {name}" + ("" if condition else f" {detail}"))


def png_size(path):
    """(width, height) of a PNG file, or None when it is not one."""
    with open(path, "rb") as f:
        head = f.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


def test_data():
    tiering = plots.tiering_json(plots.tiering_source(plots.RESULTS))
    series = plots.recovery_series(tiering)
    own = tiering["recovery_tok_s_by_second"]
    check("the recovery curve's first seconds are tiering.json's recovery_tok_s_by_second",
          series["decode_recovery"][:len(own)] == own, f"{series['decode_recovery'][:len(own)]} != {own}")
    check("the recovery plot has the run beside the foreign process and both free runs",
          sorted(series) == ["decode_free_after", "decode_free_before", "decode_recovery"], str(sorted(series)))

    pages = plots.free_floor_minima(plots.RESULTS)
    lines = 0
    for name in os.listdir(plots.RESULTS):
        if name.startswith("gpu-test-") and name.endswith(".md"):
            with open(os.path.join(plots.RESULTS, name)) as f:
                lines += sum(".free_floor: " in line for line in f)
    rows = [row for page in pages.values() for row in page]
    check("every .free_floor line of the GPU suite pages is read", lines > 0 and len(rows) == lines,
          f"{len(rows)} read, {lines} lines")
    wrong = [row for row in rows if row[3] != (row[1] >= row[2])]
    check("each PASS is at or above its floor and each FAIL below", not wrong, str(wrong))

    report = plots.decode_source(plots.RESULTS)
    with open(report) as f:
        budgets = [run[3] for run in plots.decode_runs(json.load(f))]
    check("the decode plot's report has the all-VRAM run and a budgeted one", 0 in budgets and any(budgets),
          f"{os.path.basename(report)}: budgets {budgets}")


def check_pngs(folder, what):
    for name in plots.PLOTS:
        path = os.path.join(folder, name)
        size = png_size(path) if os.path.exists(path) else None
        check(f"{what} {name} is a PNG under {MAX_BYTES // 1000} KB",
              size is not None and min(size) >= 300 and os.path.getsize(path) < MAX_BYTES,
              f"size {size}, {os.path.getsize(path) if os.path.exists(path) else 'no'} bytes")


def test_committed():
    check_pngs(os.path.join(plots.RESULTS, "plots"), "committed")


def test_draw():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"skip bench/plots.py draws the PNGs: matplotlib is not importable by {sys.executable} "
              "(Debian: apt install python3-matplotlib)")
        return
    with tempfile.TemporaryDirectory() as out:
        run = subprocess.run([sys.executable, os.path.join(HERE, "plots.py"), "--out", out],
                             capture_output=True, text=True)
        check("bench/plots.py runs", run.returncode == 0, run.stderr[-2000:])
        check_pngs(out, "drawn")


def main():
    for section in (test_data, test_committed, test_draw):
        try:
            section()
        except Exception as error:  # noqa: BLE001 - reported as a failure; the other sections still run
            check(f"{section.__name__} ran without an exception", False, repr(error))
    print(f"{results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
