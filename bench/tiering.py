#!/usr/bin/env python3
"""Issue 12's ratios for live tiering, measured side by side in one run on the H200 (run
by hand, not by run.sh; its output is committed by hand as
bench/results/tiering-<date>-<commit>.md).

  PYTHONPATH=build/bench-carry/python python3 bench/tiering.py [--shim PATH] [--out DIR]
      [--only recovery,migration,demotion]

The shim is --shim, else GREENBOOST_SHIM, else the first of build/bench-carry/,
build/gpu-carry/, target/release/ that holds libgreenboost_cuda.so (as bench/run.sh).
This process never loads it: each measurement is a subprocess, started with
LD_PRELOAD=shim GREENBOOST_BACKEND=userspace GREENBOOST_T2_CAP=48G GREENBOOST_LOG=info
(tiering at its defaults: GREENBOOST_TIERING=auto, GREENBOOST_DEMOTE=on,
GREENBOOST_TIER_INTERVAL_MS=100) or, for the foreign processes and Unified Memory,
without it. Every subprocess has a timeout; each one's stdout and stderr land in --out
(default /tmp/gbtiering, with tiering.json: every figure and raw result); when OUT is set,
$OUT/tiering-raw.tar.gz and $OUT/tiering.json too.

  recovery_ratio   transformers greedy `generate` (Llama 3 8B shape, random bf16 weights
                   drawn on the GPU as bench/decode.py does, 128-token prompt, cuDNN
                   attention off as in decode-hf-2026-12-01.md) started beside a foreign
                   process holding all but 9 GiB (so ~9 GB of weights land in movable
                   T2); a stopping criterion timestamps every token (after a
                   synchronize) and kills the foreign process at token 24. Decode
                   tokens/s over a window fixed in advance — 20 s (and at least 64
                   tokens) from the first token 10 s or more after the kill — divided
                   by the same program's rate under the shim with the whole GPU free
                   (the same window, counted from token 24), run once before the
                   recovery run and once after it (decode_free_before_tok_s,
                   decode_free_after_tok_s); the ratio is against their mean: the
                   client is CPU-bound and its rate drifts by a fourth over a minute on
                   the H200's host, so the two runs that bracket the recovery run in
                   time stand for the free rate at its time. recovery_time_to_rate_s:
                   from the kill to the first token whose last 8 tokens (all after the
                   kill) ran at >= 0.9 of that free rate.
  migration_ratio  beside a foreign process leaving 3 GiB, 16 x 1 GiB tensors (those in
                   T2 are movable) filled on the GPU; the foreign process is killed and
                   nothing computes; the counters are polled until tier_vram covers them:
                   promote_GBps = promoted_bytes / promote_ns over that wait (also the
                   wall-clock rate from the kill), divided by pinned cudaMemcpy H2D in
                   the same process (2 GiB pinned tensor -> a VRAM tensor, best of 5,
                   CUDA events). Beside it, without the shim: the driver's own rate
                   for the same moves (16 x 1 GiB host-preferred managed buffers
                   written by the GPU, prefetched to the device in 2 GiB groups, right
                   after a foreign process holding all but 3 GiB exits, as the shim's
                   are, and again on the settled GPU: driver_prefetch_GBps, the bound
                   promote_vs_driver_prefetch measures against; then how long a foreign
                   cuMemAlloc of the free VRAM + 4 GiB waits for the driver to evict
                   them, preferred on the host and on the device), and Unified Memory's own
                   fault-driven migration: 8 GiB of cuMemAllocManaged memory, preferred
                   location the device, no prefetch, first touched by the CPU (memset),
                   then one GPU pass reading it all (a CuPy sum): bytes / time =
                   uvm_fault_GBps.
  demotion         beside a foreign process leaving 3 GiB, 16 x 512 MiB bf16 matrices
                   (movable), promoted once the foreign process is killed; the program
                   then computes a chain x <- tanh(x @ W) over all of them, again and
                   again, each result compared with torch.equal to the first one computed
                   after the promotion (GPU free); a foreign process (no shim) asks for
                   torch.empty(free VRAM + 4 GiB) every 100 ms for up to 30 s, holds it
                   for 5 s of our steps; demotion_wait_s is how long it waited,
                   demotion_ok that it got the memory, our program kept stepping after
                   it, and every result matched (also the chain computed before the
                   promotion, weights in T2).

Prints KV lines per figure and, last, one JSON line {"recovery_ratio", ...}. About 4-5
minutes on the H200 (each subprocess spends 5-15 s importing torch/transformers; each of
the three decode runs ~55 s); --only picks figures.

This file holds the run: the subprocesses, each figure's measurement, the JSON. The
subprocesses are this file's roles too (first argument), dispatched to the modules
beside it: decode (tiering_decode.py), migrate, uvm, demote (tiering_moves.py; under the
shim, except uvm), balloon LEAVE_GIB (gbgpu.foreign's) and grab EXTRA_GIB TIMEOUT_S
(tiering_grab.py; foreign, no shim); tiering_shim.py holds what the roles under the shim
share (the shim's counters). PYTHONPATH names the gbgpu package's folder (bench/prepare.sh
carries it beside the shim); the subprocesses inherit it.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

from gbgpu.foreign import balloon, die_with_parent
from tiering_decode import role_decode
from tiering_grab import role_grab
from tiering_moves import role_demote, role_migrate, role_prefetch, role_uvm

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

RATE_RUN = 8          # tokens behind each point of the time-to-rate curve


def kv(key, value):
    print(f"KV {key}={value}", flush=True)


# --- the run -------------------------------------------------------------------------

class Child:
    """A subprocess whose stdout lines are read by a thread (stderr to a file)."""

    def __init__(self, name, argv, env, raw, stdin=False):
        self.name = name
        self.err = open(os.path.join(raw, f"{name}.err"), "w")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.err, text=True, env=env,
                                     stdin=subprocess.PIPE if stdin else subprocess.DEVNULL)
        self.lines = []
        self.out = open(os.path.join(raw, f"{name}.out"), "w")
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        RUNNING.append(self)

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            self.out.write(line)
            self.out.flush()

    def first(self, prefix):
        return next((line for line in self.lines if line.startswith(prefix)), None)

    def wait_line(self, prefix, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.first(prefix)
            if line or self.proc.poll() is not None:
                self.reader.join(timeout=2)
                return self.first(prefix)
            time.sleep(0.05)
        return None

    def result(self, timeout):
        """The child's last JSON line once it exits (killed at the timeout)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return {"error": f"timed out after {timeout} s"}
        self.reader.join(timeout=5)
        for line in reversed(self.lines):
            if line.startswith("{"):
                return json.loads(line)
        tail = open(self.err.name).read()[-400:].replace("\n", " ")
        return {"error": f"exit status {self.proc.returncode}, no JSON line; stderr: {tail}"}

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        if self in RUNNING:
            RUNNING.remove(self)


RUNNING = []


class Run:
    def __init__(self, shim, raw):
        self.raw = raw
        base = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        base["GB_TIERING_PARENT"] = str(os.getpid())
        base["PYTHONUNBUFFERED"] = "1"
        self.plain = base
        self.shimmed = dict(base, LD_PRELOAD=shim, GREENBOOST_BACKEND="userspace",
                            GREENBOOST_T2_CAP=os.environ.get("GREENBOOST_T2_CAP", "48G"),
                            GREENBOOST_LOG=os.environ.get("GREENBOOST_LOG", "info"))

    def role(self, name, role, *args, shim=True, stdin=False):
        return Child(name, [sys.executable, os.path.abspath(__file__), role, *map(str, args)],
                     self.shimmed if shim else self.plain, self.raw, stdin=stdin)

    def balloon(self, name, leave_gib):
        balloon = self.role(name, "balloon", leave_gib, shim=False)
        if not balloon.wait_line("ready", 60):
            balloon.kill()
            raise RuntimeError(f"the foreign process {name} did not start: {open(balloon.err.name).read()[-300:]}")
        return balloon


# --- the figures ---------------------------------------------------------------------

def time_to_rate(after_kill, target):
    """Seconds from the kill to the first token whose last RATE_RUN tokens (all after the
    kill) ran at >= target tokens/s."""
    for k in range(RATE_RUN, len(after_kill)):
        if RATE_RUN / (after_kill[k] - after_kill[k - RATE_RUN]) >= target:
            return after_kill[k]
    return None


def first_difference(a, b):
    """The first token where two decode runs differ (greedy: none expected)."""
    n = min(len(a["tokens"]), len(b["tokens"]))
    return {"compared": n, "first_difference": next((i for i in range(n) if a["tokens"][i] != b["tokens"][i]), None)}


def measure_recovery(run, out):
    """Three decode runs, the same settings: the GPU free, beside the foreign process
    killed at token 24, the GPU free again. The baseline is the free runs' mean."""
    before = run.role("decode_free_before", "decode").result(200)
    out["decode_free_before"] = before
    balloon = run.balloon("decode_balloon", 9)
    recovery = run.role("decode_recovery", "decode", "--kill-pid", balloon.proc.pid).result(200)
    balloon.kill()
    out["decode_recovery"] = recovery
    after = run.role("decode_free_after", "decode").result(200)
    out["decode_free_after"] = after
    for name, r in (("free_before", before), ("recovery", recovery), ("free_after", after)):
        slim = {k: v for k, v in r.items() if k not in ("tokens", "after_kill_s")}
        kv(f"tiering.decode_{name}", json.dumps(slim))
    out["decode_free_before_tok_s"] = before.get("window_tok_s")
    out["decode_free_after_tok_s"] = after.get("window_tok_s")
    kv("tiering.decode_free_before_tok_s", out["decode_free_before_tok_s"])
    kv("tiering.decode_free_after_tok_s", out["decode_free_after_tok_s"])
    if "window_tok_s" in before and "window_tok_s" in after:
        out["free_runs_same_tokens"] = first_difference(before, after)
    frees = [(r["window_tok_s"], name) for name, r in (("decode_free_before", before), ("decode_free_after", after))
             if "window_tok_s" in r]
    if not frees or "window_tok_s" not in recovery:
        out["recovery_ratio"] = None
        out["recovery_missing"] = (recovery.get("error") or before.get("error") or after.get("error")
                                   or "a run made no full window")
        return
    free_tok_s = sum(rate for rate, _ in frees) / len(frees)
    baseline = max(frees)[1]  # the tokens are compared against one of them
    free = out[baseline]
    out["recovery_baseline"] = "mean of " + " and ".join(name for _, name in frees)
    out["free_tok_s"], out["recovery_tok_s"] = free_tok_s, recovery["window_tok_s"]
    out["recovery_ratio"] = recovery["window_tok_s"] / free_tok_s
    out["recovery_pre_kill_tok_s"] = recovery.get("pre_kill_tok_s")
    after_kill = recovery.get("after_kill_s", [])
    out["recovery_time_to_rate_s"] = time_to_rate(after_kill, 0.9 * free_tok_s)
    # tokens/s in each second after the kill, for the first 15
    out["recovery_tok_s_by_second"] = [sum(1 for t in after_kill if b <= t < b + 1) for b in range(15)]
    out["recovery_same_tokens"] = dict(first_difference(free, recovery), against=baseline)

    def rate(value):
        return f"{value:.2f}" if value is not None else "none"

    kv("tiering.recovery_ratio", f"{out['recovery_ratio']:.3f} ({recovery['window_tok_s']:.2f} / "
       f"{free_tok_s:.2f} tok/s, the free runs' mean: before {rate(out['decode_free_before_tok_s'])}, after "
       f"{rate(out['decode_free_after_tok_s'])} tok/s; before the kill {out['recovery_pre_kill_tok_s'] or 0:.2f} tok/s)")
    kv("tiering.recovery_time_to_rate_s", out["recovery_time_to_rate_s"])


def measure_migration(run, out):
    balloon = run.balloon("migrate_balloon", 3)
    migrate = run.role("migrate", "migrate", "--kill-pid", balloon.proc.pid).result(150)
    balloon.kill()
    kv("tiering.migrate", json.dumps(migrate))
    out["migrate"] = migrate
    balloon = run.balloon("prefetch_balloon", 3)
    prefetch = run.role("prefetch", "prefetch", "--kill-pid", balloon.proc.pid, shim=False).result(150)
    balloon.kill()
    kv("tiering.prefetch", json.dumps(prefetch))
    out["prefetch"] = prefetch
    out["driver_prefetch_GBps"] = prefetch.get("driver_prefetch_GBps")
    uvm = run.role("uvm", "uvm", 8, shim=False).result(120)
    kv("tiering.uvm", json.dumps(uvm))
    out["uvm"] = uvm
    out["uvm_fault_GBps"] = uvm.get("uvm_fault_GBps")
    out["promote_GBps"] = migrate.get("promote_GBps")
    out["promote_wall_GBps"] = migrate.get("promote_wall_GBps")
    out["pinned_h2d_GBps"] = migrate.get("pinned_h2d_GBps")
    if out["promote_GBps"] and out["pinned_h2d_GBps"]:
        out["migration_ratio"] = out["promote_GBps"] / out["pinned_h2d_GBps"]
        kv("tiering.migration_ratio", f"{out['migration_ratio']:.3f} (promotion {out['promote_GBps']:.2f} GB/s, "
           f"{out['promote_wall_GBps'] or 0:.2f} GB/s from the kill; pinned H2D {out['pinned_h2d_GBps']:.2f} GB/s)")
    else:
        out["migration_ratio"] = None
    if out["promote_GBps"] and out["driver_prefetch_GBps"]:
        # What bounds the ratio: the driver's own prefetch of the same buffers.
        out["promote_vs_driver_prefetch"] = out["promote_GBps"] / out["driver_prefetch_GBps"]
        kv("tiering.promote_vs_driver_prefetch", f"{out['promote_vs_driver_prefetch']:.3f} (driver prefetch "
           f"{out['driver_prefetch_GBps']:.2f} GB/s = {out['driver_prefetch_GBps'] / out['pinned_h2d_GBps']:.3f} of "
           f"pinned H2D on a settled GPU; {prefetch.get('after_exit_GBps') or 0:.2f} GB/s right after a foreign exit)")
    if prefetch.get("after_exit_GBps") and out["promote_GBps"]:
        out["driver_prefetch_after_exit_GBps"] = prefetch["after_exit_GBps"]
        out["promote_vs_driver_after_exit"] = out["promote_GBps"] / prefetch["after_exit_GBps"]
    if out["promote_GBps"] and out["uvm_fault_GBps"]:
        out["promote_vs_uvm_fault"] = out["promote_GBps"] / out["uvm_fault_GBps"]
    kv("tiering.uvm_fault_GBps", out["uvm_fault_GBps"])


def measure_demotion(run, out):
    balloon = run.balloon("demote_balloon", 3)
    child = run.role("demote", "demote", "--kill-pid", balloon.proc.pid, stdin=True)
    detail = {}
    try:
        promoted = child.wait_line("promoted", 150)
        balloon.kill()
        if not promoted:
            detail["error"] = "the program never reported its promotion"
        else:
            time.sleep(2)  # steps with every matrix in VRAM
            grab = run.role("demote_foreign", "grab", 4, 30, shim=False)
            line = grab.wait_line(("ok", "failed"), 60)
            detail["foreign"] = line or f"no answer: {open(grab.err.name).read()[-300:]}"
            if line and line.startswith("ok"):
                detail["wait_s"] = float(line.split()[1])
                detail["foreign_ok_at"] = float(line.split()[-1])
                time.sleep(5)  # our steps while the foreign process holds the memory
            try:
                child.proc.stdin.write("stop\n")
                child.proc.stdin.flush()
            except OSError:  # it ended already: its result says why
                pass
            result = child.result(60)
            grab.kill()
            detail["program"] = {k: v for k, v in result.items() if k != "step_times"}
            steps = result.get("step_times", [])
            if "foreign_ok_at" in detail and steps:
                after = [t for t in steps if t > detail["foreign_ok_at"]]
                gaps = [b - a for a, b in zip(steps, steps[1:])]
                detail["steps_after_foreign"] = len(after)
                detail["longest_step_gap_s"] = max(gaps) if gaps else None
    finally:
        child.kill()
        balloon.kill()
    program = detail.get("program", {})
    out["demotion"] = detail
    out["demotion_wait_s"] = detail.get("wait_s")
    out["demotion_ok"] = bool(detail.get("wait_s") is not None and detail.get("steps_after_foreign", 0) >= 3
                              and program.get("mismatches") == 0 and program.get("same_as_in_t2") is True
                              and program.get("promote_wait_s") is not None and "error" not in program)
    kv("tiering.demotion", json.dumps(detail))
    kv("tiering.demotion_wait_s", out["demotion_wait_s"])
    kv("tiering.demotion_ok", out["demotion_ok"])


def find_shim(given):
    if given:
        return os.path.abspath(given)
    for candidate in ("build/bench-carry", "build/gpu-carry", "target/release"):
        path = os.path.join(ROOT, candidate, "libgreenboost_cuda.so")
        if os.path.isfile(path):
            return path
    return None


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ROLES:
        die_with_parent()
        return ROLES[sys.argv[1]](sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shim", default=os.environ.get("GREENBOOST_SHIM", ""))
    parser.add_argument("--out", default="/tmp/gbtiering", help="folder for each subprocess's stdout and stderr")
    parser.add_argument("--only", default="recovery,migration,demotion", help="comma list of the figures to measure")
    opts = parser.parse_args()
    shim = find_shim(opts.shim)
    if not shim or not os.path.isfile(shim):
        raise SystemExit(f"tiering.py: no libgreenboost_cuda.so ({shim or 'none found'}): build it with "
                         "bench/prepare.sh, or give --shim")
    os.makedirs(opts.out, exist_ok=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run = Run(shim, opts.out)
    kv("tiering.shim", shim)
    out = {"shim": shim, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    started = time.monotonic()
    try:
        for name, measure in (("recovery", measure_recovery), ("migration", measure_migration),
                              ("demotion", measure_demotion)):
            if name not in opts.only.split(","):
                continue
            began = time.monotonic()
            try:
                measure(run, out)
            except Exception as error:  # one figure's failure never costs the others
                out[f"{name}_error"] = f"{type(error).__name__}: {str(error)[:300]}"
                kv(f"tiering.{name}_error", out[f"{name}_error"])
            kv(f"tiering.{name}_s", f"{time.monotonic() - began:.1f}")
    finally:
        for child in list(RUNNING):
            child.kill()
    out["seconds"] = time.monotonic() - started
    keys = ("recovery_ratio", "decode_free_before_tok_s", "decode_free_after_tok_s", "recovery_time_to_rate_s",
            "migration_ratio", "promote_GBps", "pinned_h2d_GBps", "driver_prefetch_GBps", "promote_vs_driver_prefetch",
            "uvm_fault_GBps", "demotion_wait_s", "demotion_ok")
    summary = {key: out.get(key) for key in keys}
    summary.update({k: v for k, v in out.items() if k not in keys})
    for name in ("decode_free_before", "decode_recovery", "decode_free_after"):
        if isinstance(summary.get(name), dict):
            summary[name] = {k: v for k, v in summary[name].items() if k not in ("tokens", "after_kill_s")}
    with open(os.path.join(opts.out, "tiering.json"), "w") as f:
        json.dump(out, f)
    if os.environ.get("OUT") and os.path.isdir(os.environ["OUT"]):
        # $OUT gives back a few files only: the folder as one archive, and the figures.
        import shutil
        import tarfile

        with tarfile.open(os.path.join(os.environ["OUT"], "tiering-raw.tar.gz"), "w:gz") as archive:
            archive.add(opts.out, arcname="tiering-raw")
        shutil.copy(os.path.join(opts.out, "tiering.json"), os.environ["OUT"])
    print(json.dumps(summary), flush=True)


ROLES = {"decode": role_decode, "migrate": role_migrate, "prefetch": role_prefetch, "uvm": role_uvm, "demote": role_demote,
         "balloon": lambda args: balloon(float(args[0])), "grab": role_grab}

if __name__ == "__main__":
    main()
