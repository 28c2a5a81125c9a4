"""moe_route_grouped (DeepSeek-V3's grouped sigmoid router) through braidinfer:

* on numpy arrays (CPU), against the contract's formula written in numpy; runs anywhere
  libbraid.so is built (no GPU, no torch):  /usr/bin/python3 -m pytest -q python/tests -k grouped
* on CUDA torch tensors, against the formula written in torch the way transformers'
  DeepseekV3MoE writes it; skips without torch, a CUDA device or a CUDA build of libbraid.so.

The references take the sigmoid in float64 and round it to float32, as the library does, so
the biased scores are the same bits and the chosen ids can be compared exactly; the choices use
stable sorts, so equal scores go to the lower index as the contract asks.
"""

import pytest

np = pytest.importorskip("numpy")

import braidinfer as bi  # noqa: E402
from braidinfer import BraidError, Status  # noqa: E402
from numeric import rel_error  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.usefixtures("library")

# (tokens, experts, n_group, topk_group, k, routed_scaling_factor)
CONFIGS = [
    (1, 256, 8, 4, 8, 2.5),  # DeepSeek-V3
    (33, 256, 8, 4, 8, 2.5),
    (7, 96, 6, 3, 8, 1.0),  # not powers of two
    (7, 24, 3, 2, 5, 1.0),
    (3, 512, 8, 4, 16, 1.0),  # the limits
    (5, 384, 1, 1, 8, 2.827),  # one group (Kimi-K2)
    (5, 32, 32, 4, 4, 1.0),  # groups of one
    (4, 128, 64, 20, 16, 1.0),  # more than 32 groups
]
CONFIG_IDS = ["x".join(map(str, c[:5])) for c in CONFIGS]


# ---- numpy, on the CPU -----------------------------------------------------------------------


def grouped_ref(logits, bias, n_group, topk_group, k, scale):
    """The contract in numpy: s = sigmoid (float64, rounded to float32), b = s + bias in
    float32 with NaN as -inf; group score = sum of the group's two largest b; keep the
    topk_group best groups; the k largest b among their experts only (stable: ties by index)."""
    s = (1.0 / (1.0 + np.exp(-logits.astype(np.float64)))).astype(np.float32)
    b = s + bias.astype(np.float32)
    b = np.where(np.isnan(b), np.float32(-np.inf), b)
    tokens, experts = b.shape
    size = experts // n_group
    top = -np.sort(-b.reshape(tokens, n_group, size), axis=-1)  # descending within each group
    group_scores = top[..., 0] if size == 1 else top[..., 0] + top[..., 1]
    group_scores = np.where(np.isnan(group_scores), np.float32(-np.inf), group_scores)
    weights = np.zeros((tokens, k), np.float64)
    ids = np.zeros((tokens, k), np.int64)
    for t in range(tokens):
        kept_groups = np.argsort(-group_scores[t], kind="stable")[:topk_group]
        candidates = np.sort(np.concatenate([np.arange(g * size, (g + 1) * size)
                                             for g in kept_groups]))
        ids[t] = candidates[np.argsort(-b[t, candidates], kind="stable")[:k]]
        chosen = s[t, ids[t]].astype(np.float64)
        weights[t] = chosen / (chosen.sum() + 1e-20) * scale
    return weights, ids


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("tokens,experts,n_group,topk_group,k,scale", CONFIGS, ids=CONFIG_IDS)
def test_moe_route_grouped(seed, dtype, tokens, experts, n_group, topk_group, k, scale):
    rng = np.random.default_rng(seed)
    logits = rng.uniform(-4, 4, (tokens, experts)).astype(dtype)  # f16 ties: lower index first
    bias = rng.uniform(-0.5, 0.5, experts).astype(np.float32)
    w_ref, ids_ref = grouped_ref(logits, bias, n_group, topk_group, k, scale)
    w = np.full((tokens, k), np.nan, np.float32)
    ids = np.full((tokens, k), -1, np.int32)
    bi.moe_route_grouped(logits, bias, n_group, topk_group, k, scale, w, ids)
    np.testing.assert_array_equal(ids, ids_ref)
    assert rel_error(w, w_ref) <= 1e-5


def test_moe_route_grouped_worked_example():
    # 8 experts in 4 groups of 2, keep 2 groups, k = 3. Group 0 holds the best expert (x = 3)
    # but scores 1.0; groups 2 (1.3, thanks to bias[5]) and 1 (1.245) are kept. Experts 2 and 3
    # tie: the lower index first. A global top-3 would be [0, 6, 4].
    logits = np.array([[3, -3, 0.5, 0.5, 1, -1, 2, -4]], np.float32)
    s = 1 / (1 + np.exp(-logits[0].astype(np.float64)))
    for shift in (0.0, -2.0):  # -2: every b negative; the dropped groups stay excluded
        bias = np.full(8, shift, np.float32)
        bias[5] += 0.3
        w, ids = bi.moe_route_grouped(logits, bias, 4, 2, 3, 2.5)
        assert w.dtype == np.float32 and ids.dtype == np.int32 and ids.shape == (1, 3)
        np.testing.assert_array_equal(ids, [[4, 2, 3]])
        chosen = s[[4, 2, 3]]
        np.testing.assert_allclose(w[0], chosen / chosen.sum() * 2.5, rtol=1e-6)


def test_moe_route_grouped_ties_nan_and_strided_rows():
    wide = np.zeros((4, 20), np.float32)
    logits = wide[:, :16]  # rows of 16 at a row stride of 20
    logits[1, 8:] = 1  # groups 2 and 3 tie
    logits[2, 3::4] = 2  # every group ties
    # NaN counts as -inf: groups 1 and 3 (s(2) + s(0.5)) are kept; their NaNs come last.
    logits[3] = [np.nan, np.nan, 1, 0, np.nan, 2, 0.5, np.nan] * 2
    w, ids = bi.moe_route_grouped(logits, np.zeros(16, np.float32), 4, 2, 5, 1.0)
    np.testing.assert_array_equal(ids, [[0, 1, 2, 3, 4], [8, 9, 10, 11, 12], [3, 7, 0, 1, 2],
                                        [5, 13, 6, 14, 4]])
    np.testing.assert_allclose(w[0], 0.2, rtol=1e-6)
    assert np.isnan(w[3]).all()  # a NaN s among the chosen


def expect_error(status, fragments, *args):
    with pytest.raises(BraidError) as e:
        bi.moe_route_grouped(*args)
    assert e.value.status == status, e.value.message
    for f in ["moe_route_grouped"] + fragments:
        assert f in e.value.message, f"'{f}' not in: {e.value.message}"


def test_moe_route_grouped_errors():
    logits = np.zeros((3, 8), np.float32)
    bias = np.zeros(8, np.float32)
    expect_error(Status.INVALID_ARGUMENT, ["'n_group'", "divisor", "got 3"], logits, bias, 3, 1, 2, 1.0)
    expect_error(Status.INVALID_ARGUMENT, ["'topk_group'", "got 5"], logits, bias, 4, 5, 2, 1.0)
    expect_error(Status.INVALID_ARGUMENT, ["'k'", "= 4", "got 5"], logits, bias, 4, 2, 5, 1.0)
    expect_error(Status.INVALID_ARGUMENT, ["'routed_scaling_factor'"], logits, bias, 4, 2, 3,
                 float("nan"))
    expect_error(Status.DTYPE, ["'bias'", "f32 or bf16", "f16"], logits, bias.astype(np.float16),
                 4, 2, 3, 1.0)
    expect_error(Status.SHAPE, ["'bias'", "[8]", "[7]"], logits, bias[:7], 4, 2, 3, 1.0)
    expect_error(Status.DTYPE, ["'topk_ids'", "i32", "i64"], logits, bias, 4, 2, 3, 1.0,
                 np.zeros((3, 3), np.float32), np.zeros((3, 3), np.int64))


# ---- torch, on CUDA --------------------------------------------------------------------------


def grouped_torch(logits, bias, n_group, topk_group, k, scale, exact=True):
    """transformers' DeepseekV3MoE.route_tokens_to_experts (norm_topk_prob=True), with the
    dropped groups excluded (-inf) rather than filled with 0.0. exact: the sigmoid in float64
    rounded to float32 (the library's bits) and stable sorts for the contract's tie rule;
    otherwise transformers' own float32 sigmoid and torch.topk (inputs must have no near-ties)."""
    if exact:
        scores = torch.sigmoid(logits.double()).float()
    else:
        scores = logits.float().sigmoid()
    scores_for_choice = scores + bias.float()
    tokens, experts = scores_for_choice.shape
    size = experts // n_group
    grouped = scores_for_choice.view(tokens, n_group, size)
    group_scores = grouped.topk(min(2, size), dim=-1)[0].sum(dim=-1)
    if exact:
        group_idx = torch.sort(group_scores, dim=-1, descending=True, stable=True)[1][:, :topk_group]
    else:
        group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(tokens, n_group, size).reshape(tokens, experts)
    scores_for_choice = scores_for_choice.masked_fill(~score_mask.bool(), float("-inf"))
    if exact:
        topk_idx = torch.sort(scores_for_choice, dim=-1, descending=True, stable=True)[1][:, :k]
    else:
        topk_idx = torch.topk(scores_for_choice, k=k, dim=-1, sorted=True)[1]
    topk_weights = scores.gather(1, topk_idx)
    topk_weights = topk_weights / (topk_weights.sum(dim=-1, keepdim=True) + 1e-20) * scale
    return topk_weights, topk_idx


TORCH_DTYPES = ["bfloat16", "float32"]


@pytest.mark.parametrize("bias_dtype", TORCH_DTYPES, ids=["bias_bf16", "bias_f32"])
@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=["bf16", "f32"])
@pytest.mark.parametrize("tokens,experts,n_group,topk_group,k,scale",
                         CONFIGS + [(1024, 256, 8, 4, 8, 2.5)], ids=CONFIG_IDS + ["deepseek_T1024"])
def test_moe_route_grouped_torch(cuda, seed, dtype, bias_dtype, tokens, experts, n_group,
                                 topk_group, k, scale):
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.rand((tokens, experts), generator=gen) * 8 - 4).to(getattr(torch, dtype)).to(cuda)
    bias = (torch.rand(experts, generator=gen) - 0.5).to(getattr(torch, bias_dtype)).to(cuda)
    w_ref, ids_ref = grouped_torch(logits, bias, n_group, topk_group, k, scale)
    w = torch.full((tokens, k), float("nan"), dtype=torch.float32, device=cuda)
    ids = torch.full((tokens, k), -1, dtype=torch.int32, device=cuda)
    bi.moe_route_grouped(logits, bias, n_group, topk_group, k, scale, w, ids)
    assert torch.equal(ids.long(), ids_ref)
    got, ref = w.double().cpu(), w_ref.double().cpu()
    assert not torch.isnan(got).any()
    assert ((got - ref).norm() / ref.norm()).item() <= 1e-5


def test_moe_route_grouped_matches_transformers_formula(cuda, seed):
    """transformers' own code path (float32 sigmoid, torch.topk, 0.0 for the dropped groups) on
    DeepSeek-V3's shape, with logits far apart (a permutation of a grid of step 1/32) and no
    bias: every b is positive, so filling with 0.0 and excluding agree."""
    gen = torch.Generator().manual_seed(seed)
    tokens, experts = 5, 256
    perms = torch.stack([torch.randperm(experts, generator=gen) for _ in range(tokens)])
    logits = ((perms - experts // 2).float() / 32).to(torch.bfloat16).to(cuda)
    bias = torch.zeros(experts, dtype=torch.float32, device=cuda)
    w, ids = bi.moe_route_grouped(logits, bias, 8, 4, 8, 2.5)
    assert w.device == logits.device and ids.dtype == torch.int32 and ids.shape == (tokens, 8)
    w_ref, ids_ref = grouped_torch(logits, bias, 8, 4, 8, 2.5, exact=False)
    assert torch.equal(ids.long(), ids_ref)
    assert ((w.double() - w_ref.double()).norm() / w_ref.double().norm()).item() <= 1e-5
