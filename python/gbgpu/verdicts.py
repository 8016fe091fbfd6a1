"""The result lines of the GPU suite's Python programs, as tests/gpu/run.sh collects
them: `PASS name: detail` / `FAIL name: detail` (`record`) and `KV key=value` (`kv`),
with the counts of each kind so far (`COUNTS`), from which a program's exit status and
summary come."""

COUNTS = {"passed": 0, "failed": 0}


def record(name, ok, detail):
    COUNTS["passed" if ok else "failed"] += 1
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)


def kv(key, value):
    print(f"KV {key}={value}", flush=True)
