#!/usr/bin/env python3
"""Where a prefill's blocks live under the shim: the 8B-shape model of decode.py
(llama_model.py), in model order, under GREENBOOST_VRAM_BUDGET (set by the caller),
warmed up, one greedy generation by the bench's loop, then prefills with no KV cache
held, each timed; one of them with PyTorch's allocation history on, so that every block
it allocates is looked up in the shim (greenboost_shim_t2_bytes): how many of its bytes
lie in T2, and in which kind of segment (made while loading or once computing). Prints
one JSON object.

A probe, not a benchmark: it explains prefill_vs_bound (bench/README.md). It builds
bench/llama_model.py's model, so bench/ goes on PYTHONPATH:
  GREENBOOST_VRAM_BUDGET=... LD_PRELOAD=... PYTHONPATH=bench python3 bench/probes/placement_probe.py"""

import argparse
import ctypes
import json
import sys

from llama_model import BF16_BYTES, draw_weights, greedy_step, meta_llama, shape_of


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layers", type=int, default=0)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--prefills", type=int, default=3)
    args = parser.parse_args()

    import torch

    shape = shape_of("8b", args.layers)
    model, _ = meta_llama(shape)
    shim = ctypes.CDLL(None)
    t2_bytes = getattr(shim, "greenboost_shim_t2_bytes", None)
    if t2_bytes is not None:
        t2_bytes.argtypes, t2_bytes.restype = [ctypes.c_uint64, ctypes.c_uint64], ctypes.c_uint64
    in_t2 = (lambda address, size: t2_bytes(address, size)) if t2_bytes else (lambda address, size: 0)

    device = torch.device("cuda")
    draw_weights(model, device, 1234)
    loaded_segments = {s["address"] for s in torch.cuda.memory_snapshot()}
    weights_t2 = sum(in_t2(p.data_ptr(), p.numel() * BF16_BYTES) for p in model.parameters())

    prompt = torch.randint(0, shape["vocab_size"], (1, args.prompt),
                           generator=torch.Generator().manual_seed(1234)).to(device)

    forward = greedy_step(model)

    def timed_prefill():
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        forward(prompt)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)

    result = {"weights_t2_gb": weights_t2 / 1e9, "shim": t2_bytes is not None}
    with torch.inference_mode():
        token, cache = forward(prompt)
        for _ in range(2):
            token, cache = forward(token, cache)
        del cache
        result["prefill_ms_after_warmup"] = [timed_prefill() for _ in range(args.prefills)]
        token, cache = forward(prompt)
        for _ in range(args.new_tokens):
            token, cache = forward(token, cache)
        kv = [t for layer in cache.layers for t in (layer.keys, layer.values)]
        kv_bytes = sum(t.numel() * t.element_size() for t in kv)
        result["kv_cache_gb"] = kv_bytes / 1e9
        result["kv_cache_t2_gb"] = sum(in_t2(t.data_ptr(), t.numel() * t.element_size()) for t in kv) / 1e9
        result["prefill_ms_kv_held"] = [timed_prefill() for _ in range(args.prefills)]
        del cache, kv
        result["prefill_ms_no_kv"] = [timed_prefill() for _ in range(args.prefills)]

        torch.cuda.memory._record_memory_history(max_entries=1_000_000)
        forward(prompt)
        torch.cuda.synchronize()
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)

    blocks = {"t2_loading": [0, 0], "t2_computing": [0, 0], "vram": [0, 0]}
    segment_of = sorted((s["address"], s["total_size"]) for s in snapshot["segments"])
    for trace in snapshot["device_traces"]:
        for event in trace:
            if event["action"] != "alloc":
                continue
            address, size = event["addr"], event["size"]
            segment = next((base for base, total in reversed(segment_of) if base <= address < base + total), None)
            kind = "vram"
            if in_t2(address, size):
                kind = "t2_loading" if segment in loaded_segments else "t2_computing"
            blocks[kind][0] += 1
            blocks[kind][1] += size
    result["prefill_blocks"] = {kind: {"count": n, "mib": round(b / 2**20, 1)} for kind, (n, b) in blocks.items()}
    segments = {"t2": {}, "vram": {}}
    for s in snapshot["segments"]:
        where = "t2" if in_t2(s["address"], s["total_size"]) else "vram"
        phase = "loading" if s["address"] in loaded_segments else "computing"
        key = f"{phase} {s['total_size'] >> 20} MiB"
        entry = segments[where].setdefault(key, [0, 0])
        entry[0] += 1
        entry[1] += sum(b["size"] for b in s["blocks"] if b["state"] != "active_allocated") >> 20
    result["segments"] = {where: {k: {"count": n, "free_mib": f} for k, (n, f) in sorted(rows.items())}
                          for where, rows in segments.items()}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
