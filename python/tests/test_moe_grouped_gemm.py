"""moe_grouped_gemm through braidinfer:

* on numpy arrays (CPU): against the per-expert matrix products (and SwiGLU) written in numpy;
* on CUDA torch tensors: a whole permuted MoE MLP (moe_permute -> moe_gather -> moe_grouped_gemm
  swiglu -> moe_grouped_gemm -> moe_combine) against the per-expert loop of transformers' MoE
  blocks in fp32; skips without torch or a GPU.
"""

import pytest

np = pytest.importorskip("numpy")

import braidinfer as bi  # noqa: E402
from braidinfer import BraidError  # noqa: E402
from numeric import rel_error  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.usefixtures("library")


def random_offsets(rng, rows, experts):
    counts = np.bincount(rng.integers(0, experts, rows), minlength=experts)
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)


def grouped_reference(x, w, offsets, activation):
    """Per expert, its rows of x times w[e]^T (fp64), SwiGLU on the halves."""
    out_cols = w.shape[1] // 2 if activation == "swiglu" else w.shape[1]
    y = np.full((x.shape[0], out_cols), np.nan)
    for e in range(w.shape[0]):
        rows = slice(offsets[e], offsets[e + 1])
        p = x[rows].astype(np.float64) @ w[e].astype(np.float64).T
        if activation == "swiglu":
            g, u = p[:, :out_cols], p[:, out_cols:]
            p = g / (1 + np.exp(-g)) * u
        y[rows] = p
    return y


@pytest.mark.parametrize("activation", ["none", "swiglu"])
def test_moe_grouped_gemm_numpy(seed, activation):
    rng = np.random.default_rng(seed)
    rows, experts, n, k = 50, 6, 24, 16
    x = rng.standard_normal((rows, k)).astype(np.float32)
    w = (rng.standard_normal((experts, n, k)) / np.sqrt(k)).astype(np.float32)
    offsets = random_offsets(rng, rows - 3, experts)  # the last 3 rows belong to no expert
    y = np.full((rows, n // 2 if activation == "swiglu" else n), 7.0, dtype=np.float32)
    bi.moe_grouped_gemm(x, w, offsets, activation, y)
    want = grouped_reference(x, w, offsets, activation)
    np.testing.assert_allclose(y[:rows - 3], want[:rows - 3], rtol=1e-5, atol=1e-5)
    assert (y[rows - 3:] == 7.0).all()  # left as they were


def test_moe_grouped_gemm_errors():
    x = np.zeros((4, 8), dtype=np.float32)
    w = np.zeros((2, 6, 8), dtype=np.float32)
    with pytest.raises(ValueError, match="activation"):
        bi.moe_grouped_gemm(x, w, np.array([0, 2, 4], dtype=np.int32), "gelu")
    with pytest.raises(BraidError, match="non-decreasing"):
        bi.moe_grouped_gemm(x, w, np.array([0, 3, 2], dtype=np.int32))
    with pytest.raises(BraidError, match="expert_offsets"):
        bi.moe_grouped_gemm(x, w, np.array([0, 4], dtype=np.int32))


# ---- torch, on CUDA --------------------------------------------------------------------------

# (tokens, k, experts, hidden, inter)
LAYERS = [(512, 2, 8, 512, 384), (200, 8, 128, 256, 128), (3, 8, 128, 2048, 768)]


@pytest.mark.parametrize("tokens,k,experts,hidden,inter", LAYERS,
                         ids=["T{}_k{}_E{}_H{}_I{}".format(*c) for c in LAYERS])
def test_moe_layer_torch(cuda, seed, tokens, k, experts, hidden, inter):
    gen = torch.Generator().manual_seed(seed % 2**63)
    bf16 = torch.bfloat16
    x = torch.randn((tokens, hidden), generator=gen).to(bf16).to(cuda)
    gate_up = (torch.randn((experts, 2 * inter, hidden), generator=gen) / hidden**0.5).to(bf16).to(cuda)
    down = (torch.randn((experts, hidden, inter), generator=gen) / inter**0.5).to(bf16).to(cuda)
    logits = torch.randn((tokens, experts), generator=gen).to(cuda)
    weights, ids = torch.topk(torch.softmax(logits, -1), k, dim=-1)
    ids = ids.to(torch.int32)

    offsets, sorted_pairs, pair_rows = bi.moe_permute(ids, experts)
    xs = bi.moe_gather(x, sorted_pairs, k)
    h = bi.moe_grouped_gemm(xs, gate_up, offsets, "swiglu")
    ys = bi.moe_grouped_gemm(h, down, offsets)
    out = bi.moe_combine(ys, pair_rows, weights.contiguous())

    want = torch.zeros((tokens, hidden), device=cuda)
    xf = x.float()
    for e in range(experts):
        tok, slot = torch.nonzero(ids == e, as_tuple=True)
        if tok.numel() == 0:
            continue
        g, u = (xf[tok] @ gate_up[e].float().T).chunk(2, dim=-1)
        y = (torch.nn.functional.silu(g) * u) @ down[e].float().T
        want.index_add_(0, tok, y * weights[tok, slot, None])
    assert rel_error(out.float().cpu().numpy(), want.cpu().numpy()) < 1e-2
