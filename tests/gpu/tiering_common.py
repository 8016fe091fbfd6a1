"""What tests/gpu/tiering_check.py's parts share: the units, the waits' limits (WAIT_S
each, DEADLINE_S in all) and the output (KV lines, PASS/FAIL verdicts and their count).
The shim's counters are gbgpu.shim_exports'."""

import time

GIB = 1 << 30
MIB = 1 << 20
WAIT_S = 60                  # the longest any wait here may take
DEADLINE_S = 200             # no wait runs past this, from the start (run.sh's limit is 240 s)
STARTED = time.monotonic()

failures = 0


def wait_s():
    """A wait's timeout: WAIT_S, or what is left before the deadline."""
    return max(1.0, min(WAIT_S, STARTED + DEADLINE_S - time.monotonic()))


def kv(key, value):
    print(f"KV tiering.{key}={value}", flush=True)


def verdict(ok, name, why):
    global failures
    failures += 0 if ok else 1
    print(f"{'PASS' if ok else 'FAIL'} tiering.{name}: {why}", flush=True)
    return ok


def failure_count():
    """How many verdicts failed so far."""
    return failures

