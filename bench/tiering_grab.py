"""bench/tiering.py's grab role, a foreign process run without the shim: asks for more
VRAM than is free until it gets it (the demotion figure's foreign process; the balloon
role is gbgpu.foreign's)."""

import time

from gbgpu.foreign import GIB, MIB


def role_grab(args):
    """torch.empty(free VRAM + EXTRA_GIB) every 100 ms for up to TIMEOUT_S; "ok SECONDS
    ATTEMPTS MIB" or "failed ..."; then holds it until killed."""
    import torch

    extra, limit = float(args[0]), float(args[1])
    free, _ = torch.cuda.mem_get_info()
    want = free + int(extra * GIB)
    print(f"asking {want // MIB} free {free // MIB}", flush=True)
    started, attempts, block, error = time.time(), 0, None, ""
    while block is None and time.time() - started < limit:
        attempts += 1
        try:
            block = torch.empty(want, dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
        except torch.cuda.OutOfMemoryError as oom:
            error = str(oom).splitlines()[0][:160]
            time.sleep(0.1)
    if block is None:
        print(f"failed {time.time() - started:.3f} {attempts} {want // MIB} {error}", flush=True)
    else:
        print(f"ok {time.time() - started:.3f} {attempts} {want // MIB} at {time.time():.3f}", flush=True)
    while True:
        time.sleep(1)
