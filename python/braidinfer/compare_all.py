"""`python -m braidinfer.compare all`: every comparison in one process, one JSON.

Runs, one after the other, each module's comparison of braidinfer beside its PyTorch peers:

  attention   attention_prefill / naive attention, SDPA FlashAttention-2, SDPA cuDNN
  decode      attention_decode / SDPA (cuDNN, FlashAttention)
  router      moe_route_topk_softmax / torch softmax + topk
  moe         the MoE layer / torch._grouped_mm pipeline, transformers' per-expert loop, dense
              cuBLAS
  moe-fp8     the fp8 MoE / torch._scaled_grouped_mm pipeline (and seed 003's torch reference)
  gemm        ops.gemm / torch.matmul (cuBLAS), Llama-3-8B projections, M = 1, 16, 128, 4096
  prefill     transformers LlamaForCausalLM prefill (beside `braidinfer bench prefill --json`
              when --braidinfer-prefill-json is given)

and writes

  {"schema": "braidinfer.compare.all/1", "environment": {...}, "comparisons": {name: that
   module's report, or {"error": "..."} when it failed}, "rows": [normalised rows]}

(rows: braidinfer/compare_rows.py). The JSON is written again after each comparison, so an
interrupted run keeps what it measured; a comparison that fails (out of memory, a missing torch
feature) is recorded and the run goes on. Progress (which comparison, seconds elapsed) goes to
stderr, each module's own tables to stdout.

Default: each module's standard shapes (several minutes on an H100). --quick shrinks them:
attention the first three ANCHORS.md configurations and the memory table at 2048 tokens, decode
two shapes, router 1 and 256 tokens, moe seed001 4x512 and qwen3 T=512 with short timings, moe-fp8
seed003 T=16 and seed001 4x512, gemm M = 1 and 4096, prefill the first two pairs of each model.

    PYTHONPATH=python BRAIDINFER_LIBRARY=<dir with libbraid.so> \\
        python3 -m braidinfer.compare all [--quick] [--only a,b] [--skip a,b]
        [--braidinfer-prefill-json F] [--json compare_all.json]
"""

import argparse
import datetime
import importlib
import json
import os
import platform
import subprocess
import sys
import time

from . import compare_harness, compare_rows
from .compare import SUBCOMMANDS
from .compare_harness import cuda_torch_missing, error_string, save_json as save
from .compare_rows import COMPARISONS, SCHEMA_ALL


def _module(name):
    return importlib.import_module("." + SUBCOMMANDS[name], __package__ or "braidinfer")


# ---- one comparison, standard or quick --------------------------------------------------------


def run_comparison(name, quick=False, prefill_json=None):
    """The report dict of one comparison (its module's run()), measured on the GPU."""
    m = _module(name)
    if name == "attention":
        args = m.build_parser().parse_args([])
        if quick:
            return m.run(args, configs=m.ANCHOR_CONFIGS[:3], memory_lengths=m.MEMORY_LENGTHS[:1])
        return m.run(args)
    if name == "decode":
        args = m.build_parser().parse_args([])
        return m.run(args, shapes=[m.SHAPES[0], m.SHAPES[2]] if quick else m.SHAPES)
    if name == "router":
        args = m.build_parser().parse_args([])
        return m.run(args, tokens_list=[1, 256] if quick else m.TOKENS)
    if name == "moe":
        args = m.build_parser().parse_args(["--quick"] if quick else [])
        configs = (m.select_configs("seed001", [2048]) + m.select_configs("qwen3", [512])
                   if quick else m.select_configs())
        return m.run(args, configs)
    if name == "moe-fp8":
        args = m.build_parser().parse_args(["--quick"] if quick else [])
        configs = (m.select_configs("seed003", [16]) + m.select_configs("seed001", [2048])
                   if quick else m.select_configs())
        return m.run(args, configs)
    if name == "gemm":
        return m.run(m.build_parser().parse_args(["--quick"] if quick else []))
    if name == "prefill":
        argv = (["--quick"] if quick else []) + (
            ["--braidinfer-json", prefill_json] if prefill_json else [])
        return m.run(m.build_parser().parse_args(argv))
    raise ValueError(f"unknown comparison '{name}'")


# ---- environment -----------------------------------------------------------------------------


def _nvidia_driver():
    """The NVIDIA kernel module's version ("580.95.05"), or None."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            for word in f.readline().split():
                if word[:1].isdigit() and "." in word:
                    return word
    except OSError:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else None
    except (OSError, subprocess.SubprocessError):
        return None


def _cuda_driver_api():
    """cuDriverGetVersion as "13.0", or None."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(v)) != 0:
            return None
        return f"{v.value // 1000}.{(v.value % 1000) // 10}"
    except OSError:
        return None


def _git_commit():
    if os.environ.get("BRAID_GIT_COMMIT"):
        return os.environ["BRAID_GIT_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=20)
        return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def environment():
    """The machine and software versions the run had (each field None where unknown)."""
    info = compare_harness.environment()
    env = {"date": info.pop("date"), "git_commit": _git_commit(), "gpu": info.pop("device"),
           "driver": _nvidia_driver(), "cuda_driver": _cuda_driver_api(),
           "cuda": info.pop("torch_cuda"), "python": platform.python_version()}
    env.update(info)
    env.pop("timing", None)  # each module states its own timing method
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        env["transformers"] = None
    return env


# ---- the run ---------------------------------------------------------------------------------


def progress(message):
    print(f"[compare all] {message}", file=sys.stderr, flush=True)


def select(only=None, skip=None):
    """The comparisons to run, in COMPARISONS' order. Raises ValueError naming unknown ones."""
    for names, flag in ((only, "--only"), (skip, "--skip")):
        unknown = [n for n in names or [] if n not in COMPARISONS]
        if unknown:
            raise ValueError(f"{flag}: unknown {', '.join(unknown)} (choose from "
                             f"{', '.join(COMPARISONS)})")
    return [n for n in COMPARISONS if (not only or n in only) and n not in (skip or [])]


def run_all(names, path, quick=False, prefill_json=None, runner=run_comparison, env=None):
    """Runs `names` one after the other into one document, saved to `path` after each; returns
    it. A failing comparison is recorded as {"error": ...} and the run goes on."""
    document = {"schema": SCHEMA_ALL, "environment": env if env is not None else environment(),
                "quick": quick, "comparisons": {}, "rows": [], "seconds": {}}
    save(document, path)
    start = time.monotonic()
    for i, name in enumerate(names, 1):
        t0 = time.monotonic()
        progress(f"{name} ({i}/{len(names)}) starting, {t0 - start:.0f} s elapsed")
        try:
            report = runner(name, quick=quick, prefill_json=prefill_json)
        except Exception as e:  # out of memory, a missing torch feature: recorded, go on
            report = {"error": error_string(e)}
        finally:
            _free_gpu_memory()
        document["comparisons"][name] = report
        try:
            rows = compare_rows.normalise(name, report)
        except Exception as e:  # the report is kept even if its rows cannot be read
            rows = []
            document.setdefault("normalise_errors", {})[name] = f"{type(e).__name__}: {e}"
        document["rows"] += rows
        dt = time.monotonic() - t0
        document["seconds"][name] = round(dt, 1)
        save(document, path)
        status = (f"FAILED ({report['error']})" if compare_rows.is_failure(report)
                  else f"{len(rows)} rows")
        progress(f"{name}: {status} in {dt:.1f} s, {time.monotonic() - start:.0f} s elapsed; "
                 f"saved {path}")
    return document


def _free_gpu_memory():
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        try:
            torch.cuda.synchronize()
        except Exception:  # a broken context: the next comparison will report it
            pass
        torch.cuda.empty_cache()


def build_parser():
    parser = argparse.ArgumentParser(
        prog="python3 -m braidinfer.compare all",
        description="every comparison of braidinfer with its PyTorch peers, in one process, "
                    "into one JSON")
    names = lambda s: [v for v in s.split(",") if v]  # noqa: E731
    parser.add_argument("--quick", action="store_true", help="smaller shapes, shorter timings")
    parser.add_argument("--only", type=names, help=f"comma-separated, of {','.join(COMPARISONS)}")
    parser.add_argument("--skip", type=names, help="comma-separated comparisons to leave out")
    parser.add_argument("--braidinfer-prefill-json",
                        help="`braidinfer bench prefill --json` output for the prefill comparison")
    parser.add_argument("--json", default="compare_all.json",
                        help="the output (default compare_all.json)")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        names = select(args.only, args.skip)
        if args.braidinfer_prefill_json:  # a bad file fails now, not after the other comparisons
            from .compare_prefill import braidinfer_rows

            with open(args.braidinfer_prefill_json) as f:
                braidinfer_rows(json.load(f), args.braidinfer_prefill_json)
    except (ValueError, OSError) as e:
        parser.error(str(e))
    missing = cuda_torch_missing("compare all")
    if missing:
        print(missing, file=sys.stderr)
        return 2
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    progress(f"{', '.join(names)}{' (quick)' if args.quick else ''} into {args.json}, "
             f"started {started}")
    document = run_all(names, args.json, args.quick, args.braidinfer_prefill_json)
    failed = [n for n, r in document["comparisons"].items() if compare_rows.is_failure(r)]
    progress(f"done: {len(document['rows'])} rows"
             + (f"; failed: {', '.join(failed)}" if failed else "") + f"; wrote {args.json}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
