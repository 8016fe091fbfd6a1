"""tests/gpu/tiering_swap.py's dlpack role (swap.dlpack.*), under the shim beside the balloon:
tensors the shim moved, handed from PyTorch to CuPy, from CuPy to JAX (DLPack, zero-copy
where the library allows) and to a Triton kernel, each library adding the same two
tensors; every result must equal PyTorch's own (float32 adds: exact in every library).

The moved tensors: 512 MiB float32 weights are loaded until the room is full; once the
program computes (one product), 512 MiB activations are allocated until make_room (or a
tick) has sent a weight placed in VRAM to T2. x is such a weight (in T2, moved), y an
activation in VRAM (movable). A library that cannot be imported is a failure with the
reason: the device has CuPy, JAX and Triton.

Verdicts: swap.dlpack.moved (a weight placed in VRAM went to T2 and its checksums are
unchanged), swap.dlpack.cupy, swap.dlpack.triton, swap.dlpack.jax (in that order: JAX,
the likeliest to fail at start, last)."""

import os

from gbgpu.verdicts import kv
from tiering_swap_roles import (MIB, block_sums, counters, figures, grown, load_until_t2, shim_here, start_torch,
                                verdict)

ELEMENTS = 128 << 20        # float32: 512 MiB, weights and activations alike
WEIGHTS_MOST = 16
ACTIVATIONS_MOST = 6


def role_dlpack():
    # Before JAX is imported: no 75% preallocation, XLA's allocations through cuMemAlloc.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    os.environ.setdefault("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")
    import torch

    shim = shim_here()
    start_torch()
    g = torch.Generator(device="cuda").manual_seed(7)
    nbytes = ELEMENTS * 4

    def make(_):
        return torch.empty(ELEMENTS, dtype=torch.float32, device="cuda").normal_(0.0, 1.0, generator=g)

    weights, placed = load_until_t2(shim, make, WEIGHTS_MOST)
    torch.cuda.synchronize()
    sums = [block_sums(w) for w in weights]
    a = torch.empty(256, 256, device="cuda").normal_(0.0, 1.0, generator=g)
    (a @ a).sum().item()  # cuBLAS: the program computes from here on
    start = counters(shim)

    def moved():
        return [i for i, w in enumerate(weights) if placed[i] == "vram" and shim.t2_bytes(w) == nbytes]

    acts = []
    for _ in range(ACTIVATIONS_MOST):
        acts.append(make(0))
        if moved() and any(shim.t2_bytes(t) == 0 for t in acts):
            break
    torch.cuda.synchronize()
    end = counters(shim)
    figures("swap.dlpack", grown(start, end))
    kv("swap.dlpack.weights", ",".join(placed))
    kv("swap.dlpack.activations", ",".join("vram" if shim.t2_bytes(t) == 0 else "t2" for t in acts))
    went = moved()
    index = went[0] if went else len(weights) - 1
    x = weights[index]
    in_vram = [t for t in acts if shim.t2_bytes(t) == 0]
    y = in_vram[-1] if in_vram else acts[-1]
    intact = torch.equal(block_sums(x), sums[index])
    changes = end["swaps"] + end["demotions"] + end["promotions"] - start["swaps"] - start["demotions"] - start["promotions"]
    where = (f"x: weight {index} of {len(weights)} (placed {placed[index]}, {shim.t2_bytes(x) // MIB} MiB in T2 now), "
             f"y: an activation {'in VRAM' if shim.t2_bytes(y) == 0 else 'in T2'}")
    verdict("swap.dlpack.moved", bool(went) and changes > 0 and intact,
            f"weights placed in VRAM and in T2 now: {went or 'none (the check tests less than it should)'}, "
            f"swaps+demotions+promotions +{changes}, x's checksums {'unchanged' if intact else 'CHANGED'}; {where}")
    want = x + y
    torch.cuda.synchronize()
    arrays = check_cupy(x, y, want, where)
    check_triton(x, y, want, where)
    check_jax(arrays if arrays is not None else (x, y), want, where, "CuPy" if arrays is not None else "PyTorch")


def failure(name, error, where):
    verdict(name, False, f"{type(error).__name__}: {str(error)[:400]}; {where}")


def check_cupy(x, y, want, where):
    """x and y to CuPy (zero-copy), added there; the arrays for JAX, or None."""
    import torch

    try:
        import cupy

        cx, cy = cupy.from_dlpack(x), cupy.from_dlpack(y)
        same = cx.data.ptr == x.data_ptr() and cy.data.ptr == y.data_ptr()
        cz = cx + cy
        cupy.cuda.runtime.deviceSynchronize()
        got = torch.from_dlpack(cz)
        equal = torch.equal(got, want)
        kv("swap.dlpack.cupy_zero_copy", same)
        verdict("swap.dlpack.cupy", equal and same, f"cupy.from_dlpack of x and y {'at' if same else 'NOT at'} the "
                f"tensors' addresses; CuPy's x + y {'equals' if equal else 'DIFFERS from'} PyTorch's; {where}")
        return cx, cy
    except Exception as error:  # the reason is the verdict
        failure("swap.dlpack.cupy", error, where)
        return None


def check_triton(x, y, want, where):
    import torch

    try:
        from tiering_swap_triton import add

        out = add(x, y, torch.empty_like(x))
        torch.cuda.synchronize()
        equal = torch.equal(out, want)
        verdict("swap.dlpack.triton", equal, f"a @triton.jit add over x and y {'equals' if equal else 'DIFFERS from'} "
                f"PyTorch's x + y; {where}")
    except Exception as error:  # the reason is the verdict
        failure("swap.dlpack.triton", error, where)


def to_jax(value):
    """A DLPack producer to a JAX array, by whichever form this JAX takes."""
    import jax
    import jax.numpy as jnp

    tries = [("jax.dlpack.from_dlpack", lambda: jax.dlpack.from_dlpack(value))]
    if hasattr(jnp, "from_dlpack"):
        tries.append(("jax.numpy.from_dlpack", lambda: jnp.from_dlpack(value)))
    if hasattr(value, "toDlpack"):
        tries.append(("a CuPy capsule", lambda: jax.dlpack.from_dlpack(value.toDlpack())))
    errors = []
    for how, attempt in tries:
        try:
            return attempt()
        except Exception as error:  # the next form; all their reasons if none works
            errors.append(f"{how}: {type(error).__name__}: {str(error)[:200]}")
    raise RuntimeError("; ".join(errors))


def from_jax(array):
    """A JAX array back to PyTorch on the GPU: DLPack, else through the host."""
    import numpy
    import torch

    try:
        return torch.from_dlpack(array), "DLPack"
    except Exception:  # an older JAX or PyTorch: the host copy is as good for comparing
        return torch.from_numpy(numpy.asarray(array)).to("cuda"), "host copy"


def check_jax(sources, want, where, via):
    import torch

    try:
        import jax

        backend = jax.default_backend()
        if backend not in ("gpu", "cuda"):
            raise RuntimeError(f"JAX's default backend is {backend}, not the GPU")
        jx, jy = to_jax(sources[0]), to_jax(sources[1])
        addresses = [int(array.unsafe_buffer_pointer()) for array in (jx, jy)]
        pointers = [s.data.ptr if hasattr(s, "data") and hasattr(s.data, "ptr") else s.data_ptr() for s in sources]
        same = addresses == pointers
        jz = (jx + jy).block_until_ready()
        got, back = from_jax(jz)
        equal = torch.equal(got, want)
        kv("swap.dlpack.jax_zero_copy", same)
        kv("swap.dlpack.jax_version", jax.__version__)
        verdict("swap.dlpack.jax", equal, f"x and y from {via} to JAX ({'zero-copy' if same else 'copied'}), JAX's "
                f"x + y back to PyTorch by {back} {'equals' if equal else 'DIFFERS from'} PyTorch's; {where}")
    except Exception as error:  # the reason is the verdict
        failure("swap.dlpack.jax", error, where)
