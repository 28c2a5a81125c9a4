"""The end-to-end prefill peer of `braidinfer bench prefill`: Hugging Face transformers'
LlamaForCausalLM on seed 001's three model shapes, one forward pass over a batch of prompts.

Models (random weights, bf16, attn_implementation="sdpa", built on the GPU from a LlamaConfig: no
download), as src/bench/suites/prefill.cpp defines them: Llama layers with a SwiGLU MLP, one KV
head per query head, vocab 32000, RoPE theta 10000, RMS norm eps 1e-5, untied LM head, 4096 positions:

  small    12 layers, hidden  768, 12 heads, intermediate  2048   1x128, 4x512, 16x2048
  medium   24 layers, hidden 2048, 16 heads, intermediate  5632   1x128, 4x512,  8x1024
  large    32 layers, hidden 4096, 32 heads, intermediate 11008   1x128, 4x512,  8x2048

One step: model(input_ids, logits_to_keep=1) under torch.inference_mode(): every prompt's
tokens through every layer (causal SDPA, K and V kept in transformers' cache, use_cache at its
default True, as braidinfer's prefill writes its KV cache), logits of the last token only.
Timing: an event pair around each forward, 2 warm-up forwards, median (and min / max) of N; tokens/s
= batch x length / median seconds. The model is freed between shapes.

braidinfer's side is `braidinfer bench prefill --json F` (rows "prefill_forward", params
"<model> batch B seq L"); with --braidinfer-json F its rows are put beside transformers' (matched on
model, batch and length) with the speed-up transformers ms / braidinfer ms; without, transformers
is reported alone.

Run on the GPU machine, from the repository root:
    PYTHONPATH=python python3 -m braidinfer.compare prefill [--models small,medium,large]
        [--reps N] [--quick] [--braidinfer-json F] [--json FILE]
"""

import json
import re
import sys

from .compare_harness import environment as base_environment
from .compare_harness import error_string, event_times_ms, parser, save_json, summary_ms

MODELS = {  # name -> (layers, hidden, heads, intermediate)
    "small": (12, 768, 12, 2048),
    "medium": (24, 2048, 16, 5632),
    "large": (32, 4096, 32, 11008),
}
CASES = {  # name -> [(batch, length, seed 001's H100 ms)]
    "small": [(1, 128, 0.8), (4, 512, 4.2), (16, 2048, 28.0)],
    "medium": [(1, 128, 2.5), (4, 512, 15.0), (8, 1024, 45.0)],
    "large": [(1, 128, 6.2), (4, 512, 38.0), (8, 2048, 185.0)],
}
VOCAB, ROPE_THETA, RMS_EPS, MAX_POSITIONS = 32000, 10000.0, 1e-5, 4096
WARMUP, REPS, QUICK_REPS = 2, 10, 3
QUICK_CASES = 2  # --quick: the first two pairs of each model
IMPLEMENTATION = "transformers_sdpa"
SEED = 0x5EED001
PARAMS = re.compile(r"^(\w+) batch (\d+) seq (\d+)$")


# ---- pure helpers (no torch) -----------------------------------------------------------------


def select_cases(models=None, quick=False):
    """[(model, batch, length, seed ms)] for the named models (None: all), in MODELS' order."""
    names = list(MODELS) if models is None else list(models)
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        raise ValueError(f"--models: unknown {', '.join(unknown)} (known: {', '.join(MODELS)})")
    out = []
    for name in MODELS:
        if name in names:
            cases = CASES[name][:QUICK_CASES] if quick else CASES[name]
            out += [(name, b, s, ms) for b, s, ms in cases]
    return out


def tokens_per_s(batch, length, ms):
    return batch * length / (ms / 1e3) if ms else None


def braidinfer_rows(bench_report, source=""):
    """{(model, batch, length): row} from a `braidinfer bench prefill --json` report: its
    prefill_forward rows, with median_ms, tokens_per_s, flops and tflops. Raises ValueError
    naming what is wrong with the file."""
    if bench_report.get("schema") != "braidinfer.bench.run/1":
        raise ValueError(f"{source}: expected a braidinfer bench JSON (schema "
                         f"\"braidinfer.bench.run/1\"), got schema {bench_report.get('schema')!r}")
    rows = {}
    for r in bench_report.get("rows", []):
        if r.get("name") != "prefill_forward":
            continue
        m = PARAMS.match(r.get("params", ""))
        if not m:
            raise ValueError(f"{source}: prefill_forward row with params {r.get('params')!r}, "
                             "expected '<model> batch B seq L'")
        model, batch, length = m.group(1), int(m.group(2)), int(m.group(3))
        ms = r["median_us"] / 1e3
        rows[(model, batch, length)] = {
            "median_ms": ms, "min_ms": r.get("min_us", 0) / 1e3, "max_ms": r.get("max_us", 0) / 1e3,
            "tokens_per_s": tokens_per_s(batch, length, ms), "flops": r.get("flops"),
            "tflops": r.get("tflops"), "timing": r.get("timing"), "source": source}
    return rows


def attach_braidinfer(results, rows):
    """Puts braidinfer's row beside each result of the same (model, batch, length) and the
    speed-up (transformers ms / braidinfer ms); TFLOP/s of transformers from braidinfer's FLOPs
    (the same work)."""
    for r in results:
        b = rows.get((r["model"], r["batch"], r["seq"]))
        r["braidinfer"] = b
        t = r.get("transformers") or {}
        if b and t.get("median_ms"):
            r["speedup"] = t["median_ms"] / b["median_ms"]
            if b.get("flops"):
                t["tflops"] = b["flops"] / (t["median_ms"] * 1e-3) / 1e12
        else:
            r["speedup"] = None
    return results


def format_results(results):
    lines = [f"{'model':<7} {'batch':>5} {'seq':>5} {'transformers ms':>15} {'tokens/s':>10} "
             f"{'braidinfer ms':>13} {'tokens/s':>10} {'speed-up':>8} {'seed H100 ms':>12}  error"]
    for r in results:
        t, b = r.get("transformers") or {}, r.get("braidinfer") or {}
        ms = f"{t['median_ms']:.2f}" if t.get("median_ms") else "-"
        tps = f"{t['tokens_per_s']:.0f}" if t.get("tokens_per_s") else "-"
        bms = f"{b['median_ms']:.2f}" if b.get("median_ms") else "-"
        btps = f"{b['tokens_per_s']:.0f}" if b.get("tokens_per_s") else "-"
        sp = f"{r['speedup']:.2f}x" if r.get("speedup") else "-"
        lines.append(f"{r['model']:<7} {r['batch']:>5} {r['seq']:>5} {ms:>15} {tps:>10} {bms:>13} "
                     f"{btps:>10} {sp:>8} {r['seed_h100_ms']:>12}  {t.get('error') or ''}")
    lines.append("(speed-up = transformers ms / braidinfer ms; seed H100 ms: seed 001's table)")
    return "\n".join(lines)


# ---- transformers ----------------------------------------------------------------------------


def llama_config(name):
    """The LlamaConfig of MODELS[name], RoPE theta given the way this transformers takes it
    (rope_parameters in 5.x, rope_theta before)."""
    import inspect

    import transformers

    layers, hidden, heads, inter = MODELS[name]
    kw = dict(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=inter,
              num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
              max_position_embeddings=MAX_POSITIONS, rms_norm_eps=RMS_EPS,
              tie_word_embeddings=False)
    if "rope_parameters" in inspect.signature(transformers.LlamaConfig).parameters:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": ROPE_THETA}
    else:
        kw["rope_theta"] = ROPE_THETA
    config = transformers.LlamaConfig(**kw)
    # The setter every version since 4.36 has (a constructor keyword is not taken by all).
    config._attn_implementation = "sdpa"
    theta = (getattr(config, "rope_parameters", None) or {}).get("rope_theta",
                                                                  getattr(config, "rope_theta", None))
    if theta != ROPE_THETA:
        raise RuntimeError(f"LlamaConfig took RoPE theta {theta}, expected {ROPE_THETA}")
    return config


def build_model(name):
    """LlamaForCausalLM of MODELS[name] on the GPU, bf16 parameters created as bf16 (no fp32
    copy), random init, eval mode, SDPA attention (checked)."""
    import torch
    import transformers

    config = llama_config(name)
    torch.manual_seed(SEED)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = transformers.LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    model.eval()
    attn = getattr(model.config, "_attn_implementation", None)
    if attn != "sdpa":
        raise RuntimeError(f"the model runs attention '{attn}', expected 'sdpa'")
    return model


def logits_argument(model):
    """The name of forward's last-logits argument in this transformers version."""
    import inspect

    params = inspect.signature(model.forward).parameters
    for name in ("logits_to_keep", "num_logits_to_keep"):
        if name in params:
            return name
    raise RuntimeError("LlamaForCausalLM.forward takes neither logits_to_keep nor "
                       "num_logits_to_keep: cannot ask for the last token's logits only")


def time_forward(model, batch, length, reps):
    """Median / min / max ms of one forward over a [batch, length] prompt batch."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(SEED + batch * length)
    ids = torch.randint(3, VOCAB, (batch, length), generator=g, device="cuda")
    kwargs = {logits_argument(model): 1}
    with torch.inference_mode():
        out = model(input_ids=ids, **kwargs)
        if out.logits.shape[1] != 1:
            raise RuntimeError(f"logits of {out.logits.shape[1]} positions, expected 1")
        del out
        for _ in range(WARMUP - 1):
            model(input_ids=ids, **kwargs)
        torch.cuda.synchronize()
        result = summary_ms(event_times_ms(lambda: model(input_ids=ids, **kwargs), 1, reps))
    return {**result, "tokens_per_s": tokens_per_s(batch, length, result["median_ms"])}


def run_model(name, cases, reps):
    """Results of one model's cases; the model is built once and freed at the end."""
    import torch

    results = [{"model": name, "batch": b, "seq": s, "seed_h100_ms": ms, "transformers": None}
               for _, b, s, ms in cases]
    model = None
    try:
        model = build_model(name)
    except Exception as e:  # every case of the model reports it
        for r in results:
            r["transformers"] = {"error": error_string(e)}
    for r in results:
        if model is None:
            break
        try:
            r["transformers"] = time_forward(model, r["batch"], r["seq"], reps)
        except Exception as e:  # out of memory, a missing argument: recorded, the run goes on
            r["transformers"] = {"error": error_string(e)}
        torch.cuda.empty_cache()
        print(f"  {name} batch {r['batch']} seq {r['seq']}: "
              f"{(r['transformers'] or {}).get('median_ms', '-')} ms", file=sys.stderr, flush=True)
    del model
    torch.cuda.empty_cache()
    return results


def environment():
    info = base_environment()
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        info["transformers"] = None
    return info


def build_parser():
    p = parser("prefill", "transformers LlamaForCausalLM (sdpa, bf16, random weights) prefill on "
                          "seed 001's small / medium / large models, beside `braidinfer bench "
                          "prefill`",
               quick=f"the first {QUICK_CASES} batch x length pairs of each model, {QUICK_REPS} "
                     f"timed forwards")
    p.add_argument("--models", type=lambda s: s.split(","),
                   help=f"comma-separated (default: {','.join(MODELS)})")
    p.add_argument("--reps", type=int, help=f"timed forwards per case (default {REPS}; "
                                            f"{QUICK_REPS} with --quick)")
    p.add_argument("--braidinfer-json",
                   help="`braidinfer bench prefill --json` output to put beside")
    return p


def run(args):
    """Measures and prints the comparison; returns its report ({"info", "config", "results"}),
    also written to args.json after each model when set. Needs torch with a CUDA device and
    transformers. Raises ValueError for bad arguments or an unreadable --braidinfer-json."""
    cases = select_cases(args.models, args.quick)
    reps = args.reps or (QUICK_REPS if args.quick else REPS)
    if reps < 1:
        raise ValueError(f"--reps: expected >= 1, got {reps}")
    braid = {}
    if args.braidinfer_json:  # read first: a bad file fails before minutes of measuring
        with open(args.braidinfer_json) as f:
            braid = braidinfer_rows(json.load(f), args.braidinfer_json)
    info = environment()
    info["timing"] = (f"event pair around each forward, {WARMUP} warm-up, median of {reps}; "
                      "L2 not flushed")
    print(f"{info['device']}, torch {info['torch']} (CUDA {info['torch_cuda']}), transformers "
          f"{info['transformers']}")
    report = {"info": info,
              "config": {"implementation": IMPLEMENTATION, "dtype": "bf16",
                         "attn_implementation": "sdpa", "logits_to_keep": 1, "use_cache": True,
                         "models": {m: dict(zip(("layers", "hidden", "heads", "intermediate"),
                                                MODELS[m])) for m in MODELS},
                         "vocab": VOCAB, "rope_theta": ROPE_THETA, "rms_norm_eps": RMS_EPS,
                         "braidinfer_json": args.braidinfer_json},
              "results": []}
    for name in MODELS:
        model_cases = [c for c in cases if c[0] == name]
        if not model_cases:
            continue
        report["results"] += run_model(name, model_cases, reps)
        attach_braidinfer(report["results"], braid)
        if args.json:  # after each model, so an interrupted run keeps what it measured
            save_json(report, args.json)
    print(format_results(report["results"]))
    return report


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        select_cases(args.models, args.quick)
    except ValueError as e:
        parser.error(str(e))
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"compare prefill: needs torch (with CUDA) and transformers ({e})", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("compare prefill: no CUDA device", file=sys.stderr)
        return 2
    try:
        run(args)
    except (ValueError, OSError) as e:
        print(f"compare prefill: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
