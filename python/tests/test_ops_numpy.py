"""The CPU ops through braidinfer on numpy arrays, each against the same formula written in
numpy (f32/f64), and the error paths. Runs anywhere libbraid.so is built (no GPU, no torch):

    /usr/bin/python3 -m pytest -q python/tests
"""

import math

import numpy as np
import pytest

import braidinfer as bi
from braidinfer import BraidError, Status
from numeric import rel_error
from rope_reference import SCALINGS, braid_config, inv_freq_and_scaling

pytestmark = pytest.mark.usefixtures("library")

TOL = {np.float32: 1e-5, np.float16: 2e-3}


def poisoned(shape, dtype):
    return np.full(shape, np.nan, dtype=dtype)


def uniform(rng, shape, dtype, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(dtype)


# ---- rms_norm / add_rms_norm -----------------------------------------------------------------


def rms_norm_ref(x, w, eps):
    """Hugging Face LlamaRMSNorm: fp32 statistics, normalised value rounded to x's dtype, then
    weight * it rounded again."""
    x32 = x.astype(np.float32)
    var = np.mean(x32.astype(np.float64) ** 2, axis=-1, keepdims=True)
    n = (x32 / np.sqrt(var + eps)).astype(x.dtype)
    return (w.astype(np.float32) * n.astype(np.float32)).astype(x.dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("shape", [(1, 64), (7, 33), (2, 3, 128), (5, 1001)],
                         ids=lambda s: "x".join(map(str, s)))
def test_rms_norm(seed, dtype, shape):
    rng = np.random.default_rng(seed)
    x = uniform(rng, shape, dtype, -2, 2)
    w = uniform(rng, shape[-1:], dtype, 0.5, 1.5)
    out = poisoned(shape, dtype)
    assert bi.rms_norm(x, w, 1e-6, out=out) is out
    assert rel_error(out, rms_norm_ref(x, w, 1e-6)) <= TOL[dtype]


def test_rms_norm_strided_rows_and_in_place(seed):
    rng = np.random.default_rng(seed)
    wide = uniform(rng, (6, 40), np.float32, -2, 2)
    x = wide[:, :33]  # row stride 40: rows, not contiguous
    w = uniform(rng, (33,), np.float32, 0.5, 1.5)
    ref = rms_norm_ref(x.copy(), w, 1e-5)
    padding = wide[:, 33:].copy()
    bi.rms_norm(x, w, 1e-5, out=x)  # out may alias x
    assert rel_error(x, ref) <= 1e-5
    np.testing.assert_array_equal(wide[:, 33:], padding)  # only the view's elements written


def test_rms_norm_allocates_out(seed):
    rng = np.random.default_rng(seed)
    x = uniform(rng, (3, 16), np.float32)
    w = uniform(rng, (16,), np.float32, 0.5, 1.5)
    out = bi.rms_norm(x, w)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == x.shape
    assert rel_error(out, rms_norm_ref(x, w, 1e-6)) <= 1e-5


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_add_rms_norm(seed, dtype):
    rng = np.random.default_rng(seed)
    x = uniform(rng, (9, 257), dtype, -2, 2)
    res = uniform(rng, (9, 257), dtype, -2, 2)
    w = uniform(rng, (257,), dtype, 0.5, 1.5)
    new_res = (x.astype(np.float32) + res.astype(np.float32)).astype(dtype)
    out = poisoned(x.shape, dtype)
    bi.add_rms_norm(x, res, w, 1e-5, out=out)
    assert rel_error(res, new_res) <= TOL[dtype]
    assert rel_error(out, rms_norm_ref(new_res, w, 1e-5)) <= TOL[dtype]


# ---- rope_apply ------------------------------------------------------------------------------


def rope_ref(x, positions, inv_freq, scaling, rotary_dim):
    """transformers' apply_rotary_pos_emb (q * cos + rotate_half(q) * sin) on the first
    rotary_dim dims, in float64 from float32 angles (positions * inv_freq in fp32, as
    transformers multiplies them)."""
    half = rotary_dim // 2
    angle = positions.astype(np.float32)[:, None] * inv_freq[None, :]  # [n, half] f32
    emb = np.concatenate([angle, angle], axis=-1).astype(np.float64)
    cos = (np.cos(emb) * scaling)[:, None, :]
    sin = (np.sin(emb) * scaling)[:, None, :]
    v = x.astype(np.float64)
    rot, rest = v[..., :rotary_dim], v[..., rotary_dim:]
    rotate_half = np.concatenate([-rot[..., half:], rot[..., :half]], axis=-1)
    return np.concatenate([rot * cos + rotate_half * sin, rest], axis=-1)


@pytest.mark.parametrize("scaling", list(SCALINGS), ids=list(SCALINGS))
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_rope_apply(seed, dtype, scaling):
    rng = np.random.default_rng(seed)
    n, q_heads, kv_heads, head_dim, rotary_dim = 5, 4, 2, 64, 64
    theta = 500000.0 if scaling == "llama3" else 10000.0
    # fp32 needs small positions: a 1-ulp difference between two correct float32 frequency
    # tables grows with the position (pos * ulp(inv_freq)); the frequencies themselves are
    # compared exactly in test_rope_frequencies.
    max_pos = 64 if dtype == np.float32 else 4096
    positions = rng.integers(0, max_pos, size=n).astype(np.int64)
    q = uniform(rng, (n, q_heads, head_dim), dtype)
    k = uniform(rng, (n, kv_heads, head_dim), dtype)
    inv_freq, attn = inv_freq_and_scaling(theta, rotary_dim, SCALINGS[scaling])
    q_ref = rope_ref(q, positions, inv_freq, attn, rotary_dim)
    k_ref = rope_ref(k, positions, inv_freq, attn, rotary_dim)
    bi.rope_apply(q, k, positions, braid_config(theta, rotary_dim, SCALINGS[scaling]))
    assert rel_error(q, q_ref) <= TOL[dtype]
    assert rel_error(k, k_ref) <= TOL[dtype]


@pytest.mark.parametrize("scaling", list(SCALINGS), ids=list(SCALINGS))
def test_rope_frequencies(scaling):
    """Reads braid's per-pair frequency and cos/sin scale back from rotating unit vectors at
    position 1, and compares them with transformers' formulas."""
    head_dim = rotary_dim = 128
    half = rotary_dim // 2
    theta = 500000.0 if scaling == "llama3" else 10000.0
    q = np.zeros((1, half, head_dim), np.float32)
    q[0, np.arange(half), np.arange(half)] = 1.0  # head i holds e_i: pair i gives (cos, sin)
    config = braid_config(theta, rotary_dim, SCALINGS[scaling])
    bi.rope_apply(q, None, np.array([1], np.int32), config)
    c = q[0, np.arange(half), np.arange(half)].astype(np.float64)
    s = q[0, np.arange(half), np.arange(half) + half].astype(np.float64)
    inv_freq, attn = inv_freq_and_scaling(theta, rotary_dim, SCALINGS[scaling])
    np.testing.assert_allclose(np.arctan2(s, c), inv_freq, rtol=1e-5, atol=0)
    np.testing.assert_allclose(np.hypot(s, c), attn, rtol=1e-6)


def test_rope_partial_rotary_q_only(seed):
    rng = np.random.default_rng(seed)
    n, heads, head_dim, rotary_dim = 3, 2, 64, 32
    positions = rng.integers(0, 64, size=n).astype(np.int32)
    q = uniform(rng, (n, heads, head_dim), np.float32)
    inv_freq, _ = inv_freq_and_scaling(10000.0, rotary_dim)
    ref = rope_ref(q, positions, inv_freq, 1.0, rotary_dim)
    bi.rope_apply(q, None, positions, bi.RopeConfig(rotary_dim=rotary_dim))
    assert rel_error(q, ref) <= 1e-5


# ---- silu_mul, softmax, argmax, embedding ----------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("shape", [(1, 2), (7, 2 * 333), (2, 3, 2 * 128)],
                         ids=lambda s: "x".join(map(str, s)))
def test_silu_mul(seed, dtype, shape):
    rng = np.random.default_rng(seed)
    x = uniform(rng, shape, dtype, -4, 4)
    d = shape[-1] // 2
    g, u = x[..., :d].astype(np.float64), x[..., d:].astype(np.float64)
    ref = g / (1 + np.exp(-g)) * u
    out = poisoned(shape[:-1] + (d,), dtype)
    bi.silu_mul(x, out=out)
    assert rel_error(out, ref) <= TOL[dtype]
    assert rel_error(bi.silu_mul(x), ref) <= TOL[dtype]


@pytest.mark.parametrize("dtype,out_dtype", [(np.float32, np.float32), (np.float16, np.float32),
                                             (np.float16, np.float16)],
                         ids=["f32", "f16_to_f32", "f16"])
def test_softmax(seed, dtype, out_dtype):
    rng = np.random.default_rng(seed)
    x = uniform(rng, (6, 1000), dtype, -8, 8)
    x32 = x.astype(np.float64)
    e = np.exp(x32 - x32.max(axis=-1, keepdims=True))
    ref = e / e.sum(axis=-1, keepdims=True)
    out = poisoned(x.shape, out_dtype)
    bi.softmax(x, out=out)
    assert rel_error(out, ref) <= TOL[out_dtype]


@pytest.mark.parametrize("out_dtype", [np.int32, np.int64], ids=["i32", "i64"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_argmax(seed, dtype, out_dtype):
    rng = np.random.default_rng(seed)
    x = uniform(rng, (5, 3, 777), dtype)
    x[0, 0, 10] = x[0, 0, 500] = 2.0  # a tie: the lowest index wins
    x[1, 2, 7] = np.nan  # NaN counts as the largest value
    out = np.full((15,), -1, dtype=out_dtype)
    bi.argmax(x, out=out)
    np.testing.assert_array_equal(out, np.argmax(x, axis=-1).reshape(-1))
    assert out[0] == 10 and out[5] == 7


@pytest.mark.parametrize("ids_dtype", [np.int32, np.int64], ids=["i32", "i64"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_embedding(seed, dtype, ids_dtype):
    rng = np.random.default_rng(seed)
    table = uniform(rng, (100, 48), dtype)
    ids = rng.integers(0, 100, size=17).astype(ids_dtype)
    out = poisoned((17, 48), dtype)
    bi.embedding(ids, table, out=out)
    np.testing.assert_array_equal(out, table[ids])


def test_embedding_id_out_of_range():
    table = np.zeros((10, 4), np.float32)
    with pytest.raises(BraidError) as e:
        bi.embedding(np.array([1, 10], np.int32), table)
    assert e.value.status == Status.INVALID_ARGUMENT
    assert "argument 'ids'" in e.value.message and "10" in e.value.message


# ---- gemm ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("dtype,out_dtype", [(np.float32, np.float32), (np.float16, np.float16),
                                             (np.float16, np.float32)],
                         ids=["f32", "f16", "f16_to_f32"])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 33, 65), (16, 64, 128)],
                         ids=lambda v: str(v))
def test_gemm(seed, dtype, out_dtype, bias, m, n, k):
    rng = np.random.default_rng(seed)
    a = uniform(rng, (m, k), dtype)
    w = uniform(rng, (n, k), dtype)
    b = uniform(rng, (n,), out_dtype) if bias else None
    ref = a.astype(np.float64) @ w.astype(np.float64).T
    if bias:
        ref = ref + b.astype(np.float64)
    out = poisoned((m, n), out_dtype)
    bi.gemm(a, w, b, out=out)
    assert rel_error(out, ref) <= TOL[out_dtype]


def test_gemm_strided_a_and_default_out(seed):
    rng = np.random.default_rng(seed)
    wide = uniform(rng, (5, 80), np.float32)
    a = wide[:, :64]
    w = uniform(rng, (12, 64), np.float32)
    out = bi.gemm(a, w)
    assert out.shape == (5, 12) and out.dtype == np.float32
    assert rel_error(out, a.astype(np.float64) @ w.astype(np.float64).T) <= 1e-5


# ---- attention -------------------------------------------------------------------------------


def make_paged(rng, dtype, kv_lens, page_size, kv_heads, head_dim, extra_pages=3):
    """K/V for each sequence scattered over shuffled pages; returns the pages, the page table
    and each sequence's contiguous K and V."""
    batch = len(kv_lens)
    pages_per_seq = [(n + page_size - 1) // page_size for n in kv_lens]
    max_pages = max(pages_per_seq) + 1  # a spare column: padding entries are never read
    num_pages = sum(pages_per_seq) + extra_pages
    k_pages = uniform(rng, (num_pages, page_size, kv_heads, head_dim), dtype)
    v_pages = uniform(rng, (num_pages, page_size, kv_heads, head_dim), dtype)
    order = rng.permutation(num_pages)
    table = np.full((batch, max_pages), -1, np.int32)  # -1 padding past the used pages
    seq_k, seq_v, next_page = [], [], 0
    for b, n in enumerate(kv_lens):
        ids = order[next_page: next_page + pages_per_seq[b]]
        next_page += pages_per_seq[b]
        table[b, : len(ids)] = ids
        seq_k.append(k_pages[ids].reshape(-1, kv_heads, head_dim)[:n])
        seq_v.append(v_pages[ids].reshape(-1, kv_heads, head_dim)[:n])
    return k_pages, v_pages, table, seq_k, seq_v


def attention_ref(q, cu, seq_k, seq_v, causal, scale):
    """Softmax(q k^T * scale) v per sequence and head in float64; returns (out, lse)."""
    total_q, q_heads, head_dim = q.shape
    out = np.zeros(q.shape, np.float64)
    lse = np.zeros((total_q, q_heads), np.float64)
    for b in range(len(seq_k)):
        qs = q[cu[b]: cu[b + 1]].astype(np.float64)
        k, v = seq_k[b].astype(np.float64), seq_v[b].astype(np.float64)
        q_len, kv_len = qs.shape[0], k.shape[0]
        group = q_heads // k.shape[1]
        for h in range(q_heads):
            s = qs[:, h, :] @ k[:, h // group, :].T * scale  # [q_len, kv_len]
            if causal:
                # query i is token kv_len - q_len + i: it sees keys up to and including itself
                visible = np.arange(kv_len)[None, :] <= (kv_len - q_len + np.arange(q_len))[:, None]
                s = np.where(visible, s, -np.inf)
            m = s.max(axis=-1, keepdims=True)
            p = np.exp(s - m)
            out[cu[b]: cu[b + 1], h, :] = (p / p.sum(axis=-1, keepdims=True)) @ v[:, h // group, :]
            lse[cu[b]: cu[b + 1], h] = (m + np.log(p.sum(axis=-1, keepdims=True)))[:, 0]
    return out, lse


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize(
    "q_lens,kv_lens,q_heads,kv_heads,page_size",
    [([5], [5], 4, 4, 4),  # prefill, one sequence
     ([1, 1, 1], [17, 1, 40], 8, 2, 16),  # decode, GQA 4:1
     ([3, 0, 6], [10, 7, 6], 7, 1, 5)],  # chunked prefill, an idle sequence, GQA 7:1
    ids=["prefill", "decode_gqa", "ragged"])
def test_attention(seed, dtype, causal, q_lens, kv_lens, q_heads, kv_heads, page_size):
    rng = np.random.default_rng(seed)
    head_dim = 64
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    q = uniform(rng, (int(cu[-1]), q_heads, head_dim), dtype)
    k_pages, v_pages, table, seq_k, seq_v = make_paged(rng, dtype, kv_lens, page_size, kv_heads,
                                                       head_dim)
    scale = 1 / math.sqrt(head_dim)
    out = poisoned(q.shape, dtype)
    lse = poisoned(q.shape[:2], np.float32)
    bi.attention(q, cu, k_pages, v_pages, table, np.array(kv_lens, np.int32), causal, scale,
                 out=out, lse=lse)
    out_ref, lse_ref = attention_ref(q, cu, seq_k, seq_v, causal, scale)
    assert rel_error(out, out_ref) <= TOL[dtype]
    assert rel_error(lse, lse_ref) <= 1e-5


def test_attention_allocates_and_returns_lse(seed):
    rng = np.random.default_rng(seed)
    k_pages, v_pages, table, seq_k, seq_v = make_paged(rng, np.float32, [9], 4, 2, 32)
    q = uniform(rng, (3, 4, 32), np.float32)
    cu = np.array([0, 3], np.int32)
    out, lse = bi.attention(q, cu, k_pages, v_pages, table, np.array([9], np.int32),
                            return_lse=True)
    out_ref, lse_ref = attention_ref(q, cu, seq_k, seq_v, True, 1 / math.sqrt(32))
    assert rel_error(out, out_ref) <= 1e-5 and rel_error(lse, lse_ref) <= 1e-5


# ---- attention_prefill (K/V in contiguous tensors) -------------------------------------------


def make_ragged(rng, dtype, q_lens, kv_lens, q_heads, kv_heads, head_dim):
    """q, k, v packed over a ragged batch, their offsets, and each sequence's K and V (what
    attention_ref takes)."""
    cu_q = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    cu_kv = np.concatenate([[0], np.cumsum(kv_lens)]).astype(np.int32)
    q = uniform(rng, (int(cu_q[-1]), q_heads, head_dim), dtype)
    k = uniform(rng, (int(cu_kv[-1]), kv_heads, head_dim), dtype)
    v = uniform(rng, (int(cu_kv[-1]), kv_heads, head_dim), dtype)
    seq_k = [k[cu_kv[b]: cu_kv[b + 1]] for b in range(len(kv_lens))]
    seq_v = [v[cu_kv[b]: cu_kv[b + 1]] for b in range(len(kv_lens))]
    return q, k, v, cu_q, cu_kv, seq_k, seq_v


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize(
    "q_lens,kv_lens,q_heads,kv_heads,head_dim",
    [([5], [5], 4, 4, 64),  # prefill, one sequence
     ([1, 17, 3], [1, 40, 3], 8, 2, 64),  # ragged; one chunk continuing a cached prefix; GQA 4:1
     ([3, 0, 6, 1], [10, 7, 6, 33], 7, 1, 128),  # an idle sequence, decode-like row, GQA 7:1
     ([2, 9], [2, 9], 6, 3, 32)],  # head_dim 32: CPU only (CUDA takes 64/128)
    ids=["prefill", "ragged_gqa", "chunked_mqa", "d32"])
def test_attention_prefill(seed, dtype, causal, q_lens, kv_lens, q_heads, kv_heads, head_dim):
    rng = np.random.default_rng(seed)
    q, k, v, cu_q, cu_kv, seq_k, seq_v = make_ragged(rng, dtype, q_lens, kv_lens, q_heads,
                                                     kv_heads, head_dim)
    scale = 1 / math.sqrt(head_dim)
    out = poisoned(q.shape, dtype)
    lse = poisoned(q.shape[:2], np.float32)
    bi.attention_prefill(q, k, v, cu_q, cu_kv, max(q_lens), causal=causal, softmax_scale=scale,
                         out=out, lse=lse)
    out_ref, lse_ref = attention_ref(q, cu_q, seq_k, seq_v, causal, scale)
    assert rel_error(out, out_ref) <= TOL[dtype]
    assert rel_error(lse, lse_ref) <= 1e-5


def test_attention_prefill_full_with_fewer_keys_than_queries(seed):
    # Without a mask nothing ties q_len to kv_len (cross-attention-like).
    rng = np.random.default_rng(seed)
    q, k, v, cu_q, cu_kv, seq_k, seq_v = make_ragged(rng, np.float32, [6, 4], [2, 4], 4, 2, 64)
    out = bi.attention_prefill(q, k, v, cu_q, cu_kv, causal=False)
    out_ref, _ = attention_ref(q, cu_q, seq_k, seq_v, False, 1 / math.sqrt(64))
    assert rel_error(out, out_ref) <= 1e-5


def test_attention_prefill_defaults_and_lse(seed):
    # max_seqlen_q from cu_seqlens_q, softmax_scale 1/sqrt(head_dim), out and lse allocated.
    rng = np.random.default_rng(seed)
    q, k, v, cu_q, cu_kv, seq_k, seq_v = make_ragged(rng, np.float32, [3, 11], [8, 11], 4, 1, 64)
    out, lse = bi.attention_prefill(q, k, v, cu_q, cu_kv, return_lse=True)
    assert out.shape == q.shape and out.dtype == np.float32
    assert lse.shape == (14, 4) and lse.dtype == np.float32
    out_ref, lse_ref = attention_ref(q, cu_q, seq_k, seq_v, True, 1 / math.sqrt(64))
    assert rel_error(out, out_ref) <= 1e-5 and rel_error(lse, lse_ref) <= 1e-5


def test_attention_prefill_packed_qkv_views(seed):
    # q, k and v as column slices of one QKV projection output: rows with a stride of
    # (q_heads + 2 * kv_heads) * head_dim, as a model's forward hands them over.
    rng = np.random.default_rng(seed)
    q_heads, kv_heads, d, n = 4, 2, 64, 13
    qkv = uniform(rng, (n, q_heads + 2 * kv_heads, d), np.float32)
    q, k, v = qkv[:, :q_heads], qkv[:, q_heads: q_heads + kv_heads], qkv[:, q_heads + kv_heads:]
    cu = np.array([0, 5, n], np.int32)
    out = bi.attention_prefill(q, k, v, cu, cu)
    seq_k = [np.ascontiguousarray(k[cu[b]: cu[b + 1]]) for b in range(2)]
    seq_v = [np.ascontiguousarray(v[cu[b]: cu[b + 1]]) for b in range(2)]
    out_ref, _ = attention_ref(q, cu, seq_k, seq_v, True, 1 / math.sqrt(d))
    assert rel_error(out, out_ref) <= 1e-5


def test_attention_prefill_errors_name_the_argument(seed):
    rng = np.random.default_rng(seed)
    q, k, v, cu_q, cu_kv, _, _ = make_ragged(rng, np.float32, [3, 5], [4, 5], 4, 2, 32)
    op = "attention_prefill"
    expect_error(Status.DTYPE, [op, "argument 'cu_seqlens_q'", "i32", "i64"],
                 bi.attention_prefill, q, k, v, cu_q.astype(np.int64), cu_kv)
    expect_error(Status.DTYPE, [op, "argument 'cu_seqlens_kv'", "i32"],
                 bi.attention_prefill, q, k, v, cu_q, cu_kv.astype(np.int64), 5)
    k3 = uniform(rng, (9, 3, 32), np.float32)  # 3 KV heads do not divide 4 query heads
    expect_error(Status.SHAPE, [op, "argument 'k'", "divides"],
                 bi.attention_prefill, q, k3, k3, cu_q, cu_kv)
    expect_error(Status.SHAPE, [op, "argument 'v'"],
                 bi.attention_prefill, q, k, v[:, :1], cu_q, cu_kv)
    expect_error(Status.DTYPE, [op, "argument 'k'", "f16"],
                 bi.attention_prefill, q, k.astype(np.float16), v, cu_q, cu_kv)
    expect_error(Status.SHAPE, [op, "argument 'cu_seqlens_kv'"],
                 bi.attention_prefill, q, k, v, cu_q, np.array([0, 9], np.int32), 5)
    expect_error(Status.INVALID_ARGUMENT, [op, "argument 'cu_seqlens_kv'", "last offset"],
                 bi.attention_prefill, q, k, v, cu_q, np.array([0, 4, 8], np.int32))
    expect_error(Status.INVALID_ARGUMENT, [op, "argument 'cu_seqlens_q'", "non-decreasing"],
                 bi.attention_prefill, q, k, v, np.array([0, 6, 3], np.int32), cu_kv, 6)
    # causal: every sequence needs at least as many keys as queries
    expect_error(Status.INVALID_ARGUMENT, [op, "argument 'cu_seqlens_kv'", "kv_len >= q_len"],
                 bi.attention_prefill, q, k, v, cu_q, np.array([0, 2, 9], np.int32))
    expect_error(Status.INVALID_ARGUMENT, [op, "argument 'max_seqlen_q'"],
                 bi.attention_prefill, q, k, v, cu_q, cu_kv, 4)
    expect_error(Status.SHAPE, [op, "argument 'lse'"],
                 bi.attention_prefill, q, k, v, cu_q, cu_kv, lse=np.zeros((8, 3), np.float32))
    expect_error(Status.INVALID_ARGUMENT, [op, "argument 'cu_seqlens_q'", "list"],
                 bi.attention_prefill, q, k, v, [0, 3, 8], cu_kv)


# ---- errors ----------------------------------------------------------------------------------


def expect_error(status, fragments, fn, *args, **kwargs):
    with pytest.raises(BraidError) as e:
        fn(*args, **kwargs)
    assert e.value.status == status, e.value.message
    for f in fragments:
        assert f in e.value.message, f"'{f}' not in: {e.value.message}"
    return e.value


def test_wrong_shapes_name_the_argument():
    x = np.zeros((3, 8), np.float32)
    expect_error(Status.SHAPE, ["rms_norm", "argument 'weight'", "[8]", "[5]"],
                 bi.rms_norm, x, np.ones(5, np.float32))
    expect_error(Status.SHAPE, ["add_rms_norm", "argument 'residual'"],
                 bi.add_rms_norm, x, np.zeros((3, 7), np.float32), np.ones(8, np.float32))
    expect_error(Status.SHAPE, ["silu_mul", "argument 'out'"],
                 bi.silu_mul, x, out=np.zeros((3, 8), np.float32))
    expect_error(Status.SHAPE, ["gemm", "argument 'w'"],
                 bi.gemm, x, np.zeros((4, 9), np.float32))
    expect_error(Status.SHAPE, ["softmax", "argument 'out'"],
                 bi.softmax, x, out=np.zeros((3, 9), np.float32))
    expect_error(Status.SHAPE, ["argmax", "argument 'out'"],
                 bi.argmax, x, out=np.zeros((4,), np.int64))
    expect_error(Status.SHAPE, ["embedding", "argument 'out'"],
                 bi.embedding, np.zeros(2, np.int32), x, out=np.zeros((3, 8), np.float32))
    expect_error(Status.SHAPE, ["rope_apply", "argument 'k'"],
                 bi.rope_apply, np.zeros((2, 1, 8), np.float32), np.zeros((3, 1, 8), np.float32),
                 np.zeros(2, np.int32))


def test_attention_errors_name_the_kv_argument(seed):
    rng = np.random.default_rng(seed)
    k_pages, v_pages, table, _, _ = make_paged(rng, np.float32, [9], 4, 2, 32)
    q = uniform(rng, (3, 4, 32), np.float32)
    cu = np.array([0, 3], np.int32)
    expect_error(Status.SHAPE, ["attention", "v_pages"],
                 bi.attention, q, cu, k_pages, v_pages[:, :2], table, np.array([9], np.int32))
    expect_error(Status.INVALID_ARGUMENT, ["attention", "kv_lens"],
                 bi.attention, q, cu, k_pages, v_pages, table, np.array([2], np.int32))


def test_wrong_dtypes():
    x = np.zeros((3, 8), np.float32)
    # float64 has no braid dtype: refused before the library is called, in the same words
    expect_error(Status.DTYPE, ["rms_norm", "argument 'x'", "'<f8'"],
                 bi.rms_norm, np.zeros((3, 8)), np.ones(8, np.float32))
    # a braid dtype the op does not take: the library's check
    expect_error(Status.DTYPE, ["rms_norm", "argument 'weight'", "f16"],
                 bi.rms_norm, x, np.ones(8, np.float16))
    expect_error(Status.DTYPE, ["argmax", "argument 'out'"],
                 bi.argmax, x, out=np.zeros((3,), np.float32))
    expect_error(Status.DTYPE, ["embedding", "argument 'ids'"],
                 bi.embedding, np.zeros(2, np.float32), x)


def test_other_bad_arguments():
    x = np.zeros((3, 8), np.float32)
    w = np.ones(8, np.float32)
    expect_error(Status.INVALID_ARGUMENT, ["rms_norm", "argument 'x'", "list"],
                 bi.rms_norm, [[1.0] * 8], w)
    ro = np.zeros((3, 8), np.float32)
    ro.setflags(write=False)
    expect_error(Status.INVALID_ARGUMENT, ["rms_norm", "argument 'out'", "read-only"],
                 bi.rms_norm, x, w, out=ro)
    expect_error(Status.INVALID_ARGUMENT, ["rms_norm", "argument 'eps'"],
                 bi.rms_norm, x, w, -1.0)
    expect_error(Status.INVALID_ARGUMENT, ["rope_apply", "config.scaling"],
                 bi.rope_apply, np.zeros((1, 1, 8), np.float32), None, np.zeros(1, np.int32),
                 bi.RopeConfig(scaling="ntk"))


def test_library_functions():
    assert bi.version().count(".") == 2
    assert bi.cuda_device_count() >= 0
    assert bi.status_string(Status.SHAPE) == "BRAID_ERR_SHAPE"
    assert bi.status_string(99) == "unknown status"
    err = BraidError(Status.DTYPE, "m")
    assert err.status == Status.DTYPE and str(err) == "BRAID_ERR_DTYPE: m"


# ---- qk_norm_rope_kv_append_attention_decode --------------------------------------------------


def decode_step_inputs(rng, dtype, lens, q_heads, kv_heads, head_dim, page_size):
    """One decode token per sequence: packed QKV heads, a cache whose pages are shuffled, the new
    token's position kv_len - 1 and its slot from the page table."""
    batch, max_pages = len(lens), max((n + page_size - 1) // page_size for n in lens)
    num_pages = batch * max_pages
    pages = rng.permutation(num_pages).astype(np.int32).reshape(batch, max_pages)
    shape = (num_pages, page_size, kv_heads, head_dim)
    k_pages, v_pages = uniform(rng, shape, dtype), uniform(rng, shape, dtype)
    qkv = uniform(rng, (batch, q_heads + 2 * kv_heads, head_dim), dtype)
    kv_lens = np.array(lens, np.int32)
    positions = kv_lens.astype(np.int64) - 1
    slots = np.array([pages[b, p // page_size] * page_size + p % page_size
                      for b, p in enumerate(positions)], np.int32)
    return qkv, k_pages, v_pages, pages, kv_lens, positions, slots


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
def test_qk_norm_rope_kv_append_attention_decode_is_the_ops_in_sequence(seed, dtype):
    rng = np.random.default_rng(seed)
    qh, kvh, hd = 6, 2, 16
    inputs = decode_step_inputs(rng, dtype, [1, 5, 20], qh, kvh, hd, 4)
    config = bi.RopeConfig(theta=500000.0)
    results = []
    for joined in (True, False):
        qkv, k_pages, v_pages, pages, kv_lens, positions, slots = (x.copy() for x in inputs)
        q, k, v = qkv[:, :qh], qkv[:, qh:qh + kvh], qkv[:, qh + kvh:]
        if joined:
            out = bi.qk_norm_rope_kv_append_attention_decode(
                q, k, v, positions, slots, k_pages, v_pages, pages, kv_lens, config=config,
                softmax_scale=0.3)
        else:
            bi.rope_apply(q, k, positions, config)
            bi.kv_append(k, v, slots, k_pages, v_pages)
            out = bi.attention_decode(q, k_pages, v_pages, pages, kv_lens, 0.3)
        results.append((out, k_pages, v_pages))
    for got, want in zip(results[0], results[1]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("norm", [True, False], ids=["norm", "nonorm"])
def test_qk_norm_rope_kv_append_is_the_ops_in_sequence(seed, norm):
    rng = np.random.default_rng(seed)
    qh, kvh, hd, n = 6, 2, 16, 5
    qkv0 = uniform(rng, (n, qh + 2 * kvh, hd), np.float32)
    pages0 = uniform(rng, (3, 4, kvh, hd), np.float32)
    q_norm = uniform(rng, (hd,), np.float32, 0.5, 1.5)
    k_norm = uniform(rng, (hd,), np.float32, 0.5, 1.5)
    positions = rng.integers(0, 4096, n).astype(np.int32)
    slots = rng.choice(12, size=n, replace=False).astype(np.int32)
    config = bi.RopeConfig(theta=1000000.0)
    results = []
    for fused in (True, False):
        qkv, k_pages, v_pages = qkv0.copy(), pages0.copy(), pages0.copy()
        q, k, v = qkv[:, :qh], qkv[:, qh:qh + kvh], qkv[:, qh + kvh:]
        if fused:
            bi.qk_norm_rope_kv_append(q, k, v, positions, slots, k_pages, v_pages,
                                      q_norm=q_norm if norm else None,
                                      k_norm=k_norm if norm else None, config=config)
        else:
            if norm:
                bi.rms_norm(q, q_norm, 1e-6, out=q)
                bi.rms_norm(k, k_norm, 1e-6, out=k)
            bi.rope_apply(q, k, positions, config)
            bi.kv_append(k, v, slots, k_pages, v_pages)
        results.append((qkv, k_pages, v_pages))
    for got, want in zip(results[0], results[1]):
        np.testing.assert_array_equal(got, want)
    assert not np.array_equal(results[0][0], qkv0)
    expect_error(Status.INVALID_ARGUMENT, ["qk_norm_rope_kv_append", "argument 'k_norm'"],
                 bi.qk_norm_rope_kv_append, qkv0[:, :qh], qkv0[:, qh:qh + kvh],
                 qkv0[:, qh + kvh:], positions, slots, pages0.copy(), pages0.copy(),
                 q_norm=q_norm)


def test_qk_norm_rope_kv_append_attention_decode_errors():
    rng = np.random.default_rng(1)
    qkv, k_pages, v_pages, pages, kv_lens, positions, slots = decode_step_inputs(
        rng, np.float32, [3, 9], 4, 2, 8, 4)
    q, k, v = qkv[:, :4], qkv[:, 4:6], qkv[:, 6:]
    op = "qk_norm_rope_kv_append_attention_decode"
    assert bi.attention_decode_counters(2, 4, 2) == 4
    expect_error(Status.SHAPE, [op, "argument 'counters'", "at least 4"],
                 bi.qk_norm_rope_kv_append_attention_decode, q, k, v, positions, slots, k_pages,
                 v_pages, pages, kv_lens, counters=np.zeros(3, np.int32))
    moved = slots.copy()
    moved[1] ^= 1
    expect_error(Status.INVALID_ARGUMENT, [op, "argument 'slots'", "kv_lens[b] - 1"],
                 bi.qk_norm_rope_kv_append_attention_decode, q, k, v, positions, moved, k_pages,
                 v_pages, pages, kv_lens)


# ---- kv_append -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("n,q_heads,kv_heads,head_dim,num_pages,page_size",
                         [(1, 1, 1, 8, 1, 1), (5, 4, 2, 16, 4, 4), (9, 7, 3, 33, 6, 5)],
                         ids=["one", "gqa", "odd"])
def test_kv_append(seed, dtype, n, q_heads, kv_heads, head_dim, num_pages, page_size):
    rng = np.random.default_rng(seed)
    # k and v as views into a packed [n, (q_heads + 2 kv_heads) * head_dim] QKV output.
    qkv = uniform(rng, (n, (q_heads + 2 * kv_heads) * head_dim), dtype)
    k_start, v_start = q_heads * head_dim, (q_heads + kv_heads) * head_dim
    k = qkv[:, k_start:v_start].reshape(n, kv_heads, head_dim)
    v = qkv[:, v_start:].reshape(n, kv_heads, head_dim)
    slots = rng.choice(num_pages * page_size, size=n, replace=False).astype(np.int32)
    shape = (num_pages, page_size, kv_heads, head_dim)
    k_pages, v_pages = uniform(rng, shape, dtype), uniform(rng, shape, dtype)
    # The same scatter in numpy: slot s is row s of the pages seen as [slots, kv_heads, head_dim].
    k_ref, v_ref = k_pages.copy(), v_pages.copy()
    k_ref.reshape(-1, kv_heads, head_dim)[slots] = k
    v_ref.reshape(-1, kv_heads, head_dim)[slots] = v
    assert bi.kv_append(k, v, slots, k_pages, v_pages) == (k_pages, v_pages)
    np.testing.assert_array_equal(k_pages, k_ref)  # other slots untouched too
    np.testing.assert_array_equal(v_pages, v_ref)


# ---- paged_kv_gather -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("kv_lens,page_size,kv_heads,head_dim",
                         [([1], 1, 1, 8), ([9, 0, 17], 4, 2, 16), ([5, 33, 1], 5, 3, 33)],
                         ids=["one", "gqa_empty", "odd"])
def test_paged_kv_gather(seed, dtype, kv_lens, page_size, kv_heads, head_dim):
    rng = np.random.default_rng(seed)
    k_pages, v_pages, table, seq_k, seq_v = make_paged(rng, dtype, kv_lens, page_size, kv_heads,
                                                       head_dim)
    cu = np.concatenate([[0], np.cumsum(kv_lens)]).astype(np.int32)
    lens = np.array(kv_lens, np.int32)
    spare = 3  # rows past cu[-1]: left as they are
    k_out = poisoned((int(cu[-1]) + spare, kv_heads, head_dim), dtype)
    v_out = poisoned((int(cu[-1]) + spare, kv_heads, head_dim), dtype)
    assert bi.paged_kv_gather(k_pages, v_pages, table, lens, cu, k_out, v_out) == (k_out, v_out)
    np.testing.assert_array_equal(k_out[: cu[-1]], np.concatenate(seq_k))
    np.testing.assert_array_equal(v_out[: cu[-1]], np.concatenate(seq_v))
    assert np.isnan(k_out[cu[-1]:]).all() and np.isnan(v_out[cu[-1]:]).all()
    # Allocated outputs: exactly cu[-1] rows.
    k_new, v_new = bi.paged_kv_gather(k_pages, v_pages, table, lens, cu)
    assert k_new.shape == (cu[-1], kv_heads, head_dim) and k_new.dtype == dtype
    np.testing.assert_array_equal(k_new, np.concatenate(seq_k))
    np.testing.assert_array_equal(v_new, np.concatenate(seq_v))


def test_paged_kv_gather_errors():
    pages = np.zeros((3, 4, 2, 8), np.float32)
    table = np.array([[0, 1], [2, -1]], np.int32)
    lens = np.array([5, 3], np.int32)
    cu = np.array([0, 5, 8], np.int32)
    out = np.zeros((8, 2, 8), np.float32)
    gather = bi.paged_kv_gather
    expect_error(Status.INVALID_ARGUMENT, ["paged_kv_gather", "argument 'cu_seqlens_kv'", "kv_lens[1] = 3"],
                 gather, pages, pages.copy(), table, lens, np.array([0, 5, 9], np.int32), out,
                 out.copy())
    expect_error(Status.INVALID_ARGUMENT, ["paged_kv_gather", "argument 'k_out'", "8 rows"],
                 gather, pages, pages.copy(), table, lens, cu, out[:7], out.copy()[:7])
    expect_error(Status.INVALID_ARGUMENT, ["paged_kv_gather", "argument 'kv.page_table'", "= 7"],
                 gather, pages, pages.copy(), np.array([[0, 7], [2, -1]], np.int32), lens, cu, out,
                 out.copy())
    expect_error(Status.DTYPE, ["paged_kv_gather", "argument 'cu_seqlens_kv'", "i64"],
                 gather, pages, pages.copy(), table, lens, cu.astype(np.int64), out, out.copy())
    expect_error(Status.SHAPE, ["paged_kv_gather", "argument 'v_out'"],
                 gather, pages, pages.copy(), table, lens, cu, out, np.zeros((8, 1, 8), np.float32))
    expect_error(Status.DTYPE, ["paged_kv_gather", "argument 'k_out'"],
                 gather, pages, pages.copy(), table, lens, cu, out.astype(np.float16), out.copy())


# ---- moe_route_topk_softmax ------------------------------------------------------------------


def route_ref(logits, k, renormalize):
    """Softmax in float64, then the k largest logits in descending order; a stable sort keeps
    equal logits in index order (lower index first) and puts NaN last, as the contract asks."""
    x = logits.astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    ids = np.argsort(-x, axis=-1, kind="stable")[:, :k]
    w = np.take_along_axis(p, ids, axis=-1)
    if renormalize:
        w = w / w.sum(axis=-1, keepdims=True)
    return w, ids


@pytest.mark.parametrize("renormalize", [True, False], ids=["renorm", "raw"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("tokens,experts,k", [(1, 8, 2), (7, 60, 8), (33, 128, 8), (3, 5, 5),
                                              (2, 512, 16)],
                         ids=lambda v: str(v))
def test_moe_route_topk_softmax(seed, dtype, renormalize, tokens, experts, k):
    rng = np.random.default_rng(seed)
    logits = uniform(rng, (tokens, experts), dtype, -4, 4)  # f16 may tie: lower index first
    w_ref, ids_ref = route_ref(logits, k, renormalize)
    w = poisoned((tokens, k), np.float32)
    ids = np.full((tokens, k), -1, np.int32)
    bi.moe_route_topk_softmax(logits, k, renormalize, w, ids)
    np.testing.assert_array_equal(ids, ids_ref)
    assert rel_error(w, w_ref) <= 1e-5  # fp32 weights whatever the logits' dtype


def test_moe_route_ties_nan_strided_and_allocation():
    wide = np.zeros((2, 10), np.float32)
    logits = wide[:, :8]  # rows with a row stride of 10
    logits[0] = [1, 3, 2, 3, 0, 0, -1, 2]  # ties: 3 (ids 1, 3), 2 (ids 2, 7)
    logits[1] = [1, 3, 2, 3, np.nan, 0, np.nan, -1]  # NaN ranks below every number
    w, ids = bi.moe_route_topk_softmax(logits, 3, True)
    assert w.dtype == np.float32 and ids.dtype == np.int32 and ids.shape == (2, 3)
    np.testing.assert_array_equal(ids, [[1, 3, 2], [1, 3, 2]])
    w_ref, _ = route_ref(logits[:1], 3, True)
    assert rel_error(w[:1], w_ref) <= 1e-6


# ---- moe_experts -----------------------------------------------------------------------------


def moe_experts_ref(x, topk_weights, topk_ids, gate_up, down):
    """The contract's formula per token and expert: g, u (float64 sums) and h = silu(g) * u
    rounded to x's dtype; the weighted sum of down[e] @ h in float64."""
    dt = x.dtype
    inter = down.shape[2]
    out = np.zeros(x.shape, np.float64)
    for t in range(x.shape[0]):
        xt = x[t].astype(np.float64)
        for j in range(topk_ids.shape[1]):
            e = topk_ids[t, j]
            g = (gate_up[e, :inter].astype(np.float64) @ xt).astype(dt).astype(np.float32)
            u = (gate_up[e, inter:].astype(np.float64) @ xt).astype(dt).astype(np.float32)
            h = (g / (1 + np.exp(-g)) * u).astype(dt).astype(np.float64)
            out[t] += float(topk_weights[t, j]) * (down[e].astype(np.float64) @ h)
    return out


def make_experts(rng, dtype, tokens, experts, k, hidden, inter):
    """Random inputs of moe_experts: routing by the router itself (k distinct experts per token),
    weights scaled so each projection's output is O(1)."""
    x = uniform(rng, (tokens, hidden), dtype)
    gate_up = uniform(rng, (experts, 2 * inter, hidden), dtype, -2 / math.sqrt(hidden),
                      2 / math.sqrt(hidden))
    down = uniform(rng, (experts, hidden, inter), dtype, -2 / math.sqrt(inter),
                   2 / math.sqrt(inter))
    w, ids = bi.moe_route_topk_softmax(uniform(rng, (tokens, experts), np.float32), k, True)
    return x, w, ids, gate_up, down


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["f32", "f16"])
@pytest.mark.parametrize("tokens,experts,k,hidden,inter",
                         [(1, 4, 1, 16, 8), (5, 8, 2, 64, 96), (7, 6, 3, 33, 17)],
                         ids=["one", "top2", "odd"])
def test_moe_experts(seed, dtype, tokens, experts, k, hidden, inter):
    rng = np.random.default_rng(seed)
    x, w, ids, gate_up, down = make_experts(rng, dtype, tokens, experts, k, hidden, inter)
    ref = moe_experts_ref(x, w, ids, gate_up, down)
    workspace = poisoned((tokens * k, inter), np.float32)
    out = poisoned(x.shape, dtype)
    assert bi.moe_experts(x, w, ids, gate_up, down, workspace, out) is out
    assert rel_error(out, ref) <= TOL[dtype]


def test_moe_experts_in_place_with_allocated_workspace(seed):
    rng = np.random.default_rng(seed)
    x, w, ids, gate_up, down = make_experts(rng, np.float32, 3, 5, 2, 24, 12)
    ref = moe_experts_ref(x, w, ids, gate_up, down)
    assert bi.moe_experts(x, w, ids, gate_up, down, out=x) is x  # out may be x
    assert rel_error(x, ref) <= 1e-5
    fresh = bi.moe_experts(uniform(rng, (3, 24), np.float32), w, ids, gate_up, down)
    assert fresh.shape == (3, 24) and fresh.dtype == np.float32


def test_kv_and_moe_errors_name_the_argument():
    k = np.zeros((2, 1, 8), np.float32)
    pages = np.zeros((2, 2, 1, 8), np.float32)
    expect_error(Status.INVALID_ARGUMENT, ["kv_append", "argument 'slots'", "4"],
                 bi.kv_append, k, k, np.array([0, 4], np.int32), pages, pages.copy())
    expect_error(Status.SHAPE, ["kv_append", "argument 'v_pages'"],
                 bi.kv_append, k, k, np.array([0, 1], np.int32), pages, pages[:1].copy())
    expect_error(Status.DTYPE, ["kv_append", "argument 'slots'", "i64"],
                 bi.kv_append, k, k, np.array([0, 1], np.int64), pages, pages.copy())

    logits = np.zeros((3, 4), np.float32)
    expect_error(Status.INVALID_ARGUMENT, ["moe_route_topk_softmax", "argument 'k'", "5"],
                 bi.moe_route_topk_softmax, logits, 5, True)
    expect_error(Status.DTYPE, ["moe_route_topk_softmax", "argument 'topk_ids'", "i64"],
                 bi.moe_route_topk_softmax, logits, 2, True, None, np.zeros((3, 2), np.int64))

    x = np.zeros((2, 8), np.float32)
    w = np.full((2, 1), 1.0, np.float32)
    gate_up = np.zeros((3, 2 * 4, 8), np.float32)
    down = np.zeros((3, 8, 4), np.float32)
    expect_error(Status.INVALID_ARGUMENT, ["moe_experts", "argument 'topk_ids'", "3"],
                 bi.moe_experts, x, w, np.array([[0], [3]], np.int32), gate_up, down)
    expect_error(Status.SHAPE, ["moe_experts", "argument 'down'", "[3, 8, 4]"],
                 bi.moe_experts, x, w, np.array([[0], [1]], np.int32), gate_up,
                 np.zeros((3, 8, 5), np.float32), np.zeros((2, 4), np.float32))
