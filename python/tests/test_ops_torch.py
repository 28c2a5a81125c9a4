"""braidinfer's CUDA ops on PyTorch tensors against the same formulas written in PyTorch (as
Hugging Face transformers writes them), attention on CPU tensors and attention_prefill on CUDA
against F.scaled_dot_product_attention in fp32. Skips cleanly without torch, without a CUDA
device, or with a CPU-only libbraid.so.

Tolerances (‖out − ref‖ / ‖ref‖) as the C++ op tests: bf16 1e-2, f16 2e-3, f32 1e-5; gemm with
an f32 output 1e-3. Inputs are fresh random each run; the seed is printed with a failure.
"""

import itertools
import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import braidinfer as bi  # noqa: E402
from braidinfer import BraidError, Status  # noqa: E402
import torch_features  # noqa: E402
from fp8_weights import weights_torch  # noqa: E402
from rope_reference import SCALINGS, braid_config, inv_freq_and_scaling  # noqa: E402

pytestmark = pytest.mark.usefixtures("library")

TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
FLOATS = [torch.bfloat16, torch.float16, torch.float32]
FLOAT_IDS = ["bf16", "f16", "f32"]


@pytest.fixture
def gen(seed):
    return torch.Generator().manual_seed(seed)


def uniform(gen, shape, dtype, device, lo=-1.0, hi=1.0):
    x = torch.rand(shape, generator=gen, dtype=torch.float32) * (hi - lo) + lo
    return x.to(dtype).to(device)


def poisoned(shape, dtype, device):
    return torch.full(shape, float("nan"), dtype=dtype, device=device)


def rel_error(got, ref):
    got, ref = got.detach().double().cpu(), ref.detach().double().cpu()
    assert got.shape == ref.shape, (got.shape, ref.shape)
    if torch.isnan(got).any() or torch.isnan(ref).any():
        return math.inf
    den = ref.norm().item()
    num = (got - ref).norm().item()
    return num / den if den > 0 else num


def shape_id(s):
    return "x".join(map(str, s))


# ---- rms_norm / add_rms_norm -----------------------------------------------------------------


def llama_rms_norm(x, weight, eps):
    """transformers' LlamaRMSNorm.forward."""
    input_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return weight * h.to(input_dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize("shape", [(1, 64), (7, 4096), (33, 896), (3, 1001), (2, 3, 128)],
                         ids=shape_id)
def test_rms_norm(cuda, gen, dtype, shape):
    x = uniform(gen, shape, dtype, cuda, -2, 2)
    w = uniform(gen, shape[-1:], dtype, cuda, 0.5, 1.5)
    out = poisoned(shape, dtype, cuda)
    bi.rms_norm(x, w, 1e-6, out=out)
    assert rel_error(out, llama_rms_norm(x, w, 1e-6)) <= TOL[dtype]


@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize("shape", [(1, 2048), (5, 4096), (17, 1001)], ids=shape_id)
def test_add_rms_norm(cuda, gen, dtype, shape):
    x = uniform(gen, shape, dtype, cuda, -2, 2)
    res = uniform(gen, shape, dtype, cuda, -2, 2)
    w = uniform(gen, shape[-1:], dtype, cuda, 0.5, 1.5)
    new_res = x + res  # the decoder layer's residual add, in the model's dtype
    ref = llama_rms_norm(new_res, w, 1e-5)
    out = bi.add_rms_norm(x, res, w, 1e-5)
    assert out.device == x.device and out.dtype == dtype
    assert rel_error(res, new_res) <= TOL[dtype]
    assert rel_error(out, ref) <= TOL[dtype]


def test_rms_norm_on_a_side_stream_and_strided_view(cuda, gen):
    wide = uniform(gen, (8, 4096 + 64), torch.bfloat16, cuda)
    x = wide[:, :4096]  # rows with a row stride of 4160
    w = uniform(gen, (4096,), torch.bfloat16, cuda, 0.5, 1.5)
    ref = llama_rms_norm(x, w, 1e-6)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = bi.rms_norm(x, w, 1e-6)  # runs on `stream`, PyTorch's current stream here
    stream.synchronize()
    assert rel_error(out, ref) <= TOL[torch.bfloat16]


# ---- rope_apply ------------------------------------------------------------------------------


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_torch(x, positions, inv_freq, attention_scaling, rotary_dim):
    """transformers' rotary embedding + apply_rotary_pos_emb, in fp32, on the first rotary_dim
    dims of every head of x [n, heads, head_dim]."""
    freqs = positions.float()[:, None] * inv_freq[None, :]  # [n, rotary_dim / 2]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = (emb.cos() * attention_scaling)[:, None, :]
    sin = (emb.sin() * attention_scaling)[:, None, :]
    rot = x[..., :rotary_dim].float()
    rotated = rot * cos + rotate_half(rot) * sin
    return torch.cat((rotated.to(x.dtype), x[..., rotary_dim:]), dim=-1)


@pytest.mark.parametrize("scaling", list(SCALINGS), ids=list(SCALINGS))
@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize("n,q_heads,kv_heads,head_dim,rotary_dim",
                         [(1, 32, 8, 128, 128), (37, 28, 4, 128, 128), (5, 8, 1, 64, 32),
                          (3, 4, 4, 256, 256)],
                         ids=["decode", "gqa7", "partial", "hd256"])
def test_rope_apply(cuda, gen, dtype, scaling, n, q_heads, kv_heads, head_dim, rotary_dim):
    theta = 500000.0 if scaling == "llama3" else 10000.0
    inv_freq, attn = inv_freq_and_scaling(theta, rotary_dim, SCALINGS[scaling])
    inv_freq = torch.from_numpy(inv_freq).to(cuda)
    # Small positions for fp32: a 1-ulp difference between two correct float32 frequency tables
    # grows with the position; the CPU test compares the frequencies themselves.
    max_pos = 64 if dtype == torch.float32 else 4096
    for pos_dtype in (torch.int32, torch.int64):
        positions = torch.randint(0, max_pos, (n,), generator=gen, dtype=pos_dtype).to(cuda)
        q = uniform(gen, (n, q_heads, head_dim), dtype, cuda)
        k = uniform(gen, (n, kv_heads, head_dim), dtype, cuda)
        q_ref = rope_torch(q, positions, inv_freq, attn, rotary_dim)
        k_ref = rope_torch(k, positions, inv_freq, attn, rotary_dim)
        bi.rope_apply(q, k, positions, braid_config(theta, rotary_dim, SCALINGS[scaling]))
        assert rel_error(q, q_ref) <= TOL[dtype], pos_dtype
        assert rel_error(k, k_ref) <= TOL[dtype], pos_dtype


def test_rope_q_only_in_a_qkv_view(cuda, gen):
    # q as a view into a packed [n, (q_heads + 2 kv_heads) * head_dim] QKV projection output.
    n, q_heads, kv_heads, head_dim = 6, 8, 2, 128
    qkv = uniform(gen, (n, (q_heads + 2 * kv_heads) * head_dim), torch.bfloat16, cuda)
    q = qkv[:, : q_heads * head_dim].view(n, q_heads, head_dim)
    k_before = qkv[:, q_heads * head_dim:].clone()
    positions = torch.arange(100, 100 + n, device=cuda)
    inv_freq, _ = inv_freq_and_scaling(1e6, head_dim)
    ref = rope_torch(q, positions, torch.from_numpy(inv_freq).to(cuda), 1.0, head_dim)
    bi.rope_apply(q, None, positions, bi.RopeConfig(theta=1e6))
    assert rel_error(q, ref) <= TOL[torch.bfloat16]
    assert torch.equal(qkv[:, q_heads * head_dim:], k_before)  # k and v untouched


# ---- silu_mul, softmax, argmax, embedding ----------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize("shape", [(1, 2 * 14336), (9, 2 * 4864), (4, 2 * 1001), (2, 3, 2 * 64)],
                         ids=shape_id)
def test_silu_mul(cuda, gen, dtype, shape):
    x = uniform(gen, shape, dtype, cuda, -4, 4)
    g, u = x.chunk(2, dim=-1)
    ref = F.silu(g.float()) * u.float()
    out = poisoned(ref.shape, dtype, cuda)
    bi.silu_mul(x, out=out)
    assert rel_error(out, ref) <= TOL[dtype]


@pytest.mark.parametrize("out_dtype", ["same", torch.float32], ids=["same", "to_f32"])
@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize("shape", [(1, 151936), (7, 1000), (3, 4, 33)], ids=shape_id)
def test_softmax(cuda, gen, dtype, out_dtype, shape):
    out_dtype = dtype if out_dtype == "same" else out_dtype
    x = uniform(gen, shape, dtype, cuda, -10, 10)
    ref = torch.softmax(x.float(), dim=-1)
    out = poisoned(shape, out_dtype, cuda)
    bi.softmax(x, out=out)
    assert rel_error(out, ref) <= TOL[out_dtype]


@pytest.mark.parametrize("out_dtype", [torch.int32, torch.int64], ids=["i32", "i64"])
@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize("shape", [(1, 151936), (8, 32000), (3, 5, 1001)], ids=shape_id)
def test_argmax(cuda, gen, dtype, out_dtype, shape):
    x = uniform(gen, shape, dtype, cuda)
    flat = x.view(-1, shape[-1])
    flat[0, 17] = flat[0, shape[-1] - 3] = 5.0  # a tie: the lowest index wins
    if flat.shape[0] > 1:
        flat[1, shape[-1] // 2] = float("nan")  # NaN counts as the largest value
    out = torch.full((flat.shape[0],), -1, dtype=out_dtype, device=cuda)
    bi.argmax(x, out=out)
    ref = torch.argmax(x, dim=-1).reshape(-1)
    assert torch.equal(out.long(), ref)
    assert out[0].item() == 17


@pytest.mark.parametrize("ids_dtype", [torch.int32, torch.int64], ids=["i32", "i64"])
@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize("n,vocab,hidden", [(3, 151936, 128), (37, 32000, 4096), (5, 100, 1001)],
                         ids=lambda v: str(v))
def test_embedding(cuda, gen, dtype, ids_dtype, n, vocab, hidden):
    table = uniform(gen, (vocab, hidden), dtype, cuda)
    ids = torch.randint(0, vocab, (n,), generator=gen, dtype=ids_dtype).to(cuda)
    out = poisoned((n, hidden), dtype, cuda)
    bi.embedding(ids, table, out=out)
    assert torch.equal(out, F.embedding(ids.long(), table))


# ---- gemm ------------------------------------------------------------------------------------

GEMM_OUT_TOL = {torch.float32: 1e-3, torch.float16: 2e-3, torch.bfloat16: 1e-2}


@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("out_dtype", ["same", torch.float32], ids=["same", "to_f32"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (7, 1000, 896), (64, 1536, 512),
                                   (5, 77, 96)], ids=lambda v: str(v))
def test_gemm(cuda, gen, dtype, out_dtype, bias, m, n, k):
    out_dtype = dtype if out_dtype == "same" else out_dtype
    a = uniform(gen, (m, k), dtype, cuda)
    w = uniform(gen, (n, k), dtype, cuda)
    b = uniform(gen, (n,), out_dtype, cuda) if bias else None
    ref = F.linear(a.float(), w.float(), b.float() if bias else None)
    out = poisoned((m, n), out_dtype, cuda)
    bi.gemm(a, w, b, out=out)
    assert rel_error(out, ref) <= GEMM_OUT_TOL[out_dtype]


def test_gemm_strided_a_default_out(cuda, gen):
    wide = uniform(gen, (9, 1024 + 128), torch.bfloat16, cuda)
    a = wide[:, :1024]
    w = uniform(gen, (512, 1024), torch.bfloat16, cuda)
    out = bi.gemm(a, w)
    assert out.dtype == torch.bfloat16 and out.shape == (9, 512) and out.device == a.device
    assert rel_error(out, F.linear(a.float(), w.float())) <= 1e-2


# ---- attention (CPU tensors) vs SDPA ---------------------------------------------------------


def sdpa_reference(q, cu, ks, vs, causal, scale):
    """Each sequence through F.scaled_dot_product_attention in fp32 on q's device, GQA by
    repeat_interleave; the last q_len of kv_len tokens are the queries, so q_len < kv_len needs
    an explicit bottom-right-aligned causal mask."""
    torch_features.require("sdpa")
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    for b in range(len(ks)):
        qs = q[cu[b]: cu[b + 1]].float().transpose(0, 1)[None]  # [1, heads, q_len, d]
        q_len, kv_len = qs.shape[2], ks[b].shape[0]
        if q_len == 0:
            continue
        group = q.shape[1] // ks[b].shape[1]
        k = ks[b].float().transpose(0, 1)[None].repeat_interleave(group, dim=1)
        v = vs[b].float().transpose(0, 1)[None].repeat_interleave(group, dim=1)
        if causal and q_len == kv_len:
            o = F.scaled_dot_product_attention(qs, k, v, is_causal=True, scale=scale)
        elif causal:
            i = torch.arange(q_len, device=q.device)[:, None]
            j = torch.arange(kv_len, device=q.device)[None, :]
            mask = j <= kv_len - q_len + i  # True = attend
            o = F.scaled_dot_product_attention(qs, k, v, attn_mask=mask, scale=scale)
        else:
            o = F.scaled_dot_product_attention(qs, k, v, scale=scale)
        out[cu[b]: cu[b + 1]] = o[0].transpose(0, 1)
    return out


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize(
    "q_lens,kv_lens,q_heads,kv_heads,head_dim,page_size",
    [([9], [9], 4, 4, 64, 4),  # prefill
     ([1, 1], [33, 100], 8, 2, 128, 16),  # decode, GQA 4:1
     ([4, 7], [20, 7], 7, 1, 64, 8)],  # chunked prefill + prefill, GQA 7:1
    ids=["prefill", "decode_gqa", "chunked"])
def test_attention_cpu_vs_sdpa(gen, dtype, causal, q_lens, kv_lens, q_heads, kv_heads, head_dim,
                               page_size):
    # Contiguous pages: sequence b owns pages start_b .. start_b + pages_b - 1, in order.
    pages = [(n + page_size - 1) // page_size for n in kv_lens]
    starts = [sum(pages[:b]) for b in range(len(pages))]
    k_pages = uniform(gen, (sum(pages), page_size, kv_heads, head_dim), dtype, "cpu")
    v_pages = uniform(gen, (sum(pages), page_size, kv_heads, head_dim), dtype, "cpu")
    table = torch.zeros((len(kv_lens), max(pages)), dtype=torch.int32)
    for b in range(len(kv_lens)):
        table[b, : pages[b]] = torch.arange(starts[b], starts[b] + pages[b], dtype=torch.int32)
    ks = [k_pages[starts[b]: starts[b] + pages[b]].reshape(-1, kv_heads, head_dim)[:n]
          for b, n in enumerate(kv_lens)]
    vs = [v_pages[starts[b]: starts[b] + pages[b]].reshape(-1, kv_heads, head_dim)[:n]
          for b, n in enumerate(kv_lens)]
    cu = torch.tensor([0] + list(itertools.accumulate(q_lens)), dtype=torch.int32)
    q = uniform(gen, (int(cu[-1]), q_heads, head_dim), dtype, "cpu")
    scale = 1.0 / math.sqrt(head_dim)

    out = poisoned(q.shape, dtype, "cpu")
    bi.attention(q, cu, k_pages, v_pages, table, torch.tensor(kv_lens, dtype=torch.int32),
                 causal, scale, out=out)
    ref = sdpa_reference(q, cu.tolist(), ks, vs, causal, scale)
    assert rel_error(out, ref) <= TOL[dtype]


# ---- attention_prefill (CUDA) vs SDPA --------------------------------------------------------


def normal(gen, shape, dtype, device):
    return torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype).to(device)


def prefill_inputs(gen, device, q_lens, kv_lens, q_heads, kv_heads, head_dim,
                   dtype=torch.bfloat16):
    """Packed q, k, v of a ragged batch and their i32 offsets (on `device`)."""
    cu_q = torch.tensor([0] + list(itertools.accumulate(q_lens)), dtype=torch.int32)
    cu_kv = torch.tensor([0] + list(itertools.accumulate(kv_lens)), dtype=torch.int32)
    q = normal(gen, (int(cu_q[-1]), q_heads, head_dim), dtype, device)
    k = normal(gen, (int(cu_kv[-1]), kv_heads, head_dim), dtype, device)
    v = normal(gen, (int(cu_kv[-1]), kv_heads, head_dim), dtype, device)
    return q, k, v, cu_q.to(device), cu_kv.to(device)


def prefill_reference(q, k, v, cu_q, cu_kv, causal, scale):
    """sdpa_reference over packed k and v: fp32 on q's device."""
    cu_q, cu_kv = cu_q.tolist(), cu_kv.tolist()
    ks = [k[cu_kv[b]: cu_kv[b + 1]] for b in range(len(cu_kv) - 1)]
    vs = [v[cu_kv[b]: cu_kv[b + 1]] for b in range(len(cu_kv) - 1)]
    return sdpa_reference(q, cu_q, ks, vs, causal, scale)


PREFILL_LENGTHS = {"1": [1], "17": [17], "1000": [1000], "4097": [4097],
                   "ragged": [1, 17, 1000, 4097]}


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("head_dim", [64, 128], ids=["d64", "d128"])
@pytest.mark.parametrize("q_heads,kv_heads", [(8, 8), (8, 2)], ids=["mha", "gqa4"])
@pytest.mark.parametrize("lengths", list(PREFILL_LENGTHS), ids=list(PREFILL_LENGTHS))
def test_attention_prefill_cuda_vs_sdpa(cuda, gen, causal, head_dim, q_heads, kv_heads, lengths):
    lens = PREFILL_LENGTHS[lengths]
    q, k, v, cu_q, cu_kv = prefill_inputs(gen, cuda, lens, lens, q_heads, kv_heads, head_dim)
    scale = 1.0 / math.sqrt(head_dim)
    out = poisoned(q.shape, torch.bfloat16, cuda)  # rows left unwritten stay NaN and fail
    bi.attention_prefill(q, k, v, cu_q, cu_kv, max(lens), causal=causal, softmax_scale=scale,
                         out=out)
    ref = prefill_reference(q, k, v, cu_q, cu_kv, causal, scale)
    assert not torch.isnan(out).any()
    assert rel_error(out, ref) <= 1e-2


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("head_dim", [64, 128], ids=["d64", "d128"])
def test_attention_prefill_cuda_chunked_gqa_and_lse(cuda, gen, causal, head_dim):
    # Chunks continuing cached prefixes (q_len < kv_len: the causal diagonal aligned to the end),
    # an idle sequence, a single query over a long prefix; GQA 32:8 as Llama-3-8B. The defaults:
    # max_seqlen_q read from the CUDA offsets, softmax_scale 1/sqrt(head_dim), out and lse
    # allocated.
    q_lens, kv_lens = [5, 300, 0, 1, 129], [20, 1000, 64, 4097, 129]
    q, k, v, cu_q, cu_kv = prefill_inputs(gen, cuda, q_lens, kv_lens, 32, 8, head_dim)
    out, lse = bi.attention_prefill(q, k, v, cu_q, cu_kv, causal=causal, return_lse=True)
    assert out.dtype == torch.bfloat16 and out.device == q.device
    assert lse.dtype == torch.float32 and lse.shape == q.shape[:2]
    scale = 1.0 / math.sqrt(head_dim)
    assert rel_error(out, prefill_reference(q, k, v, cu_q, cu_kv, causal, scale)) <= 1e-2
    # lse from the scores themselves, in fp32
    lse_ref = torch.empty(lse.shape, dtype=torch.float32, device=cuda)
    cq, ckv = cu_q.tolist(), cu_kv.tolist()
    for b in range(len(q_lens)):
        if q_lens[b] == 0:
            continue
        qs = q[cq[b]: cq[b + 1]].float().transpose(0, 1)  # [heads, q_len, d]
        ks = k[ckv[b]: ckv[b + 1]].float().transpose(0, 1).repeat_interleave(4, dim=0)
        s = qs @ ks.transpose(1, 2) * scale
        if causal:
            i = torch.arange(q_lens[b], device=cuda)[:, None]
            j = torch.arange(kv_lens[b], device=cuda)[None, :]
            s = s.masked_fill(j > kv_lens[b] - q_lens[b] + i, float("-inf"))
        lse_ref[cq[b]: cq[b + 1]] = torch.logsumexp(s, dim=-1).transpose(0, 1)
    assert rel_error(lse, lse_ref) <= 1e-3


def test_attention_prefill_cuda_packed_qkv_views(cuda, gen):
    # q, k, v as slices of one QKV output (row stride (q_heads + 2 kv_heads) * head_dim).
    n, q_heads, kv_heads, d = 777, 16, 4, 128
    qkv = normal(gen, (n, q_heads + 2 * kv_heads, d), torch.bfloat16, cuda)
    q, k, v = qkv[:, :q_heads], qkv[:, q_heads: q_heads + kv_heads], qkv[:, q_heads + kv_heads:]
    cu = torch.tensor([0, 100, n], dtype=torch.int32, device=cuda)
    out = bi.attention_prefill(q, k, v, cu, cu, 677)
    ref = prefill_reference(q, k, v, cu, cu, True, 1.0 / math.sqrt(d))
    assert rel_error(out, ref) <= 1e-2


def test_attention_prefill_cuda_unsupported(cuda, gen):
    q, k, v, cu_q, cu_kv = prefill_inputs(gen, cuda, [4], [4], 2, 2, 64, torch.float32)
    with pytest.raises(BraidError) as e:
        bi.attention_prefill(q, k, v, cu_q, cu_kv, 4)  # f32 is CPU-only
    assert e.value.status == Status.DTYPE and "attention_prefill" in e.value.message
    q, k, v, cu_q, cu_kv = prefill_inputs(gen, cuda, [4], [4], 2, 2, 96)
    with pytest.raises(BraidError) as e:
        bi.attention_prefill(q, k, v, cu_q, cu_kv, 4)  # head_dim 96: not instantiated on CUDA
    assert e.value.status == Status.UNSUPPORTED and "head_dim" in e.value.message


# ---- binding behaviour and errors ------------------------------------------------------------


def test_cpu_tensors_zero_copy(gen):
    x = uniform(gen, (4, 64), torch.float32, "cpu")
    w = uniform(gen, (64,), torch.float32, "cpu", 0.5, 1.5)
    ref = llama_rms_norm(x, w, 1e-6)
    bi.rms_norm(x, w, 1e-6, out=x)  # in place through data_ptr
    assert rel_error(x, ref) <= 1e-5


def test_errors_name_the_argument():
    x = torch.zeros(3, 8)
    with pytest.raises(BraidError) as e:
        bi.rms_norm(x, torch.ones(5))
    assert e.value.status == Status.SHAPE
    assert "rms_norm: argument 'weight'" in e.value.message
    with pytest.raises(BraidError) as e:
        bi.rms_norm(x.double(), torch.ones(8))
    assert e.value.status == Status.DTYPE and "argument 'x'" in e.value.message


def test_float8_dtype_reaches_the_library():
    # No op here takes float8, but the descriptor must carry it: the library names it.
    torch_features.require("float8")
    x = torch.empty(2, 16, dtype=torch.float8_e4m3fn)
    with pytest.raises(BraidError) as e:
        bi.rms_norm(x, torch.empty(16, dtype=torch.float8_e4m3fn),
                    out=torch.empty(2, 16, dtype=torch.float8_e4m3fn))
    assert e.value.status == Status.DTYPE and "f8e4m3" in e.value.message


def test_mixed_devices(cuda):
    x = torch.zeros(3, 8, device=cuda)
    with pytest.raises(BraidError) as e:
        bi.rms_norm(x, torch.ones(8))
    assert e.value.status == Status.DEVICE and "argument 'weight'" in e.value.message


# ---- kv_append -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize("n,q_heads,kv_heads,head_dim,num_pages,page_size",
                         [(1, 32, 8, 128, 16, 16), (37, 28, 4, 128, 8, 16), (5, 7, 1, 64, 3, 5),
                          (3, 4, 2, 36, 2, 4)],  # head_dim 36: rows not 16-byte multiples
                         ids=["decode", "prefill", "odd_pages", "hd36"])
def test_kv_append(cuda, gen, dtype, n, q_heads, kv_heads, head_dim, num_pages, page_size):
    # k and v as views into a packed [n, (q_heads + 2 kv_heads) * head_dim] QKV output.
    qkv = uniform(gen, (n, (q_heads + 2 * kv_heads) * head_dim), dtype, cuda)
    k_start, v_start = q_heads * head_dim, (q_heads + kv_heads) * head_dim
    k = qkv[:, k_start:v_start].view(n, kv_heads, head_dim)
    v = qkv[:, v_start:].view(n, kv_heads, head_dim)
    slots = torch.randperm(num_pages * page_size, generator=gen)[:n].to(torch.int32).to(cuda)
    shape = (num_pages, page_size, kv_heads, head_dim)
    k_pages, v_pages = uniform(gen, shape, dtype, cuda), uniform(gen, shape, dtype, cuda)
    # The same scatter in PyTorch, on the pages seen as [slots, kv_heads, head_dim].
    k_ref, v_ref = k_pages.clone(), v_pages.clone()
    k_ref.view(-1, kv_heads, head_dim)[slots.long()] = k
    v_ref.view(-1, kv_heads, head_dim)[slots.long()] = v
    bi.kv_append(k, v, slots, k_pages, v_pages)
    assert torch.equal(k_pages, k_ref)  # other slots untouched too
    assert torch.equal(v_pages, v_ref)


# ---- paged_kv_gather -------------------------------------------------------------------------


def paged_cache(gen, dtype, device, kv_lens, page_size, kv_heads, head_dim):
    """Each sequence's tokens over shuffled pages (two pages spare, a spare page-table column of
    -1); returns the pages, the page table and each sequence's K and V."""
    pages_per_seq = [(n + page_size - 1) // page_size for n in kv_lens]
    num_pages = sum(pages_per_seq) + 2
    shape = (num_pages, page_size, kv_heads, head_dim)
    k_pages, v_pages = uniform(gen, shape, dtype, device), uniform(gen, shape, dtype, device)
    order = torch.randperm(num_pages, generator=gen).tolist()
    table = torch.full((len(kv_lens), max(pages_per_seq) + 1), -1, dtype=torch.int32)
    seq_k, seq_v, used = [], [], 0
    for b, n in enumerate(kv_lens):
        ids = order[used: used + pages_per_seq[b]]
        used += pages_per_seq[b]
        table[b, : len(ids)] = torch.tensor(ids, dtype=torch.int32)
        seq_k.append(k_pages[ids].reshape(-1, kv_heads, head_dim)[:n])
        seq_v.append(v_pages[ids].reshape(-1, kv_heads, head_dim)[:n])
    return k_pages, v_pages, table.to(device), seq_k, seq_v


@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize("kv_lens,page_size,kv_heads,head_dim",
                         [([1], 16, 8, 128), ([700, 0, 33, 1], 16, 8, 128), ([40, 3], 7, 7, 12),
                          ([100, 9], 5, 1, 3)],
                         ids=["one", "llama8b_empty", "unit8", "hd3"])
def test_paged_kv_gather(cuda, gen, dtype, kv_lens, page_size, kv_heads, head_dim):
    k_pages, v_pages, table, seq_k, seq_v = paged_cache(gen, dtype, cuda, kv_lens, page_size,
                                                        kv_heads, head_dim)
    cu = torch.tensor([0] + list(itertools.accumulate(kv_lens)), dtype=torch.int32, device=cuda)
    lens = torch.tensor(kv_lens, dtype=torch.int32, device=cuda)
    total = sum(kv_lens)
    k_out = poisoned((total + 5, kv_heads, head_dim), dtype, cuda)
    v_out = poisoned((total + 5, kv_heads, head_dim), dtype, cuda)
    bi.paged_kv_gather(k_pages, v_pages, table, lens, cu, k_out, v_out)
    assert torch.equal(k_out[:total], torch.cat(seq_k))
    assert torch.equal(v_out[:total], torch.cat(seq_v))
    assert torch.isnan(k_out[total:]).all() and torch.isnan(v_out[total:]).all()


def test_paged_kv_gather_feeds_attention_prefill(cuda, gen):
    """Chunked prefill: a chunk's queries over its sequence's cached keys, through the gather and
    attention_prefill, equal attention() over the pages."""
    kv_lens, q_lens, kv_heads, q_heads, head_dim = [300, 45], [64, 45], 2, 8, 128
    k_pages, v_pages, table, _, _ = paged_cache(gen, torch.bfloat16, cuda, kv_lens, 16, kv_heads,
                                                head_dim)
    cu_kv = torch.tensor([0] + list(itertools.accumulate(kv_lens)), dtype=torch.int32, device=cuda)
    cu_q = torch.tensor([0] + list(itertools.accumulate(q_lens)), dtype=torch.int32, device=cuda)
    lens = torch.tensor(kv_lens, dtype=torch.int32, device=cuda)
    q = uniform(gen, (sum(q_lens), q_heads, head_dim), torch.bfloat16, cuda)
    k, v = bi.paged_kv_gather(k_pages, v_pages, table, lens, cu_kv)
    assert k.shape == (sum(kv_lens), kv_heads, head_dim)
    got = bi.attention_prefill(q, k, v, cu_q, cu_kv, max(q_lens))
    want = bi.attention(q, cu_q, k_pages, v_pages, table, lens)
    assert rel_error(got, want) <= TOL[torch.bfloat16]


# ---- moe_route_topk_softmax ------------------------------------------------------------------


def distinct_logits(gen, tokens, experts, dtype, device):
    """Router logits without near-ties, exact in every float dtype: each row a permutation of
    the integers around 0 (|i| <= 256, exact even in bf16) times a power of two, so rows span
    about [-4, 4] and neighbours differ by at least 1/64. torch.topk's order is then unique."""
    scale = 2.0 ** -max(0, math.ceil(math.log2(experts / 8)))
    perms = torch.stack([torch.randperm(experts, generator=gen) for _ in range(tokens)])
    return ((perms - experts // 2).float() * scale).to(dtype).to(device)


@pytest.mark.parametrize("renormalize", [True, False], ids=["renorm", "raw"])
@pytest.mark.parametrize("dtype", FLOATS, ids=FLOAT_IDS)
@pytest.mark.parametrize("tokens,experts,k",
                         [(1, 8, 2),  # Mixtral: 8 experts, top-2
                          (5, 8, 1), (33, 128, 8),  # Qwen3-30B-A3B
                          (5, 60, 8),  # not a power of two
                          (33, 512, 16),  # the limits
                          (1, 3, 3),  # k == E
                          (70, 128, 8)],  # several blocks
                         ids=lambda v: str(v))
def test_moe_route_topk_softmax(cuda, gen, dtype, renormalize, tokens, experts, k):
    logits = distinct_logits(gen, tokens, experts, dtype, cuda)
    # transformers' router (Qwen3-MoE, Mixtral): softmax in fp32, top-k, optional renormalise.
    p = torch.softmax(logits.float(), dim=-1)
    w_ref, ids_ref = torch.topk(p, k, dim=-1)  # sorted, descending
    if renormalize:
        w_ref = w_ref / w_ref.sum(dim=-1, keepdim=True)
    w = poisoned((tokens, k), torch.float32, cuda)
    ids = torch.full((tokens, k), -1, dtype=torch.int32, device=cuda)
    bi.moe_route_topk_softmax(logits, k, renormalize, w, ids)
    assert torch.equal(ids.long(), ids_ref)
    assert rel_error(w, w_ref) <= TOL[torch.float32]  # fp32 weights whatever the logits' dtype


def test_moe_route_allocates_on_the_device_and_strided_rows(cuda, gen):
    wide = distinct_logits(gen, 9, 128 + 8, torch.bfloat16, cuda)
    logits = wide[:, :128]  # rows with a row stride of 136
    w, ids = bi.moe_route_topk_softmax(logits, 8, True)
    assert w.device == logits.device and w.dtype == torch.float32 and w.shape == (9, 8)
    assert ids.device == logits.device and ids.dtype == torch.int32 and ids.shape == (9, 8)
    w_ref, ids_ref = torch.topk(torch.softmax(logits.float(), dim=-1), 8, dim=-1)
    assert torch.equal(ids.long(), ids_ref)
    assert rel_error(w, w_ref / w_ref.sum(dim=-1, keepdim=True)) <= TOL[torch.float32]


# ---- moe_experts -----------------------------------------------------------------------------


def moe_experts_torch(x, topk_weights, topk_ids, gate_up, down):
    """The experts as transformers loops over them, one token and one chosen expert at a time
    (gate_proj, up_proj, act_fn = F.silu, down_proj, times the routing weight), in float64 with
    g, u and h rounded to x's dtype where the contract rounds them. An expert id outside
    [0, E) contributes nothing (the CUDA contract)."""
    inter = down.shape[2]
    out = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    for t in range(x.shape[0]):
        xt = x[t].double()
        for j in range(topk_ids.shape[1]):
            e = int(topk_ids[t, j])
            if not 0 <= e < gate_up.shape[0]:
                continue
            g = F.linear(xt, gate_up[e, :inter].double()).to(x.dtype).double()
            u = F.linear(xt, gate_up[e, inter:].double()).to(x.dtype).double()
            h = (F.silu(g) * u).to(x.dtype).double()
            out[t] += float(topk_weights[t, j]) * F.linear(h, down[e].double())
    return out


def make_experts(gen, dtype, device, tokens, experts, k, hidden, inter):
    """Random moe_experts inputs: k distinct experts per token, routing weights summing to 1,
    projections scaled so each output is O(1)."""
    x = uniform(gen, (tokens, hidden), dtype, device)
    a, b = 2 / math.sqrt(hidden), 2 / math.sqrt(inter)
    gate_up = uniform(gen, (experts, 2 * inter, hidden), dtype, device, -a, a)
    down = uniform(gen, (experts, hidden, inter), dtype, device, -b, b)
    ids = torch.stack([torch.randperm(experts, generator=gen)[:k] for _ in range(tokens)])
    w = torch.rand((tokens, k), generator=gen) + 0.1
    w = w / w.sum(dim=-1, keepdim=True)
    return x, w.to(device), ids.to(torch.int32).to(device), gate_up, down


@pytest.mark.parametrize(
    "dtype,tokens,experts,k,hidden,inter",
    [(torch.float32, 1, 8, 1, 64, 96),
     (torch.bfloat16, 5, 8, 2, 64, 96),
     (torch.bfloat16, 33, 60, 8, 64, 96),
     (torch.float16, 5, 128, 8, 64, 96),
     (torch.bfloat16, 33, 8, 2, 100, 37),  # odd sizes: scalar loads
     (torch.float32, 5, 60, 8, 100, 37),
     (torch.bfloat16, 1, 128, 8, 2048, 768),  # Qwen3-30B-A3B decode
     (torch.bfloat16, 5, 128, 8, 2048, 768)],
    ids=["f32_top1", "bf16_top2", "bf16_60x8", "f16_128x8", "bf16_odd", "f32_odd",
         "bf16_qwen3_decode", "bf16_qwen3_5tok"])
def test_moe_experts(cuda, gen, dtype, tokens, experts, k, hidden, inter):
    x, w, ids, gate_up, down = make_experts(gen, dtype, cuda, tokens, experts, k, hidden, inter)
    ref = moe_experts_torch(x, w, ids, gate_up, down)
    workspace = poisoned((tokens * k, inter), torch.float32, cuda)
    out = poisoned(x.shape, dtype, cuda)
    assert bi.moe_experts(x, w, ids, gate_up, down, workspace, out) is out
    assert rel_error(out, ref) <= TOL[dtype]


def test_moe_experts_in_place_and_bad_ids_contribute_nothing(cuda, gen):
    x, w, ids, gate_up, down = make_experts(gen, torch.bfloat16, cuda, 6, 16, 4, 128, 64)
    ids[0, 1] = 16  # out of range: on CUDA this pair contributes nothing
    ids[3, 0] = -1
    ref = moe_experts_torch(x, w, ids, gate_up, down)
    assert bi.moe_experts(x, w, ids, gate_up, down, out=x) is x  # out may be x
    assert rel_error(x, ref) <= TOL[torch.bfloat16]


def test_router_feeds_experts(cuda, gen):
    # The two ops as a Qwen3-MoE block chains them, against transformers' loop.
    tokens, experts, k, hidden, inter = 7, 32, 4, 256, 128
    x, _, _, gate_up, down = make_experts(gen, torch.bfloat16, cuda, tokens, experts, k, hidden,
                                          inter)
    logits = distinct_logits(gen, tokens, experts, torch.bfloat16, cuda)
    w, ids = bi.moe_route_topk_softmax(logits, k, True)
    w_ref, ids_ref = torch.topk(torch.softmax(logits.float(), dim=-1), k, dim=-1)
    w_ref = w_ref / w_ref.sum(dim=-1, keepdim=True)
    out = bi.moe_experts(x, w, ids, gate_up, down)
    assert out.dtype == torch.bfloat16 and out.device == x.device
    assert rel_error(out, moe_experts_torch(x, w_ref, ids_ref, gate_up, down)) <= 1e-2


def fp8_blocks(gen, experts, rows, cols, device):
    """weights_torch's block-quantized e4m3 weights on `device`: (codes, scales, the dequantized
    values in float64)."""
    codes, scale = weights_torch(gen, experts, rows, cols)
    full = scale.double().repeat_interleave(128, -2).repeat_interleave(128, -1)
    return codes.to(device), scale.to(device), (codes.double() * full).to(device)


@pytest.mark.parametrize("tokens", [1, 5])
def test_moe_experts_fp8_shared_and_residual(cuda, gen, tokens):
    # DeepSeek-V3's MoE block at decode as one call: fp8 routed and shared experts (block scales)
    # and the residual add, against transformers' loop on the dequantized weights.
    torch_features.require("float8")
    experts, k, hidden, inter, shared = 16, 4, 256, 128, 256
    x = uniform(gen, (tokens, hidden), torch.bfloat16, cuda)
    residual = uniform(gen, (tokens, hidden), torch.bfloat16, cuda)
    ids = torch.stack([torch.randperm(experts, generator=gen)[:k] for _ in range(tokens)])
    w = torch.rand((tokens, k), generator=gen) + 0.1
    w, ids = (w / w.sum(dim=-1, keepdim=True)).to(cuda), ids.to(torch.int32).to(cuda)
    gate_up, gu_scale, gate_up_ref = fp8_blocks(gen, experts, 2 * inter, hidden, cuda)
    down, dn_scale, down_ref = fp8_blocks(gen, experts, hidden, inter, cuda)
    shared_gate_up = fp8_blocks(gen, 1, 2 * shared, hidden, cuda)
    s_gate_up, s_gu_scale, s_gate_up_ref = (v[0] for v in shared_gate_up)
    s_down, s_dn_scale, s_down_ref = (v[0] for v in fp8_blocks(gen, 1, hidden, shared, cuda))

    bf16 = lambda v: v.to(torch.bfloat16).double()  # noqa: E731
    routed = moe_experts_torch(x, w, ids, gate_up_ref, down_ref)
    xd = x.double()
    g, u = bf16(xd @ s_gate_up_ref[:shared].T), bf16(xd @ s_gate_up_ref[shared:].T)
    shared_out = bf16(bf16(F.silu(g) * u) @ s_down_ref.T)
    ref = bf16(residual.double() + bf16(bf16(routed) + shared_out))

    out = bi.moe_experts(x, w, ids, gate_up, down, gate_up_scale=gu_scale, down_scale=dn_scale,
                         shared_gate_up=s_gate_up, shared_gate_up_scale=s_gu_scale,
                         shared_down=s_down, shared_down_scale=s_dn_scale, residual=residual)
    assert out.dtype == torch.bfloat16 and out.shape == x.shape
    assert rel_error(out, ref) <= TOL[torch.bfloat16]
