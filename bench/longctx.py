#!/usr/bin/env python3
"""Long prompts: transformers' `generate` of the benchmarks' 8B-shape model (random bf16
weights, `llama_model`) with a prompt of --tokens tokens, greedy, deterministic
algorithms, timed per cache mode in one process:

  dynamic           transformers' default cache
  static            cache_implementation="static", compiled (transformers' default for it)
  static_eager      cache_implementation="static", generate(disable_compile=True)

Each mode runs once untimed with a short prompt (kernels, cuBLAS handles, compilation at
the decode shapes) and then timed: prefill = the first token's time from the call, decode =
tokens per second over the rest. Prints one JSON line per mode:
{"mode", "tokens", "prefill_s", "decode_tok_s", "decode_tail_tok_s" (over the second half
of the tokens: with live tiering, after the prefill's idle memory gave way), "new_tokens", "ids"} (ids: the generated
tokens, compared across configurations by the report; under the shim also "phases": where
the weights and the cache were and what the shim did, at the call, at the first token and
at the end: see `Placement`; with BENCH_LONGCTX_TIMELINE set, also "prefill_timeline":
the timed prefill's GPU work by kind, its heaviest kernels and its idle gaps by cause,
from a CUDA-only torch.profiler run up to the first token, `gpu_profile` and
`gpu_timeline`), or {"mode",
"error"} when a mode
failed (out of memory, say), so that one mode's failure leaves the others' figures; then
one line with every mode and what the decode bound needs: {"modes": {mode: ...},
"weight_bytes", "kv_bytes", "free_vram_bytes" (NVML, before the model: what the process
had beside the foreign one), "headroom_bytes" (the shim's default headroom)}.

bench/run.sh's `longctx` section runs it on the free GPU, then beside a foreign process
with the shim and with BENCH_BASELINE_SHIM; bench/README.md says what each figure means.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gpu_profile  # noqa: E402
import gpu_timeline  # noqa: E402
from llama_model import BF16_BYTES, draw_weights, kv_width, meta_llama, shape_of, weight_count  # noqa: E402

MODES = ("dynamic", "static", "static_eager")
GIB = 1 << 30
# GREENBOOST_VRAM_HEADROOM's default on a large device (policy/src/settings.rs).
SHIM_HEADROOM = GIB


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=16384, help="prompt tokens")
    parser.add_argument("--new-tokens", type=int, default=16, help="tokens generated after the prompt")
    parser.add_argument("--modes", default=",".join(MODES), help="comma list of " + ", ".join(MODES))
    parser.add_argument("--shape", default="8b")
    parser.add_argument("--layers", type=int, default=0, help="decoder layers (0: the shape's own)")
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args()


class Placement:
    """Snapshots of the shim's counters and of the weights' bytes in T2: they tell a slow
    prefill or decode apart by cause (staged products, moves, weights or cache left in T2),
    without a debug log that would change the timing."""

    COUNTERS = ("gemm_staged", "gemm_staged_bytes", "promoted_bytes", "demoted_bytes", "swaps", "tier_vram",
                "t2_used", "promote_ns", "demote_ns", "move_issue_ns", "room_made_bytes", "room_made_ns",
                "gemm_in_place", "gemm_in_place_bytes", "headroom_spills", "kept_vram")

    def __init__(self, model, shim):
        self.model, self.shim = model, shim

    @staticmethod
    def under_shim(model):
        """A Placement of `model` where the shim with its tiering counters is loaded, else
        None (no shim, or python/gbgpu not on the path)."""
        try:
            from gbgpu.shim_exports import Shim
        except ImportError:
            return None
        shim = Shim()
        return Placement(model, shim) if shim.has_tiering() else None

    def snapshot(self, cache=None):
        import torch

        stats = self.shim.stats()
        taken = {name: getattr(stats, name) for name in self.COUNTERS}
        taken["weights_t2"] = sum(self.shim.t2_bytes(p) for p in self.model.parameters())
        if cache is not None:
            taken["cache_t2"] = sum(self.shim.t2_bytes(t) for t in cache_tensors(cache))
        taken["torch_allocated"] = torch.cuda.memory_allocated()
        taken["torch_reserved"] = torch.cuda.memory_reserved()
        return taken


def cache_tensors(cache):
    """The key and value tensors of a transformers cache (its layers' `keys`/`values`, or
    the older `key_cache`/`value_cache` lists)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        return [t for layer in layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                if t is not None and t.numel()]
    return [t for t in list(getattr(cache, "key_cache", [])) + list(getattr(cache, "value_cache", [])) if t.numel()]


def rate(marks):
    """Tokens per second between the first and the last of `marks` (0 without two)."""
    return (len(marks) - 1) / (marks[-1] - marks[0]) if len(marks) > 1 and marks[-1] > marks[0] else 0.0


def generate_timed(model, prompt, new_tokens, mode, placement=None, timeline=None):
    """One greedy generate in `mode`: (seconds to the first token, decode tokens/s over all
    tokens and over the second half of them, the generated ids, the placement snapshots or
    None). With `timeline` (a dict), the prefill runs under a CUDA-only torch.profiler
    whose gaps and busy time by kind go into it."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList

    marks = []
    phases = {}
    first_token = []  # when the first token was there, before any snapshot
    profiler = None
    if timeline is not None:
        from torch.profiler import ProfilerActivity, profile

        profiler = profile(activities=[ProfilerActivity.CUDA])

    class MarkEachToken(LogitsProcessor):
        def __call__(self, input_ids, scores):
            torch.cuda.synchronize()
            marks.append(time.perf_counter())
            if len(marks) == 1 and profiler is not None:
                profiler.stop()
            if len(marks) == 1 and placement is not None:
                # The decode is timed from after the snapshot, the prefill up to before it.
                first_token.append(marks[0])
                phases["first_token"] = placement.snapshot()
                marks[0] = time.perf_counter()
            return scores

    extra = {}
    if mode != "dynamic":
        extra["cache_implementation"] = "static"
    if mode == "static_eager":
        extra["disable_compile"] = True
    torch.cuda.synchronize()
    if placement is not None:
        phases["call"] = placement.snapshot()
    if profiler is not None:
        profiler.start()
    started = time.perf_counter()
    try:
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False, return_dict_in_generate=True,
                             logits_processor=LogitsProcessorList([MarkEachToken()]), **extra)
    finally:
        if profiler is not None and not marks:
            profiler.stop()  # failed before its first token: the next mode profiles afresh
    torch.cuda.synchronize()
    prefill = (first_token or marks)[0] - started
    if placement is not None:
        phases["end"] = placement.snapshot(out.past_key_values)
    if profiler is not None:
        timeline.update(gpu_profile.device_time(profiler))
        timeline["gaps"] = gpu_timeline.gaps(gpu_timeline.trace_events(profiler))
    ids = [int(t) for t in out.sequences[0, prompt.shape[1]:].tolist()]
    return prefill, (rate(marks), rate(marks[len(marks) // 2:])), ids, phases or None


def free_vram():
    """The device's free VRAM as NVML sees it (not through the shim's report)."""
    import pynvml

    pynvml.nvmlInit()
    return pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).free


def main():
    args = parse_args()
    import torch

    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    shape = shape_of(args.shape, args.layers)
    free_at_start = free_vram()
    model, _ = meta_llama(shape, max_positions=args.tokens + args.new_tokens + 64)
    draw_weights(model, torch.device("cuda"), args.seed)
    generator = torch.Generator(device="cpu").manual_seed(args.seed)
    prompt = torch.randint(0, shape["vocab_size"], (1, args.tokens), generator=generator).to("cuda")
    warm_prompt = prompt[:, :128]
    placement = Placement.under_shim(model)
    modes = {}
    for mode in args.modes.split(","):
        try:
            with torch.no_grad():
                generate_timed(model, warm_prompt, args.new_tokens, mode)
                timeline = {} if os.environ.get("BENCH_LONGCTX_TIMELINE") else None
                prefill, (decode, tail), ids, phases = generate_timed(model, prompt, args.new_tokens, mode, placement,
                                                                      timeline)
            record = {"mode": mode, "tokens": args.tokens, "prefill_s": round(prefill, 4),
                      "decode_tok_s": round(decode, 3), "decode_tail_tok_s": round(tail, 3),
                      "new_tokens": args.new_tokens, "ids": ids}
            if phases:
                record["phases"] = phases
            if timeline:
                record["prefill_timeline"] = timeline
        except Exception as error:  # a mode that fails (out of memory) leaves the others
            record = {"mode": mode, "tokens": args.tokens, "error": f"{type(error).__name__}: {error}"[:500]}
            torch.cuda.empty_cache()
        print(json.dumps(record), flush=True)
        modes[mode] = record
    kv_bytes = (args.tokens + args.new_tokens) * shape["num_hidden_layers"] * 2 * kv_width(shape) * BF16_BYTES
    print(json.dumps({"modes": modes, "weight_bytes": weight_count(shape) * BF16_BYTES, "kv_bytes": kv_bytes,
                      "free_vram_bytes": free_at_start, "headroom_bytes": SHIM_HEADROOM}), flush=True)


if __name__ == "__main__":
    main()
