"""PyTorch half of GreenBoost's GPU suite (tests/gpu/run.sh runs it with the device's python3).

Prints `PASS name: ...` / `FAIL name: ...` lines and `KV key=value` figures; exits 1 when
anything failed.

  tensors   hold --total-gib of tensors at once (more than the shim's VRAM budget), each
            filled on the GPU from a seeded generator and compared with a regeneration
            after all exist; float32 and bf16 matmuls whose operands and outputs lie in the
            last tensors (T2 under the shim) checked against a float64 CPU reference by
            relative Frobenius error.
  capacity  every capacity report a program can read (torch.cuda.mem_get_info =
            cudaMemGetInfo, get_device_properties().total_memory = cudaGetDeviceProperties,
            NVML through pynvml, and gb-gpu-check's report for cuMemGetInfo,
            cuDeviceTotalMem and NVML by dlsym) against what the shim's configuration implies.
  gemm      linear layers whose weights were allocated before the first matrix product
            (T2 under a budget whose reserve is all of it) and activations allocated after
            it (VRAM): wide (512 tokens) and narrow (1 token) bf16 products through
            cublasGemmEx, with a bias through cublasLt, and float32 through cublasSgemm;
            the outputs are saved (--out) for gemm-compare.
  train     three training steps (AdamW) of a bf16 MLP whose weights were allocated
            before the first product (T2 under the shim), 512 tokens wide: the optimizer
            writes the weights between the products that read them (staging must see
            every write); losses and the trained weights are saved (--out).
  chunks    layers of a 256 MiB and two 8 MiB weights past the budget: the segments
            PyTorch carves the 8 MiB pairs from stay in VRAM, and so do the activations
            it later puts in what they leave free.
  gemm-compare  the saved outputs of several runs must be bit-identical to the first's.
"""

import argparse
import ctypes
import os
import sys
import time
import traceback

import torch

from gbgpu.shim_exports import Shim

from gbgpu.verdicts import COUNTS, kv, record

GIB = 1 << 30
MIB = 1 << 20


def gib(n):
    return f"{n / GIB:.2f} GiB"


class Driver:
    """Where a tensor lives: the shim's answer where it is loaded (it answers the driver's
    pointer attributes as device memory for everything it places, as the driver would
    for what the program allocated), else the memory type cuPointerGetAttribute gives."""

    MEMORY_TYPE = 2  # CU_POINTER_ATTRIBUTE_MEMORY_TYPE
    HOST, DEVICE = 1, 2  # CU_MEMORYTYPE_*

    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.lib.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_ulonglong]
        self.lib.cuPointerGetAttribute.restype = ctypes.c_int
        self.shim = Shim()

    def placement(self, tensor):
        """"vram" or "t2" (at least half of the tensor's bytes in T2, as the shim counts
        it; the driver's host memory type without the shim)."""
        ptr, size = tensor.data_ptr(), tensor.nbytes
        if self.shim.t2 is not None:
            return "t2" if 2 * self.shim.t2(ptr, size) >= size else "vram"
        value = ctypes.c_uint(0)
        rc = self.lib.cuPointerGetAttribute(ctypes.byref(value), self.MEMORY_TYPE, ptr)
        if rc != 0:
            return f"error{rc}"
        return {self.HOST: "t2", self.DEVICE: "vram"}.get(value.value, f"type{value.value}")


def rel_error(out, ref):
    """‖out − ref‖_F / ‖ref‖_F in float64 on the CPU; NaN never passes."""
    out = out.detach().to("cpu", torch.float64)
    err = (torch.linalg.norm(out - ref) / torch.linalg.norm(ref)).item()
    return err if err == err else float("inf")


def matmul_checks(label, operands):
    """float32 (no TF32) and bf16 matmuls whose operands and output are views of the given
    GPU tensors, so the data really lives where those tensors live."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    n = 2048
    gen = torch.Generator().manual_seed(1234)
    for dtype, limit in ((torch.float32, 1e-4), (torch.bfloat16, 1e-2)):
        name = str(dtype).replace("torch.", "")
        # Fresh random inputs for every check; the reference is float64 on the CPU from the
        # same (rounded) inputs.
        a_cpu = torch.randn(n, n, generator=gen).to(dtype)
        b_cpu = torch.randn(n, n, generator=gen).to(dtype)
        ref = a_cpu.to(torch.float64) @ b_cpu.to(torch.float64)
        for where, tensors_abc in operands:
            a, b, c = (t.view(dtype)[: n * n].view(n, n) for t in tensors_abc)
            a.copy_(a_cpu)
            b.copy_(b_cpu)
            c.fill_(float("nan"))  # poisoned: an unwritten output cannot pass
            torch.matmul(a, b, out=c)
            torch.cuda.synchronize()
            err = rel_error(c, ref)
            record(f"{label}.matmul_{name}_{where}", err < limit, f"{n}x{n}x{n}, operands/output in {where}, relative Frobenius error {err:.2e} (limit {limit:.0e})")


def tensors(args):
    label = args.label
    drv = Driver()
    torch.cuda.init()
    free0, total0 = torch.cuda.mem_get_info()
    kv(f"{label}.start_free", free0)
    kv(f"{label}.start_total", total0)
    chunk = args.chunk_mib * MIB
    count = args.total_gib * GIB // chunk
    elems = chunk // 4
    buffers, seeds, places = [], [], []
    started = time.time()
    error = None
    try:
        for i in range(count):
            t = torch.empty(elems, dtype=torch.float32, device="cuda")
            seed = 1000 + i
            t.uniform_(generator=torch.Generator(device="cuda").manual_seed(seed))
            buffers.append(t)
            seeds.append(seed)
            places.append(drv.placement(t))
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError as e:  # reported below as a failure with its message
        error = str(e).splitlines()[0]
    held = len(buffers) * chunk
    split = {p: places.count(p) * chunk for p in set(places)}
    kv(f"{label}.held_bytes", held)
    kv(f"{label}.alloc_fill_seconds", f"{time.time() - started:.2f}")
    for p, b in sorted(split.items()):
        kv(f"{label}.{p}_bytes", b)
    peak_free, peak_total = torch.cuda.mem_get_info()
    kv(f"{label}.peak_free", peak_free)
    kv(f"{label}.peak_total", peak_total)
    kv(f"{label}.torch_reserved", torch.cuda.memory_reserved())
    desc = f"held {gib(held)} in {len(buffers)} tensors; placed " + ", ".join(f"{gib(b)} {p}" for p, b in sorted(split.items()))
    record(f"{label}.allocate", error is None and held == count * chunk, desc + (f"; stopped by: {error}" if error else ""))
    if args.expect == "t2":
        vram = split.get("vram", 0)
        t2 = split.get("t2", 0)
        if args.pointer_placement:
            ok = t2 > 0 and (args.budget_gib == 0 or vram <= args.budget_gib * GIB)
            record(f"{label}.placement", ok, desc + (f"; expected some in T2, VRAM part within {args.budget_gib} GiB" if args.budget_gib else "; expected some in T2"))
    elif args.expect == "vram":
        record(f"{label}.placement", split.get("t2", 0) == 0, desc + "; expected none in T2")

    # Every tensor still holds its own data now that all exist.
    started = time.time()
    bad = []
    for i, (t, seed) in enumerate(zip(buffers, seeds)):
        ref = torch.empty_like(t).uniform_(generator=torch.Generator(device="cuda").manual_seed(seed))
        if not torch.equal(t, ref):
            bad.append(f"tensor {i} ({places[i]}): {int((t != ref).sum())} elements differ")
        elif i in (0, len(buffers) - 1) and not torch.equal(t[-MIB // 4 :].cpu(), ref[-MIB // 4 :].cpu()):
            bad.append(f"tensor {i} ({places[i]}): host readback of its last MiB differs")
        del ref
    kv(f"{label}.verify_seconds", f"{time.time() - started:.2f}")
    record(f"{label}.verify", not bad and len(buffers) > 0, "; ".join(bad) if bad else f"{len(buffers)} tensors regenerated and compared on the GPU, ends read back")

    if len(buffers) >= 4:
        picks = [("last_tensors", (-1, -2, -3)), ("first_last_second", (0, -1, 1))]
        operands = []
        for where, idx in picks:
            where = f"{where}({'/'.join(places[i] for i in idx)})"
            operands.append((where, [buffers[i] for i in idx]))
        matmul_checks(label, operands)

    del buffers
    torch.cuda.empty_cache()
    end_free, _ = torch.cuda.mem_get_info()
    kv(f"{label}.end_free", end_free)


def chunks(args):
    """Layers of one 256 MiB weight and two 8 MiB ones, loaded past the budget: PyTorch
    carves the 8 MiB pair out of one 20 MiB segment and later hands its free 4 MiB to
    activations. Every such segment must be in VRAM (the 256 MiB weights spill instead,
    one of them split: they are GREENBOOST_SPLIT_MIN large, and a split's VRAM head must
    leave the segments' room as the weight whole would), and so must every 4 MiB
    activation held once the program computes, more of them at once than there are
    segments."""
    label, drv = args.label, Driver()
    generator = torch.Generator(device="cuda").manual_seed(7)
    layers = []
    for _ in range(args.layers):
        big = torch.empty(256 * MIB // 2, dtype=torch.bfloat16, device="cuda").normal_(generator=generator)
        pair = [torch.empty(8 * MIB // 2, dtype=torch.bfloat16, device="cuda").normal_(generator=generator)
                for _ in range(2)]
        layers.append((big, pair))
    big_places = [drv.placement(big) for big, _ in layers]
    pair_places = [drv.placement(t) for _, pair in layers for t in pair]
    kv(f"{label}.large_in_t2", big_places.count("t2"))
    record(f"{label}.placement", "t2" in big_places and set(pair_places) == {"vram"},
           f"{big_places.count('t2')} of {len(big_places)} 256 MiB weights in T2; the 8 MiB ones: "
           f"{pair_places.count('t2')} of {len(pair_places)} in T2 (want some and none)")

    weight = layers[0][1][0][: 1024 * 1024].view(1024, 1024)
    product = torch.ones(2048, 1024, dtype=torch.bfloat16, device="cuda") @ weight  # computing: 4 MiB
    activations = [product + i for i in range(args.layers + 8)]  # more than the segments' free blocks
    places = [drv.placement(a) for a in activations]
    wrong = sum(not torch.equal(a, product + i) for i, a in enumerate(activations))
    record(f"{label}.activations", places.count("t2") == 0 and wrong == 0,
           f"{places.count('t2')} of {len(places)} activations of 4 MiB in T2 (want none); {wrong} wrong")


GEMM_TOKENS = 512
GEMM_WIDTH = 4096


def gemm(args):
    """Products of T2 weights; outputs saved for a bit-for-bit comparison across runs."""
    label = args.label
    drv = Driver()
    torch.cuda.init()
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator().manual_seed(4321)
    # Weights first: allocated before any product (under the shim with a budget whose
    # reserve is all of it, each goes to T2).
    weights = [(torch.randn(GEMM_WIDTH, GEMM_WIDTH, generator=gen) * 0.02).to(torch.bfloat16).cuda() for _ in range(4)]
    bias = (torch.randn(GEMM_WIDTH, generator=gen)).to(torch.bfloat16).cuda()
    weight32 = (torch.randn(2048, 2048, generator=gen) * 0.02).cuda()
    # The first product (and cuBLAS handle): the program now computes, so what it
    # allocates next may use the reserve.
    torch.ones(8, 8, device="cuda") @ torch.ones(8, 8, device="cuda")
    x = torch.randn(GEMM_TOKENS, GEMM_WIDTH, generator=gen).to(torch.bfloat16).cuda()
    x32 = torch.randn(GEMM_TOKENS, 2048, generator=gen).cuda()
    places = {"weights": [drv.placement(w) for w in weights] + [drv.placement(weight32)],
              "activations": [drv.placement(x), drv.placement(x32)]}
    desc = f"weights in {places['weights']}, activations in {places['activations']}"
    if args.expect == "t2":
        ok = all(p == "t2" for p in places["weights"]) and all(p == "vram" for p in places["activations"])
        record(f"{label}.placement", ok, desc + "; expected weights in T2, activations in VRAM")
    elif args.expect == "vram":
        record(f"{label}.placement", all(p == "vram" for v in places.values() for p in v), desc + "; expected all in VRAM")
    outputs = {}
    torch.cuda.synchronize()
    started = time.time()
    for i, w in enumerate(weights):
        outputs[f"wide{i}"] = torch.nn.functional.linear(x, w)
    torch.cuda.synchronize()
    kv(f"{label}.wide_seconds", f"{time.time() - started:.4f}")
    for i, w in enumerate(weights):
        outputs[f"narrow{i}"] = torch.nn.functional.linear(x[:1], w)
    outputs["bias"] = torch.nn.functional.linear(x, weights[0], bias)
    outputs["float32"] = torch.nn.functional.linear(x32, weight32)
    torch.cuda.synchronize()
    finite = all(bool(torch.isfinite(o).all()) for o in outputs.values())
    record(f"{label}.products", finite, f"{len(outputs)} products of {GEMM_TOKENS}x{GEMM_WIDTH} activations, all finite" if finite else "non-finite output")
    torch.save({k: v.cpu() for k, v in outputs.items()}, args.out)


def train(args):
    """Training steps on T2 weights; losses and weights saved for a bit-for-bit comparison."""
    label = args.label
    drv = Driver()
    torch.cuda.init()
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator().manual_seed(2468)
    weights = [torch.nn.Parameter((torch.randn(GEMM_WIDTH, GEMM_WIDTH, generator=gen) * 0.02).to(torch.bfloat16).cuda())
               for _ in range(3)]
    torch.ones(8, 8, device="cuda") @ torch.ones(8, 8, device="cuda")
    x = torch.randn(GEMM_TOKENS, GEMM_WIDTH, generator=gen).to(torch.bfloat16).cuda()
    target = torch.randn(GEMM_TOKENS, GEMM_WIDTH, generator=gen).to(torch.bfloat16).cuda()
    places = [drv.placement(w) for w in weights]
    want = "t2" if args.expect == "t2" else "vram"
    if args.expect != "any":
        record(f"{label}.placement", all(p == want for p in places), f"weights in {places}, expected {want}")
    optimizer = torch.optim.AdamW(weights, lr=1e-3)
    losses = []
    for _ in range(3):
        h = x
        for i, w in enumerate(weights):
            h = torch.nn.functional.linear(h, w)
            if i < len(weights) - 1:
                h = torch.nn.functional.gelu(h)
        loss = torch.nn.functional.mse_loss(h.float(), target.float())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
    torch.cuda.synchronize()
    values = [float(v) for v in losses]
    kv(f"{label}.losses", " ".join(f"{v:.6f}" for v in values))
    changed = all(bool((w.detach() != 0).any()) for w in weights) and values[-1] != values[0]
    record(f"{label}.steps", all(map(lambda v: v == v, values)) and changed,
           f"3 AdamW steps, losses {values}" if changed else f"the weights did not train: losses {values}")
    saved = {f"loss{i}": v.cpu() for i, v in enumerate(losses)}
    saved.update({f"weight{i}": w.detach().cpu() for i, w in enumerate(weights)})
    torch.save(saved, args.out)


def gemm_compare(args):
    reference = torch.load(args.reference)
    for path in args.others:
        other = torch.load(path)
        differing = [k for k in reference if k not in other or not torch.equal(reference[k], other[k])]
        name = os.path.basename(path).rsplit(".", 1)[0]
        record(f"{args.label}.{name}", not differing,
               f"{len(reference)} outputs bit-identical to {os.path.basename(args.reference)}" if not differing
               else f"outputs differ from {os.path.basename(args.reference)}: {', '.join(differing)}")


def expected_report(real_free, real_total, budget, mode, t2_cap):
    """What the shim's config implies (shim/src/rules/config.rs Config::report, T2 unused)."""
    total = min(budget, real_total) if budget else real_total
    used = real_total - real_free
    free = min(max(total - used, 0), real_free)
    if mode == "combined":
        return free + t2_cap, total + t2_cap
    return free, total


def read_kv(path):
    out = {}
    with open(path) as f:
        for line in f:
            if line.startswith("KV ") and "=" in line:
                k, v = line[3:].strip().split("=", 1)
                out[k] = v
    return out


def capacity(args):
    import pynvml

    label = args.label
    torch.cuda.init()
    budget = args.budget_gib * GIB
    t2_cap = args.t2_cap_gib * GIB
    slack = args.slack_mib * MIB  # memory other code may take between two readings
    # Each API's own figures without the shim (gb-gpu-check report): NVML counts memory the
    # CUDA APIs leave out, so every API is held to its own physical total.
    plain = read_kv(args.plain_report)
    readings = {}  # name -> (free or None, total, key of the plain figures)
    free, total = torch.cuda.mem_get_info()
    readings["torch.mem_get_info"] = (free, total, "cudaMemGetInfo")
    readings["torch.total_memory"] = (None, torch.cuda.get_device_properties(0).total_memory, "props")
    pynvml.nvmlInit()
    m = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
    readings["pynvml.memory"] = (m.free, m.total, "nvml")
    r = read_kv(args.rust_report)
    for api in ("cudaMemGetInfo", "cuMemGetInfo", "nvml", "nvml_v2"):
        if f"{api}.total" in r:
            readings[f"rust.{api}"] = (int(r[f"{api}.free"]), int(r[f"{api}.total"]), api)
    for api in ("props", "cuDeviceTotalMem"):
        if f"{api}.total" in r:
            readings[f"rust.{api}"] = (None, int(r[f"{api}.total"]), api)
    for name, (free, total, api) in readings.items():
        physical = int(plain[f"{api}.total"])
        physical_free = int(plain.get(f"{api}.free", physical))
        want_total = expected_report(physical_free, physical, budget, args.report_mode, t2_cap)[1]
        kv(f"{label}.{name}.total", total)
        ok = total == want_total
        detail = f"total {total} ({gib(total)}), expected {want_total} ({gib(want_total)}) from the plain {api} total {gib(physical)}"
        if free is not None:
            kv(f"{label}.{name}.free", free)
            # Free: within the reported total, and no lower than that total minus what the
            # device used without the shim, minus the slack this process may hold.
            floor = want_total - (physical - physical_free) - slack
            free_ok = 0 < free <= total and free >= floor
            ok = ok and free_ok
            detail += f"; free {gib(free)}" + ("" if free_ok else f", outside (0, total] or below {gib(floor)}")
        record(f"{label}.{name}", ok, detail)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["tensors", "chunks", "capacity", "gemm", "train", "gemm-compare"])
    p.add_argument("--label", default="torch")
    p.add_argument("--total-gib", type=int, default=24)
    p.add_argument("--chunk-mib", type=int, default=1024)
    p.add_argument("--layers", type=int, default=16, help="chunks: layers loaded")
    p.add_argument("--budget-gib", type=int, default=0)
    p.add_argument("--t2-cap-gib", type=int, default=0)
    p.add_argument("--expect", choices=["t2", "vram", "any"], default="any")
    p.add_argument("--pointer-placement", type=int, default=1, help="check placement by pointer memory type (0 where VMM mappings hide it)")
    p.add_argument("--report-mode", choices=["physical", "combined"], default="physical")
    p.add_argument("--plain-report", default="", help="gb-gpu-check report output without the shim")
    p.add_argument("--slack-mib", type=int, default=2048)
    p.add_argument("--rust-report", default="", help="gb-gpu-check report output in the same configuration")
    p.add_argument("--out", default="", help="gemm, train: file for the outputs")
    p.add_argument("--reference", default="", help="gemm-compare: the outputs the others must equal")
    p.add_argument("--others", nargs="*", default=[], help="gemm-compare: outputs of the other runs")
    args = p.parse_args()
    try:
        if args.mode == "tensors":
            tensors(args)
        elif args.mode == "chunks":
            chunks(args)
        elif args.mode == "gemm":
            gemm(args)
        elif args.mode == "train":
            train(args)
        elif args.mode == "gemm-compare":
            gemm_compare(args)
        else:
            capacity(args)
    except Exception as e:  # any crash is a failure with its reason, never a silent pass
        where = traceback.extract_tb(e.__traceback__)[-1]
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else ""
        record(f"{args.label}.run", False, f"{type(e).__name__}: {first_line} (at line {where.lineno}: {where.line})")
    kv(f"{args.label}.python_summary", f"{COUNTS['passed']} passed, {COUNTS['failed']} failed")
    sys.exit(1 if COUNTS["failed"] else 0)


if __name__ == "__main__":
    main()
