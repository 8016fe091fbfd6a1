#!/usr/bin/env python3
"""Tests of bench/plots.py (make plots-test). Ends with `N passed, M failed`.

1. The data functions against what the committed results say themselves: the recovery
   curve's binning reproduces tiering.json's own recovery_tok_s_by_second; the free-VRAM
   minima are every `.free_floor` line of the GPU suite pages, each PASS at or above
   its floor and each FAIL below; the decode plot's report has the all-VRAM baseline.
2. The free-VRAM series (synthetic, in a temporary folder): the sampler files of
   tests/gpu/shared.sh turned into the series file by the command run.sh runs
   (`python3 -m gbgpu.free_vram series`), with timestamps and in the old one-column form,
   and read back by plots.py's reader: the right tests, readings, floors and verdicts;
   the newest file that reads is drawn, a missing or malformed one falls back. The kept
   VRAM at the lowest reading (the floor's message), and the sampler's sum of the shim's
   published records.
3. The committed PNGs (bench/results/plots/): one per plot, each a PNG under 150 KB.
4. With matplotlib: `bench/plots.py --out TMP` runs and writes those PNGs, and the
   synthetic series draws as free_vram.png, the same bytes twice. Skipped with the reason
   where matplotlib is not importable.
"""

import contextlib
import io
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_PACKAGES = os.path.join(os.path.dirname(HERE), "python")
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


# A sampler file with timestamps (its last line cut short by the kill), one of the old
# one-column form, and shared.sh's list of tests, one of them without readings.
SAMPLES = {
    "shared.a": "1000.000 5000\n1000.050 5000\n1000.100 5000\n1000.150 4000\n1000.200 700\n1000.250 700\n"
                "1000.300 700\n1000.350 5000\n1000.400 12",
    "shared.old_shim.b": "2048\n300\n3\n",
    "shared.d": "3000.000 900 0\n3000.050 448 576\n3000.100 448 64\n3000.150 1000 0\n",
}
TESTS = ("shared.a 512 1024 1000.100 1000.300 PASS\n"
         "shared.old_shim.b 512 - 2000.0 2001.0 FAIL\n"
         "shared.c 512 1024 0 1 PASS\n")
SERIES_NAME = "gpu-test-2026-12-08-0123456789ab-free-vram.json"


def free_vram_cli(*args):
    """`python3 -m gbgpu.free_vram ARGS`, as tests/gpu/run.sh and shared.sh run it."""
    return subprocess.run([sys.executable, "-m", "gbgpu.free_vram", *args], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=PYTHON_PACKAGES))


def write_series(folder):
    """The synthetic sampler files and list in `folder`/logs, and the series file run.sh's
    command writes from them in `folder`; the command's result."""
    logs = os.path.join(folder, "logs")
    os.makedirs(logs)
    for name, text in SAMPLES.items():
        with open(os.path.join(logs, f"{name}.free"), "w") as f:
            f.write(text)
    with open(os.path.join(logs, "free-vram.tests"), "w") as f:
        f.write(TESTS)
    return free_vram_cli("series", os.path.join(logs, "free-vram.tests"), os.path.join(folder, SERIES_NAME))


def quiet_series(folder):
    """plots.free_vram_series without its stderr note about files passed over."""
    with contextlib.redirect_stderr(io.StringIO()):
        return plots.free_vram_series(folder)


def test_series():
    with tempfile.TemporaryDirectory() as folder:
        run = write_series(folder)
        check("gbgpu.free_vram series writes the series file", run.returncode == 0, run.stderr[-2000:])
        found = quiet_series(folder)
        check("the series file is found", found is not None and found[0] == SERIES_NAME, str(found))
        tests = found[1] if found else {}
        check("its tests are those with readings, in the list's order",
              list(tests) == ["shared.a", "shared.old_shim.b"], str(list(tests)))
        a, b = tests.get("shared.a", {}), tests.get("shared.old_shim.b", {})
        want_a = {"passed": True, "floor_mib": 512, "headroom_mib": 1024, "lowest_mib": 700, "readings": 8,
                  "interval_s": 0.05, "timestamps": "sampled", "test_s": [0.1, 0.3],
                  "t_s": [0.0, 0.1, 0.15, 0.2, 0.3, 0.35], "free_mib": [5000, 5000, 4000, 700, 700, 5000]}
        check("the timed test's entry: times from its first reading, the cut line left out, the inner readings "
              "of equal runs left out", a == want_a, f"{a} != {want_a}")
        want_b = {"passed": False, "floor_mib": 512, "headroom_mib": None, "lowest_mib": 3, "readings": 3,
                  "interval_s": 0.05, "timestamps": "assumed", "test_s": None,
                  "t_s": [0.0, 0.05, 0.1], "free_mib": [2048, 300, 3]}
        check("the one-column test's entry: 50 ms apart, no headroom, FAIL", b == want_b, f"{b} != {want_b}")
        kept = free_vram_cli("floor", os.path.join(folder, "logs", "shared.d.free"))
        check("gbgpu.free_vram floor prints the lowest reading (free_floor.sh's check) and the kept VRAM at the "
              "first of them (the floor's message)",
              kept.returncode == 0 and kept.stdout == "448 576\n", f"{kept.returncode} {kept.stdout!r}")
        untold = free_vram_cli("floor", os.path.join(folder, "logs", "shared.a.free"))
        check("gbgpu.free_vram floor of a file without the kept column prints its lowest reading and ?",
              untold.returncode == 0 and untold.stdout == "700 ?\n", f"{untold.returncode} {untold.stdout!r}")
        none = free_vram_cli("floor", os.path.join(folder, "logs", "missing"))
        check("gbgpu.free_vram floor of no readings prints nothing, exit status 1",
              none.returncode == 1 and none.stdout == "", f"{none.returncode} {none.stdout!r} {none.stderr[-300:]}")

        same_day = os.path.join(folder, "gpu-test-2026-12-08-ffffffffffff-free-vram.json")
        with open(same_day, "w") as f:
            f.write('{"started_unix": 1, "tests": {"shared.z": {"t_s": [0], "free_mib": [5], "floor_mib": 512, '
                    '"passed": true}}}')
        found = quiet_series(folder)
        check("of one date, the file whose tests started last is the newest, whatever the commit in its name",
              found is not None and found[0] == SERIES_NAME, str(found and found[0]))
        os.remove(same_day)

        newer = os.path.join(folder, "gpu-test-2026-12-09-0123456789ab-free-vram.json")
        with open(newer, "w") as f:
            f.write('{"tests": {"shared.a": {"t_s": [0, 1], "free_mib": [5]')
        found = quiet_series(folder)
        check("a newer file that is not JSON is passed over", found is not None and found[0] == SERIES_NAME,
              str(found and found[0]))
    for what, text in (("no file", None), ("a file that is not JSON", "{"),
                       ("a file without tests", '{"tests": {}}'),
                       ("a file whose times and readings differ in length",
                        '{"tests": {"shared.a": {"t_s": [0, 1], "free_mib": [5], "floor_mib": 512, '
                        '"passed": true}}}'),
                       ("a file without a floor",
                        '{"tests": {"shared.a": {"t_s": [0], "free_mib": [5], "passed": true}}}')):
        with tempfile.TemporaryDirectory() as folder:
            if text is not None:
                with open(os.path.join(folder, SERIES_NAME), "w") as f:
                    f.write(text)
            check(f"{what}: no series, the bar chart of minima is drawn", quiet_series(folder) is None,
                  str(quiet_series(folder)))


def test_kept_by_shims():
    """The sampler's third column: the published records' kept_vram, summed; a record
    being written, an older one and another file count nothing."""
    sys.path.insert(0, PYTHON_PACKAGES)
    from gbgpu import free_vram

    def record(seq, size, kept_mib):
        head = free_vram.RECORD_MAGIC + struct.pack("<IIII", 1, size, 42, 0) + struct.pack("<QQ", 7, seq)
        body = head + bytes(free_vram.KEPT_AT - len(head)) + struct.pack("<Q", kept_mib << 20)
        return body[:size] if size < len(body) else body

    with tempfile.TemporaryDirectory() as folder:
        for name, data in (("greenboost-shim.1", record(4, 136, 512)), ("greenboost-shim.2", record(6, 136, 64)),
                           ("greenboost-shim.3", record(5, 136, 1000)), ("greenboost-shim.4", record(2, 128, 1000)),
                           ("unrelated", record(2, 136, 1000))):
            with open(os.path.join(folder, name), "wb") as f:
                f.write(data)
        got = free_vram.kept_by_shims(folder)
        check("the sampler sums kept_vram of the shim's complete records", got == 576, str(got))
    check("no records folder: nothing kept", free_vram.kept_by_shims("/nonexistent-folder") == 0)


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
        import matplotlib
    except ImportError:
        print(f"skip bench/plots.py draws the PNGs: matplotlib is not importable by {sys.executable} "
              "(Debian: apt install python3-matplotlib)")
        return
    with tempfile.TemporaryDirectory() as out:
        run = subprocess.run([sys.executable, os.path.join(HERE, "plots.py"), "--out", out],
                             capture_output=True, text=True)
        check("bench/plots.py runs", run.returncode == 0, run.stderr[-2000:])
        check_pngs(out, "drawn")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with tempfile.TemporaryDirectory() as folder:
        write_series(folder)
        drawn = []
        for _ in range(2):
            path = plots.draw_free_vram(plt, folder, folder)
            size = png_size(path)
            with open(path, "rb") as f:
                drawn.append(f.read())
        check("the synthetic series draws free_vram.png", size is not None and min(size) >= 300, str(size))
        check("the same series draws the same bytes twice", drawn[0] == drawn[1])


def main():
    for section in (test_data, test_series, test_kept_by_shims, test_committed, test_draw):
        try:
            section()
        except Exception as error:  # noqa: BLE001 - reported as a failure; the other sections still run
            check(f"{section.__name__} ran without an exception", False, repr(error))
    print(f"{results['passed']} passed, {results['failed']} failed")
    return 1 if results["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
