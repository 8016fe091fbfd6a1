"""Which CUDA calls a shim makes slower in a real program (issue 35's
`launch_generate_vs_plain`): transformers' `generate` at batch 1 with every weight in
VRAM (decode.py's model, CPU-bound: it launches kernels as fast as Python lets it),
then the same tokens under torch.profiler with CUDA activity on, whose CUPTI events time
each runtime and driver API call on the CPU (a shim's hooks run inside them). Prints one
JSON line: wall time per token unprofiled, and per API name the calls and CPU
microseconds per token. Run it once plain and once with the shim preloaded, in the same
call, and compare name by name.

  python3 bench/probes/api_cost_probe.py [LAYERS [NEW_TOKENS]]   (defaults 8 and 64)
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from llama_model import SHAPES, draw_weights, meta_llama, shape_of  # noqa: E402

PROMPT = 128


def generate(model, prompt, new_tokens):
    import torch

    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                         min_new_tokens=new_tokens, do_sample=False)
    torch.cuda.synchronize()
    return out


def api_calls(prof, tokens):
    """Per runtime or driver API name (CUPTI's CPU events, named cuda*/cu*): calls and
    CPU microseconds per token, heaviest first."""
    rows = []
    for event in prof.key_averages():
        name = event.key
        if not name.startswith("cu") or name.startswith("cutlass"):
            continue
        rows.append({"name": name, "calls_per_token": round(event.count / tokens, 2),
                     "us_per_token": round(event.cpu_time_total / tokens, 1),
                     "us_per_call": round(event.cpu_time_total / max(event.count, 1), 3)})
    rows.sort(key=lambda row: -row["us_per_token"])
    return rows


def main():
    import torch
    from torch.profiler import ProfilerActivity, profile

    layers = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    new_tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    shape = shape_of("8b", layers)
    model, _ = meta_llama(shape)
    draw_weights(model, torch.device("cuda"), 1234)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    prompt = torch.randint(0, SHAPES["8b"]["vocab_size"], (1, PROMPT),
                           generator=torch.Generator().manual_seed(1234)).to("cuda")
    out = {"shim": bool(os.environ.get("LD_PRELOAD")), "layers": layers, "new_tokens": new_tokens}
    with torch.inference_mode():
        generate(model, prompt, new_tokens)  # warm: kernels loaded, algorithms picked
        walls = []
        for _ in range(3):
            started = time.perf_counter()
            generate(model, prompt, new_tokens)
            walls.append((time.perf_counter() - started) * 1e3 / new_tokens)
        out["wall_ms_per_token"] = [round(w, 3) for w in walls]
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            generate(model, prompt, new_tokens)
    calls = api_calls(prof, new_tokens)
    out["api_us_per_token"] = round(sum(row["us_per_token"] for row in calls), 1)
    out["api"] = calls[:25]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
