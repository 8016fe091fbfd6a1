"""tests/gpu/tiering_swap_dlpack.py's Triton kernel: an elementwise add (a module of its own,
imported only by the dlpack role, so that a missing Triton fails only its verdict)."""

import triton
import triton.language as tl

BLOCK = 4096


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(axis=0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def add(x, y, out):
    """out = x + y for contiguous tensors of one shape and dtype."""
    n = x.numel()
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    return out
