// `bench kernels`: attention_prefill (K/V contiguous), attention (paged, causal prefill) and
// attention_decode (paged, one query per sequence). q, k and v (or the pages) rotate over the
// case's input sets; the output is one tensor. The check is bench attention's: query rows of
// validation_rows() (ends, tile edges, random) of heads 0 and H-1, in the first and last sequence
// (every sequence for decode), against reference_attention_row() in fp64 on the same bf16 inputs.
// Also paged_kv_gather (the cache of the paged cases, its pages shuffled), checked exactly against
// the CPU op on every row.
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>

#include <fmt/format.h>

#include "bench/harness/cuda/kernels.h"
#include "bench/suites/attention.h"
#include "bench/suites/cuda/kernels.h"
#include "braid/error.h"
#include "braid/ops.h"

namespace braid::bench::kernel_suite {

namespace {

constexpr int kQueryRowsChecked = 64;
constexpr int64_t kPageSize = 16;

float softmax_scale(const KernelCase& c) { return 1.0f / std::sqrt(float(c.head_dim)); }

// A contiguous host tensor's elements as floats (bf16 converts exactly).
std::vector<float> floats_of(const Tensor& host) {
  std::vector<float> v(static_cast<size_t>(host.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_float(host.data, host.dtype, int64_t(i));
  return v;
}

// Tokens [start, start + len) of a device tensor seen as [tokens, kv_heads, head_dim] rows (K/V,
// or a whole paged cache flattened to its slots), as host floats.
std::vector<float> host_tokens(const Tensor& t, const KernelCase& c, int64_t start, int64_t len) {
  const int64_t tokens = t.numel() / (c.kv_heads * c.head_dim);
  const Tensor flat = Tensor::contiguous(
      t.data, t.dtype, t.device, std::vector<int64_t>{tokens, c.kv_heads, c.head_dim}.data(), 3);
  return floats_of(to_host(flat.slice(0, start, start + len)));
}

// Query rows `rows` of sequence b (global row = first_row + i) of heads 0 and H-1 against the
// fp64 reference over keys k, v ([kv_len, kv_heads, head_dim] floats); query i sees
// visible(i) keys.
void check_sequence(ErrorAccumulator& acc, const KernelCase& c, const Tensor& q, const Tensor& out,
                    int64_t first_row, const std::vector<int64_t>& rows,
                    const std::vector<float>& k, const std::vector<float>& v,
                    const std::function<int64_t(int64_t)>& visible) {
  const int64_t D = c.head_dim, group = c.q_heads / c.kv_heads;
  std::vector<int64_t> global;
  for (int64_t i : rows) global.push_back(first_row + i);
  const std::vector<float> qs = floats_of(host_rows(q, global));
  const std::vector<float> os = floats_of(host_rows(out, global));
  std::vector<double> ref(static_cast<size_t>(D));
  for (size_t r = 0; r < rows.size(); ++r)
    for (int64_t h : {int64_t{0}, c.q_heads - 1}) {
      const int64_t kv = h / group, row = static_cast<int64_t>(r) * c.q_heads + h;
      reference_attention_row(qs.data() + row * D, k.data() + kv * D, v.data() + kv * D,
                              visible(rows[r]), D, c.kv_heads * D, softmax_scale(c), ref.data());
      acc.add(os.data() + row * D, ref.data(), D);
    }
}

// The first and last sequence (the last exercises the offsets).
std::vector<int64_t> checked_sequences(int64_t batch) {
  return batch > 1 ? std::vector<int64_t>{0, batch - 1} : std::vector<int64_t>{0};
}

std::string prefill_reference(size_t rows, size_t seqs) {
  return fmt::format("cpu fp64, {} query rows x 2 heads x {} sequence{}", rows, seqs,
                     seqs > 1 ? "s" : "");
}

OwnedTensor device_i32(const std::vector<int32_t>& values, Device device) {
  const OwnedTensor host = host_i32(values);
  OwnedTensor t(DType::i32, {static_cast<int64_t>(values.size())}, device);
  copy(host, t);
  return t;
}

// {0, step, 2 step, ..., n step}
std::vector<int32_t> steps(int64_t n, int64_t step) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i <= n; ++i) v.push_back(static_cast<int32_t>(i * step));
  return v;
}

CasePlan plan_prefill(const KernelCase& c, const SuiteEnv& env) {
  struct State {
    SetTensor q, k, v;
    OwnedTensor cu_seqlens, out;
  };
  const int sets = case_sets(c, env);
  auto st = std::make_shared<State>();
  const int64_t B = c.tokens, S = c.seq_len, tokens = B * S;
  st->q = SetTensor(DType::bf16, {tokens, c.q_heads, c.head_dim}, sets, env.device);
  st->k = SetTensor(DType::bf16, {tokens, c.kv_heads, c.head_dim}, sets, env.device);
  st->v = SetTensor(DType::bf16, {tokens, c.kv_heads, c.head_dim}, sets, env.device);
  st->q.fill_uniform(env.seed, -1.0f, 1.0f);
  st->k.fill_uniform(env.seed + 1, -1.0f, 1.0f);
  st->v.fill_uniform(env.seed + 2, -1.0f, 1.0f);
  st->cu_seqlens = device_i32(steps(B, S), env.device);
  st->out = OwnedTensor(DType::bf16, {tokens, c.q_heads, c.head_dim}, env.device);
  CasePlan p;
  p.sets = sets;
  p.launch = [st, c](int s, Stream stream) {
    ops::attention_prefill(st->q[s], st->k[s], st->v[s], st->cu_seqlens, st->cu_seqlens,
                           static_cast<int>(c.seq_len), true, softmax_scale(c), st->out, Tensor{},
                           stream);
  };
  p.check = [st, c, seed = env.seed] {
    fill_bytes(st->out, 0xFF);
    ops::attention_prefill(st->q[0], st->k[0], st->v[0], st->cu_seqlens, st->cu_seqlens,
                           static_cast<int>(c.seq_len), true, softmax_scale(c), st->out, Tensor{});
    const std::vector<int64_t> rows = validation_rows(c.seq_len, kQueryRowsChecked, seed);
    const std::vector<int64_t> seqs = checked_sequences(c.tokens);
    ErrorAccumulator acc;
    for (int64_t b : seqs) {
      const int64_t start = b * c.seq_len;
      check_sequence(acc, c, st->q[0], st->out, start, rows,
                     host_tokens(st->k[0], c, start, c.seq_len),
                     host_tokens(st->v[0], c, start, c.seq_len),
                     [](int64_t i) { return i + 1; });
    }
    return make_accuracy(acc, c, prefill_reference(rows.size(), seqs.size()));
  };
  p.note = "no lse" + rotation(sets, "q, k, v");
  return p;
}

// The paged cache of `batch` sequences of `len` tokens: sequence b owns pages b P .. b P + P - 1
// (P = len / 16, rounded up), in order.
struct Paged {
  SetTensor k_pages, v_pages;
  OwnedTensor page_table, kv_lens;
  int64_t pages_per_seq = 0;
  ops::PagedKV kv(int set) const { return {k_pages[set], v_pages[set], page_table, kv_lens}; }
};

void make_paged(Paged& p, const KernelCase& c, const SuiteEnv& env, int sets, int64_t len) {
  const int64_t B = c.tokens, P = (len + kPageSize - 1) / kPageSize;
  p.pages_per_seq = P;
  p.k_pages = SetTensor(DType::bf16, {B * P, kPageSize, c.kv_heads, c.head_dim}, sets, env.device);
  p.v_pages = SetTensor(DType::bf16, {B * P, kPageSize, c.kv_heads, c.head_dim}, sets, env.device);
  p.k_pages.fill_uniform(env.seed + 1, -1.0f, 1.0f);
  p.v_pages.fill_uniform(env.seed + 2, -1.0f, 1.0f);
  std::vector<int32_t> table(static_cast<size_t>(B * P));
  for (int64_t i = 0; i < B * P; ++i) table[i] = static_cast<int32_t>(i);
  const OwnedTensor table_host = host_i32(table);
  p.page_table = OwnedTensor(DType::i32, {B, P}, env.device);
  copy(table_host.view().reshape({B, P}), p.page_table);
  p.kv_lens = device_i32(std::vector<int32_t>(static_cast<size_t>(B), static_cast<int32_t>(len)),
                         env.device);
}

CasePlan plan_paged_prefill(const KernelCase& c, const SuiteEnv& env) {
  struct State {
    Paged cache;
    SetTensor q;
    OwnedTensor cu_seqlens, out;
  };
  const int sets = case_sets(c, env);
  auto st = std::make_shared<State>();
  const int64_t B = c.tokens, S = c.seq_len;
  make_paged(st->cache, c, env, sets, S);
  st->q = SetTensor(DType::bf16, {B * S, c.q_heads, c.head_dim}, sets, env.device);
  st->q.fill_uniform(env.seed, -1.0f, 1.0f);
  st->cu_seqlens = device_i32(steps(B, S), env.device);
  st->out = OwnedTensor(DType::bf16, {B * S, c.q_heads, c.head_dim}, env.device);
  CasePlan p;
  p.sets = sets;
  p.launch = [st, c](int s, Stream stream) {
    ops::attention(st->q[s], st->cu_seqlens, st->cache.kv(s), true, softmax_scale(c), st->out,
                   Tensor{}, stream);
  };
  p.check = [st, c, seed = env.seed] {
    fill_bytes(st->out, 0xFF);
    ops::attention(st->q[0], st->cu_seqlens, st->cache.kv(0), true, softmax_scale(c), st->out,
                   Tensor{});
    const std::vector<int64_t> rows = validation_rows(c.seq_len, kQueryRowsChecked, seed);
    const std::vector<int64_t> seqs = checked_sequences(c.tokens);
    ErrorAccumulator acc;
    for (int64_t b : seqs) {
      const int64_t first_slot = b * st->cache.pages_per_seq * kPageSize;
      check_sequence(acc, c, st->q[0], st->out, b * c.seq_len, rows,
                     host_tokens(st->cache.k_pages[0], c, first_slot, c.seq_len),
                     host_tokens(st->cache.v_pages[0], c, first_slot, c.seq_len),
                     [](int64_t i) { return i + 1; });
    }
    return make_accuracy(acc, c, prefill_reference(rows.size(), seqs.size()));
  };
  p.note = fmt::format("pages of 16 in order; no lse{}",
                       rotation(sets, "q, pages"));
  return p;
}

CasePlan plan_decode(const KernelCase& c, const SuiteEnv& env) {
  struct State {
    Paged cache;
    SetTensor q;
    OwnedTensor out, workspace;
  };
  const int sets = case_sets(c, env);
  auto st = std::make_shared<State>();
  const int64_t B = c.tokens, ctx = c.seq_len;
  make_paged(st->cache, c, env, sets, ctx);
  st->q = SetTensor(DType::bf16, {B, c.q_heads, c.head_dim}, sets, env.device);
  st->q.fill_uniform(env.seed, -1.0f, 1.0f);
  st->out = OwnedTensor(DType::bf16, {B, c.q_heads, c.head_dim}, env.device);
  const int64_t capacity = st->cache.pages_per_seq * kPageSize;
  st->workspace = OwnedTensor(
      DType::f32, {ops::attention_decode_workspace_floats(B, c.q_heads, c.head_dim, capacity)},
      env.device);
  CasePlan p;
  p.sets = sets;
  p.launch = [st, c](int s, Stream stream) {
    ops::attention_decode(st->q[s], st->cache.kv(s), softmax_scale(c), st->out, Tensor{},
                          st->workspace, stream);
  };
  p.check = [st, c] {
    fill_bytes(st->out, 0xFF);
    ops::attention_decode(st->q[0], st->cache.kv(0), softmax_scale(c), st->out, Tensor{},
                          st->workspace);
    ErrorAccumulator acc;
    for (int64_t b = 0; b < c.tokens; ++b) {
      const int64_t first_slot = b * st->cache.pages_per_seq * kPageSize;
      check_sequence(acc, c, st->q[0], st->out, b, {0},
                     host_tokens(st->cache.k_pages[0], c, first_slot, c.seq_len),
                     host_tokens(st->cache.v_pages[0], c, first_slot, c.seq_len),
                     [&](int64_t) { return c.seq_len; });
    }
    return make_accuracy(acc, c, fmt::format("cpu fp64, heads 0 and {} of every sequence",
                                             c.q_heads - 1));
  };
  p.note = fmt::format("split-KV; pages of 16 in order; no lse{}",
                       rotation(sets, "q, pages"));
  return p;
}

// paged_kv_gather of every sequence's seq_len cached tokens into K/V [B S, kv_heads, head_dim].
// The page table is a fixed shuffle of the pool (a cache after some traffic), the same for every
// input set; the pages rotate.
CasePlan plan_gather(const KernelCase& c, const SuiteEnv& env) {
  struct State {
    Paged cache;
    OwnedTensor cu_seqlens, k_out, v_out;
  };
  const int sets = case_sets(c, env);
  auto st = std::make_shared<State>();
  const int64_t B = c.tokens, S = c.seq_len;
  make_paged(st->cache, c, env, sets, S);
  std::vector<int32_t> table(static_cast<size_t>(B * st->cache.pages_per_seq));
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  std::shuffle(table.begin(), table.end(), std::mt19937_64(env.seed + 3));
  const OwnedTensor table_host = host_i32(table);
  copy(table_host.view().reshape({B, st->cache.pages_per_seq}), st->cache.page_table);
  st->cu_seqlens = device_i32(steps(B, S), env.device);
  st->k_out = OwnedTensor(DType::bf16, {B * S, c.kv_heads, c.head_dim}, env.device);
  st->v_out = OwnedTensor(DType::bf16, {B * S, c.kv_heads, c.head_dim}, env.device);
  CasePlan p;
  p.sets = sets;
  p.launch = [st](int s, Stream stream) {
    ops::paged_kv_gather(st->cache.kv(s), st->cu_seqlens, st->k_out, st->v_out, stream);
  };
  p.check = [st, c] {
    fill_bytes(st->k_out, 0xFF);
    fill_bytes(st->v_out, 0xFF);
    ops::paged_kv_gather(st->cache.kv(0), st->cu_seqlens, st->k_out, st->v_out);
    const OwnedTensor k_pages = to_host(st->cache.k_pages[0]);
    const OwnedTensor v_pages = to_host(st->cache.v_pages[0]);
    const OwnedTensor table = to_host(st->cache.page_table), lens = to_host(st->cache.kv_lens);
    const OwnedTensor cu = to_host(st->cu_seqlens);
    const std::vector<int64_t> shape = {c.tokens * c.seq_len, c.kv_heads, c.head_dim};
    OwnedTensor k_ref(DType::bf16, shape, Device::cpu()), v_ref(DType::bf16, shape, Device::cpu());
    ops::paged_kv_gather({k_pages, v_pages, table, lens}, cu, k_ref, v_ref);
    const OwnedTensor k_got = to_host(st->k_out), v_got = to_host(st->v_out);
    ErrorAccumulator acc;
    add_values(acc, k_got.data(), k_ref.data(), DType::bf16, k_ref.view().numel());
    add_values(acc, v_got.data(), v_ref.data(), DType::bf16, v_ref.view().numel());
    return make_accuracy(acc, c, "cpu, exact, every k and v row");
  };
  p.note = fmt::format("pages of 16, shuffled{}", rotation(sets, "pages"));
  return p;
}

}  // namespace

CasePlan plan_attention_case(const KernelCase& c, const SuiteEnv& env) {
  switch (c.op) {
    case KernelOp::attention_prefill: return plan_prefill(c, env);
    case KernelOp::attention: return plan_paged_prefill(c, env);
    case KernelOp::attention_decode: return plan_decode(c, env);
    case KernelOp::paged_kv_gather: return plan_gather(c, env);
    default: break;
  }
  throw Error(ErrorKind::internal, "bench kernels: not an attention op");
}

}  // namespace braid::bench::kernel_suite
