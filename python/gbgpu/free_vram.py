"""Free VRAM during the GPU suite's tests beside a foreign process (tests/gpu/free_floor.sh):
the sampler, its files, and the series file the suite writes from them beside its results page,
bench/results/gpu-test-<date>-<commit>-free-vram.json, which bench/plots.py draws.

  python3 -m gbgpu.free_vram sample FILE        readings into FILE until killed (shared_gpu.py's
                                                `sampler` role)
  python3 -m gbgpu.free_vram floor FILE         prints the lowest reading of FILE and the VRAM kept
                                                for processes under the shim at that reading (`?`
                                                where the file does not say); nothing, exit status
                                                1, when it has no reading
  python3 -m gbgpu.free_vram series TESTS OUT   writes the series file OUT from the tests' list

A sampler file has one reading a line, `UNIX_SECONDS FREE_MIB KEPT_MIB` (nvml's free memory
of device 0, every 50 ms, and the VRAM the driver keeps for what processes under the shim
moved to T2, from their published records: used as nvml counts it, yet any allocation gets
it); files written before have no KEPT_MIB, or only `FREE_MIB`, read as 50 ms apart. The
tests' list (shared.sh's free-vram.tests) has a line per test,
`NAME FLOOR_MIB HEADROOM_MIB STARTED ENDED PASS|FAIL`: the floor the test must stay at or
above, the shim's headroom (`-` for a shim without one), when the test's command
started and ended (Unix seconds) and the floor's verdict; the test's readings are in
NAME.free beside it.

The series file is JSON, a line per test:
  {"what": ..., "started_unix": when its first test started (Unix seconds: files of one
   date order by it), "tests": {NAME: {"passed": bool, "floor_mib", "headroom_mib" (or null),
   "lowest_mib", "readings", "interval_s", "timestamps": "sampled" | "assumed",
   "test_s": [started, ended] (or null), "t_s": [...], "free_mib": [...]}}}
Times are seconds from the test's first reading; `readings` counts every reading and
`interval_s` is their median spacing, while t_s/free_mib keep, of each run of equal
readings, only its first and last (a line through the kept points passes through the
others), so the lowest reading is always among them.
"""

import json
import os
import sys
import time

MIB = 1 << 20
INTERVAL_S = 0.05  # the sampler's period, and the spacing assumed for files without timestamps

# The shim's published record (policy/src/published.rs): magic at 0, the writer's size at
# 12, seq at 32 (odd while written), kept_vram at 128 (records of 136 bytes and more);
# that file's tests check these offsets.
RECORDS = ("/dev/shm", "greenboost-shim.")
RECORD_MAGIC = b"GBSHIM01"
KEPT_AT, KEPT_SINCE_SIZE = 128, 136


def kept_by_shims(folder=RECORDS[0]):
    """MiB of VRAM the driver keeps for what the processes under the shim moved to T2: the
    sum of their records' kept_vram (records being written, or older ones, count 0)."""
    total = 0
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        if not name.startswith(RECORDS[1]):
            continue
        try:
            with open(os.path.join(folder, name), "rb") as f:
                record = f.read(KEPT_SINCE_SIZE)
        except OSError:
            continue
        if len(record) < KEPT_SINCE_SIZE or record[:8] != RECORD_MAGIC:
            continue
        size, seq = int.from_bytes(record[12:16], "little"), int.from_bytes(record[32:40], "little")
        if size >= KEPT_SINCE_SIZE and seq % 2 == 0:
            total += int.from_bytes(record[KEPT_AT:KEPT_AT + 8], "little")
    return total // MIB


def sample(path):
    """Writes `UNIX_SECONDS FREE_MIB KEPT_MIB` every INTERVAL_S to `path` until killed."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with open(path, "w") as out:
        while True:
            free = pynvml.nvmlDeviceGetMemoryInfo(handle).free // MIB
            out.write(f"{time.time():.3f} {free} {kept_by_shims()}\n")
            out.flush()
            time.sleep(INTERVAL_S)


def read_readings(path, with_kept=False):
    """([(unix seconds, free MiB)], timed) of a sampler file: timed False for a file of
    `FREE_MIB` lines (times then INTERVAL_S apart from 0). Lines of no such form, or
    without their newline (cut short when the sampler was killed), are left out; no
    file, no readings. With `with_kept`, each reading has the kept MiB third (None where
    the line has none)."""
    readings, timed = [], None
    if not os.path.exists(path):
        return readings, True
    with open(path) as f:
        for line in f:
            if not line.endswith("\n"):
                continue
            fields = line.split()
            try:
                if len(fields) in (2, 3) and timed is not False:
                    kept_mib = int(fields[2]) if len(fields) == 3 else None
                    readings.append((float(fields[0]), int(fields[1])) + ((kept_mib,) if with_kept else ()))
                    timed = True
                elif len(fields) == 1 and timed is not True:
                    readings.append((len(readings) * INTERVAL_S, int(fields[0])) + ((None,) if with_kept else ()))
                    timed = False
            except ValueError:
                continue
    return readings, timed is not False


def lowest_reading(path):
    """(free MiB, kept MiB or None) of the first lowest free reading of a sampler file, or
    None when it has none (or is missing): the floor's check and its message, from one read."""
    readings, _ = read_readings(path, with_kept=True)
    return min(readings, key=lambda reading: reading[1])[1:] if readings else None


def kept(readings):
    """The readings less the inner ones of each run of equal values."""
    return [reading for i, reading in enumerate(readings)
            if i in (0, len(readings) - 1) or not readings[i - 1][1] == reading[1] == readings[i + 1][1]]


def series_entry(readings, timed, floor, headroom, started, ended, passed):
    """One test's entry of the series file (readings: read_readings' list, not empty)."""
    t0 = readings[0][0]
    gaps = sorted(b[0] - a[0] for a, b in zip(readings, readings[1:]))
    points = kept(readings)
    return {
        "passed": passed,
        "floor_mib": floor,
        "headroom_mib": headroom,
        "lowest_mib": min(free for _, free in readings),
        "readings": len(readings),
        "interval_s": round(gaps[len(gaps) // 2], 3) if gaps else None,
        "timestamps": "sampled" if timed else "assumed",
        "test_s": [round(started - t0, 3), round(ended - t0, 3)] if timed else None,
        "t_s": [round(t - t0, 3) for t, _ in points],
        "free_mib": [free for _, free in points],
    }


def series(tests_path):
    """The series file's document from a tests' list (see the module's text). A test
    without readings is left out, of its start too."""
    folder = os.path.dirname(os.path.abspath(tests_path))
    tests, first_started = {}, None
    with open(tests_path) as f:
        for line in f:
            if not line.strip():
                continue
            name, floor, headroom, started, ended, verdict = line.split()
            readings, timed = read_readings(os.path.join(folder, f"{name}.free"))
            if readings:
                first_started = float(started) if first_started is None else min(first_started, float(started))
                tests[name] = series_entry(readings, timed, int(floor), None if headroom == "-" else int(headroom),
                                          float(started), float(ended), verdict == "PASS")
    return {"what": "free VRAM (MiB, nvml, device 0) during each shared-GPU test of tests/gpu/run.sh",
            "started_unix": None if first_started is None else int(first_started), "tests": tests}


def dumps(document):
    """The series file's text: the top-level keys a line each, a test a line each."""
    head = [f" {json.dumps(key)}: {json.dumps(value)}" for key, value in document.items() if key != "tests"]
    tests = [f"  {json.dumps(name)}: {json.dumps(entry, separators=(',', ':'))}"
             for name, entry in document["tests"].items()]
    return "{\n" + ",\n".join(head + [' "tests": {\n' + ",\n".join(tests) + "\n }"]) + "\n}\n"


def number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def started_unix(path):
    """When the series file's first test started (Unix seconds), or 0 where the file does
    not say (files written before it did) or does not read."""
    try:
        with open(path) as f:
            document = json.load(f)
    except (OSError, ValueError):
        return 0
    value = document.get("started_unix") if isinstance(document, dict) else None
    return value if number(value) else 0


def load(path):
    """{test: its entry} of a series file, in the file's order; ValueError when the
    file is not one (no test, or an entry without the fields bench/plots.py draws)."""
    with open(path) as f:
        try:
            document = json.load(f)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not JSON: {error}") from None
    tests = document.get("tests") if isinstance(document, dict) else None
    if not isinstance(tests, dict) or not tests:
        raise ValueError(f"{path}: no tests")
    for name, entry in tests.items():
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: {name}: not an object")
        t, free = entry.get("t_s"), entry.get("free_mib")
        if not (isinstance(t, list) and isinstance(free, list) and t and len(t) == len(free)
                and all(map(number, t + free)) and t == sorted(t)):
            raise ValueError(f"{path}: {name}: t_s and free_mib are not lists of numbers of one length, "
                             "in time order")
        if not (number(entry.get("floor_mib")) and isinstance(entry.get("passed"), bool)):
            raise ValueError(f"{path}: {name}: no floor_mib or passed")
        if not (entry.get("headroom_mib") is None or number(entry["headroom_mib"])):
            raise ValueError(f"{path}: {name}: headroom_mib is not a number")
        span = entry.get("test_s")
        if not (span is None or (isinstance(span, list) and len(span) == 2 and all(map(number, span)))):
            raise ValueError(f"{path}: {name}: test_s is not [started, ended]")
    return tests


def main():
    role, args = sys.argv[1], sys.argv[2:]
    if role == "sample":
        sample(args[0])
    elif role == "floor":
        reading = lowest_reading(args[0])
        if reading is None:
            return 1
        free, kept_mib = reading
        print(free, "?" if kept_mib is None else kept_mib)
    elif role == "series":
        document = series(args[0])
        with open(args[1], "w") as out:
            out.write(dumps(document))
        print(f"{args[1]}: {len(document['tests'])} tests")
    else:
        raise SystemExit(f"unknown role {role}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
