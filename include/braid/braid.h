/* braidinfer C API: the ops of include/braid/ops.h behind a plain C ABI, for FFI (ctypes, cffi,
 * Rust, ...). Valid C99 and C++.
 *
 * Tensors are passed as braid_tensor descriptors laid out exactly like DLPack's DLTensor, so a
 * DLTensor* can be passed where a braid_tensor* is expected. The library never owns or copies
 * tensor memory: every op reads its inputs and writes its caller-provided outputs in place, on
 * the device the tensors live on (all tensors of one call on one device).
 *
 * Every op returns BRAID_OK or an error status; on error, braid_last_error_message() gives the
 * full message ("<op>: argument '<arg>': expected ..., got ..."). No C++ exception ever crosses
 * this boundary. CUDA ops are asynchronous on `stream` (a cudaStream_t; NULL = the legacy
 * default stream); `stream` is ignored for CPU tensors. The detailed contract of each op (shapes,
 * dtypes, rounding) is the one of the same-named function in include/braid/ops.h.
 */
#ifndef BRAID_BRAID_H_
#define BRAID_BRAID_H_

#include <stdint.h>

#if defined(__GNUC__)
#define BRAID_API __attribute__((visibility("default")))
#else
#define BRAID_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* C++ reads a C enum as int, like C does: without a fixed type, a value outside the enumerators
   (an unknown status a C caller passes to braid_status_string) is undefined behaviour in C++. */
#ifdef __cplusplus
#define BRAID_ENUM_INT : int
#else
#define BRAID_ENUM_INT
#endif

/* ---- status: numbered like braid::ErrorKind (include/braid/error.h) ---- */
typedef enum braid_status BRAID_ENUM_INT {
  BRAID_OK = 0,
  BRAID_ERR_INVALID_ARGUMENT = 1, /* a value out of range, inconsistent sizes, NULL descriptor */
  BRAID_ERR_SHAPE = 2,
  BRAID_ERR_DTYPE = 3,
  BRAID_ERR_DEVICE = 4,
  BRAID_ERR_CUDA = 5,
  BRAID_ERR_CUBLAS = 6,
  BRAID_ERR_OUT_OF_MEMORY = 7,
  BRAID_ERR_UNSUPPORTED = 8, /* a valid request this build or GPU cannot serve */
  BRAID_ERR_IO = 9,
  BRAID_ERR_INTERNAL = 10
} braid_status;

/* ---- tensor descriptor: DLPack's DLTensor, field for field ---- */

/* braid_device.device_type: DLPack's DLDeviceType codes. */
enum {
  BRAID_DEVICE_CPU = 1,  /* kDLCPU */
  BRAID_DEVICE_CUDA = 2  /* kDLCUDA; device_id = the CUDA ordinal */
};

typedef struct braid_device {
  int32_t device_type;
  int32_t device_id;
} braid_device;

/* braid_dtype.code: DLPack's DLDataTypeCode values. Accepted (code, bits), lanes = 1:
 *   INT 32 (i32), INT 64 (i64), UINT 8 (u8), FLOAT 16 (f16), FLOAT 32 (f32), BFLOAT 16 (bf16),
 *   FLOAT8_E4M3FN 8 (OCP e4m3, no infinities), FLOAT8_E5M2 8. */
enum {
  BRAID_DTYPE_INT = 0,            /* kDLInt */
  BRAID_DTYPE_UINT = 1,           /* kDLUInt */
  BRAID_DTYPE_FLOAT = 2,          /* kDLFloat */
  BRAID_DTYPE_BFLOAT = 4,         /* kDLBfloat */
  BRAID_DTYPE_FLOAT8_E4M3FN = 10, /* kDLFloat8_e4m3fn (DLPack 1.1) */
  BRAID_DTYPE_FLOAT8_E5M2 = 12    /* kDLFloat8_e5m2 (DLPack 1.1) */
};

typedef struct braid_dtype {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} braid_dtype;

#define BRAID_MAX_DIMS 6

typedef struct braid_tensor {
  void* data;           /* element 0 is at (char*)data + byte_offset */
  braid_device device;
  int32_t ndim;         /* 0 .. BRAID_MAX_DIMS */
  braid_dtype dtype;
  int64_t* shape;       /* ndim sizes */
  int64_t* strides;     /* ndim strides in elements, or NULL for contiguous (row-major) */
  uint64_t byte_offset;
} braid_tensor;

/* ---- library ---- */

/* A static, human-readable name for a status ("BRAID_ERR_SHAPE"); "unknown status" otherwise. */
BRAID_API const char* braid_status_string(braid_status status);

/* The full message of the last failed call on this thread ("" if none has failed). Valid until
 * the next failing call on the same thread; successful calls leave it unchanged. */
BRAID_API const char* braid_last_error_message(void);

/* The library version, "major.minor.patch". */
BRAID_API const char* braid_version(void);

/* Number of CUDA devices visible; 0 without a driver or GPU, or in a CPU-only build. */
BRAID_API int braid_cuda_device_count(void);

/* ---- ops (see include/braid/ops.h for the full contracts) ----
 * "rows": the last dimension is dense and the leading ones fold into one row index with a single
 * row stride. Floating types: f32, f16, bf16; arithmetic in fp32. */

/* out[i, :] = table[ids[i], :].
 * ids [n] i32/i64; table [vocab, hidden] float, rows; out [n, hidden] table's dtype. An id out of
 * range is an error on the CPU; on CUDA its row is written as zeros. */
BRAID_API braid_status braid_embedding(const braid_tensor* ids, const braid_tensor* table,
                                       const braid_tensor* out, void* stream);

/* out = to_dtype(weight * to_dtype(x * rsqrt(mean(x^2) + eps))) (Hugging Face rounding).
 * x [..., d] rows, float; weight [d] x's dtype, contiguous; out like x (may alias x). */
BRAID_API braid_status braid_rms_norm(const braid_tensor* x, const braid_tensor* weight,
                                      float eps, const braid_tensor* out, void* stream);

/* residual <- to_dtype(x + residual) (in place); out <- rms_norm(residual, weight, eps).
 * x, residual, out: same shape and dtype, rows; out may alias x; weight [d]. */
BRAID_API braid_status braid_add_rms_norm(const braid_tensor* x, const braid_tensor* residual,
                                          const braid_tensor* weight, float eps,
                                          const braid_tensor* out, void* stream);

/* Rotary embedding configuration: mirrors braid::ops::RopeConfig. Fill it with
 * braid_rope_config_init() and change what the checkpoint's config.json sets. */
enum {
  BRAID_ROPE_NONE = 0,
  BRAID_ROPE_LLAMA3 = 1,
  BRAID_ROPE_YARN = 2
};

typedef struct braid_rope_config {
  float theta;                   /* rope_theta */
  int32_t rotary_dim;            /* 0: the whole head_dim */
  int32_t scaling;               /* BRAID_ROPE_NONE / _LLAMA3 / _YARN */
  float factor;                  /* llama3, yarn */
  float low_freq_factor;         /* llama3 */
  float high_freq_factor;        /* llama3 */
  int32_t original_max_position; /* llama3 and yarn */
  float beta_fast;               /* yarn */
  float beta_slow;               /* yarn */
  float mscale;                  /* yarn: 0 = unset */
  float mscale_all_dim;          /* yarn: 0 = unset */
  float attention_factor;        /* yarn: 0 = derive as transformers does */
  int32_t truncate;              /* yarn: nonzero = floor/ceil the correction range */
  int32_t interleaved;           /* nonzero: pairs (2i, 2i + 1), as DeepSeek rotates them */
} braid_rope_config;

/* Writes RopeConfig's defaults (theta 10000, no scaling, ...) into *config. */
BRAID_API void braid_rope_config_init(braid_rope_config* config);

/* Rotates q and k in place, half-split ("rotate_half") convention.
 * q [n, q_heads, head_dim] float, last dim dense; k [n, kv_heads, head_dim] q's dtype, or NULL
 * (q only); positions [n] i32/i64. head_dim and rotary_dim even, rotary_dim <= head_dim.
 * config NULL = the defaults of braid_rope_config_init(). */
BRAID_API braid_status braid_rope_apply(const braid_tensor* q, const braid_tensor* k,
                                        const braid_tensor* positions,
                                        const braid_rope_config* config, void* stream);

/* out = silu(gate) * up on a packed [gate | up] input.
 * x [..., 2*d] rows, float; out [..., d] rows, x's dtype, same number of rows. */
BRAID_API braid_status braid_silu_mul(const braid_tensor* x, const braid_tensor* out,
                                      void* stream);

/* out = a @ w^T (+ bias), fp32 accumulation.
 * a [m, k] f16/bf16 (f32 too on the CPU), rows; w [n, k] a's dtype, contiguous; bias [n]
 * out's dtype, or NULL; out [m, n] a's dtype or f32, rows. */
BRAID_API braid_status braid_gemm(const braid_tensor* a, const braid_tensor* w,
                                  const braid_tensor* bias, const braid_tensor* out, void* stream);

/* Softmax over the last dimension in fp32 (row maximum subtracted).
 * x [..., d] rows, float; out x's shape, f32 or x's dtype. */
BRAID_API braid_status braid_softmax(const braid_tensor* x, const braid_tensor* out,
                                     void* stream);

/* Index of the maximum over the last dimension (ties: lowest index; NaN is the largest).
 * x [..., d] rows, float; out [rows] i32/i64. */
BRAID_API braid_status braid_argmax(const braid_tensor* x, const braid_tensor* out, void* stream);

/* One token per row of logits, with the row's own temperature, top-k, top-p, min-p and seeded
 * counter-based draw (the serving engine's sampler without penalties; exact rules in ops.h's
 * sample_tokens). A row's token depends only on its own logits and parameters; CUDA and the CPU
 * give the same token. Rows with temperature < 1e-5 are greedy (lowest index of the maximum,
 * NaN never wins).
 *   logits      [m, V] f32, rows; 1 <= V <= 2^24 - 1
 *   temperature [m] f32 (>= 0, finite)
 *   top_k       [m] i32 (0 or -1: off)
 *   top_p       [m] f32 in (0, 1] (1: off)
 *   min_p       [m] f32 in [0, 1] (0: off), relative to the most likely token
 *   seeds       [m] i64 and steps [m] i64: the u64 seed and output position of each row's draw
 *   workspace   u8, contiguous, at least braid_sample_tokens_workspace_bytes(m, V) bytes (today
 *               0: NULL will do)
 *   tokens      [m] i32
 * All per-row tensors contiguous. Values are checked on the CPU; CUDA reads out-of-range ones as
 * ops.h says (no host synchronisation: graph-capturable). The workspace size is -1 for invalid
 * sizes (braid_last_error_message says why). */
BRAID_API int64_t braid_sample_tokens_workspace_bytes(int64_t rows, int64_t vocab);
BRAID_API braid_status braid_sample_tokens(const braid_tensor* logits,
                                           const braid_tensor* temperature,
                                           const braid_tensor* top_k, const braid_tensor* top_p,
                                           const braid_tensor* min_p, const braid_tensor* seeds,
                                           const braid_tensor* steps,
                                           const braid_tensor* workspace,
                                           const braid_tensor* tokens, void* stream);

/* Attention over a paged KV cache with ragged queries (each sequence's queries are its last
 * q_len tokens; causal query i sees keys 0 .. kv_len - q_len + i; GQA by head groups).
 *   q            [total_q, q_heads, head_dim] float
 *   cu_seqlens_q [batch + 1] i32, from 0 to total_q, non-decreasing
 *   k_pages      [num_pages, page_size, kv_heads, head_dim] q's dtype, contiguous
 *   v_pages      like k_pages
 *   page_table   [batch, max_pages_per_seq] i32, contiguous
 *   kv_lens      [batch] i32
 *   causal       nonzero for causal masking
 *   out          [total_q, q_heads, head_dim] q's dtype
 *   lse          [total_q, q_heads] f32 (natural-log log-sum-exp of the scaled scores), or NULL */
BRAID_API braid_status braid_attention(const braid_tensor* q, const braid_tensor* cu_seqlens_q,
                                       const braid_tensor* k_pages, const braid_tensor* v_pages,
                                       const braid_tensor* page_table,
                                       const braid_tensor* kv_lens, int causal,
                                       float softmax_scale, const braid_tensor* out,
                                       const braid_tensor* lse, void* stream);

/* FlashAttention forward over a ragged batch whose keys and values are in contiguous tensors
 * (prefill; no score matrix is stored). Sequence b's queries are rows cu_seqlens_q[b] ..
 * cu_seqlens_q[b+1] of q, its keys and values rows cu_seqlens_kv[b] .. cu_seqlens_kv[b+1] of k and
 * v; as for braid_attention the queries are the sequence's last q_len tokens, so causal query i
 * sees keys 0 .. kv_len - q_len + i (causal needs kv_len >= q_len). GQA by head groups.
 *   q             [total_q, q_heads, head_dim] f16/bf16 (f32 on the CPU only), last dim dense,
 *                 heads packed, any row stride
 *   k, v          [total_kv, kv_heads, head_dim] q's dtype, kv_heads divides q_heads, last dim
 *                 dense, heads packed, any row stride
 *   cu_seqlens_q  [batch + 1] i32, contiguous, from 0 to total_q, non-decreasing
 *   cu_seqlens_kv [batch + 1] i32, contiguous, from 0 to total_kv, non-decreasing
 *   max_seqlen_q  the longest q_len (a host value: it sizes the CUDA grid)
 *   causal        nonzero for causal masking
 *   out           [total_q, q_heads, head_dim] q's dtype
 *   lse           [total_q, q_heads] f32 (natural-log log-sum-exp of the scaled scores), or NULL
 * Offsets are checked on the CPU and trusted on CUDA. CUDA takes head_dim 64 or 128. */
BRAID_API braid_status braid_attention_prefill(const braid_tensor* q, const braid_tensor* k,
                                               const braid_tensor* v,
                                               const braid_tensor* cu_seqlens_q,
                                               const braid_tensor* cu_seqlens_kv,
                                               int max_seqlen_q, int causal, float softmax_scale,
                                               const braid_tensor* out, const braid_tensor* lse,
                                               void* stream);

/* Decode attention: one query per sequence over a paged KV cache (split-KV on CUDA), the result
 * of braid_attention with cu_seqlens_q = {0, 1, ..., batch}.
 *   q          [batch, q_heads, head_dim] float, last dim dense
 *   k_pages, v_pages, page_table, kv_lens as for braid_attention, every kv_lens[b] >= 1
 *   out        [batch, q_heads, head_dim] q's dtype, last dim dense
 *   lse        [batch, q_heads] f32, or NULL
 *   workspace  f32, contiguous, at least braid_attention_decode_workspace_floats(batch, q_heads,
 *              head_dim, max_pages_per_seq * page_size) elements (scratch) */
BRAID_API int64_t braid_attention_decode_workspace_floats(int64_t batch, int64_t q_heads,
                                                          int64_t head_dim, int64_t max_kv_len);
BRAID_API braid_status braid_attention_decode(const braid_tensor* q, const braid_tensor* k_pages,
                                              const braid_tensor* v_pages,
                                              const braid_tensor* page_table,
                                              const braid_tensor* kv_lens, float softmax_scale,
                                              const braid_tensor* out, const braid_tensor* lse,
                                              const braid_tensor* workspace, void* stream);

/* A decode step's attention in one call (one CUDA kernel for f16/bf16, head_dim 64 or 128):
 * per-head RMSNorm of q and k, RoPE, the append of the new K and V to the paged cache, then
 * braid_attention_decode (braid::ops::qk_norm_rope_kv_append_attention_decode).
 *   q            [batch, q_heads, head_dim], k, v [batch, kv_heads, head_dim]: the QKV
 *                projection's heads of each sequence's new token (q and k unspecified after)
 *   q_norm, k_norm  [head_dim] q's dtype, both or neither (NULL: no norm); eps their epsilon
 *   positions    [batch] i32/i64; config as braid_rope_apply's (NULL: defaults)
 *   slots        [batch] i32: the cache slot of key kv_lens[b] - 1, where the page table puts it
 *   k_pages, v_pages, page_table, kv_lens, softmax_scale, out, lse, workspace: as
 *                braid_attention_decode (kv_lens counting the new token)
 *   counters     i32, contiguous, at least braid_attention_decode_counters(batch, q_heads,
 *                kv_heads) elements, zero before the first call; each call leaves them zero
 *                (checked, no longer read on CUDA: kept until this API's next incompatible change)
 * On CUDA it reads the older keys, kv_lens and the page table before the kernel before it in the
 * stream has finished (programmatic dependent launch): that kernel must not write them. */
BRAID_API int64_t braid_attention_decode_counters(int64_t batch, int64_t q_heads, int64_t kv_heads);
BRAID_API braid_status braid_qk_norm_rope_kv_append_attention_decode(
    const braid_tensor* q, const braid_tensor* k, const braid_tensor* v, const braid_tensor* q_norm,
    const braid_tensor* k_norm, float eps, const braid_tensor* positions,
    const braid_rope_config* config, const braid_tensor* slots, const braid_tensor* k_pages,
    const braid_tensor* v_pages, const braid_tensor* page_table, const braid_tensor* kv_lens,
    float softmax_scale, const braid_tensor* out, const braid_tensor* lse,
    const braid_tensor* workspace, const braid_tensor* counters, void* stream);

/* Multi-head latent attention (DeepSeek-V2/V3) in the absorbed form over a paged cache of latent
 * rows c = [latent (r) | rope key (dr)], one per token, shared by every head:
 *   score(h, s) = (q_latent[h] . c_s[:r] + q_rope[h] . c_s[r:]) * softmax_scale
 *   out[h]      = sum over visible s of softmax(score(h, .))_s * c_s[:r]
 * Ragged and causal as braid_attention (each sequence's queries are its last q_len tokens).
 *   q_latent     [total_q, heads, r] float, last dim dense (W_UK already folded in)
 *   q_rope       [total_q, heads, dr] q_latent's dtype, last dim dense
 *   cu_seqlens_q [batch + 1] i32, from 0 to total_q, non-decreasing
 *   cache        [num_pages, page_size, 1, r + dr] q_latent's dtype, contiguous
 *   page_table   [batch, max_pages_per_seq] i32, contiguous
 *   kv_lens      [batch] i32, each between its q_len and max_pages_per_seq * page_size
 *   causal       nonzero for causal masking
 *   out          [total_q, heads, r] q_latent's dtype, last dim dense
 *   lse          [total_q, heads] f32 (natural-log log-sum-exp of the scaled scores), or NULL
 *   workspace    f32, contiguous, at least braid_attention_mla_workspace_floats(total_q, heads, r,
 *                max_pages_per_seq * page_size) elements (scratch); NULL when that is 0
 * Index values are checked on the CPU only. CUDA takes f16/bf16, r a multiple of 64 up to 512,
 * dr a multiple of 32 up to 64; no host synchronisation (graph-capturable). */
BRAID_API int64_t braid_attention_mla_workspace_floats(int64_t total_q, int64_t heads, int64_t r,
                                                       int64_t max_kv_len);
BRAID_API braid_status braid_attention_mla(const braid_tensor* q_latent,
                                           const braid_tensor* q_rope,
                                           const braid_tensor* cu_seqlens_q,
                                           const braid_tensor* cache,
                                           const braid_tensor* page_table,
                                           const braid_tensor* kv_lens, int causal,
                                           float softmax_scale, const braid_tensor* out,
                                           const braid_tensor* lse,
                                           const braid_tensor* workspace, void* stream);

/* Writes new keys and values into a paged KV cache: token i goes to slot slots[i], i.e. page
 * slots[i] / page_size, offset slots[i] % page_size.
 *   k, v             [n, kv_heads, head_dim] float, last dim dense
 *   slots            [n] i32, each in [0, num_pages * page_size) (checked on the CPU only)
 *   k_pages, v_pages [num_pages, page_size, kv_heads, head_dim] k's dtype, contiguous */
BRAID_API braid_status braid_kv_append(const braid_tensor* k, const braid_tensor* v,
                                       const braid_tensor* slots, const braid_tensor* k_pages,
                                       const braid_tensor* v_pages, void* stream);

/* A decode step's per-head RMSNorm of q and k, RoPE and KV append in one call
 * (braid::ops::qk_norm_rope_kv_append): braid_rms_norm on each head of q and k (q_norm and k_norm
 * [head_dim] q's dtype, both or neither: NULL = no norm), braid_rope_apply(q, k, positions,
 * config), then braid_kv_append(k, v, slots, k_pages, v_pages); q and k are left normed and
 * rotated in place. On CUDA one kernel, bit-identical to the three calls.
 *   q                [n, q_heads, head_dim] float, last dim dense; k, v [n, kv_heads, head_dim]
 *   positions        [n] i32/i64; slots [n] i32 as braid_kv_append's */
BRAID_API braid_status braid_qk_norm_rope_kv_append(
    const braid_tensor* q, const braid_tensor* k, const braid_tensor* v, const braid_tensor* q_norm,
    const braid_tensor* k_norm, float eps, const braid_tensor* positions,
    const braid_rope_config* config, const braid_tensor* slots, const braid_tensor* k_pages,
    const braid_tensor* v_pages, void* stream);

/* Copies the first kv_lens[b] tokens of each sequence b of a paged KV cache, in order, into
 * contiguous ragged K and V (the layout braid_attention_prefill reads): rows cu_seqlens_kv[b] ..
 * cu_seqlens_kv[b+1] of k_out / v_out are sequence b's tokens (token t: page
 * page_table[b, t / page_size], offset t % page_size).
 *   k_pages, v_pages [num_pages, page_size, kv_heads, head_dim] float, contiguous
 *   page_table       [batch, max_pages_per_seq] i32, contiguous
 *   kv_lens          [batch] i32, contiguous
 *   cu_seqlens_kv    [batch + 1] i32, contiguous: 0, then cu[b+1] - cu[b] = kv_lens[b]
 *   k_out, v_out     [total_kv >= cu[batch], kv_heads, head_dim] k_pages' dtype, contiguous;
 *                    rows past cu[batch] are left as they are
 * Index values are checked on the CPU only; on CUDA they are read on the device (no host
 * synchronisation). */
BRAID_API braid_status braid_paged_kv_gather(const braid_tensor* k_pages,
                                             const braid_tensor* v_pages,
                                             const braid_tensor* page_table,
                                             const braid_tensor* kv_lens,
                                             const braid_tensor* cu_seqlens_kv,
                                             const braid_tensor* k_out, const braid_tensor* v_out,
                                             void* stream);

/* Mixture-of-experts router: p = softmax(logits[t, :]) in fp32; the k experts with the largest
 * logits, in descending order (ties: lower index first; NaN ranks last); topk_weights = their p,
 * divided by the sum of the k chosen p when renormalize is nonzero.
 *   logits       [T, E] float, rows; 1 <= E <= 512
 *   k            1 <= k <= min(16, E)
 *   topk_weights [T, k] f32, contiguous
 *   topk_ids     [T, k] i32, contiguous */
BRAID_API braid_status braid_moe_route_topk_softmax(const braid_tensor* logits, int k,
                                                    int renormalize,
                                                    const braid_tensor* topk_weights,
                                                    const braid_tensor* topk_ids, void* stream);

/* DeepSeek-V3's grouped sigmoid router: s = sigmoid(logits[t, :]) in fp32, b = s + bias; the
 * experts form n_group contiguous groups, each scored by the sum of its two largest b (its only b
 * for groups of one); the topk_group best groups are kept and the k experts with the largest b
 * among the kept groups' experts only are chosen, in descending order of b (ties: lower index
 * first; a NaN score counts as -inf). topk_weights = the chosen s (unbiased) divided by
 * (their sum + 1e-20), times routed_scaling_factor.
 *   logits       [T, E] float, rows; 1 <= E <= 512
 *   bias         [E] f32 or bf16, contiguous (e_score_correction_bias)
 *   n_group      divides E; 1 <= topk_group <= n_group; 1 <= k <= min(16, topk_group * E / n_group)
 *   topk_weights [T, k] f32, contiguous
 *   topk_ids     [T, k] i32, contiguous */
BRAID_API braid_status braid_moe_route_grouped(const braid_tensor* logits,
                                               const braid_tensor* bias, int n_group,
                                               int topk_group, int k, float routed_scaling_factor,
                                               const braid_tensor* topk_weights,
                                               const braid_tensor* topk_ids, void* stream);

/* DeepSeek-V2's router, softmax scores with optional expert groups (topk_method "greedy":
 * n_group = topk_group = 1; "group_limited_greedy": groups): p = softmax(logits[t, :]) in fp32
 * (braid_moe_route_topk_softmax's p, the same bits); the experts form n_group contiguous groups,
 * each scored by its largest p; the topk_group best groups are kept and the k experts with the
 * largest p among the kept groups' experts only are chosen, in descending order of p (ties:
 * lower index first; a NaN p ranks below every number). topk_weights = the chosen p, divided by
 * their sum when renormalize is nonzero, times routed_scaling_factor.
 *   logits       [T, E] float, rows; 1 <= E <= 512
 *   n_group      divides E; 1 <= topk_group <= n_group; 1 <= k <= min(16, topk_group * E / n_group)
 *   routed_scaling_factor  finite
 *   topk_weights [T, k] f32, contiguous
 *   topk_ids     [T, k] i32, contiguous */
BRAID_API braid_status braid_moe_route_softmax_grouped(const braid_tensor* logits, int n_group,
                                                       int topk_group, int k, int renormalize,
                                                       float routed_scaling_factor,
                                                       const braid_tensor* topk_weights,
                                                       const braid_tensor* topk_ids,
                                                       void* stream);

/* Experts with a SwiGLU MLP each, combined with the routing weights: for token t,
 * out[t] = sum_j topk_weights[t, j] * down[e] @ (silu(gate[e] @ x[t]) * (up[e] @ x[t])),
 * e = topk_ids[t, j] (g, u and h rounded to x's dtype as the dense MLP does; the sum in fp32).
 *   x            [T, H] float, rows
 *   topk_weights [T, k] f32, contiguous
 *   topk_ids     [T, k] i32, contiguous; each in [0, E) (checked on the CPU; on CUDA a bad id
 *                contributes nothing)
 *   gate_up      [E, 2*I, H] x's dtype, contiguous (per expert: I gate rows, then I up rows)
 *   down         [E, H, I] x's dtype, contiguous
 *   workspace    [T*k, I] f32, contiguous scratch
 *   out          [T, H] x's dtype, rows; may be x */
BRAID_API braid_status braid_moe_experts(const braid_tensor* x, const braid_tensor* topk_weights,
                                         const braid_tensor* topk_ids,
                                         const braid_tensor* gate_up, const braid_tensor* down,
                                         const braid_tensor* workspace, const braid_tensor* out,
                                         void* stream);

/* braid_moe_experts with what the C++ op's other overloads take (include/braid/ops.h says the
 * arithmetic); each of these may be NULL:
 *   gate_up_scale [E, 2*I/128, H/128], down_scale [E, H/128, I/128] f32: fp8 (e4m3) experts'
 *                 128 x 128 block scales, both or neither (H and I multiples of 128)
 *   shared_gate_up [2*S, H], shared_down [H, S] (S a multiple of I), with shared_gate_up_scale
 *                 and shared_down_scale when fp8: DeepSeek's shared experts, run on every token
 *   residual      [T, H] x's dtype, rows: out = residual + (routed + shared), each sum rounded
 *   workspace     [T * (k + S / I), I] f32 with shared experts (else [T*k, I]) */
BRAID_API braid_status braid_moe_experts_ex(
    const braid_tensor* x, const braid_tensor* topk_weights, const braid_tensor* topk_ids,
    const braid_tensor* gate_up, const braid_tensor* gate_up_scale, const braid_tensor* down,
    const braid_tensor* down_scale, const braid_tensor* shared_gate_up,
    const braid_tensor* shared_gate_up_scale, const braid_tensor* shared_down,
    const braid_tensor* shared_down_scale, const braid_tensor* residual,
    const braid_tensor* workspace, const braid_tensor* out, void* stream);

/* The MoE permutation (pair p = t * k + j is token t's j-th choice, expert topk_ids[t, j]).
 * moe_permute: expert e's pairs take rows [expert_offsets[e], expert_offsets[e + 1]) of the
 * permuted order, ascending in pair order (deterministic; no host synchronisation on CUDA).
 *   topk_ids [T, k] i32; 1 <= num_experts <= 512; expert_offsets [E + 1] i32 (offsets[E] = the
 *   pairs with a valid id); sorted_pairs [T * k] i32 (row r holds pair sorted_pairs[r]);
 *   pair_rows [T * k] i32 (the inverse); workspace i32 of at least
 *   braid_moe_permute_workspace_size(T * k, E) elements. An id outside [0, E) is an error on the
 *   CPU; on CUDA such pairs take the rows past offsets[E] and get pair_rows = -1.
 * moe_gather: xs[r] = x[sorted_pairs[r] / k]; x [T, H] float rows, xs [T * k, H] x's dtype.
 * moe_combine: out[t] = sum over j of topk_weights[t, j] * ys[pair_rows[t * k + j]] in fp32, in
 *   j order, rounded once; pairs with pair_rows < 0 are skipped. ys [T * k, H] float rows,
 *   topk_weights [T, k] f32, out [T, H] float rows. */
BRAID_API int64_t braid_moe_permute_workspace_size(int64_t pairs, int num_experts);
BRAID_API braid_status braid_moe_permute(const braid_tensor* topk_ids, int num_experts,
                                         const braid_tensor* expert_offsets,
                                         const braid_tensor* sorted_pairs,
                                         const braid_tensor* pair_rows,
                                         const braid_tensor* workspace, void* stream);
BRAID_API braid_status braid_moe_gather(const braid_tensor* x, const braid_tensor* sorted_pairs,
                                        int k, const braid_tensor* xs, void* stream);
BRAID_API braid_status braid_moe_combine(const braid_tensor* ys, const braid_tensor* pair_rows,
                                         const braid_tensor* topk_weights,
                                         const braid_tensor* out, void* stream);

/* moe_grouped_gemm: the expert GEMMs of a permuted batch; rows [expert_offsets[e],
 * expert_offsets[e + 1]) of x belong to expert e (offsets read on the device on CUDA, clamped to
 * [0, M]; checked on the CPU).
 *   activation 0 (none):   y[r] = x[r] @ w[e]^T                   w [E, N, K], y [M, N]
 *   activation 1 (swiglu): y[r] = silu(x[r] @ gate^T) * (x[r] @ up^T), gate = w[e][0:I],
 *                          up = w[e][I:2I] (g, u and y rounded to x's dtype)   w [E, 2I, K], y [M, I]
 *   x [M, K] float rows; w x's dtype, contiguous; expert_offsets [E + 1] i32 (1 <= E <= 512,
 *   non-decreasing, offsets[E] <= M); y x's dtype, rows (rows past offsets[E] left as they are). */
BRAID_API braid_status braid_moe_grouped_gemm(const braid_tensor* x, const braid_tensor* w,
                                              const braid_tensor* expert_offsets, int activation,
                                              const braid_tensor* y, void* stream);

/* FP8 block scale (DeepSeek-V3's format): e4m3 values with one f32 scale per 128 consecutive values
 * of an activation row, or per 128 x 128 block of a weight matrix; value = fp8 * scale. Activation
 * scales are stored transposed: [K / 128, rows], scale[b, r] for row r's columns [128 b, 128 b + 128).
 * moe_fp8_quantize: x [M, K] f32/bf16 rows (K % 128 == 0) into `terms` = q.shape[1] / K terms
 *   (1..3) whose sum approximates x: term t quantizes what the terms before leave (fp32); per row
 *   and block s = amax / 448 (1 when that underflows to 0 or amax is 0), q = e4m3(v / s) rounded to nearest even and
 *   saturated. q [M, terms * K] f8e4m3 rows (term t in columns [t K, t K + K)); q_scale
 *   [terms * K / 128, M] f32 rows (row stride >= M).
 * moe_gather_fp8: xs[r] = x[sorted_pairs[r] / k] and xs_scale[b, r] = x_scale[b, sorted_pairs[r] / k];
 *   x [T, K] f8e4m3 rows, x_scale [K / 128, T] f32 rows, sorted_pairs [T * k] i32 (values in
 *   [0, T * k): checked on the CPU; on CUDA a value outside gives a zero row and zero scales),
 *   xs [T * k, K] f8e4m3 rows, xs_scale [K / 128, T * k] f32 rows.
 * moe_grouped_gemm_fp8: moe_grouped_gemm on block-scaled operands, fp32 sums; x may hold R terms
 *   side by side (as moe_fp8_quantize writes them), all multiplied with the same w:
 *   G = (sum_t dequant(x_t)) @ dequant(w[e])^T for the rows of expert e.
 *   activation 0 (none):             y = G                      w [E, N, K], y [M, N] f32/bf16
 *   activation 1 (swiglu):           y = silu(G[:, :I]) * G[:, I:]   w [E, 2I, K], y [M, I] f32,
 *   activation 2 (swiglu_gate_last): y = silu(G[:, I:]) * G[:, :I]   or y [M, R' I] f8e4m3 with
 *                                    y_scale [R' I / 128, M] f32 rows (R' = 1..3 terms, quantized
 *                                    as moe_fp8_quantize does it)
 *   x [M, R K] f8e4m3 rows (K % 128 == 0, R = 1..3); x_scale [R K / 128, M] f32 rows; w f8e4m3
 *   contiguous (N % 128 == 0, I % 128 == 0, 1 <= E <= 512); w_scale [E, N / 128, K / 128] f32
 *   contiguous; expert_offsets as for moe_grouped_gemm; y_scale NULL unless y is f8e4m3; rows of y
 *   past offsets[E] are left as they are. */
BRAID_API braid_status braid_moe_fp8_quantize(const braid_tensor* x, const braid_tensor* q,
                                              const braid_tensor* q_scale, void* stream);
BRAID_API braid_status braid_moe_gather_fp8(const braid_tensor* x, const braid_tensor* x_scale,
                                            const braid_tensor* sorted_pairs, int k,
                                            const braid_tensor* xs, const braid_tensor* xs_scale,
                                            void* stream);
BRAID_API braid_status braid_moe_grouped_gemm_fp8(const braid_tensor* x,
                                                  const braid_tensor* x_scale,
                                                  const braid_tensor* w,
                                                  const braid_tensor* w_scale,
                                                  const braid_tensor* expert_offsets,
                                                  int activation, const braid_tensor* y,
                                                  const braid_tensor* y_scale, void* stream);

/* moe_fp8_block_scale: a whole DeepSeek-V3 MoE layer on fp8 block-scaled weights (seed 003's
 * moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048, any sizes): routing as
 * braid_moe_route_grouped over the E_global experts; for each token and each chosen expert among
 * the E local ones [local_expert_offset, local_expert_offset + E):
 *   G1 = dequant(hidden_states[t]) @ dequant(gemm1_weights[e])^T, C = silu(G1[I:]) * G1[:I],
 *   O = C @ dequant(gemm2_weights[e])^T;  output[t] = bf16(sum of the routing weight * O).
 * fp8 values are e4m3 times one fp32 scale per 128 activation values or 128 x 128 weight block.
 * On CUDA C is handed to the second GEMM as intermediate_terms (1..3) fp8 terms (3 is close to
 * fp32; 1 is the usual fp8 requantisation); the CPU keeps it fp32.
 *   routing_logits      [T, E_global] f32, rows (1 <= E_global <= 512)
 *   routing_bias        [E_global] f32 or bf16, contiguous
 *   hidden_states       [T, H] f8e4m3, rows; H % 128 == 0
 *   hidden_states_scale [H / 128, T] f32, rows
 *   gemm1_weights       [E, 2I, H] f8e4m3, contiguous (I up rows, then I gate rows); I % 128 == 0
 *   gemm1_weights_scale [E, 2I / 128, H / 128] f32, contiguous
 *   gemm2_weights       [E, H, I] f8e4m3, contiguous
 *   gemm2_weights_scale [E, H / 128, I / 128] f32, contiguous
 *   n_group, topk_group, top_k, routed_scaling_factor as braid_moe_route_grouped's n_group,
 *                       topk_group, k and routed_scaling_factor
 *   workspace           u8, contiguous, 256-byte aligned, at least
 *                       braid_moe_fp8_block_scale_workspace_bytes(...) bytes (CUDA; NULL on the CPU)
 *   output              [T, H] bf16, rows
 * The workspace size is -1 for invalid sizes (braid_last_error_message says why). */
BRAID_API int64_t braid_moe_fp8_block_scale_workspace_bytes(int64_t tokens, int64_t hidden,
                                                            int64_t intermediate,
                                                            int64_t local_experts, int n_group,
                                                            int topk_group, int top_k,
                                                            int intermediate_terms);
BRAID_API braid_status braid_moe_fp8_block_scale(
    const braid_tensor* routing_logits, const braid_tensor* routing_bias,
    const braid_tensor* hidden_states, const braid_tensor* hidden_states_scale,
    const braid_tensor* gemm1_weights, const braid_tensor* gemm1_weights_scale,
    const braid_tensor* gemm2_weights, const braid_tensor* gemm2_weights_scale,
    int local_expert_offset, float routed_scaling_factor, int n_group, int topk_group, int top_k,
    int intermediate_terms, const braid_tensor* workspace, const braid_tensor* output,
    void* stream);

/* ---- offline inference: the serving engine (continuous batching, paged KV cache, prefix cache)
 * behind JSON, as vLLM's LLM class offers it. Options, requests and results are JSON text so the
 * ABI stays small and can grow without breaking; every string in and out is UTF-8.
 *
 * Calls on one braid_llm are serialised (a mutex), so it may be shared between threads; they do
 * not run concurrently. Strings the library returns are freed with braid_free_string(). On an
 * error status every char** output is set to NULL and nothing is left allocated. ---- */

typedef struct braid_llm braid_llm;

/* Loads a Hugging Face model folder (config.json, safetensors, optionally tokenizer.json) and
 * starts an engine on it. options_json: NULL, "" or a JSON object whose keys are all optional:
 *   "device"                  "cpu" | "cuda" | "cuda:N" | "auto" (default: CUDA when usable)
 *   "dtype"                   "auto" (default: f32 on the CPU, the checkpoint's 16-bit type on
 *                             CUDA) or a dtype name ("float32", "bfloat16", "f16", ...)
 *   "quantize"                "none" (default) | "fp8": a 16-bit checkpoint's linear layers
 *                             quantized to fp8 with 128 x 128 block scales at load (an fp8
 *                             checkpoint loads as it is)
 *   "max_model_len"           tokens of context, prompt and output together (default: the
 *                             config's max_position_embeddings, at most 8192; never more than it)
 *   "max_num_seqs"            sequences in one step (256)
 *   "max_num_batched_tokens"  tokens in one step (2048)
 *   "gpu_memory_utilization"  share of the free GPU memory the KV pool takes, in (0, 1] (0.9)
 *   "num_kv_pages"            KV pool size in pages of 16 tokens; overrides the above (0: auto)
 *   "enable_prefix_caching"   true | false (true)
 *   "cuda_graphs"             true | false (true)
 *   "seed"                    integer: requests without a seed draw theirs from a generator
 *                             seeded with it, so a run repeats (default: a random seed each)
 *   "tensor_parallel_size"    ranks the model is split over, in [1, 64] (1): on CUDA the GPUs
 *                             from the device's on (NCCL), on the CPU threads; heads, widths and
 *                             the vocabulary must divide (the error names the field)
 *   "enable_expert_parallel"  true | false (false): a MoE model's routed experts whole over the
 *                             ranks instead of split along their width
 * An unknown key, a wrong type or a value out of range is BRAID_ERR_INVALID_ARGUMENT naming the
 * key (as is a tensor_parallel_size larger than the GPUs present, or one the model does not
 * split by); "cuda" without a usable GPU is BRAID_ERR_UNSUPPORTED; a missing or malformed model folder is
 * BRAID_ERR_IO (or the error of what failed). On success *out owns the engine. */
BRAID_API braid_status braid_llm_create(const char* model_dir, const char* options_json,
                                        braid_llm** out);

/* Frees the engine and its memory (NULL is a no-op). */
BRAID_API void braid_llm_destroy(braid_llm* llm);

/* Runs a list of requests to completion, batched together, and returns their results in input
 * order. requests_json: a JSON list of objects, each with exactly one of
 *   "prompt"            text (encoded with the model's tokenizer), or
 *   "prompt_token_ids"  a list of token ids,
 * and optionally (vLLM's SamplingParams, with its defaults; null means the default):
 *   "add_special_tokens" bool (true; text prompts), "n" (1), "temperature" (1.0; 0 = greedy),
 *   "top_p" (1.0), "top_k" (0 or -1 = no limit), "min_p" (0), "seed" (integer or null),
 *   "presence_penalty", "frequency_penalty" (0, in [-2, 2]), "repetition_penalty" (1, in (0, 2]),
 *   "max_tokens" (16 when absent; null = as many as the context leaves), "min_tokens" (0),
 *   "stop" (a string or a list of strings), "stop_token_ids" (a list of ids), "ignore_eos"
 *   (false), "logprobs" (null = none; k in [0, 20]: the sampled token and the k most likely),
 *   "skip_special_tokens" (true), "include_stop_str_in_output" (false).
 * *results_json: a JSON list, one object per request:
 *   {"prompt": text or null, "prompt_token_ids": [...], "num_cached_tokens": N,
 *    "outputs": [{"index": i, "text": "...", "token_ids": [...],
 *                 "cumulative_logprob": x or null,
 *                 "logprobs": null or one entry per token: {"token_id": t, "logprob": x,
 *                              "decoded_token": "...", "top": [{"token_id": t, "logprob": x,
 *                              "decoded_token": "..."}, ...] (most likely first)},
 *                 "finish_reason": "stop" | "length", "stop_reason": null | "string" | id}, ...]}
 * (n outputs, by index). Every request is checked before any runs: a bad one (JSON, a field's
 * type or range, a prompt too long for the context) is BRAID_ERR_INVALID_ARGUMENT naming
 * "requests[i].field", and nothing runs. */
BRAID_API braid_status braid_llm_generate(braid_llm* llm, const char* requests_json,
                                          char** results_json);

/* The model's token ids for `text` as a JSON list ("[1, 2, 3]"). */
BRAID_API braid_status braid_llm_tokenize(braid_llm* llm, const char* text,
                                          int add_special_tokens, char** ids_json);

/* The text of `count` token ids (ids may be NULL when count is 0). */
BRAID_API braid_status braid_llm_detokenize(braid_llm* llm, const int32_t* ids, int64_t count,
                                            int skip_special_tokens, char** text);

/* What the engine runs, as a JSON object: "device", "dtype", "weights" (the linear layers' format:
 * "dense", "fp8_blocks" or "fp8_per_channel"), "max_model_len", "vocab_size", "num_kv_pages",
 * "page_size", "eos_token_ids", "architecture", "has_tokenizer", "tensor_parallel_size",
 * "expert_parallel". */
BRAID_API braid_status braid_llm_info(braid_llm* llm, char** info_json);

/* Frees a string returned by a braid_llm_* call (NULL is a no-op). */
BRAID_API void braid_free_string(char* s);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BRAID_BRAID_H_ */
