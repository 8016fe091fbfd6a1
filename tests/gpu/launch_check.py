"""Launch observation on the GPU (tests/gpu/run.sh runs it under the shim): for each kind
of work, the kernel launches the shim counted must equal the kernels a profiler run of
the same work recorded (torch.profiler through CUPTI, in the same process: the shim
takes no CUPTI subscription), and the launches must name the tensors they work on.

  eager     elementwise and reduction kernels of PyTorch eager mode
  cublas    bf16 and float32 matrix products (cuBLAS / cuBLASLt kernels)
  sdpa      scaled_dot_product_attention (flash, memory-efficient and cuDNN backends)
  graph     a CUDA graph captured once and replayed (graph launches count their kernels)

Prints `PASS name: ...` / `FAIL name: ...` and `KV key=value`; exits 1 when anything failed.
"""

import argparse
import sys

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from gbgpu.shim_exports import Shim
from gbgpu.verdicts import COUNTS, kv, record



def profiled_kernels(prof):
    """Kernels the profiler recorded on the device (copies and memsets are not kernels)."""
    return sum(
        1
        for event in prof.events()
        if event.device_type == torch.autograd.DeviceType.CUDA and not event.name.startswith(("Memcpy", "Memset"))
    )


def eager_work(x, y):
    for _ in range(20):
        z = torch.relu(x * y + 1.0)
        z = z.softmax(dim=-1)
        y = y + z.sum(dim=0, keepdim=True)
    return y


def cublas_work(a, b, a32, b32):
    out = None
    for _ in range(10):
        out = a @ b
        out32 = a32 @ b32
    return out, out32


def sdpa_work(q, k, v):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    outs = []
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        try:
            with sdpa_kernel(backend):
                outs.append(F.scaled_dot_product_attention(q, k, v, is_causal=True))
        except RuntimeError as error:  # a backend this build or device lacks
            print(f"sdpa backend {backend} unavailable: {error}", flush=True)
    return outs


def check(shim, name, work, *tensors):
    """Runs `work` once to warm up (lazy module loads, cuBLAS handles), then under the
    profiler, and compares the shim's launch count over the profiled run with the
    profiler's kernels; the tensors given must be named by launches."""
    work()
    torch.cuda.synchronize()
    before = shim.stats()
    named_before = [shim.launches_naming(t) for t in tensors]
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        work()
        torch.cuda.synchronize()
    after = shim.stats()
    counted = after.launches - before.launches
    unread = after.launches_unread - before.launches_unread
    profiled = profiled_kernels(prof)
    kv(f"{name}.launches_shim", counted)
    kv(f"{name}.launches_profiler", profiled)
    kv(f"{name}.launches_unread", unread)
    kv(f"{name}.graph_launches", after.graph_launches - before.graph_launches)
    record(f"{name}.coverage", counted == profiled and profiled > 0,
           f"the shim counted {counted} kernel launches, the profiler {profiled} ({unread} not fully read)")
    named = [shim.launches_naming(t) - n for t, n in zip(tensors, named_before)]
    record(f"{name}.named", all(n > 0 for n in named), f"launches naming each input tensor: {named}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--label", default="launch")
    args = parser.parse_args()
    shim = Shim()
    if not shim.has_launches():
        record(f"{args.label}.shim", False, "the shim's launch counters are not in this process (not preloaded?)")
        return 1
    torch.manual_seed(0)
    dev = "cuda"
    x = torch.randn(512, 4096, device=dev)
    y = torch.randn(1, 4096, device=dev)
    check(shim, f"{args.label}.eager", lambda: eager_work(x, y), x)
    a = torch.randn(2048, 4096, device=dev, dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)
    a32, b32 = a.float(), b.float()
    check(shim, f"{args.label}.cublas", lambda: cublas_work(a, b, a32, b32), a, b, a32)
    q, k, v = (torch.randn(2, 16, 2048, 128, device=dev, dtype=torch.bfloat16) for _ in range(3))
    check(shim, f"{args.label}.sdpa", lambda: sdpa_work(q, k, v), q, k, v)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).to(dev)
    static_in = torch.randn(64, 1024, device=dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(static_in)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = model(static_in)
    replays = 25

    def replay():
        for _ in range(replays):
            graph.replay()

    check(shim, f"{args.label}.graph", replay, static_in, static_out)
    return 1 if COUNTS["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
