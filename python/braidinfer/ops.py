"""The ops of include/braid/ops.h on torch tensors (CPU or CUDA) and numpy arrays (CPU).

Every function takes its outputs from the caller, as the C++ API does, and writes them in place
(zero copy: the library works on the tensors' own memory). Pass `out=None` to have the output
allocated for you, with torch.empty or numpy.empty like the first input. Each function returns
its output(s).

CUDA calls are asynchronous on `stream`: by default PyTorch's current stream of the tensors'
device; pass a torch.cuda.Stream or a raw cudaStream_t (int) to choose another. Errors raise
BraidError with the library's message ("<op>: argument '<arg>': expected ..., got ...").
"""

import ctypes
import dataclasses
import math
import sys
from typing import Optional, Union

from . import _convert
from ._library import BraidError, RopeConfigDesc, Status, check, function

__all__ = [
    "RopeConfig",
    "embedding",
    "rms_norm",
    "add_rms_norm",
    "rope_apply",
    "silu_mul",
    "gemm",
    "softmax",
    "argmax",
    "sample_tokens",
    "sample_tokens_workspace_bytes",
    "attention",
    "attention_prefill",
    "attention_decode",
    "attention_decode_counters",
    "attention_decode_workspace_floats",
    "attention_mla",
    "attention_mla_workspace_floats",
    "kv_append",
    "qk_norm_rope_kv_append",
    "qk_norm_rope_kv_append_attention_decode",
    "paged_kv_gather",
    "moe_route_topk_softmax",
    "moe_route_grouped",
    "moe_route_softmax_grouped",
    "moe_combine",
    "moe_experts",
    "moe_grouped_gemm",
    "moe_fp8_quantize",
    "moe_gather_fp8",
    "moe_grouped_gemm_fp8",
    "moe_gather",
    "moe_permute",
    "moe_permute_workspace_size",
    "moe_fp8_block_scale",
    "moe_fp8_block_scale_workspace_bytes",
]


class _Call:
    """One library call: builds the descriptors (keeping them alive), picks the stream and the
    CUDA device, and turns a non-OK status into BraidError."""

    def __init__(self, op, stream=None, function_name=None):
        self.op = op  # what errors name
        self.function_name = function_name or "braid_" + op  # the C function run() calls
        self.stream = stream
        self.descriptors = []

    def tensor(self, arg, value, writable=False):
        d = _convert.Descriptor(self.op, arg, value, writable)
        self.descriptors.append(d)
        return d.pointer()

    def optional(self, arg, value, writable=False):
        return None if value is None else self.tensor(arg, value, writable)

    def run(self, *args):
        fn = function(self.function_name)
        cuda = next((d.cuda_device for d in self.descriptors if d.cuda_device is not None), None)
        torch = sys.modules.get("torch")
        if cuda is None:
            status = fn(*args, None)  # host tensors: no stream
        elif torch is None:
            status = fn(*args, _stream_handle(self.stream, None, cuda))
        else:
            # Make the tensors' device current, so the library's CUDA runtime works in it.
            with torch.cuda.device(cuda):
                status = fn(*args, _stream_handle(self.stream, torch, cuda))
        check(status)


def _stream_handle(stream, torch, device):
    if stream is None:
        return torch.cuda.current_stream(device).cuda_stream if torch is not None else None
    if isinstance(stream, int):
        return stream or None
    return stream.cuda_stream  # torch.cuda.Stream (or anything with a cuda_stream handle)


def _shape(value):
    return tuple(int(s) for s in value.shape)


def _need_dims(op, arg, value, n):
    """Checks what allocating an output needs before the library sees the arguments."""
    if not hasattr(value, "shape"):
        raise BraidError(Status.INVALID_ARGUMENT,
                         f"{op}: argument '{arg}': expected a torch.Tensor or a numpy array, "
                         f"got {type(value).__name__}")
    if len(value.shape) < n:
        raise BraidError(Status.SHAPE, f"{op}: argument '{arg}': expected at least {n} "
                                       f"dimensions, got shape {list(_shape(value))}")


def _out_dtype(out_dtype, default):
    return default if out_dtype is None else _convert.dtype_name(out_dtype)


# ---------------------------------------------------------------------------------------------


def embedding(ids, table, out=None, *, stream=None):
    """out[i, :] = table[ids[i], :]. ids [n] i32/i64; table [vocab, hidden] f32/f16/bf16;
    out [n, hidden] table's dtype. Out-of-range ids: an error on the CPU, zero rows on CUDA."""
    if out is None:
        _need_dims("embedding", "ids", ids, 1)
        _need_dims("embedding", "table", table, 2)
        dtype = _convert.tensor_dtype("embedding", "table", table)
        out = _convert.empty(table, (_shape(ids)[0], _shape(table)[-1]), dtype)
    c = _Call("embedding", stream)
    c.run(c.tensor("ids", ids), c.tensor("table", table), c.tensor("out", out, writable=True))
    return out


def rms_norm(x, weight, eps=1e-6, out=None, *, stream=None):
    """Hugging Face RMSNorm: to_dtype(weight * to_dtype(x * rsqrt(mean(x^2) + eps))).
    x [..., d] f32/f16/bf16; weight [d]; out like x (may be x)."""
    if out is None:
        _need_dims("rms_norm", "x", x, 0)
        out = _convert.empty(x, _shape(x), _convert.tensor_dtype("rms_norm", "x", x))
    c = _Call("rms_norm", stream)
    c.run(c.tensor("x", x), c.tensor("weight", weight), ctypes.c_float(eps),
          c.tensor("out", out, writable=True))
    return out


def add_rms_norm(x, residual, weight, eps=1e-6, out=None, *, stream=None):
    """residual <- x + residual (in place, rounded to its dtype); out <- rms_norm(residual).
    Returns out."""
    if out is None:
        _need_dims("add_rms_norm", "x", x, 0)
        out = _convert.empty(x, _shape(x), _convert.tensor_dtype("add_rms_norm", "x", x))
    c = _Call("add_rms_norm", stream)
    c.run(c.tensor("x", x), c.tensor("residual", residual, writable=True),
          c.tensor("weight", weight), ctypes.c_float(eps), c.tensor("out", out, writable=True))
    return out


@dataclasses.dataclass
class RopeConfig:
    """braid::ops::RopeConfig. Fields left as None take the library's defaults (theta 10000,
    whole head_dim, no scaling, ...). scaling: "none", "llama3" or "yarn"."""

    theta: Optional[float] = None
    rotary_dim: Optional[int] = None
    scaling: Union[str, int, None] = None
    factor: Optional[float] = None
    low_freq_factor: Optional[float] = None
    high_freq_factor: Optional[float] = None
    original_max_position: Optional[int] = None
    beta_fast: Optional[float] = None
    beta_slow: Optional[float] = None
    mscale: Optional[float] = None
    mscale_all_dim: Optional[float] = None
    attention_factor: Optional[float] = None
    truncate: Optional[bool] = None
    interleaved: Optional[bool] = None

    _SCALINGS = {"none": 0, "default": 0, "llama3": 1, "yarn": 2}

    def to_c(self):
        c = RopeConfigDesc()
        function("braid_rope_config_init")(ctypes.byref(c))
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None:
                continue
            if field.name == "scaling" and isinstance(value, str):
                if value not in self._SCALINGS:
                    raise BraidError(Status.INVALID_ARGUMENT,
                                     f"rope_apply: argument 'config.scaling': expected none, "
                                     f"llama3 or yarn, got {value}")
                value = self._SCALINGS[value]
            setattr(c, field.name, int(value) if field.name in ("truncate", "interleaved") else value)
        return c


def rope_apply(q, k, positions, config=None, *, stream=None):
    """Rotates q and (unless k is None) k in place, rotate_half convention.
    q [n, q_heads, head_dim]; k [n, kv_heads, head_dim] or None; positions [n] i32/i64.
    config: a RopeConfig (None = defaults). Returns (q, k)."""
    cfg = (config or RopeConfig()).to_c()
    c = _Call("rope_apply", stream)
    c.run(c.tensor("q", q, writable=True), c.optional("k", k, writable=True),
          c.tensor("positions", positions), ctypes.byref(cfg))
    return q, k


def silu_mul(x, out=None, *, stream=None):
    """SwiGLU on packed [gate | up]: out = silu(x[..., :d]) * x[..., d:].
    x [..., 2d] f32/f16/bf16; out [..., d]."""
    if out is None:
        _need_dims("silu_mul", "x", x, 1)
        shape = _shape(x)
        dtype = _convert.tensor_dtype("silu_mul", "x", x)
        out = _convert.empty(x, shape[:-1] + (shape[-1] // 2,), dtype)
    c = _Call("silu_mul", stream)
    c.run(c.tensor("x", x), c.tensor("out", out, writable=True))
    return out


def gemm(a, w, bias=None, out=None, *, out_dtype=None, stream=None):
    """out = a @ w.T (+ bias), fp32 accumulation (torch.nn.functional.linear).
    a [m, k] f16/bf16 (f32 on the CPU); w [n, k]; bias [n] in out's dtype, or None; out [m, n] a's dtype or f32
    (allocated as out_dtype, default a's dtype)."""
    if out is None:
        _need_dims("gemm", "a", a, 2)
        _need_dims("gemm", "w", w, 2)
        dtype = _out_dtype(out_dtype, _convert.tensor_dtype("gemm", "a", a))
        out = _convert.empty(a, (_shape(a)[0], _shape(w)[0]), dtype)
    c = _Call("gemm", stream)
    c.run(c.tensor("a", a), c.tensor("w", w), c.optional("bias", bias),
          c.tensor("out", out, writable=True))
    return out


def softmax(x, out=None, *, out_dtype=None, stream=None):
    """Softmax over the last dimension in fp32. out: x's shape, f32 or x's dtype (allocated as
    out_dtype, default x's dtype)."""
    if out is None:
        _need_dims("softmax", "x", x, 0)
        dtype = _out_dtype(out_dtype, _convert.tensor_dtype("softmax", "x", x))
        out = _convert.empty(x, _shape(x), dtype)
    c = _Call("softmax", stream)
    c.run(c.tensor("x", x), c.tensor("out", out, writable=True))
    return out


def argmax(x, out=None, *, out_dtype="i64", stream=None):
    """Index of the maximum over the last dimension (ties: lowest index; NaN wins), as
    torch.argmax(x, -1). out [rows] i32/i64: one entry per row, flattened over the leading
    dimensions."""
    if out is None:
        _need_dims("argmax", "x", x, 1)
        rows = math.prod(_shape(x)[:-1])
        out = _convert.empty(x, (rows,), _out_dtype(out_dtype, "i64"))
    c = _Call("argmax", stream)
    c.run(c.tensor("x", x), c.tensor("out", out, writable=True))
    return out


def attention(q, cu_seqlens_q, k_pages, v_pages, page_table, kv_lens, causal=True,
              softmax_scale=None, out=None, lse=None, *, return_lse=False, stream=None):
    """Attention over a paged KV cache with ragged queries (see ops.h).
    q [total_q, q_heads, head_dim]; cu_seqlens_q [batch+1] i32; k_pages, v_pages
    [num_pages, page_size, kv_heads, head_dim]; page_table [batch, max_pages] i32; kv_lens
    [batch] i32; softmax_scale default 1/sqrt(head_dim). lse [total_q, q_heads] f32 or None
    (allocated when return_lse). Returns out, or (out, lse) when return_lse."""
    if softmax_scale is None:
        _need_dims("attention", "q", q, 3)
        softmax_scale = 1.0 / math.sqrt(_shape(q)[-1])
    if out is None:
        _need_dims("attention", "q", q, 3)
        out = _convert.empty(q, _shape(q), _convert.tensor_dtype("attention", "q", q))
    if return_lse and lse is None:
        lse = _convert.empty(q, _shape(q)[:2], "f32")
    c = _Call("attention", stream)
    c.run(c.tensor("q", q), c.tensor("cu_seqlens_q", cu_seqlens_q),
          c.tensor("kv.k_pages", k_pages), c.tensor("kv.v_pages", v_pages),
          c.tensor("kv.page_table", page_table), c.tensor("kv.kv_lens", kv_lens),
          ctypes.c_int(1 if causal else 0), ctypes.c_float(softmax_scale),
          c.tensor("out", out, writable=True), c.optional("lse", lse, writable=True))
    return (out, lse) if return_lse else out


def _max_seq_len(op, arg, cu_seqlens):
    """The largest cu_seqlens[b+1] - cu_seqlens[b], read on the host. A CUDA tensor is copied to
    the host for it (a device synchronisation), so callers that care pass the value instead."""
    _need_dims(op, arg, cu_seqlens, 1)
    if len(cu_seqlens.shape) != 1:
        return 0  # a malformed argument: the library's check names it
    if _convert.is_torch(cu_seqlens):
        values = cu_seqlens.detach().cpu().tolist()
    else:
        values = cu_seqlens.tolist()
    return int(max((b - a for a, b in zip(values, values[1:])), default=0))


def attention_prefill(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q=None, *, causal=True,
                      softmax_scale=None, out=None, lse=None, return_lse=False, stream=None):
    """FlashAttention forward over a ragged batch with keys and values in contiguous tensors
    (see ops.h). Sequence b's queries are rows cu_seqlens_q[b] .. cu_seqlens_q[b+1] of q and its
    keys/values rows cu_seqlens_kv[b] .. cu_seqlens_kv[b+1] of k/v; the queries are the
    sequence's last q_len tokens, so causal query i sees keys 0 .. kv_len - q_len + i.
    q [total_q, q_heads, head_dim] f16/bf16 (f32 on the CPU only); k, v [total_kv, kv_heads,
    head_dim], kv_heads dividing q_heads (GQA); cu_seqlens_q, cu_seqlens_kv [batch+1] i32.
    max_seqlen_q: the longest q_len; None computes it from cu_seqlens_q on the host, which for a
    CUDA tensor means a copy to the host and a synchronisation (pass it to keep the call
    asynchronous, e.g. for CUDA-graph capture). softmax_scale default 1/sqrt(head_dim).
    out [total_q, q_heads, head_dim] (allocated like q when None); lse [total_q, q_heads] f32 or
    None (allocated when return_lse). Returns out, or (out, lse) when return_lse."""
    op = "attention_prefill"
    _need_dims(op, "q", q, 3)
    if max_seqlen_q is None:
        max_seqlen_q = _max_seq_len(op, "cu_seqlens_q", cu_seqlens_q)
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(_shape(q)[-1])
    if out is None:
        out = _convert.empty(q, _shape(q), _convert.tensor_dtype(op, "q", q))
    if return_lse and lse is None:
        lse = _convert.empty(q, _shape(q)[:2], "f32")
    c = _Call(op, stream)
    c.run(c.tensor("q", q), c.tensor("k", k), c.tensor("v", v),
          c.tensor("cu_seqlens_q", cu_seqlens_q), c.tensor("cu_seqlens_kv", cu_seqlens_kv),
          ctypes.c_int(int(max_seqlen_q)), ctypes.c_int(1 if causal else 0),
          ctypes.c_float(softmax_scale), c.tensor("out", out, writable=True),
          c.optional("lse", lse, writable=True))
    return (out, lse) if return_lse else out


def attention_decode_workspace_floats(batch, q_heads, head_dim, max_kv_len):
    """Elements of the f32 workspace attention_decode needs, for page tables of up to
    max_kv_len = max_pages_per_seq * page_size keys."""
    return int(function("braid_attention_decode_workspace_floats")(
        int(batch), int(q_heads), int(head_dim), int(max_kv_len)))


def attention_decode(q, k_pages, v_pages, page_table, kv_lens, softmax_scale=None, out=None,
                     lse=None, workspace=None, *, return_lse=False, stream=None):
    """Decode attention: one query per sequence over a paged KV cache (see ops.h); the result of
    attention() with cu_seqlens_q = [0, 1, ..., batch]. q [batch, q_heads, head_dim]; k_pages,
    v_pages [num_pages, page_size, kv_heads, head_dim]; page_table [batch, max_pages] i32;
    kv_lens [batch] i32, each >= 1; softmax_scale default 1/sqrt(head_dim); lse [batch, q_heads]
    f32 or None (allocated when return_lse); workspace: f32 scratch of at least
    attention_decode_workspace_floats(batch, q_heads, head_dim, max_pages * page_size) elements,
    allocated when None (pass one to keep the call free of allocations, e.g. in a CUDA graph).
    Returns out, or (out, lse) when return_lse."""
    _need_dims("attention_decode", "q", q, 3)
    batch, q_heads, head_dim = _shape(q)[:3]
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(head_dim)
    if out is None:
        out = _convert.empty(q, _shape(q), _convert.tensor_dtype("attention_decode", "q", q))
    if return_lse and lse is None:
        lse = _convert.empty(q, (batch, q_heads), "f32")
    if workspace is None:
        _need_dims("attention_decode", "kv.page_table", page_table, 2)
        _need_dims("attention_decode", "kv.k_pages", k_pages, 4)
        capacity = _shape(page_table)[1] * _shape(k_pages)[1]
        n = attention_decode_workspace_floats(batch, q_heads, head_dim, capacity)
        workspace = _convert.empty(q, (n,), "f32")
    c = _Call("attention_decode", stream)
    c.run(c.tensor("q", q), c.tensor("kv.k_pages", k_pages), c.tensor("kv.v_pages", v_pages),
          c.tensor("kv.page_table", page_table), c.tensor("kv.kv_lens", kv_lens),
          ctypes.c_float(softmax_scale), c.tensor("out", out, writable=True),
          c.optional("lse", lse, writable=True), c.tensor("workspace", workspace, writable=True))
    return (out, lse) if return_lse else out


def attention_decode_counters(batch, q_heads, kv_heads):
    """Elements of the i32 counters qk_norm_rope_kv_append_attention_decode needs."""
    return int(function("braid_attention_decode_counters")(int(batch), int(q_heads), int(kv_heads)))


def qk_norm_rope_kv_append_attention_decode(q, k, v, positions, slots, k_pages, v_pages,
                                            page_table, kv_lens, *, q_norm=None, k_norm=None, eps=1e-6,
                                            config=None, softmax_scale=None, out=None, lse=None,
                                            workspace=None, counters=None, return_lse=False,
                                            stream=None):
    """A decode step's attention in one call (see ops.h): per-head RMSNorm of q and k (q_norm,
    k_norm [head_dim], both or neither), RoPE (config: a RopeConfig, None = defaults), the new K/V
    appended at slots [batch] i32 (the cache slot of key kv_lens[b] - 1), then attention_decode.
    q [batch, q_heads, head_dim], k, v [batch, kv_heads, head_dim] (q and k unspecified after);
    the cache, softmax_scale, out, lse and workspace as attention_decode. counters: i32 of at least
    attention_decode_counters(batch, q_heads, kv_heads) elements, zero before the first call and
    left zero (allocated zeroed when None; pass one to keep the call free of allocations).
    Returns out, or (out, lse) when return_lse."""
    op = "qk_norm_rope_kv_append_attention_decode"
    _need_dims(op, "q", q, 3)
    _need_dims(op, "kv.k_pages", k_pages, 4)
    _need_dims(op, "kv.page_table", page_table, 2)
    batch, q_heads, head_dim = _shape(q)[:3]
    if softmax_scale is None:
        softmax_scale = 1.0 / math.sqrt(head_dim)
    if out is None:
        out = _convert.empty(q, _shape(q), _convert.tensor_dtype(op, "q", q))
    if return_lse and lse is None:
        lse = _convert.empty(q, (batch, q_heads), "f32")
    if workspace is None:
        capacity = _shape(page_table)[1] * _shape(k_pages)[1]
        n = attention_decode_workspace_floats(batch, q_heads, head_dim, capacity)
        workspace = _convert.empty(q, (n,), "f32")
    if counters is None:
        n = max(attention_decode_counters(batch, q_heads, _shape(k_pages)[2]), 1)
        counters = _convert.empty(q, (n,), "i32")
        counters[...] = 0
    cfg = (config or RopeConfig()).to_c()
    c = _Call(op, stream)
    c.run(c.tensor("q", q, writable=True), c.tensor("k", k, writable=True), c.tensor("v", v),
          c.optional("q_norm", q_norm), c.optional("k_norm", k_norm), ctypes.c_float(eps),
          c.tensor("positions", positions), ctypes.byref(cfg), c.tensor("slots", slots),
          c.tensor("kv.k_pages", k_pages, writable=True),
          c.tensor("kv.v_pages", v_pages, writable=True), c.tensor("kv.page_table", page_table),
          c.tensor("kv.kv_lens", kv_lens), ctypes.c_float(softmax_scale),
          c.tensor("out", out, writable=True), c.optional("lse", lse, writable=True),
          c.tensor("workspace", workspace, writable=True),
          c.tensor("counters", counters, writable=True))
    return (out, lse) if return_lse else out


def attention_mla_workspace_floats(total_q, heads, r, max_kv_len):
    """Elements of the f32 workspace attention_mla needs for total_q query tokens of `heads`
    heads, latent width r, and page tables of up to max_kv_len = max_pages * page_size keys
    (0: none needed)."""
    return int(function("braid_attention_mla_workspace_floats")(
        int(total_q), int(heads), int(r), int(max_kv_len)))


def attention_mla(q_latent, q_rope, cu_seqlens_q, cache, page_table, kv_lens, softmax_scale,
                  causal=True, out=None, lse=None, workspace=None, *, return_lse=False,
                  stream=None):
    """Multi-head latent attention (DeepSeek-V2/V3) in the absorbed form over a paged cache of
    latent rows (see ops.h): every head reads the same rows c = [latent (r) | rope key (dr)],
    score(h, s) = (q_latent[h] . c_s[:r] + q_rope[h] . c_s[r:]) * softmax_scale and
    out[h] = sum_s softmax_s * c_s[:r]. Ragged and causal as attention().
    q_latent [total_q, heads, r] (W_UK folded in); q_rope [total_q, heads, dr]; cu_seqlens_q
    [batch+1] i32; cache [num_pages, page_size, 1, r + dr]; page_table [batch, max_pages] i32;
    kv_lens [batch] i32, each >= its q_len. softmax_scale has no default (DeepSeek's is
    1/sqrt(qk_nope_head_dim + qk_rope_head_dim) times its YaRN mscale squared).
    out [total_q, heads, r] (allocated like q_latent when None); lse [total_q, heads] f32 or None
    (allocated when return_lse); workspace: f32 scratch of at least
    attention_mla_workspace_floats(total_q, heads, r, max_pages * page_size) elements, allocated
    when None and needed (pass one to keep the call free of allocations, e.g. in a CUDA graph).
    Returns out, or (out, lse) when return_lse."""
    op = "attention_mla"
    _need_dims(op, "q_latent", q_latent, 3)
    total_q, heads, r = _shape(q_latent)[:3]
    if out is None:
        out = _convert.empty(q_latent, _shape(q_latent), _convert.tensor_dtype(op, "q_latent", q_latent))
    if return_lse and lse is None:
        lse = _convert.empty(q_latent, (total_q, heads), "f32")
    if workspace is None:
        _need_dims(op, "page_table", page_table, 2)
        _need_dims(op, "cache", cache, 4)
        capacity = _shape(page_table)[1] * _shape(cache)[1]
        n = attention_mla_workspace_floats(total_q, heads, r, capacity)
        if n > 0:
            workspace = _convert.empty(q_latent, (n,), "f32")
    c = _Call(op, stream)
    c.run(c.tensor("q_latent", q_latent), c.tensor("q_rope", q_rope),
          c.tensor("cu_seqlens_q", cu_seqlens_q), c.tensor("cache", cache),
          c.tensor("page_table", page_table), c.tensor("kv_lens", kv_lens),
          ctypes.c_int(1 if causal else 0), ctypes.c_float(softmax_scale),
          c.tensor("out", out, writable=True), c.optional("lse", lse, writable=True),
          c.optional("workspace", workspace, writable=True))
    return (out, lse) if return_lse else out


def kv_append(k, v, slots, k_pages, v_pages, *, stream=None):
    """Writes token i's keys and values into slot slots[i] of a paged KV cache (page
    slots[i] // page_size, offset slots[i] % page_size), in place.
    k, v [n, kv_heads, head_dim] f32/f16/bf16, last dim dense (views into a QKV output are fine);
    slots [n] i32, each in [0, num_pages * page_size) (checked on the CPU only); k_pages, v_pages
    [num_pages, page_size, kv_heads, head_dim] k's dtype, contiguous. Returns (k_pages, v_pages)."""
    c = _Call("kv_append", stream)
    c.run(c.tensor("k", k), c.tensor("v", v), c.tensor("slots", slots),
          c.tensor("k_pages", k_pages, writable=True), c.tensor("v_pages", v_pages, writable=True))
    return k_pages, v_pages


def qk_norm_rope_kv_append(q, k, v, positions, slots, k_pages, v_pages, *, q_norm=None,
                           k_norm=None, eps=1e-6, config=None, stream=None):
    """A decode step's per-head RMSNorm of q and k (q_norm, k_norm [head_dim], both or neither),
    RoPE (config: a RopeConfig, None = defaults) and kv_append, in place (see ops.h; one kernel on
    CUDA, bit-identical to the three ops). q [n, q_heads, head_dim], k, v [n, kv_heads, head_dim];
    positions [n] i32/i64; slots, k_pages, v_pages as kv_append. Returns (q, k)."""
    cfg = (config or RopeConfig()).to_c()
    c = _Call("qk_norm_rope_kv_append", stream)
    c.run(c.tensor("q", q, writable=True), c.tensor("k", k, writable=True), c.tensor("v", v),
          c.optional("q_norm", q_norm), c.optional("k_norm", k_norm), ctypes.c_float(eps),
          c.tensor("positions", positions), ctypes.byref(cfg), c.tensor("slots", slots),
          c.tensor("k_pages", k_pages, writable=True), c.tensor("v_pages", v_pages, writable=True))
    return q, k


def sample_tokens_workspace_bytes(rows, vocab):
    """Bytes of the u8 workspace sample_tokens needs for [rows, vocab] logits (0 today)."""
    n = int(function("braid_sample_tokens_workspace_bytes")(ctypes.c_int64(int(rows)),
                                                            ctypes.c_int64(int(vocab))))
    if n < 0:
        check(Status.INVALID_ARGUMENT)  # raises with the library's message
    return n


def sample_tokens(logits, temperature, top_k, top_p, min_p, seeds, steps, tokens=None, *,
                  workspace=None, stream=None):
    """One token per row of logits, with each row's own temperature, top-k, top-p, min-p and
    seeded counter-based draw (the serving engine's sampler without penalties; the exact rules are
    sample_tokens' in include/braid/ops.h). A row's token depends only on its own logits and
    parameters, and CUDA gives the CPU's token.
    logits [m, V] float32 rows; temperature [m] float32 (< 1e-5: greedy, lowest index of the
    maximum, NaN never wins); top_k [m] int32 (0 or -1: off); top_p [m] float32 in (0, 1] (1: off);
    min_p [m] float32 in [0, 1] (relative to the most likely token); seeds, steps [m] int64 (the
    draw is a function of (seed, step) alone); tokens [m] int32, allocated when None. No host
    synchronisation on CUDA (graph-capturable) once the workspace (sample_tokens_workspace_bytes;
    0 bytes today) is passed or not needed. Returns tokens."""
    op = "sample_tokens"
    if tokens is None:
        _need_dims(op, "logits", logits, 1)
        tokens = _convert.empty(logits, (_shape(logits)[0],), "i32")
    if workspace is None and _convert.is_torch(logits) and logits.is_cuda and len(logits.shape) == 2:
        size = sample_tokens_workspace_bytes(*_shape(logits))
        if size > 0:
            workspace = _convert.empty(logits, (size,), "u8")
    c = _Call(op, stream)
    c.run(c.tensor("logits", logits), c.tensor("temperature", temperature),
          c.tensor("top_k", top_k), c.tensor("top_p", top_p), c.tensor("min_p", min_p),
          c.tensor("seeds", seeds), c.tensor("steps", steps),
          c.optional("workspace", workspace, writable=True),
          c.tensor("tokens", tokens, writable=True))
    return tokens


def _last_offset(op, arg, cu_seqlens):
    """cu_seqlens[-1], read on the host (a CUDA tensor is copied: a device synchronisation)."""
    _need_dims(op, arg, cu_seqlens, 1)
    if len(cu_seqlens.shape) != 1 or cu_seqlens.shape[0] == 0:
        return 0  # a malformed argument: the library's check names it
    return int(cu_seqlens[-1].item()) if _convert.is_torch(cu_seqlens) else int(cu_seqlens[-1])


def paged_kv_gather(k_pages, v_pages, page_table, kv_lens, cu_seqlens_kv, k_out=None, v_out=None,
                    *, stream=None):
    """Copies the first kv_lens[b] tokens of each sequence b of a paged KV cache, in order, into
    contiguous ragged K and V (what attention_prefill takes): rows cu_seqlens_kv[b] ..
    cu_seqlens_kv[b+1] of k_out / v_out are sequence b's tokens (token t: page
    page_table[b, t // page_size], offset t % page_size); rows past cu_seqlens_kv[-1] are left as
    they are.
    k_pages, v_pages [num_pages, page_size, kv_heads, head_dim] f32/f16/bf16, contiguous;
    page_table [batch, max_pages] i32; kv_lens [batch] i32; cu_seqlens_kv [batch+1] i32, 0 first,
    cu[b+1] - cu[b] = kv_lens[b]; k_out, v_out [total_kv >= cu_seqlens_kv[-1], kv_heads, head_dim]
    k_pages' dtype, contiguous. An output left None is allocated with cu_seqlens_kv[-1] rows, read
    on the host (for a CUDA tensor, a device synchronisation; pass the outputs to avoid it).
    Returns (k_out, v_out)."""
    op = "paged_kv_gather"
    if k_out is None or v_out is None:
        _need_dims(op, "kv.k_pages", k_pages, 4)
        shape = (_last_offset(op, "cu_seqlens_kv", cu_seqlens_kv),) + _shape(k_pages)[2:4]
        dtype = _convert.tensor_dtype(op, "kv.k_pages", k_pages)
        if k_out is None:
            k_out = _convert.empty(k_pages, shape, dtype)
        if v_out is None:
            v_out = _convert.empty(k_pages, shape, dtype)
    c = _Call(op, stream)
    c.run(c.tensor("kv.k_pages", k_pages), c.tensor("kv.v_pages", v_pages),
          c.tensor("kv.page_table", page_table), c.tensor("kv.kv_lens", kv_lens),
          c.tensor("cu_seqlens_kv", cu_seqlens_kv), c.tensor("k_out", k_out, writable=True),
          c.tensor("v_out", v_out, writable=True))
    return k_out, v_out


def moe_route_topk_softmax(logits, k, renormalize, topk_weights=None, topk_ids=None, *,
                           stream=None):
    """MoE router: softmax over the experts in fp32, then the k experts with the largest logits,
    in descending order (ties: lower index first; NaN ranks last). The weights are the chosen
    probabilities, divided by their sum when renormalize (Qwen3-MoE's norm_topk_prob; Mixtral
    always renormalises).
    logits [T, E] f32/f16/bf16, 1 <= E <= 512; 1 <= k <= min(16, E); topk_weights [T, k] f32
    and topk_ids [T, k] i32 (each allocated when None). Returns (topk_weights, topk_ids)."""
    if topk_weights is None or topk_ids is None:
        _need_dims("moe_route_topk_softmax", "logits", logits, 1)
        shape = (_shape(logits)[0], int(k))
        if topk_weights is None:
            topk_weights = _convert.empty(logits, shape, "f32")
        if topk_ids is None:
            topk_ids = _convert.empty(logits, shape, "i32")
    c = _Call("moe_route_topk_softmax", stream)
    c.run(c.tensor("logits", logits), ctypes.c_int(int(k)), ctypes.c_int(1 if renormalize else 0),
          c.tensor("topk_weights", topk_weights, writable=True),
          c.tensor("topk_ids", topk_ids, writable=True))
    return topk_weights, topk_ids


def moe_route_grouped(logits, bias, n_group, topk_group, k, routed_scaling_factor,
                      topk_weights=None, topk_ids=None, *, stream=None):
    """DeepSeek-V3's grouped sigmoid router: s = sigmoid(logits) in fp32, b = s + bias; the
    experts form n_group contiguous groups, each scored by the sum of its two largest b; the
    topk_group best groups are kept and the k experts with the largest b among them only are
    chosen, in descending order of b (ties: lower index first; a NaN score counts as -inf). The
    weights are the chosen (unbiased) s over (their sum + 1e-20), times routed_scaling_factor.
    (transformers scores the dropped groups' experts 0.0 instead of excluding them: the same
    unless fewer than k kept experts have a positive b.)
    logits [T, E] f32/f16/bf16, 1 <= E <= 512; bias [E] f32/bf16 (e_score_correction_bias);
    n_group divides E; 1 <= topk_group <= n_group; 1 <= k <= min(16, topk_group * E / n_group);
    topk_weights [T, k] f32 and topk_ids [T, k] i32 (each allocated when None).
    Returns (topk_weights, topk_ids)."""
    if topk_weights is None or topk_ids is None:
        _need_dims("moe_route_grouped", "logits", logits, 1)
        shape = (_shape(logits)[0], int(k))
        if topk_weights is None:
            topk_weights = _convert.empty(logits, shape, "f32")
        if topk_ids is None:
            topk_ids = _convert.empty(logits, shape, "i32")
    c = _Call("moe_route_grouped", stream)
    c.run(c.tensor("logits", logits), c.tensor("bias", bias), ctypes.c_int(int(n_group)),
          ctypes.c_int(int(topk_group)), ctypes.c_int(int(k)),
          ctypes.c_float(float(routed_scaling_factor)),
          c.tensor("topk_weights", topk_weights, writable=True),
          c.tensor("topk_ids", topk_ids, writable=True))
    return topk_weights, topk_ids


def moe_route_softmax_grouped(logits, n_group, topk_group, k, renormalize,
                              routed_scaling_factor, topk_weights=None, topk_ids=None, *,
                              stream=None):
    """DeepSeek-V2's router: p = softmax(logits) in fp32 (moe_route_topk_softmax's p, the same
    bits); the experts form n_group contiguous groups, each scored by its largest p; the
    topk_group best groups are kept and the k experts with the largest p among them only are
    chosen, in descending order of p (ties: lower index first; a NaN p ranks last). The weights
    are the chosen p, divided by their sum when renormalize, times routed_scaling_factor.
    topk_method "greedy" is n_group = topk_group = 1; "group_limited_greedy" uses the groups.
    logits [T, E] f32/f16/bf16, 1 <= E <= 512; n_group divides E; 1 <= topk_group <= n_group;
    1 <= k <= min(16, topk_group * E / n_group); routed_scaling_factor finite; topk_weights
    [T, k] f32 and topk_ids [T, k] i32 (each allocated when None).
    Returns (topk_weights, topk_ids)."""
    if topk_weights is None or topk_ids is None:
        _need_dims("moe_route_softmax_grouped", "logits", logits, 1)
        shape = (_shape(logits)[0], int(k))
        if topk_weights is None:
            topk_weights = _convert.empty(logits, shape, "f32")
        if topk_ids is None:
            topk_ids = _convert.empty(logits, shape, "i32")
    c = _Call("moe_route_softmax_grouped", stream)
    c.run(c.tensor("logits", logits), ctypes.c_int(int(n_group)), ctypes.c_int(int(topk_group)),
          ctypes.c_int(int(k)), ctypes.c_int(1 if renormalize else 0),
          ctypes.c_float(float(routed_scaling_factor)),
          c.tensor("topk_weights", topk_weights, writable=True),
          c.tensor("topk_ids", topk_ids, writable=True))
    return topk_weights, topk_ids


def moe_permute_workspace_size(pairs, num_experts):
    """Elements of the i32 workspace moe_permute needs for `pairs` (T * k) pairs."""
    return int(function("braid_moe_permute_workspace_size")(ctypes.c_int64(int(pairs)),
                                                           ctypes.c_int(int(num_experts))))


def moe_permute(topk_ids, num_experts, expert_offsets=None, sorted_pairs=None, pair_rows=None,
                workspace=None, *, stream=None):
    """The routing's (token, slot) pairs grouped by expert, deterministically (no host
    synchronisation on CUDA): pair p = t * k + j goes to expert topk_ids[t, j]; expert e's pairs
    take rows [expert_offsets[e], expert_offsets[e + 1]) in ascending pair order; sorted_pairs[r]
    is the pair in row r and pair_rows[p] its inverse. On CUDA an id outside [0, E) is placed past
    expert_offsets[E] with pair_rows = -1 (an error on the CPU).
    topk_ids [T, k] i32; expert_offsets [E + 1], sorted_pairs and pair_rows [T * k] i32, and the
    i32 workspace (moe_permute_workspace_size elements) are allocated when None.
    Returns (expert_offsets, sorted_pairs, pair_rows)."""
    _need_dims("moe_permute", "topk_ids", topk_ids, 2)
    pairs = _shape(topk_ids)[0] * _shape(topk_ids)[1]
    if expert_offsets is None:
        expert_offsets = _convert.empty(topk_ids, (int(num_experts) + 1,), "i32")
    if sorted_pairs is None:
        sorted_pairs = _convert.empty(topk_ids, (pairs,), "i32")
    if pair_rows is None:
        pair_rows = _convert.empty(topk_ids, (pairs,), "i32")
    if workspace is None:
        workspace = _convert.empty(topk_ids, (moe_permute_workspace_size(pairs, num_experts),), "i32")
    c = _Call("moe_permute", stream)
    c.run(c.tensor("topk_ids", topk_ids), ctypes.c_int(int(num_experts)),
          c.tensor("expert_offsets", expert_offsets, writable=True),
          c.tensor("sorted_pairs", sorted_pairs, writable=True),
          c.tensor("pair_rows", pair_rows, writable=True),
          c.tensor("workspace", workspace, writable=True))
    return expert_offsets, sorted_pairs, pair_rows


def moe_gather(x, sorted_pairs, k, xs=None, *, stream=None):
    """Token rows in permuted order: xs[r] = x[sorted_pairs[r] // k].
    x [T, H] f32/f16/bf16; sorted_pairs [T * k] i32 from moe_permute; xs [T * k, H] x's dtype
    (allocated when None). Returns xs."""
    if xs is None:
        _need_dims("moe_gather", "x", x, 2)
        xs = _convert.empty(x, (_shape(x)[0] * int(k), _shape(x)[1]),
                            _convert.tensor_dtype("moe_gather", "x", x))
    c = _Call("moe_gather", stream)
    c.run(c.tensor("x", x), c.tensor("sorted_pairs", sorted_pairs), ctypes.c_int(int(k)),
          c.tensor("xs", xs, writable=True))
    return xs


def moe_combine(ys, pair_rows, topk_weights, out=None, *, stream=None):
    """out[t] = sum over j of topk_weights[t, j] * ys[pair_rows[t * k + j]] in fp32, in j order,
    rounded once; pairs with pair_rows < 0 contribute nothing.
    ys [T * k, H] f32/f16/bf16; pair_rows [T * k] i32; topk_weights [T, k] f32; out [T, H]
    f32/f16/bf16 (ys's dtype, allocated when None). Returns out."""
    if out is None:
        _need_dims("moe_combine", "ys", ys, 2)
        _need_dims("moe_combine", "topk_weights", topk_weights, 2)
        out = _convert.empty(ys, (_shape(topk_weights)[0], _shape(ys)[1]),
                             _convert.tensor_dtype("moe_combine", "ys", ys))
    c = _Call("moe_combine", stream)
    c.run(c.tensor("ys", ys), c.tensor("pair_rows", pair_rows),
          c.tensor("topk_weights", topk_weights), c.tensor("out", out, writable=True))
    return out


_MOE_ACTIVATIONS = {"none": 0, "swiglu": 1}


def moe_grouped_gemm(x, w, expert_offsets, activation="none", y=None, *, stream=None):
    """The expert GEMMs of a permuted batch: rows [expert_offsets[e], expert_offsets[e + 1]) of x
    belong to expert e. activation "none": y[r] = x[r] @ w[e]^T (w [E, N, K], y [M, N]);
    "swiglu": y[r] = silu(x[r] @ gate^T) * (x[r] @ up^T) with gate = w[e][:I], up = w[e][I:]
    (w [E, 2I, K], y [M, I]; g, u and y rounded to x's dtype). x [M, K] f32/f16/bf16; w x's
    dtype, contiguous; expert_offsets [E + 1] i32 as moe_permute writes them (read on the device
    on CUDA: no host synchronisation); y allocated when None (rows past offsets[E] are left as
    they are). Returns y."""
    if activation not in _MOE_ACTIVATIONS:
        raise ValueError(f"moe_grouped_gemm: activation must be one of {sorted(_MOE_ACTIVATIONS)}, "
                         f"got {activation!r}")
    if y is None:
        _need_dims("moe_grouped_gemm", "x", x, 2)
        _need_dims("moe_grouped_gemm", "w", w, 3)
        cols = _shape(w)[1] // 2 if activation == "swiglu" else _shape(w)[1]
        y = _convert.empty(x, (_shape(x)[0], cols), _convert.tensor_dtype("moe_grouped_gemm", "x", x))
    c = _Call("moe_grouped_gemm", stream)
    c.run(c.tensor("x", x), c.tensor("w", w), c.tensor("expert_offsets", expert_offsets),
          ctypes.c_int(_MOE_ACTIVATIONS[activation]), c.tensor("y", y, writable=True))
    return y


# ---- FP8 block scale -----------------------------------------------------------------------
# fp8 arguments are torch float8_e4m3fn tensors, or uint8 arrays/tensors holding e4m3 codes
# (numpy has no fp8 dtype: pass a uint8 view, e.g. torch_fp8.view(torch.uint8).numpy()). Outputs
# the functions allocate are float8_e4m3fn for torch inputs and uint8 for numpy ones.

_FP8_BLOCK = 128


def _fp8(c, arg, value, writable=False):
    d = _convert.Descriptor(c.op, arg, value, writable, u8_as="f8e4m3")
    c.descriptors.append(d)
    return d.pointer()


def _fp8_empty(like, shape):
    return _convert.empty(like, shape, "f8e4m3" if _convert.is_torch(like) else "u8")


def moe_fp8_quantize(x, q=None, q_scale=None, *, terms=1, stream=None):
    """x split into fp8 block-scaled terms whose sum approximates it (DeepSeek-V3's activation
    format): term 0 quantizes x, term t what the terms before leave (fp32); per row and 128
    columns s = amax / 448 (1 when amax is 0), q = e4m3(v / s) rounded to nearest even and
    saturated. x [M, K] float32/bfloat16 with K % 128 == 0; q [M, terms * K] fp8 (term t in
    columns [t K, t K + K)); q_scale [terms * K / 128, M] float32 (transposed: scale[b, r] is row
    r's block b). q and q_scale are allocated when None, with `terms` (1..3) terms; otherwise
    terms = q.shape[1] / K. Returns (q, q_scale)."""
    op = "moe_fp8_quantize"
    _need_dims(op, "x", x, 2)
    rows, k = _shape(x)
    if q is None:
        q = _fp8_empty(x, (rows, int(terms) * k))
    else:
        _need_dims(op, "q", q, 2)
    if q_scale is None:
        q_scale = _convert.empty(x, (_shape(q)[1] // _FP8_BLOCK, rows), "f32")
    c = _Call(op, stream)
    c.run(c.tensor("x", x), _fp8(c, "q", q, writable=True),
          c.tensor("q_scale", q_scale, writable=True))
    return q, q_scale


def moe_gather_fp8(x, x_scale, sorted_pairs, k, xs=None, xs_scale=None, *, stream=None):
    """moe_gather for fp8 rows and their scales: xs[r] = x[sorted_pairs[r] // k] and
    xs_scale[b, r] = x_scale[b, sorted_pairs[r] // k]. x [T, K] fp8 (K % 128 == 0); x_scale
    [K / 128, T] float32; sorted_pairs [T * k] int32 from moe_permute; xs [T * k, K] fp8 and
    xs_scale [K / 128, T * k] float32 are allocated when None. Returns (xs, xs_scale)."""
    op = "moe_gather_fp8"
    _need_dims(op, "x", x, 2)
    pairs, width = _shape(x)[0] * int(k), _shape(x)[1]
    if xs is None:
        xs = _fp8_empty(x, (pairs, width))
    if xs_scale is None:
        xs_scale = _convert.empty(x_scale, (width // _FP8_BLOCK, pairs), "f32")
    c = _Call(op, stream)
    c.run(_fp8(c, "x", x), c.tensor("x_scale", x_scale), c.tensor("sorted_pairs", sorted_pairs),
          ctypes.c_int(int(k)), _fp8(c, "xs", xs, writable=True),
          c.tensor("xs_scale", xs_scale, writable=True))
    return xs, xs_scale


_MOE_FP8_ACTIVATIONS = {"none": 0, "swiglu": 1, "swiglu_gate_last": 2}


def moe_grouped_gemm_fp8(x, x_scale, w, w_scale, expert_offsets, activation="none", y=None,
                         y_scale=None, *, stream=None):
    """moe_grouped_gemm on fp8 block-scaled operands with fp32 sums: rows [expert_offsets[e],
    expert_offsets[e + 1]) of x belong to expert e, and x may hold R (1..3) terms side by side
    (as moe_fp8_quantize writes them): G = (sum_t dequant(x_t)) @ dequant(w[e])^T.
    activation "none": y = G (w [E, N, K], y [M, N] float32/bfloat16); "swiglu":
    y = silu(G[:, :I]) * G[:, I:]; "swiglu_gate_last": y = silu(G[:, I:]) * G[:, :I] (DeepSeek's
    order: I up rows, then I gate rows); for both w [E, 2I, K] and y [M, I] float32, or y
    [M, R' I] fp8 with y_scale [R' I / 128, M] float32 (h quantized into R' terms as
    moe_fp8_quantize does it). x [M, R K] fp8; x_scale [R K / 128, M] float32; w fp8 and w_scale
    [E, N / 128, K / 128] float32, contiguous; K, N, I multiples of 128; expert_offsets [E + 1]
    int32 as moe_permute writes them (read on the device on CUDA). y is allocated as float32 when
    None; rows past expert_offsets[E] are left as they are. Returns y."""
    op = "moe_grouped_gemm_fp8"
    if activation not in _MOE_FP8_ACTIVATIONS:
        raise ValueError(f"{op}: activation must be one of {sorted(_MOE_FP8_ACTIVATIONS)}, "
                         f"got {activation!r}")
    if y is None:
        _need_dims(op, "x", x, 2)
        _need_dims(op, "w", w, 3)
        cols = _shape(w)[1] if activation == "none" else _shape(w)[1] // 2
        y = _convert.empty(x_scale, (_shape(x)[0], cols), "f32")
    c = _Call(op, stream)
    c.run(_fp8(c, "x", x), c.tensor("x_scale", x_scale), _fp8(c, "w", w),
          c.tensor("w_scale", w_scale), c.tensor("expert_offsets", expert_offsets),
          ctypes.c_int(_MOE_FP8_ACTIVATIONS[activation]), _fp8(c, "y", y, writable=True),
          c.optional("y_scale", y_scale, writable=True))
    return y


def moe_experts(x, topk_weights, topk_ids, gate_up, down, workspace=None, out=None, *,
                gate_up_scale=None, down_scale=None, shared_gate_up=None, shared_down=None,
                shared_gate_up_scale=None, shared_down_scale=None, residual=None, stream=None):
    """Experts with a SwiGLU MLP each, combined with the routing weights: for each token t,
    out[t] = sum_j topk_weights[t, j] * down[e] @ (silu(gate[e] @ x[t]) * (up[e] @ x[t])),
    e = topk_ids[t, j] (g, u and h rounded to x's dtype, as the dense MLP rounds them).
    x [T, H] f32/f16/bf16; topk_weights [T, k] f32; topk_ids [T, k] i32, each in [0, E)
    (an error on the CPU; on CUDA a bad id contributes nothing); gate_up [E, 2*I, H] (per expert
    I gate rows then I up rows); down [E, H, I]; out [T, H] x's dtype (may be x, or the
    residual below). workspace (f32 scratch, [T * (k + S / I), I] with S = 0 without shared
    experts) and out are allocated when None (a preallocated workspace keeps the call free of
    allocations, e.g. for CUDA-graph capture). Returns out.

    The rest, all optional (include/braid/ops.h, moe_experts, states the arithmetic):
    - fp8 experts: gate_up and down hold e4m3 codes (torch float8_e4m3fn, or uint8 arrays) and
      gate_up_scale [E, 2*I/128, H/128], down_scale [E, H/128, I/128] float32 their 128 x 128
      block scales (a weight is its code's value times its block's scale); both or neither.
    - shared experts (DeepSeek's), run on every token: shared_gate_up [2*S, H] and shared_down
      [H, S], S a multiple of I, in the routed experts' format (with shared_*_scale when fp8,
      [2*S/128, H/128] and [H/128, S/128]).
    - residual [T, H] x's dtype: out = residual + (routed + shared), each sum rounded to x's
      dtype (a decoder layer's MoE block and its residual add in one call)."""
    op = "moe_experts"
    fp8 = gate_up_scale is not None or down_scale is not None
    extended = fp8 or residual is not None or any(
        v is not None for v in (shared_gate_up, shared_down, shared_gate_up_scale,
                                shared_down_scale))
    if workspace is None:
        _need_dims(op, "topk_ids", topk_ids, 2)
        _need_dims(op, "down", down, 3)
        inter = _shape(down)[2]
        rows = _shape(topk_ids)[0] * _shape(topk_ids)[1]
        if shared_down is not None:
            _need_dims(op, "shared_down", shared_down, 2)
            rows += _shape(topk_ids)[0] * (_shape(shared_down)[1] // max(inter, 1))
        workspace = _convert.empty(x, (rows, inter), "f32")
    if out is None:
        _need_dims(op, "x", x, 0)
        out = _convert.empty(x, _shape(x), _convert.tensor_dtype(op, "x", x))
    c = _Call(op, stream, "braid_moe_experts_ex" if extended else None)
    routed = (c.tensor("x", x), c.tensor("topk_weights", topk_weights),
              c.tensor("topk_ids", topk_ids))
    if not extended:
        c.run(*routed, c.tensor("gate_up", gate_up), c.tensor("down", down),
              c.tensor("workspace", workspace, writable=True), c.tensor("out", out, writable=True))
        return out

    def weight(arg, value, is_fp8):  # fp8 codes may come as uint8 arrays
        if value is None:
            return None
        return _fp8(c, arg, value) if is_fp8 else c.tensor(arg, value)

    c.run(*routed, weight("gate_up", gate_up, fp8), c.optional("gate_up_scale", gate_up_scale),
          weight("down", down, fp8), c.optional("down_scale", down_scale),
          weight("shared_gate_up", shared_gate_up, fp8),
          c.optional("shared_gate_up_scale", shared_gate_up_scale),
          weight("shared_down", shared_down, fp8),
          c.optional("shared_down_scale", shared_down_scale), c.optional("residual", residual),
          c.tensor("workspace", workspace, writable=True), c.tensor("out", out, writable=True))
    return out


def moe_fp8_block_scale_workspace_bytes(tokens, hidden, intermediate, local_experts, *, n_group=8,
                                        topk_group=4, top_k=8, intermediate_terms=3):
    """Bytes of the u8 workspace moe_fp8_block_scale needs on CUDA for these sizes."""
    n = int(function("braid_moe_fp8_block_scale_workspace_bytes")(
        ctypes.c_int64(int(tokens)), ctypes.c_int64(int(hidden)), ctypes.c_int64(int(intermediate)),
        ctypes.c_int64(int(local_experts)), ctypes.c_int(int(n_group)),
        ctypes.c_int(int(topk_group)), ctypes.c_int(int(top_k)),
        ctypes.c_int(int(intermediate_terms))))
    if n < 0:
        check(Status.INVALID_ARGUMENT)  # raises with the library's message
    return n


def moe_fp8_block_scale(routing_logits, routing_bias, hidden_states, hidden_states_scale,
                        gemm1_weights, gemm1_weights_scale, gemm2_weights, gemm2_weights_scale,
                        local_expert_offset, routed_scaling_factor, *, n_group=8, topk_group=4,
                        top_k=8, intermediate_terms=3, workspace=None, out=None, stream=None):
    """A DeepSeek-V3 MoE layer on fp8 block-scaled weights (flashinfer-bench's
    moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048, any sizes): routing as
    moe_route_grouped over the E_global experts; for each token and each chosen expert among the
    E local ones [local_expert_offset, local_expert_offset + E):
    G1 = A @ W13[e]^T, C = silu(G1[I:]) * G1[:I], O = C @ W2[e]^T (A, W13, W2 dequantized: fp8
    times one fp32 scale per 128 activation values or 128 x 128 weight block), and
    out[t] = bf16(sum of the routing weight * O).
    routing_logits [T, E_global] float32; routing_bias [E_global] bfloat16/float32;
    hidden_states [T, H] float8_e4m3fn; hidden_states_scale [H / 128, T] float32;
    gemm1_weights [E, 2I, H] float8_e4m3fn (I up rows, then I gate rows) and
    gemm1_weights_scale [E, 2I / 128, H / 128] float32; gemm2_weights [E, H, I] float8_e4m3fn and
    gemm2_weights_scale [E, H / 128, I / 128] float32; H and I multiples of 128.
    On CUDA C reaches the second GEMM as `intermediate_terms` (1..3) fp8 terms (3: close to
    fp32; 1: the usual fp8 requantisation, faster); the u8 workspace
    (moe_fp8_block_scale_workspace_bytes) is allocated when None (pass one to keep the call free
    of allocations, e.g. for CUDA-graph capture). CPU tensors take the fp32 reference.
    out [T, H] bfloat16 is allocated when None. Returns out."""
    op = "moe_fp8_block_scale"
    _need_dims(op, "hidden_states", hidden_states, 2)
    _need_dims(op, "gemm1_weights", gemm1_weights, 3)
    tokens, hidden = _shape(hidden_states)
    if out is None:
        out = _convert.empty(hidden_states, (tokens, hidden), "bf16")
    on_cuda = _convert.is_torch(hidden_states) and hidden_states.is_cuda
    if workspace is None and on_cuda:
        experts, rows = _shape(gemm1_weights)[0], _shape(gemm1_weights)[1]
        size = moe_fp8_block_scale_workspace_bytes(
            tokens, hidden, rows // 2, experts, n_group=n_group, topk_group=topk_group,
            top_k=top_k, intermediate_terms=intermediate_terms)
        workspace = _convert.empty(hidden_states, (size,), "u8")
    c = _Call(op, stream)
    c.run(c.tensor("routing_logits", routing_logits), c.tensor("routing_bias", routing_bias),
          c.tensor("hidden_states", hidden_states),
          c.tensor("hidden_states_scale", hidden_states_scale),
          c.tensor("gemm1_weights", gemm1_weights),
          c.tensor("gemm1_weights_scale", gemm1_weights_scale),
          c.tensor("gemm2_weights", gemm2_weights),
          c.tensor("gemm2_weights_scale", gemm2_weights_scale),
          ctypes.c_int(int(local_expert_offset)), ctypes.c_float(float(routed_scaling_factor)),
          ctypes.c_int(int(n_group)), ctypes.c_int(int(topk_group)), ctypes.c_int(int(top_k)),
          ctypes.c_int(int(intermediate_terms)),
          c.optional("workspace", workspace, writable=True), c.tensor("output", out, writable=True))
    return out
