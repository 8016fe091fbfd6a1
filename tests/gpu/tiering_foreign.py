"""tests/gpu/tiering_check.py's foreign processes: the roles run in them without the shim
(balloon, grab; started as `tiering_check.py ROLE ...`, whose main dispatches here), and
Foreign, which starts one, reads its output lines, waits for it and kills it (LIVE: those
still running, killed when the program ends)."""

import os
import subprocess
import sys
import threading
import time

from gbgpu.foreign import balloon, child_env, die_with_parent
from tiering_common import GIB, MIB, wait_s

HERE = os.path.dirname(os.path.abspath(__file__))
ENTRY = os.path.join(HERE, "tiering_check.py")  # the script whose first argument picks the role


def role_balloon(leave_gib):
    die_with_parent()
    balloon(leave_gib)


def role_grab(leave_gib, extra):
    """More than is free: the free VRAM + extra - leave, retried every 100 ms."""
    die_with_parent()
    import torch

    free, _ = torch.cuda.mem_get_info()
    want = max(0, free + int(extra) - int(leave_gib * GIB))
    print(f"asking {want // MIB} free {free // MIB}", flush=True)
    started, attempts, block = time.monotonic(), 0, None
    while block is None and time.monotonic() - started < 50:
        attempts += 1
        try:
            block = torch.empty(want, dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
        except torch.cuda.OutOfMemoryError:
            time.sleep(0.1)
    if block is None:
        print(f"failed {want // MIB} after {attempts} attempts", flush=True)
    else:
        print(f"ready {want // MIB} {time.monotonic() - started:.3f} {attempts}", flush=True)
    while True:
        time.sleep(1)


class Foreign:
    """One of the roles above in a child without the shim; its output lines are read
    by a thread."""

    def __init__(self, *args):
        self.what = " ".join(args)
        self.proc = subprocess.Popen([sys.executable, ENTRY, *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=child_env())
        self.lines = []
        threading.Thread(target=self._read, daemon=True).start()
        LIVE.append(self)

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def ready(self):
        return next((line for line in self.lines if line.startswith("ready")), None)

    def gone(self):
        return self.proc.poll() is not None or any(line.startswith("failed") for line in self.lines)

    def wait_ready(self):
        deadline = time.monotonic() + wait_s()
        while time.monotonic() < deadline and not self.ready() and not self.gone():
            time.sleep(0.05)
        return self.ready()

    def tail(self):
        return " | ".join(self.lines[-4:])[-300:]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        if self in LIVE:
            LIVE.remove(self)


LIVE = []
