"""moe_route_softmax_grouped (DeepSeek-V2's router) through braidinfer:

* on numpy arrays (CPU), against the contract written in numpy (float64); runs anywhere
  libbraid.so is built (no GPU, no torch):  /usr/bin/python3 -m pytest -q python/tests -k softmax_grouped
* on CUDA torch tensors, against transformers' DeepseekV2MoEGate written in torch; skips without
  torch, a CUDA device or a CUDA build of libbraid.so.

The logits lie on a grid of 1/64 in [-4, 4) (exact in every float dtype), so distinct logits give
probabilities far apart and the ids can be compared exactly, ties (frequent on the grid) going to
the lower index as the contract asks (stable sorts in the references).
"""

import pytest

np = pytest.importorskip("numpy")

import braidinfer as bi  # noqa: E402
from braidinfer import BraidError, Status  # noqa: E402
from numeric import rel_error  # noqa: E402

pytestmark = pytest.mark.usefixtures("library")

# (tokens, experts, n_group, topk_group, k, renormalize, routed_scaling_factor)
CONFIGS = [
    (1, 160, 8, 3, 6, False, 16.0),  # DeepSeek-V2: group_limited_greedy
    (33, 160, 8, 3, 6, False, 16.0),
    (33, 160, 8, 3, 8, True, 1.0),
    (5, 64, 1, 1, 6, False, 1.0),  # DeepSeek-V2-Lite: greedy
    (33, 64, 1, 1, 6, True, 16.0),
    (7, 64, 8, 3, 8, True, 16.0),
    (3, 512, 8, 3, 16, True, 1.0),  # the limits
    (5, 32, 32, 4, 4, False, 1.0),  # groups of one
    (4, 128, 64, 20, 16, True, 1.0),  # more than 32 groups
]
CONFIG_IDS = ["x".join(map(str, c[:5])) + ("_renorm" if c[5] else "") + f"_s{int(c[6])}"
              for c in CONFIGS]


def grid_logits(rng, tokens, experts):
    return rng.integers(-256, 256, (tokens, experts)).astype(np.float32) / 64


# ---- numpy, on the CPU -----------------------------------------------------------------------


def softmax_grouped_ref(logits, n_group, topk_group, k, renormalize, scale):
    """The contract in numpy (float64): p = softmax; group score = the group's largest p; keep
    the topk_group best groups; the k largest p among their experts only (stable: ties by
    index); weights p (/ their sum when renormalize) * scale. A NaN p would rank last: none here."""
    x = logits.astype(np.float64)
    p = np.exp(x - x.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    tokens, experts = p.shape
    size = experts // n_group
    group_scores = p.reshape(tokens, n_group, size).max(axis=-1)
    weights = np.zeros((tokens, k), np.float64)
    ids = np.zeros((tokens, k), np.int64)
    for t in range(tokens):
        kept_groups = np.argsort(-group_scores[t], kind="stable")[:topk_group]
        candidates = np.sort(np.concatenate([np.arange(g * size, (g + 1) * size)
                                             for g in kept_groups]))
        ids[t] = candidates[np.argsort(-p[t, candidates], kind="stable")[:k]]
        chosen = p[t, ids[t]]
        weights[t] = (chosen / chosen.sum() if renormalize else chosen) * scale
    return weights, ids


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("tokens,experts,n_group,topk_group,k,renormalize,scale", CONFIGS,
                         ids=CONFIG_IDS)
def test_moe_route_softmax_grouped(seed, dtype, tokens, experts, n_group, topk_group, k,
                                   renormalize, scale):
    rng = np.random.default_rng(seed)
    logits = grid_logits(rng, tokens, experts).astype(dtype)
    w_ref, ids_ref = softmax_grouped_ref(logits, n_group, topk_group, k, renormalize, scale)
    w = np.full((tokens, k), np.nan, np.float32)
    ids = np.full((tokens, k), -1, np.int32)
    bi.moe_route_softmax_grouped(logits, n_group, topk_group, k, renormalize, scale, w, ids)
    np.testing.assert_array_equal(ids, ids_ref)
    assert rel_error(w, w_ref) <= 1e-5


def test_moe_route_softmax_grouped_is_topk_softmax_with_one_group(seed):
    # The same p bits as moe_route_topk_softmax: one group and scale 1 give its output exactly.
    rng = np.random.default_rng(seed)
    logits = grid_logits(rng, 17, 160)
    for renormalize in (False, True):
        w0, ids0 = bi.moe_route_topk_softmax(logits, 6, renormalize)
        w, ids = bi.moe_route_softmax_grouped(logits, 1, 1, 6, renormalize, 1.0)
        np.testing.assert_array_equal(ids, ids0)
        np.testing.assert_array_equal(w, w0)


def test_moe_route_softmax_grouped_worked_example():
    # 8 experts in 4 groups of 2, keep 2, k = 3. Group maxima: 3, 2.5, 1, 2.8: groups 0 and 3
    # are kept (group 1 holds the larger pair, but the score is the max); expert 1 (x = -3) is
    # chosen over the dropped groups' experts. One group: the global top 3, [0, 6, 2].
    logits = np.array([[3, -3, 2.5, 2.4, 1, 0.9, 2.8, -4]], np.float32)
    p = np.exp(logits[0].astype(np.float64) - 3)
    p /= p.sum()
    w, ids = bi.moe_route_softmax_grouped(logits, 4, 2, 3, True, 16.0)
    assert w.dtype == np.float32 and ids.dtype == np.int32 and ids.shape == (1, 3)
    np.testing.assert_array_equal(ids, [[0, 6, 1]])
    np.testing.assert_allclose(w[0], p[[0, 6, 1]] / p[[0, 6, 1]].sum() * 16, rtol=1e-6)
    w, ids = bi.moe_route_softmax_grouped(logits, 1, 1, 3, False, 1.0)
    np.testing.assert_array_equal(ids, [[0, 6, 2]])
    np.testing.assert_allclose(w[0], p[[0, 6, 2]], rtol=1e-6)


def test_moe_route_softmax_grouped_ties_nan_and_strided_rows():
    wide = np.zeros((4, 20), np.float32)
    logits = wide[:, :16]  # rows of 16 at a row stride of 20
    logits[1, 8:] = 1  # groups 2 and 3 tie
    logits[2, 3::4] = 2  # every group ties
    logits[3, 5] = np.nan  # every p NaN: the groups and experts tie, the weights are NaN
    w, ids = bi.moe_route_softmax_grouped(logits, 4, 2, 5, True, 1.0)
    np.testing.assert_array_equal(ids, [[0, 1, 2, 3, 4], [8, 9, 10, 11, 12], [3, 7, 0, 1, 2],
                                        [0, 1, 2, 3, 4]])
    np.testing.assert_allclose(w[0], 0.2, rtol=1e-6)
    assert np.isnan(w[3]).all() and not np.isnan(w[:3]).any()


def expect_error(status, fragments, *args):
    with pytest.raises(BraidError) as e:
        bi.moe_route_softmax_grouped(*args)
    assert e.value.status == status, e.value.message
    for f in ["moe_route_softmax_grouped"] + fragments:
        assert f in e.value.message, f"'{f}' not in: {e.value.message}"


def test_moe_route_softmax_grouped_errors():
    logits = np.zeros((3, 8), np.float32)
    expect_error(Status.INVALID_ARGUMENT, ["'n_group'", "divisor", "got 3"], logits, 3, 1, 2, True, 1.0)
    expect_error(Status.INVALID_ARGUMENT, ["'topk_group'", "got 5"], logits, 4, 5, 2, True, 1.0)
    expect_error(Status.INVALID_ARGUMENT, ["'k'", "= 4", "got 5"], logits, 4, 2, 5, True, 1.0)
    expect_error(Status.INVALID_ARGUMENT, ["'routed_scaling_factor'"], logits, 4, 2, 3, False,
                 float("nan"))
    expect_error(Status.DTYPE, ["'logits'", "i32"], logits.astype(np.int32), 4, 2, 3, True, 1.0)
    expect_error(Status.SHAPE, ["'logits'", "between 1 and 512 experts"],
                 np.zeros((3, 520), np.float32), 4, 2, 3, True, 1.0)
    expect_error(Status.DTYPE, ["'topk_ids'", "i32", "i64"], logits, 4, 2, 3, True, 1.0,
                 np.zeros((3, 3), np.float32), np.zeros((3, 3), np.int64))
    expect_error(Status.SHAPE, ["'topk_weights'", "[3, 3]", "[3, 2]"], logits, 4, 2, 3, True, 1.0,
                 np.zeros((3, 2), np.float32), np.zeros((3, 3), np.int32))


# ---- torch, on CUDA --------------------------------------------------------------------------


def deepseek_v2_gate(logits, n_group, topk_group, k, renormalize, scale):
    """transformers' DeepseekV2MoEGate (greedy: n_group 1; group_limited_greedy: the dropped
    groups' scores filled with 0.0), with stable sorts for the contract's tie rule, and the
    weights as the contract has them (scaled whether or not renormalised, no 1e-20)."""
    import torch

    scores = logits.float().softmax(dim=-1)
    tokens, experts = scores.shape
    if n_group > 1:
        group_scores = scores.view(tokens, n_group, -1).max(dim=-1).values
        group_idx = torch.sort(group_scores, dim=-1, descending=True, stable=True)[1][:, :topk_group]
        group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
        score_mask = (group_mask.unsqueeze(-1).expand(tokens, n_group, experts // n_group)
                      .reshape(tokens, experts))
        scores_for_choice = scores.masked_fill(~score_mask.bool(), 0.0)
    else:
        scores_for_choice = scores
    topk_idx = torch.sort(scores_for_choice, dim=-1, descending=True, stable=True)[1][:, :k]
    topk_weight = scores.gather(1, topk_idx)
    if renormalize:
        topk_weight = topk_weight / topk_weight.sum(dim=-1, keepdim=True)
    return topk_weight * scale, topk_idx


TORCH_DTYPES = ["bfloat16", "float16", "float32"]


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=["bf16", "f16", "f32"])
@pytest.mark.parametrize("tokens,experts,n_group,topk_group,k,renormalize,scale",
                         CONFIGS + [(2000, 160, 8, 3, 6, False, 16.0)],
                         ids=CONFIG_IDS + ["deepseek_v2_T2000"])
def test_moe_route_softmax_grouped_torch(cuda, seed, dtype, tokens, experts, n_group, topk_group,
                                         k, renormalize, scale):
    import torch

    gen = torch.Generator().manual_seed(seed)
    grid = torch.randint(-256, 256, (tokens, experts), generator=gen).float() / 64
    logits = grid.to(getattr(torch, dtype)).to(cuda)
    w_ref, ids_ref = deepseek_v2_gate(logits, n_group, topk_group, k, renormalize, scale)
    w = torch.full((tokens, k), float("nan"), dtype=torch.float32, device=cuda)
    ids = torch.full((tokens, k), -1, dtype=torch.int32, device=cuda)
    bi.moe_route_softmax_grouped(logits, n_group, topk_group, k, renormalize, scale, w, ids)
    assert torch.equal(ids.long(), ids_ref)
    got, ref = w.double().cpu(), w_ref.double().cpu()
    assert not torch.isnan(got).any()
    assert ((got - ref).norm() / ref.norm()).item() <= 1e-5
