// `bench kernels`: the memory-bound row ops (embedding .. add_inplace). Every tensor rotates over
// the case's input sets (one allocation per tensor); the check runs the CPU op on the sampled rows
// of set 0's inputs, as they were before the checked launch (several ops write in place).
#include <memory>
#include <random>

#include <fmt/format.h>

#include "bench/harness/cuda/kernels.h"
#include "bench/suites/cuda/kernels.h"
#include "braid/error.h"
#include "braid/ops.h"

namespace braid::bench::kernel_suite {

namespace {

constexpr float kEps = 1e-5f;
constexpr int kRowsChecked = 128;
constexpr int64_t kPageSize = 16;
const Device kCpu = Device::cpu();

std::vector<int32_t> iota_i32(int64_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(i);
  return v;
}

// Llama-3.2-1B scales its rotary frequencies (llama3, factor 32); Llama-3-8B does not.
ops::RopeConfig rope_config(const KernelCase& c) {
  ops::RopeConfig r;
  r.theta = 500000.0f;
  if (c.model == "llama-3.2-1b") {
    r.scaling = ops::RopeScaling::llama3;
    r.factor = 32.0f;
    r.low_freq_factor = 1.0f;
    r.high_freq_factor = 4.0f;
    r.original_max_position = 8192;
  }
  return r;
}

// q, k and v as head views [rows, heads, head_dim] of a packed [rows, (q + 2 kv) * head_dim]
// QKV projection output (rope and the KV ops read them where the projection wrote them).
struct Qkv {
  Tensor q, k, v, qk;  // qk: the q and k heads together (what rope and the norms change)
};
Qkv split_qkv(const Tensor& packed, const KernelCase& c) {
  const int64_t heads = c.q_heads + 2 * c.kv_heads;
  const Tensor h = packed.reshape({packed.shape[0], heads, c.head_dim});
  return {h.slice(1, 0, c.q_heads), h.slice(1, c.q_heads, c.q_heads + c.kv_heads),
          h.slice(1, c.q_heads + c.kv_heads, heads), h.slice(1, 0, c.q_heads + c.kv_heads)};
}

int64_t packed_width(const KernelCase& c) { return (c.q_heads + 2 * c.kv_heads) * c.head_dim; }

// A row op out = f(x): x and out rotate; the check runs f on the CPU over the sampled rows of x.
struct Unary {
  DType x_dtype;
  int64_t x_width;
  float lo, hi;
  DType out_dtype;
  int64_t out_width;  // 0: out is [T] (one value per row)
  std::function<void(const Tensor& x, const Tensor& out, Stream s)> op;  // CPU or CUDA tensors
  std::string reference;
};

CasePlan plan_unary(const KernelCase& c, const SuiteEnv& env, Unary u) {
  struct State {
    SetTensor x, out;
  };
  const int sets = case_sets(c, env);
  auto st = std::make_shared<State>();
  const int64_t T = c.tokens;
  st->x = SetTensor(u.x_dtype, {T, u.x_width}, sets, env.device);
  st->x.fill_uniform(env.seed, u.lo, u.hi);
  st->out = u.out_width > 0 ? SetTensor(u.out_dtype, {T, u.out_width}, sets, env.device)
                            : SetTensor(u.out_dtype, {T}, sets, env.device);
  auto op = std::make_shared<Unary>(std::move(u));
  CasePlan p;
  p.sets = sets;
  p.launch = [st, op](int s, Stream stream) { op->op(st->x[s], st->out[s], stream); };
  p.check = [st, op, c, seed = env.seed] {
    st->out.poison();
    op->op(st->x[0], st->out[0], {});
    const std::vector<int64_t> rows = sample_rows(c.tokens, kRowsChecked, seed);
    const OwnedTensor x = host_rows(st->x[0], rows);
    std::vector<int64_t> ref_shape{static_cast<int64_t>(rows.size())};
    if (op->out_width > 0) ref_shape.push_back(op->out_width);
    const OwnedTensor ref(op->out_dtype, ref_shape, kCpu);
    op->op(x, ref, {});
    ErrorAccumulator acc;
    add_vectors(acc, host_rows(st->out[0], rows), ref);
    return make_accuracy(acc, c, op->reference + ", " + rows_label(rows.size(), c.tokens));
  };
  p.note = sets > 1 ? fmt::format("x and out rotate {} sets", sets) : "one set";
  return p;
}

CasePlan plan_rms_norm(const KernelCase& c, const SuiteEnv& env) {
  auto w = std::make_shared<OwnedTensor>(DType::bf16, std::vector<int64_t>{c.hidden}, env.device);
  fill_uniform(*w, env.seed + 1, 0.5f, 1.5f, {});
  auto w_host = std::make_shared<OwnedTensor>(to_host(*w));
  return plan_unary(c, env,
                    {DType::bf16, c.hidden, -2.0f, 2.0f, DType::bf16, c.hidden,
                     [w, w_host](const Tensor& x, const Tensor& out, Stream s) {
                       ops::rms_norm(x, x.device.is_cpu() ? *w_host : *w, kEps, out, s);
                     },
                     "cpu f32"});
}

CasePlan plan_embedding(const KernelCase& c, const SuiteEnv& env) {
  struct State {
    OwnedTensor table;
    SetTensor ids, out;
  };
  const int sets = case_sets(c, env);
  auto st = std::make_shared<State>();
  const int64_t T = c.tokens, H = c.hidden, V = c.vocab;
  st->table = OwnedTensor(DType::bf16, {V, H}, env.device);
  fill_uniform(st->table, env.seed, -1.0f, 1.0f, {});
  st->ids = SetTensor(DType::i32, {T}, sets, env.device);
  st->ids.upload([&](int set, const Tensor& h) {
    std::mt19937_64 rng(env.seed + 1 + static_cast<uint64_t>(set));
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(V - 1));
    for (int64_t i = 0; i < T; ++i) h.ptr<int32_t>()[i] = pick(rng);
  });
  st->out = SetTensor(DType::bf16, {T, H}, sets, env.device);
  CasePlan p;
  p.sets = sets;
  p.launch = [st](int s, Stream stream) { ops::embedding(st->ids[s], st->table, st->out[s], stream); };
  p.check = [st, c, seed = env.seed] {
    st->out.poison();
    ops::embedding(st->ids[0], st->table, st->out[0]);
    const std::vector<int64_t> rows = sample_rows(c.tokens, kRowsChecked, seed);
    const OwnedTensor ids = to_host(st->ids[0]);
    // The table rows the sampled tokens read, their ids renumbered 0 .. R-1.
    const int64_t R = static_cast<int64_t>(rows.size());
    const OwnedTensor table(DType::bf16, {R, c.hidden}, kCpu), ref(DType::bf16, {R, c.hidden}, kCpu);
    for (int64_t i = 0; i < R; ++i) {
      const int64_t id = ids.view().ptr<int32_t>()[rows[i]];
      copy(st->table.view().slice(0, id, id + 1), table.view().slice(0, i, i + 1));
    }
    ops::embedding(host_i32(iota_i32(R)), table, ref);
    ErrorAccumulator acc;
    add_vectors(acc, host_rows(st->out[0], rows), ref);
    return make_accuracy(acc, c, "cpu, exact, " + rows_label(rows.size(), c.tokens));
  };
  p.note = "random ids; one table" + rotation(sets, "ids, out");
  return p;
}

CasePlan plan_add_rms_norm(const KernelCase& c, const SuiteEnv& env) {
  struct State {
    SetTensor x, residual, out;
    OwnedTensor w;
  };
  const int sets = case_sets(c, env);
  auto st = std::make_shared<State>();
  const int64_t T = c.tokens, H = c.hidden;
  st->x = SetTensor(DType::bf16, {T, H}, sets, env.device);
  st->residual = SetTensor(DType::bf16, {T, H}, sets, env.device);
  st->out = SetTensor(DType::bf16, {T, H}, sets, env.device);
  st->w = OwnedTensor(DType::bf16, {H}, env.device);
  st->x.fill_uniform(env.seed, -1.0f, 1.0f);
  st->residual.fill_uniform(env.seed + 1, -1.0f, 1.0f);
  fill_uniform(st->w, env.seed + 2, 0.5f, 1.5f, {});
  CasePlan p;
  p.sets = sets;
  p.launch = [st](int s, Stream stream) {
    ops::add_rms_norm(st->x[s], st->residual[s], st->w, kEps, st->out[s], stream);
  };
  p.check = [st, c, seed = env.seed] {
    const std::vector<int64_t> rows = sample_rows(c.tokens, kRowsChecked, seed);
    const OwnedTensor x = host_rows(st->x[0], rows), residual = host_rows(st->residual[0], rows);
    const OwnedTensor ref(DType::bf16, {static_cast<int64_t>(rows.size()), c.hidden}, kCpu);
    st->out.poison();
    ops::add_rms_norm(st->x[0], st->residual[0], st->w, kEps, st->out[0]);
    ops::add_rms_norm(x, residual, to_host(st->w), kEps, ref);
    ErrorAccumulator acc;
    add_vectors(acc, host_rows(st->out[0], rows), ref);
    add_vectors(acc, host_rows(st->residual[0], rows), residual);
    return make_accuracy(acc, c, "cpu f32, out and residual, " + rows_label(rows.size(), c.tokens));
  };
  p.note = "residual updated in place" + rotation(sets, "tensors");
  return p;
}

CasePlan plan_add_inplace(const KernelCase& c, const SuiteEnv& env) {
  struct State {
    SetTensor x, residual;
  };
  const int sets = case_sets(c, env);
  auto st = std::make_shared<State>();
  st->x = SetTensor(DType::bf16, {c.tokens, c.hidden}, sets, env.device);
  st->residual = SetTensor(DType::bf16, {c.tokens, c.hidden}, sets, env.device);
  st->x.fill_uniform(env.seed, -1.0f, 1.0f);
  st->residual.fill_uniform(env.seed + 1, -1.0f, 1.0f);
  CasePlan p;
  p.sets = sets;
  p.launch = [st](int s, Stream stream) { ops::add_inplace(st->x[s], st->residual[s], stream); };
  p.check = [st, c, seed = env.seed] {
    const std::vector<int64_t> rows = sample_rows(c.tokens, kRowsChecked, seed);
    const OwnedTensor x = host_rows(st->x[0], rows), residual = host_rows(st->residual[0], rows);
    ops::add_inplace(st->x[0], st->residual[0]);
    ops::add_inplace(x, residual);
    ErrorAccumulator acc;
    add_vectors(acc, host_rows(st->residual[0], rows), residual);
    return make_accuracy(acc, c, "cpu f32, " + rows_label(rows.size(), c.tokens));
  };
  p.note = "residual updated in place" + rotation(sets, "tensors");
  return p;
}

// rope_apply, kv_append and qk_norm_rope_kv_append share their tensors: a packed QKV output
// (q and k changed in place), positions, cache slots (token t -> slot t) and pages of 16 tokens.
struct KvState {
  SetTensor packed, positions, slots, k_pages, v_pages;
  OwnedTensor q_norm, k_norm;
  ops::RopeConfig rope;
};

std::shared_ptr<KvState> make_kv_state(const KernelCase& c, const SuiteEnv& env, int sets,
                                       bool cache, bool norms) {
  auto st = std::make_shared<KvState>();
  const int64_t T = c.tokens;
  st->packed = SetTensor(DType::bf16, {T, packed_width(c)}, sets, env.device);
  st->packed.fill_uniform(env.seed, -2.0f, 2.0f);
  st->positions = SetTensor(DType::i32, {T}, sets, env.device);
  st->positions.upload([&](int set, const Tensor& h) {
    std::mt19937_64 rng(env.seed + 1 + static_cast<uint64_t>(set));
    std::uniform_int_distribution<int32_t> pick(0, 8191);
    for (int64_t i = 0; i < T; ++i) h.ptr<int32_t>()[i] = pick(rng);
  });
  st->rope = rope_config(c);
  if (cache) {
    const int64_t pages = (T + kPageSize - 1) / kPageSize;
    st->slots = SetTensor(DType::i32, {T}, sets, env.device);
    st->slots.upload([&](int, const Tensor& h) {
      for (int64_t i = 0; i < T; ++i) h.ptr<int32_t>()[i] = static_cast<int32_t>(i);
    });
    st->k_pages = SetTensor(DType::bf16, {pages, kPageSize, c.kv_heads, c.head_dim}, sets, env.device);
    st->v_pages = SetTensor(DType::bf16, {pages, kPageSize, c.kv_heads, c.head_dim}, sets, env.device);
  }
  if (norms) {
    st->q_norm = OwnedTensor(DType::bf16, {c.head_dim}, env.device);
    st->k_norm = OwnedTensor(DType::bf16, {c.head_dim}, env.device);
    fill_uniform(st->q_norm, env.seed + 2, 0.5f, 1.5f, {});
    fill_uniform(st->k_norm, env.seed + 3, 0.5f, 1.5f, {});
  }
  return st;
}

// The cache rows [R, kv_heads * head_dim] the sampled tokens were written to on the device (slot
// = token), and the host reference cache's first R rows (slot = sampled index).
void add_cache_rows(ErrorAccumulator& acc, const KernelCase& c, const Tensor& device_pages,
                    const Tensor& host_pages, const std::vector<int64_t>& rows) {
  const int64_t width = c.kv_heads * c.head_dim, R = static_cast<int64_t>(rows.size());
  const int64_t device_slots = device_pages.shape[0] * kPageSize;
  const Tensor flat = Tensor::contiguous(device_pages.data, device_pages.dtype,
                                         device_pages.device, std::vector<int64_t>{device_slots, width}.data(), 2);
  const Tensor ref = host_pages.reshape({host_pages.shape[0] * kPageSize, width}).slice(0, 0, R);
  add_vectors(acc, host_rows(flat, rows), ref);
}

OwnedTensor host_pages_for(const KernelCase& c, int64_t rows) {
  const int64_t pages = (rows + kPageSize - 1) / kPageSize;
  OwnedTensor t(DType::bf16, {pages, kPageSize, c.kv_heads, c.head_dim}, kCpu);
  fill_bytes(t, 0xFF);
  return t;
}

CasePlan plan_rope(const KernelCase& c, const SuiteEnv& env) {
  const int sets = case_sets(c, env);
  auto st = make_kv_state(c, env, sets, false, false);
  CasePlan p;
  p.sets = sets;
  p.launch = [st, c](int s, Stream stream) {
    const Qkv v = split_qkv(st->packed[s], c);
    ops::rope_apply(v.q, v.k, st->positions[s], st->rope, stream);
  };
  p.check = [st, c, seed = env.seed] {
    const std::vector<int64_t> rows = sample_rows(c.tokens, kRowsChecked, seed);
    const OwnedTensor packed = host_rows(st->packed[0], rows);
    const OwnedTensor positions = host_rows(st->positions[0], rows);
    const Qkv dev = split_qkv(st->packed[0], c), host = split_qkv(packed, c);
    ops::rope_apply(dev.q, dev.k, st->positions[0], st->rope);
    ops::rope_apply(host.q, host.k, positions, st->rope);
    const OwnedTensor got = host_rows(st->packed[0], rows);
    ErrorAccumulator acc;
    add_vectors(acc, split_qkv(got, c).qk, host.qk);
    return make_accuracy(acc, c, "cpu f32, q and k heads, " + rows_label(rows.size(), c.tokens));
  };
  p.note = fmt::format("q, k in place in packed QKV; theta 5e5{}{}",
                       st->rope.scaling == ops::RopeScaling::llama3 ? ", llama3 x32" : "",
                       rotation(sets, "tensors"));
  return p;
}

CasePlan plan_kv_append(const KernelCase& c, const SuiteEnv& env) {
  const int sets = case_sets(c, env);
  auto st = make_kv_state(c, env, sets, true, false);
  CasePlan p;
  p.sets = sets;
  p.launch = [st, c](int s, Stream stream) {
    const Qkv v = split_qkv(st->packed[s], c);
    ops::kv_append(v.k, v.v, st->slots[s], st->k_pages[s], st->v_pages[s], stream);
  };
  p.check = [st, c, seed = env.seed] {
    st->k_pages.poison();
    st->v_pages.poison();
    const Qkv dev = split_qkv(st->packed[0], c);
    ops::kv_append(dev.k, dev.v, st->slots[0], st->k_pages[0], st->v_pages[0]);
    const std::vector<int64_t> rows = sample_rows(c.tokens, kRowsChecked, seed);
    const int64_t R = static_cast<int64_t>(rows.size());
    const OwnedTensor packed = host_rows(st->packed[0], rows);
    const OwnedTensor kp = host_pages_for(c, R), vp = host_pages_for(c, R);
    const Qkv host = split_qkv(packed, c);
    ops::kv_append(host.k, host.v, host_i32(iota_i32(R)), kp, vp);
    ErrorAccumulator acc;
    add_cache_rows(acc, c, st->k_pages[0], kp, rows);
    add_cache_rows(acc, c, st->v_pages[0], vp, rows);
    return make_accuracy(acc, c, "cpu, exact, k and v cache rows, " + rows_label(R, c.tokens));
  };
  p.note = "k, v from packed QKV; slot = token, pages of 16" + rotation(sets, "tensors");
  return p;
}

CasePlan plan_qk_norm_rope_kv_append(const KernelCase& c, const SuiteEnv& env) {
  const int sets = case_sets(c, env);
  auto st = make_kv_state(c, env, sets, true, true);
  CasePlan p;
  p.sets = sets;
  p.launch = [st, c](int s, Stream stream) {
    const Qkv v = split_qkv(st->packed[s], c);
    ops::qk_norm_rope_kv_append(v.q, v.k, v.v, st->q_norm, st->k_norm, kEps, st->positions[s],
                                st->rope, st->slots[s], st->k_pages[s], st->v_pages[s], stream);
  };
  p.check = [st, c, seed = env.seed] {
    const std::vector<int64_t> rows = sample_rows(c.tokens, kRowsChecked, seed);
    const int64_t R = static_cast<int64_t>(rows.size());
    const OwnedTensor packed = host_rows(st->packed[0], rows);
    const OwnedTensor positions = host_rows(st->positions[0], rows);
    st->k_pages.poison();
    st->v_pages.poison();
    const Qkv dev = split_qkv(st->packed[0], c);
    ops::qk_norm_rope_kv_append(dev.q, dev.k, dev.v, st->q_norm, st->k_norm, kEps,
                                st->positions[0], st->rope, st->slots[0], st->k_pages[0],
                                st->v_pages[0]);
    const OwnedTensor kp = host_pages_for(c, R), vp = host_pages_for(c, R);
    const Qkv host = split_qkv(packed, c);
    ops::qk_norm_rope_kv_append(host.q, host.k, host.v, to_host(st->q_norm), to_host(st->k_norm),
                                kEps, positions, st->rope, host_i32(iota_i32(R)), kp, vp);
    const OwnedTensor got = host_rows(st->packed[0], rows);
    ErrorAccumulator acc;
    add_vectors(acc, split_qkv(got, c).qk, host.qk);
    add_cache_rows(acc, c, st->k_pages[0], kp, rows);
    add_cache_rows(acc, c, st->v_pages[0], vp, rows);
    return make_accuracy(acc, c,
                         "cpu f32, q, k and cache rows, " + rows_label(R, c.tokens));
  };
  p.note = "with q/k norms; packed QKV in place; slot = token" + rotation(sets, "tensors");
  return p;
}

}  // namespace

CasePlan plan_row_case(const KernelCase& c, const SuiteEnv& env) {
  switch (c.op) {
    case KernelOp::embedding: return plan_embedding(c, env);
    case KernelOp::rms_norm: return plan_rms_norm(c, env);
    case KernelOp::add_rms_norm: return plan_add_rms_norm(c, env);
    case KernelOp::rope_apply: return plan_rope(c, env);
    case KernelOp::silu_mul:
      return plan_unary(c, env,
                        {DType::bf16, 2 * c.inter, -4.0f, 4.0f, DType::bf16, c.inter,
                         [](const Tensor& x, const Tensor& out, Stream s) { ops::silu_mul(x, out, s); },
                         "cpu f32"});
    case KernelOp::softmax:
      return plan_unary(c, env,
                        {DType::bf16, c.vocab, -8.0f, 8.0f, DType::bf16, c.vocab,
                         [](const Tensor& x, const Tensor& out, Stream s) { ops::softmax(x, out, s); },
                         "cpu f32"});
    case KernelOp::argmax:  // over f32 logits, as the LM head writes them
      return plan_unary(c, env,
                        {DType::f32, c.vocab, -4.0f, 4.0f, DType::i32, 0,
                         [](const Tensor& x, const Tensor& out, Stream s) { ops::argmax(x, out, s); },
                         "cpu, exact ids"});
    case KernelOp::kv_append: return plan_kv_append(c, env);
    case KernelOp::qk_norm_rope_kv_append: return plan_qk_norm_rope_kv_append(c, env);
    case KernelOp::add_inplace: return plan_add_inplace(c, env);
    default: break;
  }
  throw Error(ErrorKind::internal, "bench kernels: not a row op");
}

}  // namespace braid::bench::kernel_suite
