"""Issue 13: where does pipelined staging (GREENBOOST_STAGE_SLICES) pay?

Four bf16 weights of 14336 x 4096 (117 MB each, an 8B model's MLP shape) allocated before
the first product, so that under the shim with a budget whose reserve is all of it they
land in T2; then products of 512 to 8192 tokens against each, timed with CUDA events
(after a warm-up round, in which a sliced shape is verified). Run once per setting, each
in its own process, and compare:
  GREENBOOST_STAGE_SLICES=1 LD_PRELOAD=... python3 bench/probes/slice_probe.py
  GREENBOOST_STAGE_SLICES=4 LD_PRELOAD=... python3 bench/probes/slice_probe.py
(bench/README.md gives the environment). Prints `KV tokens.<n>.ms_per_product=...` and a
hash of every output (equal hashes: bit-identical results).
"""

import hashlib
import os

import torch

WIDTH, FFN, WEIGHTS, ROUNDS = 4096, 14336, 4, 5


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator().manual_seed(7)
    weights = [(torch.randn(FFN, WIDTH, generator=gen) * 0.02).to(torch.bfloat16).cuda() for _ in range(WEIGHTS)]
    torch.ones(8, 8, device="cuda") @ torch.ones(8, 8, device="cuda")
    print(f"KV slices={os.environ.get('GREENBOOST_STAGE_SLICES', 'default')}", flush=True)
    digest = hashlib.sha256()
    for tokens in (512, 2048, 8192):
        x = torch.randn(tokens, WIDTH, generator=gen).to(torch.bfloat16).cuda()
        for w in weights:  # warm-up: kernels loaded, sliced shapes verified
            torch.nn.functional.linear(x, w)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(ROUNDS):
            for w in weights:
                y = torch.nn.functional.linear(x, w)
        end.record()
        torch.cuda.synchronize()
        digest.update(y.cpu().view(torch.int16).numpy().tobytes())
        print(f"KV tokens.{tokens}.ms_per_product={start.elapsed_time(end) / (ROUNDS * WEIGHTS):.3f}", flush=True)
        del x, y
    print(f"KV output_sha256={digest.hexdigest()[:16]}", flush=True)


if __name__ == "__main__":
    main()
