"""The GPU suite's long-prompt check (tests/gpu/run.sh, section "longctx"; issue 34): an HF
transformers `generate` of an 8B-shape model cut to a few layers (bench/longctx.py, random
bf16 weights, deterministic algorithms) with a long prompt, first on the free GPU without the
shim, then under the shim at its defaults beside a foreign process (a balloon of plain
cudaMalloc memory, without the shim) that leaves the weights and 2 GiB free: the weights fit
where the prompt's working set does not, as in `make bench`'s longctx section at 8B. A
second foreign process allocates and frees 64 MiB over and over meanwhile: what the shim
demotes to make room leaves the driver chunks that free VRAM does not show, and another
program must still get its memory.

  python3 tests/gpu/longctx_check.py      (run.sh runs it under the shim)

  longctx.completed   the run beside the foreign process ended without an error
  longctx.tokens      its generated tokens are the free GPU's
  longctx.neighbour_allocates  none of the allocating process's allocations failed
  KV longctx.*        prefill seconds of both runs and their ratio, decode tokens/s: figures,
                      not verdicts (a benchmark is not a timed test; bench/longctx.py is the
                      benchmark)

Output: PASS/FAIL/KV lines; exit status 1 when anything failed. The harness (balloon,
roles in processes of their own, timeouts) is tiering_swap.py's.
"""

import json
import os
import sys

import tiering_swap as harness
from gbgpu.foreign import AllocatorBeside
from gbgpu.verdicts import kv

TOKENS = 8192
LAYERS = 8
MODE = "dynamic"
GIB = 1 << 30
BEYOND_WEIGHTS_GIB = 2.0   # what the balloon leaves beside the weights
ALLOCATOR_MIB = 64         # what the other foreign process allocates and frees, over and over
BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")


def generate_args():
    return ["--tokens", str(TOKENS), "--layers", str(LAYERS), "--modes", MODE]


def results(run):
    """bench/longctx.py's mode record and its closing line, from a run's output."""
    record, closing = None, None
    for line in run.out.splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if data.get("mode") == MODE:
            record = data
        elif "modes" in data:
            closing = data
    return record, closing


def check_long_prompt(free_run):
    """Both runs: the free GPU's (given), then the shim's beside a balloon."""
    free, closing = results(free_run)
    names = ("longctx.completed", "longctx.tokens", "longctx.neighbour_allocates")
    if not free or "error" in free or not closing:
        harness.fail_all(names, f"the free GPU's run gave no result: {free or free_run.why()}")
        return
    kv("longctx.weight_bytes", closing["weight_bytes"])
    kv("longctx.prefill_free_s", free["prefill_s"])
    leave = closing["weight_bytes"] / GIB + BEYOND_WEIGHTS_GIB
    foreign = harness.Balloon(round(leave, 2))
    try:
        why = foreign.ensure()
        if why:
            harness.fail_all(names, why)
            return
        with AllocatorBeside(ALLOCATOR_MIB) as allocator:
            if not allocator.started:
                harness.fail_all(names, "the allocating process (gbgpu.foreign, without the shim) did not start")
                return
            shim_run = harness.run_role("generate", env={}, timeout=240, label="generate_beside_balloon")
    finally:
        foreign.kill()
    kv("longctx.allocator.allocations", allocator.tries)
    kv("longctx.allocator.failed", allocator.failed)
    kv("longctx.allocator.slowest_ms", allocator.slowest_ms)
    harness.say("longctx.neighbour_allocates", allocator.failed == 0 and bool(allocator.tries),
                f"another process allocated {ALLOCATOR_MIB} MiB {allocator.tries} times beside the prompt: "
                f"{allocator.failed} failed, the slowest took {allocator.slowest_ms} ms (want none failed)")
    ours, _ = results(shim_run)
    if not ours or "error" in ours:
        harness.fail_all(names[:2], f"beside the foreign process: {(ours or {}).get('error') or shim_run.why()}")
        return
    harness.say("longctx.completed", True, f"{TOKENS}-token prompt, {LAYERS} layers, {MODE} cache, "
                f"beside a process leaving {leave:.2f} GiB")
    kv("longctx.prefill_shim_s", ours["prefill_s"])
    kv("longctx.prefill_vs_free", round(ours["prefill_s"] / free["prefill_s"], 3) if free["prefill_s"] else "")
    kv("longctx.decode_free_tok_s", free["decode_tok_s"])
    kv("longctx.decode_shim_tok_s", ours["decode_tok_s"])
    same = ours["ids"] == free["ids"]
    harness.say("longctx.tokens", same, f"{len(ours['ids'])} tokens "
                + ("identical to the free GPU's" if same else f"differ: {ours['ids']} against {free['ids']}"))


def role(name, args):
    harness.die_with_parent()
    if name == "balloon":
        return harness.balloon(float(args[0]))
    if name != "generate":
        raise SystemExit(f"unknown role {name}")
    sys.path.insert(0, BENCH)
    import longctx

    sys.argv = ["longctx.py", *generate_args()]
    longctx.main()
    sys.stdout.flush()


def both_runs():
    # The free GPU first, without the shim (an empty LD_PRELOAD preloads nothing).
    free_run = harness.run_role("generate", env={"LD_PRELOAD": ""}, timeout=180, label="generate_free")
    check_long_prompt(free_run)


def main():
    harness.program(__file__, "longctx", role, both_runs)


if __name__ == "__main__":
    main()
