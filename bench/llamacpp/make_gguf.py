#!/usr/bin/env python3
"""Write a Llama-architecture GGUF model with random F16 weights, for llama-bench.

No download: the shape comes from a named preset (Llama-3-8B by default), the weights are
normal(0, 0.02) values from one random block that is tiled over every tensor (generating
16 GB of independent random numbers would take minutes; the benchmark only needs the
bytes to be there and the arithmetic to stay finite). Tensors are written one at a time,
so peak memory is the largest tensor (the 1 GiB embedding), not the model.

The tokenizer is a synthetic SentencePiece ("llama") vocabulary of the model's vocab size:
<unk>, <s>, </s>, the 256 byte tokens, then plain pieces. llama.cpp loads it like any
SPM vocabulary; llama-bench feeds token ids directly, so no text is ever tokenized.

Usage: make_gguf.py OUT.gguf [--shape llama3-8b|tiny] [--gguf-py DIR]
The gguf package is taken from --gguf-py (the copy vendored in the llama-cpp-python
sdist, staged by prepare.sh) so that the writer matches the llama.cpp that reads it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

# name -> (hidden, layers, ffn, heads, kv_heads, vocab, rope_theta, context)
SHAPES = {
    "llama3-8b": dict(hidden=4096, layers=32, ffn=14336, heads=32, kv_heads=8,
                      vocab=128256, rope_theta=500000.0, context=8192),
    # Small enough for a CPU-only smoke test (a few MB), same tensor layout.
    "tiny": dict(hidden=256, layers=4, ffn=768, heads=8, kv_heads=2,
                 vocab=4096, rope_theta=500000.0, context=2048),
}

# Period of the tiled random block, in elements: prime, so that consecutive rows of a
# tensor (whose lengths are powers of two) do not repeat the same values.
BLOCK_ELEMENTS = 4_194_301


def tensor_plan(s: dict) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, numpy shape as (rows, cols), dtype) in the order llama.cpp's converter uses."""
    head_dim = s["hidden"] // s["heads"]
    kv_dim = s["kv_heads"] * head_dim
    h, f = s["hidden"], s["ffn"]
    plan = [("token_embd.weight", (s["vocab"], h), "f16")]
    for i in range(s["layers"]):
        b = f"blk.{i}."
        plan += [
            (b + "attn_norm.weight", (h,), "f32"),
            (b + "attn_q.weight", (h, h), "f16"),
            (b + "attn_k.weight", (kv_dim, h), "f16"),
            (b + "attn_v.weight", (kv_dim, h), "f16"),
            (b + "attn_output.weight", (h, h), "f16"),
            (b + "ffn_norm.weight", (h,), "f32"),
            (b + "ffn_gate.weight", (f, h), "f16"),
            (b + "ffn_up.weight", (f, h), "f16"),
            (b + "ffn_down.weight", (h, f), "f16"),
        ]
    plan += [("output_norm.weight", (h,), "f32"), ("output.weight", (s["vocab"], h), "f16")]
    return plan


def synthetic_spm_vocab(n_vocab: int, gguf) -> tuple[list[str], list[float], list[int]]:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    if n_vocab < len(tokens) + 1:
        raise SystemExit(f"vocab {n_vocab} too small for the synthetic SPM vocabulary")
    tokens += [f"\u2581t{i}" for i in range(n_vocab - len(tokens))]
    types += [gguf.TokenType.NORMAL] * (n_vocab - len(types))
    scores = [0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(n_vocab - 259)]
    return tokens, scores, [int(t) for t in types]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="llama3-8b")
    ap.add_argument("--gguf-py", help="directory holding the gguf package (vendored gguf-py)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.gguf_py:
        sys.path.insert(0, args.gguf_py)
    import gguf  # noqa: E402  (path set just above)

    s = SHAPES[args.shape]
    started = time.monotonic()
    rng = np.random.default_rng(args.seed)
    block = (rng.standard_normal(BLOCK_ELEMENTS, dtype=np.float32) * 0.02).astype(np.float16)

    w = gguf.GGUFWriter(args.out, "llama")
    w.add_name(f"greenboost-random-{args.shape}")
    w.add_context_length(s["context"])
    w.add_embedding_length(s["hidden"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["ffn"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_rope_freq_base(s["rope_theta"])
    w.add_rope_dimension_count(s["hidden"] // s["heads"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(s["vocab"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    tokens, scores, types = synthetic_spm_vocab(s["vocab"], gguf)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)

    plan = tensor_plan(s)
    np_dtype = {"f16": np.float16, "f32": np.float32}
    for name, shape, dt in plan:
        nbytes = int(np.prod(shape)) * np.dtype(np_dtype[dt]).itemsize
        w.add_tensor_info(name, shape, np.dtype(np_dtype[dt]), nbytes)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()

    tiled = np.empty(0, dtype=np.float16)
    total = 0
    for name, shape, dt in plan:
        n = int(np.prod(shape))
        if dt == "f32":  # norm weights: ones, as a trained model's are near 1
            data = np.ones(shape, dtype=np.float32)
        else:
            if tiled.size < n:
                tiled = np.resize(block, n)  # repeats the block; done once for the largest
            data = tiled[:n].reshape(shape)
        w.write_tensor_data(data)
        total += data.nbytes
    w.close()

    size = os.path.getsize(args.out)
    summary = dict(shape=args.shape, **s, tensors=len(plan), tensor_bytes=total,
                   file_bytes=size, seconds=round(time.monotonic() - started, 1))
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
