// `braidinfer bench attention`: the arithmetic behind its rows (FLOPs, bytes, memory figures),
// which query rows it checks, and the fp64 reference it checks them against. CPU-only (no CUDA
// headers), so it is unit-tested in CI; the command itself is
// suites/cuda/attention.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bench/harness/accuracy.h"
#include "bench/harness/suite.h"

namespace braid::bench {

// A batch of `batch` sequences of `seq_len` tokens each (queries = keys), as ops::attention_prefill
// takes them: q/out [batch * seq_len, q_heads, head_dim], k/v [batch * seq_len, kv_heads,
// head_dim].
struct PrefillShape {
  int64_t batch = 1, seq_len = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  bool causal = false;
};

// (query, key) score entries one query head sees in one sequence of q_len queries over kv_len keys.
// The queries are the sequence's last q_len tokens (ops.h), so causally query i sees keys
// 0 .. kv_len - q_len + i: q_len * (kv_len - q_len) + q_len * (q_len + 1) / 2 entries, which is
// S * (S + 1) / 2 when q_len = kv_len = S. Without a mask, q_len * kv_len.
double attention_visible_pairs(int64_t q_len, int64_t kv_len, bool causal);

// FLOPs of the forward pass: two multiply-adds (q.k and p.v) per head_dim element of every
// visible score entry, 4 * head_dim * batch * q_heads * visible. Only the entries a causal mask
// leaves are counted (not half of S * S), so causal and full rows compare fairly.
double attention_prefill_flops(const PrefillShape& s);

// Minimum bytes through device memory: q, k, v read once and out written once, `elem_bytes` each
// (the f32 log-sum-exp, 1 / (2 * head_dim) of out, is left out as in the decode bench).
double attention_prefill_bytes(const PrefillShape& s, size_t elem_bytes);

// Device memory a naive implementation needs beyond its inputs and outputs: the S x S score
// matrix of every (sequence, head) in `score_bytes` per entry plus the softmax of it in
// `softmax_bytes` per entry (bf16 scores, fp32 softmax: 2 + 4).
double naive_attention_extra_bytes(const PrefillShape& s, size_t score_bytes = 2,
                                   size_t softmax_bytes = 4);

// The query rows (0-based, within one sequence) to check against the reference: the first and
// last rows, the rows on either side of every tile boundary a kernel is likely to use (multiples
// of 64 up to 512, and 64 / 128 before the end), the middle, then rows drawn from `seed` until
// there are `count`. Sorted, distinct, all < seq_len; every row when seq_len <= count.
std::vector<int64_t> validation_rows(int64_t seq_len, int count, uint64_t seed);

// Exact attention of one query vector, in double: scores q.k_j * scale for keys j < n, softmax,
// out = sum_j p_j v_j. Key j's vector starts at k + j * kv_stride (likewise v), so k and v may
// point into [tokens, kv_heads, head_dim] rows at one head. Writes head_dim values to `out` and
// returns the natural-log log-sum-exp of the scaled scores (what ops::attention_prefill writes
// to lse).
double reference_attention_row(const float* q, const float* k, const float* v, int64_t n,
                               int64_t head_dim, int64_t kv_stride, double scale, double* out);


// `bench attention`: --sweep, --gqa, --quick; exits 1 when a case fails its fp64 check.
SuiteRun attention_command(CLI::App& cmd);  // suites/cuda/attention.cpp

}  // namespace braid::bench
