"""bench/tiering.py's decode role, run under the shim: transformers greedy `generate` of
bench/decode.py's model (Llama 3 8B shape, random bf16 weights drawn on the GPU), every
token timestamped by a stopping criterion, the foreign process (--kill-pid) killed at
token KILL_AT, and the window of WINDOW tokens from the first token AFTER_KILL_S after
the kill (with no foreign process, counted from token KILL_AT all the same), WINDOW_S
long and at least MIN_WINDOW tokens: decode under a CPU-bound client varies by a fourth
from one second to the next on the H200, so the window averages over many. Prints one
JSON line: window_tok_s, the tokens, the times after the kill, the shim's counters."""

import argparse
import json
import time

from gbgpu.foreign import kill_pid
from llama_model import draw_weights, meta_llama, shape_of
from tiering_shim import Shim

KILL_AT = 24          # the token at which the foreign process is killed
AFTER_KILL_S = 10.0   # the window starts at the first token this long after the kill
WINDOW_S = 20.0       # seconds in the window
MIN_WINDOW = 64       # and at least this many tokens
PROMPT = 128


def build_model(shape, seed):
    """bench/decode.py's model (llama_model.py): Llama from a config on the meta device,
    every weight drawn on the GPU from a generator seeded with the parameter's index."""
    import torch

    model, config = meta_llama(shape)
    draw_weights(model, torch.device("cuda"), seed)
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

    torch.backends.cuda.enable_cudnn_sdp(False)
    shim = Shim()
    model, config = build_model(shape_of("8b", opts.layers), 1234)
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
                    if (self.window_start is not None and len(self.times) - 1 - self.window_start >= MIN_WINDOW
                            and now - self.times[self.window_start] >= WINDOW_S):
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
    if w is not None and len(times) - 1 - w >= MIN_WINDOW:
        result["window_tok_s"] = (len(times) - 1 - w) / (times[-1] - times[w])
        result["window_tokens"] = len(times) - 1 - w
        result["window_from_s"] = times[w] - clock.kill_time
    print(json.dumps(result), flush=True)
