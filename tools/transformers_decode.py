#!/usr/bin/env python3
"""The decode peer of `braidinfer bench decode`, measured in the same device call: Hugging Face
transformers on the same three shapes (random bf16 weights, batch 1), greedy decode with a static
KV cache, eager and with torch.compile(mode="reduce-overhead") (CUDA graphs), the recipe
ANCHORS.md's "transformers + torch.compile" row follows.

ms/token = (time of 80 new tokens - time of 16 new tokens) / 64 after a 256-token prompt, so
the prefill and the first steps cancel; medians of 3 runs, CUDA-synchronised wall time.

    python3 tools/transformers_decode.py [--json FILE] [--no-compile] [--shapes a,b]
"""

import argparse
import json
import statistics
import sys
import time

import torch
import transformers

SHAPES = {
    "qwen2.5-0.5b": dict(arch="Qwen2ForCausalLM", vocab_size=151936, hidden_size=896,
                         intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2, rope_theta=1e6, rms_norm_eps=1e-6,
                         tie_word_embeddings=True, max_position_embeddings=32768),
    "llama-3.2-1b": dict(arch="LlamaForCausalLM", vocab_size=128256, hidden_size=2048,
                         intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                         num_key_value_heads=8, head_dim=64, rope_theta=5e5, rms_norm_eps=1e-5,
                         tie_word_embeddings=True, max_position_embeddings=131072),
    "llama-2-7b": dict(arch="LlamaForCausalLM", vocab_size=32000, hidden_size=4096,
                       intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                       num_key_value_heads=32, rope_theta=1e4, rms_norm_eps=1e-5,
                       tie_word_embeddings=False, max_position_embeddings=4096),
}
PROMPT, SHORT, LONG, REPEATS = 256, 16, 80, 3


def build(shape):
    spec = dict(SHAPES[shape])
    arch = spec.pop("arch")
    config_cls = transformers.Qwen2Config if arch.startswith("Qwen2") else transformers.LlamaConfig
    config = config_cls(**spec)
    model_cls = getattr(transformers, arch)
    with torch.device("cuda"):
        model = model_cls(config).to(torch.bfloat16).eval()
    return model


def generate_seconds(model, ids, new_tokens):
    torch.cuda.synchronize()
    start = time.perf_counter()
    model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                   cache_implementation="static", pad_token_id=0)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def ms_per_token(model, ids):
    for n in (SHORT, LONG):  # warm-up (and, compiled, the captures)
        generate_seconds(model, ids, n)
    per = []
    for _ in range(REPEATS):
        t_long = generate_seconds(model, ids, LONG)
        t_short = generate_seconds(model, ids, SHORT)
        per.append((t_long - t_short) / (LONG - SHORT) * 1e3)
    return statistics.median(per)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args(argv)
    rows = []
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name()}")
    for shape in args.shapes.split(","):
        model = build(shape)
        ids = torch.randint(3, SHAPES[shape]["vocab_size"], (1, PROMPT), device="cuda")
        row = {"shape": shape, "prompt": PROMPT}
        with torch.inference_mode():
            try:
                row["eager_ms"] = ms_per_token(model, ids)
            except Exception as e:  # record and go on: one failing mode must not end the run
                row["eager_error"] = f"{type(e).__name__}: {e}"[:300]
            if not args.no_compile:
                try:
                    model.forward = torch.compile(model.forward, mode="reduce-overhead")
                    row["compile_ms"] = ms_per_token(model, ids)
                except Exception as e:
                    row["compile_error"] = f"{type(e).__name__}: {e}"[:300]
        print(json.dumps(row), flush=True)
        rows.append(row)
        del model
        torch.cuda.empty_cache()
        torch._dynamo.reset()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "transformers": transformers.__version__,
                       "device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
