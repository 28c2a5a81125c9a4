#include "engine/model_runner.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "braid/error.h"
#include "braid/ops.h"

namespace braid::engine {

namespace {

// Decode batch sizes captured as graphs: 1, 2, 4, 8, then steps of 8 to 64, of 16 to 128 and of
// 32 beyond (a padded row costs little next to the weights a decode step streams).
std::vector<int> graph_ladder(int max_batch) {
  std::vector<int> sizes;
  for (int b = 1; b <= max_batch;) {
    sizes.push_back(b);
    b += b < 8 ? (b < 4 ? b : 4) : b < 64 ? 8 : b < 128 ? 16 : 32;
  }
  if (sizes.empty() || sizes.back() != max_batch) sizes.push_back(max_batch);
  return sizes;
}

}  // namespace

struct ModelRunner::Layout {
  int tokens = 0, seqs = 0, rows = 0, table_cols = 0;
  int decode_rows = -1;  // >= 0: a serving step (decode rows, then prompt chunks); -1: all decode
  int64_t positions = 0, slots = 0, cu = 0, kv_lens = 0, table = 0, logit_rows = 0,
          prefill_cu = 0, prefill_cu_kv = 0, size = 0;
};

ModelRunner::Layout ModelRunner::layout(int tokens, int seqs, int rows, int decode_rows) const {
  Layout l;
  l.tokens = tokens, l.seqs = seqs, l.rows = rows, l.decode_rows = decode_rows;
  l.table_cols = pages_per_seq_;
  l.positions = tokens;
  l.slots = 2 * int64_t{tokens};
  l.cu = 3 * int64_t{tokens};
  l.kv_lens = l.cu + seqs + 1;
  l.table = l.kv_lens + seqs;
  l.logit_rows = l.table + int64_t{seqs} * pages_per_seq_;
  l.prefill_cu = l.logit_rows + rows;
  const int prefill_seqs = decode_rows >= 0 ? seqs - decode_rows + 1 : 0;
  l.prefill_cu_kv = l.prefill_cu + prefill_seqs;
  l.size = l.prefill_cu_kv + prefill_seqs;
  return l;
}

size_t ModelRunner::page_bytes(const model::ModelConfig& c, int page_size, DType dtype) {
  return size_t{1} * c.num_layers * page_size * c.cache_heads() *
         (c.cache_key_dim() + c.cache_value_dim()) * dtype_size(dtype);
}

ModelRunner::ModelRunner(const model::ModelConfig& c, const model::Weights& w, const RunnerConfig& rc,
                         const RunnerRank& group)
    : config_(c),
      weights_(w),
      rc_(rc),
      pages_per_seq_((rc.max_model_len + rc.page_size - 1) / rc.page_size),
      cuda_(w.device.is_cuda()),
      workspace_(c, rc.max_num_batched_tokens, w.device, w.dtype,
                 int64_t{pages_per_seq_} * rc.page_size, rc.moe_gemv_max_tokens,
                 std::min(rc.max_num_seqs, rc.max_num_batched_tokens),
                 // Keys a step's prompt chunks gather: a full context, or two steps' worth.
                 std::max<int64_t>(rc.max_model_len, 2 * int64_t{rc.max_num_batched_tokens})) {
  const int max_rows = std::min(rc.max_num_seqs, rc.max_num_batched_tokens);
  const Layout biggest = layout(rc.max_num_batched_tokens, max_rows, max_rows, 0);
  host_inputs_ = OwnedTensor(DType::i32, {biggest.size}, Device::cpu());
  device_inputs_ = OwnedTensor(DType::i32, {biggest.size}, w.device);
  group_ = group;
  logits_ = OwnedTensor(DType::f32, {max_rows, vocab()}, w.device);
  if (group_.comm) local_logits_ = OwnedTensor(DType::f32, {max_rows, c.vocab_size}, w.device);
  greedy_ids_ = OwnedTensor(DType::i32, {max_rows}, w.device);
  temperature_ = OwnedTensor(DType::f32, {max_rows}, w.device);
  top_k_ = OwnedTensor(DType::i32, {max_rows}, w.device);
  top_p_ = OwnedTensor(DType::f32, {max_rows}, w.device);
  min_p_ = OwnedTensor(DType::f32, {max_rows}, w.device);
  seeds_ = OwnedTensor(DType::i64, {max_rows}, w.device);
  steps_ = OwnedTensor(DType::i64, {max_rows}, w.device);
  if (cuda_) host_logits_ = OwnedTensor(DType::f32, {max_rows, vocab()}, Device::cpu());
  if (cuda_ && rc.cuda_graphs) graph_sizes_ = graph_ladder(max_rows);

  num_pages_ = rc.num_pages;
  if (num_pages_ <= 0) {
    if (!cuda_)
      throw Error(ErrorKind::invalid_argument, "model runner: the CPU needs an explicit page count");
    size_t free_bytes = 0, total_bytes = 0;
    cuda_allocator::memory_info(w.device.index, &free_bytes, &total_bytes);
    const double budget = rc.gpu_memory_utilization * static_cast<double>(free_bytes);
    num_pages_ = static_cast<int>(std::min<double>(budget / page_bytes(c, rc.page_size, w.dtype),
                                                   INT32_MAX / rc.page_size));
  }
  const int needed = pages_per_seq_ + 1;
  if (num_pages_ < needed)
    throw Error(ErrorKind::out_of_memory,
                "model runner: the KV pool holds " + std::to_string(num_pages_) + " pages of " +
                    std::to_string(rc.page_size) + " tokens, fewer than one context of " +
                    std::to_string(rc.max_model_len) + " tokens needs (" + std::to_string(needed) +
                    " with the scratch page): lower --max-model-len or raise "
                    "--gpu-memory-utilization / --num-kv-pages");
  // One pool of pages: a single "sequence" as long as the pool, whose own page table is unused.
  cache_ = std::make_unique<KVCache>(c, num_pages_ * rc.page_size, rc.page_size, w.device, w.dtype, 1);
}

int ModelRunner::graph_batch_for(int batch) const {
  for (int g : graph_sizes_)
    if (g >= batch) return g;
  return 0;
}

void ModelRunner::pack(const StepPlan& plan, const Layout& l, int padded_seqs, int32_t* h) const {
  const int P = rc_.page_size;
  std::memset(h + l.table, 0, sizeof(int32_t) * static_cast<size_t>(l.seqs) * l.table_cols);
  int t = 0, r = 0;
  h[l.cu] = 0;
  for (size_t b = 0; b < plan.seqs.size(); ++b) {
    const ScheduledSequence& s = plan.seqs[b];
    const Sequence& seq = *s.seq;
    for (int i = 0; i < s.num_tokens; ++i, ++t) {
      const int pos = s.start + i;
      h[t] = seq.tokens[static_cast<size_t>(pos)];
      h[l.positions + t] = pos;
      h[l.slots + t] = seq.pages[static_cast<size_t>(pos / P)] * P + pos % P;
    }
    const int kv_len = s.start + s.num_tokens;
    h[l.cu + b + 1] = t;
    h[l.kv_lens + b] = kv_len;
    std::copy(seq.pages.begin(), seq.pages.begin() + (kv_len + P - 1) / P,
              h + l.table + static_cast<int64_t>(b) * l.table_cols);
    if (s.samples()) h[l.logit_rows + r++] = t - 1;
  }
  // The prompt chunks after the decode rows: their rows' and their keys' offsets.
  if (l.decode_rows >= 0) {
    const int D = l.decode_rows;
    h[l.prefill_cu_kv] = 0;
    for (int b = D; b <= l.seqs; ++b) h[l.prefill_cu + b - D] = h[l.cu + b] - D;
    for (int b = D; b < l.seqs; ++b) h[l.prefill_cu_kv + b - D + 1] = h[l.prefill_cu_kv + b - D] + h[l.kv_lens + b];
  }
  // Padded sequences: one token at position 0 in the scratch page 0, sampled and ignored.
  for (int b = static_cast<int>(plan.seqs.size()); b < padded_seqs; ++b, ++t) {
    h[t] = 0;
    h[l.positions + t] = 0;
    h[l.slots + t] = 0;
    h[l.cu + b + 1] = t + 1;
    h[l.kv_lens + b] = 1;
    h[l.logit_rows + r++] = t;
  }
}

model::StepInputs ModelRunner::inputs_at(const Tensor& d, const Layout& l, bool decode) const {
  model::StepInputs in;
  in.tokens = d.slice(0, 0, l.tokens);
  in.positions = d.slice(0, l.positions, l.positions + l.tokens);
  in.slots = d.slice(0, l.slots, l.slots + l.tokens);
  in.cu_seqlens_q = d.slice(0, l.cu, l.cu + l.seqs + 1);
  in.kv_lens = d.slice(0, l.kv_lens, l.kv_lens + l.seqs);
  Tensor table = d.slice(0, l.table, l.table + int64_t{l.seqs} * l.table_cols);
  table.ndim = 2;
  table.shape[0] = l.seqs;
  table.shape[1] = l.table_cols;
  table.strides[0] = l.table_cols;
  table.strides[1] = 1;
  in.page_table = table;
  in.logit_rows = d.slice(0, l.logit_rows, l.logit_rows + l.rows);
  in.decode = decode;
  if (l.decode_rows >= 0) {
    const int prefill_seqs = l.seqs - l.decode_rows;
    in.decode_rows = l.decode_rows;
    in.prefill_cu_seqlens_q = d.slice(0, l.prefill_cu, l.prefill_cu + prefill_seqs + 1);
    in.prefill_cu_seqlens_kv = d.slice(0, l.prefill_cu_kv, l.prefill_cu_kv + prefill_seqs + 1);
  }
  return in;
}

StepResult ModelRunner::run(const StepPlan& plan, SampleOn on, const std::vector<RowSampling>& sampling) {
  const bool greedy_only = on == SampleOn::greedy;
  const int seqs = static_cast<int>(plan.seqs.size());
  int rows = 0;
  for (const ScheduledSequence& s : plan.seqs) rows += s.samples() ? 1 : 0;
  if (seqs == 0 || plan.num_tokens > rc_.max_num_batched_tokens || seqs > logits_.view().shape[0])
    throw Error(ErrorKind::internal, "model runner: a step of " + std::to_string(plan.num_tokens) +
                                         " tokens over " + std::to_string(seqs) +
                                         " sequences does not fit the workspace");
  const bool decode = plan.decode_only() && rows == seqs;
  if (decode && greedy_only) {
    const int padded = graph_batch_for(seqs);
    if (padded > 0) return run_graph(plan, padded);
  }

  int decode_rows = 0;  // leading one-token chunks (the scheduler puts them first)
  while (decode_rows < seqs && plan.seqs[static_cast<size_t>(decode_rows)].num_tokens == 1) ++decode_rows;
  const Layout l = layout(plan.num_tokens, seqs, rows, decode ? -1 : decode_rows);
  int32_t* h = host_inputs_.view().ptr<int32_t>();
  pack(plan, l, seqs, h);
  const Tensor d = device_inputs_.view();
  copy(host_inputs_.view().slice(0, 0, l.size), d.slice(0, 0, l.size));
  model::StepInputs in = inputs_at(d, l, decode);
  // What FlashAttention over the prompt chunks needs from the host: the grid and the gather size.
  in.prefill_fresh = true;
  for (size_t b = static_cast<size_t>(decode_rows); b < plan.seqs.size(); ++b) {
    const ScheduledSequence& s = plan.seqs[b];
    in.prefill_max_q = std::max(in.prefill_max_q, s.num_tokens);
    in.prefill_total_kv += s.start + s.num_tokens;
    in.prefill_fresh = in.prefill_fresh && s.start == 0;
  }

  StepResult r;
  r.rows = rows;
  // A step whose chunks all stop short of their sequence's end still runs the LM head on one row.
  const Tensor logits = logits_.view().slice(0, 0, std::max(rows, 1));
  model::StepInputs head_in = in;
  if (rows == 0) head_in.logit_rows = Tensor{};
  const Tensor ids = greedy_ids_.view().slice(0, 0, std::max(rows, 1));
  if (greedy_only && rows > 0) {
    forward(head_in, plan.num_tokens, logits, {}, probe_, ids);
    r.tokens.resize(static_cast<size_t>(rows));
    copy(ids.slice(0, 0, rows), Tensor(r.tokens.data(), DType::i32, Device::cpu(), {rows}));
    return r;
  }
  forward(head_in, plan.num_tokens, logits, {}, probe_, Tensor{});
  if (rows == 0) return r;
  if (on == SampleOn::device) {
    sample_on_device(logits.slice(0, 0, rows), sampling, ids.slice(0, 0, rows));
    r.tokens.resize(static_cast<size_t>(rows));
    copy(ids.slice(0, 0, rows), Tensor(r.tokens.data(), DType::i32, Device::cpu(), {rows}));
    return r;
  }
  if (cuda_) {
    const Tensor host = host_logits_.view().slice(0, 0, rows);
    copy(logits.slice(0, 0, rows), host);
    r.logits = host.ptr<float>();
  } else {
    r.logits = logits.ptr<float>();
  }
  return r;
}

void ModelRunner::forward(const model::StepInputs& in, int tokens, const Tensor& logits, Stream s,
                          const model::ForwardProbe* probe, const Tensor& greedy_ids) {
  if (!group_.comm) {
    model::forward(config_, weights_, *cache_, workspace_, in, tokens, false, logits, s, probe,
                   greedy_ids);
    return;
  }
  const model::TensorParallelStep tp{group_.rank, group_.comm, local_logits_.view()};
  model::forward(config_, weights_, *cache_, workspace_, in, tokens, false, logits, s, probe,
                 Tensor{}, &tp);
  if (greedy_ids.data) ops::argmax(logits, greedy_ids, s);
}

void ModelRunner::sample_on_device(const Tensor& logits, const std::vector<RowSampling>& rows,
                                   const Tensor& tokens) {
  const int64_t m = logits.shape[0];
  if (static_cast<int64_t>(rows.size()) != m)
    throw Error(ErrorKind::internal, "model runner: " + std::to_string(rows.size()) +
                                         " sampling parameters for " + std::to_string(m) + " rows");
  std::vector<float> temperature, top_p, min_p;
  std::vector<int32_t> top_k;
  std::vector<int64_t> seeds, steps;
  for (const RowSampling& r : rows) {
    temperature.push_back(r.temperature);
    top_k.push_back(r.top_k);
    top_p.push_back(r.top_p);
    min_p.push_back(r.min_p);
    seeds.push_back(static_cast<int64_t>(r.seed));
    steps.push_back(static_cast<int64_t>(r.step));
  }
  auto upload = [m](auto& host, DType t, const OwnedTensor& dst) {
    const Tensor d = dst.view().slice(0, 0, m);
    copy(Tensor(host.data(), t, Device::cpu(), {m}), d);
    return d;
  };
  ops::sample_tokens(logits, upload(temperature, DType::f32, temperature_),
                     upload(top_k, DType::i32, top_k_), upload(top_p, DType::f32, top_p_),
                     upload(min_p, DType::f32, min_p_), upload(seeds, DType::i64, seeds_),
                     upload(steps, DType::i64, steps_), Tensor{}, tokens);
}

StepResult ModelRunner::run_graph(const StepPlan& plan, int padded) {
  const Layout l = layout(padded, padded, padded, -1);
  auto it = graphs_.find(padded);
  if (it == graphs_.end()) {
    // Captured on first use when warm_up did not (the eager run before it plans the GEMMs).
    graph_inputs_.emplace_back(DType::i32, std::vector<int64_t>{l.size}, weights_.device);
    const Tensor d = graph_inputs_.back().view();
    const model::StepInputs in = inputs_at(d, l, /*decode=*/true);
    const Tensor logits = logits_.view().slice(0, 0, padded);
    const Tensor ids = greedy_ids_.view().slice(0, 0, padded);
    auto graph = std::make_unique<DecodeGraph>(
        static_cast<int>(l.size), d.ptr<int32_t>(), padded, ids.ptr<int32_t>(),
        [this, in, logits, ids, padded](Stream s) { forward(in, padded, logits, s, nullptr, ids); });
    // One eager replay of the same work first, outside the capture.
    pack(plan, l, padded, graph->inputs());
    copy(Tensor(graph->inputs(), DType::i32, Device::cpu(), {l.size}), d);
    forward(in, padded, logits, {}, nullptr, ids);
    it = graphs_.emplace(padded, std::move(graph)).first;
  }
  DecodeGraph& g = *it->second;
  pack(plan, l, padded, g.inputs());
  const int32_t* ids = g.run();
  StepResult r;
  r.rows = static_cast<int>(plan.seqs.size());
  r.tokens.assign(ids, ids + r.rows);
  r.graph = true;
  return r;
}

void ModelRunner::warm_up() {
  // A dummy sequence that lives in the scratch page: its K/V is garbage nobody reads.
  Sequence dummy;
  const int prefill = std::min(rc_.max_num_batched_tokens, std::min(512, rc_.max_model_len));
  dummy.tokens.assign(static_cast<size_t>(prefill), 0);
  dummy.prompt_len = prefill;
  dummy.pages.assign(static_cast<size_t>(pages_per_seq_), 0);
  StepPlan plan;
  plan.seqs.push_back({&dummy, prefill, 0, true});
  plan.num_tokens = prefill;
  run(plan, SampleOn::host);
  run(plan, SampleOn::greedy);
  run(plan, SampleOn::device, {RowSampling{1.0f, 50, 0.9f, 0.0f, 1, 0}});
  // Every decode graph, each from a batch of dummy rows at position 0.
  for (int g : graph_sizes_) {
    StepPlan decode;
    std::vector<Sequence> rows(static_cast<size_t>(g));
    for (Sequence& s : rows) {
      s.tokens = {0};
      s.prompt_len = 1;
      s.pages = {0};
      decode.seqs.push_back({&s, 1, 0, true});
    }
    decode.num_tokens = g;
    run(decode, SampleOn::greedy);
  }
}

}  // namespace braid::engine
