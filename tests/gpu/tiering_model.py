"""tests/gpu/tiering_check.py's model_bit_identical check: four bf16 Linear layers whose
weights land in movable T2 beside a foreign process; the output before and after their
promotion must be torch.equal."""

import time

from tiering_common import MIB, WAIT_S, kv, verdict, wait_s
from tiering_foreign import Foreign


def check_model(shim):
    import torch

    torch.use_deterministic_algorithms(True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
    balloon = Foreign("balloon", "1")
    if not balloon.wait_ready():
        verdict(False, "model_bit_identical", f"the foreign process (leave 1 GiB) did not start: {balloon.tail()}")
        return balloon
    torch.manual_seed(1234)
    linears = [torch.nn.Linear(8192, 8192, bias=True, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
    layers = []
    for linear in linears:
        layers += [linear, torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers[:-1]).eval()
    weights = [linear.weight for linear in linears]
    wbytes = sum(w.numel() * w.element_size() for w in weights)
    in_t2 = sum(shim.t2_bytes(w) for w in weights)
    kv("model.weight_bytes", wbytes)
    kv("model.weights_in_t2", in_t2)
    x = torch.randn(64, 8192, device="cuda", dtype=torch.bfloat16, generator=torch.Generator(device="cuda").manual_seed(7))
    with torch.no_grad():
        s0 = shim.stats()
        y0 = model(x)
        torch.cuda.synchronize()
        s1 = shim.stats()
        y0_again = model(x)
        torch.cuda.synchronize()
        before = shim.stats()
        balloon.kill()
        deadline = time.monotonic() + wait_s()
        while not (shim.stats().tier_vram >= wbytes and all(shim.t2_bytes(w) == 0 for w in weights)):
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        up = all(shim.t2_bytes(w) == 0 for w in weights) and shim.stats().tier_vram >= wbytes
        s2 = shim.stats()
        y1 = model(x)
        torch.cuda.synchronize()
        s3 = shim.stats()
    staged0, staged1 = s1.gemm_staged - s0.gemm_staged, s3.gemm_staged - s2.gemm_staged
    kv("model.gemm_staged_t2", staged0)
    kv("model.gemm_staged_vram", staged1)
    kv("model.promoted_bytes", s2.promoted_bytes - before.promoted_bytes)
    repeat = torch.equal(y0, y0_again)
    same = torch.equal(y0, y1)
    diff = (y0.float() - y1.float()).abs().max().item()
    kv("model.repeat_same", repeat)
    kv("model.max_abs_diff", diff)
    path = f"GEMMs staged by the shim: {staged0} with the weights in T2, {staged1} in VRAM"
    if staged0 != staged1:
        path += " (different paths: staged copies against the weights in place; cuBLAS reads the same bytes either way)"
    if in_t2 != wbytes:
        verdict(False, "model_bit_identical", f"only {in_t2 // MIB} of {wbytes // MIB} MiB of weights in T2 beside a "
                f"foreign process leaving 1 GiB: the check needs them movable; {shim.counters()}")
    elif not up:
        verdict(False, "model_bit_identical", f"the weights were not all promoted {WAIT_S} s after the foreign process "
                f"was killed; {shim.counters()}")
    else:
        verdict(same and repeat, "model_bit_identical",
                f"4 bf16 Linear(8192, 8192) ({wbytes // MIB} MiB of weights) in movable T2, then promoted: outputs "
                f"{'bit-identical' if same else f'differ (max abs diff {diff})'}, repeat in T2 "
                f"{'identical' if repeat else 'differs'}; {path}")
    del model, linears, layers, weights
    return None

