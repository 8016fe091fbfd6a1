"""The GPU suite's shared-GPU programs (tests/gpu/run.sh, section "shared GPU").

One program, several roles (first argument):
  measure              what the context, cuBLAS/cuBLASLt handles and workspaces, and a
                       cuDNN handle take on the device (nvml), as KV lines: the measurement
                       behind the default VRAM headroom
  generate NAME        HF transformers greedy generate of a LLaMA-shaped model (random
                       weights, fixed seed, deterministic algorithms): prints the tokens'
                       digest as KV NAME.tokens and PASS NAME.generate
  hold NAME GIB        holds GIB in 1 GiB tensors with known contents, multiplies matrices
                       with them, verifies every tensor: PASS/FAIL NAME.hold (PyTorch's
                       caching allocator; PYTORCH_CUDA_ALLOC_CONF picks its segments)
  cupy NAME GIB POOL   the same through CuPy with POOL = default (its MemoryPool over
                       cudaMalloc) or async (MemoryAsyncPool: cudaMallocAsync)
  sampler FILE         writes the device's free VRAM (MiB, nvml) every 50 ms to FILE until
                       killed, a reading a line: `UNIX_SECONDS FREE_MIB` (gbgpu.free_vram's
                       sample, which reads the files too)
Output lines: PASS name: why / FAIL name: why / KV key=value. The foreign process the
section runs beside is gbgpu.foreign's balloon (`python3 -m gbgpu.foreign balloon`).
"""

import hashlib
import os
import sys
import time

GIB = 1 << 30
MIB = 1 << 20


def kv(key, value):
    print(f"KV {key}={value}", flush=True)


def verdict(ok, name, why):
    print(f"{'PASS' if ok else 'FAIL'} {name}: {why}", flush=True)
    return ok


def nvml_used():
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    return pynvml.nvmlDeviceGetMemoryInfo(handle).used


def measure():
    """Device memory each part of a CUDA program takes that the shim never sees."""
    import torch

    steps = [("before", nvml_used())]
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    steps.append(("context", nvml_used()))
    a = torch.randn(4096, 4096, device="cuda")
    (a @ a).sum().item()
    steps.append(("cublas_fp32", nvml_used()))
    b = a.to(torch.bfloat16)
    (b @ b).sum().item()
    torch.nn.functional.linear(b, b, torch.zeros(4096, device="cuda", dtype=torch.bfloat16)).sum().item()
    steps.append(("cublaslt_bf16", nvml_used()))
    conv = torch.nn.Conv2d(64, 64, 3).cuda()
    conv(torch.randn(8, 64, 64, 64, device="cuda")).sum().item()
    steps.append(("cudnn", nvml_used()))
    previous = steps[0][1]
    for name, used in steps[1:]:
        kv(f"shared.measure.{name}_mib", (used - previous) // MIB)
        previous = used
    kv("shared.measure.total_mib", (steps[-1][1] - steps[0][1]) // MIB)
    kv("shared.measure.torch_allocated_mib", torch.cuda.memory_allocated() // MIB)
    kv("shared.measure.torch_reserved_mib", torch.cuda.memory_reserved() // MIB)
    verdict(True, "shared.measure", "measured")


def generate(name):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1234)
    torch.use_deterministic_algorithms(True)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    layers = int(os.environ.get("GB_SHARED_LAYERS", "24"))
    config = LlamaConfig(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=layers,
        num_attention_heads=16,
        num_key_value_heads=8,
        vocab_size=32000,
        max_position_embeddings=1024,
    )
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("cuda"):
        model = LlamaForCausalLM(config)
    model.eval()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    kv(f"{name}.weights_mib", weights // MIB)
    prompt = torch.randint(0, config.vocab_size, (1, 128), generator=torch.Generator().manual_seed(7)).cuda()
    with torch.no_grad():
        started = time.time()
        out = model.generate(prompt, max_new_tokens=32, do_sample=False, min_new_tokens=32)
        torch.cuda.synchronize()
        seconds = time.time() - started
    tokens = out[0, prompt.shape[1]:].tolist()
    kv(f"{name}.tokens", hashlib.sha256(str(tokens).encode()).hexdigest()[:16])
    kv(f"{name}.generate_s", f"{seconds:.2f}")
    verdict(len(tokens) == 32, f"{name}.generate", f"{len(tokens)} tokens in {seconds:.1f} s, weights {weights // MIB} MiB")


def hold(name, gib):
    import torch

    blocks = []
    for index in range(int(gib)):
        block = torch.empty(GIB // 2, dtype=torch.bfloat16, device="cuda")
        block.fill_(float(index % 97 + 1))
        blocks.append(block)
        time.sleep(float(os.environ.get("GB_SHARED_STEP_S", "0")))
    torch.cuda.synchronize()
    kv(f"{name}.held_gib", len(blocks))
    a = blocks[0][: 2048 * 2048].view(2048, 2048)
    product = (a @ blocks[-1][: 2048 * 2048].view(2048, 2048)).float()
    expected = 2048.0 * float(0 % 97 + 1) * float((len(blocks) - 1) % 97 + 1)
    ok = bool(torch.allclose(product, torch.full_like(product, expected), rtol=1e-2))
    bad = [i for i, block in enumerate(blocks) if not bool((block == float(i % 97 + 1)).all())]
    verdict(ok and not bad, f"{name}.hold", f"{len(blocks)} GiB held and verified, matmul {'right' if ok else 'wrong'}, bad tensors {bad[:5]}")
    time.sleep(float(os.environ.get("GB_SHARED_HOLD_S", "5")))


def cupy_hold(name, gib, pool):
    import cupy

    if pool == "async":
        cupy.cuda.set_allocator(cupy.cuda.MemoryAsyncPool().malloc)
    elif pool != "default":
        raise SystemExit(f"unknown CuPy pool {pool}")
    blocks = []
    for index in range(int(gib)):
        blocks.append(cupy.full((GIB // 4,), float(index % 97 + 1), dtype=cupy.float32))
        time.sleep(float(os.environ.get("GB_SHARED_STEP_S", "0")))
    cupy.cuda.Device().synchronize()
    kv(f"{name}.held_gib", len(blocks))
    if pool == "default":
        kv(f"{name}.pool_total_mib", cupy.get_default_memory_pool().total_bytes() // MIB)
    a = blocks[0][: 1024 * 1024].reshape(1024, 1024)
    product = a @ blocks[-1][: 1024 * 1024].reshape(1024, 1024)
    expected = 1024.0 * 1.0 * float((len(blocks) - 1) % 97 + 1)
    ok = bool(cupy.allclose(product, expected, rtol=1e-3))
    bad = [i for i, block in enumerate(blocks) if not bool((block == float(i % 97 + 1)).all())]
    verdict(ok and not bad, f"{name}.cupy", f"{len(blocks)} GiB in the {pool} pool held and verified, matmul {'right' if ok else 'wrong'}, bad arrays {bad[:5]}")


def main():
    role, args = sys.argv[1], sys.argv[2:]
    if role == "measure":
        measure()
    elif role == "generate":
        generate(args[0])
    elif role == "hold":
        hold(args[0], float(args[1]))
    elif role == "cupy":
        cupy_hold(args[0], float(args[1]), args[2])
    elif role == "sampler":
        from gbgpu.free_vram import sample

        sample(args[0])
    else:
        raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    main()
