"""moe_fp8_quantize, moe_gather_fp8 and moe_grouped_gemm_fp8 through braidinfer:

* on numpy arrays (CPU; fp8 as uint8 arrays of e4m3 codes, numpy having no fp8 dtype): the
  quantization against the same formula written in numpy with an independent e4m3 rounding (bit
  for bit), the gather against indexing, the grouped GEMM against the dequantized products in
  float64, and argument errors;
* on torch tensors (float8_e4m3fn; CPU, and CUDA when there is a device): the quantization
  against the formula in torch (bit for bit) and the grouped GEMM against a float64 formula on
  the dequantized operands. Skipped without torch.
"""

import pytest

np = pytest.importorskip("numpy")

import braidinfer as bi  # noqa: E402
import torch_features  # noqa: E402
from fp8_weights import (BLOCK, E4M3, block_weights, dequantize_weights, e4m3_round,  # noqa: E402
                         weights_torch)
from braidinfer import BraidError  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

pytestmark = pytest.mark.usefixtures("library")


def quantize_reference(x, terms):
    """moe_fp8_quantize's formula in float32 numpy: (values of q [M, terms K], q_scale)."""
    m, k = x.shape
    v = x.astype(np.float32).reshape(m, k // BLOCK, BLOCK)
    values, scales = [], []
    for _ in range(terms):
        amax = np.abs(v).max(axis=2)
        s = np.where(amax == 0, np.float32(1), amax / np.float32(448)).astype(np.float32)
        q = e4m3_round(v / s[:, :, None]).astype(np.float32)
        v = v - q * s[:, :, None]  # float32: the product rounded, then the difference
        values.append(q.reshape(m, k))
        scales.append(s.T)
    return np.concatenate(values, axis=1), np.concatenate(scales, axis=0)


def activations(rng, rows, k):
    """DeepSeek-like activations: 2 * randn, each (row, block) times 2^u, u in [-2, 2]."""
    x = 2 * rng.standard_normal((rows, k // BLOCK, BLOCK))
    x *= 2.0 ** rng.uniform(-2, 2, (rows, k // BLOCK, 1))
    return x.reshape(rows, k).astype(np.float32)


def random_offsets(rng, rows, experts):
    counts = np.bincount(rng.integers(0, experts, rows), minlength=experts)
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)


def dequantize_rows(codes, scale, k):
    """Sum over the terms of an fp8 [M, R K] operand with scales [R K / 128, M], in float64."""
    m, width = codes.shape
    per_column = np.repeat(scale.T.astype(np.float64), BLOCK, axis=1)  # [M, R K]
    return (E4M3[codes] * per_column).reshape(m, width // k, k).sum(axis=1)


def grouped_reference(a, w, offsets, activation):
    """Per expert, its rows of a times w[e]^T (float64), then the activation."""
    n = w.shape[1]
    cols = n if activation == "none" else n // 2
    y = np.full((a.shape[0], cols), np.nan)
    for e in range(w.shape[0]):
        rows = slice(offsets[e], offsets[e + 1])
        g = a[rows] @ w[e].T
        if activation != "none":
            first, second = g[:, :cols], g[:, cols:]
            gate, up = (first, second) if activation == "swiglu" else (second, first)
            g = gate / (1 + np.exp(-gate)) * up
        y[rows] = g
    return y


# ---- numpy -----------------------------------------------------------------------------------


@pytest.mark.parametrize("terms", [1, 2, 3])
def test_quantize_numpy(seed, terms):
    rng = np.random.default_rng(seed)
    x = activations(rng, 5, 384)
    x[0, :BLOCK] = 0  # a zero block: scale 1
    q, q_scale = bi.moe_fp8_quantize(x, terms=terms)
    assert q.dtype == np.uint8 and q.shape == (5, terms * 384)
    assert q_scale.dtype == np.float32 and q_scale.shape == (terms * 3, 5)
    want_q, want_scale = quantize_reference(x, terms)
    np.testing.assert_array_equal(E4M3[q], want_q)
    np.testing.assert_array_equal(q_scale, want_scale)
    assert q_scale[0, 0] == 1


def test_gather_numpy(seed):
    rng = np.random.default_rng(seed)
    tokens, k, width = 4, 2, 256
    x = rng.integers(0, 256, (tokens, width), dtype=np.uint8)
    x_scale = rng.uniform(0.5, 2, (width // BLOCK, tokens)).astype(np.float32)
    pairs = rng.permutation(tokens * k).astype(np.int32)
    xs, xs_scale = bi.moe_gather_fp8(x, x_scale, pairs, k)
    np.testing.assert_array_equal(xs, x[pairs // k])
    np.testing.assert_array_equal(xs_scale, x_scale[:, pairs // k])


@pytest.mark.parametrize("activation", ["none", "swiglu", "swiglu_gate_last"])
@pytest.mark.parametrize("terms", [1, 2])
def test_grouped_gemm_numpy(seed, activation, terms):
    rng = np.random.default_rng(seed)
    rows, experts, n, k = 20, 3, 256, 256
    x, x_scale = bi.moe_fp8_quantize(activations(rng, rows, k), terms=terms)
    w, w_scale = block_weights(rng, experts, n, k)
    offsets = random_offsets(rng, rows - 2, experts)  # the last 2 rows belong to no expert
    cols = n if activation == "none" else n // 2
    y = np.full((rows, cols), 7.0, dtype=np.float32)
    bi.moe_grouped_gemm_fp8(x, x_scale, w, w_scale, offsets, activation, y)
    want = grouped_reference(dequantize_rows(x, x_scale, k), dequantize_weights(w, w_scale),
                             offsets, activation)
    scale = np.sqrt(np.mean(want[:rows - 2] ** 2))
    np.testing.assert_allclose(y[:rows - 2], want[:rows - 2], rtol=1e-5, atol=1e-5 * scale)
    assert (y[rows - 2:] == 7.0).all()  # left as they were


@pytest.mark.parametrize("y_terms", [1, 3])
def test_grouped_gemm_fp8_output_numpy(seed, y_terms):
    rng = np.random.default_rng(seed)
    rows, experts, n, k = 12, 2, 512, 128
    x, x_scale = bi.moe_fp8_quantize(activations(rng, rows, k))
    w, w_scale = block_weights(rng, experts, n, k)
    offsets = random_offsets(rng, rows, experts)
    inter = n // 2
    y = np.zeros((rows, y_terms * inter), dtype=np.uint8)
    y_scale = np.zeros((y_terms * inter // BLOCK, rows), dtype=np.float32)
    bi.moe_grouped_gemm_fp8(x, x_scale, w, w_scale, offsets, "swiglu_gate_last", y, y_scale)
    h = grouped_reference(dequantize_rows(x, x_scale, k), dequantize_weights(w, w_scale), offsets,
                          "swiglu_gate_last")
    got = dequantize_rows(y, y_scale, inter)
    error = np.linalg.norm(got - h) / np.linalg.norm(h)
    assert error < (2.0**-4 if y_terms == 1 else 5e-4), error  # see test_grouped_gemm_torch


def test_errors_numpy():
    x = np.zeros((4, 128), np.uint8)
    x_scale = np.ones((1, 4), np.float32)
    w = np.zeros((2, 256, 128), np.uint8)
    w_scale = np.ones((2, 2, 1), np.float32)
    offsets = np.array([0, 2, 4], np.int32)
    with pytest.raises(ValueError, match="activation"):
        bi.moe_grouped_gemm_fp8(x, x_scale, w, w_scale, offsets, "gelu")
    with pytest.raises(BraidError, match="'x'.*f8e4m3.*f32"):
        bi.moe_grouped_gemm_fp8(x.astype(np.float32), x_scale, w, w_scale, offsets)
    with pytest.raises(BraidError, match="'x_scale'.*f32.*u8"):
        bi.moe_grouped_gemm_fp8(x, x.T.copy(), w, w_scale, offsets)
    with pytest.raises(BraidError, match="'y'.*needs activation swiglu"):
        bi.moe_grouped_gemm_fp8(x, x_scale, w, w_scale, offsets, "none",
                                np.zeros((4, 256), np.uint8), np.ones((2, 4), np.float32))
    with pytest.raises(BraidError, match="'x'.*multiple of 128"):
        bi.moe_fp8_quantize(np.zeros((2, 100), np.float32))
    with pytest.raises(BraidError, match="'sorted_pairs'.*values in"):
        bi.moe_gather_fp8(x, x_scale, np.array([0, 1, 2, 9], np.int32), 1)


# ---- torch -----------------------------------------------------------------------------------


@pytest.fixture(params=["cpu", "cuda"])
def device(request):
    """A torch device: the CPU (needs torch only) and the current CUDA device (skips without one
    or in a CPU-only build). The torch tests here all use torch.float8_e4m3fn."""
    torch_features.require("float8")
    if request.param == "cpu":
        return torch.device("cpu")
    return request.getfixturevalue("cuda")


def quantize_torch(x, terms):
    """moe_fp8_quantize's formula in torch (float32, one rounding per operation)."""
    m, k = x.shape
    v = x.float().reshape(m, k // BLOCK, BLOCK)
    codes, scales = [], []
    for _ in range(terms):
        amax = v.abs().amax(dim=2)
        # A tensor divisor: PyTorch's CUDA division by a Python scalar multiplies by its
        # reciprocal, which is not amax / 448 rounded once.
        s = torch.where(amax == 0, torch.ones_like(amax), amax / torch.full_like(amax, 448))
        q = (v / s[:, :, None]).clamp(-448, 448).to(torch.float8_e4m3fn)
        v = v - q.float() * s[:, :, None]
        codes.append(q.reshape(m, k))
        scales.append(s.T)
    return torch.cat(codes, dim=1), torch.cat(scales, dim=0).contiguous()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("terms", [1, 3])
def test_quantize_torch(device, seed, dtype, terms):
    gen = torch.Generator().manual_seed(seed % 2**63)
    x = (2 * torch.randn((7, 7168), generator=gen)).to(getattr(torch, dtype)).to(device)
    x[0, :BLOCK] = 0
    q, q_scale = bi.moe_fp8_quantize(x, terms=terms)
    assert q.dtype == torch.float8_e4m3fn and q.device == x.device
    want_q, want_scale = quantize_torch(x, terms)
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))
    assert torch.equal(q_scale, want_scale)


@pytest.mark.parametrize("activation,y_terms", [("none", 0), ("swiglu", 0),
                                                ("swiglu_gate_last", 0), ("swiglu_gate_last", 3)])
def test_grouped_gemm_torch(device, seed, activation, y_terms):
    gen = torch.Generator().manual_seed(seed % 2**63)
    rows, experts, n, k = 300, 8, 512, 1024
    x, x_scale = quantize_torch(2 * torch.randn((rows, k), generator=gen), 1)
    w, w_scale = weights_torch(gen, experts, n, k)
    counts = torch.bincount(torch.randint(0, experts, (rows,), generator=gen), minlength=experts)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).to(torch.int32)
    cols = n if activation == "none" else n // 2
    y = y_scale = None
    if y_terms:
        y = torch.empty((rows, y_terms * cols), dtype=torch.float8_e4m3fn, device=device)
        y_scale = torch.empty((y_terms * cols // BLOCK, rows), dtype=torch.float32, device=device)
    on = [t.to(device) for t in (x, x_scale, w, w_scale, offsets)]
    y = bi.moe_grouped_gemm_fp8(*on, activation, y, y_scale)

    # float64 reference on the dequantized operands
    a = x.float().double() * x_scale.double().T.repeat_interleave(BLOCK, dim=1)
    wd = w.float().double() * w_scale.double().repeat_interleave(BLOCK, 1).repeat_interleave(BLOCK, 2)
    want = torch.empty((rows, cols), dtype=torch.float64)
    for e in range(experts):
        r = slice(int(offsets[e]), int(offsets[e + 1]))
        g = a[r] @ wd[e].T
        if activation != "none":
            gate, up = (g[:, :cols], g[:, cols:]) if activation == "swiglu" else (g[:, cols:], g[:, :cols])
            g = gate / (1 + torch.exp(-gate)) * up
        want[r] = g
    if y_terms:
        per_column = y_scale.cpu().double().T.repeat_interleave(BLOCK, dim=1)
        got = (y.cpu().float().double() * per_column).reshape(rows, y_terms, cols).sum(dim=1)
    else:
        got = y.cpu().float().double()
    error = (torch.linalg.norm(got - want) / torch.linalg.norm(want)).item()
    # Hopper's fp8 tensor cores accumulate a 128-deep slice with about 14 bits: the H100 measured
    # 1.3e-4 here, the fp32 simple kernel far less.
    assert error < 5e-4, error
