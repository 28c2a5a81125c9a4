"""Same-run peer for braidinfer's GEMM (ops.gemm: out = a @ w.T, bf16 in and out, fp32
accumulation) beside torch.matmul (cuBLAS), on Llama-3-8B's projections (hidden 4096, 32 query
heads and 8 KV heads of 128, intermediate 14336), as braidinfer's forward runs them: q, k and v
fused into one [6144, 4096] weight, o_proj [4096, 4096], gate and up fused [28672, 4096], down
[4096, 14336]; at M = 1, 16, 128 and 4096 tokens.

  braidinfer     braidinfer.ops.gemm(a, w, out=out), out allocated once
  torch_matmul   torch.matmul(a, w.t(), out=out): the same product through cuBLAS, same output

Per row: microseconds (median of CUDA-event timings with the L2 flushed before each call, as
compare_decode times), TFLOP/s (2*M*N*K), GB/s (a, w and out once, bf16), the speed-up (torch
time / braidinfer time), and each output against an fp32 reference computed from the same bf16
inputs: max abs, mean abs, max rel (|d| / max(|ref|, 0.1 * RMS of the output row), as the C++
benchmarks measure it) and ||d|| / ||ref||.

Run on the GPU machine, from the repository root:
    PYTHONPATH=python BRAIDINFER_LIBRARY=<dir with libbraid.so> \\
        python3 -m braidinfer.compare gemm [--quick] [--json FILE]
"""

import sys

from . import ops
from .compare_harness import (environment, error_string, main as run_main, parser,
                              print_environment, save_json, time_us)

MODEL = "llama-3-8b"
PROJECTIONS = [("qkv", 6144, 4096), ("o_proj", 4096, 4096), ("gate_up", 28672, 4096),
               ("down", 4096, 14336)]  # (name, N, K)
TOKENS = [1, 16, 128, 4096]
QUICK_TOKENS = [1, 4096]
IMPLEMENTATIONS = ["braidinfer", "torch_matmul"]
SEED = 0x6E3301


# ---- pure helpers (no torch) -----------------------------------------------------------------


def cases(tokens=TOKENS):
    """[(projection, M, N, K)] in the order they are measured."""
    return [(name, m, n, k) for name, n, k in PROJECTIONS for m in tokens]


def gemm_flops(m, n, k):
    return 2 * m * n * k


def gemm_bytes(m, n, k, dtype_bytes=2):
    """a, w and out crossing DRAM once."""
    return (m * k + n * k + m * n) * dtype_bytes


def speedup(result):
    """torch_matmul median / braidinfer median, None where either is missing."""
    b = result["impls"].get("braidinfer", {}).get("median_us")
    t = result["impls"].get("torch_matmul", {}).get("median_us")
    return t / b if b and t else None


def format_result(r):
    lines = []
    for name, row in r["impls"].items():
        c = row.get("check") or {}
        us = f"{row['median_us']:.2f}" if row.get("median_us") else "-"
        tf = f"{row['tflops']:.1f}" if row.get("tflops") else "-"
        gb = f"{row['gbps']:.0f}" if row.get("gbps") else "-"
        err = (f"{c['max_abs']:.2e} {c['mean_abs']:.2e} {c['max_rel']:.2e} {c['rel_l2']:.2e}"
               if c else "-")
        lines.append(f"{r['projection']:<8} {r['m']:>5} {r['n']:>6} {r['k']:>6} {name:<13} "
                     f"{us:>10} {tf:>8} {gb:>7}  {err}  {row.get('error') or ''}")
    s = r.get("speedup")
    lines.append(f"{'':<29}torch / braidinfer: {f'{s:.2f}x' if s else '-'}")
    return "\n".join(lines)


# ---- measuring -------------------------------------------------------------------------------


def error_stats(out, ref):
    """out against the fp32 ref, per output row as the C++ ErrorAccumulator measures."""
    import torch

    d = (out.float() - ref).abs()
    rms = ref.pow(2).mean(dim=-1, keepdim=True).sqrt()
    rel = d / torch.maximum(ref.abs(), 0.1 * rms)
    return {"max_abs": d.max().item(), "mean_abs": d.mean().item(), "max_rel": rel.max().item(),
            "rel_l2": (d.norm() / ref.norm()).item(),
            "nonfinite": int((~torch.isfinite(out)).sum().item())}


def run_case(projection, m, n, k):
    import torch

    result = {"projection": projection, "m": m, "n": n, "k": k, "flops": gemm_flops(m, n, k),
              "bytes": gemm_bytes(m, n, k), "impls": {}}
    g = torch.Generator(device="cuda").manual_seed(SEED + m * n + k)
    a = torch.randn(m, k, generator=g, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, generator=g, device="cuda", dtype=torch.bfloat16).mul_(k ** -0.5)
    ref = a.float() @ w.float().t()
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    calls = {"braidinfer": lambda: ops.gemm(a, w, out=out),
             "torch_matmul": lambda: torch.matmul(a, w.t(), out=out)}
    for name in IMPLEMENTATIONS:
        row = result["impls"][name] = {}
        try:
            out.zero_()
            calls[name]()
            torch.cuda.synchronize()
            row["check"] = error_stats(out, ref)
            row["median_us"] = time_us(calls[name])
            row["tflops"] = result["flops"] / row["median_us"] / 1e6
            row["gbps"] = result["bytes"] / row["median_us"] / 1e3
        except Exception as e:  # one failing implementation must not stop the other
            row["error"] = error_string(e)
    result["speedup"] = speedup(result)
    del a, w, ref, out
    torch.cuda.empty_cache()
    return result


def build_parser():
    return parser("gemm", "braidinfer ops.gemm beside torch.matmul (cuBLAS), bf16, on Llama-3-8B's "
                          f"projections at M = {', '.join(map(str, TOKENS))}",
                  quick=f"M = {', '.join(map(str, QUICK_TOKENS))} only")


def run(args):
    """Measures and prints the comparison; returns its report ({"info", "config", "results"}),
    also written to args.json after each case when set. Needs torch with a CUDA device."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is fp32
    info = environment()
    tokens = QUICK_TOKENS if args.quick else TOKENS
    print_environment(info)
    report = {"info": info,
              "config": {"model": MODEL, "dtype": "bf16", "tokens": tokens,
                         "projections": [{"name": p, "n": n, "k": k} for p, n, k in PROJECTIONS]},
              "results": []}
    print(f"{'proj':<8} {'M':>5} {'N':>6} {'K':>6} {'impl':<13} {'median us':>10} {'TFLOP/s':>8} "
          f"{'GB/s':>7}  max abs / mean abs / max rel / rel L2 vs fp32")
    for projection, m, n, k in cases(tokens):
        result = run_case(projection, m, n, k)
        report["results"].append(result)
        print(format_result(result), flush=True)
        if args.json:  # after each case, so an interrupted run keeps what it measured
            save_json(report, args.json)
    return report


def main(argv=None):
    return run_main("gemm", build_parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
