"""tests/gpu/tiering_swap.py's roles that run under the shim, each in a process of its own
beside the program's balloon (train, attributes, ipc, make_room; dlpack is in
tiering_swap_dlpack.py), and what the roles share: their output lines, the shim's
counters, the driver's view of a pointer, exact block checksums.

A role prints `KV key=value` figures (relayed as they are), `VERDICT {json}` lines (name,
ok, detail: relayed as PASS/FAIL) and at most one `DATA {json}` line (what
tiering_swap.py compares across runs). Nothing here imports torch at module level: the
program that relays the lines, and the children multiprocessing spawns, import this file.
"""

import ctypes
import json
import os
import time

from gbgpu.shim_exports import Shim, ShimStats
from gbgpu.verdicts import kv

GIB = 1 << 30
MIB = 1 << 20
COUNTERS = ("movable_allocs", "tier_vram", "promotions", "demotions", "promoted_bytes", "demoted_bytes", "swaps",
            "headroom_spills", "t2_used", "t2_peak", "t2_after_vram_oom", "gemm_staged", "promote_ns", "demote_ns",
            "given_back_bytes", "give_backs")


def verdict(name, ok, detail):
    print("VERDICT " + json.dumps({"name": name, "ok": bool(ok), "detail": str(detail)}), flush=True)


def data(**fields):
    print("DATA " + json.dumps(fields), flush=True)


def shim_here():
    """The shim's exports in this process, or raises with the reason (not preloaded, or
    older than the give-back counters)."""
    shim = Shim()
    if shim.sized is None or shim.t2 is None:
        raise RuntimeError("the shim's exports are not in this process (is libgreenboost_cuda.so preloaded?)")
    if shim.size < ctypes.sizeof(ShimStats):
        raise RuntimeError(f"greenboost_shim_stats_sized answers {shim.size} bytes, fewer than ShimStats' "
                           f"{ctypes.sizeof(ShimStats)}: a shim without the give-back counters")
    return shim


def counters(shim):
    s = shim.stats()
    return {name: int(getattr(s, name)) for name in COUNTERS}


def grown(before, after, names=("swaps", "promotions", "demotions", "demoted_bytes", "promoted_bytes",
                                 "given_back_bytes", "give_backs")):
    return {name: after[name] - before[name] for name in names}


def figures(prefix, values):
    for name, value in values.items():
        kv(f"{prefix}.{name}", value)


class Driver:
    """libcuda's view of a pointer: cuPointerGetAttribute, which the shim answers for the
    memory it made as the driver would for cudaMalloc memory (device memory, not managed:
    shim/src/hooks/pointer_attributes.rs), and cuMemRangeGetAttribute, which it does not
    hook (managed memory's own view)."""

    MEMORY_TYPE = 2  # CU_POINTER_ATTRIBUTE_MEMORY_TYPE
    LAST_PREFETCH_LOCATION = 4  # CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.lib.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_ulonglong]
        self.lib.cuPointerGetAttribute.restype = ctypes.c_int
        self.lib.cuMemRangeGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                                    ctypes.c_ulonglong, ctypes.c_size_t]
        self.lib.cuMemRangeGetAttribute.restype = ctypes.c_int

    def get(self, ptr, attribute):
        """The attribute's value, or `error<code>`."""
        value = ctypes.c_uint64(0)
        rc = self.lib.cuPointerGetAttribute(ctypes.byref(value), attribute, ptr)
        return value.value if rc == 0 else f"error{rc}"

    def managed(self, ptr):
        """1 where the driver keeps a managed range at `ptr` (its last prefetch location
        reads), else 0."""
        return int(isinstance(self.last_prefetch(ptr), int))

    def last_prefetch(self, ptr):
        """Where managed memory was last prefetched (a device ordinal, -1 the host, -2 none)."""
        value = ctypes.c_int(-2)
        rc = self.lib.cuMemRangeGetAttribute(ctypes.byref(value), 4, self.LAST_PREFETCH_LOCATION, ptr, 1)
        return value.value if rc == 0 else f"error{rc}"


def block_sums(t, words=1 << 20, blocks_at_once=16):
    """Exact checksums of a contiguous tensor: the sum of each block of `words` 32-bit words
    (int64, on the host); compared before and after a move, a page that changed shows.
    A sum to int64 converts its input first: a few blocks at a time (a 128 MiB temporary),
    and the cached temporary given back, so that no pool block is left for the
    allocations a check wants to see made."""
    import torch

    flat = t.detach().reshape(-1).view(torch.uint8).view(torch.int32)
    if flat.numel() % words:
        words = flat.numel()
    step = words * blocks_at_once
    sums = [flat[start:start + step].view(-1, words).sum(dim=1, dtype=torch.int64).cpu()
            for start in range(0, flat.numel(), step)]
    torch.cuda.empty_cache()
    return torch.cat(sums)


def start_torch():
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return free, total


def load_until_t2(shim, make, most):
    """The program's weights, loaded before it computes: `make(index)` tensors until one
    lands in T2 (the room is full) or `most` are made. Returns them and where each went."""
    tensors, where = [], []
    for index in range(most):
        t = make(index)
        tensors.append(t)
        in_t2 = shim.t2_bytes(t)
        where.append("vram" if in_t2 == 0 else "t2" if in_t2 == t.numel() * t.element_size() else "split")
        if in_t2:
            break
    return tensors, where


# --- train: swap.training's program ----------------------------------------------------------
TRAIN_DIM = 16384       # bf16 [D, D] weights: 512 MiB each
TRAIN_TOKENS = 8192     # [T, D] activations: 256 MiB each (make_room takes weights up to twice that)
TRAIN_FROZEN = 8        # frozen layers loaded first: with the trained one, x and the target 5 GiB
TRAIN_STEPS = 6


def role_train(mode):
    """A small training loop, deterministic: a trained Linear(D, D) then TRAIN_FROZEN frozen
    tanh(Linear) layers, MSE against a fixed target, AdamW; the losses (float.hex) and the
    shim's counters as DATA."""
    import torch
    import torch.nn.functional as F

    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    shim = shim_here()
    free, _ = start_torch()
    prefix = f"swap.training.{mode}"
    kv(f"{prefix}.free_at_start_mib", free // MIB)
    start = counters(shim)
    g = torch.Generator(device="cuda").manual_seed(1234)
    d, tokens, bf16 = TRAIN_DIM, TRAIN_TOKENS, torch.bfloat16

    def weight():
        return torch.empty(d, d, dtype=bf16, device="cuda").normal_(0.0, d ** -0.5, generator=g)

    frozen = [weight() for _ in range(TRAIN_FROZEN)]
    w = weight().requires_grad_()
    x = torch.empty(tokens, d, dtype=bf16, device="cuda").normal_(0.0, 1.0, generator=g)
    target = torch.empty(tokens, d, dtype=bf16, device="cuda").uniform_(-0.5, 0.5, generator=g)
    torch.cuda.synchronize()
    loaded = frozen + [w, x, target]
    kv(f"{prefix}.loaded_mib", sum(t.numel() * t.element_size() for t in loaded) // MIB)
    kv(f"{prefix}.loaded_in_t2_mib", sum(shim.t2_bytes(t) for t in loaded) // MIB)
    opt = torch.optim.AdamW([w], lr=1e-3, foreach=False)
    losses, began = [], time.monotonic()
    for _ in range(TRAIN_STEPS):
        h = F.linear(x, w)
        for f in frozen:
            h = torch.tanh(F.linear(h, f))
        loss = (h.float() - target.float()).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        del h, loss
    torch.cuda.synchronize()
    seconds = time.monotonic() - began
    end = counters(shim)
    kv(f"{prefix}.seconds", f"{seconds:.2f}")
    kv(f"{prefix}.losses", ",".join(f"{value:.6g}" for value in losses))
    figures(prefix, grown(start, end))
    kv(f"{prefix}.movable_allocs", end["movable_allocs"] - start["movable_allocs"])
    kv(f"{prefix}.t2_peak_mib", end["t2_peak"] // MIB)
    kv(f"{prefix}.weights_in_t2_after_mib", sum(shim.t2_bytes(t) for t in loaded) // MIB)
    data(losses=[value.hex() for value in losses], grown=grown(start, end),
         movable_allocs=end["movable_allocs"] - start["movable_allocs"], seconds=seconds)


# --- attributes: swap.pointer_attributes -----------------------------------------------------
class CudaPointerAttributes(ctypes.Structure):
    """cudaPointerAttributes (CUDA 11 and later), with room after it for fields a later
    runtime may add."""

    _fields_ = [("type", ctypes.c_int), ("device", ctypes.c_int), ("devicePointer", ctypes.c_void_p),
                ("hostPointer", ctypes.c_void_p), ("reserved", ctypes.c_long * 16)]


def loaded_cudart():
    """The CUDA runtime already in the process (torch's), by soname, else by path from
    /proc/self/maps (a wheel's hashed copy); (library, name) or (None, why)."""
    mode = os.RTLD_NOLOAD | os.RTLD_LAZY
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"):
        try:
            return ctypes.CDLL(name, mode=mode), name
        except OSError:
            pass
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "libcudart" in line.split()[-1]}
    for path in sorted(paths):
        try:
            return ctypes.CDLL(path, mode=mode), path
        except OSError:
            pass
    return None, "no libcudart in the process (by soname or in /proc/self/maps)"


def runtime_attributes(ptr):
    """cudaPointerGetAttributes(ptr) through torch's runtime, else CuPy's: a dict, or
    raises with the reason."""
    lib, name = loaded_cudart()
    if lib is not None:
        attrs = CudaPointerAttributes()
        rc = lib.cudaPointerGetAttributes(ctypes.byref(attrs), ctypes.c_void_p(ptr))
        if rc != 0:
            raise RuntimeError(f"cudaPointerGetAttributes ({name}) returned {rc}")
        return {"type": attrs.type, "device": attrs.device, "devicePointer": attrs.devicePointer or 0,
                "hostPointer": attrs.hostPointer or 0, "via": name}
    import cupy

    attrs = cupy.cuda.runtime.pointerGetAttributes(ptr)
    return {"type": attrs.type, "device": attrs.device, "devicePointer": attrs.devicePointer,
            "hostPointer": attrs.hostPointer, "via": f"cupy ({name})"}


def role_attributes():
    import torch

    shim, driver = shim_here(), Driver()
    start_torch()
    before = counters(shim)
    t = torch.empty(256 * MIB // 4, dtype=torch.float32, device="cuda").fill_(1.5)
    torch.cuda.synchronize()
    ptr, device = t.data_ptr(), torch.cuda.current_device()
    managed, in_t2, after = driver.managed(ptr), shim.t2_bytes(t), counters(shim)
    movable = (managed == 1 and in_t2 == 0 and after["movable_allocs"] > before["movable_allocs"]
               and after["tier_vram"] - before["tier_vram"] >= t.numel() * t.element_size())
    kv("swap.pointer_attributes.is_managed", managed)
    kv("swap.pointer_attributes.driver_memory_type", driver.get(ptr, Driver.MEMORY_TYPE))
    kv("swap.pointer_attributes.last_prefetch", driver.last_prefetch(ptr))
    kv("swap.pointer_attributes.t2_bytes", in_t2)
    setting = "movable VRAM (managed memory the shim placed in VRAM)" if movable else (
        f"NOT movable VRAM (managed {managed}, {in_t2} bytes in T2): the device was not contested? the check "
        f"tests nothing")
    try:
        attrs = runtime_attributes(ptr)
    except Exception as error:  # the reason is the verdict
        for name in ("swap.pointer_attributes", "swap.pointer_attributes_type"):
            verdict(name, False, f"cudaPointerGetAttributes on a 256 MiB tensor, {setting}: {error}")
        return
    for key in ("type", "device", "devicePointer", "hostPointer", "via"):
        value = attrs[key]
        kv(f"swap.pointer_attributes.{key}", f"{value:#x}" if key.endswith("Pointer") else value)
    shown = (f"type {attrs['type']}, device {attrs['device']}, devicePointer {attrs['devicePointer']:#x}, "
             f"hostPointer {attrs['hostPointer']:#x} ({attrs['via']}) for the tensor at {ptr:#x} on device {device}")
    verdict("swap.pointer_attributes", movable and attrs["device"] == device and attrs["devicePointer"] == ptr,
            f"{setting}: {shown} (want device {device} and devicePointer = the tensor's)")
    if not movable:
        verdict("swap.pointer_attributes_type", False, f"not judged: the tensor is {setting}")
    elif attrs["type"] == 2 and attrs["hostPointer"] == 0:
        verdict("swap.pointer_attributes_type", True, f"cudaPointerGetAttributes says device memory (2), no host "
                f"pointer, for movable VRAM, as for plain cudaMalloc memory: {shown}")
    else:
        verdict("swap.pointer_attributes_type", False, f"cudaPointerGetAttributes says type {attrs['type']} "
                f"({'managed' if attrs['type'] == 3 else 'not device memory'}), hostPointer {attrs['hostPointer']:#x} "
                f"for memory the program got from cudaMalloc (movable VRAM): the shim's pointer-attribute hooks "
                f"(shim/src/hooks/pointer_attributes.rs) should answer type 2, hostPointer 0; {shown}")


# --- ipc: swap.ipc_refused_explained, swap.ipc_tiering_off -----------------------------------
IPC_ELEMENTS = 64 << 20  # float32: 256 MiB, a segment of its own


def ipc_child(tensor, results):
    """The spawned child: reads the shared tensor's sum (float64: exact for its values)."""
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    try:
        import torch

        results.put(("ok", tensor.sum(dtype=torch.float64).item()))
    except Exception as error:  # reported to the parent
        results.put(("error", f"{type(error).__name__}: {str(error)[:300]}"))


def role_ipc(mode):
    """Shares a 256 MiB CUDA tensor with a spawned child (torch.multiprocessing, the tensor
    an argument of the Process: pickled, and so exported, in start()); DATA: whether the
    share raised, and the sum the child read."""
    import queue

    import torch
    import torch.multiprocessing as mp

    shim, driver = shim_here(), Driver()
    start_torch()
    t = torch.empty(IPC_ELEMENTS, dtype=torch.float32, device="cuda")
    t.copy_(torch.arange(IPC_ELEMENTS, dtype=torch.int32, device="cuda").remainder_(1000))
    expected = t.sum(dtype=torch.float64).item()
    torch.cuda.synchronize()
    managed = driver.managed(t.data_ptr())
    kv(f"swap.ipc.{mode}.is_managed", managed)
    kv(f"swap.ipc.{mode}.t2_bytes", shim.t2_bytes(t))
    os.environ["GB_TIERING_PARENT"] = str(os.getpid())  # the child's die_with_parent, should it use it
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    child = ctx.Process(target=ipc_child, args=(t, results), daemon=True)
    began = time.monotonic()
    try:
        child.start()
    except Exception as error:  # what the check expects where the tensor is movable
        data(raised=True, error=f"{type(error).__name__}: {str(error)[:400]}", is_managed=managed, expected=expected)
        return
    answer, deadline = None, time.monotonic() + 90
    while answer is None and time.monotonic() < deadline:
        try:
            answer = results.get(timeout=1)
        except queue.Empty:
            if not child.is_alive():
                break
    child.join(timeout=20)
    if child.is_alive():
        child.kill()
    kv(f"swap.ipc.{mode}.child_seconds", f"{time.monotonic() - began:.1f}")
    data(raised=False, answer=list(answer) if answer else None, child_exit=child.exitcode, is_managed=managed,
         expected=expected)


# --- make_room: swap.make_room ----------------------------------------------------------------
ROOM_WEIGHT = (32768, 16384)   # bf16: 1 GiB each
ROOM_WEIGHTS_MOST = 12
ROOM_ACTIVATIONS_MOST = 4      # of 1 GiB each, allocated once the program computes


def role_make_room():
    """A prefill without a model library: 1 GiB weights loaded until the room is full, one
    matrix product (the program computes), then 1 GiB activations, each of which must be in
    VRAM as soon as it is allocated; the weights' checksums before and after."""
    import torch
    import torch.nn.functional as F

    shim, driver = shim_here(), Driver()
    free, _ = start_torch()
    kv("swap.make_room.free_at_start_mib", free // MIB)
    g = torch.Generator(device="cuda").manual_seed(99)

    def weight(_):
        return torch.empty(*ROOM_WEIGHT, dtype=torch.bfloat16, device="cuda").normal_(0.0, 0.02, generator=g)

    weights, placed = load_until_t2(shim, weight, ROOM_WEIGHTS_MOST)
    torch.cuda.synchronize()
    kv("swap.make_room.weights", ",".join(placed))
    sums = [block_sums(w) for w in weights]
    x = torch.empty(64, ROOM_WEIGHT[1], dtype=torch.bfloat16, device="cuda").normal_(0.0, 1.0, generator=g)
    y = F.linear(x, weights[0])  # cuBLAS: the program computes from here on
    torch.cuda.synchronize()
    start = counters(shim)
    acts, notes, spilled = [], [], []
    for index in range(ROOM_ACTIVATIONS_MOST):
        before = counters(shim)
        began = time.monotonic()
        a = torch.empty(GIB // 2, dtype=torch.bfloat16, device="cuda")
        seconds = time.monotonic() - began
        in_t2, after = shim.t2_bytes(a), counters(shim)
        made = after["swaps"] - before["swaps"]
        if in_t2:
            spilled.append(index)
        a.fill_(index + 1)
        acts.append((a, index + 1))
        notes.append(f"{index}: {'VRAM' if in_t2 == 0 else f'{in_t2 // MIB} MiB in T2'}, swaps +{made}, "
                     f"{seconds * 1000:.0f} ms, last prefetch {driver.last_prefetch(a.data_ptr())}")
        kv(f"swap.make_room.activation{index}", notes[-1])
        if after["swaps"] - start["swaps"] >= 2:
            break
    torch.cuda.synchronize()
    end = counters(shim)
    figures("swap.make_room", grown(start, end))
    # min and max: no temporary as large as the activation
    wrong_acts = [value for a, value in acts if float(a.min()) != value or float(a.max()) != value]
    in_t2 = [index for index, (a, _) in enumerate(acts) if shim.t2_bytes(a)]
    loaded_vram = placed.count("vram")
    room_made = end["swaps"] - start["swaps"]
    what = f"{len(weights)} weights of 1 GiB loaded ({loaded_vram} in VRAM); activations: {'; '.join(notes)}"
    if loaded_vram == 0:
        verdict("swap.make_room", False, f"no weight was placed in VRAM, so none could make room: {what}")
    elif room_made == 0:
        verdict("swap.make_room", False, f"no swap happened (swaps +0): the activations found room without "
                f"making any, the check tests nothing: {what}")
    else:
        verdict("swap.make_room", not spilled and not wrong_acts,
                f"activations in T2 when allocated: {spilled or 'none'} (want none), {room_made} weights sent to T2 "
                f"to make room (swaps), activations with a wrong value: {wrong_acts or 'none'}, in T2 now: "
                f"{in_t2 or 'none'}; {what}")
    changed = [index for index, (w, before) in enumerate(zip(weights, sums)) if not torch.equal(block_sums(w), before)]
    now_t2 = [index for index, w in enumerate(weights) if shim.t2_bytes(w)]
    kv("swap.make_room.weights_in_t2_after", ",".join(map(str, now_t2)) or "none")
    verdict("swap.make_room.weights_intact", not changed and bool(weights),
            f"checksums (per 4 MiB) of {len(weights)} weights before and after the activations: changed in "
            f"{changed or 'none'}; weights in T2 now {now_t2 or 'none'} (placed {','.join(placed)}); y {tuple(y.shape)}")
