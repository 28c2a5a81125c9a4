#!/usr/bin/env python3
"""Builds the fidelity goldens: tiny random-init checkpoints of the supported families,
saved by transformers, with the reference logits and greedy tokens the engine must reproduce.

Run on a machine with torch + transformers (the GPU machine; without CUDA the bf16 part is
skipped):

    python3 tools/make_goldens.py [--out tests/data/goldens]

Each case becomes a folder <out>/<name>/ holding:
  config.json, generation_config.json, model.safetensors   what save_pretrained wrote
  golden.json                                              prompt, tokens, gaps, file index
  prefill_fp32.bin  [prompt_len, vocab]   fp32 logits of every prompt position
  decode_fp32.bin   [16, vocab]           fp32 logits each greedy token was chosen from
                                          (row 0 is the last prompt position, row i>0 comes
                                          from feeding generated token i-1 through the cache)
  prefill_bf16.bin, decode_bf16.bin       the same from the model cast to bf16 on CUDA
All .bin files are little-endian float32, row-major.

The reference is always the checkpoint loaded back with from_pretrained in float32 on the CPU
(so a bf16/fp16 checkpoint's reference is the exact upcast of its stored weights).
The script also writes <out>/README.md listing every tensor name/shape/dtype and config.json.
"""
import argparse
import copy
import json
import os
import struct
import sys
import traceback

try:
    import numpy as np
    import torch
    import transformers
except ImportError:  # --readme-only needs none of them
    np = torch = transformers = None

VOCAB = 512
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
NEW_TOKENS = 16
INIT_STD = 0.08
# A fixed prompt of 12 ids in [3, VOCAB); alternatives are tried only if greedy decoding would
# produce the EOS id (the engine stops there, transformers here is told not to).
PROMPTS = [
    [17, 254, 3, 99, 411, 73, 150, 500, 8, 321, 64, 222],
    [400, 12, 77, 301, 5, 199, 263, 42, 511, 130, 88, 9],
    [33, 470, 120, 61, 288, 7, 350, 14, 205, 93, 444, 26],
]

COMMON = dict(vocab_size=VOCAB, max_position_embeddings=256, rms_norm_eps=1e-6,
              initializer_range=INIT_STD, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
              pad_token_id=PAD_ID, hidden_act="silu")

# name -> (transformers model class, checkpoint dtype, config kwargs, rope parameters, seed)
CASES = {
    "llama": ("LlamaForCausalLM", "float32",
              dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                   attention_bias=False, mlp_bias=False),
              # theta 1e4 with head_dim 16 puts wavelengths on both sides of, and between, the
              # llama3 low/high frequency cut-offs (64 and 16 positions).
              dict(rope_type="llama3", rope_theta=10000.0, factor=8.0, low_freq_factor=1.0,
                   high_freq_factor=4.0, original_max_position_embeddings=64),
              1001),
    "qwen2": ("Qwen2ForCausalLM", "bfloat16",
              dict(hidden_size=96, intermediate_size=256, num_hidden_layers=2,
                   num_attention_heads=6, num_key_value_heads=2, tie_word_embeddings=False,
                   use_sliding_window=False),
              dict(rope_type="default", rope_theta=1000000.0),
              1002),
    "qwen3": ("Qwen3ForCausalLM", "float32",
              # head_dim 32 while hidden/heads is 16: q_proj is 64 -> 128.
              dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                   tie_word_embeddings=False, attention_bias=False, use_sliding_window=False),
              dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                   original_max_position_embeddings=64),
              1003),
    "qwen3_moe": ("Qwen3MoeForCausalLM", "float32",
                  dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                       num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=1,
                       head_dim=16, num_experts=8, num_experts_per_tok=4, norm_topk_prob=True,
                       decoder_sparse_step=1, mlp_only_layers=[1], tie_word_embeddings=False,
                       attention_bias=False, use_sliding_window=False,
                       output_router_logits=False, router_aux_loss_coef=0.0),
                  dict(rope_type="default", rope_theta=1000000.0),
                  1004),
    "mixtral": ("MixtralForCausalLM", "float16",
                dict(hidden_size=96, intermediate_size=48, num_hidden_layers=2,
                     num_attention_heads=6, num_key_value_heads=2, num_local_experts=8,
                     num_experts_per_tok=2, sliding_window=None, tie_word_embeddings=False,
                     output_router_logits=False, router_aux_loss_coef=0.0,
                     router_jitter_noise=0.0),
                dict(rope_type="default", rope_theta=1000000.0),
                1005),
    # DeepSeek-V2 with multi-head latent attention (plain q_proj), softmax greedy routing with a
    # scaling factor, one shared expert, a dense first layer, and YaRN with mscale_all_dim (which
    # scales the softmax).
    "deepseek_v2": ("DeepseekV2ForCausalLM", "float32",
                    dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                         q_lora_rank=None, kv_lora_rank=64, qk_nope_head_dim=16,
                         qk_rope_head_dim=32, v_head_dim=16, n_routed_experts=8,
                         n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1,
                         topk_method="greedy", routed_scaling_factor=1.5, norm_topk_prob=False,
                         tie_word_embeddings=False, attention_bias=False),
                    dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                         original_max_position_embeddings=64, mscale=0.707, mscale_all_dim=0.707),
                    1006),
    # DeepSeek-V2 with a q LoRA and group-limited routing (4 groups of 2, 2 kept), bf16.
    "deepseek_v2_lora": ("DeepseekV2ForCausalLM", "bfloat16",
                         dict(hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                              q_lora_rank=48, kv_lora_rank=64, qk_nope_head_dim=32,
                              qk_rope_head_dim=32, v_head_dim=32, n_routed_experts=8,
                              n_shared_experts=2, num_experts_per_tok=3, first_k_dense_replace=0,
                              topk_method="group_limited_greedy", n_group=4, topk_group=2,
                              routed_scaling_factor=1.0, tie_word_embeddings=False,
                              attention_bias=False),
                         dict(rope_type="default", rope_theta=10000.0),
                         1007),
    # DeepSeek-V3: sigmoid noaux_tc routing with groups and a score-correction bias, renormalised
    # and scaled; interleaved rope; q LoRA; a dense first layer.
    "deepseek_v3": ("DeepseekV3ForCausalLM", "float32",
                    dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                         q_lora_rank=32, kv_lora_rank=64, qk_nope_head_dim=16,
                         qk_rope_head_dim=32, v_head_dim=16, n_routed_experts=8,
                         n_shared_experts=1, num_experts_per_tok=3, first_k_dense_replace=1,
                         n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True,
                         rope_interleave=True, tie_word_embeddings=False, attention_bias=False),
                    dict(rope_type="yarn", rope_theta=10000.0, factor=4.0,
                         original_max_position_embeddings=64, mscale=1.0, mscale_all_dim=1.0),
                    1008),
    # DeepSeek-OCR's language model: DeepseekV2 MoE layers (softmax greedy, 2 shared experts,
    # layer 0 dense) with plain multi-head attention (use_mla false). transformers 5 has no class
    # for it (its DeepseekV2 is MLA only), so the reference swaps Llama's attention into a
    # DeepseekV2 model, which is what the checkpoint's remote code does; the folder is written as
    # the original checkpoint is (model_type deepseek_vl_v2 with a language_config).
    "deepseek_ocr_lm": ("DeepseekV2ForCausalLM", "bfloat16",
                        dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                             n_routed_experts=8, n_shared_experts=2, num_experts_per_tok=3,
                             first_k_dense_replace=1, topk_method="greedy",
                             tie_word_embeddings=False, attention_bias=False),
                        dict(rope_type="default", rope_theta=10000.0),
                        1009),
}

OCR_CASE = "deepseek_ocr_lm"


def with_plain_attention(model, cfg):
    """DeepSeek-OCR's language model: Llama attention (rotate_half RoPE over head_dim =
    hidden / heads) in place of MLA, as its remote code builds it with use_mla false."""
    from transformers.models.llama.modeling_llama import LlamaAttention, LlamaRotaryEmbedding
    heads = cfg.num_attention_heads
    lcfg = transformers.LlamaConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=heads, num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.hidden_size // heads, max_position_embeddings=cfg.max_position_embeddings,
        attention_bias=False, rope_parameters=dict(cfg.rope_parameters))
    lcfg._attn_implementation = cfg._attn_implementation
    for i, layer in enumerate(model.model.layers):
        layer.self_attn = LlamaAttention(lcfg, i)
    model.model.rotary_emb = LlamaRotaryEmbedding(lcfg)
    return model


def ocr_config_json(folder, kwargs):
    """Rewrites config.json as DeepSeek-OCR's checkpoint has it: model_type deepseek_vl_v2, the
    language model's fields in language_config (use_mla false), a vision_config the engine skips."""
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        saved = json.load(f)
    language = dict(COMMON, **kwargs)
    language.update(architectures=["DeepseekV2ForCausalLM"], model_type="deepseek_v2",
                    use_mla=False, q_lora_rank=None, kv_lora_rank=None, qk_nope_head_dim=0,
                    qk_rope_head_dim=0, v_head_dim=0, torch_dtype=saved.get("dtype", "bfloat16"),
                    rope_theta=saved["rope_parameters"]["rope_theta"])
    language.pop("initializer_range", None)
    top = dict(language)
    for key in ("architectures", "torch_dtype"):
        top.pop(key)
    top.update(architectures=["DeepseekOCRForCausalLM"], model_type="deepseek_vl_v2",
               torch_dtype=language["torch_dtype"], language_config=language,
               vision_config={"model_type": "vision", "image_size": 1024},
               projector_config={"model_type": "mlp_projector", "projector_type": "linear"})
    with open(path, "w") as f:
        json.dump(top, f, indent=2)
        f.write("\n")


def make_config(config_cls, kwargs, rope):
    """transformers 5 takes rope_parameters (theta inside); 4.x takes rope_theta/rope_scaling."""
    try:
        cfg = config_cls(**COMMON, **kwargs, rope_parameters=dict(rope))
        params = getattr(cfg, "rope_parameters", None)
        if isinstance(params, dict) and params.get("rope_type") == rope["rope_type"]:
            return cfg
    except TypeError:
        pass
    legacy = {k: v for k, v in rope.items() if k != "rope_theta"}
    scaling = None if legacy["rope_type"] == "default" else legacy
    return config_cls(**COMMON, **kwargs, rope_theta=rope["rope_theta"], rope_scaling=scaling)


def randomise(model, seed):
    """Own init of every parameter, so nothing depends on transformers' init: norms near 1 (not
    exactly 1, so a missing norm weight shows), biases non-zero (transformers zeroes them)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, b in model.named_buffers():  # DeepSeek-V3's routing bias: small, both signs
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.02 * torch.randn(b.shape, generator=gen, dtype=torch.float32))
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if "norm" in name:
                p.copy_(1.0 + 0.1 * noise)
            elif name.endswith("bias"):
                p.copy_(0.1 * noise)
            else:
                p.copy_(INIT_STD * noise)


def layer_kinds(model):
    return ["moe" if hasattr(layer.mlp, "experts") else "dense" for layer in model.model.layers]


def expected_kinds(kwargs):
    """Which layers the config asks to be MoE (Mixtral: all; Qwen3-MoE: the sparse-step rule)."""
    n = kwargs["num_hidden_layers"]
    if "num_local_experts" in kwargs:
        return ["moe"] * n
    if "n_routed_experts" in kwargs:  # DeepSeek: every layer past the first dense ones
        return ["moe" if i >= kwargs["first_k_dense_replace"] else "dense" for i in range(n)]
    if "num_experts" in kwargs:
        only = set(kwargs.get("mlp_only_layers", []))
        step = kwargs["decoder_sparse_step"]
        return ["moe" if (i not in only and (i + 1) % step == 0) else "dense" for i in range(n)]
    return ["dense"] * n


def build(name):
    arch, _, kwargs, rope, seed = CASES[name]
    model_cls = getattr(transformers, arch)
    torch.manual_seed(seed)
    cfg = make_config(model_cls.config_class, kwargs, rope)
    model = model_cls(cfg)
    if name == OCR_CASE:
        model = with_plain_attention(model, cfg)
    model = model.float().eval()
    kinds, want = layer_kinds(model), expected_kinds(kwargs)
    print(f"[{name}] layer mlp kinds: {kinds} (config implies {want})")
    if kinds != want:
        raise RuntimeError(f"[{name}] transformers built {kinds} but the config says {want}")
    randomise(model, seed)
    return model


def save_checkpoint(model, dtype, folder):
    model = copy.deepcopy(model).to(dtype)
    model.generation_config = transformers.GenerationConfig(
        bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=PAD_ID, do_sample=False)
    try:
        model.save_pretrained(folder, safe_serialization=True)
    except TypeError:  # transformers 5 dropped the flag: safetensors is the only format
        model.save_pretrained(folder)


def load(folder, dtype, name=None, like=None):
    if name == OCR_CASE:
        # No class loads this folder: the built model's parameters, rounded to the checkpoint's
        # dtype as save_pretrained stored them (the engine's test reads the file itself). Only
        # the parameters: the rotary inv_freq buffer stays fp32, as from_pretrained computes it.
        model = copy.deepcopy(like)
        for p in model.parameters():
            p.data = p.data.to(getattr(torch, CASES[name][1])).to(dtype)
        model.eval()
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = PAD_ID
        return model
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    except TypeError:
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, torch_dtype=dtype)
    model.eval()
    # No EOS while making goldens: always 16 tokens (checked below never to contain EOS).
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = PAD_ID
    return model


def greedy(model, prompt, device):
    ids = torch.tensor([prompt], device=device)
    with torch.no_grad():
        prefill = model(input_ids=ids).logits[0].float().cpu()
        gc = transformers.GenerationConfig(do_sample=False, max_new_tokens=NEW_TOKENS,
                                           eos_token_id=None, pad_token_id=PAD_ID,
                                           bos_token_id=BOS_ID)
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                             generation_config=gc, output_logits=True,
                             return_dict_in_generate=True)
    tokens = out.sequences[0, len(prompt):].tolist()
    steps = torch.stack([l[0].float().cpu() for l in out.logits])
    assert len(tokens) == NEW_TOKENS, f"generated {len(tokens)} tokens"
    # Each token must hold the maximum of its row (compared by value: bf16 rows can tie).
    chosen = steps[torch.arange(NEW_TOKENS), torch.tensor(tokens)]
    assert torch.equal(chosen, steps.max(dim=-1).values), f"tokens {tokens} are not greedy"
    return prefill, steps, tokens


def recompute(model, prompt, tokens):
    """Logits of the whole sequence in one no-cache pass: checks generate's cached decode."""
    ids = torch.tensor([prompt + tokens[:-1]])
    with torch.no_grad():
        return model(input_ids=ids).logits[0, len(prompt) - 1:].float()


def top2_gap(logits):
    top = torch.topk(logits, 2, dim=-1).values
    return (top[:, 0] - top[:, 1]).tolist()


def write_bin(path, t):
    np.ascontiguousarray(t.numpy(), dtype="<f4").tofile(path)


def sig(x, digits=7):
    return float(f"{x:.{digits - 1}e}")


def tensor_listing(path):
    """Reads the safetensors header directly: names, dtypes and shapes exactly as stored."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    meta = header.pop("__metadata__", None)
    rows = [(k, v["dtype"], v["shape"]) for k, v in sorted(header.items())]
    return rows, meta


def make_case(name, out_root, has_cuda):
    ckpt_dtype = getattr(torch, CASES[name][1])
    folder = os.path.join(out_root, name)
    os.makedirs(folder, exist_ok=True)
    model = build(name)
    save_checkpoint(model, ckpt_dtype, folder)
    if name == OCR_CASE:
        ocr_config_json(folder, CASES[name][2])

    ref = load(folder, torch.float32, name, model)
    # The reloaded model must hold exactly the stored (dtype-rounded) values.
    stored = {k: v.to(ckpt_dtype).float() for k, v in model.state_dict().items()}
    for k, v in ref.state_dict().items():
        if k not in stored:
            raise RuntimeError(f"[{name}] reloaded model has an unexpected tensor {k}")
        if not torch.equal(v, stored[k]):
            raise RuntimeError(f"[{name}] tensor {k} changed in the save/load round trip")

    for prompt in PROMPTS:
        prefill, steps, tokens = greedy(ref, prompt, "cpu")
        if EOS_ID not in tokens:
            break
        print(f"[{name}] prompt {prompt} leads to EOS; trying the next one")
    else:
        raise RuntimeError(f"[{name}] every prompt produced EOS")
    assert torch.allclose(prefill[-1], steps[0], atol=1e-5), "prefill/step-0 logits disagree"
    redo = recompute(ref, prompt, tokens)
    cache_diff = (redo - steps).abs().max().item()
    gaps = top2_gap(steps)

    write_bin(os.path.join(folder, "prefill_fp32.bin"), prefill)
    write_bin(os.path.join(folder, "decode_fp32.bin"), steps)
    golden = {
        "case": name,
        "architecture": type(ref).__name__,
        "checkpoint_dtype": str(ckpt_dtype).replace("torch.", ""),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "vocab_size": VOCAB,
        "prompt_ids": prompt,
        "new_tokens": NEW_TOKENS,
        "eos_token_id": EOS_ID,
        "fp32": {
            "device": "cpu",
            "tokens": tokens,
            "top2_gap": [sig(g) for g in gaps],
            "prefill_logits": {"file": "prefill_fp32.bin", "shape": list(prefill.shape)},
            "decode_logits": {"file": "decode_fp32.bin", "shape": list(steps.shape)},
            "max_abs_diff_cached_vs_full_recompute": sig(cache_diff, 3),
            "logit_abs_max": sig(steps.abs().max().item(), 4),
        },
        "bin_format": "little-endian float32, row-major; decode row i holds the logits "
                      "tokens[i] was chosen from (row 0 = last prompt position)",
    }
    summary = (f"[{name}] prompt={prompt} fp32 tokens={tokens} min top2 gap={min(gaps):.4g} "
               f"cached-vs-full max|diff|={cache_diff:.3g}")

    if has_cuda:
        low = load(folder, torch.bfloat16, name, model).to("cuda")
        b_prefill, b_steps, b_tokens = greedy(low, prompt, "cuda")
        write_bin(os.path.join(folder, "prefill_bf16.bin"), b_prefill)
        write_bin(os.path.join(folder, "decode_bf16.bin"), b_steps)
        same = sum(a == b for a, b in zip(tokens, b_tokens))
        # Compare the bf16 prefill with fp32 on the same positions (decode may have diverged).
        pdiff = (b_prefill - prefill).abs().max().item()
        golden["bf16"] = {
            "device": torch.cuda.get_device_name(0),
            "tokens": b_tokens,
            "tokens_equal_to_fp32": same,
            "prefill_logits": {"file": "prefill_bf16.bin", "shape": list(b_prefill.shape)},
            "decode_logits": {"file": "decode_bf16.bin", "shape": list(b_steps.shape)},
            "prefill_max_abs_diff_vs_fp32": sig(pdiff, 3),
        }
        summary += f"\n[{name}] bf16 tokens={b_tokens} ({same}/{NEW_TOKENS} equal) " \
                   f"prefill max|bf16-fp32|={pdiff:.3g}"
        del low
    else:
        print(f"[{name}] no CUDA: bf16 reference skipped")

    with open(os.path.join(folder, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    print(summary)
    return folder


def loader_notes(config, rows):
    """What a loader has to know about this checkpoint, read from the files themselves."""
    notes = []
    if "rope_parameters" in config:
        notes.append(f"rope: `rope_parameters` = `{json.dumps(config['rope_parameters'])}` "
                     "(no top-level rope_theta / rope_scaling)")
    else:
        notes.append(f"rope: `rope_theta` = {config.get('rope_theta')}, "
                     f"`rope_scaling` = `{json.dumps(config.get('rope_scaling'))}`")
    if "head_dim" not in config:
        notes.append("`head_dim` absent: hidden_size / num_attention_heads")
    elif config["head_dim"] is None:
        notes.append("`head_dim` null: hidden_size / num_attention_heads")
    else:
        notes.append(f"`head_dim` {config['head_dim']}")
    for key in ("num_experts", "num_local_experts"):
        if key in config:
            notes.append(f"expert count under `{key}` = {config[key]}")
    experts = sorted({".".join(k.split(".")[3:]).replace(k.split(".")[5], "{e}", 1)
                      for k, _, _ in rows if ".experts." in k and k.split(".")[5].isdigit()})
    if experts:
        notes.append("experts stored one tensor per expert: "
                     + ", ".join(f"`model.layers.{{l}}.{e}`" for e in experts))
    if any(".experts." in k and not k.split(".")[5].isdigit() for k, _, _ in rows):
        notes.append("experts stored as fused 3-D tensors")
    notes.append("tied embeddings: no `lm_head.weight` stored" if config.get("tie_word_embeddings")
                 else "untied: `lm_head.weight` stored")
    return notes


def readme(out_root, folders):
    with open(os.path.join(folders[0], "golden.json")) as f:
        first = json.load(f)
    lines = [
        "# Fidelity goldens",
        "",
        "Made by `tools/make_goldens.py` on the GPU machine (transformers "
        f"{first['transformers_version']}, torch {first['torch_version']}): tiny random-init "
        "checkpoints of the supported families, saved with `save_pretrained`, and the "
        "reference logits and greedy tokens for a fixed prompt. `golden.json` in each folder "
        "says which files hold what; every `.bin` is little-endian float32, row-major.",
        "",
        "- `prefill_fp32.bin` `[prompt_len, vocab]`: fp32 logits of every prompt position, model "
        "loaded back in float32 on the CPU.",
        "- `decode_fp32.bin` `[16, vocab]`: row i holds the logits that greedy token i was chosen "
        "from (row 0 = last prompt position; row i > 0 after feeding token i-1 via the KV cache).",
        "- `prefill_bf16.bin`, `decode_bf16.bin`: the same from the model in bfloat16 on CUDA "
        "(its own greedy tokens are `bf16.tokens`).",
        "- `fp32.top2_gap`: top-1 minus top-2 logit per decode step; where it is small a bf16 "
        "engine may legitimately pick the other token, and from there on its sequence differs. "
        "Compare a bf16 engine by feeding it the fp32 tokens (teacher forcing) and checking its "
        "argmax only at steps with a clear gap.",
        "- generation_config.json has eos 2, bos 1, pad 0; no golden's tokens contain 2.",
        "- Norm weights are 1 + noise and biases are non-zero on purpose.",
        "",
    ]
    for folder in folders:
        name = os.path.basename(folder)
        with open(os.path.join(folder, "golden.json")) as f:
            g = json.load(f)
        with open(os.path.join(folder, "config.json")) as f:
            config_text = f.read().strip()
        rows, meta = tensor_listing(os.path.join(folder, "model.safetensors"))
        lines += [f"## {name} ({g['architecture']}, checkpoint {g['checkpoint_dtype']})", ""]
        lines += [f"- {n}" for n in loader_notes(json.loads(config_text), rows)]
        lines += ["", f"safetensors metadata: `{json.dumps(meta)}`", "", "```"]
        lines += [f"{k}  {dt}  {shape}" for k, dt, shape in rows]
        lines += ["```", "", "config.json:", "", "```json", config_text, "```", ""]
    with open(os.path.join(out_root, "README.md"), "w") as f:
        f.write("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                  "data", "goldens"))
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    ap.add_argument("--readme-only", action="store_true",
                    help="rewrite README.md from the folders already there (needs no torch)")
    args = ap.parse_args()
    out_root = os.path.abspath(args.out)
    if args.readme_only:
        readme(out_root, [os.path.join(out_root, name) for name in args.cases])
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    has_cuda = torch.cuda.is_available()
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, cuda {has_cuda}")
    os.makedirs(out_root, exist_ok=True)
    folders, failed = [], []
    for name in args.cases:
        try:
            folders.append(make_case(name, out_root, has_cuda))
        except Exception:  # report and go on: one family's failure should not hide the rest
            traceback.print_exc()
            failed.append(name)
    readme(out_root, folders)
    for folder in folders:
        rows, meta = tensor_listing(os.path.join(folder, "model.safetensors"))
        print(f"\n== {os.path.basename(folder)}: model.safetensors metadata {meta}")
        for k, dt, shape in rows:
            print(f"  {k}  {dt}  {shape}")
        with open(os.path.join(folder, "config.json")) as f:
            print("  config.json keys:", sorted(json.load(f)))
        size = sum(os.path.getsize(os.path.join(folder, x)) for x in os.listdir(folder))
        print(f"  folder size {size / 1e6:.2f} MB: {sorted(os.listdir(folder))}")
    if failed:
        sys.exit(f"FAILED cases: {failed}")
    print(f"all {len(folders)} cases written to {out_root}")


if __name__ == "__main__":
    main()
