"""JAX under the shim (tests/gpu/run.sh, shared-GPU section): arrays totalling GIB are
made on the GPU, each filled with a known value, reduced and multiplied, and checked.

usage: jax_check.py NAME GIB

Prints PASS/FAIL NAME.jax and KV lines. An out-of-memory error raised by XLA (its own
arena smaller than the data, by its own rule) is reported as KV NAME.xla_oom=1 and a
PASS NAME.jax_answered line: the test is that JAX answers — with results or with its
own error — and never hangs (run.sh runs it under a timeout).
"""

import sys
import time

GIB = 1 << 30


def main():
    name, gib = sys.argv[1], float(sys.argv[2])
    import jax
    import jax.numpy as jnp

    started = time.time()
    blocks = []
    try:
        for index in range(int(gib * 4)):
            blocks.append(jnp.full((GIB // 4 // 4,), float(index % 89 + 1), dtype=jnp.float32))
        sums = [float(block.sum()) for block in blocks]
        a = blocks[0][: 1024 * 1024].reshape(1024, 1024)
        b = blocks[-1][: 1024 * 1024].reshape(1024, 1024)
        product = float((a @ b)[0, 0])
    except Exception as error:  # XLA's RESOURCE_EXHAUSTED and friends
        text = str(error).splitlines()[0][:300]
        oom = "RESOURCE_EXHAUSTED" in str(error) or "out of memory" in str(error).lower()
        print(f"KV {name}.xla_oom={1 if oom else 0}")
        print(f"KV {name}.held_gib={len(blocks) / 4}")
        verdict = "PASS" if oom else "FAIL"
        print(f"{verdict} {name}.jax_answered: {'XLA out-of-memory' if oom else 'error'} after {len(blocks) / 4} GiB: {text}")
        return
    expected_sums = [float(i % 89 + 1) * (GIB // 4 // 4) for i in range(len(blocks))]
    wrong = [i for i, (got, want) in enumerate(zip(sums, expected_sums)) if abs(got - want) > want * 1e-4]
    want_product = 1024.0 * 1.0 * float((len(blocks) - 1) % 89 + 1)
    ok = not wrong and abs(product - want_product) <= want_product * 1e-3
    print(f"KV {name}.xla_oom=0")
    print(f"KV {name}.held_gib={len(blocks) / 4}")
    print(f"KV {name}.seconds={time.time() - started:.1f}")
    print(f"KV {name}.backend={jax.default_backend()}")
    print(f"{'PASS' if ok else 'FAIL'} {name}.jax: {len(blocks) / 4} GiB in {len(blocks)} arrays, sums wrong at {wrong[:5]}, matmul {product} (want {want_product})")


if __name__ == "__main__":
    main()
