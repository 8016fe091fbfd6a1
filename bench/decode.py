#!/usr/bin/env python3
"""Greedy decoding of a Llama-architecture model with random bf16 weights, one
configuration per process (bench/run.sh starts one process per configuration, the
GreenBoost one with the shim preloaded). Prints one JSON object on stdout.

Configurations:
  vram         every weight in VRAM (PyTorch's default allocator, no budget)
  greenboost   the same program; run.sh preloads libgreenboost_cuda.so with
               GREENBOOST_VRAM_BUDGET=--budget-bytes, so the weights that do not fit
               are placed in T2 by the shim
  cpu_offload  transformers/accelerate: device_map from max_memory={0: budget, cpu}
               (accelerate copies the CPU-resident layers to the GPU at each forward)
  uvm          a pluggable allocator (bench/uvm_alloc.cu, UVM_MODE=managed): every
               allocation is cudaMallocManaged memory preferred on the host and mapped
               for the GPU (issue 4's Unified Memory contender)
  uvm_split    the same allocator with GreenBoost's placement rule (UVM_MODE=split):
               VRAM (a cudaMallocAsync pool) while the budget lasts, managed memory
               preferred on the host beyond it

`--generate hf` times transformers' own `generate` (greedy, the same model and prompt)
instead of the bench's decode loop: a CUDA event is recorded in a logits processor,
which generate calls once per token, so the step times include everything generate
does between two forwards (cache updates, logits processing, stopping criteria).

The model is llama_model.py's: built from a config (no download), every weight drawn
on the GPU from a generator seeded with the parameter's index, so every configuration
computes with the same weights and the greedy tokens can be compared. `--weight-bytes`
prints the weight size without importing torch (run.sh derives the budget from it).

main runs the steps in order, one function each: the arguments, the allocator (uvm),
the model placed as the configuration says, the bytes a token reads from each place,
the warm-up, the two passes, the KV cache's placement, more prefills, the profile, and
the JSON.
"""

import argparse
import ctypes
import functools
import json
import os
import statistics
import sys
import time

import gpu_profile
import gpu_timeline
from llama_model import BF16_BYTES, SHAPES, draw_weights, greedy_step, kv_width, meta_llama, shape_of, weight_count

# Decode steps (tokens) whose GPU timeline the profile reads for idle gaps.
GAP_STEPS = 8


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", choices=["vram", "greenboost", "cpu_offload", "uvm", "uvm_split"], default="vram")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="8b")
    parser.add_argument("--layers", type=int, default=0, help="override the number of decoder layers")
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--budget-bytes", type=int, default=0, help="VRAM budget for the weights (0: none)")
    parser.add_argument("--uvm-lib", default="", help="uvm_alloc.so (uvm and uvm_split configurations)")
    parser.add_argument("--generate", choices=["loop", "hf"], default="loop",
                        help="the bench's decode loop, or transformers' generate")
    parser.add_argument("--no-cudnn-attention", action="store_true",
                        help="turn PyTorch's cuDNN attention backend off (scaled_dot_product_attention then "
                             "uses flash or memory-efficient attention)")
    parser.add_argument("--prefill-repeats", type=int, default=3,
                        help="prefills timed (the two passes' own, then more alone); the figure is their median")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--max-seconds", type=float, default=0,
                        help="stop decoding after this many seconds (0: never); fewer tokens, same median step")
    parser.add_argument("--allocation-order", choices=["model", "reverse"], default="model",
                        help="allocate the weights in the model's order (the embedding first, as loaders do) "
                             "or the reverse (the output layer first): under a budget, which layers get VRAM")
    parser.add_argument("--device", default="cuda", help="cpu only for trying the harness without a GPU")
    parser.add_argument("--weight-bytes", action="store_true", help="print the weight bytes and exit")
    parser.add_argument("--profile", action="store_true",
                        help="after the timed run, profile one prefill and one decode step (torch.profiler) and "
                             "add where their GPU time went to the JSON (\"profile\")")
    return parser.parse_args()


def pointer_placement(driver, ptr):
    """Where the driver says a device pointer lives: vram, host (pinned/registered,
    read zero-copy: GreenBoost's T2) or managed."""
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED = 2, 8
    value = ctypes.c_uint(0)
    if driver.cuPointerGetAttribute(ctypes.byref(value), CU_POINTER_ATTRIBUTE_IS_MANAGED, ctypes.c_uint64(ptr)) == 0 \
            and value.value:
        return "managed"
    value = ctypes.c_uint(0)
    if driver.cuPointerGetAttribute(ctypes.byref(value), CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ctypes.c_uint64(ptr)) != 0:
        return "unknown"
    return {1: "host", 2: "vram"}.get(value.value, "unknown")


def shim_loaded():
    with open("/proc/self/maps") as maps:
        return any("libgreenboost_cuda" in line for line in maps)


def decode_gaps(forward, prompt):
    """Where the GPU waits in GAP_STEPS decode steps run back to back, as the timed loop
    runs them (nothing synchronises between steps), from a fresh prefill: the steps meet
    the key lengths the timed passes met, as the timed pass does."""
    token, cache = forward(prompt)

    def steps():
        next_token, next_cache = token, cache
        for _ in range(GAP_STEPS):
            next_token, next_cache = forward(next_token, next_cache)

    return gpu_timeline.profile_gaps(steps, GAP_STEPS)


def use_uvm_allocator(args):
    """For uvm and uvm_split: makes every allocation of PyTorch uvm_alloc.so's, in the
    mode the configuration names. Must precede any CUDA allocation: the allocator is
    chosen once per process. Says whether it did."""
    if args.config not in ("uvm", "uvm_split"):
        return False
    os.environ["UVM_MODE"] = "split" if args.config == "uvm_split" else "managed"
    os.environ["UVM_BUDGET_BYTES"] = str(args.budget_bytes)
    import torch

    allocator = torch.cuda.memory.CUDAPluggableAllocator(args.uvm_lib, "uvm_malloc", "uvm_free")
    torch.cuda.memory.change_current_allocator(allocator)
    return True


def offload_map(args, model):
    """accelerate's device map for cpu_offload (the layers past the budget on the CPU),
    None for every other configuration (everything on the device)."""
    if args.config != "cpu_offload":
        return None
    import torch
    from accelerate import infer_auto_device_map

    device_map = infer_auto_device_map(
        model, max_memory={0: args.budget_bytes, "cpu": 512 << 30},
        no_split_module_classes=["LlamaDecoderLayer"], dtype=torch.bfloat16)
    # The rotary embedding holds no weights, only a computed buffer: keep it on the GPU.
    device_map["model.rotary_emb"] = 0
    return device_map


def placement_target(device_map, device):
    """target(name): the device a parameter is drawn for, as the device map says."""
    import torch

    def target(name):
        if device_map is None:
            return device
        best = max((key for key in device_map if key == "" or name == key or name.startswith(key + ".")), key=len)
        where = device_map[best]
        return torch.device("cpu") if where == "cpu" else device

    return target


def load_model(args, shape, device):
    """The model with every weight drawn where the configuration puts it (dispatched by
    accelerate for cpu_offload), its parameters' names, the device map and target()."""
    model, _ = meta_llama(shape)
    names = [name for name, _ in model.named_parameters()]
    counted = sum(p.numel() for p in model.parameters())
    if counted != weight_count(shape):
        raise SystemExit(f"decode.py: weight_count() says {weight_count(shape)}, the model has {counted}")
    device_map = offload_map(args, model)
    target = placement_target(device_map, device)
    draw_weights(model, device, args.seed, reverse=args.allocation_order == "reverse", target=target)
    leftover = [name for name, b in model.named_buffers() if b.is_meta]
    if leftover:
        raise SystemExit(f"decode.py: buffers left on meta: {leftover}")
    if device_map is not None:
        from accelerate import dispatch_model
        model = dispatch_model(model, device_map=device_map, main_device=0)
    return model, names, device_map, target


def shim_t2_bytes():
    """The shim's greenboost_shim_t2_bytes where the shim is loaded, else None: a split
    allocation is one VMM range that the driver calls device memory, VRAM head and host
    tail alike, so only the shim can say how much of it is T2."""
    if not shim_loaded():
        return None
    t2_bytes = getattr(ctypes.CDLL(None), "greenboost_shim_t2_bytes", None)
    if t2_bytes is not None:
        t2_bytes.argtypes, t2_bytes.restype = [ctypes.c_uint64, ctypes.c_uint64], ctypes.c_uint64
    return t2_bytes


def placed_parts(ptr, size, t2_bytes, driver):
    """{place: bytes} of the `size` bytes at device pointer `ptr`: as the shim counts them
    where it is loaded (`t2_bytes`: it answers the driver's pointer attributes as device
    memory for all it places), else by the driver's memory type."""
    if t2_bytes is not None:
        in_t2 = t2_bytes(ptr, size)
        return {"host": in_t2, "vram": size - in_t2}
    return {pointer_placement(driver, ptr): size}


def bytes_by_placement(args, shape, model, names, target, driver, on_gpu):
    """Where the weights live ({place: bytes}) and the bytes a token reads from each
    place: every weight once, except the embedding table, of which one row is read;
    plus the KV cache at the mean context (in VRAM, as the bound assumes)."""
    placement_bytes = {}
    per_token = {}
    t2_bytes = shim_t2_bytes() if on_gpu else None
    for name in names:
        module_name, _, attr = name.rpartition(".")
        param = getattr(model.get_submodule(module_name), attr)
        size = param.numel() * BF16_BYTES
        if on_gpu and target(name).type != "cpu":
            parts = placed_parts(param.data_ptr(), size, t2_bytes, driver)
        else:
            parts = {"cpu": size}
        embedding = name.endswith("embed_tokens.weight")
        for where, part in parts.items():
            if not part:
                continue
            placement_bytes[where] = placement_bytes.get(where, 0) + part
            read = shape["hidden_size"] * BF16_BYTES * part // size if embedding else part
            per_token[where] = per_token.get(where, 0) + read
    mean_context = args.prompt + args.new_tokens / 2
    kv_bytes = int(2 * shape["num_hidden_layers"] * mean_context * kv_width(shape) * BF16_BYTES)
    vram_key = "vram" if on_gpu else "cpu"
    per_token[vram_key] = per_token.get(vram_key, 0) + kv_bytes
    return placement_bytes, per_token


def sync(on_gpu):
    if on_gpu:
        import torch

        torch.cuda.synchronize()


class Clock:
    """CUDA events on the GPU, perf_counter on the CPU."""

    def __init__(self, on_gpu):
        self.on_gpu = on_gpu
        self.marks = []

    def mark(self):
        if self.on_gpu:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def seconds(self):
        sync(self.on_gpu)
        if self.on_gpu:
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def generate_loop(forward, prompt, clock, new_tokens, max_seconds):
    """The bench's decode loop: the prefill, then greedy steps, a clock mark after each;
    stops after max_seconds of decoding (0: never). The tokens and the KV cache."""
    import torch

    clock.mark()
    token, cache = forward(prompt)
    clock.mark()
    tokens = [token]
    decode_started = time.perf_counter()
    for _ in range(new_tokens - 1):
        token, cache = forward(token, cache)
        tokens.append(token)
        clock.mark()
        if max_seconds and time.perf_counter() - decode_started > max_seconds:
            break
    return [int(t) for t in torch.cat(tokens, dim=1)[0].tolist()], cache


def generate_hf(model, prompt, clock, new_tokens, max_seconds=0):
    """transformers' generate, greedy, a clock mark per token from a logits processor;
    a stopping criterion ends it after max_seconds (0: never). The tokens and the cache."""
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

    class MarkEachToken(LogitsProcessor):
        def __call__(self, input_ids, scores):
            clock.mark()
            return scores

    class Deadline(StoppingCriteria):
        def __init__(self):
            self.started = None

        def __call__(self, input_ids, scores, **kwargs):
            self.started = self.started or time.perf_counter()
            over = bool(max_seconds) and time.perf_counter() - self.started > max_seconds
            return torch.full((input_ids.shape[0],), over, dtype=torch.bool, device=input_ids.device)

    clock.mark()
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                         do_sample=False, logits_processor=LogitsProcessorList([MarkEachToken()]),
                         stopping_criteria=StoppingCriteriaList([Deadline()]), return_dict_in_generate=True)
    return [int(t) for t in out.sequences[0, prompt.shape[1]:].tolist()], out.past_key_values


def warm_up(forward, prompt, on_gpu):
    """At the timed shapes: the full prompt (the first 512-row GEMMs load kernels and
    pick cuBLAS algorithms) and two decode steps."""
    token, cache = forward(prompt)
    for _ in range(2):
        token, cache = forward(token, cache)
    del cache
    sync(on_gpu)


def two_passes(generate, args, on_gpu):
    """Two passes over the same tokens; the second is timed. The first (cold) meets
    every key length for the first time, and PyTorch's cuDNN attention works on the CPU
    for each new one (on the H200 ~60 ms a token for generate all in VRAM: 82 against
    20 ms): a one-time cost per shape, like the prompt's first GEMMs, so the cold pass
    is the rest of the warm-up; its rate is reported beside. Returns the cold pass's
    times, the timed pass's tokens, times and KV cache, and whether both gave the same
    tokens."""
    cold_clock = Clock(on_gpu)
    cold_tokens, cache = generate(cold_clock, args.new_tokens, args.max_seconds)
    cold_times = cold_clock.seconds()
    del cache
    clock = Clock(on_gpu)
    tokens, cache = generate(clock, len(cold_tokens), 0)
    return cold_times, tokens, clock.seconds(), cache, tokens == cold_tokens


def kv_cache_placement(cache, driver, on_gpu):
    """Where the KV cache ended up ({place: bytes}; the bound assumes VRAM): the shim's
    placement rule can send large activation and cache blocks to T2 once the budget is
    spent."""
    import torch

    kv_placement = {}
    t2_bytes = shim_t2_bytes() if on_gpu else None
    for layer in getattr(cache, "layers", []):
        for tensor in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(tensor, torch.Tensor) and tensor.numel():
                size = tensor.numel() * tensor.element_size()
                parts = placed_parts(tensor.data_ptr(), size, t2_bytes, driver) if on_gpu else {"cpu": size}
                for where, part in parts.items():
                    if part:
                        kv_placement[where] = kv_placement.get(where, 0) + part
    return kv_placement


def more_prefills(forward, prompt, count, on_gpu):
    """`count` prefills, each alone and, as the passes' own, with no KV cache held: under
    a budget, PyTorch reuses the freed cache's blocks for the next prefill's activations,
    and where the shim placed them (T2 for some, 2026-12-02) matters. Their times."""
    seconds = []
    for _ in range(count):
        sync(on_gpu)
        clock = Clock(on_gpu)
        clock.mark()
        forward(prompt)
        clock.mark()
        seconds += clock.seconds()
    return seconds


def profile_run(args, model, forward, prompt, on_gpu):
    """--profile: where one prefill's and one decode step's GPU time went, the GPU's
    idle gaps in GAP_STEPS decode steps and in a prefill, and for --generate hf those of
    generate's decode tokens. An error is recorded, never raised: the profile explains
    figures; it never costs them."""
    def hf(new_tokens):
        return lambda: generate_hf(model, prompt, Clock(on_gpu), new_tokens)

    try:
        profile = gpu_profile.gpu_time_breakdown(forward, prompt)
        profile["decode_gaps"] = decode_gaps(forward, prompt)
        profile["prefill_gaps"] = gpu_timeline.profile_gaps(lambda: forward(prompt), 1)
        if args.generate == "hf":
            profile["hf_generate_4_tokens"] = gpu_profile.cpu_breakdown(hf(4))
            # generate always prefills first: its decode tokens' idle time is that
            # of 1 + GAP_STEPS tokens less that of the first token alone.
            first = gpu_timeline.profile_gaps(hf(1), 1)
            whole = gpu_timeline.profile_gaps(hf(1 + GAP_STEPS), 1 + GAP_STEPS)
            profile["hf_generate_gaps"] = {"whole": whole,
                                           "decode_tokens": gpu_timeline.without(whole, first, GAP_STEPS)}
    except Exception as error:
        profile = {"error": f"{type(error).__name__}: {error}"[:300]}
    return profile


def uvm_peaks(uvm_lib):
    """uvm_alloc.so's peaks: VRAM (its pool) and managed memory, in bytes."""
    lib = ctypes.CDLL(uvm_lib)
    vram_peak, managed_peak = ctypes.c_size_t(0), ctypes.c_size_t(0)
    lib.uvm_stats(ctypes.byref(vram_peak), ctypes.byref(managed_peak))
    return {"uvm_vram_peak_bytes": vram_peak.value, "uvm_managed_peak_bytes": managed_peak.value}


def main():
    args = parse_args()
    shape = shape_of(args.shape, args.layers)
    if args.weight_bytes:
        print(weight_count(shape) * BF16_BYTES)
        return 0

    started = time.perf_counter()
    uses_uvm_allocator = use_uvm_allocator(args)
    import torch
    import transformers

    on_gpu = args.device == "cuda"
    if args.no_cudnn_attention:
        torch.backends.cuda.enable_cudnn_sdp(False)
    device = torch.device(args.device)
    model, names, device_map, target = load_model(args, shape, device)
    driver = ctypes.CDLL("libcuda.so.1") if on_gpu else None
    placement_bytes, per_token = bytes_by_placement(args, shape, model, names, target, driver, on_gpu)

    prompt = torch.randint(0, shape["vocab_size"], (1, args.prompt),
                           generator=torch.Generator().manual_seed(args.seed)).to(device)
    forward = greedy_step(model)
    generate = functools.partial(generate_loop, forward, prompt)
    if args.generate == "hf":
        # No end-of-sequence token: every run generates the same number of tokens.
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0
        generate = functools.partial(generate_hf, model, prompt)

    with torch.inference_mode():
        warm_up(forward, prompt, on_gpu)
        setup_s = time.perf_counter() - started
        cold_times, tokens, times, cache, repeat_matches = two_passes(generate, args, on_gpu)
        kv_placement = kv_cache_placement(cache, driver, on_gpu)
        del cache
        prefills = [cold_times[0], times[0]]
        prefills += more_prefills(forward, prompt, max(args.prefill_repeats, 2) - 2, on_gpu)
        profile = profile_run(args, model, forward, prompt, on_gpu) if args.profile and on_gpu else None

    prefill_s = sorted(prefills)[len(prefills) // 2]
    steps = times[1:]
    median_step = statistics.median(steps)
    result = {
        "cmd": "decode",
        "config": args.config,
        "generate": args.generate,
        "shape": args.shape,
        "layers": shape["num_hidden_layers"],
        "weight_bytes": weight_count(shape) * BF16_BYTES,
        "budget_bytes": args.budget_bytes,
        "prompt_tokens": args.prompt,
        "new_tokens": len(tokens),
        "same_tokens_when_repeated": repeat_matches,
        "cold_decode_step_ms_median": statistics.median(cold_times[1:]) * 1e3,
        "prefill_s": prefill_s,
        "prefill_s_each": prefills,
        "prefill_tok_s": args.prompt / prefill_s,
        "decode_step_ms_median": median_step * 1e3,
        "decode_tok_s": 1.0 / median_step,
        "decode_tok_s_mean": len(steps) / sum(steps),
        "weights_by_placement": placement_bytes,
        "bytes_per_token_by_placement": per_token,
        "kv_cache_by_placement": kv_placement,
        "shim_loaded": shim_loaded(),
        "profile": profile,
        "setup_s": setup_s,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokens": tokens,
    }
    if uses_uvm_allocator:
        result.update(uvm_peaks(args.uvm_lib))
    if device_map is not None:
        result["device_map_cpu_modules"] = sum(1 for v in device_map.values() if v == "cpu")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
