"""The benchmarks' model: a Llama-architecture model built from a config (no download),
every weight drawn on the device from a generator seeded with the parameter's index,
so that every configuration and every process computes with the same weights and
their greedy tokens can be compared. bench/decode.py times it; tiering_decode.py and
probes/placement_probe.py run it too. Nothing here imports torch at import time
(`decode.py --weight-bytes` runs without it)."""

# Llama 3 8B's shape (Meta-Llama-3-8B config.json); --layers keeps the per-layer shape
# and changes the depth, to fit a smaller device budget.
SHAPES = {
    "8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8, rope_theta=500000.0),
    # For trying the harness on a CPU-only machine.
    "tiny": dict(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0),
}

BF16_BYTES = 2


def shape_of(name, layers):
    """The shape called `name` in SHAPES, with `layers` decoder layers (0: its own)."""
    shape = dict(SHAPES[name])
    if layers:
        shape["num_hidden_layers"] = layers
    return shape


def meta_llama(shape, max_positions=8192):
    """The Llama model of `shape` (bf16, eval mode) for sequences up to `max_positions`
    tokens, on the meta device, and its config: no memory yet; the callers draw every
    weight where they want it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**shape, max_position_embeddings=max_positions, rms_norm_eps=1e-5, tie_word_embeddings=False,
                         hidden_act="silu", attention_bias=False, mlp_bias=False)
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    torch.set_default_dtype(default_dtype)
    model.eval()
    return model, config


def draw_weights(model, device, seed, reverse=False, target=None):
    """Draws every weight of a `meta_llama` model on `device`, one parameter at a time in
    the model's order (the reverse with `reverse`), each from a generator seeded with the
    parameter's index, so that every configuration computes with the same weights; a
    parameter for which `target(name)` names another device is moved there. Builds the
    rotary embedding's computed buffer for real."""
    import torch
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    generator = torch.Generator(device=device)
    order = list(enumerate(name for name, _ in model.named_parameters()))
    if reverse:
        order.reverse()
    for index, name in order:
        module_name, _, attr = name.rpartition(".")
        module = model.get_submodule(module_name)
        tensor = torch.empty(getattr(module, attr).shape, dtype=torch.bfloat16, device=device)
        if tensor.dim() == 1:
            tensor.fill_(1.0)  # RMSNorm scales
        else:
            generator.manual_seed(seed * 1_000_003 + index)
            tensor.normal_(0.0, 0.02, generator=generator)
        where = target(name) if target else device
        if where != device:
            tensor = tensor.to(where)
        setattr(module, attr, torch.nn.Parameter(tensor, requires_grad=False))
    with device:
        model.model.rotary_emb = LlamaRotaryEmbedding(config=model.config)


def greedy_step(model):
    """One greedy forward of `model`: (the next token, the KV cache) from the tokens `ids`
    and the cache so far; only the last position's logits are computed."""

    def forward(ids, cache=None):
        out = model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1].argmax(-1, keepdim=True), out.past_key_values

    return forward


def kv_width(shape):
    return shape["num_key_value_heads"] * shape["hidden_size"] // shape["num_attention_heads"]


def weight_count(shape):
    """Parameters of LlamaForCausalLM with untied embeddings (checked against the
    built model at run time)."""
    h, i, v, layers = shape["hidden_size"], shape["intermediate_size"], shape["vocab_size"], shape["num_hidden_layers"]
    kv = kv_width(shape)
    per_layer = 2 * h * h + 2 * h * kv + 3 * h * i + 2 * h
    return v * h + layers * per_layer + h + v * h
