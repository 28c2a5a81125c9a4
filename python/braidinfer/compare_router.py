"""Same-run peer for braidinfer's MoE router (moe_route_topk_softmax), Qwen3-30B-A3B's shape:
128 experts, top-8, bf16 logits, renormalised (norm_topk_prob).

  braidinfer     braidinfer.ops.moe_route_topk_softmax(logits, 8, True, weights, ids), outputs
                 allocated once (f32 weights, i32 ids)
  torch          transformers' Qwen3-MoE router: softmax(logits, dim=-1, dtype=float32), topk(8),
                 weights /= their sum (the final cast of the weights to bf16 is left out: braidinfer
                 keeps them fp32, and leaving it out only makes PyTorch faster)
  torch_float    the same with the logits cast first: softmax(logits.float(), -1), topk, renormalise

Timings (microseconds), for 1, 4, 256 and 1024 tokens of random bf16 logits (randn):
  alone   an event pair around one call, the host synchronised before each (seed 000's method,
          as `braidinfer bench router` times its kernel): median, min and max of many calls.
          From Python this includes the host-side cost of the call (ctypes for braidinfer, the
          dispatcher for torch) whenever it exceeds the GPU's idle gap: what a caller pays.
  graph   GRAPH_CALLS calls captured in one CUDA graph, an event pair around each replay,
          median / GRAPH_CALLS: GPU time without host overhead.
The ratio is torch time / braidinfer time (the issue's target: >= 5x, and <= 4 us per call alone).
Correctness: braidinfer's ids against torch's row by row (equal; equal up to ties, i.e. the chosen
logits agree in value but tied experts are ordered differently, which torch.topk does not
specify; or different), and the largest |weight difference| position by position.

Run on the GPU machine, from the repository root:
    PYTHONPATH=python BRAIDINFER_LIBRARY=<dir with libbraid.so> \\
        python3 -m braidinfer.compare router [--json FILE]
"""

import sys

from . import ops
from .compare_harness import (capture_graph, environment, error_string, event_times_ms,
                              fmt_median, fmt_range, fmt_ratio, main as run_main, parser,
                              print_environment, summary, time_alone)

TOKENS = [1, 4, 256, 1024]
EXPERTS, TOP_K = 128, 8
WARMUP, REPS = 50, 1000
GRAPH_CALLS, GRAPH_REPS = 100, 50
TARGET_ALONE_US, TARGET_SPEEDUP = 4.0, 5.0
SEED = 0x2007E5EED


# ---- timing ----------------------------------------------------------------------------------


def time_graph(fn, calls=GRAPH_CALLS, reps=GRAPH_REPS):
    """`calls` calls captured once, replayed; per-call time = replay time / calls."""
    import torch

    graph = capture_graph(fn, calls, 3)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    return summary([t * 1e3 for t in event_times_ms(graph.replay, calls, reps)])


# ---- the implementations ---------------------------------------------------------------------
# Each maker returns fn() -> (weights [T, k] f32, ids [T, k]).


def make_braidinfer(logits):
    import torch

    weights = torch.empty(logits.shape[0], TOP_K, dtype=torch.float32, device=logits.device)
    ids = torch.empty(logits.shape[0], TOP_K, dtype=torch.int32, device=logits.device)

    def fn():
        return ops.moe_route_topk_softmax(logits, TOP_K, True, weights, ids)

    return fn


def make_torch(logits):
    import torch

    def fn():  # transformers, Qwen3MoeSparseMoeBlock / its top-k router
        p = torch.nn.functional.softmax(logits, dim=-1, dtype=torch.float)
        w, ids = torch.topk(p, TOP_K, dim=-1)
        w /= w.sum(dim=-1, keepdim=True)
        return w, ids

    return fn


def make_torch_float(logits):
    import torch

    def fn():
        p = torch.softmax(logits.float(), -1)
        w, ids = torch.topk(p, TOP_K, dim=-1)
        w /= w.sum(dim=-1, keepdim=True)
        return w, ids

    return fn


MAKERS = {"braidinfer": make_braidinfer, "torch": make_torch, "torch_float": make_torch_float}


# ---- correctness -----------------------------------------------------------------------------


def compare_outputs(logits, got, want):
    """braidinfer's (weights, ids) against torch's: rows with equal ids, rows equal up to ties
    (same chosen logit values in the same order, tied experts swapped), other rows, and the max
    |weight difference| (position by position: both lists are in descending order, and tied
    experts carry equal weights)."""
    import torch

    w_got, ids_got = got[0].float(), got[1].long()
    w_want, ids_want = want[0].float(), want[1].long()
    exact = (ids_got == ids_want).all(dim=-1)
    same_values = (logits.gather(1, ids_got) == logits.gather(1, ids_want)).all(dim=-1)
    ties = same_values & ~exact
    return {
        "rows": int(ids_got.shape[0]),
        "ids_equal_rows": int(exact.sum().item()),
        "ids_tie_rows": int(ties.sum().item()),
        "ids_different_rows": int((~same_values).sum().item()),
        "max_abs_weight_error": (w_got - w_want).abs().max().item(),
        "nan": bool(torch.isnan(w_got).any().item()),
    }


# ---- one token count -------------------------------------------------------------------------


def run_tokens(tokens):
    import torch

    gen = torch.Generator(device="cuda").manual_seed(SEED + tokens)
    logits = torch.randn(tokens, EXPERTS, generator=gen, dtype=torch.bfloat16, device="cuda")
    result = {"tokens": tokens, "experts": EXPERTS, "k": TOP_K, "impls": {}}
    outputs = {}
    for name, make in MAKERS.items():
        row = {"alone": None, "graph": None, "error": None}
        try:
            fn = make(logits)
            out = fn()
            torch.cuda.synchronize()
            outputs[name] = (out[0].clone(), out[1].clone())
            row["alone"] = time_alone(fn, WARMUP, REPS)
            row["graph"] = time_graph(fn)
        except Exception as e:  # one failing implementation must not stop the others
            row["error"] = error_string(e)
        result["impls"][name] = row
    if "braidinfer" in outputs and "torch" in outputs:
        result["check_vs_torch"] = compare_outputs(logits, outputs["braidinfer"], outputs["torch"])
    braid = result["impls"]["braidinfer"]
    for peer in ("torch", "torch_float"):
        p = result["impls"][peer]
        for mode in ("alone", "graph"):
            ok = braid[mode] and p[mode]
            result.setdefault("speedup", {})[f"{peer}_{mode}"] = (
                p[mode]["median_us"] / braid[mode]["median_us"] if ok else None)
    return result


# ---- report ----------------------------------------------------------------------------------


def print_report(results):
    print(f"\nMoE router, E={EXPERTS} k={TOP_K}, bf16 logits, renormalised; microseconds per call")
    print(f"{'tokens':>6} {'impl':<12} {'alone med':>10} {'alone min-max':>16} {'graph':>8}  "
          f"error")
    for r in results:
        for name, row in r["impls"].items():
            alone, graph = row["alone"], row["graph"]
            print(f"{r['tokens']:>6} {name:<12} {fmt_median(alone, 'us', 2):>10} "
                  f"{fmt_range(alone, 'us', 2):>16} {fmt_median(graph, 'us', 2):>8}  "
                  f"{row['error'] or ''}")
    print(f"\n{'tokens':>6} {'torch/braid alone':>18} {'graph':>7} {'torch_float/braid alone':>24} "
          f"{'graph':>7} {'ids equal/ties/diff':>20} {'max |dw|':>9}")
    for r in results:
        s, c = r.get("speedup", {}), r.get("check_vs_torch")
        ids = (f"{c['ids_equal_rows']}/{c['ids_tie_rows']}/{c['ids_different_rows']}" if c
               else "-")
        err = f"{c['max_abs_weight_error']:.1e}" if c else "-"
        x = {key: fmt_ratio(s.get(key), 1) for key in ("torch_alone", "torch_graph",
                                                        "torch_float_alone", "torch_float_graph")}
        print(f"{r['tokens']:>6} {x['torch_alone']:>18} {x['torch_graph']:>7} "
              f"{x['torch_float_alone']:>24} {x['torch_float_graph']:>7} "
              f"{ids:>20} {err:>9}")
    print(f"\ntargets: braidinfer <= {TARGET_ALONE_US:g} us per call alone; torch / braidinfer "
          f">= {TARGET_SPEEDUP:g}x")
    for r in results:
        b = r["impls"]["braidinfer"]["alone"]
        alone = ("-" if not b else
                 f"{b['median_us']:.2f} us {'met' if b['median_us'] <= TARGET_ALONE_US else 'not met'}")

        def ratio(key):
            sp = r.get("speedup", {}).get(key)
            return "-" if not sp else f"{sp:.1f}x {'met' if sp >= TARGET_SPEEDUP else 'not met'}"

        print(f"  tokens={r['tokens']:<5} alone {alone}; vs torch: alone {ratio('torch_alone')}, "
              f"graph {ratio('torch_graph')}")
    print("(ratio = torch median / braidinfer median; ids equal/ties/diff = rows of braidinfer's ids"
          " against torch.topk's)")


def build_parser():
    return parser("router", "braidinfer moe_route_topk_softmax beside PyTorch softmax + topk "
                            f"(E={EXPERTS}, k={TOP_K}, bf16, renormalised) at {TOKENS} tokens")


def run(args, tokens_list=TOKENS):
    """Measures and prints the comparison; returns its report ({"info", "config", "results"}),
    written to --json by main(). Needs torch with a CUDA device."""
    info = environment()
    info["timing"] = (f"alone: event pair around one call after a host sync, median of {REPS} "
                      f"({WARMUP} warm-up); graph: {GRAPH_CALLS} calls per CUDA graph, median "
                      f"of {GRAPH_REPS} replays / {GRAPH_CALLS}; L2 not flushed")
    print_environment(info)
    report = {"info": info,
              "config": {"experts": EXPERTS, "k": TOP_K, "dtype": "bf16", "renormalize": True,
                         "logits": "randn", "tokens": list(tokens_list),
                         "targets": {"alone_us": TARGET_ALONE_US,
                                     "speedup_vs_torch": TARGET_SPEEDUP}},
              "results": []}
    for tokens in tokens_list:
        report["results"].append(run_tokens(tokens))
    print_report(report["results"])
    return report


def main(argv=None):
    return run_main("router", build_parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
