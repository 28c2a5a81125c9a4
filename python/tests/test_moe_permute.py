"""The MoE permutation (moe_permute, moe_gather, moe_combine) through braidinfer:

* on numpy arrays (CPU): against a stable argsort of the expert ids, and a round trip;
* on CUDA torch tensors: the same against torch (a stable sort, index_select, and the weighted
  sum the way transformers' MoE blocks combine expert outputs); skips without torch or a GPU.
"""

import pytest

np = pytest.importorskip("numpy")

import braidinfer as bi  # noqa: E402
from braidinfer import BraidError, Status  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.usefixtures("library")

# (tokens, k, experts)
CONFIGS = [(1, 8, 128), (5, 2, 8), (700, 8, 128), (517, 3, 60), (2048, 2, 32)]
CONFIG_IDS = ["T{}_k{}_E{}".format(*c) for c in CONFIGS]


def permute_reference(ids, experts):
    """(offsets, sorted_pairs, pair_rows) by a stable sort of the flattened ids."""
    flat = ids.reshape(-1)
    sorted_pairs = np.argsort(flat, kind="stable").astype(np.int32)
    pair_rows = np.empty_like(sorted_pairs)
    pair_rows[sorted_pairs] = np.arange(flat.size, dtype=np.int32)
    counts = np.bincount(flat, minlength=experts)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return offsets, sorted_pairs, pair_rows


@pytest.mark.parametrize("tokens,k,experts", CONFIGS, ids=CONFIG_IDS)
def test_moe_permute_numpy(seed, tokens, k, experts):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, experts, (tokens, k), dtype=np.int32)
    got = bi.moe_permute(ids, experts)
    for g, w in zip(got, permute_reference(ids, experts)):
        np.testing.assert_array_equal(g, w)


def test_moe_round_trip_numpy(seed):
    rng = np.random.default_rng(seed)
    tokens, hidden, k, experts = 40, 24, 4, 6
    x = rng.standard_normal((tokens, hidden)).astype(np.float32)
    ids = rng.integers(0, experts, (tokens, k), dtype=np.int32)
    weights = rng.random((tokens, k)).astype(np.float32)
    _, sorted_pairs, pair_rows = bi.moe_permute(ids, experts)
    xs = bi.moe_gather(x, sorted_pairs, k)
    np.testing.assert_array_equal(xs, x[sorted_pairs // k])
    out = bi.moe_combine(xs * 3.0, pair_rows, weights)  # an "expert" that triples its input
    np.testing.assert_allclose(out, 3.0 * x * weights.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)


def test_moe_permute_errors():
    ids = np.array([[0, 5]], dtype=np.int32)
    with pytest.raises(BraidError) as e:
        bi.moe_permute(ids, 4)
    assert e.value.status == Status.INVALID_ARGUMENT and "topk_ids" in str(e.value)
    with pytest.raises(BraidError) as e:
        bi.moe_combine(np.zeros((3, 4), np.float32), np.zeros(2, np.int32), np.zeros((1, 2), np.float32))
    assert e.value.status == Status.SHAPE and "'ys'" in str(e.value)


# ---- torch, on CUDA --------------------------------------------------------------------------


@pytest.mark.parametrize("tokens,k,experts", CONFIGS, ids=CONFIG_IDS)
def test_moe_permute_gather_combine_torch(cuda, seed, tokens, k, experts):
    gen = torch.Generator().manual_seed(seed % 2**63)
    hidden = 64
    ids = torch.randint(0, experts, (tokens, k), generator=gen, dtype=torch.int32).to(cuda)
    x = torch.randn((tokens, hidden), generator=gen).to(torch.bfloat16).to(cuda)
    weights = torch.rand((tokens, k), generator=gen).to(cuda)

    offsets, sorted_pairs, pair_rows = bi.moe_permute(ids, experts)
    want_sorted = torch.sort(ids.reshape(-1), stable=True)[1].to(torch.int32)
    want_counts = torch.bincount(ids.reshape(-1), minlength=experts)
    assert torch.equal(sorted_pairs, want_sorted)
    assert torch.equal(offsets[1:] - offsets[:-1], want_counts.to(torch.int32))
    assert torch.equal(pair_rows[sorted_pairs.long()],
                       torch.arange(tokens * k, dtype=torch.int32, device=cuda))

    xs = bi.moe_gather(x, sorted_pairs, k)
    assert torch.equal(xs, x.index_select(0, (sorted_pairs // k).long()))
    ys = (xs.float() * 2 - 1).to(torch.bfloat16)  # a stand-in for the experts' outputs
    out = bi.moe_combine(ys, pair_rows, weights)
    want = (ys.float()[pair_rows.long()].view(tokens, k, hidden) * weights.unsqueeze(-1)).sum(1)
    torch.testing.assert_close(out.float(), want.to(torch.bfloat16).float(), rtol=1e-2, atol=1e-2)
