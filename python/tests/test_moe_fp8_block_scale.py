"""moe_fp8_block_scale (a DeepSeek-V3 MoE layer on fp8 block-scaled weights) through braidinfer:

* the workspace size and argument errors, on numpy arrays: run wherever libbraid.so is built;
* against seed 003's definition written in torch as its reference reads (fp32 throughout, a loop
  over the local experts with index_add_), with flashinfer-bench's rule: an element fails only
  when |diff| > 1e-2 and |diff| / |ref| > 1e-2. On CUDA (skipped without torch, a GPU or a CUDA
  build), and on CPU torch tensors (the library's fp32 reference; skipped without torch).

The inputs follow flashinfer's test generator: routing logits randn with the local experts' +10
and their bias |randn| + 5 (so that tokens choose them), other bias randn in bf16, activations
2 * randn quantized per (token, 128 columns) and weights randn quantized per 128 x 128 block,
each with scale amax / 448.
"""

import math

import pytest

np = pytest.importorskip("numpy")

import braidinfer as bi  # noqa: E402
import torch_features  # noqa: E402
from braidinfer import BraidError, Status  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.usefixtures("library")

BLOCK = 128


# ---- without torch ---------------------------------------------------------------------------


def test_workspace_bytes():
    # T 3, k 4 (12 pairs), H 256, I 128, E 8, 3 terms; each piece rounded up to 256 bytes: six
    # small i32/f32 pieces, xs 3072, xs_scale 256, h 4608, h_scale 256, ys 12288.
    size = bi.moe_fp8_block_scale_workspace_bytes(3, 256, 128, 8, n_group=4, topk_group=2, top_k=4)
    assert size == 6 * 256 + 3072 + 256 + 4608 + 256 + 12288
    big = bi.moe_fp8_block_scale_workspace_bytes(8, 7168, 2048, 32)
    assert big % 256 == 0 and big > bi.moe_fp8_block_scale_workspace_bytes(1, 7168, 2048, 32)
    with pytest.raises(BraidError) as e:
        bi.moe_fp8_block_scale_workspace_bytes(3, 200, 128, 8)
    assert e.value.status == Status.INVALID_ARGUMENT and "'hidden'" in e.value.message


def test_errors_name_the_argument():
    """numpy has no fp8 or bf16: u8 arrays stand in where the dtype is checked after others."""
    t, eg, h, i, e = 3, 16, 256, 128, 8
    args = [np.zeros((t, eg), np.float32), np.zeros(eg, np.float32), np.zeros((t, h), np.uint8),
            np.ones((h // BLOCK, t), np.float32), np.zeros((e, 2 * i, h), np.uint8),
            np.ones((e, 2 * i // BLOCK, h // BLOCK), np.float32), np.zeros((e, h, i), np.uint8),
            np.ones((e, h // BLOCK, i // BLOCK), np.float32), 4, 2.5]
    kw = dict(n_group=4, topk_group=2, top_k=4, out=np.zeros((t, h), np.float32))

    def expect(status, fragments, args, **changes):
        with pytest.raises(BraidError) as err:
            bi.moe_fp8_block_scale(*args, **{**kw, **changes})
        assert err.value.status == status, err.value.message
        for f in ["moe_fp8_block_scale"] + fragments:
            assert f in err.value.message, f"'{f}' not in: {err.value.message}"

    expect(Status.DTYPE, ["'hidden_states'", "f8e4m3", "u8"], args)
    bad = list(args)
    bad[0] = np.zeros((t, eg), np.float16)
    expect(Status.DTYPE, ["'routing_logits'", "f32"], bad)
    expect(Status.INVALID_ARGUMENT, ["'n_group'", "got 3"], args, n_group=3)
    expect(Status.INVALID_ARGUMENT, ["'top_k'", "got 9"], args, top_k=9)
    expect(Status.INVALID_ARGUMENT, ["'intermediate_terms'", "got 4"], args, intermediate_terms=4)


# ---- torch: the definition's reference -------------------------------------------------------


def dequant_rows(q, scale):
    """[T, H] fp8 times its transposed scales [H / 128, T]."""
    return q.float() * scale.float().t().repeat_interleave(BLOCK, dim=1)


def dequant_blocks(q, scale):
    """[N, K] fp8 times its 128 x 128 block scales [N / 128, K / 128]."""
    return q.float() * scale.float().repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)


def reference(logits, bias, x, x_scale, w13, w13_scale, w2, w2_scale, local_expert_offset,
              routed_scaling_factor, n_group, topk_group, top_k):
    """seed 003's definition in torch, fp32 throughout."""
    tokens, hidden = x.shape
    global_experts = logits.shape[1]
    local_experts, inter = w13.shape[0], w13.shape[1] // 2
    a = dequant_rows(x, x_scale)

    s = torch.sigmoid(logits.float())
    s_wb = s + bias.float()
    size = global_experts // n_group
    group_scores = s_wb.view(tokens, n_group, size).topk(2, dim=-1).values.sum(dim=-1)
    group_idx = group_scores.topk(topk_group, dim=-1, sorted=False).indices
    group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    score_mask = group_mask.unsqueeze(-1).expand(tokens, n_group, size).reshape(tokens, -1)
    topk_idx = s_wb.masked_fill(score_mask == 0, float("-inf")).topk(top_k, dim=-1).indices
    chosen = torch.zeros_like(s).scatter_(1, topk_idx, 1)
    weights = s * chosen
    weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20) * routed_scaling_factor

    out = torch.zeros((tokens, hidden), dtype=torch.float32, device=x.device)
    for le in range(local_experts):
        ge = local_expert_offset + le
        if ge < 0 or ge >= global_experts:
            continue
        rows = torch.nonzero((topk_idx == ge).any(dim=1)).squeeze(1)
        if rows.numel() == 0:
            continue
        g1 = a[rows] @ dequant_blocks(w13[le], w13_scale[le]).t()
        c = torch.nn.functional.silu(g1[:, inter:]) * g1[:, :inter]
        o = c @ dequant_blocks(w2[le], w2_scale[le]).t()
        out.index_add_(0, rows, o * weights[rows, ge].unsqueeze(1))
    return out.to(torch.bfloat16)


def quantize_rows(v):
    """[T, H] fp32 -> fp8 and scales [H / 128, T] (amax / 448 per token and 128 columns)."""
    tokens, hidden = v.shape
    blocks = v.view(tokens, hidden // BLOCK, BLOCK)
    scale = blocks.abs().amax(dim=-1) / 448
    q = (blocks / scale.unsqueeze(-1)).to(torch.float8_e4m3fn).view(tokens, hidden)
    return q, scale.t().contiguous()


def quantize_blocks(v):
    """[E, N, K] fp32 -> fp8 and scales [E, N / 128, K / 128] (amax / 448 per block)."""
    e, n, k = v.shape
    blocks = v.view(e, n // BLOCK, BLOCK, k // BLOCK, BLOCK)
    scale = blocks.abs().amax(dim=(2, 4)) / 448
    q = (blocks / scale[:, :, None, :, None]).to(torch.float8_e4m3fn).view(e, n, k)
    return q, scale


def make_problem(device, seed, tokens, global_experts, local_experts, hidden, inter, offset,
                 boost=True):
    torch_features.require("float8")  # the problem is quantized to torch.float8_e4m3fn
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(shape, generator=gen, device=device, dtype=torch.float32)

    logits = randn(tokens, global_experts)
    bias = randn(global_experts)
    lo, hi = max(offset, 0), min(offset + local_experts, global_experts)
    if boost and lo < hi:
        logits[:, lo:hi] += 10
        bias[lo:hi] = bias[lo:hi].abs() + 5
    x, x_scale = quantize_rows(2 * randn(tokens, hidden))
    w13, w13_scale = quantize_blocks(randn(local_experts, 2 * inter, hidden))
    w2, w2_scale = quantize_blocks(randn(local_experts, hidden, inter))
    return [logits, bias.to(torch.bfloat16), x, x_scale, w13, w13_scale, w2, w2_scale, offset, 2.5]


def agreement(got, ref):
    """(share of elements within flashinfer-bench's rule, relative L2 error)."""
    got, ref = got.double(), ref.double()
    diff = (got - ref).abs()
    passed = (diff <= 1e-2) | (diff <= 1e-2 * ref.abs())
    rel = ((got - ref).norm() / ref.norm()).item() if ref.norm() > 0 else diff.norm().item()
    return passed.double().mean().item(), rel


@pytest.fixture
def exact_fp32_matmul():
    """The reference's matmuls in true fp32 (no TF32)."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = saved


SMALL = (64, 16, 512, 256)  # E_global, E_local, H, I (n_group 8, topk_group 4, top_k 8)
DEEPSEEK = (256, 32, 7168, 2048)
CUDA_CASES = [
    (SMALL, 1, 0, True), (SMALL, 40, 0, True), (SMALL, 300, 48, True),
    (SMALL, 40, 24, False),  # random routing: some choices local, some not
    (SMALL, 40, 56, True),  # offset + E_local > E_global
    (DEEPSEEK, 1, 0, True), (DEEPSEEK, 8, 96, True),
]
CUDA_IDS = [f"E{c[0][0]}_T{c[1]}_off{c[2]}" + ("" if c[3] else "_unboosted") for c in CUDA_CASES]


@pytest.mark.parametrize("shape,tokens,offset,boost", CUDA_CASES, ids=CUDA_IDS)
def test_cuda_meets_flashinfer_bench_rule(cuda, seed, exact_fp32_matmul, shape, tokens, offset,
                                          boost):
    eg, el, h, i = shape
    args = make_problem(cuda, seed % 2**63, tokens, eg, el, h, i, offset, boost)
    ref = reference(*args, n_group=8, topk_group=4, top_k=8)
    for terms in (3, 2, 1):
        out = bi.moe_fp8_block_scale(*args, intermediate_terms=terms)
        torch.cuda.synchronize()
        assert out.dtype == torch.bfloat16 and out.shape == (tokens, h)
        ratio, rel = agreement(out, ref)
        print(f"{terms} intermediate term(s): {100 * ratio:.2f}% pass, rel L2 {rel:.3g}")
        # Two terms pass about 96-97% of the elements: 95% is required only where the share
        # is measured over enough elements not to miss it by chance (not at 1 small token).
        if terms == 3 or (terms == 2 and out.numel() >= 4096):
            assert ratio >= 0.95, (terms, ratio, rel)
        if terms == 3:
            assert rel < 2e-3, rel


def test_cuda_no_local_choice_gives_zeros(cuda, seed):
    args = make_problem(cuda, seed % 2**63, 40, 64, 16, 512, 256, 1000, boost=False)
    out = torch.full((40, 512), float("nan"), dtype=torch.bfloat16, device=cuda)
    bi.moe_fp8_block_scale(*args, out=out)
    torch.cuda.synchronize()
    assert torch.equal(out, torch.zeros_like(out))


def test_cpu_reference_matches_the_definition(seed):
    torch_features.require("float8")
    args = make_problem("cpu", seed % 2**63, 5, 64, 16, 256, 128, 8)
    ref = reference(*args, n_group=8, topk_group=4, top_k=8)
    out = bi.moe_fp8_block_scale(*args)
    ratio, rel = agreement(out, ref)
    # fp64 sums against torch's fp32 ones: the same bf16 values but for rare roundings on the
    # other side of a boundary (one bf16 step) and elements that cancel to almost nothing.
    assert ratio >= 0.999 and rel < 1e-3 and not math.isnan(rel), (ratio, rel)
