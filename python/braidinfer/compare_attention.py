"""Same-run peers for braidinfer's attention_prefill (FlashAttention forward), bf16.

For each configuration (B sequences of S tokens, H heads, head_dim D, full or causal mask):

  braidinfer     braidinfer.ops.attention_prefill: q, k, v packed as [B*S, H, D], cu_seqlens
  naive          torch: matmul, softmax in fp32, matmul (the score matrix is materialised); run
                 only when B*H*S*S*(2+4) bytes (bf16 scores + fp32 probabilities) fit in free
                 memory, else reported as 'out of memory' without running
  sdpa_flash     F.scaled_dot_product_attention, FlashAttention-2 backend, [B, H, S, D]
  sdpa_cudnn     F.scaled_dot_product_attention, cuDNN backend, [B, H, S, D]

Per row: ms (median of CUDA-event timings, triton.testing.do_bench with the L2 flushed before
each call, as compare_decode), TFLOP/s (4*B*H*S*S*D FLOPs, halved when causal), braidinfer's
speed-up over the row (row ms / braidinfer ms), peak memory (torch.cuda.max_memory_allocated
minus the memory allocated before one call that also allocates its output; braidinfer's
attention_prefill allocates nothing besides the output, which comes from torch), and the error
against an fp32 reference (||out-ref||/||ref|| and max |out-ref|). The reference is computed from
the same bf16 inputs in fp32, one (batch, head, block of queries) at a time; for large
configurations only on batch 0 and heads 0-3, and the outputs are compared on that subset.

The main table is the six configurations of ANCHORS.md's "Attention forward" table; --sweep adds
S = 512 .. 16384 at H=32, D=128 with B = 16384 / S (causal and full). Then seed 001's memory
table: the peak memory of naive and braidinfer attention at 2048, 4096 and 8192 tokens (B=1,
H=32, D=128, causal). A failing implementation records its error in its row; the run goes on.

Run on the GPU machine, from the repository root:
    PYTHONPATH=python BRAIDINFER_LIBRARY=<dir with libbraid.so> \\
        python3 -m braidinfer.compare attention [--sweep] [--json out.json]
"""

import math
import sys

import torch
import torch.nn.functional as F

from . import ops
from .compare_harness import (environment, error_string, main as run_main, parser, save_json,
                              time_us)

ANCHOR_CONFIGS = [  # (B, S, H, D, causal): ANCHORS.md "Attention forward (bf16)"
    (16, 2048, 16, 64, False),
    (16, 2048, 16, 64, True),
    (32, 4096, 32, 128, False),
    (32, 4096, 32, 128, True),
    (4, 8192, 32, 128, False),
    (1, 16384, 32, 128, True),
]
SWEEP_LENGTHS = [512, 1024, 2048, 4096, 8192, 16384]
SWEEP_TOKENS, SWEEP_HEADS, SWEEP_HEAD_DIM = 16384, 32, 128
MEMORY_LENGTHS = [2048, 4096, 8192]
MEMORY_SHAPE = dict(batch=1, heads=32, head_dim=128, causal=True)
# Seed 001's figures (standard, flash attention memory in GB), printed beside ours.
SEED_MEMORY_GB = {2048: (2.1, 0.6), 4096: (8.4, 1.2), 8192: (33.6, 2.4)}

IMPLEMENTATIONS = ["braidinfer", "naive", "sdpa_flash", "sdpa_cudnn"]
# Reference on every (batch, head) while B*H*S*S stays under this; beyond, batch 0, heads 0-3.
FULL_REFERENCE_SCORES = 1 << 31
SUBSET_HEADS = 4
REFERENCE_BLOCK_BYTES = 256 << 20  # fp32 scores of one block of queries


def flops(batch, seq, heads, head_dim, causal):
    f = 4 * batch * heads * seq * seq * head_dim
    return f // 2 if causal else f


def naive_bytes(batch, seq, heads):
    """What the naive path holds at its peak: bf16 scores and their fp32 softmax."""
    return batch * heads * seq * seq * (2 + 4)


def is_out_of_memory(e):
    return isinstance(e, torch.cuda.OutOfMemoryError) or "out of memory" in str(e).lower()


# ---- the implementations ---------------------------------------------------------------------
# Each maker returns fn() -> out in [B, H, S, D] (a view where the layout differs), allocating its
# output on every call, so the peak-memory call and the timed calls are the same work.


def make_braidinfer(inputs, causal, scale):
    batch, heads, seq, head_dim = inputs["shape"]
    q, k, v = inputs["packed"]
    cu = torch.arange(0, (batch + 1) * seq, seq, dtype=torch.int32, device=q.device)

    def fn():
        # max_seqlen_q passed: the call stays asynchronous (no read of cu on the host)
        out = ops.attention_prefill(q, k, v, cu, cu, seq, causal=causal, softmax_scale=scale)
        return out.view(batch, seq, heads, head_dim).transpose(1, 2)

    return fn


def make_naive(inputs, causal, scale):
    q, k, v = inputs["bhsd"]
    seq = q.shape[2]
    mask = None
    if causal:  # True above the diagonal: the future keys each query may not see
        mask = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu_(1)

    def fn():
        s = torch.matmul(q, k.transpose(-2, -1))
        s.mul_(scale)
        if mask is not None:
            s.masked_fill_(mask, float("-inf"))
        p = torch.softmax(s, dim=-1, dtype=torch.float32)
        del s
        p = p.to(q.dtype)  # the fp32 probabilities are freed as this replaces them
        return torch.matmul(p, v)

    return fn


def make_sdpa(backend_name):
    def make(inputs, causal, scale):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = getattr(SDPBackend, backend_name)
        q, k, v = inputs["bhsd"]

        def fn():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)

        return fn

    return make


MAKERS = {
    "braidinfer": make_braidinfer,
    "naive": make_naive,
    "sdpa_flash": make_sdpa("FLASH_ATTENTION"),
    "sdpa_cudnn": make_sdpa("CUDNN_ATTENTION"),
}


# ---- inputs and reference --------------------------------------------------------------------


def make_inputs(batch, seq, heads, head_dim, seed):
    """q, k, v in bf16 as [B, H, S, D] contiguous (SDPA's and the naive path's layout) and the
    same values packed as [B*S, H, D] (braidinfer's: token-major, heads packed)."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    shape = (batch, heads, seq, head_dim)
    bhsd = [torch.randn(shape, generator=gen, dtype=torch.bfloat16, device="cuda")
            for _ in range(3)]
    packed = [t.transpose(1, 2).contiguous().view(batch * seq, heads, head_dim) for t in bhsd]
    return {"shape": shape, "bhsd": bhsd, "packed": packed}


def reference_subset(batch, seq, heads):
    """(batches, heads) the fp32 reference covers."""
    if batch * heads * seq * seq <= FULL_REFERENCE_SCORES:
        return list(range(batch)), list(range(heads))
    return [0], list(range(min(heads, SUBSET_HEADS)))


def reference(inputs, causal, scale, batches, head_ids):
    """fp32 attention of the bf16 inputs on the subset: [len(batches), len(head_ids), S, D].
    One (batch, head, block of queries) at a time, so the score block stays small."""
    q, k, v = inputs["bhsd"]
    seq, head_dim = q.shape[2], q.shape[3]
    rows = max(1, min(seq, REFERENCE_BLOCK_BYTES // (4 * seq)))
    out = torch.empty(len(batches), len(head_ids), seq, head_dim, dtype=torch.float32,
                      device=q.device)
    keys = torch.arange(seq, device=q.device)
    for i, b in enumerate(batches):
        for j, h in enumerate(head_ids):
            kf, vf = k[b, h].float(), v[b, h].float()
            for r0 in range(0, seq, rows):
                r1 = min(seq, r0 + rows)
                s = (q[b, h, r0:r1].float() @ kf.T) * scale  # [rows, S]
                if causal:
                    queries = torch.arange(r0, r1, device=q.device)
                    s.masked_fill_(keys[None, :] > queries[:, None], float("-inf"))
                out[i, j, r0:r1] = torch.softmax(s, dim=-1) @ vf
    return out


def compare_with_reference(out, ref, batches, head_ids):
    sub = out[batches][:, head_ids].float()
    diff = (sub - ref).double()
    return {
        "rel_error": (diff.norm() / ref.double().norm()).item(),
        "max_abs_error": diff.abs().max().item(),
        "nan": bool(torch.isnan(out).any().item()),
    }


# ---- one configuration -----------------------------------------------------------------------


def free_bytes():
    torch.cuda.empty_cache()
    return torch.cuda.mem_get_info()[0]


def naive_fits(batch, seq, heads):
    # a margin for the output, do_bench's 256 MB L2-flush buffer and fragmentation
    return naive_bytes(batch, seq, heads) * 1.1 + (1 << 30) <= free_bytes()


def measure_peak(fn):
    """(out, bytes): one call's output and its peak allocation above what was allocated
    before it (output included)."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    return out, torch.cuda.max_memory_allocated() - before


def run_config(batch, seq, heads, head_dim, causal, implementations=IMPLEMENTATIONS, time=True):
    """One configuration: a dict with the shape, the reference it used and a result per
    implementation (ms, tflops, peak_bytes, errors, or 'error')."""
    scale = 1.0 / math.sqrt(head_dim)
    f = flops(batch, seq, heads, head_dim, causal)
    config = {"batch": batch, "seq": seq, "heads": heads, "head_dim": head_dim,
              "mask": "causal" if causal else "full", "flops": f, "results": {}}
    try:
        inputs = make_inputs(batch, seq, heads, head_dim, seed=batch * seq + heads + head_dim)
        config["input_bytes"] = 3 * inputs["bhsd"][0].numel() * 2  # q, k, v once, bf16
        batches, head_ids = reference_subset(batch, seq, heads)
        config["reference"] = {"batches": batches, "heads": head_ids,
                               "what": "fp32 on the bf16 inputs"}
        ref = reference(inputs, causal, scale, batches, head_ids) if time else None
    except Exception as e:  # no inputs: every implementation reports it
        config["error"] = error_string(e)
        for name in implementations:
            config["results"][name] = {"error": config["error"]}
        torch.cuda.empty_cache()
        return config

    for name in implementations:
        result = config["results"][name] = {}
        if name == "naive" and not naive_fits(batch, seq, heads):
            result["error"] = "out of memory"
            result["note"] = (f"needs about {naive_bytes(batch, seq, heads) / 1e9:.1f} GB, "
                              f"{free_bytes() / 1e9:.1f} GB free: not run")
            continue
        try:
            fn = MAKERS[name](inputs, causal, scale)
            out, peak = measure_peak(fn)
            result["peak_bytes"] = peak
            if ref is not None:
                result.update(compare_with_reference(out, ref, batches, head_ids))
            del out
            if time:
                result["ms"] = time_us(fn) / 1e3
                result["tflops"] = f / (result["ms"] * 1e-3) / 1e12
        except Exception as e:  # a backend that cannot take this shape, or out of memory
            result["error"] = "out of memory" if is_out_of_memory(e) else "failed"
            result["note"] = error_string(e)
        finally:
            fn = None  # the closure's captures (the naive causal mask) go before the next one
            torch.cuda.empty_cache()

    braid_ms = config["results"].get("braidinfer", {}).get("ms")
    for name, result in config["results"].items():
        if braid_ms and result.get("ms"):
            result["braidinfer_speedup"] = result["ms"] / braid_ms
    del inputs, ref
    torch.cuda.empty_cache()
    return config


def run_memory_table(lengths=MEMORY_LENGTHS):
    """Seed 001's table: peak memory of naive and braidinfer attention, no timing."""
    rows = []
    for seq in lengths:
        c = run_config(MEMORY_SHAPE["batch"], seq, MEMORY_SHAPE["heads"], MEMORY_SHAPE["head_dim"],
                       MEMORY_SHAPE["causal"], implementations=["naive", "braidinfer"],
                       time=False)
        row = {"seq": seq, "input_bytes": c.get("input_bytes"),
               "seed_standard_gb": SEED_MEMORY_GB[seq][0], "seed_flash_gb": SEED_MEMORY_GB[seq][1]}
        for name in ("naive", "braidinfer"):
            r = c["results"][name]
            row[name + "_peak_bytes"] = r.get("peak_bytes")
            row[name + "_error"] = r.get("error")
        if row["naive_peak_bytes"] and row["braidinfer_peak_bytes"]:
            row["reduction"] = row["naive_peak_bytes"] / row["braidinfer_peak_bytes"]
            row["reduction_with_inputs"] = ((row["input_bytes"] + row["naive_peak_bytes"]) /
                                            (row["input_bytes"] + row["braidinfer_peak_bytes"]))
        rows.append(row)
    return rows


# ---- printing --------------------------------------------------------------------------------


def gb(n):
    if n is None:
        return "-"
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def print_configs(title, configs):
    print(f"\n{title}")
    head = (f"{'B':>3} {'S':>6} {'H':>3} {'D':>4} {'mask':6} {'impl':11} {'ms':>13} "
            f"{'TFLOP/s':>8} {'speed-up':>8} {'peak mem':>10} {'rel err':>9} {'max abs':>9}  note")
    print(head)
    print("-" * len(head))
    for c in configs:
        shape = f"{c['batch']:>3} {c['seq']:>6} {c['heads']:>3} {c['head_dim']:>4} {c['mask']:6}"
        for name, r in c["results"].items():
            ms = f"{r['ms']:.3f}" if "ms" in r else r.get("error", "-")
            tf = f"{r['tflops']:.0f}" if "tflops" in r else "-"
            speedup = f"{r['braidinfer_speedup']:.2f}" if "braidinfer_speedup" in r else "-"
            rel = f"{r['rel_error']:.2e}" if "rel_error" in r else "-"
            mx = f"{r['max_abs_error']:.2e}" if "max_abs_error" in r else "-"
            note = r.get("note", "")
            if r.get("nan"):
                note = ("NaN in output; " + note).strip("; ")
            print(f"{shape} {name:11} {ms:>13} {tf:>8} {speedup:>8} {gb(r.get('peak_bytes')):>10} "
                  f"{rel:>9} {mx:>9}  {note}")
            shape = " " * len(shape)
    print("speed-up: of braidinfer over the row (the row's ms / braidinfer's ms). peak mem: one "
          "call's peak allocation above the inputs, output included. Errors: vs fp32.")


def print_memory_table(rows):
    s = MEMORY_SHAPE
    print(f"\nSeed 001 memory table: B={s['batch']}, H={s['heads']}, D={s['head_dim']}, "
          f"{'causal' if s['causal'] else 'full'}, bf16. Peak: one call's peak allocation above "
          f"the inputs (output included); total: with q, k, v")
    head = (f"{'S':>6} {'q,k,v':>9} {'naive peak':>13} {'braid peak':>11} {'reduction':>9} "
            f"{'naive total':>13} {'braid total':>11} {'reduction':>9}  seed: standard / flash")
    print(head)
    print("-" * len(head))
    for r in rows:
        naive, braid, inputs = r["naive_peak_bytes"], r["braidinfer_peak_bytes"], r["input_bytes"]
        have = naive is not None and braid is not None and inputs is not None
        print(f"{r['seq']:>6} {gb(inputs):>9} "
              f"{gb(naive) if naive is not None else r['naive_error'] or '-':>13} "
              f"{gb(braid) if braid is not None else r['braidinfer_error'] or '-':>11} "
              f"{f'{naive / braid:.0f}x' if have and braid else '-':>9} "
              f"{gb(inputs + naive) if have else '-':>13} {gb(inputs + braid) if have else '-':>11} "
              f"{f'{(inputs + naive) / (inputs + braid):.1f}x' if have else '-':>9}  "
              f"{r['seed_standard_gb']} GB / {r['seed_flash_gb']} GB")


def build_parser():
    p = parser("attention", "braidinfer attention_prefill beside naive PyTorch and SDPA "
                            "(FlashAttention-2, cuDNN), bf16, on the ANCHORS.md configurations")
    p.add_argument("--sweep", action="store_true",
                   help="also S = 512 .. 16384 at H=32, D=128, B*S = 16384")
    return p


def run(args, configs=ANCHOR_CONFIGS, memory_lengths=MEMORY_LENGTHS):
    """Measures and prints the comparison; returns its report ({"info", "anchors", "sweep",
    "memory"}), also written to args.json after each part when set. Needs a CUDA device."""
    # The reference is fp32: TF32 matmuls would round its inputs to 10 mantissa bits.
    torch.backends.cuda.matmul.allow_tf32 = False
    info = environment()
    print(f"{info['device']}, torch {info['torch']} (CUDA {info['torch_cuda']}), cuDNN "
          f"{info['cudnn']}, library {info.get('braidinfer_library')}")

    report = {"info": info, "anchors": [], "sweep": [], "memory": []}

    def save():  # after each part, so an interrupted run keeps what it measured
        if args.json:
            save_json(report, args.json)

    for shape in configs:
        report["anchors"].append(run_config(*shape))
    print_configs("Attention forward, ANCHORS.md configurations (bf16)", report["anchors"])
    save()
    if args.sweep:
        for seq in SWEEP_LENGTHS:
            for causal in (False, True):
                report["sweep"].append(run_config(SWEEP_TOKENS // seq, seq, SWEEP_HEADS,
                                                  SWEEP_HEAD_DIM, causal))
        print_configs(f"Sweep: B*S = {SWEEP_TOKENS}, H={SWEEP_HEADS}, D={SWEEP_HEAD_DIM} (bf16)",
                      report["sweep"])
        save()
    report["memory"] = run_memory_table(memory_lengths)
    print_memory_table(report["memory"])
    save()
    return report


def main(argv=None):
    return run_main("attention", build_parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
