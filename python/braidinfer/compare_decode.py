"""Same-run peers for braidinfer's attention_decode.

torch SDPA (cuDNN and FlashAttention backends, GQA, contiguous KV in its preferred
[batch, kv_heads, seq, head_dim] layout) against braidinfer.ops.attention_decode (paged KV, pages
of 16 tokens in shuffled order) on the decode shapes of ANCHORS.md: one query token, 32 query
heads, 8 KV heads, head_dim 128, bf16. Times are medians of CUDA-event timings with the L2 cache
flushed before each call (triton.testing.do_bench); braidinfer and cuDNN are also timed as 10
calls captured in one CUDA graph (no host work between calls: the like pair for the decode step,
which replays a graph). Bytes = K + V read + q read + out written.

Run on the GPU machine, from the repository root:
    PYTHONPATH=python BRAIDINFER_LIBRARY=<dir with libbraid.so> \\
        python3 -m braidinfer.compare_decode [--json FILE]
"""

import math
import sys

import torch
import torch.nn.functional as F

from . import ops
from .compare_harness import main as run_main, parser, time_us

SHAPES = [(1, 4096), (1, 32768), (16, 4096), (64, 8192)]  # (batch, kv length)
Q_HEADS, KV_HEADS, HEAD_DIM, PAGE = 32, 8, 128, 16
GRAPH_CALLS = 10


def sdpa_backends():
    from torch.nn.attention import SDPBackend

    return [("torch_sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
            ("torch_sdpa_flash", SDPBackend.FLASH_ATTENTION)]


def run_shape(batch, kv_len, gen):
    from torch.nn.attention import sdpa_kernel

    dev = "cuda"
    kw = dict(dtype=torch.bfloat16, device=dev)
    q = torch.randn(batch, Q_HEADS, HEAD_DIM, generator=gen, **kw)
    k = torch.randn(batch, kv_len, KV_HEADS, HEAD_DIM, generator=gen, **kw)
    v = torch.randn(batch, kv_len, KV_HEADS, HEAD_DIM, generator=gen, **kw)
    scale = 1.0 / math.sqrt(HEAD_DIM)
    nbytes = 2 * batch * kv_len * KV_HEADS * HEAD_DIM * 2 + 2 * batch * Q_HEADS * HEAD_DIM * 2
    rows = []

    def row(name, us, note=""):
        rows.append({"name": name, "batch": batch, "kv_len": kv_len, "median_us": us,
                     "gbps": nbytes / (us * 1e-6) / 1e9 if us else None, "bytes": nbytes,
                     "note": note})

    def graph_row(name, call):
        # GRAPH_CALLS calls captured in one CUDA graph, replayed: no host work between calls, and
        # the L2 not flushed between them (a 1 x 4096 cache, 16.8 MB, stays in L2).
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(GRAPH_CALLS):
                    call()
            graph.replay()
            torch.cuda.synchronize()
            row(name, time_us(graph.replay) / GRAPH_CALLS,
                f"{GRAPH_CALLS} calls per graph, L2 warm between them")
        except Exception as e:
            row(name, None, f"failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}")

    # The peers: SDPA on [batch, heads, seq, head_dim], GQA handled by the backend.
    qs = q.view(batch, Q_HEADS, 1, HEAD_DIM)
    ks = k.permute(0, 2, 1, 3).contiguous()
    vs = v.permute(0, 2, 1, 3).contiguous()
    reference = None
    for name, backend in sdpa_backends():
        def call():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(qs, ks, vs, scale=scale, enable_gqa=True)
        try:
            out = call()
            torch.cuda.synchronize()
        except Exception as e:  # a backend that cannot take this shape
            row(name, None, f"unavailable: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            continue
        if reference is None:
            reference = out.view(batch, Q_HEADS, HEAD_DIM).float()
        row(name, time_us(call))
        if name == "torch_sdpa_cudnn":  # timed as braidinfer's graph row is, for a like pair
            graph_row(name + "_graph", call)
    del ks, vs

    # braidinfer: the same keys in pages of PAGE tokens, scattered over the pool in random order.
    pages_per_seq = kv_len // PAGE
    num_pages = batch * pages_per_seq
    perm = torch.randperm(num_pages, generator=gen, device=dev)
    k_pages = torch.empty(num_pages, PAGE, KV_HEADS, HEAD_DIM, **kw)
    v_pages = torch.empty_like(k_pages)
    k_pages[perm] = k.reshape(num_pages, PAGE, KV_HEADS, HEAD_DIM)
    v_pages[perm] = v.reshape(num_pages, PAGE, KV_HEADS, HEAD_DIM)
    del k, v
    page_table = perm.to(torch.int32).view(batch, pages_per_seq).contiguous()
    kv_lens = torch.full((batch,), kv_len, dtype=torch.int32, device=dev)
    out = torch.empty_like(q)
    n = ops.attention_decode_workspace_floats(batch, Q_HEADS, HEAD_DIM, pages_per_seq * PAGE)
    workspace = torch.empty(n, dtype=torch.float32, device=dev)

    def braid():
        ops.attention_decode(q, k_pages, v_pages, page_table, kv_lens, scale, out=out,
                             workspace=workspace)

    braid()
    torch.cuda.synchronize()
    note = ""
    if reference is not None:
        err = (out.float() - reference).norm() / reference.norm()
        note = f"rel. error vs SDPA {err.item():.2e}"
    row("braidinfer_attention_decode", time_us(braid), note)
    graph_row("braidinfer_attention_decode_graph", braid)
    return rows


def build_parser():
    return parser("decode", __doc__.splitlines()[0])


def run(args, shapes=SHAPES):
    """Measures and prints the comparison; returns its report ({"info", "rows"}), written to
    --json by main(). Needs a CUDA device."""
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "cudnn": torch.backends.cudnn.version()}
    print(f"{info['device']}, torch {info['torch']}, cuDNN {info['cudnn']}")
    rows = []
    for batch, kv_len in shapes:
        rows += run_shape(batch, kv_len, torch.Generator(device="cuda").manual_seed(batch * kv_len))
        torch.cuda.empty_cache()
    print(f"{'name':36} {'batch':>5} {'kv_len':>6} {'median us':>10} {'GB/s':>8}  note")
    for r in rows:
        us = f"{r['median_us']:.1f}" if r["median_us"] else "-"
        gbps = f"{r['gbps']:.0f}" if r["gbps"] else "-"
        print(f"{r['name']:36} {r['batch']:>5} {r['kv_len']:>6} {us:>10} {gbps:>8}  {r['note']}")
    report = {"info": info, "rows": rows}
    return report


def main(argv=None):
    return run_main("decode", build_parser, run, argv)


if __name__ == "__main__":
    sys.exit(main())
