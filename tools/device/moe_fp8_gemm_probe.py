"""Times (or, under ncu, just runs) moe_grouped_gemm_fp8 alone at the shapes of docs/perf/moe.md:
seed 003's GEMM1 and GEMM2 (8 hot experts of 32, hidden 7168, intermediate 2048) and seed 001's
layer in fp8 (32 experts, hidden 4096, intermediate 11008, top-2, pairs spread evenly).

    python3 tools/device/moe_fp8_gemm_probe.py [--cases NAME,...] [--reps N] [--once]

--once runs each case one time with no timing (for `ncu -k regex:grouped_gemm_fp8`). Otherwise
each case is timed with an event pair around a CUDA graph of --reps calls, and the median of
five replays is printed with its TFLOP/s. The operands are random (the time does
not depend on the values); this measures the kernel, not correctness (the tests do that).
"""

import argparse
import json

import torch

import braidinfer as bi

BLOCK = 128


def fp8_random(shape, gen):
    return (torch.randn(shape, generator=gen, device="cuda") * 64).clamp(-448, 448).to(
        torch.float8_e4m3fn)


def scales(shape, gen):
    return torch.rand(shape, generator=gen, device="cuda") * 1e-3 + 1e-4


def offsets_of(counts):
    off = [0]
    for c in counts:
        off.append(off[-1] + c)
    return torch.tensor(off, dtype=torch.int32, device="cuda")


def make_case(name, gen):
    """(callable, flops) of one case."""
    if name.startswith("s003"):  # s003_gemm1_t4096_r3 / s003_gemm2_t4096_r3 / ..._t1_...
        _, gemm, tok, terms = name.split("_")
        T, R = int(tok[1:]), int(terms[1:])
        H, I, E, hot = 7168, 2048, 32, 8
        counts = [T] * hot + [0] * (E - hot)
        M = T * hot
        off = offsets_of(counts)
        if gemm == "gemm1":
            x, xs = fp8_random((M, H), gen), scales((H // BLOCK, M), gen)
            w, ws = fp8_random((E, 2 * I, H), gen), scales((E, 2 * I // BLOCK, H // BLOCK), gen)
            y = torch.empty((M, R * I), dtype=torch.float8_e4m3fn, device="cuda")
            ys = torch.empty((R * I // BLOCK, M), dtype=torch.float32, device="cuda")
            fn = lambda: bi.moe_grouped_gemm_fp8(x, xs, w, ws, off, "swiglu_gate_last", y, ys)
            return fn, 2.0 * M * 2 * I * H
        x, xs = fp8_random((M, R * I), gen), scales((R * I // BLOCK, M), gen)
        w, ws = fp8_random((E, H, I), gen), scales((E, H // BLOCK, I // BLOCK), gen)
        y = torch.empty((M, H), dtype=torch.float32, device="cuda")
        fn = lambda: bi.moe_grouped_gemm_fp8(x, xs, w, ws, off, "none", y)
        return fn, 2.0 * M * H * I * R
    if name.startswith("s001"):  # s001_gemm1_16x2048 / s001_gemm2_16x2048
        _, gemm, size = name.split("_")
        b, s = (int(v) for v in size.split("x"))
        H, I, E, k = 4096, 11008, 32, 2
        M = b * s * k
        counts = [M // E] * E
        off = offsets_of(counts)
        if gemm == "gemm1":
            x, xs = fp8_random((M, H), gen), scales((H // BLOCK, M), gen)
            w, ws = fp8_random((E, 2 * I, H), gen), scales((E, 2 * I // BLOCK, H // BLOCK), gen)
            y = torch.empty((M, I), dtype=torch.float8_e4m3fn, device="cuda")
            ys = torch.empty((I // BLOCK, M), dtype=torch.float32, device="cuda")
            fn = lambda: bi.moe_grouped_gemm_fp8(x, xs, w, ws, off, "swiglu", y, ys)
            return fn, 2.0 * M * 2 * I * H
        x, xs = fp8_random((M, I), gen), scales((I // BLOCK, M), gen)
        w, ws = fp8_random((E, H, I), gen), scales((E, H // BLOCK, I // BLOCK), gen)
        y = torch.empty((M, H), dtype=torch.bfloat16, device="cuda")
        fn = lambda: bi.moe_grouped_gemm_fp8(x, xs, w, ws, off, "none", y)
        return fn, 2.0 * M * H * I
    raise SystemExit(f"unknown case {name!r}")


DEFAULT = ("s003_gemm1_t1_r3,s003_gemm2_t1_r3,s003_gemm2_t1_r1,s003_gemm1_t4096_r3,"
           "s003_gemm1_t4096_r1,s003_gemm2_t4096_r3,s001_gemm1_16x2048,s001_gemm2_16x2048")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default=DEFAULT)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--once", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(1)
    results = []
    for name in args.cases.split(","):
        fn, flops = make_case(name, gen)
        if args.once:
            fn()
            torch.cuda.synchronize()
            continue
        fn()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()  # no Python between the calls: T = 1 kernels are ~50 us
        with torch.cuda.graph(graph):
            for _ in range(args.reps):
                fn()
        graph.replay()
        times = []
        for _ in range(5):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / args.reps)
        ms = sorted(times)[2]
        results.append({"case": name, "median_ms": ms, "tflops": flops / ms / 1e9})
        print(f"{name:24s} {ms * 1e3:10.1f} us  {flops / ms / 1e9:7.1f} TFLOP/s", flush=True)
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
