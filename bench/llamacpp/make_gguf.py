#!/usr/bin/env python3
"""Write a Llama- or Qwen3-MoE-architecture GGUF model with random F16 weights, for llama-bench.

No download: the shape comes from a named preset (Llama-3-8B by default), the weights are
normal(0, 0.02) values from one random block that is tiled over every tensor (generating
16 GB of independent random numbers would take minutes; the benchmark only needs the
bytes to be there and the arithmetic to stay finite). Tensors are written one at a time,
so peak memory is the largest tensor (the 1 GiB embedding), not the model.

The tokenizer is a synthetic SentencePiece ("llama") vocabulary of the model's vocab size:
<unk>, <s>, </s>, the 256 byte tokens, then plain pieces. llama.cpp loads it like any
SPM vocabulary; llama-bench feeds token ids directly, so no text is ever tokenized.

The mixture-of-experts shapes (qwen3moe-*: Qwen3-30B-A3B's layer, 128 experts of which
8 are used per token) are for the experts-in-host-RAM comparison; their router weights are
random too, so every token picks its own experts, as a trained router's do.

Usage: make_gguf.py OUT.gguf [--shape NAME] [--gguf-py DIR]   (NAME: see SHAPES)
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

# name -> architecture and hyperparameters. Dense (llama): hidden, layers, ffn, heads,
# kv_heads, vocab, rope_theta, context. Mixture of experts (qwen3moe) also: head_dim (q/k/v
# width per head, not hidden / heads), experts, experts_used, expert_ffn; no dense ffn.
SHAPES = {
    "llama3-8b": dict(arch="llama", hidden=4096, layers=32, ffn=14336, heads=32, kv_heads=8,
                      vocab=128256, rope_theta=500000.0, context=8192),
    # Small enough for a CPU-only smoke test (a few MB), same tensor layout.
    "tiny": dict(arch="llama", hidden=256, layers=4, ffn=768, heads=8, kv_heads=2,
                 vocab=4096, rope_theta=500000.0, context=2048),
    # Qwen3-30B-A3B's shape with 24 of its 48 layers: 31.2 GB of F16 weights, 29.0 GB of
    # them experts (the whole model would be 61 GB, more than the device's disk allows
    # beside the rest); 3.3 GB read per token (8 of 128 experts, and the output matrix).
    "qwen3moe-30b-a3b-24l": dict(arch="qwen3moe", hidden=2048, layers=24, heads=32, kv_heads=4, head_dim=128,
                                 experts=128, experts_used=8, expert_ffn=768, vocab=151936,
                                 rope_theta=1000000.0, context=32768),
    "qwen3moe-tiny": dict(arch="qwen3moe", hidden=256, layers=2, heads=8, kv_heads=2, head_dim=32,
                          experts=8, experts_used=2, expert_ffn=128, vocab=4096,
                          rope_theta=1000000.0, context=2048),
}

# Period of the tiled random block, in elements: prime, so that consecutive rows of a
# tensor (whose lengths are powers of two) do not repeat the same values.
BLOCK_ELEMENTS = 4_194_301


def tensor_plan(s: dict) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, numpy shape as (rows, cols) or (experts, rows, cols), dtype) in the order
    llama.cpp's converter uses."""
    if s["arch"] == "qwen3moe":
        return moe_tensor_plan(s)
    head_dim = s["hidden"] // s["heads"]
    h, f = s["hidden"], s["ffn"]
    plan = [("token_embd.weight", (s["vocab"], h), "f16")]
    for i in range(s["layers"]):
        b = f"blk.{i}."
        plan += attention_tensors(b, h, s["heads"] * head_dim, s["kv_heads"] * head_dim)
        plan += [
            (b + "ffn_norm.weight", (h,), "f32"),
            (b + "ffn_gate.weight", (f, h), "f16"),
            (b + "ffn_up.weight", (f, h), "f16"),
            (b + "ffn_down.weight", (h, f), "f16"),
        ]
    plan += [("output_norm.weight", (h,), "f32"), ("output.weight", (s["vocab"], h), "f16")]
    return plan


def attention_tensors(b: str, h: int, q_dim: int, kv_dim: int) -> list[tuple[str, tuple[int, ...], str]]:
    """A layer's norm and attention projections (`b`: its name prefix)."""
    return [
        (b + "attn_norm.weight", (h,), "f32"),
        (b + "attn_q.weight", (q_dim, h), "f16"),
        (b + "attn_k.weight", (kv_dim, h), "f16"),
        (b + "attn_v.weight", (kv_dim, h), "f16"),
        (b + "attn_output.weight", (h, q_dim), "f16"),
    ]


def moe_tensor_plan(s: dict) -> list[tuple[str, tuple[int, ...], str]]:
    """Qwen3-MoE: per-head q/k norms, a router (ffn_gate_inp, f32 as converted models
    have it) and the experts stacked in one tensor per projection."""
    h, d, e, f = s["hidden"], s["head_dim"], s["experts"], s["expert_ffn"]
    q_dim, kv_dim = s["heads"] * d, s["kv_heads"] * d
    plan = [("token_embd.weight", (s["vocab"], h), "f16")]
    for i in range(s["layers"]):
        b = f"blk.{i}."
        plan += attention_tensors(b, h, q_dim, kv_dim)
        plan += [
            (b + "attn_k_norm.weight", (d,), "f32"),
            (b + "attn_q_norm.weight", (d,), "f32"),
            (b + "ffn_norm.weight", (h,), "f32"),
            (b + "ffn_gate_inp.weight", (e, h), "f32"),
            (b + "ffn_gate_exps.weight", (e, f, h), "f16"),
            (b + "ffn_down_exps.weight", (e, h, f), "f16"),
            (b + "ffn_up_exps.weight", (e, f, h), "f16"),
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

    moe = s["arch"] == "qwen3moe"
    head_dim = s["head_dim"] if moe else s["hidden"] // s["heads"]
    w = gguf.GGUFWriter(args.out, s["arch"])
    w.add_name(f"greenboost-random-{args.shape}")
    w.add_context_length(s["context"])
    w.add_embedding_length(s["hidden"])
    w.add_block_count(s["layers"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_rope_freq_base(s["rope_theta"])
    w.add_rope_dimension_count(head_dim)
    if moe:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
        w.add_expert_count(s["experts"])
        w.add_expert_used_count(s["experts_used"])
        w.add_expert_feed_forward_length(s["expert_ffn"])
        w.add_layer_norm_rms_eps(1e-6)
    else:
        w.add_feed_forward_length(s["ffn"])
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
        if name.endswith("ffn_gate_inp.weight"):  # the router: random, so tokens spread over experts
            data = (rng.standard_normal(shape, dtype=np.float32) * 0.02)
        elif dt == "f32":  # norm weights: ones, as a trained model's are near 1
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
