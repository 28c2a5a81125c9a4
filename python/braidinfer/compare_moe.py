"""Same-run peers for braidinfer's MoE layer (bf16, SwiGLU experts, softmax top-k routing,
renormalised), on seed 001's layer (hidden 4096, intermediate 11008, 32 experts, top-2) at 4x512,
16x2048 and 32x2048 tokens and Qwen3-30B-A3B's (hidden 2048, intermediate 768, 128 experts,
top-8) at 512 and 4096 tokens. Every implementation computes the whole layer, x [T, H] -> out
[T, H], router GEMM included:

  braidinfer                 braidinfer.ops: gemm (router) -> moe_route_topk_softmax ->
                             moe_permute -> moe_gather -> moe_grouped_gemm("swiglu") ->
                             moe_grouped_gemm -> moe_combine, every buffer allocated once
  torch_grouped_mm           torch: linear (router), softmax in fp32, topk, renormalise; stable
                             argsort of the expert ids, histc counts -> int32 cumulative offsets,
                             index_select of the token rows, torch._grouped_mm(xs,
                             gate_up.transpose(-2, -1), offs=offs), silu(gate) * up,
                             torch._grouped_mm for down, scaled by the routing weights and
                             index_add_ back to the tokens
  torch_loop                 transformers' per-expert loop (Qwen3-MoE / Mixtral experts): for each
                             expert hit, torch.where its (slot, token) pairs, index the token rows,
                             linear gate_up, silu * mul, linear down, weight, index_add_
and, on the experts' GEMMs alone (the same gathered rows and offsets, T*k rows):
  braidinfer_experts         the two moe_grouped_gemm calls
  torch_grouped_mm_experts   the two torch._grouped_mm calls with silu * mul between them
  dense_cublas               torch.mm of all T*k rows by one expert's [H, 2I] then [I, H]
                             weights: the same FLOPs as one dense cuBLAS GEMM per projection

Timings (milliseconds, CUDA events): eager = an event pair around each call, median / min / max of
many (repetitions sized to ~1.5 s per implementation, L2 not flushed: the expert weights exceed
it); graph = the calls captured once in a torch CUDA graph, replayed (braidinfer's ctypes calls
launch on torch's current stream, so they are captured like torch's own kernels); torch_loop
synchronises with the host (torch.where) and has no graph. TFLOP/s = FLOPs / median, with
expert FLOPs 2*P*H*2I + 2*P*I*H (P = T*k pairs) plus the router's 2*T*E*H for whole layers.
Ratios: torch time / braidinfer time (the issue's target: >= 1.5x torch_grouped_mm's pipeline),
and braidinfer_experts' TFLOP/s as a percentage of dense_cublas's (target >= 85%).

Correctness: on a sample of tokens (64 by default, the first and last among them), every layer
output against an fp32 reference computed here from the same bf16 inputs and weights, with the
routing of torch's bf16 router logits (as transformers computes them): max abs, mean abs, max rel
(|d| / max(|ref|, 0.1 * RMS of the row)) and ||d|| / ||ref||. Rows whose chosen experts differ from
the reference's (a near-tie decided differently) are counted apart and left out of the errors.

Run on the GPU machine, from the repository root:
    PYTHONPATH=python BRAIDINFER_LIBRARY=<dir with libbraid.so> \\
        python3 -m braidinfer.compare moe [--shape seed001|qwen3|all] [--tokens N,...] [--json FILE]
"""

import random
import sys

from . import ops
from .compare_harness import (environment, error_string, fmt_error, fmt_median, fmt_range,
                              fmt_ratio, int_list, main as run_main, measure, parser,
                              print_environment, save_json)
from . import compare_harness

# How the timings fill BUDGET_MS (compare_harness's rule; the tests read it here).
plan_reps, graph_calls = compare_harness.plan_reps, compare_harness.graph_calls

SEED001 = {"name": "seed001", "hidden": 4096, "inter": 11008, "experts": 32, "k": 2}
QWEN3 = {"name": "qwen3", "hidden": 2048, "inter": 768, "experts": 128, "k": 8}
MODELS = {"seed001": SEED001, "qwen3": QWEN3}
PRESET_TOKENS = {"seed001": [4 * 512, 16 * 2048, 32 * 2048], "qwen3": [512, 4096]}
SEED001_LABELS = {4 * 512: "4x512", 16 * 2048: "16x2048", 32 * 2048: "32x2048"}

LAYER_IMPLS = ["braidinfer", "torch_grouped_mm", "torch_loop"]
EXPERT_IMPLS = ["braidinfer_experts", "torch_grouped_mm_experts", "dense_cublas"]
NO_GRAPH = {"torch_loop"}  # host synchronisation inside

TARGET_VS_GROUPED_MM = 1.5  # torch_grouped_mm time / braidinfer time
TARGET_PERCENT_OF_DENSE = 85.0  # braidinfer_experts TFLOP/s / dense_cublas TFLOP/s
REL_L2_TOLERANCE = 2e-2  # against fp32: bf16 rounding of g, u, h and out
SAMPLES = 64
BUDGET_MS, QUICK_BUDGET_MS = 1500.0, 300.0
SEED = 0x30E5EED

# ANCHORS.md (H100, another run): torch._grouped_mm pipeline / per-expert loop / seed 001 target, ms
ANCHORS = {("seed001", 2048): (5.20, 7.08, 3.8), ("seed001", 32768): (34.3, 36.4, 22.0),
           ("seed001", 65536): (68.0, 69.3, 38.0), ("qwen3", 512): (0.695, None, None)}


# ---- pure helpers (no torch) -----------------------------------------------------------------


def select_configs(shape="all", tokens=None):
    """[(model, tokens, label)] for --shape (seed001, qwen3, all) and --tokens (None: presets)."""
    if shape not in ("seed001", "qwen3", "all"):
        raise ValueError(f"--shape: expected seed001, qwen3 or all, got {shape!r}")
    if tokens is not None and any(t < 1 for t in tokens):
        raise ValueError(f"--tokens: expected counts >= 1, got {tokens}")
    names = ["seed001", "qwen3"] if shape == "all" else [shape]
    configs = []
    for name in names:
        for t in tokens if tokens is not None else PRESET_TOKENS[name]:
            label = SEED001_LABELS.get(t, f"T={t}") if name == "seed001" else f"T={t}"
            configs.append((MODELS[name], t, label))
    return configs


def expert_flops(model, pairs):
    """2*P*H*2I (gate_up) + 2*P*I*H (down)."""
    return 6 * pairs * model["hidden"] * model["inter"]


def layer_flops(model, tokens):
    return 2 * tokens * model["experts"] * model["hidden"] + expert_flops(model, tokens * model["k"])


def sample_tokens(tokens, count, seed):
    """Every row when tokens <= count, else the first, the last and random others: sorted."""
    if tokens <= count:
        return list(range(tokens))
    chosen = {0, tokens - 1}
    rng = random.Random(seed)
    while len(chosen) < count:
        chosen.add(rng.randrange(tokens))
    return sorted(chosen)


def ratios(result):
    """Speed-ups and the dense percentage from a config's result (None where not measured):
    vs_<peer>_<mode> = peer median / braidinfer median; experts_percent_of_dense_<mode> =
    100 * dense time / braidinfer_experts time (same FLOPs); likewise for torch._grouped_mm."""
    impls = result["impls"]

    def median(name, mode):
        row = impls.get(name) or {}
        return (row.get(mode) or {}).get("median_ms")

    out = {}
    for mode in ("eager", "graph"):
        braid = median("braidinfer", mode)
        for peer in ("torch_grouped_mm", "torch_loop"):
            p = median(peer, mode)
            out[f"vs_{peer}_{mode}"] = p / braid if p and braid else None
        dense = median("dense_cublas", mode)
        for name in ("braidinfer_experts", "torch_grouped_mm_experts"):
            t = median(name, mode)
            out[f"{name}_percent_of_dense_{mode}"] = 100 * dense / t if dense and t else None
    return out


def verdicts(r):
    """The issue's targets against a ratios() dict, graph timings first (GPU time), else eager."""
    def pick(key):
        return r.get(f"{key}_graph") or r.get(f"{key}_eager")

    speed, dense = pick("vs_torch_grouped_mm"), pick("braidinfer_experts_percent_of_dense")
    return {"vs_torch_grouped_mm": speed,
            "vs_torch_grouped_mm_met": speed is not None and speed >= TARGET_VS_GROUPED_MM,
            "percent_of_dense": dense,
            "percent_of_dense_met": dense is not None and dense >= TARGET_PERCENT_OF_DENSE}


def _pct(v):
    return f"{v:.1f}%" if v else "-"


def format_result(result):
    """One config's table, its ratios and targets, as text."""
    lines = [f"\n{result['model']} {result['label']}: T={result['tokens']} H={result['hidden']} "
             f"I={result['inter']} E={result['experts']} top-{result['k']}, pairs {result['pairs']}"]
    lines.append(f"{'impl':<26} {'eager ms':>9} {'eager min-max':>17} {'graph ms':>9} {'TFLOP/s':>8}"
                 f"  {'rows':>4} {'mism':>4} {'max abs':>9} {'mean abs':>9} {'max rel':>9} "
                 f"{'rel L2':>9}  error")
    for name, row in result["impls"].items():
        best = row.get("graph") or row.get("eager")
        tflops = row["flops"] / best["median_ms"] / 1e9 if best else None
        c = row.get("check")
        e = {k: fmt_error(c[k]) for k in ("max_abs", "mean_abs", "max_rel", "rel_l2")} if c else {}
        check = (f"{c['rows']:>4} {c['routing_mismatches']:>4} {e['max_abs']:>9} "
                 f"{e['mean_abs']:>9} {e['max_rel']:>9} {e['rel_l2']:>9}" if c
                 else f"{'':>4} {'':>4} {'':>9} {'':>9} {'':>9} {'':>9}")
        if c and not c["ok"]:
            check += " FAIL"
        eager = row.get("eager")
        lines.append(f"{name:<26} {fmt_median(eager):>9} {fmt_range(eager):>17} "
                     f"{fmt_median(row.get('graph')):>9} {f'{tflops:.1f}' if tflops else '-':>8}  "
                     f"{check}  {row.get('error') or ''}")
    r = result["ratios"]
    lines.append(f"  braidinfer vs torch_grouped_mm: eager "
                 f"{fmt_ratio(r['vs_torch_grouped_mm_eager'])}, "
                 f"graph {fmt_ratio(r['vs_torch_grouped_mm_graph'])}; vs torch_loop: eager "
                 f"{fmt_ratio(r['vs_torch_loop_eager'])}")
    lines.append(f"  experts vs dense cuBLAS (same FLOPs): braidinfer "
                 f"{_pct(r['braidinfer_experts_percent_of_dense_graph'])} graph, "
                 f"{_pct(r['braidinfer_experts_percent_of_dense_eager'])} eager; torch._grouped_mm "
                 f"{_pct(r['torch_grouped_mm_experts_percent_of_dense_graph'])} graph")
    v = result["verdicts"]
    lines.append(f"  targets: >= {TARGET_VS_GROUPED_MM}x torch_grouped_mm: "
                 f"{fmt_ratio(v['vs_torch_grouped_mm'])} "
                 f"{'met' if v['vs_torch_grouped_mm_met'] else 'not met'}"
                 f"; >= {TARGET_PERCENT_OF_DENSE:.0f}% of dense cuBLAS: {_pct(v['percent_of_dense'])} "
                 f"{'met' if v['percent_of_dense_met'] else 'not met'}")
    anchor = ANCHORS.get((result["model"], result["tokens"]))
    if anchor:
        lines.append(f"  ANCHORS.md (H100, another run): torch._grouped_mm {anchor[0]} ms"
                     + (f", per-expert loop {anchor[1]} ms" if anchor[1] else "")
                     + (f", seed 001 target {anchor[2]} ms" if anchor[2] else ""))
    return "\n".join(lines)


# ---- inputs and implementations --------------------------------------------------------------


def make_inputs(model, tokens, seed):
    """bf16 x ~ N(0, 1) and weights ~ N(0, 1/fan_in): every activation O(1), router logits with a
    standard deviation of about 1."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    H, I, E = model["hidden"], model["inter"], model["experts"]

    def randn(*shape, fan_in=1):
        t = torch.randn(*shape, generator=g, device="cuda", dtype=torch.bfloat16)
        return t.mul_(fan_in ** -0.5)

    return {"x": randn(tokens, H), "router": randn(E, H, fan_in=H),
            "gate_up": randn(E, 2 * I, H, fan_in=H), "down": randn(E, H, I, fan_in=I)}


def make_braidinfer(model, inp):
    """The whole layer through braidinfer.ops into buffers allocated here, once."""
    import torch

    x, T, k, E = inp["x"], inp["x"].shape[0], model["k"], model["experts"]
    P, H, I = T * k, model["hidden"], model["inter"]

    def empty(*shape, dtype=torch.bfloat16):
        return torch.empty(*shape, dtype=dtype, device=x.device)

    b = {"logits": empty(T, E), "weights": empty(T, k, dtype=torch.float32),
         "ids": empty(T, k, dtype=torch.int32), "offsets": empty(E + 1, dtype=torch.int32),
         "sorted": empty(P, dtype=torch.int32), "pair_rows": empty(P, dtype=torch.int32),
         "workspace": empty(ops.moe_permute_workspace_size(P, E), dtype=torch.int32),
         "xs": empty(P, H), "h": empty(P, I), "ys": empty(P, H), "out": empty(T, H)}

    def experts():
        ops.moe_grouped_gemm(b["xs"], inp["gate_up"], b["offsets"], "swiglu", b["h"])
        ops.moe_grouped_gemm(b["h"], inp["down"], b["offsets"], "none", b["ys"])

    def fn():
        ops.gemm(x, inp["router"], out=b["logits"])
        ops.moe_route_topk_softmax(b["logits"], k, True, b["weights"], b["ids"])
        ops.moe_permute(b["ids"], E, b["offsets"], b["sorted"], b["pair_rows"], b["workspace"])
        ops.moe_gather(x, b["sorted"], k, b["xs"])
        experts()
        ops.moe_combine(b["ys"], b["pair_rows"], b["weights"], b["out"])
        return b["out"], b["ids"]

    return fn, experts, b


def route_torch(x, router, k):
    """transformers' Qwen3-MoE router: bf16 logits, softmax in fp32, top-k, renormalised."""
    import torch
    import torch.nn.functional as F

    logits = F.linear(x, router)
    p = F.softmax(logits, dim=-1, dtype=torch.float)
    w, ids = torch.topk(p, k, dim=-1)
    w /= w.sum(dim=-1, keepdim=True)
    return w, ids


def make_torch_grouped_mm(model, inp):
    import torch
    import torch.nn.functional as F

    x, k, E, I = inp["x"], model["k"], model["experts"], model["inter"]
    gate_up_t = inp["gate_up"].transpose(-2, -1)  # [E, H, 2I]: each expert column-major
    down_t = inp["down"].transpose(-2, -1)        # [E, I, H]

    def fn():
        w, ids = route_torch(x, inp["router"], k)
        flat = ids.view(-1)
        order = torch.argsort(flat, stable=True)
        # histc, not bincount: no host synchronisation, so the pipeline can be graph-captured
        counts = torch.histc(flat.float(), bins=E, min=0, max=E)
        offs = torch.cumsum(counts, 0).to(torch.int32)
        token = order // k
        xs = x.index_select(0, token)
        gu = torch._grouped_mm(xs, gate_up_t, offs=offs)
        h = F.silu(gu[:, :I]) * gu[:, I:]
        ys = torch._grouped_mm(h, down_t, offs=offs)
        ys.mul_(w.view(-1)[order].unsqueeze(-1).to(ys.dtype))
        return torch.zeros_like(x).index_add_(0, token, ys), ids

    return fn


def make_torch_loop(model, inp):
    import torch
    import torch.nn.functional as F

    x, k, E = inp["x"], model["k"], model["experts"]
    gate_up, down = inp["gate_up"], inp["down"]

    def fn():  # transformers' experts loop, written out
        w, ids = route_torch(x, inp["router"], k)
        w = w.to(x.dtype)
        out = torch.zeros_like(x)
        mask = F.one_hot(ids, num_classes=E).permute(2, 1, 0)  # [E, k, T]
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for e in hit:
            e = e[0]
            slot, token = torch.where(mask[e])
            gate, up = F.linear(x[token], gate_up[e]).chunk(2, dim=-1)
            y = F.linear(F.silu(gate) * up, down[e]) * w[token, slot, None]
            out.index_add_(0, token, y.to(out.dtype))
        return out, ids

    return fn


def make_torch_grouped_mm_experts(model, inp, xs, offsets):
    import torch
    import torch.nn.functional as F

    I = model["inter"]
    gate_up_t, down_t = inp["gate_up"].transpose(-2, -1), inp["down"].transpose(-2, -1)
    offs = offsets[1:].contiguous()  # moe_permute's [E + 1] offsets -> cumulative ends

    def fn():
        gu = torch._grouped_mm(xs, gate_up_t, offs=offs)
        return torch._grouped_mm(F.silu(gu[:, :I]) * gu[:, I:], down_t, offs=offs)

    return fn


def make_dense(model, inp, xs, h):
    import torch

    P, H, I = xs.shape[0], model["hidden"], model["inter"]
    w_gate_up, w_down = inp["gate_up"][0].t(), inp["down"][0].t()  # [H, 2I], [I, H]
    gu = torch.empty(P, 2 * I, dtype=xs.dtype, device=xs.device)
    y = torch.empty(P, H, dtype=xs.dtype, device=xs.device)

    def fn():
        torch.mm(xs, w_gate_up, out=gu)
        torch.mm(h, w_down, out=y)
        return y

    return fn


# ---- correctness -----------------------------------------------------------------------------


def reference(model, inp, rows):
    """fp32 layer output of the sampled rows, routed by torch's bf16 logits of the whole batch."""
    import torch
    import torch.nn.functional as F

    I = model["inter"]
    w, ids = route_torch(inp["x"], inp["router"], model["k"])
    w, ids = w[rows], ids[rows]
    xr = inp["x"][rows].float()
    out = torch.zeros_like(xr)
    for e in torch.unique(ids).tolist():
        s, j = (ids == e).nonzero(as_tuple=True)
        gu = xr[s] @ inp["gate_up"][e].float().t()
        y = (F.silu(gu[:, :I]) * gu[:, I:]) @ inp["down"][e].float().t()
        out.index_add_(0, s, y * w[s, j, None])
    return out, ids


def compare_rows(got, ids, ref, ref_ids, rows):
    """Errors of the sampled rows whose chosen experts match the reference's (as sets)."""
    import torch

    got, ids = got[rows].float(), ids[rows].long()
    same = (ids.sort(dim=-1).values == ref_ids.long().sort(dim=-1).values).all(dim=-1)
    d = (got[same] - ref[same]).abs()
    r = ref[same]
    rms = r.pow(2).mean(dim=-1, keepdim=True).sqrt()
    rel = d / torch.maximum(r.abs(), 0.1 * rms)
    n = int(same.sum().item())
    nonfinite = int((~torch.isfinite(got)).sum().item())
    rel_l2 = (d.norm() / r.norm()).item() if n else None  # None, not NaN: the JSON stays strict
    return {"rows": len(rows), "routing_mismatches": len(rows) - n, "nonfinite": nonfinite,
            "max_abs": d.max().item() if n else None,
            "mean_abs": d.mean().item() if n else None,
            "max_rel": rel.max().item() if n else None,
            "rel_l2": rel_l2,
            "ok": nonfinite == 0 and rel_l2 is not None and rel_l2 <= REL_L2_TOLERANCE}


# ---- one config ------------------------------------------------------------------------------


def run_config(model, tokens, label, samples, budget_ms):
    import torch

    torch.cuda.empty_cache()
    inp = make_inputs(model, tokens, SEED + tokens)
    k = model["k"]
    result = {"model": model["name"], "label": label, "tokens": tokens, "pairs": tokens * k,
              **{key: model[key] for key in ("hidden", "inter", "experts", "k")}, "impls": {}}
    rows = sample_tokens(tokens, samples, SEED ^ tokens)
    ref, ref_ids = reference(model, inp, rows)

    def check(out):
        return compare_rows(out[0], out[1], ref, ref_ids, rows)

    braid_fn, braid_experts, b = make_braidinfer(model, inp)
    lf, ef = layer_flops(model, tokens), expert_flops(model, tokens * k)
    measure(result, "braidinfer", braid_fn, lf, budget_ms, check)
    for name, make in (("torch_grouped_mm", make_torch_grouped_mm), ("torch_loop", make_torch_loop)):
        try:
            fn = make(model, inp)
        except Exception as e:
            result["impls"][name] = {"flops": lf, "eager": None, "graph": None, "check": None,
                                     "error": error_string(e)}
            continue
        measure(result, name, fn, lf, budget_ms, check, graph=name not in NO_GRAPH)

    # The experts alone, on braidinfer's gathered rows and offsets (a layer run has just filled
    # them) and its h for the dense down projection.
    braid_fn()
    torch.cuda.synchronize()
    measure(result, "braidinfer_experts", braid_experts, ef, budget_ms)
    measure(result, "torch_grouped_mm_experts",
            make_torch_grouped_mm_experts(model, inp, b["xs"], b["offsets"]), ef, budget_ms)
    measure(result, "dense_cublas", make_dense(model, inp, b["xs"], b["h"]), ef, budget_ms)
    result["ratios"] = ratios(result)
    result["verdicts"] = verdicts(result["ratios"])
    del inp, b, braid_fn, braid_experts
    torch.cuda.empty_cache()
    return result


def layer_parser(name, description, shapes, default_tokens, samples_help):
    """The command line of a MoE layer comparison (this one and compare_moe_fp8): --shape (one of
    `shapes`, or all), --tokens, --samples, --quick, --json."""
    p = parser(name, description, quick="shorter timings (smoke test)")
    p.add_argument("--shape", default="all", choices=[*shapes, "all"])
    p.add_argument("--tokens", type=int_list,
                   help=f"token counts, comma-separated (default: {default_tokens})")
    p.add_argument("--samples", type=int, default=SAMPLES, help=samples_help)
    return p


def build_parser():
    return layer_parser("moe", "braidinfer's MoE layer (bf16) beside torch._grouped_mm, "
                               "transformers' per-expert loop and dense cuBLAS, on seed 001's and "
                               "Qwen3-30B-A3B's layers",
                        ["seed001", "qwen3"], "seed001 2048,32768,65536; qwen3 512,4096",
                        "tokens checked against the fp32 reference")


def run(args, configs):
    """Measures and prints `configs` (select_configs()'s list); returns the report ({"info",
    "config", "results"}), also written to args.json after each config when set. Needs torch with
    a CUDA device."""
    import torch

    if not hasattr(torch, "_grouped_mm"):
        print("compare moe: this torch has no torch._grouped_mm (its rows will say so)",
              file=sys.stderr)
    # The reference is fp32: TF32 matmuls would round its inputs to 10 mantissa bits.
    torch.backends.cuda.matmul.allow_tf32 = False
    info = environment()
    budget = QUICK_BUDGET_MS if args.quick else BUDGET_MS
    info["timing"] = (f"eager: event pair around each call, ~{budget:.0f} ms of calls after a "
                      f"warm-up; graph: up to 20 calls per torch CUDA graph, replays / calls; L2 "
                      f"not flushed")
    print_environment(info)
    report = {"info": info,
              "config": {"dtype": "bf16", "renormalize": True, "samples": args.samples,
                         "targets": {"vs_torch_grouped_mm": TARGET_VS_GROUPED_MM,
                                     "percent_of_dense_cublas": TARGET_PERCENT_OF_DENSE,
                                     "rel_l2_vs_fp32": REL_L2_TOLERANCE}},
              "results": []}
    for model, tokens, label in configs:
        result = run_config(model, tokens, label, args.samples, budget)
        report["results"].append(result)
        print(format_result(result), flush=True)
        if args.json:  # after each config, so an interrupted run keeps what it measured
            save_json(report, args.json)
    print("\n(ratio = peer median / braidinfer median; % of dense = dense time / experts time at "
          "the same FLOPs; mism = sampled rows routed differently from the reference, left out)")
    return report


def main(argv=None):
    return run_main("moe", build_parser, run, argv,
                    prepare=lambda args: (select_configs(args.shape, args.tokens),))


if __name__ == "__main__":
    sys.exit(main())
