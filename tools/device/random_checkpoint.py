#!/usr/bin/env python3
"""Writes a Hugging Face Llama folder of random bf16 weights (config.json + safetensors shards),
for timing runs of shapes nobody can download here: `--shape llama-3.1-8b` or `llama-3.1-70b`.
The weights are N(0, 0.02) so that activations stay finite; the tokens they produce mean nothing.
Usage: python3 tools/device/random_checkpoint.py --shape llama-3.1-8b --out DIR [--layers N]
"""
import argparse
import json
import pathlib

import torch
from safetensors.torch import save_file

SHAPES = {
    # hidden, intermediate, layers, heads, kv heads, vocab
    "llama-3.1-8b": (4096, 14336, 32, 32, 8, 128256),
    "llama-3.1-70b": (8192, 28672, 80, 64, 8, 128256),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", required=True, choices=sorted(SHAPES))
    ap.add_argument("--out", required=True)
    ap.add_argument("--layers", type=int, default=0, help="fewer layers than the shape's (0: all)")
    a = ap.parse_args()
    hidden, inter, layers, heads, kv, vocab = SHAPES[a.shape]
    layers = a.layers or layers
    head_dim = hidden // heads
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv, "head_dim": head_dim, "vocab_size": vocab,
        "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": 128000,
        "eos_token_id": 128001, "hidden_act": "silu",
    }
    (out / "config.json").write_text(json.dumps(config, indent=2))
    gen = torch.Generator(device="cuda").manual_seed(0)

    def rand(*shape):
        return (torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32) * 0.02).to(
            torch.bfloat16).cpu()

    index, shard, shard_bytes, n = {}, {}, 0, 0

    def flush():
        nonlocal shard, shard_bytes, n
        if not shard:
            return
        name = f"model-{n:05d}.safetensors"
        save_file(shard, str(out / name), metadata={"format": "pt"})
        for k in shard:
            index[k] = name
        shard, shard_bytes, n = {}, 0, n + 1

    def add(name, t):
        nonlocal shard_bytes
        shard[name] = t
        shard_bytes += t.numel() * t.element_size()
        if shard_bytes > 4 << 30:
            flush()

    add("model.embed_tokens.weight", rand(vocab, hidden))
    for i in range(layers):
        p = f"model.layers.{i}."
        add(p + "self_attn.q_proj.weight", rand(heads * head_dim, hidden))
        add(p + "self_attn.k_proj.weight", rand(kv * head_dim, hidden))
        add(p + "self_attn.v_proj.weight", rand(kv * head_dim, hidden))
        add(p + "self_attn.o_proj.weight", rand(hidden, heads * head_dim))
        add(p + "mlp.gate_proj.weight", rand(inter, hidden))
        add(p + "mlp.up_proj.weight", rand(inter, hidden))
        add(p + "mlp.down_proj.weight", rand(hidden, inter))
        add(p + "input_layernorm.weight", torch.ones(hidden, dtype=torch.bfloat16))
        add(p + "post_attention_layernorm.weight", torch.ones(hidden, dtype=torch.bfloat16))
    add("model.norm.weight", torch.ones(hidden, dtype=torch.bfloat16))
    add("lm_head.weight", rand(vocab, hidden))
    flush()
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": index}, indent=1))
    print(f"wrote {out}: {layers} layers, {len(index)} tensors in {n} files")


if __name__ == "__main__":
    main()
