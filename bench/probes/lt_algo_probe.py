"""Issue 13: can a staged product be computed in slices with the whole product's own
cuBLASLt algorithm, bit for bit?

Pipelined staging cuts a product along the weight's rows; each slice is another cuBLAS
call, for which cuBLAS picks another kernel on the H200 (split-K for narrow shapes), so
most shapes differ from the whole product. This probe asks, for an 8B model's one-token
and 512-token products (bf16, as PyTorch's Linear calls cublasGemmEx):
  1. which of cuBLASLt's heuristic algorithms for the whole shape reproduces PyTorch's
     own product (the program's cublasGemmEx), bit for bit, at which workspace limit;
  2. whether slices of 256-row multiples computed with that algorithm reproduce it too;
  3. how long the slices take together against the whole product (both from VRAM).
No shim needed: `python3 bench/probes/lt_algo_probe.py`. Prints `KV` lines.
"""

import ctypes
import time

import torch

COMPUTE_32F, R_32F, R_16BF = 68, 0, 14
DESC_TRANSA, DESC_TRANSB = 3, 4
PREF_MAX_WORKSPACE = 1
OP_N, OP_T = 0, 1
HIDDEN, FFN, VOCAB = 4096, 14336, 128256
# (name, rows of the weight = output features, inner dimension)
WEIGHTS = [("q", HIDDEN, HIDDEN), ("gate", FFN, HIDDEN), ("down", HIDDEN, FFN), ("lm_head", VOCAB, HIDDEN)]
SLICES = (2, 4, 8)


class HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


def lt_library():
    """The cuBLASLt PyTorch loaded (after a product), by its path in /proc/self/maps."""
    torch.ones(8, 8, device="cuda", dtype=torch.bfloat16) @ torch.ones(8, 8, device="cuda", dtype=torch.bfloat16)
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "libcublasLt.so" in path:
                return ctypes.CDLL(path)
    raise SystemExit("no libcublasLt loaded")


LT = None
VP, U64, I64 = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int64


def check(status, what):
    if status != 0:
        raise RuntimeError(f"{what}: cuBLAS status {status}")


def handle():
    h = VP()
    check(LT.cublasLtCreate(ctypes.byref(h)), "cublasLtCreate")
    return h


def layout(rows, cols, ld):
    out = VP()
    check(LT.cublasLtMatrixLayoutCreate(ctypes.byref(out), ctypes.c_int(R_16BF), U64(rows), U64(cols), I64(ld)), "layout")
    return out


def matmul_desc():
    desc = VP()
    check(LT.cublasLtMatmulDescCreate(ctypes.byref(desc), ctypes.c_int(COMPUTE_32F), ctypes.c_int(R_32F)), "desc")
    for attribute, value in ((DESC_TRANSA, OP_T), (DESC_TRANSB, OP_N)):
        v = ctypes.c_int32(value)
        check(LT.cublasLtMatmulDescSetAttribute(desc, attribute, ctypes.byref(v), 4), "desc attribute")
    return desc


def heuristics(lt, desc, a, b, c, workspace, count=8):
    pref = VP()
    check(LT.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "preference")
    ws = U64(workspace)
    check(LT.cublasLtMatmulPreferenceSetAttribute(pref, PREF_MAX_WORKSPACE, ctypes.byref(ws), 8), "pref attribute")
    results = (HeuristicResult * count)()
    returned = ctypes.c_int(0)
    check(LT.cublasLtMatmulAlgoGetHeuristic(lt, desc, a, b, c, c, pref, count, results, ctypes.byref(returned)),
          "heuristic")
    return list(results[:returned.value])


class Product:
    """y^T (m x n, column-major) = W (stored k x m, used transposed) times x^T (k x n)."""

    def __init__(self, lt, desc, weight, x, workspace):
        self.lt, self.desc, self.weight, self.x, self.workspace = lt, desc, weight, x, workspace
        self.m, self.k = weight.shape
        self.n = x.shape[0]
        self.alpha, self.beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
        self.b = layout(self.k, self.n, self.k)

    def run(self, result, out, first, rows):
        a = layout(self.k, rows, self.k)
        c = layout(rows, self.n, self.m)
        a_ptr = self.weight.data_ptr() + first * self.k * 2
        c_ptr = out.data_ptr() + first * 2
        status = LT.cublasLtMatmul(self.lt, self.desc, ctypes.byref(self.alpha), VP(a_ptr), a, VP(self.x.data_ptr()),
                                   self.b, ctypes.byref(self.beta), VP(c_ptr), c, VP(c_ptr), c,
                                   ctypes.byref(result.algo), VP(self.workspace.data_ptr()),
                                   ctypes.c_size_t(self.workspace.numel()), VP(torch.cuda.current_stream().cuda_stream))
        LT.cublasLtMatrixLayoutDestroy(a)
        LT.cublasLtMatrixLayoutDestroy(c)
        return status

    def sliced(self, result, pieces):
        out = torch.empty(self.n, self.m, dtype=torch.bfloat16, device="cuda")
        per = -(-self.m // pieces)
        per = -(-per // 256) * 256
        for first in range(0, self.m, per):
            status = self.run(result, out, first, min(per, self.m - first))
            if status != 0:
                return None, status
        return out, 0


def timed(fn, repeats=20):
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats * 1e3


def main():
    global LT
    LT = lt_library()
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator().manual_seed(11)
    lt, desc = handle(), matmul_desc()
    workspace = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    for name, rows, inner in WEIGHTS:
        weight = (torch.randn(rows, inner, generator=gen) * 0.02).to(torch.bfloat16).cuda()
        for tokens in (1, 512):
            x = torch.randn(tokens, inner, generator=gen).to(torch.bfloat16).cuda()
            whole = torch.nn.functional.linear(x, weight)
            product = Product(lt, desc, weight, x, workspace)
            a, c = layout(inner, rows, inner), layout(rows, tokens, rows)
            tag = f"{name}.{tokens}"
            matched = None
            for limit in (32 << 20, 4 << 20, 0, 64 << 20):
                for index, result in enumerate(heuristics(lt, desc, a, product.b, c, limit)):
                    out = torch.empty_like(whole)
                    if product.run(result, out, 0, rows) != 0:
                        continue
                    if torch.equal(out.view(torch.int16), whole.view(torch.int16)):
                        matched = (limit, index, result)
                        break
                if matched:
                    break
            if not matched:
                print(f"KV {tag}.whole_match=none", flush=True)
                continue
            limit, index, result = matched
            print(f"KV {tag}.whole_match=heuristic[{index}]@{limit >> 20}MiB ws={result.workspace}", flush=True)
            torch_ms = timed(lambda: torch.nn.functional.linear(x, weight))
            for pieces in SLICES:
                out, status = product.sliced(result, pieces)
                if out is None:
                    print(f"KV {tag}.slices{pieces}=refused({status})", flush=True)
                    continue
                same = torch.equal(out.view(torch.int16), whole.view(torch.int16))
                sliced_ms = timed(lambda: product.sliced(result, pieces))
                print(f"KV {tag}.slices{pieces}={'identical' if same else 'DIFFER'} "
                      f"ms={sliced_ms:.3f} whole_ms={torch_ms:.3f}", flush=True)
            del x, whole
        del weight
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
