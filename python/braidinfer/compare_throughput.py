"""The peer of `braidinfer bench throughput`: Hugging Face transformers' own continuous batching
(`model.generate_batch`) on the same model shape and load.

The model is built on the GPU from its config with random weights (bf16, no download), as
`braidinfer bench throughput --shape NAME` builds its own. Both run every request to its
max tokens: braidinfer ignores end-of-text, transformers is given an end-of-text id past the
vocabulary, which no step can produce. Prompts: N random token ids of input_len each, seeded. Greedy decoding.
Timed: the whole generate_batch call after a warm-up call on a few prompts (CUDA graphs and
kernels compiled outside the timing).

Run on the GPU machine, from the repository root:
    PYTHONPATH=python python3 -m braidinfer.compare_throughput --shape llama-3.1-8b
        [--input-len 1024] [--output-len 128] [--num-prompts 200] [--braidinfer-json F] [--json F]
With --braidinfer-json (the JSON of `braidinfer bench throughput` on the same shape and load), the
two throughputs are put side by side with their ratio.
"""

import argparse
import json
import random
import sys
import time

# The shapes of `braidinfer bench throughput --shape` (src/bench/suites/decode.cpp).
SHAPES = {
    "llama-3.1-8b": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                         num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                         max_position_embeddings=131072, rope_theta=500000.0, rms_norm_eps=1e-5,
                         rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 8192},
                         tie_word_embeddings=False),
    "llama-3.2-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                         num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                         head_dim=64, max_position_embeddings=131072, rope_theta=500000.0,
                         rms_norm_eps=1e-5,
                         rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 8192},
                         tie_word_embeddings=True),
}


def braidinfer_figures(path):
    """Output tokens/s and requests/s from a `bench throughput` JSON (its 'throughput ...' row)."""
    with open(path) as f:
        run = json.load(f)
    for row in run.get("rows", []):
        if row.get("name", "").startswith("throughput"):
            note = row.get("note", "")
            fig = {}
            for part in note.split(";")[0].split(","):
                value, _, unit = part.strip().partition(" ")
                fig[unit] = float(value)
            return {"requests_per_s": fig.get("req/s"), "output_tokens_per_s": fig.get("output tok/s"),
                    "total_tokens_per_s": fig.get("total tok/s"), "params": row.get("params")}
    return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shape", default="llama-3.1-8b", choices=sorted(SHAPES))
    p.add_argument("--input-len", type=int, default=1024)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--num-prompts", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--attn", default="paged|sdpa", help="attn_implementation for continuous batching")
    p.add_argument("--braidinfer-json", default=None)
    p.add_argument("--json", default=None)
    a = p.parse_args(argv)

    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.generation import GenerationConfig

    torch.manual_seed(a.seed)
    cfg = LlamaConfig(**SHAPES[a.shape])
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    try:
        model.set_attn_implementation(a.attn)
    except Exception as e:  # older or newer spellings: keep the default and say so
        print(f"compare_throughput: attn_implementation {a.attn!r} not set ({e}); using the default",
              file=sys.stderr)

    rng = random.Random(a.seed)
    prompts = [[rng.randrange(10, cfg.vocab_size) for _ in range(a.input_len)]
               for _ in range(a.num_prompts)]
    never = cfg.vocab_size + 7  # an end-of-text id no step can produce: run to max_new_tokens
    gen = GenerationConfig(max_new_tokens=a.output_len, do_sample=False, eos_token_id=never,
                           pad_token_id=0)

    def run(batch):  # generate_batch manages its own no-grad state (inference mode breaks it)
        return model.generate_batch(inputs=batch, generation_config=gen, progress_bar=False)

    run(prompts[:4])  # warm-up
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    outputs = run(prompts)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    generated = 0
    for out in outputs.values():
        toks = getattr(out, "generated_tokens", None)
        if toks is None:
            raise SystemExit(f"compare_throughput: no generated_tokens in transformers' output: {out!r}")
        generated += len(toks)
    if generated == 0 or len(outputs) != a.num_prompts:
        raise SystemExit(f"compare_throughput: transformers finished {len(outputs)} of {a.num_prompts} "
                         f"requests with {generated} tokens: the run failed")
    result = {
        "suite": "compare_throughput", "peer": f"transformers {transformers.__version__} generate_batch",
        "torch": torch.__version__, "device": torch.cuda.get_device_name(0), "shape": a.shape,
        "input_len": a.input_len, "output_len": a.output_len, "num_prompts": a.num_prompts,
        "attn_implementation": a.attn, "seconds": elapsed, "generated_tokens": generated,
        "requests_per_s": a.num_prompts / elapsed, "output_tokens_per_s": generated / elapsed,
        "total_tokens_per_s": (generated + a.num_prompts * a.input_len) / elapsed,
    }
    print(f"transformers generate_batch, {a.shape} random bf16 on {result['device']}: "
          f"{a.num_prompts} prompts x {a.input_len} in / {a.output_len} out in {elapsed:.2f} s: "
          f"{result['requests_per_s']:.2f} req/s, {result['output_tokens_per_s']:.0f} output tok/s, "
          f"{result['total_tokens_per_s']:.0f} total tok/s")
    if a.braidinfer_json:
        ours = braidinfer_figures(a.braidinfer_json)
        result["braidinfer"] = ours
        if ours and ours.get("output_tokens_per_s"):
            result["speedup_output_tokens"] = ours["output_tokens_per_s"] / result["output_tokens_per_s"]
            print(f"braidinfer ({ours['params']}): {ours['output_tokens_per_s']:.0f} output tok/s, "
                  f"{result['speedup_output_tokens']:.2f}x transformers")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
