// braidinfer operations: each declared once, with its contract.
//
// Every op writes into caller-provided outputs and runs on the device its tensors live on: all
// tensor arguments must be on the same device. The CPU implementation (src/ops/cpu/) is the
// reference; the CUDA implementation (src/ops/cuda/) must match it within the dtype's tolerance.
// Arguments are checked once, on entry; a bad argument throws braid::Error naming the op, the
// argument, what was expected and what was given. Kernels then assume checked input.
//
// "Rows" below: a tensor whose last dimension is dense and whose leading dimensions fold into a
// single row index with one row stride (Tensor::rows_foldable). Floating types are f32, f16, bf16;
// all arithmetic is in fp32, rounded once to the output type unless a contract says otherwise.
#pragma once

#include <cstdint>
#include <span>
#include <type_traits>

#include "braid/stream.h"
#include "braid/tensor.h"

namespace braid::ops {

// ---------------------------------------------------------------------------------------------
// Weight: a weight matrix as the matmul ops (gemm, rms_norm_gemm, gemm_add, swiglu_gemm_add)
// take it: w [n, k] in the activations' dtype; or w in fp8 e4m3 with f32 scales, each value
// w[i, j] * scale(i, j), where scale is contiguous and either
//   [ceil(n / 128), ceil(k / 128)]: one per 128 x 128 block (DeepSeek-V3's and Qwen3-FP8's
//                                    weight_scale_inv), or
//   [n, 1]:                          one per output row (compressed-tensors' per-channel scale).
// The activations stay 16-bit. On CUDA an fp8 product of up to 16 rows streams w through the
// GEMV kernel, exactly (fp32 sums of the exact products); longer ones with 128 x 128 scales
// quantize the activations to fp8 per row and 128 columns (DeepSeek-V3's recipe) for cuBLASLt's
// block-scaled fp8 GEMM (k % 128 == 0); with per-row scales, per row (one scale per token, the
// compressed-tensors FP8-dynamic scheme) for cuBLASLt's outer-vector-scaled fp8 GEMM (k % 16 ==
// 0). k < 512, or operands cuBLASLt does not take, run the GEMV 16 rows at a time (exact, but the
// weights are read once per 16 rows). The CPU reference is the exact product.
struct Weight {
  Tensor w;
  Tensor scale;  // undefined for a 16-bit w
  Weight() = default;  // none (w undefined)
  // A 16-bit weight: anything a Tensor converts from (a Tensor, an OwnedTensor), implicitly, so
  // the ops take their weights as they did before fp8.
  template <class T, class = std::enable_if_t<std::is_convertible_v<const T&, Tensor>>>
  Weight(const T& w) : w(w) {}  // NOLINT(google-explicit-constructor)
  Weight(const Tensor& w, const Tensor& scale) : w(w), scale(scale) {}
  bool fp8() const { return w.dtype == DType::f8e4m3; }
};

// ConstantWeights: while one is alive on this thread, the matmul ops on CUDA may start reading
// their weights (w and its scales) before the kernel before them in the stream has finished
// (programmatic dependent launch: the weight stream overlaps that kernel's tail). Whoever opens
// one promises that no kernel it enqueues meanwhile writes a weight that a later op of the same
// stream reads; the model's forward() opens one (weights never change after loading). Outside
// one, every op waits for the kernel before it as usual. Nestable.
class ConstantWeights {
 public:
  ConstantWeights();
  ~ConstantWeights();
  ConstantWeights(const ConstantWeights&) = delete;
  ConstantWeights& operator=(const ConstantWeights&) = delete;
  static bool active();  // on this thread
};

// ---------------------------------------------------------------------------------------------
// embedding: out[i, :] = table[ids[i], :]
//   ids   [n] i32 or i64, each in [0, vocab)
//   table [vocab, hidden] f32/f16/bf16, rows
//   out   [n, hidden] same dtype as table, rows
// An id outside [0, vocab) is an error on the CPU; on CUDA (where checking would need a host
// synchronisation) its row is written as zeros. n < 2^31.
void embedding(const Tensor& ids, const Tensor& table, const Tensor& out, Stream stream = {});

// embedding_rows: one rank's part of a vocabulary-parallel embedding (the table holds ids
// [first_id, first_id + rows)): out[i, :] = table[ids[i] - first_id, :] for the ids it holds, a
// zero row for every other id (another rank's; summing the ranks' outputs gives the lookup).
//   ids, table, out: as embedding;  first_id >= 0
void embedding_rows(const Tensor& ids, const Tensor& table, int64_t first_id, const Tensor& out,
                    Stream stream = {});

// ---------------------------------------------------------------------------------------------
// rms_norm, with Hugging Face's rounding: n = to_dtype(x * rsqrt(mean(x²) + eps)),
// out = to_dtype(weight * n), sums in fp32.
//   x      [..., d] f32/f16/bf16, rows on a RowGrid (tensor.h): e.g. the q part of a packed
//          QKV output seen as [tokens, heads, head_dim] (per-head q/k norm)
//   weight [d] same dtype as x
//   out    same shape and dtype as x, rows on a RowGrid (may alias x)
void rms_norm(const Tensor& x, const Tensor& weight, float eps, const Tensor& out,
              Stream stream = {});

// Residual add fused with rms_norm, as a decoder layer does between blocks:
//   residual <- to_dtype(x + residual)   (the new residual, written in place)
//   out      <- rms_norm(residual)
// x, residual, out: same shape and dtype; out may alias x.
void add_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, float eps,
                  const Tensor& out, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// Rotary position embedding in the half-split ("rotate_half") convention of Hugging Face
// checkpoints: for each head vector v and i < rotary_dim/2, with f = inv_freq[i] * position,
//   v'[i]           = v[i] * cos(f) - v[i + half] * sin(f)
//   v'[i + half]    = v[i + half] * cos(f) + v[i] * sin(f)
// times attention_scaling on cos and sin (YaRN). Dimensions past rotary_dim are left unchanged.
// With interleaved, the pairs are adjacent instead, (v[2i], v[2i + 1]) for i < rotary_dim/2, as
// DeepSeek-V2/V3 checkpoints rotate them (GPT-J style).
enum class RopeScaling : uint8_t { none, llama3, yarn };

struct RopeConfig {
  float theta = 10000.0f;        // rope_theta
  int rotary_dim = 0;            // 0: the whole head_dim
  RopeScaling scaling = RopeScaling::none;
  float factor = 1.0f;           // llama3, yarn
  float low_freq_factor = 1.0f;  // llama3
  float high_freq_factor = 4.0f; // llama3
  int original_max_position = 8192;  // llama3 and yarn
  float beta_fast = 32.0f;       // yarn
  float beta_slow = 1.0f;        // yarn
  float mscale = 0.0f;           // yarn: 0 = unset
  float mscale_all_dim = 0.0f;   // yarn: 0 = unset
  float attention_factor = 0.0f; // yarn: 0 = derive from factor / mscale as transformers does
  bool truncate = true;          // yarn: floor/ceil the correction range
  bool interleaved = false;      // pairs (2i, 2i + 1) instead of (i, i + rotary_dim/2)
};

inline constexpr int kMaxRotaryHalf = 256;  // rotary_dim up to 512

// The per-pair inverse frequencies and the cos/sin scaling the config implies. The CPU reference
// and the CUDA kernel both use this table, so they agree on frequencies exactly.
struct RopeTable {
  int half = 0;                  // rotary_dim / 2
  float attention_scaling = 1.0f;
  bool interleaved = false;
  float inv_freq[kMaxRotaryHalf] = {};
};
RopeTable rope_table(const RopeConfig& config, int head_dim);

// Rotates q and k in place.
//   q         [n, q_heads, head_dim]  f32/f16/bf16; last dim dense
//   k         [n, kv_heads, head_dim] same dtype and head_dim as q; may be undefined (q only)
//   positions [n] i32 or i64, contiguous: the position of each token (values not checked)
// head_dim even, rotary_dim even and <= head_dim. Errors in the config (from rope_table too) are
// reported under the op name "rope_apply", argument "config.<field>".
// Note: transformers rounds cos/sin to the model dtype and rotates in that dtype; this contract
// rotates in fp32 and rounds once, so bf16 results can differ from transformers' by one ulp.
void rope_apply(const Tensor& q, const Tensor& k, const Tensor& positions,
                const RopeConfig& config, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// SwiGLU on a packed [gate | up] input: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)).
//   x   [..., 2*d] rows, f32/f16/bf16 (gate = x[..., :d], up = x[..., d:])
//   out [..., d]   rows, same dtype, same number of rows
void silu_mul(const Tensor& x, const Tensor& out, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// gemm: out = a @ w^T (+ bias), fp32 accumulation.
//   a    [m, k] f16 or bf16, rows (row stride >= k)
//   w    [n, k] same dtype as a: the Hugging Face [out_features, in_features] layout, contiguous;
//        or fp8 with its scales (Weight); then out is a's dtype
//   bias [n] same dtype as out (cuBLASLt's bias epilogue adds in the output type), contiguous,
//        or undefined (Tensor{}) for none
//   out  [m, n] a's dtype or f32, rows (row stride >= n)
// On CUDA, m <= 16 with k % 8 == 0 and 16-byte aligned a/w rows takes braidinfer's GEMV kernel
// (tensor-core, streams w at the copy bandwidth; no plan, capturable from the first call);
// everything else goes through cuBLASLt, with the heuristic's plan cached per shape (the first
// call with a shape plans; later calls, and CUDA-graph capture of them, allocate nothing). The
// cuBLASLt workspace is one per device: cuBLASLt gemms on different streams of one device must
// not run concurrently. On the CPU inputs of f32 are also accepted (reference only).
void gemm(const Tensor& a, const Weight& w, const Tensor& bias, const Tensor& out,
          Stream stream = {});

// ---------------------------------------------------------------------------------------------
// gemm_batched: out[:, b, :] = a[:, b, :] @ w[b]^T for every b, fp32 accumulation, rounded once
// (a per-head projection: MLA's absorbed W_UK before attention_mla and W_UV after it).
//   a    [m, batch, k] f16/bf16 (f32 on the CPU only), last dim dense, any batch and row stride
//   w    [batch, n, k] a's dtype, any batch stride; each w[b] an [n, k] matrix with one of its
//        two strides 1: rows of k (a Hugging Face [out, in] weight) or columns of n (the
//        transposed view of a row-major [k, n] matrix), so slices of a packed weight serve as is
//   out  [m, batch, n] a's dtype, last dim dense, any batch and row stride; must not overlap a
// On CUDA one launch, graph-capturable, no allocation: up to 16 rows with w in rows of k and
// 16-byte aligned parts, the decode GEMV kernel with b as its grid's y; else cuBLAS's
// strided-batched GEMM.
void gemm_batched(const Tensor& a, const Tensor& w, const Tensor& out, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// softmax over the last dimension, computed in fp32 with the row maximum subtracted. A row of
// all -inf gives NaN, as torch.softmax does.
//   x   [..., d] rows, f32/f16/bf16
//   out same shape as x; f32 or x's dtype
void softmax(const Tensor& x, const Tensor& out, Stream stream = {});

// argmax over the last dimension; ties go to the lowest index, NaN counts as the largest value
// (as torch.argmax).
//   x   [..., d] rows, f32/f16/bf16, d >= 1
//   out [rows] i32 or i64
void argmax(const Tensor& x, const Tensor& out, Stream stream = {});

// sample_tokens: one token per row of logits, drawn with the row's own temperature, top-k, top-p,
// min-p and seeded counter-based draw (the serving engine's sampler, without penalties). A row's
// token depends only on its logits and its parameters, never on the other rows. For row r, with
// l = logits[r, :], NaN read as -inf, and V = vocab:
//   greedy: temperature[r] < 1e-5 (on CUDA also NaN or inf), or the row's maximum m is not finite
//     (all -inf / NaN, or a +inf): token = the lowest index of the maximum (a row of nothing but
//     -inf and NaN gives 0; NaN never wins, unlike argmax()).
//   otherwise, with c = fp32(log2(e) / temperature[r]):
//     p_i   = exp2((l_i - m) * c) in fp32 (1 at the maximum): sampling::exp2_nonpositive of
//             src/ops/sample_tokens_math.h, the same bits on every device (relative error
//             < 2^-22; below 2^-125 it is 0)
//     kept  = {i : p_i >= min_p[r]}, and if 0 < top_k[r] < V also l_i >= the top_k[r]-th largest
//             logit (ties at the threshold are all kept)
//     w_i   = floor(p_i * 2^40) for kept i, else 0 (integer weights: every sum below is exact,
//             so no summation order can change a token); W = sum of w_i
//     top-p: if top_p[r] < 1, the kept set is cut to {i : p_i >= t}, t the largest value with
//             sum of w_j over {kept j : p_j >= t} >= ceil(top_p[r] * W) (ties at t all kept);
//             W becomes that sum
//     draw:  u = floor(sampling::uniform_bits53(seeds[r], steps[r]) * W / 2^53), in [0, W)
//             (include/braid/sampling_random.h: the engine's draw); token = the first index i
//             (in index order) at which the running sum of w reaches past u, w_0 + ... + w_i > u
//   The most likely token is always kept (w = 2^40), so W >= 2^40 and some token is drawn; a
//   token with p < 2^-40 (relative to the most likely) has weight 0 and is never drawn.
//   logits      [m, V] f32, rows (row stride >= V); 1 <= V <= 2^24 - 1
//   temperature [m] f32, contiguous: >= 0 and finite
//   top_k       [m] i32, contiguous: >= -1 (0 or -1: off; >= V: off)
//   top_p       [m] f32, contiguous: in (0, 1] (1: off)
//   min_p       [m] f32, contiguous: in [0, 1] (0: off), relative to the most likely token
//   seeds       [m] i64, contiguous: the u64 bits of each request's seed
//   steps       [m] i64, contiguous: the u64 bits of each row's output position (the draw counter)
//   workspace   u8, contiguous, at least sample_tokens_workspace_bytes(m, V) bytes; may be
//               undefined while that is 0 (it is 0 today: one block per row keeps its state in
//               shared memory)
//   tokens      [m] i32, contiguous
// Parameter values are checked on the CPU; on CUDA (where checking would need a host
// synchronisation) they are read as: temperature NaN, inf or < 1e-5 greedy; top_k <= 0 off;
// top_p NaN or >= 1 off, <= 0 keeps just the most likely; min_p NaN or < 0 as 0, > 1 as 1. No host
// synchronisation and no allocation on CUDA: graph-capturable.
int64_t sample_tokens_workspace_bytes(int64_t rows, int64_t vocab);
void sample_tokens(const Tensor& logits, const Tensor& temperature, const Tensor& top_k,
                   const Tensor& top_p, const Tensor& min_p, const Tensor& seeds,
                   const Tensor& steps, const Tensor& workspace, const Tensor& tokens,
                   Stream stream = {});

// ---------------------------------------------------------------------------------------------
// Attention over a paged KV cache.
//
// Each sequence b owns kv_lens[b] cached tokens, stored in pages of page_size tokens; its page
// table row lists the pages in order. Queries are ragged: sequence b's queries are rows
// cu_seqlens_q[b] .. cu_seqlens_q[b+1] of q, and they are the LAST q_len tokens of the sequence
// (their K/V already appended), so with causal masking query i (0-based within the sequence) sees
// keys 0 .. kv_len - q_len + i. GQA: query head h reads KV head h / (q_heads / kv_heads).
//   q           [total_q, q_heads, head_dim] f32/f16/bf16, last dim dense
//   k_pages     [num_pages, page_size, kv_heads, head_dim] same dtype as q, contiguous
//   v_pages     same as k_pages
//   page_table  [batch, max_pages_per_seq] i32, contiguous; only the first
//               ceil(kv_len / page_size) entries of a row are read (the rest may be padding)
//   kv_lens     [batch] i32, each <= max_pages_per_seq * page_size and >= its q_len
//   cu_seqlens_q [batch + 1] i32, non-decreasing, cu_seqlens_q[0] = 0, last = total_q
//   out         [total_q, q_heads, head_dim] same dtype as q, last dim dense
//   lse         [total_q, q_heads] f32 (natural-log log-sum-exp of the scaled scores), or undefined
// softmax_scale is usually 1/sqrt(head_dim). Scores, softmax and the weighted sum are fp32.
// Shapes and dtypes are checked on every device. The index VALUES (cu_seqlens_q, kv_lens, page
// ids) are checked on the CPU only: on CUDA they are trusted, since reading them would need a host
// synchronisation (bad values there give wrong results or a fault, not an error). On CUDA,
// head_dim must be at most 256 (larger: ErrorKind::unsupported).
struct PagedKV {
  Tensor k_pages;
  Tensor v_pages;
  Tensor page_table;
  Tensor kv_lens;
};

void attention(const Tensor& q, const Tensor& cu_seqlens_q, const PagedKV& kv, bool causal,
               float softmax_scale, const Tensor& out, const Tensor& lse, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// attention_mla: multi-head latent attention (DeepSeek-V2/V3) in the absorbed form, over a paged
// cache of latent rows. Every query head reads the same cached rows c = [latent (r) | rope key
// (dr)] (one row per token, written by kv_append with kv_heads 1 and no values):
//   score(h, s) = (q_latent[h] . c_s[:r] + q_rope[h] . c_s[r:]) * softmax_scale
//   out[h]      = sum over visible s of softmax(score(h, .))_s * c_s[:r]
// The caller folds W_UK into q_latent before (gemm_batched) and W_UV into out after. Queries are
// ragged and causal exactly as in attention(): sequence b's queries are rows cu_seqlens_q[b] ..
// cu_seqlens_q[b+1], its LAST q_len tokens, so its query i sees keys 0 .. kv_len - q_len + i.
//   q_latent     [total_q, heads, r]  f32/f16/bf16, last dim dense, any head and row stride
//   q_rope       [total_q, heads, dr] q_latent's dtype, last dim dense, any head and row stride
//   cache        [num_pages, page_size, 1, r + dr] q_latent's dtype, contiguous
//   page_table   [batch, max_pages_per_seq] i32, contiguous (as attention())
//   kv_lens      [batch] i32, each <= max_pages_per_seq * page_size and >= its q_len
//   cu_seqlens_q [batch + 1] i32 (as attention())
//   out          [total_q, heads, r] q_latent's dtype, last dim dense
//   lse          [total_q, heads] f32 (natural-log log-sum-exp of the scaled scores), or undefined
//   workspace    f32, contiguous, any shape, at least attention_mla_workspace_floats(total_q,
//                heads, r, max_kv_len) elements with max_kv_len >= the page table's capacity,
//                page_table.shape[1] * page_size; may be undefined when that is 0 (contents
//                undefined after the call)
// r >= 1, dr >= 0, softmax_scale finite. Scores, softmax and the weighted sum are fp32. Index
// values are checked on the CPU only, as in attention(). On CUDA: f16/bf16, r a multiple of 64 up
// to 512, dr a multiple of 32 up to 64 (DeepSeek-V2/V3: 512 and 64) and a 16-byte aligned cache;
// others ErrorKind::unsupported. There a block takes one query token, up to 16 of its heads (64
// on Hopper for r 512, dr 64 and at least 64 heads) and one chunk of its keys, so each cached row
// is read once for all those heads; when such blocks would not fill the GPU (few query tokens:
// decode) the keys are cut into several chunks (split-KV, down to 64 keys a chunk) whose partial
// results go to the workspace and a second kernel merges them. The chunk count depends only on
// shapes (total_q, heads, the page table's capacity) and the GPU, never on index values: no
// allocation, no host synchronisation, graph-capturable. The workspace size is 0 (one chunk per
// token) when total_q * ceil(heads / 16) >= 512, e.g. a prefill chunk, or when max_kv_len <= 64.
int64_t attention_mla_workspace_floats(int64_t total_q, int64_t heads, int64_t r,
                                       int64_t max_kv_len);
void attention_mla(const Tensor& q_latent, const Tensor& q_rope, const Tensor& cu_seqlens_q,
                   const Tensor& cache, const Tensor& page_table, const Tensor& kv_lens,
                   bool causal, float softmax_scale, const Tensor& out, const Tensor& lse,
                   const Tensor& workspace, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// attention_prefill: FlashAttention forward over a ragged batch whose keys and values are in
// contiguous tensors (the prefill of new sequences, or a prefix held outside a paged cache).
// Sequence b's queries are rows cu_seqlens_q[b] .. cu_seqlens_q[b+1] of q, its keys and values
// rows cu_seqlens_kv[b] .. cu_seqlens_kv[b+1] of k and v. As in attention(), the queries are the
// sequence's LAST q_len tokens, so with causal masking query i sees keys 0 .. kv_len - q_len + i
// (the diagonal aligned to the end: chunked prefill, cached prefixes); causal needs
// kv_len >= q_len. GQA/MQA: query head h reads KV head h / (q_heads / kv_heads).
//   q             [total_q, q_heads, head_dim] f16/bf16 (f32 on the CPU only), last dim dense;
//                 any row stride (a view into a packed QKV works)
//   k, v          [total_kv, kv_heads, head_dim] q's dtype, last dim dense, any row stride
//   cu_seqlens_q  [batch + 1] i32, contiguous; cu_seqlens_kv likewise
//   max_seqlen_q  the longest q_len (a host value: it sizes the grid; larger only wastes blocks)
//   out           [total_q, q_heads, head_dim] q's dtype, last dim dense
//   lse           [total_q, q_heads] f32 (natural-log log-sum-exp of the scaled scores), or
//                 undefined
// Memory is O(tokens): no score matrix is stored. Index values (offsets, max_seqlen_q) are
// checked on the CPU and trusted on CUDA (no host synchronisation). On CUDA head_dim must be 64 or
// 128 and softmax_scale > 0 (others: ErrorKind::unsupported; attention() over a paged cache takes
// any head_dim up to 256 and any finite scale).
void attention_prefill(const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_kv, int max_seqlen_q,
                       bool causal, float softmax_scale, const Tensor& out, const Tensor& lse,
                       Stream stream = {});

// ---------------------------------------------------------------------------------------------
// Mixture of experts.
//
// Router: softmax over the experts, then the top k, as Qwen3-MoE and Mixtral do:
//   p = softmax(logits[t, :]) in fp32 (maximum subtracted);
//   the k experts with the largest logits (equivalently the largest p) are chosen, ties going to
//   the lower expert index (torch.topk does not promise an order among ties); a NaN logit ranks
//   below every number, so the ids are always k distinct experts;
//   topk_ids[t, j]     = the j-th chosen expert, in descending order of p (ties: lower index first)
//   topk_weights[t, j] = its p, divided by the sum of the k chosen p when renormalize
//                        (Qwen3-MoE's norm_topk_prob; Mixtral always renormalises).
//   logits       [T, E] f32/f16/bf16, rows; 1 <= E <= 512
//   k            1 <= k <= min(16, E)
//   topk_weights [T, k] f32, contiguous
//   topk_ids     [T, k] i32, contiguous
// Note: transformers then rounds the weights to the model dtype; here they stay fp32.
inline constexpr int kMoeMaxExperts = 512;
inline constexpr int kMoeMaxTopK = 16;
void moe_route_topk_softmax(const Tensor& logits, int k, bool renormalize,
                            const Tensor& topk_weights, const Tensor& topk_ids, Stream stream = {});

// Router with grouped top-k over sigmoid scores, as DeepSeek-V3 does it (noaux_tc):
//   s[e] = sigmoid(logits[t, e]), rounded to fp32 (worked out in fp64, so that every backend
//          gets the same bits and the chosen ids agree exactly);
//   b[e] = s[e] + bias[e] in fp32, the biased score used only to choose;
//   the E experts form n_group contiguous groups of G = E / n_group; a group's score is the sum
//   of its two largest b (its only b when G == 1); the topk_group best groups are kept (ties:
//   lower group index);
//   the k experts with the largest b among the kept groups' experts ONLY are chosen (ties: lower
//   expert index); topk_ids[t, j] is the j-th, in descending order of b;
//   topk_weights[t, j] = s[id] / (sum of the k chosen s + 1e-20) * routed_scaling_factor, with
//   the UNBIASED s, in fp32.
// A NaN score (a NaN logit or bias, or +inf + -inf) counts as -inf when choosing: it ranks below
// every number and ties with -inf by index. The ids are therefore always k distinct experts of
// kept groups; the weights that involve a NaN s are NaN.
// Hugging Face's DeepseekV3 code fills the dropped groups' scores with 0.0 instead of excluding
// those experts; the two differ only when fewer than k kept experts have a positive b. Here the
// dropped groups are excluded.
//   logits       [T, E] f32/f16/bf16, rows; 1 <= E <= 512
//   bias         [E] f32/bf16, contiguous (e_score_correction_bias)
//   n_group      divides E;  1 <= topk_group <= n_group;  1 <= k <= min(16, topk_group * G)
//   routed_scaling_factor  finite
//   topk_weights [T, k] f32, contiguous
//   topk_ids     [T, k] i32, contiguous
void moe_route_grouped(const Tensor& logits, const Tensor& bias, int n_group, int topk_group,
                       int k, float routed_scaling_factor, const Tensor& topk_weights,
                       const Tensor& topk_ids, Stream stream = {});

// Router with softmax scores and optional expert groups, as DeepSeek-V2 does it (topk_method
// "greedy": n_group = topk_group = 1; "group_limited_greedy": groups):
//   p = softmax(logits[t, :]) in fp32, maximum subtracted (moe_route_topk_softmax's p);
//   the E experts form n_group contiguous groups of G = E / n_group; a group's score is its
//   largest p; the topk_group best groups are kept (ties: lower group index);
//   the k experts with the largest p among the kept groups' experts ONLY are chosen (ties: lower
//   expert index; a NaN p ranks below every number, so the ids are always k distinct experts of
//   kept groups); topk_ids[t, j] is the j-th, in descending order of p;
//   topk_weights[t, j] = p[id], divided by the sum of the k chosen p when renormalize, times
//   routed_scaling_factor, in fp32.
// Hugging Face's DeepseekV2 code scores the dropped groups' experts 0.0 instead of excluding
// them; as every p > 0 unless it underflows, the two agree.
//   logits       [T, E] f32/f16/bf16, rows; 1 <= E <= 512
//   n_group      divides E;  1 <= topk_group <= n_group;  1 <= k <= min(16, topk_group * G)
//   routed_scaling_factor  finite
//   topk_weights [T, k] f32, contiguous;  topk_ids [T, k] i32, contiguous
void moe_route_softmax_grouped(const Tensor& logits, int n_group, int topk_group, int k,
                               bool renormalize, float routed_scaling_factor,
                               const Tensor& topk_weights, const Tensor& topk_ids,
                               Stream stream = {});

// moe_local_expert_ids: expert parallelism's dispatch on one rank, which holds the experts
// [first, first + count) of the router's global ids (model/shard.h):
//   local_ids[t, j] = topk_ids[t, j] - first   if first <= topk_ids[t, j] < first + count
//                     kMoeNotLocal (-1)        otherwise (another rank's expert)
// Every MoE path takes kMoeNotLocal as a pair that contributes exactly nothing, on every backend
// (moe_experts, moe_permute -> ... -> moe_combine); the weights stay as the router wrote them,
// normalised over the global top-k, so the ranks' sums add up to the whole layer.
//   topk_ids   [T, k] i32, contiguous
//   first >= 0, count >= 1
//   local_ids  [T, k] i32, contiguous; may be topk_ids itself (in place)
inline constexpr int32_t kMoeNotLocal = -1;
void moe_local_expert_ids(const Tensor& topk_ids, int first, int count, const Tensor& local_ids,
                          Stream stream = {});

// ---------------------------------------------------------------------------------------------
// The MoE permutation: the (token, slot) pairs of a routing, regrouped by expert so that each
// expert's tokens are contiguous rows (the layout a grouped expert GEMM reads), and back.
// Pair p = t * k + j is token t's j-th choice, expert topk_ids[t, j].
//
// moe_permute: counts, offsets and the permuted order, deterministically (within an expert the
// pairs keep ascending pair order) and, on CUDA, without a host synchronisation (graph-capturable).
//   topk_ids       [T, k] i32, contiguous
//   num_experts    E, 1 <= E <= kMoeMaxExperts
//   expert_offsets [E + 1] i32, out: expert e's pairs are rows [offsets[e], offsets[e + 1]);
//                  offsets[0] = 0, offsets[E] = the number of pairs with a valid expert id
//   sorted_pairs   [T * k] i32, out: row r holds pair sorted_pairs[r]
//   pair_rows      [T * k] i32, out: the inverse, pair p sits in row pair_rows[p]
//   workspace      [>= moe_permute_workspace_size(T * k, E)] i32, contiguous, scratch (CUDA)
// Pairs with id kMoeNotLocal (-1: another rank's expert, moe_local_expert_ids) take the rows past
// offsets[E] (in pair order) and get pair_rows = -1, so that moe_combine skips them. Any other id
// outside [0, E) is an error on the CPU; on CUDA it is treated as kMoeNotLocal.
int64_t moe_permute_workspace_size(int64_t pairs, int64_t num_experts);
void moe_permute(const Tensor& topk_ids, int num_experts, const Tensor& expert_offsets,
                 const Tensor& sorted_pairs, const Tensor& pair_rows, const Tensor& workspace,
                 Stream stream = {});

// moe_gather: xs[r] = x[sorted_pairs[r] / k] (each pair's token row, in permuted order).
//   x            [T, H] f32/f16/bf16, rows
//   sorted_pairs [T * k] i32 from moe_permute (values in [0, T * k): checked on the CPU)
//   xs           [T * k, H] x's dtype, rows
void moe_gather(const Tensor& x, const Tensor& sorted_pairs, int k, const Tensor& xs,
                Stream stream = {});

// moe_combine: out[t] = to_dtype(sum over j = 0..k-1 of topk_weights[t, j] * ys[pair_rows[t * k + j]])
// in fp32, in j order (deterministic), rounded once; pairs with pair_rows < 0 contribute nothing.
//   ys           [T * k, H] f32/f16/bf16, rows: the experts' outputs in permuted order
//   pair_rows    [T * k] i32 from moe_permute
//   topk_weights [T, k] f32, contiguous
//   out          [T, H] f32/f16/bf16, rows
void moe_combine(const Tensor& ys, const Tensor& pair_rows, const Tensor& topk_weights,
                 const Tensor& out, Stream stream = {});

// moe_grouped_gemm: the expert GEMMs of a permuted batch (moe_permute -> moe_gather -> here ->
// here -> moe_combine). Rows [expert_offsets[e], expert_offsets[e + 1]) of x belong to expert e,
// and the offsets are read on the device (no host synchronisation; graph-capturable):
//   MoeActivation::none    y[r, :] = to_dtype(x[r, :] @ w[e]^T)               w [E, N, K], y [M, N]
//   MoeActivation::swiglu  g = to_dtype(x[r, :] @ w[e][0:I]^T), u = to_dtype(x[r, :] @ w[e][I:2I]^T),
//                          y[r, :] = to_dtype(silu(g) * u)                     w [E, 2I, K], y [M, I]
// with fp32 sums (the rounding of gemm -> silu_mul, and of moe_experts' h).
//   x              [M, K] f32/f16/bf16, rows
//   w              [E, N, K] x's dtype, contiguous (Hugging Face [out_features, in_features] per
//                  expert; for swiglu the I gate rows, then the I up rows)
//   expert_offsets [E + 1] i32, contiguous, non-decreasing, offsets[0] = 0, offsets[E] <= M (as
//                  moe_permute writes them): checked on the CPU, trusted on CUDA
//   y              [M, N or I] x's dtype, rows; rows past offsets[E] are left as they are
// On CUDA, f16/bf16 with K % 8 == 0 and 16-byte aligned rows take the Hopper (sm_90a) kernel:
// TMA and wgmma, a persistent tile scheduler over (expert, row tile, column tile), the SwiGLU in
// its epilogue; other cases take a simple kernel.
// MoeActivation::swiglu_gate_last (moe_grouped_gemm_fp8 only) is SwiGLU with the halves swapped,
// as DeepSeek's FP8 checkpoints and seed 003 store them: w[e] is I up rows, then I gate rows, and
// y = silu(x @ w[e][I:2I]^T) * (x @ w[e][0:I]^T).
enum class MoeActivation { none = 0, swiglu = 1, swiglu_gate_last = 2 };
void moe_grouped_gemm(const Tensor& x, const Tensor& w, const Tensor& expert_offsets,
                      MoeActivation activation, const Tensor& y, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// FP8 block scale (DeepSeek-V3's format): fp8 e4m3 values with one fp32 scale per 128 consecutive
// values of an activation row, or per 128 x 128 block of a weight matrix; value = fp8 * scale.
// Activation scales are stored transposed, [K / 128, rows]: scale[b, r] belongs to row r's
// columns [128 b, 128 b + 128) (seed 003's hidden_states_scale layout).
inline constexpr int kFp8Block = 128;
inline constexpr int kFp8MaxTerms = 3;

// moe_fp8_quantize: x split into `terms` fp8 block-scaled terms whose sum approximates x:
//   term 0 quantizes x; term t quantizes what the terms before leave, v = x - sum (fp32);
//   per row and 128-column block: s = amax|v| / 448 (1 when that is 0: an all-zero
//   block, or amax so small that the division underflows), q = e4m3(v / s), rounded
//   to nearest even and saturated; term t of block b is q[:, t K + 128 b ...], scale q_scale[t K / 128 + b].
// One term keeps about 4 significant bits, each further term about 4 more (three terms are close
// to fp32 for a following GEMM: seed 003's definition keeps its intermediate in fp32).
//   x        [M, K] f32/bf16, rows; K % 128 == 0
//   q        [M, terms * K] f8e4m3, rows; 1 <= terms <= kFp8MaxTerms
//   q_scale  [terms * K / 128, M] f32, rows (row stride >= M)
void moe_fp8_quantize(const Tensor& x, const Tensor& q, const Tensor& q_scale, Stream stream = {});

// moe_gather_fp8: moe_gather for fp8 rows and their scales:
//   xs[r] = x[sorted_pairs[r] / k],  xs_scale[b, r] = x_scale[b, sorted_pairs[r] / k].
//   x            [T, K] f8e4m3, rows;  x_scale [K / 128, T] f32, rows
//   sorted_pairs [T * k] i32 from moe_permute (values in [0, T * k): checked on the CPU; on
//                CUDA a value outside gives a zero row and zero scales)
//   xs           [T * k, K] f8e4m3, rows;  xs_scale [K / 128, T * k] f32, rows
void moe_gather_fp8(const Tensor& x, const Tensor& x_scale, const Tensor& sorted_pairs, int k,
                    const Tensor& xs, const Tensor& xs_scale, Stream stream = {});

// moe_grouped_gemm_fp8: moe_grouped_gemm on fp8 block-scaled operands, fp32 sums. Rows
// [expert_offsets[e], expert_offsets[e + 1]) of x belong to expert e (read on the device on CUDA;
// checked on the CPU). x may hold R terms of one operand side by side (as moe_fp8_quantize writes
// them): x is [M, R K] and every term meets the same w, so the product is sum_t x_t @ w[e]^T.
//   G = (sum_t dequant(x_t)) @ dequant(w[e])^T, in fp32
//   none:             y = G                                   w [E, N, K],  y [M, N] f32/bf16
//   swiglu:           y = silu(G[:, :I]) * G[:, I:]           w [E, 2I, K], y [M, I] f32, or
//   swiglu_gate_last: y = silu(G[:, I:]) * G[:, :I]           [M, R' I] f8e4m3 with y_scale: the
//                     fp32 h quantized into R' terms exactly as moe_fp8_quantize does it
//   x              [M, R K] f8e4m3, rows; K % 128 == 0
//   x_scale        [R K / 128, M] f32, rows (row stride >= M)
//   w              [E, N, K] f8e4m3, contiguous; N % 128 == 0 (I % 128 == 0); 1 <= E <= 512
//   w_scale        [E, N / 128, K / 128] f32, contiguous
//   expert_offsets [E + 1] i32, contiguous, non-decreasing, offsets[0] = 0, offsets[E] <= M
//   y              rows past offsets[E] are left as they are
//   y_scale        [R' I / 128, M] f32, rows, for an f8e4m3 y (an undefined Tensor otherwise)
// On CUDA with sm_90a: TMA and fp8 wgmma, 128-row x 256-weight-row tiles, the block scales
// applied in fp32 after each 128-deep slice (not inside the tensor cores' own accumulation),
// SwiGLU and the quantization in the epilogue; elsewhere a simple kernel.
void moe_grouped_gemm_fp8(const Tensor& x, const Tensor& x_scale, const Tensor& w,
                          const Tensor& w_scale, const Tensor& expert_offsets,
                          MoeActivation activation, const Tensor& y, const Tensor& y_scale,
                          Stream stream = {});

// moe_fp8_block_scale: a whole DeepSeek-V3 MoE layer on fp8 block-scaled weights, with the
// semantics of seed 003's definition moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048
// (this op takes any sizes that meet the constraints below):
//   routing as moe_route_grouped (sigmoid, bias, n_group groups, topk_group kept, top_k experts,
//   routed_scaling_factor) over the E_global experts;
//   only the E local experts [local_expert_offset, local_expert_offset + E) are computed here
//   (any offset: a local expert whose global id is outside [0, E_global) gets no tokens);
//   for each token t and each chosen local expert e (weight w_te):
//     A   = dequant(hidden_states[t]),  G1 = A @ dequant(gemm1_weights[e])^T   (fp32, [2I])
//     C   = silu(G1[I:2I]) * G1[0:I]                                            (fp32, [I])
//     O   = C @ dequant(gemm2_weights[e])^T                                     (fp32, [H])
//   output[t] = bf16(sum over the chosen local experts of w_te * O), 0 for a token without any.
// On CUDA the intermediate C is handed to the second GEMM as options.intermediate_terms fp8 terms
// (moe_fp8_quantize; the CPU reference keeps C in fp32): 3 (default) is close to fp32 and meets
// flashinfer-bench's rule against the fp32 reference by a wide margin; 1 is the usual fp8
// requantisation (faster; about 2% relative error per element, which fails the 1e-2 rule on most
// elements).
//   routing_logits       [T, E_global] f32, rows
//   routing_bias         [E_global] f32/bf16, contiguous
//   hidden_states        [T, H] f8e4m3, rows; H % 128 == 0
//   hidden_states_scale  [H / 128, T] f32, rows
//   gemm1_weights        [E, 2I, H] f8e4m3, contiguous; I % 128 == 0
//   gemm1_weights_scale  [E, 2I / 128, H / 128] f32, contiguous
//   gemm2_weights        [E, H, I] f8e4m3, contiguous
//   gemm2_weights_scale  [E, H / 128, I / 128] f32, contiguous
//   workspace            [>= moe_fp8_block_scale_workspace_bytes(...)] u8, contiguous, 256-byte
//                        aligned (CUDA; unused on the CPU, where it may be undefined)
//   output               [T, H] bf16, rows
struct MoeFp8Options {
  int n_group = 8;
  int topk_group = 4;
  int top_k = 8;
  int intermediate_terms = 3;  // 1..kFp8MaxTerms
};
int64_t moe_fp8_block_scale_workspace_bytes(int64_t tokens, int64_t hidden, int64_t intermediate,
                                            int64_t local_experts, const MoeFp8Options& options);
void moe_fp8_block_scale(const Tensor& routing_logits, const Tensor& routing_bias,
                         const Tensor& hidden_states, const Tensor& hidden_states_scale,
                         const Tensor& gemm1_weights, const Tensor& gemm1_weights_scale,
                         const Tensor& gemm2_weights, const Tensor& gemm2_weights_scale,
                         int local_expert_offset, float routed_scaling_factor,
                         const MoeFp8Options& options, const Tensor& workspace,
                         const Tensor& output, Stream stream = {});

// Experts with a SwiGLU MLP each, combined with the routing weights. For each token t and each
// j < k, with e = topk_ids[t, j]:
//   g = to_dtype(gate[e] @ x[t]),  u = to_dtype(up[e] @ x[t])     (fp32 sums, as a gemm writes them)
//   h = to_dtype(silu(g) * u)                                      (fp32, as silu_mul rounds it)
//   y_j = down[e] @ h                                              (fp32 sum, not rounded)
//   out[t] = to_dtype(sum_j topk_weights[t, j] * y_j)              (fp32, rounded once)
// to_dtype rounds to x's dtype (identity for f32). This is the dense MLP's rounding (gemm ->
// silu_mul -> gemm) except that the expert outputs are combined in fp32; transformers rounds each
// expert's output and sums them in the model dtype, a difference within the dtype's tolerance.
//   x            [T, H] f32/f16/bf16, rows
//   topk_weights [T, k] f32, contiguous
//   topk_ids     [T, k] i32, contiguous; each in [0, E), or kMoeNotLocal (below)
//   gate_up      [E, 2*I, H] x's dtype, contiguous: per expert, rows 0..I-1 are gate_proj and rows
//                I..2I-1 up_proj, each in the Hugging Face [out_features, in_features] layout
//   down         [E, H, I] x's dtype, contiguous (down_proj, [out_features, in_features])
//   workspace    [T*k, I] f32, contiguous: scratch for the h vectors (contents undefined after)
//   out          [T, H] x's dtype, rows; may be x itself
// A pair with id kMoeNotLocal (-1: another rank's expert, moe_local_expert_ids) contributes
// nothing. Any other expert id outside [0, E) is an error on the CPU; on CUDA (where checking
// would need a host synchronisation) that pair contributes nothing too.
//
// FP8 experts (the overload with scales; the fp8 grouped path's weights, Builder::experts' layout):
//   gate_up        [E, 2*I, H] f8e4m3, contiguous;  gate_up_scale [E, 2*I/128, H/128] f32, contiguous
//   down           [E, H, I] f8e4m3, contiguous;    down_scale    [E, H/128, I/128] f32, contiguous
// with H % 128 == 0 and I % 128 == 0 (so gate and up rows never share a scale block). A weight is
// its e4m3 value times its 128 x 128 block's scale; the products with x (and h) are exact and
// summed in fp32 (fp64 on the CPU), the dense fp8 GEMV's arithmetic: the activations are not
// quantized, unlike moe_grouped_gemm_fp8's. The roundings are those above. x is f16/bf16 (f32 on
// the CPU only). With 16-bit weights both scales must be undefined (the overload without them).
// MoeExpertsExtras::quantize_activations (fp8 weights only) quantizes the routed experts'
// activations instead, as moe_grouped_gemm_fp8's inputs are (DeepSeek-V3's recipe): x[t], and
// each h after its rounding, per 128 columns into one e4m3 term (moe_fp8_quantize's rule: s =
// amax / 448, q = e4m3(v / s)); each product is then the sum over 128-column blocks of
// s_w * s_v * sum_c w_code * q, in fp32 (fp64 on the CPU). The kernels feed the weights to the
// fp8 tensor cores as loaded. The shared experts below stay exact, as the dense MLP they are in
// the other paths (gemm and swiglu_gemm_add at decode), so that a split of them between ranks or
// calls gives the same numbers.
//
// Shared experts and the residual (MoeExpertsExtras, the overload that takes it): DeepSeek's
// layer in one call at decode, instead of the routed experts, a dense SwiGLU MLP and two adds.
//   shared_gate_up [2*S, H], shared_down [H, S]: the shared experts as one MLP (the checkpoint's
//                  shared_experts, gate rows then up rows), S a multiple of I; in the routed
//                  experts' format (x's dtype, or fp8 with [2*S/128, H/128] and [H/128, S/128]
//                  block scales). It runs on every token with the dense MLP's roundings:
//                  shared = to_dtype(shared_down @ to_dtype(silu(g) * u)), g and u as above.
//   residual       [T, H] x's dtype, rows, or undefined.
// Then, with routed = to_dtype(sum_j topk_weights[t, j] * y_j) (the plain op's out),
//   moe    = to_dtype(routed + shared)               (routed alone without shared experts)
//   out[t] = to_dtype(residual[t] + moe), or moe without a residual
// (forward()'s order: residual + (routed + shared), each sum rounded). out may be residual (in
// place) or x; the workspace is then [T * (k + S / I), I].
struct MoeExpertsExtras {
  Weight shared_gate_up, shared_down;  // undefined: no shared experts
  Tensor residual;                     // undefined: out = moe
  bool quantize_activations = false;   // fp8 weights: the routed experts' x and h quantized (above)
};
void moe_experts(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids,
                 const Tensor& gate_up, const Tensor& down, const Tensor& workspace,
                 const Tensor& out, const Tensor& gate_up_scale, const Tensor& down_scale,
                 const MoeExpertsExtras& extras, Stream stream = {});
inline void moe_experts(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids,
                        const Tensor& gate_up, const Tensor& down, const Tensor& workspace,
                        const Tensor& out, const Tensor& gate_up_scale, const Tensor& down_scale,
                        Stream stream = {}) {
  moe_experts(x, topk_weights, topk_ids, gate_up, down, workspace, out, gate_up_scale, down_scale,
              MoeExpertsExtras{}, stream);
}
inline void moe_experts(const Tensor& x, const Tensor& topk_weights, const Tensor& topk_ids,
                        const Tensor& gate_up, const Tensor& down, const Tensor& workspace,
                        const Tensor& out, Stream stream = {}) {
  moe_experts(x, topk_weights, topk_ids, gate_up, down, workspace, out, Tensor{}, Tensor{}, stream);
}

// ---------------------------------------------------------------------------------------------
// kv_append: writes new keys and values into a paged KV cache. Token i goes to slot slots[i],
// i.e. page slots[i] / page_size, offset slots[i] % page_size.
//   k, v             [n, kv_heads, head_dim] f32/f16/bf16, last dim dense (views into QKV output)
//   slots            [n] i32, each in [0, num_pages * page_size): checked on the CPU, trusted on
//                    CUDA (checking would need a host synchronisation)
//   k_pages, v_pages [num_pages, page_size, kv_heads, head_dim], k's dtype, contiguous
// v and v_pages may both be undefined: keys only (an MLA cache of latent rows, attention_mla's).
void kv_append(const Tensor& k, const Tensor& v, const Tensor& slots, const Tensor& k_pages,
               const Tensor& v_pages, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// paged_kv_gather: the first kv_lens[b] tokens of each sequence b of a paged cache, in order,
// into contiguous ragged K and V: rows cu_seqlens_kv[b] .. cu_seqlens_kv[b+1] of k_out / v_out
// are sequence b's tokens 0 .. kv_lens[b]-1 (token t of b lives in page page_table[b, t / page_size]
// at offset t % page_size). The layout attention_prefill reads, for the prefill of a chunk that
// follows cached tokens.
//   kv             PagedKV as for attention(): k_pages / v_pages [num_pages, page_size, kv_heads,
//                  head_dim] f32/f16/bf16, contiguous; page_table [batch, max_pages] i32,
//                  contiguous (only a sequence's first ceil(kv_len / page_size) entries are read);
//                  kv_lens [batch] i32, contiguous, each <= max_pages * page_size
//   cu_seqlens_kv  [batch + 1] i32, contiguous: cu[0] = 0, cu[b+1] - cu[b] = kv_lens[b]
//   k_out, v_out   [total_kv, kv_heads, head_dim] k_pages' dtype, contiguous; total_kv >= cu[batch];
//                  rows past cu[batch] are left as they are
// Shapes and dtypes are checked on every device; index values (cu_seqlens_kv, kv_lens, page ids)
// on the CPU only, as attention(). On CUDA they are read on the device (one kernel for K and V,
// no host synchronisation: graph-capturable); bad values there give wrong rows, never an access
// out of bounds: a row past total_kv, a token past kv_lens[b] or the table's capacity, or a page
// id outside [0, num_pages) is not written.
void paged_kv_gather(const PagedKV& kv, const Tensor& cu_seqlens_kv, const Tensor& k_out,
                     const Tensor& v_out, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// attention_decode: one query token per sequence over a paged KV cache, as a decode step runs
// it. The result is attention() with cu_seqlens_q = {0, 1, ..., batch} (causal and full agree
// for one query): the query of sequence b sits at position kv_lens[b] - 1 and sees all its keys.
// On CUDA the keys are cut into chunks (split-KV); each block takes one chunk for the query heads
// that share a KV head, writes its partial softmax to the workspace, and a second kernel merges
// the chunks. The grid depends only on shapes (the chunk length on each sequence's kv_len, read
// on the device), so a call is graph-capturable.
//   q          [batch, q_heads, head_dim] f32/f16/bf16, last dim dense
//   kv         as for attention(), with batch = page_table.shape[0] and every kv_lens[b] >= 1
//   out        [batch, q_heads, head_dim] q's dtype, last dim dense
//   lse        [batch, q_heads] f32, contiguous (natural-log log-sum-exp), or undefined
//   workspace  f32, contiguous, any shape, at least attention_decode_workspace_floats(batch,
//              q_heads, head_dim, max_kv_len) elements with max_kv_len >= the page table's
//              capacity, page_table.shape[1] * page_size (contents undefined after the call)
// On CUDA, f16/bf16 with head_dim 64 or 128 take the split-KV kernels; other dtypes and head_dims
// (up to 256) take attention()'s kernel. Index values are checked on the CPU only, as attention().
int64_t attention_decode_workspace_floats(int64_t batch, int64_t q_heads, int64_t head_dim,
                                          int64_t max_kv_len);
void attention_decode(const Tensor& q, const PagedKV& kv, float softmax_scale, const Tensor& out,
                      const Tensor& lse, const Tensor& workspace, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// qk_norm_rope_kv_append: a decode step's per-head q/k norm, RoPE and KV-cache append in one op.
// Exactly: if the norms are given, rms_norm(q, q_norm, eps, q) and rms_norm(k, k_norm, eps, k)
// (per head); then rope_apply(q, k, positions, rope); then kv_append(k, v, slots, k_pages,
// v_pages). q and k are left normed and rotated in place. On CUDA one kernel does all of it, with
// results bit-identical to the three CUDA ops called in sequence.
//   q                [n, q_heads, head_dim] f32/f16/bf16, last dim dense, rows on a RowGrid
//   k, v             [n, kv_heads, head_dim] q's dtype, last dim dense (views into QKV output)
//   q_norm, k_norm   [head_dim] q's dtype, contiguous; both given or both undefined (no norm)
//   positions        [n] i32 or i64, contiguous (values not checked)
//   slots            [n] i32, as kv_append (checked on the CPU, trusted on CUDA)
//   k_pages, v_pages [num_pages, page_size, kv_heads, head_dim], q's dtype, contiguous
// head_dim even and <= kQkRopeKvMaxHeadDim. Config errors are reported as rope_apply's.
inline constexpr int64_t kQkRopeKvMaxHeadDim = 1024;
void qk_norm_rope_kv_append(const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& q_norm, const Tensor& k_norm, float eps,
                            const Tensor& positions, const RopeConfig& rope, const Tensor& slots,
                            const Tensor& k_pages, const Tensor& v_pages, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// qk_norm_rope_kv_append_attention_decode: a decode step's attention in one op. Exactly
// qk_norm_rope_kv_append(q, k, v, q_norm, k_norm, eps, positions, rope, slots, kv.k_pages,
// kv.v_pages) followed by attention_decode(q, kv, softmax_scale, out, lse, workspace), with the
// arguments of those two ops (q is the query of each sequence: n = batch), and:
//   slots      [batch] i32: slots[b] is the cache slot of sequence b's key kv_lens[b] - 1, where
//              its page table puts the new token (checked on the CPU, trusted on CUDA)
//   counters   i32, contiguous, at least attention_decode_counters(batch, q_heads, kv_heads)
//              elements, all zero before the first call; every call leaves them zero. Checked,
//              no longer read on CUDA (its kernel's last block merged chunks through them until
//              2026-12-06; the combine kernel does it now): kept for the callers of this API
//              until its next incompatible change
// q and k are unspecified after the call (CUDA does not write the rotated heads back). On CUDA,
// where attention_decode takes its split-KV kernels (f16/bf16, head_dim 64 or 128), one kernel
// does it all: each block normalises and rotates its own query heads, the new key and value enter
// its tiles from shared memory as they are appended (the cache rows are bit-identical to
// qk_norm_rope_kv_append's); a sequence of up to 256 keys is one chunk, a longer one is split and
// a second kernel merges the chunks (attention_decode's). The output equals attention_decode's
// when a sequence takes one chunk, and to rounding otherwise. As a programmatic dependent launch,
// the kernel reads the cache's older keys, kv_lens and the page table before the kernel before it
// in the stream has finished: that kernel must not write them (in a decode step it is the QKV
// projection).
// Elsewhere the two ops run in sequence. Graph-capturable.
int64_t attention_decode_counters(int64_t batch, int64_t q_heads, int64_t kv_heads);
void qk_norm_rope_kv_append_attention_decode(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const Tensor& q_norm, const Tensor& k_norm, float eps,
                                             const Tensor& positions, const RopeConfig& rope,
                                             const Tensor& slots, const PagedKV& kv,
                                             float softmax_scale, const Tensor& out,
                                             const Tensor& lse, const Tensor& workspace,
                                             const Tensor& counters, Stream stream = {});

// ---------------------------------------------------------------------------------------------
// Fused decode ops: a small op joined to the projection next to it, so a decode step launches
// fewer kernels. Each is exactly the composition of the primitives named (the CPU reference runs
// them in sequence). On CUDA, 1 <= m <= 4 rows of f16/bf16 with k % 8 == 0 and 16-byte aligned
// activation rows and weights take one fused GEMV kernel (beyond 4 rows the fused prologue costs
// more than the launch it saves); anything else runs the primitive ops
// through the caller's scratch tensors (nothing is allocated; graph-capturable either way). The
// scratch tensors' contents are unspecified after a call. Dtypes and layouts are gemm's.
//
// add_inplace: residual = to_dtype(residual + x).
//   x, residual: same shape, f32/f16/bf16, rows
void add_inplace(const Tensor& x, const Tensor& residual, Stream stream = {});

// rms_norm_gemm: out = gemm(rms_norm(x, norm_weight, eps), w, bias), rms_norm's rounding.
//   x           [m, k] rows;  norm_weight [k] x's dtype, contiguous
//   w, bias     as gemm (bias [n] in out's dtype, or undefined)
//   out         [m, n] x's dtype or f32, rows
//   normed      [m, k] x's dtype, rows: scratch for the unfused path
void rms_norm_gemm(const Tensor& x, const Tensor& norm_weight, float eps, const Weight& w,
                   const Tensor& bias, const Tensor& out, const Tensor& normed,
                   Stream stream = {});
// rms_norm_gemm_keep_normed: rms_norm_gemm that also leaves rms_norm(x) in normed, for a caller
// that reads it next (the MoE router: the experts take the same normed rows). On CUDA the fused
// kernel's block 0 writes it after its product (the bits the product used); rms_norm_gemm does
// not, so its other blocks' path stays as short as it was.
void rms_norm_gemm_keep_normed(const Tensor& x, const Tensor& norm_weight, float eps,
                               const Weight& w, const Tensor& bias, const Tensor& out,
                               const Tensor& normed, Stream stream = {});

// rms_norm_gemm_argmax (greedy decoding's final norm + LM head + argmax):
// ids = argmax(rms_norm_gemm(x, norm_weight, eps, w, no bias, f32 logits), -1), torch.argmax's
// order (NaN above every number, ties to the lower index). On CUDA the fused path is the GEMV
// with an epilogue that keeps one key per row and 16 columns, plus a small reduction kernel: no
// logits are written.
//   x [m, k], norm_weight [k], w [n, k]: as rms_norm_gemm
//   ids           [m] i32 or i64, contiguous
//   logits        [m, n] f32 rows: scratch (the unfused path's logits; the fused kernel keeps one
//                 8-byte key per row and 16 columns in it)
//   normed        [m, k] x's dtype, rows: scratch for the unfused path
void rms_norm_gemm_argmax(const Tensor& x, const Tensor& norm_weight, float eps, const Tensor& w,
                          const Tensor& ids, const Tensor& logits, const Tensor& normed,
                          Stream stream = {});

// gemm_add: residual = to_dtype(residual + to_dtype(a @ w^T + bias)) (o_proj / down_proj joining
// the residual stream, with transformers' two roundings).
//   a [m, k], w [n, k], bias [n] a's dtype or undefined: as gemm
//   residual [m, n] a's dtype, rows (in-out);  scratch [m, n] a's dtype, rows
void gemm_add(const Tensor& a, const Weight& w, const Tensor& bias, const Tensor& residual,
              const Tensor& scratch, Stream stream = {});

// swiglu_gemm_add: residual = to_dtype(residual + to_dtype(silu_mul(gate_up) @ w^T)), silu_mul's
// rounding (one rounding of silu(g) * u).
//   gate_up [m, 2I] rows (gate = [:, :I], up = [:, I:]);  w [n, I] gate_up's dtype, contiguous
//   residual [m, n] rows (in-out);  act [m, I] rows, scratch [m, n] rows: all gate_up's dtype
void swiglu_gemm_add(const Tensor& gate_up, const Weight& w, const Tensor& residual,
                     const Tensor& act, const Tensor& scratch, Stream stream = {});

// gemv_chain: the fused products above (rms_norm_gemm, gemm_add, swiglu_gemm_add), run in order
// as one op, each stage free to read what the stages before it wrote: a decode layer's o_proj ->
// gate_up -> down -> the next layer's qkv. Results are the ops' (their roundings), up to the order
// of the fp32 sums. On CUDA (compute 9.0+), for one activation row and 16-bit weights, one
// persistent kernel runs every stage: each SM streams its share of every stage's weights through
// a ring in shared memory from the start, while the stages wait on each other through a grid-wide
// counter, so the weight stream does not stop (and ramp up again) at each product's boundary
// (docs/perf/decode.md, version 17). Otherwise, and on the CPU, the ops run one after another.
// The kernel's blocks all wait on each other, one per SM: while another kernel holds SMs for
// its whole run (a persistent kernel on another stream or process, another gemv_chain), it may
// not get them all; a stage that is not reached within ~10 s stops the kernel with a CUDA error
// rather than hang.
//   stages   1 to kMaxChainStages, each checked as its op checks its arguments
//   counter  [1] i32 on the stages' device, zero at the call; the kernel leaves it zero. Chains
//            that may run at the same time (programmatic launch) need a counter each.
struct ChainStage {
  enum class Op { rms_norm_gemm, gemm_add, swiglu_gemm_add };
  Op op = Op::gemm_add;
  Tensor x;            // rms_norm_gemm's x, gemm_add's a, swiglu_gemm_add's gate_up
  Tensor norm_weight;  // rms_norm_gemm
  float eps = 0.0f;    // rms_norm_gemm
  Weight w;
  Tensor bias;         // rms_norm_gemm, gemm_add (or undefined)
  Tensor out;          // rms_norm_gemm's out; gemm_add's and swiglu_gemm_add's residual
  Tensor scratch;      // rms_norm_gemm's normed; gemm_add's and swiglu_gemm_add's scratch
  Tensor act;          // swiglu_gemm_add's act

  // The stage of each op, with the op's own arguments.
  static ChainStage rms_norm_gemm(const Tensor& x, const Tensor& norm_weight, float eps,
                                  const Weight& w, const Tensor& bias, const Tensor& out,
                                  const Tensor& normed);
  static ChainStage gemm_add(const Tensor& a, const Weight& w, const Tensor& bias,
                             const Tensor& residual, const Tensor& scratch);
  static ChainStage swiglu_gemm_add(const Tensor& gate_up, const Weight& w, const Tensor& residual,
                                    const Tensor& act, const Tensor& scratch);
};
constexpr int kMaxChainStages = 8;
void gemv_chain(std::span<const ChainStage> stages, const Tensor& counter, Stream stream = {});

}  // namespace braid::ops
