#!/usr/bin/env python3
"""Issue 12's ratios for live tiering, measured side by side in one run on the H200 (run
by hand, not by run.sh; its output is committed by hand as
bench/results/tiering-<date>-<commit>.md).

  python3 bench/tiering.py [--shim PATH] [--out DIR]

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
                   tokens/s over a window fixed in advance — the 128 tokens after the
                   first token 10 s or more after the kill — divided by the same
                   program's rate under the shim with the whole GPU free (the same
                   window, counted from token 24). recovery_time_to_rate_s: from the kill
                   to the first token whose last 8 tokens (all after the kill) ran at
                   >= 0.9 of the free rate.
  migration_ratio  beside a foreign process leaving 3 GiB, 16 x 1 GiB tensors (those in
                   T2 are movable) filled on the GPU; the foreign process is killed and
                   nothing computes; the counters are polled until tier_vram covers them:
                   promote_GBps = promoted_bytes / promote_ns over that wait (also the
                   wall-clock rate from the kill), divided by pinned cudaMemcpy H2D in
                   the same process (2 GiB pinned tensor -> a VRAM tensor, best of 5,
                   CUDA events). Beside it, without the shim, Unified Memory's own
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

Prints KV lines per figure and, last, one JSON line {"recovery_ratio", ...}. About 3-4
minutes on the H200 (each subprocess spends 5-15 s importing torch/transformers).

Roles for the subprocesses (first argument): decode, migrate, uvm, demote (under the
shim, except uvm), balloon LEAVE_GIB and grab EXTRA_GIB TIMEOUT_S (foreign).
"""

import argparse
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GIB = 1 << 30
MIB = 1 << 20

KILL_AT = 24          # the token at which the foreign process is killed
AFTER_KILL_S = 10.0   # the window starts at the first token this long after the kill
WINDOW = 128          # tokens in the window
RATE_RUN = 8          # tokens behind each point of the time-to-rate curve
PROMPT = 128


def kv(key, value):
    print(f"KV {key}={value}", flush=True)


# --- the shim's counters (shim/src/stats.rs ShimStats) -------------------------------

class ShimStats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "t1_used", "t1_peak", "t2_used", "t2_peak", "t1_allocs", "t2_allocs", "t2_after_vram_oom", "oom_returned",
        "vmm_host", "deferred_frees")] + [
        ("backend", ctypes.c_uint32), ("import_dmabuf_result", ctypes.c_int32),
        ("import_opaque_result", ctypes.c_int32), ("reserved", ctypes.c_uint32)] + [
        (name, ctypes.c_uint64) for name in (
            "split_allocs", "gemm_staged", "gemm_staged_bytes", "headroom_spills", "gemm_prefetched",
            "movable_allocs", "tier_vram", "promoted_bytes", "demoted_bytes", "promotions", "demotions",
            "promote_ns", "demote_ns")]


TIER_FIELDS = ("movable_allocs", "tier_vram", "promoted_bytes", "demoted_bytes", "promotions", "demotions",
               "promote_ns", "demote_ns")


class Shim:
    def __init__(self):
        lib = ctypes.CDLL(None)
        self.sized = getattr(lib, "greenboost_shim_stats_sized", None)
        self.t2 = getattr(lib, "greenboost_shim_t2_bytes", None)
        if self.sized is None or self.t2 is None:
            raise SystemExit("tiering.py: the shim's exports are missing (is libgreenboost_cuda.so preloaded?)")
        self.sized.argtypes, self.sized.restype = [ctypes.c_void_p, ctypes.c_size_t], ctypes.c_long
        self.t2.argtypes, self.t2.restype = [ctypes.c_ulonglong, ctypes.c_ulonglong], ctypes.c_ulonglong
        size = self.sized(ctypes.byref(ShimStats()), ctypes.sizeof(ShimStats))
        if size < ctypes.sizeof(ShimStats):
            raise SystemExit(f"tiering.py: the shim's ShimStats has {size} bytes, not the {ctypes.sizeof(ShimStats)} "
                             "of the tiering counters: a shim without live tiering")

    def stats(self):
        out = ShimStats()
        self.sized(ctypes.byref(out), ctypes.sizeof(out))
        return out

    def tier(self):
        s = self.stats()
        return {name: getattr(s, name) for name in TIER_FIELDS + ("t2_used", "headroom_spills", "split_allocs",
                                                                 "gemm_staged")}

    def t2_bytes(self, tensor):
        return int(self.t2(tensor.data_ptr(), tensor.numel() * tensor.element_size()))


def wait_promoted(shim, tensors, timeout_s, step=None):
    """Polls until tier_vram covers the tensors and the shim says none is in T2; calls
    step() between polls when given. Returns seconds waited, or None on timeout."""
    need = sum(t.numel() * t.element_size() for t in tensors)
    started = time.monotonic()
    while True:
        if shim.stats().tier_vram >= need and all(shim.t2_bytes(t) == 0 for t in tensors):
            return time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            return None
        if step:
            step()
        else:
            time.sleep(0.005)


def kill_pid(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def die_with_parent():
    """No subprocess outlives the run (a foreign one holds the device's VRAM)."""
    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    parent = int(os.environ.get("GB_TIERING_PARENT", "0"))
    if parent and os.getppid() != parent:
        os._exit(1)


# --- foreign roles -------------------------------------------------------------------

def role_balloon(args):
    """All but LEAVE_GIB of the free VRAM, in one block; "ready MIB"; holds."""
    import torch

    free, _ = torch.cuda.mem_get_info()
    block = torch.empty(max(0, free - int(float(args[0]) * GIB)), dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    print(f"ready {block.numel() // MIB}", flush=True)
    while True:
        time.sleep(1)


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


# --- decode (under the shim) ---------------------------------------------------------

def build_model(shape, seed):
    """bench/decode.py's model: Llama from a config on the meta device, every weight drawn
    on the GPU from a generator seeded with the parameter's index."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = LlamaConfig(**shape, max_position_embeddings=8192, rms_norm_eps=1e-5, tie_word_embeddings=False,
                         hidden_act="silu", attention_bias=False, mlp_bias=False)
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    torch.set_default_dtype(default_dtype)
    model.eval()
    generator = torch.Generator(device="cuda")
    for index, (name, _) in enumerate(list(model.named_parameters())):
        module_name, _, attr = name.rpartition(".")
        module = model.get_submodule(module_name)
        tensor = torch.empty(getattr(module, attr).shape, dtype=torch.bfloat16, device="cuda")
        if tensor.dim() == 1:
            tensor.fill_(1.0)
        else:
            generator.manual_seed(seed * 1_000_003 + index)
            tensor.normal_(0.0, 0.02, generator=generator)
        setattr(module, attr, torch.nn.Parameter(tensor, requires_grad=False))
    with torch.device("cuda"):
        model.model.rotary_emb = LlamaRotaryEmbedding(config=config)
    return model, config


def role_decode(args):
    parser = argparse.ArgumentParser(prog="tiering.py decode")
    parser.add_argument("--kill-pid", type=int, default=0, help="the foreign process to kill at --kill-at")
    parser.add_argument("--layers", type=int, default=0)
    parser.add_argument("--max-s", type=float, default=100.0, help="generation stops after this long in any case")
    opts = parser.parse_args(args)
    started = time.time()
    import torch
    import transformers
    from transformers import StoppingCriteria, StoppingCriteriaList

    sys.path.insert(0, HERE)
    import decode  # bench/decode.py: the shapes

    torch.backends.cuda.enable_cudnn_sdp(False)
    shim = Shim()
    model, config = build_model(decode.shape_of("8b", opts.layers), 1234)
    weights = list(model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in weights)
    t2_at_start = sum(shim.t2_bytes(p) for p in weights)
    tier_at_start = shim.tier()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    prompt = torch.randint(0, config.vocab_size, (1, PROMPT), generator=torch.Generator().manual_seed(1234)).cuda()

    class Clock(StoppingCriteria):
        """Called once per generated token: its time, the kill at KILL_AT, the stop."""

        def __init__(self, window=True):
            self.times, self.kill_index, self.kill_time, self.window_start = [], None, None, None
            self.window, self.began = window, time.perf_counter()

        def __call__(self, input_ids, scores, **kwargs):
            torch.cuda.synchronize()
            now = time.perf_counter()
            self.times.append(now)
            done = now - self.began > opts.max_s
            if self.window:
                if len(self.times) == KILL_AT:
                    if opts.kill_pid:
                        kill_pid(opts.kill_pid)
                    self.kill_index, self.kill_time = KILL_AT - 1, time.perf_counter()
                if self.kill_time is not None:
                    if self.window_start is None and now - self.kill_time >= AFTER_KILL_S:
                        self.window_start = len(self.times) - 1
                    if self.window_start is not None and len(self.times) - 1 - self.window_start >= WINDOW:
                        done = True
            return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)

    def generate(clock, new_tokens):
        return model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                              do_sample=False, stopping_criteria=StoppingCriteriaList([clock]),
                              return_dict_in_generate=True).sequences

    with torch.inference_mode():
        generate(Clock(window=False), 2)  # warm-up: kernels loaded, cuBLAS handles made
        setup_s = time.time() - started
        clock = Clock()
        out = generate(clock, 4096)
    if opts.kill_pid and clock.kill_time is None:
        kill_pid(opts.kill_pid)
    times = clock.times
    result = {"role": "decode", "foreign": bool(opts.kill_pid), "weight_bytes": weight_bytes,
              "weights_t2_at_start": t2_at_start, "weights_t2_at_end": sum(shim.t2_bytes(p) for p in weights),
              "tier_at_start": tier_at_start, "tier_at_end": shim.tier(), "setup_s": setup_s,
              "new_tokens": len(times), "tokens": [int(t) for t in out[0, PROMPT:].tolist()],
              "transformers": transformers.__version__, "torch": torch.__version__}
    if clock.kill_time is not None:
        k = clock.kill_index
        result["pre_kill_tok_s"] = (k - 1) / (times[k] - times[1]) if k > 1 else None
        result["after_kill_s"] = [round(t - clock.kill_time, 5) for t in times[k + 1:]]
    w = clock.window_start
    if w is not None and len(times) - 1 - w >= WINDOW:
        result["window_tok_s"] = WINDOW / (times[w + WINDOW] - times[w])
        result["window_from_s"] = times[w] - clock.kill_time
    print(json.dumps(result), flush=True)


# --- migration (under the shim) ------------------------------------------------------

def role_migrate(args):
    parser = argparse.ArgumentParser(prog="tiering.py migrate")
    parser.add_argument("--kill-pid", type=int, required=True)
    parser.add_argument("--tensors", type=int, default=16, help="tensors of 1 GiB")
    opts = parser.parse_args(args)
    import torch

    shim = Shim()
    torch.zeros(1, device="cuda")
    tensors = []
    for index in range(opts.tensors):
        t = torch.empty(GIB, dtype=torch.uint8, device="cuda")
        t.fill_(index + 1)
        tensors.append(t)
    torch.cuda.synchronize()
    movable = [t for t in tensors if shim.t2_bytes(t) == GIB]
    before = shim.stats()
    killed = time.monotonic()
    kill_pid(opts.kill_pid)
    waited = wait_promoted(shim, movable, 60)
    wall = time.monotonic() - killed
    after = shim.stats()
    moved, ns = after.promoted_bytes - before.promoted_bytes, after.promote_ns - before.promote_ns
    data_ok = all(bool((t == index + 1).all()) for index, t in enumerate(tensors))
    # Pinned cudaMemcpy H2D in the same process, into VRAM (the GPU is free now).
    source = torch.empty(2 * GIB, dtype=torch.uint8, pin_memory=True)
    source.fill_(7)
    target = torch.empty(2 * GIB, dtype=torch.uint8, device="cuda")
    copies = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        target.copy_(source, non_blocking=True)
        end.record()
        end.synchronize()
        copies.append(2 * GIB / (start.elapsed_time(end) / 1e3) / 1e9)
    result = {"role": "migrate", "tensors": len(tensors), "movable": len(movable),
              "movable_bytes": len(movable) * GIB, "promoted": waited is not None, "wait_s": waited, "wall_s": wall,
              "promoted_bytes": moved, "promote_ns": ns, "promotions": after.promotions - before.promotions,
              "promote_GBps": moved / ns if ns else None,
              "promote_wall_GBps": len(movable) * GIB / wall / 1e9 if waited is not None else None,
              "data_ok": data_ok, "pinned_h2d_GBps": max(copies), "pinned_h2d_each": copies,
              "pinned_target_t2_bytes": shim.t2_bytes(target), "tier_at_end": shim.tier()}
    print(json.dumps(result), flush=True)


# --- Unified Memory's fault-driven migration (no shim) --------------------------------

class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


def role_uvm(args):
    gib = float(args[0]) if args else 8.0
    import cupy

    cuda = ctypes.CDLL("libcuda.so.1")

    def check(status, what):
        if status != 0:
            raise RuntimeError(f"{what}: CUDA error {status}")

    cupy.cuda.Device(0).use()
    cupy.zeros(1).sum()  # the primary context, current in this thread
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    check(cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
    size = int(gib * GIB)
    # Managed memory is never oversubscribed (the device may be shared).
    if free.value < size + 4 * GIB:
        print(json.dumps({"role": "uvm", "skipped": f"{free.value // MIB} MiB free, {size // MIB} MiB needed + 4 GiB"}))
        return
    ptr = ctypes.c_uint64()
    check(cuda.cuMemAllocManaged(ctypes.byref(ptr), ctypes.c_size_t(size), 1), "cuMemAllocManaged")  # ATTACH_GLOBAL
    try:
        # CU_MEM_ADVISE_SET_PREFERRED_LOCATION (3) = device 0 (CU_MEM_LOCATION_TYPE_DEVICE, 1)
        check(cuda.cuMemAdvise_v2(ctypes.c_uint64(ptr.value), ctypes.c_size_t(size), 3, Location(1, 0)), "cuMemAdvise")
        touched = time.perf_counter()
        ctypes.memset(ptr.value, 1, size)  # first touch: the CPU
        touch_s = time.perf_counter() - touched
        memory = cupy.cuda.UnownedMemory(ptr.value, size, None)
        words = cupy.ndarray((size // 4,), dtype=cupy.uint32, memptr=cupy.cuda.MemoryPointer(memory, 0))
        expected = (size // 4) * 0x01010101
        passes = []
        for _ in range(2):  # the first pass migrates by faults; the second reads VRAM
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            total_sum = int(words.sum(dtype=cupy.uint64))
            end.record()
            end.synchronize()
            seconds = cupy.cuda.get_elapsed_time(start, end) / 1e3
            passes.append({"GBps": size / seconds / 1e9, "s": seconds, "sum_ok": total_sum == expected})
        after = ctypes.c_size_t()
        check(cuda.cuMemGetInfo_v2(ctypes.byref(after), ctypes.byref(total)), "cuMemGetInfo")
        del words, memory
        result = {"role": "uvm", "bytes": size, "cpu_touch_s": touch_s, "uvm_fault_GBps": passes[0]["GBps"],
                  "passes": passes, "vram_taken": free.value - after.value}
    finally:
        cupy.cuda.Device(0).synchronize()
        cuda.cuMemFree_v2(ctypes.c_uint64(ptr.value))
    print(json.dumps(result), flush=True)


# --- demotion (under the shim) -------------------------------------------------------

def role_demote(args):
    parser = argparse.ArgumentParser(prog="tiering.py demote")
    parser.add_argument("--kill-pid", type=int, required=True)
    parser.add_argument("--matrices", type=int, default=16, help="16384 x 16384 bf16 matrices (512 MiB each)")
    parser.add_argument("--max-s", type=float, default=90.0)
    opts = parser.parse_args(args)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    torch.use_deterministic_algorithms(True)
    shim = Shim()
    n = 16384
    generator = torch.Generator(device="cuda")
    mats = []
    for index in range(opts.matrices):
        m = torch.empty(n, n, dtype=torch.bfloat16, device="cuda")
        generator.manual_seed(99 + index)
        m.normal_(0.0, 1.0 / n ** 0.5, generator=generator)
        mats.append(m)
    x0 = torch.randn(16, n, dtype=torch.bfloat16, device="cuda", generator=generator.manual_seed(5))
    movable = [m for m in mats if shim.t2_bytes(m) == m.numel() * 2]

    def chain():
        x = x0
        for m in mats:
            x = torch.tanh(x @ m)
        return x

    with torch.inference_mode():
        in_t2 = chain()
        torch.cuda.synchronize()
        before = shim.stats()
        kill_pid(opts.kill_pid)
        waited = wait_promoted(shim, movable, 60)
        promoted = shim.stats()
        reference = chain()
        same_as_t2 = torch.equal(reference, in_t2)
        print(f"promoted {waited} {time.time():.3f}", flush=True)
        steps, mismatches, began = [], 0, time.time()
        stop = False
        while not stop and time.time() - began < opts.max_s:
            x = chain()
            checksum = x.float().sum().item()
            same = torch.equal(x, reference)
            mismatches += 0 if same else 1
            steps.append(round(time.time(), 4))
            print(f"step {len(steps)} {steps[-1]:.4f} {checksum:.6f} {int(same)}", flush=True)
            if select.select([sys.stdin], [], [], 0)[0]:
                stop = sys.stdin.readline().strip() in ("stop", "")
    after = shim.stats()
    result = {"role": "demote", "matrices": len(mats), "movable": len(movable),
              "movable_bytes": sum(m.numel() * 2 for m in movable), "promote_wait_s": waited,
              "promoted_bytes": promoted.promoted_bytes - before.promoted_bytes,
              "demoted_bytes": after.demoted_bytes - promoted.demoted_bytes,
              "demote_ns": after.demote_ns - promoted.demote_ns, "demotions": after.demotions - promoted.demotions,
              "steps": len(steps), "step_times": steps, "mismatches": mismatches, "same_as_in_t2": same_as_t2,
              "reference_checksum": reference.float().sum().item(),
              "movable_in_t2_at_end": sum(1 for m in movable if shim.t2_bytes(m) == m.numel() * 2),
              "tier_at_end": shim.tier()}
    print(json.dumps(result), flush=True)


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


def time_to_rate(after_kill, target):
    """Seconds from the kill to the first token whose last RATE_RUN tokens (all after the
    kill) ran at >= target tokens/s."""
    for k in range(RATE_RUN, len(after_kill)):
        if RATE_RUN / (after_kill[k] - after_kill[k - RATE_RUN]) >= target:
            return after_kill[k]
    return None


def measure_recovery(run, out):
    free = run.role("decode_free", "decode").result(200)
    balloon = run.balloon("decode_balloon", 9)
    recovery = run.role("decode_recovery", "decode", "--kill-pid", balloon.proc.pid).result(200)
    balloon.kill()
    for name, r in (("free", free), ("recovery", recovery)):
        slim = {k: v for k, v in r.items() if k not in ("tokens", "after_kill_s")}
        kv(f"tiering.decode_{name}", json.dumps(slim))
    out["decode_free"], out["decode_recovery"] = free, recovery
    if "window_tok_s" not in free or "window_tok_s" not in recovery:
        out["recovery_ratio"] = None
        out["recovery_missing"] = free.get("error") or recovery.get("error") or "a run made no full window"
        return
    out["free_tok_s"], out["recovery_tok_s"] = free["window_tok_s"], recovery["window_tok_s"]
    out["recovery_ratio"] = recovery["window_tok_s"] / free["window_tok_s"]
    out["recovery_pre_kill_tok_s"] = recovery.get("pre_kill_tok_s")
    after_kill = recovery.get("after_kill_s", [])
    out["recovery_time_to_rate_s"] = time_to_rate(after_kill, 0.9 * free["window_tok_s"])
    # tokens/s in each second after the kill, for the first 15
    out["recovery_tok_s_by_second"] = [sum(1 for t in after_kill if b <= t < b + 1) for b in range(15)]
    n = min(len(free["tokens"]), len(recovery["tokens"]))
    first_diff = next((i for i in range(n) if free["tokens"][i] != recovery["tokens"][i]), None)
    out["recovery_same_tokens"] = {"compared": n, "first_difference": first_diff}
    kv("tiering.recovery_ratio", f"{out['recovery_ratio']:.3f} ({recovery['window_tok_s']:.2f} / "
       f"{free['window_tok_s']:.2f} tok/s; before the kill {out['recovery_pre_kill_tok_s'] or 0:.2f} tok/s)")
    kv("tiering.recovery_time_to_rate_s", out["recovery_time_to_rate_s"])


def measure_migration(run, out):
    balloon = run.balloon("migrate_balloon", 3)
    migrate = run.role("migrate", "migrate", "--kill-pid", balloon.proc.pid).result(150)
    balloon.kill()
    kv("tiering.migrate", json.dumps(migrate))
    out["migrate"] = migrate
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
    keys = ("recovery_ratio", "recovery_time_to_rate_s", "migration_ratio", "promote_GBps", "pinned_h2d_GBps",
            "uvm_fault_GBps", "demotion_wait_s", "demotion_ok")
    summary = {key: out.get(key) for key in keys}
    summary.update({k: v for k, v in out.items() if k not in keys})
    for name in ("decode_free", "decode_recovery"):
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


ROLES = {"decode": role_decode, "migrate": role_migrate, "uvm": role_uvm, "demote": role_demote,
         "balloon": role_balloon, "grab": role_grab}

if __name__ == "__main__":
    main()
