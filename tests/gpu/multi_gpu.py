"""The GPU suite's several-GPU program (tests/gpu/shared.sh): torch.distributed with NCCL,
one process per visible GPU (one on a one-GPU machine: NCCL still builds its
communicator and allocates its own buffers, through cuMemCreate, under the shim).

usage: multi_gpu.py NAME GIB

Each rank holds GIB in 1 GiB float32 tensors with known contents (under a budget some
land in T2: the placement of each is checked with the shim's greenboost_shim_t2_bytes),
all-reduces every one of them and checks the sums; with two GPUs or more it also copies
a T2 tensor to the next GPU and checks it (peer access), and asks cudaIpcGetMemHandle
for a T2 tensor's handle, recording CUDA's own answer for host memory.
Prints PASS/FAIL NAME.rankN.* and KV lines.
"""

import ctypes
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from torch_check import Driver

GIB = 1 << 30


def verdict(ok, name, why):
    print(f"{'PASS' if ok else 'FAIL'} {name}: {why}", flush=True)
    return ok


def ipc_answer(ptr):
    """cudaIpcGetMemHandle's status for ptr, from the runtime PyTorch loaded."""
    runtime = None
    for soname in ("libcudart.so.13", "libcudart.so.12"):
        try:
            runtime = ctypes.CDLL(soname, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            break
        except OSError:
            continue
    if runtime is None:
        return "no runtime"
    handle = ctypes.create_string_buffer(64)
    runtime.cudaIpcGetMemHandle.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    status = runtime.cudaIpcGetMemHandle(handle, ctypes.c_void_p(ptr))
    # An error stays the thread's last error, which PyTorch's next kernel-launch check
    # would report as its own: read it back here.
    runtime.cudaGetLastError()
    return status


def rank_main(rank, world, name, gib, rendezvous):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    prefix = f"{name}.rank{rank}"
    driver = Driver()
    tensors = [torch.full((GIB // 4,), float(rank + 1 + index), device=f"cuda:{rank}") for index in range(int(gib))]
    torch.cuda.synchronize()
    places = [driver.placement(t) for t in tensors]
    print(f"KV {prefix}.placement={','.join(places)}", flush=True)
    verdict("t2" in places, f"{prefix}.some_in_t2", f"placement {places}")
    for tensor in tensors:
        dist.all_reduce(tensor)
    torch.cuda.synchronize()
    ranks_sum = world * (world + 1) / 2
    wrong = [i for i, t in enumerate(tensors) if not bool((t == ranks_sum + world * i).all())]
    verdict(not wrong, f"{prefix}.all_reduce", f"{len(tensors)} GiB all-reduced over {world} GPU(s), wrong {wrong[:5]}")
    t2 = next((t for t, place in zip(tensors, places) if place == "t2"), None)
    if t2 is not None and world > 1:
        peer = (rank + 1) % world
        copied = t2.to(f"cuda:{peer}")
        torch.cuda.synchronize()
        verdict(bool((copied.cpu() == t2.cpu()).all()), f"{prefix}.peer_copy", f"T2 tensor copied to cuda:{peer}")
    if t2 is not None:
        print(f"KV {prefix}.ipc_get_mem_handle_on_t2={ipc_answer(t2.data_ptr())}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main():
    name, gib = sys.argv[1], float(sys.argv[2])
    world = torch.cuda.device_count()
    print(f"KV {name}.gpus={world}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(rank_main, args=(world, name, gib, os.path.join(folder, "rendezvous")), nprocs=world, join=True)


if __name__ == "__main__":
    main()
