// harness/cuda/model_setup.h on the GPU.
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench/harness/cuda/kernels.h"
#include "bench/harness/cuda/model_setup.h"
#include "bench/harness/random_weights.h"
#include "braid/dtype.h"
#include "braid/error.h"
#include "core/cuda_check.h"
#include "model/safetensors.h"

namespace braid::bench {


std::unique_ptr<ModelUnderTest> setup_model(const ModelSetupOptions& o) {
  if (!cuda_available())
    throw Error(ErrorKind::unsupported, "bench: no CUDA device is visible");
  if (o.sequences < 1 || o.context < 1 || o.max_step_tokens < 1)
    throw Error(ErrorKind::invalid_argument,
                fmt::format("bench: sequences ({}), context ({}) and step tokens ({}) must be >= 1",
                            o.sequences, o.context, o.max_step_tokens));
  BRAID_CUDA_CHECK(cudaSetDevice(o.device));
  const Device dev = Device::cuda(o.device);
  const DType dtype = DType::bf16;
  auto m = std::make_unique<ModelUnderTest>();
  m->random_weights = o.model_dir.empty();
  m->config = m->random_weights ? o.shape
                                : model::quantized_config(model::load_config(o.model_dir), o.quantize);
  m->label = m->random_weights ? o.label : o.model_dir;
  m->weights = m->random_weights
                   ? random_weights(m->config, dev, dtype, &m->random_tensors)
                   : model::load_weights(m->config, model::Checkpoint::open(o.model_dir), dev, dtype,
                                         o.quantize);
  m->cache = std::make_unique<engine::KVCache>(m->config, o.context, 16, dev, dtype, o.sequences);
  if (o.random_kv) {
    for (size_t l = 0; l < m->cache->k.size(); ++l) {
      fill_uniform(m->cache->k[l].view(), 1000 + l, -1.0f, 1.0f, {});
      if (m->cache->v[l].view().data) fill_uniform(m->cache->v[l].view(), 2000 + l, -1.0f, 1.0f, {});
    }
  }
  const int64_t decode_capacity =
      o.decode_scratch ? int64_t{m->cache->pages_per_seq} * m->cache->page_size : 0;
  m->workspace = std::make_unique<model::Workspace>(m->config, o.max_step_tokens, dev, dtype,
                                                    decode_capacity);
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  return m;
}

int32_t step_token_id(int sequence, int position, int vocab_size) {
  return static_cast<int32_t>((int64_t{sequence} * 7919 + int64_t{position} * 104729 + 11) %
                              vocab_size);
}

StepBatch make_step_batch(const ModelUnderTest& m, int sequences, int past, int new_tokens,
                          bool decode) {
  const engine::KVCache& cache = *m.cache;
  const int64_t tokens = int64_t{sequences} * new_tokens;
  if (sequences < 1 || new_tokens < 1 || past < 0)
    throw Error(ErrorKind::invalid_argument,
                fmt::format("bench: a step needs sequences >= 1 and new tokens >= 1 (got {}, {}) "
                            "and past >= 0 (got {})", sequences, new_tokens, past));
  if (sequences > cache.num_seqs)
    throw Error(ErrorKind::invalid_argument,
                fmt::format("bench: {} sequences in a step, the KV cache holds {}", sequences,
                            cache.num_seqs));
  if (past + new_tokens > cache.capacity())
    throw Error(ErrorKind::invalid_argument,
                fmt::format("bench: {} + {} tokens per sequence, the KV cache holds {}", past,
                            new_tokens, cache.capacity()));
  if (tokens > m.workspace->max_tokens)
    throw Error(ErrorKind::invalid_argument,
                fmt::format("bench: a step of {} tokens, the workspace holds {}", tokens,
                            m.workspace->max_tokens));
  if (decode && (new_tokens != 1 || sequences != cache.num_seqs))
    throw Error(ErrorKind::invalid_argument,
                fmt::format("bench: a decode step adds one token to every sequence of the KV cache "
                            "({}), got {} tokens to {} sequences", cache.num_seqs, new_tokens,
                            sequences));
  // The attention ops take kv_lens and cu_seqlens_q for every sequence of the cache's page table:
  // the sequences past `sequences` take part with no queries and no keys.
  const int B = sequences, S = cache.num_seqs;
  const int64_t T = tokens;
  // Layout: tokens [T], positions [T], slots [T], kv_lens [S], cu_seqlens_q [S + 1].
  OwnedTensor host(DType::i32, {3 * T + 2 * S + 1}, Device::cpu());
  int32_t* h = host.view().ptr<int32_t>();
  for (int s = 0; s < B; ++s) {
    for (int i = 0; i < new_tokens; ++i) {
      const int64_t t = int64_t{s} * new_tokens + i;
      const int pos = past + i;
      h[t] = step_token_id(s, pos, m.config.vocab_size);
      h[T + t] = pos;
      h[2 * T + t] = static_cast<int32_t>(cache.slot(s, pos));
    }
  }
  for (int s = 0; s < S; ++s) h[3 * T + s] = s < B ? past + new_tokens : 0;
  for (int s = 0; s <= S; ++s) h[3 * T + S + s] = std::min(s, B) * new_tokens;
  StepBatch batch;
  batch.storage = OwnedTensor(DType::i32, {3 * T + 2 * S + 1}, Device::cuda(m.weights.device.index));
  copy(host.view(), batch.storage.view());
  const Tensor d = batch.storage.view();
  batch.inputs = model::StepInputs{.tokens = d.slice(0, 0, T),
                                   .positions = d.slice(0, T, 2 * T),
                                   .slots = d.slice(0, 2 * T, 3 * T),
                                   .cu_seqlens_q = d.slice(0, 3 * T + S, 3 * T + 2 * S + 1),
                                   .kv_lens = d.slice(0, 3 * T, 3 * T + S),
                                   .decode = decode};
  batch.tokens = static_cast<int>(T);
  BRAID_CUDA_CHECK(cudaDeviceSynchronize());
  return batch;
}

std::vector<float> cpu_reference_logits(const ModelUnderTest& m, int past, int new_tokens,
                                        DType dtype) {
  if (!m.random_weights)
    throw Error(ErrorKind::invalid_argument, "bench: the CPU reference needs a random-weight model");
  std::map<std::string, Tensor> on_device(m.random_tensors.begin(), m.random_tensors.end());
  const Device cpu = Device::cpu();
  // bf16 values on the device into a CPU tensor (fp32, or bf16 as they are) of as many elements;
  // values of the destination's own dtype (fp8 weights, their f32 scales, f32 router biases)
  // as they are.
  auto bf16_to_host_f32 = [&](const Tensor& src, const Tensor& dst) {
    OwnedTensor host(src.dtype, std::vector<int64_t>(src.shape, src.shape + src.ndim), cpu);
    copy(src, host.view());
    if (src.dtype == dst.dtype) {
      std::memcpy(dst.data, host.view().data, dst.nbytes());
      return;
    }
    const uint16_t* bits = host.view().ptr<uint16_t>();
    if (dst.dtype == DType::bf16) {
      std::copy(bits, bits + dst.numel(), dst.ptr<uint16_t>());
      return;
    }
    float* out = dst.ptr<float>();
    for (int64_t i = 0; i < dst.numel(); ++i) out[i] = bf16_to_float(bits[i]);
  };
  const model::Weights w = model::build_weights(
      m.config, cpu, dtype,
      [&](const std::string& name, const std::vector<int64_t>&, const Tensor& dst) {
        const auto it = on_device.find(name);
        if (it == on_device.end())
          throw Error(ErrorKind::internal, "bench: no device values for weight '" + name + "'");
        bf16_to_host_f32(it->second, dst);
      });
  const int n = new_tokens;
  engine::KVCache cache(m.config, past + n, 16, cpu, dtype, 1);
  // Sequence 0's first pages on the device (its pages come first, in order) hold the K/V of the
  // `past` tokens; the new tokens' slots are overwritten by the forward pass below.
  for (size_t l = 0; l < cache.k.size(); ++l) {
    bf16_to_host_f32(m.cache->k[l].view().slice(0, 0, cache.pages_per_seq), cache.k[l].view());
    if (cache.v[l].view().data)
      bf16_to_host_f32(m.cache->v[l].view().slice(0, 0, cache.pages_per_seq), cache.v[l].view());
  }
  model::Workspace ws(m.config, n, cpu, dtype);
  OwnedTensor in(DType::i32, {3 * n + 3}, cpu);
  int32_t* h = in.view().ptr<int32_t>();
  for (int i = 0; i < n; ++i) {
    h[i] = step_token_id(0, past + i, m.config.vocab_size);
    h[n + i] = past + i;
    h[2 * n + i] = static_cast<int32_t>(cache.slot(0, past + i));
  }
  h[3 * n] = past + n;  // kv_lens
  h[3 * n + 1] = 0;     // cu_seqlens_q
  h[3 * n + 2] = n;
  const Tensor d = in.view();
  const model::StepInputs inputs{.tokens = d.slice(0, 0, n),
                                 .positions = d.slice(0, n, 2 * n),
                                 .slots = d.slice(0, 2 * n, 3 * n),
                                 .cu_seqlens_q = d.slice(0, 3 * n + 1, 3 * n + 3),
                                 .kv_lens = d.slice(0, 3 * n, 3 * n + 1)};
  OwnedTensor logits(DType::f32, {1, m.config.vocab_size}, cpu);
  model::forward(m.config, w, cache, ws, inputs, n, /*all_logits=*/false, logits.view());
  const float* p = logits.view().ptr<float>();
  return std::vector<float>(p, p + m.config.vocab_size);
}

Accuracy check_last_logits(const ModelUnderTest& m, const Tensor& gpu_logits, int past,
                           int new_tokens) {
  const std::vector<float> ref = cpu_reference_logits(m, past, new_tokens, DType::f32);
  const std::vector<float> ref_bf16 = cpu_reference_logits(m, past, new_tokens, DType::bf16);
  const int64_t V = m.config.vocab_size;
  const std::vector<double> ref64(ref.begin(), ref.end());
  OwnedTensor host(DType::f32, {1, V}, Device::cpu());
  copy(gpu_logits.slice(0, 0, 1), host.view());
  ErrorAccumulator acc, noise;
  acc.add(host.view().ptr<float>(), ref64.data(), V);
  noise.add(ref_bf16.data(), ref64.data(), V);
  const double bf16_noise = noise.summary().rel_l2;
  Accuracy a;
  a.error = acc.summary();
  // As the engine's golden tests judge a bf16 forward pass: bf16 activations through every layer
  // drift from fp32 by an amount the weights decide, so the bound is set by how far the CPU's own
  // bf16 forward lands from fp32 (2.5x that, and never tighter than 3e-2).
  a.rel_l2_tolerance = std::max(3e-2, 2.5 * bf16_noise);
  a.reference = fmt::format("cpu fp32 forward of the same weights and KV cache, last-token logits "
                            "(cpu bf16 forward: rel L2 {:.1e} from it)", bf16_noise);
  return a;
}

}  // namespace braid::bench
