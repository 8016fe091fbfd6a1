#!/usr/bin/env python3
"""What bounds each llama.cpp configuration: the bytes a generated token reads from each
place (VRAM, T2 over PCIe, host RAM by the CPU backend) and the rates measured on the
same machine in the same run. Used by run.sh (layout, rates) and analyze.py (bounds).

  bound.py layout MODEL --gguf-py DIR   the model buffer's tensors, in llama.cpp's order,
                                        with the bytes one token reads of each (JSON)
  bound.py rates                        measured rates in GB/s (JSON): the link's pinned
                                        memcpy (host to device), GPU kernels reading pinned
                                        host memory in place (zero-copy; with cupy), HBM
                                        reads, host RAM reads by all CPUs; needs torch and
                                        the GPU

One token reads every weight of the model buffer once, except the experts: of each
stacked expert tensor, the `experts_used` of `experts` the router picked (random
weights route evenly, so that fraction of its bytes). token_embd stays in host memory
with -ngl 99 (one row per token) and is left out. The tensors sit in the buffer in
the order llama.cpp creates them (output_norm and output, then layer by layer), which
decides which of them a split's VRAM head holds.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time

EXPERT_RE = re.compile(r"blk\.(\d+)\.ffn_(gate|up|down)_exps\.")
LAYER_RE = re.compile(r"blk\.(\d+)\.")
GB = 1e9


def layout(model: str, gguf_py: str | None) -> dict:
    if gguf_py:
        sys.path.insert(0, gguf_py)
    from gguf import GGUFReader  # noqa: E402

    reader = GGUFReader(model)
    used = total = None
    for field in reader.fields.values():
        if field.name.endswith(".expert_used_count"):
            used = int(field.parts[field.data[0]][0])
        elif field.name.endswith(".expert_count"):
            total = int(field.parts[field.data[0]][0])
    fraction = used / total if used and total else 1.0
    tensors = []
    for t in reader.tensors:
        if t.name == "token_embd.weight":
            continue
        m = LAYER_RE.match(t.name)
        read = int(t.n_bytes) * (fraction if EXPERT_RE.match(t.name) else 1.0)
        tensors.append({"name": t.name, "bytes": int(t.n_bytes), "read": round(read),
                        "layer": int(m.group(1)) if m else -1, "expert": bool(EXPERT_RE.match(t.name))})
    # Stable: within a layer the file's order, which is the converter's and llama.cpp's.
    tensors.sort(key=lambda t: t["layer"])
    return {"experts_used": used, "experts": total, "tensors": tensors}


def rates() -> dict:
    import torch

    def timed(step, n: int) -> float:
        step()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            step()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / n

    size = 1 << 30
    host = torch.empty(size, dtype=torch.uint8).pin_memory()
    dev = torch.empty(size, dtype=torch.uint8, device="cuda")
    link = size / timed(lambda: dev.copy_(host, non_blocking=True), 8) / GB
    big = torch.empty(4 * size // 4, dtype=torch.float32, device="cuda").fill_(1.0)
    hbm = 4 * size / timed(lambda: big.sum(), 20) / GB
    cpu = torch.ones(4 * size // 4, dtype=torch.float32)
    cpu.sum()
    start = time.perf_counter()
    for _ in range(5):
        cpu.sum()
    ddr = 4 * size * 5 / (time.perf_counter() - start) / GB
    out = {"link_gbs": round(link, 1), "hbm_gbs": round(hbm, 1), "host_ram_gbs": round(ddr, 1),
           "cpu_threads": torch.get_num_threads()}
    try:
        out["zero_copy_gbs"] = zero_copy_read_gbs(size, timed)
    except Exception as error:  # noqa: BLE001 - the bound's own rates stand without it; the report says why
        out["zero_copy_gbs"], out["zero_copy_error"] = None, repr(error)
    return out


# A grid-stride read of 16-byte streaming loads, eight in flight per thread: the fastest of
# the main bench's read kernels (gbbench.cu) on pinned host memory over PCIe.
ZERO_COPY_READ = r"""
extern "C" __global__ void read_words(const uint4 *__restrict__ buf, size_t n_vec, unsigned long long *sum) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned long long acc = 0;
    for (; i + 7 * stride < n_vec; i += 8 * stride) {
        uint4 v[8];
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = __ldcs(buf + i + k * stride);
#pragma unroll
        for (int k = 0; k < 8; k++) acc += (unsigned long long)v[k].x + v[k].y + v[k].z + v[k].w;
    }
    for (; i < n_vec; i += stride) { uint4 v = __ldcs(buf + i); acc += (unsigned long long)v.x + v.y + v.z + v.w; }
    atomicAdd(sum, acc);
}
"""


def zero_copy_read_gbs(size: int, timed) -> float | None:
    """GB/s at which GPU kernels read pinned host memory in place (zero-copy, as
    llama.cpp's kernels read T2): cupy's cudaHostAlloc memory, which unified addressing
    maps into the device; None without cupy."""
    try:
        import cupy
    except ImportError:
        return None
    pinned = cupy.cuda.alloc_pinned_memory(size)
    memory = cupy.cuda.UnownedMemory(pinned.ptr, size, pinned)
    words = cupy.ndarray((size // 16, 4), dtype=cupy.uint32, memptr=cupy.cuda.MemoryPointer(memory, 0))
    kernel = cupy.RawKernel(ZERO_COPY_READ, "read_words")
    total = cupy.zeros(1, dtype=cupy.uint64)
    blocks = cupy.cuda.Device().attributes["MultiProcessorCount"] * 8

    def read():
        kernel((blocks,), (256,), (words, cupy.uint64(size // 16), total))
        cupy.cuda.get_current_stream().synchronize()

    return round(size / timed(read, 8) / GB, 1)


def split_bytes(tensors: list[dict], head: int | None) -> tuple[float, float]:
    """(bytes one token reads from VRAM, from T2) when the first `head` bytes of the
    model buffer are VRAM and the rest T2 (None: all VRAM)."""
    vram = t2 = 0.0
    offset = 0
    for t in tensors:
        start, end = offset, offset + t["bytes"]
        offset = end
        in_vram = t["bytes"] if head is None else max(0, min(end, head) - start)
        share = in_vram / t["bytes"] if t["bytes"] else 1.0
        vram += t["read"] * share
        t2 += t["read"] * (1 - share)
    return vram, t2


def expert_read(tensors: list[dict], layers: set[int] | None) -> float:
    """Bytes one token reads of the experts of `layers` (None: every layer)."""
    return sum(t["read"] for t in tensors if t["expert"] and (layers is None or t["layer"] in layers))


def best_placement(tensors: list[dict], kv: float, room: float) -> dict[str, float]:
    """What one token reads from each place at the best placement in `room` bytes of VRAM
    (issue 36's bound): the bytes read most per byte held (the KV cache, every dense
    weight: once a token) fill VRAM, the rest is read over the link."""
    pieces = sorted([(t["read"] / t["bytes"], t["bytes"]) for t in tensors if t["bytes"]] + [(1.0, kv)], reverse=True)
    vram = t2 = 0.0
    for density, size in pieces:
        held = min(size, max(0.0, room))
        room -= held
        vram += density * held
        t2 += density * (size - held)
    return {"vram": vram, "t2": t2, "host_ram": 0.0}


def tokens_per_s(reads: dict[str, float], measured: dict) -> float | None:
    """Tokens/s if a token took only the time to stream `reads` (bytes per place: "vram",
    "t2", "host_ram") at the measured rates, one after the other."""
    rate = {"vram": measured.get("hbm_gbs"), "t2": measured.get("link_gbs"), "host_ram": measured.get("host_ram_gbs")}
    seconds = 0.0
    for place, n in reads.items():
        if n:
            if not rate[place]:
                return None
            seconds += n / (rate[place] * GB)
    return round(1 / seconds, 2) if seconds else None


SPLIT_RE = re.compile(r"split 0x[0-9a-f]+: ([\d.]+) MiB = ([\d.]+) MiB VRAM \+ ([\d.]+) MiB on host")
T2_RE = re.compile(r"T2 0x[0-9a-f]+: ([\d.]+) MiB \(")

def t2_share(log: str, size_mib: float | None) -> float | None:
    """The share of a buffer of `size_mib` that the shim's debug log puts in T2: its split
    line's tail, 1 for a T2 placement of that size (to the 2 MiB T2 rounds to), else 0;
    None without a size."""
    if not size_mib:
        return None
    for total, _head, tail in SPLIT_RE.findall(log):
        if abs(float(total) - size_mib) <= 2.1:
            return float(tail) / float(total)
    if any(abs(float(n) - size_mib) <= 2.1 for n in T2_RE.findall(log)):
        return 1.0
    return 0.0


def kv_read_per_token(meta: dict) -> float:
    """Bytes of F16 K and V one generated token reads at the run's depth (the middle of
    its generated tokens)."""
    model = meta.get("model", {})
    if not model.get("layers"):
        return 0.0
    head_dim = model.get("head_dim") or model["hidden"] // model["heads"]
    cells = meta.get("depth", 0) + meta.get("n_gen", 0) / 2
    return model["layers"] * 2 * cells * model["kv_heads"] * head_dim * 2


def bounds(raw, configs: dict, meta: dict) -> dict:
    """Per configuration: what a generated token reads from each place, the tokens/s
    that alone allows at the measured rates, and the measured tg against it."""
    def load(name: str) -> dict:
        try:
            return json.loads((raw / name).read_text())
        except (OSError, ValueError):
            return {}
    lay, measured = load("layout.json"), load("rates.json")
    tensors = lay.get("tensors")
    if not tensors or not measured:
        return {}
    model_bytes = sum(t["bytes"] for t in tensors)
    kv = kv_read_per_token(meta)
    layers = sorted({t["layer"] for t in tensors if t["layer"] >= 0})
    out = {"rates": measured}
    reads_by_stem = {}  # bytes a token reads from each place, per configuration
    for stem, cfg in configs.items():
        if "results" not in cfg:
            continue
        buffers = cfg.get("device_buffers_mib", {})
        kv_on_gpu = buffers.get("CUDA0 KV")
        reads = {"vram": 0.0, "t2": 0.0, "host_ram": 0.0}
        # Live tiering moved buffers in 2 MiB parts by heat (GREENBOOST_TIERING=on, or its
        # default once the budget binds: the exit summary counts movable allocations).
        # Where each part sits is not logged, so the bound is the best placement in the
        # budget (less the compute buffer).
        moved = stem == "greenboost_tiering" or bool((cfg.get("tiering") or {}).get("movable_allocs"))
        if stem in ("greenboost", "greenboost_tiering") and moved:
            room = meta.get("budget_mib", 0) * 2**20 - buffers.get("CUDA0 compute", 0) * 2**20
            reads.update(best_placement(tensors, kv, room))
        elif stem == "greenboost":
            log = (raw / "greenboost.err").read_text(errors="replace") if (raw / "greenboost.err").exists() else ""
            share = t2_share(log, buffers.get("CUDA0 model")) or 0.0
            vram, t2 = split_bytes(tensors, round(model_bytes * (1 - share)))
            kv_t2 = kv * (t2_share(log, kv_on_gpu) or 0.0)
            reads.update(vram=vram + kv - kv_t2, t2=t2 + kv_t2)
            cfg["t2_share"] = {"model": round(share, 4), "kv": t2_share(log, kv_on_gpu)}
        elif stem in ("cpu_moe", "ot_cpu"):
            n = int(cfg["ngl"].split()[-1]) if stem == "cpu_moe" else len(layers)
            on_cpu = expert_read(tensors, set(layers[:n]))
            reads.update(vram=split_bytes(tensors, None)[0] - on_cpu + kv, host_ram=on_cpu)
        elif stem == "nkvo":
            reads.update(vram=split_bytes(tensors, None)[0], host_ram=kv)
        else:
            reads.update(vram=split_bytes(tensors, None)[0] + kv)
        bound = tokens_per_s(reads, measured)
        reads_by_stem[stem] = reads
        out[stem] = {"read_per_token_gb": {k: round(v / GB, 3) for k, v in reads.items()},
                     "tg_bound_tok_s": bound, "tg_vs_bound": ratio(tg_of(cfg, meta), bound)}
    if "greenboost" in reads_by_stem and "vram" in reads_by_stem:
        out["greenboost"]["below_bound"] = below_bound(reads_by_stem["greenboost"], tg_of(configs["greenboost"], meta),
                                                       reads_by_stem["vram"], tg_of(configs["vram"], meta), measured)
    return out


def tg_of(cfg: dict, meta: dict) -> float | None:
    """The configuration's measured generation rate (tokens/s)."""
    return cfg.get("results", {}).get(f"tg{meta.get('n_gen', 128)}", {}).get("tok_s")


def ratio(measured: float | None, bound: float | None) -> float | None:
    return round(measured / bound, 3) if measured and bound else None


def below_bound(reads: dict, tg: float | None, vram_reads: dict, tg_vram: float | None, measured: dict) -> dict | None:
    """Why GreenBoost's generation stays under its bound, in milliseconds a token: its T2
    bytes as GPU kernels read them in place (zero-copy, when measured) rather than at the
    copy engine's rate the bound takes, its VRAM bytes, and the work of a token that is
    not streaming bytes (launches, routing, small kernels), which the all-VRAM run shows:
    its token time less its own bytes' time."""
    if not (tg and tg_vram):
        return None
    ms = {"t2_at_link": reads["t2"] / (measured["link_gbs"] * GB) * 1e3,
          "vram": reads["vram"] / (measured["hbm_gbs"] * GB) * 1e3,
          "vram_run_token": 1e3 / tg_vram,
          "vram_run_bytes": vram_reads["vram"] / (measured["hbm_gbs"] * GB) * 1e3,
          "measured_token": 1e3 / tg}
    zero_copy = measured.get("zero_copy_gbs")
    ms["t2_at_zero_copy"] = reads["t2"] / (zero_copy * GB) * 1e3 if zero_copy else None
    ms["not_bytes"] = max(0.0, ms["vram_run_token"] - ms["vram_run_bytes"])
    ceiling = (ms["t2_at_zero_copy"] or ms["t2_at_link"]) + ms["vram"] + ms["not_bytes"]
    # What the token time leaves for the T2 bytes once the rest is counted: the rate
    # the program's kernels really read T2 at.
    left_for_t2 = ms["measured_token"] - ms["vram"] - ms["not_bytes"]
    out = {key: round(value, 2) if value is not None else None for key, value in ms.items()}
    out["t2_effective_gbs"] = round(reads["t2"] / (left_for_t2 * 1e-3) / GB, 1) if reads["t2"] and left_for_t2 > 0 else None
    out["ceiling_tok_s"] = round(1e3 / ceiling, 2)
    out["measured_vs_ceiling"] = ratio(tg, 1e3 / ceiling)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    lay = sub.add_parser("layout")
    lay.add_argument("model")
    lay.add_argument("--gguf-py")
    sub.add_parser("rates")
    args = ap.parse_args()
    print(json.dumps(layout(args.model, args.gguf_py) if args.cmd == "layout" else rates()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
