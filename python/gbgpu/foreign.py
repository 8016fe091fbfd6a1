"""A foreign process on the device: a program without the shim that holds VRAM, as
another user's process would (bench/tiering.py's and tests/gpu/tiering_check.py's
`balloon` roles, tests/gpu/shared.sh, bench/probes/tiering_probe.py), and the process
helpers that keep such children from outliving the run.

  python3 -m gbgpu.foreign balloon LEAVE_GIB [GROW_GIB DELAY_S]
  python3 -m gbgpu.foreign allocator MIB
"""

import ctypes
import os
import signal
import subprocess
import sys
import time

GIB = 1 << 30
MIB = 1 << 20


def balloon(leave_gib, grow_gib=0.0, delay_s=0.0):
    """Holds all but LEAVE_GIB of the free VRAM in plain cudaMalloc memory (PyTorch's
    caching allocator), prints "ready MIB", optionally grows by GROW_GIB after DELAY_S
    seconds (prints "grown MIB"; never past 256 MiB short of free), and holds until it
    is killed."""
    import torch

    free, _ = torch.cuda.mem_get_info()
    hold = max(0, free - int(leave_gib * GIB))
    blocks = [torch.empty(hold, dtype=torch.uint8, device="cuda")]
    torch.cuda.synchronize()
    print(f"ready {hold // MIB}", flush=True)
    if grow_gib > 0:
        time.sleep(delay_s)
        free, _ = torch.cuda.mem_get_info()
        grow = min(int(grow_gib * GIB), max(0, free - 256 * MIB))
        blocks.append(torch.empty(grow, dtype=torch.uint8, device="cuda"))
        torch.cuda.synchronize()
        print(f"grown {grow // MIB}", flush=True)
    while True:
        time.sleep(1)


def allocator(mib):
    """Allocates MIB of VRAM and frees it, over and over, through libcuda itself (no
    caching allocator: every cuMemAlloc is the driver's to answer), as another program
    allocating while the shim moves memory would; prints "ready", and once stopped
    (SIGTERM) "TRIES FAILED SLOWEST_MS": the allocations made, those that failed, and the
    slowest."""
    cuda = ctypes.CDLL("libcuda.so.1")
    context, ptr = ctypes.c_void_p(), ctypes.c_uint64()
    cuda.cuInit(0)
    cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0)
    cuda.cuCtxSetCurrent(context)
    stopped = []
    signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    print("ready", flush=True)
    tries, failed, slowest = 0, 0, 0.0
    while not stopped:
        began = time.perf_counter()
        status = cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(int(mib * MIB)))
        slowest = max(slowest, time.perf_counter() - began)
        tries += 1
        if status == 0:
            cuda.cuMemFree_v2(ptr)
        else:
            failed += 1
    print(tries, failed, round(slowest * 1e3, 3), flush=True)


def child_env():
    """This process's environment for a foreign child: without the shim (no LD_PRELOAD),
    this process named as the parent it must die with (`die_with_parent`)."""
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env["GB_TIERING_PARENT"] = str(os.getpid())
    return env


def die_with_parent():
    """A foreign process must never outlive the program that started it (it holds the
    device's VRAM): SIGKILL when the parent dies, and exit at once if it already has
    (the parent's pid is GB_TIERING_PARENT, set by the parent)."""
    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    parent = int(os.environ.get("GB_TIERING_PARENT", "0"))
    if parent and os.getppid() != parent:
        os._exit(1)


class AllocatorBeside:
    """`with AllocatorBeside(mib) as allocator:` — the `allocator` role in a process of its
    own (without the shim, dying with this one) while the block runs. `started` says
    whether it did; after the block, `tries`, `failed` and `slowest_ms` are its counts
    (None where it gave none)."""

    def __init__(self, mib):
        self.mib = mib
        self.started = False
        self.tries = self.failed = self.slowest_ms = None
        self.proc = None

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-m", "gbgpu.foreign", "allocator", str(self.mib)],
                                     stdout=subprocess.PIPE, text=True, env=child_env(), start_new_session=True)
        self.started = self.proc.stdout.readline().strip() == "ready"
        return self

    def __exit__(self, *_):
        try:
            self.proc.send_signal(signal.SIGTERM)
            counts = self.proc.communicate(timeout=30)[0].split()[:3]
            if len(counts) == 3:
                self.tries, self.failed, self.slowest_ms = int(counts[0]), int(counts[1]), float(counts[2])
        except (subprocess.TimeoutExpired, ValueError):
            pass
        finally:
            kill_group(self.proc)
        return False


def kill_group(proc):
    """SIGKILL to the process group of `proc` (started with start_new_session: it, and
    what it spawned), where it may already be gone."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_pid(pid):
    """SIGKILL, where the process may already be gone."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main():
    roles = {"balloon": balloon, "allocator": allocator}
    if len(sys.argv) < 3 or sys.argv[1] not in roles:
        raise SystemExit("usage: python3 -m gbgpu.foreign balloon LEAVE_GIB [GROW_GIB DELAY_S] | allocator MIB")
    roles[sys.argv[1]](*[float(a) for a in sys.argv[2:]])


if __name__ == "__main__":
    main()
