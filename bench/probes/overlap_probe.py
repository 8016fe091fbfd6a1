"""Issue 13: does a host-to-device copy slow down while GEMMs run beside it?

With a staging prefetch (tried, since removed) the staging copies of a prefill took 161 ms of copy-engine
time instead of 137 ms in series with the products. This measures the pinned
host-to-device copy rate of 256 MiB blocks alone, beside a stream of bf16 GEMMs of a
prefill's shape (512 x 4096 by 4096 x 14336), and beside another copy. Run without the
shim:
  python3 bench/probes/overlap_probe.py
Prints one JSON line.
"""

import json

import torch

MIB = 1 << 20


def copy_rate(src, dst, side, rounds=8):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(side):
        start.record()
        for _ in range(rounds):
            dst.copy_(src, non_blocking=True)
        end.record()
    end.synchronize()
    return rounds * src.numel() * src.element_size() / (start.elapsed_time(end) / 1e3) / 1e9


def main():
    block = 256 * MIB
    src = torch.empty(block, dtype=torch.uint8).pin_memory()
    dst = torch.empty(block, dtype=torch.uint8, device="cuda")
    other_src = torch.empty(block, dtype=torch.uint8).pin_memory()
    other_dst = torch.empty(block, dtype=torch.uint8, device="cuda")
    # Two streams of their own: a stream made by torch waits for the legacy default
    # stream, so neither side may use that.
    side, busy = torch.cuda.Stream(), torch.cuda.Stream()
    a = torch.randn(512, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 14336, device="cuda", dtype=torch.bfloat16)
    copy_rate(src, dst, side)  # warm-up
    torch.mm(a, b)
    alone = copy_rate(src, dst, side)

    def beside(work, count):
        """The copy rate while `count` of `work` (enqueued first, on their own stream,
        enough to outlast the copies) run, and how long they took."""
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(busy):
            start.record()
            for _ in range(count):
                work()
            end.record()
        rate = copy_rate(src, dst, side)
        end.synchronize()
        return rate, start.elapsed_time(end)

    with_gemm, gemm_ms = beside(lambda: torch.mm(a, b), 1500)
    with_copy, copy_ms = beside(lambda: other_dst.copy_(other_src, non_blocking=True), 12)
    print(json.dumps({"block_mib": block // MIB, "copy_alone_GBps": alone,
                      "copy_beside_gemms_GBps": with_gemm, "gemm_stream_ms": gemm_ms,
                      "copy_beside_another_copy_GBps": with_copy, "other_copy_stream_ms": copy_ms}))


if __name__ == "__main__":
    main()
