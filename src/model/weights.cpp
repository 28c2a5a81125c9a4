// The engine's packed weight layout, filled from a checkpoint (or any other source).
#include "model/weights.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <thread>

#include "braid/error.h"
#include "braid/ops.h"
#include "model/device_support.h"

namespace braid::model {

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

class Builder {
 public:
  // scale_suffix: what an fp8 weight's name takes for its scales' (ModelConfig::fp8_scale_suffix).
  Builder(Device device, DType dtype, Weights& w, const WeightSource& source,
          const WeightCheck& check, std::string scale_suffix)
      : device_(device), dtype_(dtype), weights_(w), source_(source), check_(check),
        scale_suffix_(std::move(scale_suffix)) {}

  // Before an allocation: every tensor that will go into it exists as the config says.
  void check(const std::string& name, const std::vector<int64_t>& shape) {
    if (check_) check_(name, shape);
  }

  // A new device tensor of the engine's dtype (or another).
  Tensor allocate(const std::vector<int64_t>& shape) { return allocate(shape, dtype_); }
  Tensor allocate(const std::vector<int64_t>& shape, DType dtype) {
    weights_.storage.emplace_back(dtype, shape, device_);
    const Tensor& t = weights_.storage.back().view();
    weights_.bytes += t.nbytes();
    return t;
  }

  void fill(const std::string& name, const std::vector<int64_t>& shape, const Tensor& dst) {
    source_(name, shape, dst);
  }

  Tensor load(const std::string& name, const std::vector<int64_t>& shape) {
    check(name, shape);
    Tensor t = allocate(shape);
    fill(name, shape, t);
    return t;
  }

  // Several Hugging Face matrices stacked by rows into one [sum rows, cols] tensor (or vectors
  // into one [sum] tensor when cols == 0).
  Tensor stack(const std::vector<std::string>& names, const std::vector<int64_t>& rows, int64_t cols) {
    int64_t total = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      check(names[i], cols ? std::vector<int64_t>{rows[i], cols} : std::vector<int64_t>{rows[i]});
      total += rows[i];
    }
    Tensor t = cols ? allocate({total, cols}) : allocate({total});
    int64_t at = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      fill(names[i], cols ? std::vector<int64_t>{rows[i], cols} : std::vector<int64_t>{rows[i]},
           t.slice(0, at, at + rows[i]));
      at += rows[i];
    }
    return t;
  }

  // A linear layer of several Hugging Face matrices stacked by rows (stack), in the checkpoint's
  // format: 16-bit, or fp8 with its scales stacked the same way (which needs each matrix's rows
  // but the last's in whole 128-row blocks).
  Tensor linear(WeightFormat format, const std::vector<std::string>& names,
                const std::vector<int64_t>& rows, int64_t cols, Tensor& scale) {
    if (format == WeightFormat::dense) return stack(names, rows, cols);
    const bool blocks = format == WeightFormat::fp8_blocks;
    int64_t total = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      // The last matrix may end in a partial block (kv_a_proj_with_mqa's 576 rows).
      if (blocks && rows[i] % 128 != 0 && i + 1 != names.size())
        throw Error(ErrorKind::unsupported,
                    "checkpoint: fp8 tensor '" + names[i] + "' has " + std::to_string(rows[i]) +
                        " rows; packing its 128 x 128 scale blocks needs a multiple of 128");
      total += rows[i];
    }
    const int64_t scale_cols = blocks ? (cols + 127) / 128 : 1;
    auto scale_rows = [&](int64_t r) { return blocks ? (r + 127) / 128 : r; };
    for (size_t i = 0; i < names.size(); ++i) {
      check(names[i], {rows[i], cols});
      check(names[i] + scale_suffix_, {scale_rows(rows[i]), scale_cols});
    }
    Tensor t = allocate({total, cols}, DType::f8e4m3);
    scale = allocate({scale_rows(total), scale_cols}, DType::f32);
    int64_t at = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      fill(names[i], {rows[i], cols}, t.slice(0, at, at + rows[i]));
      const int64_t s0 = blocks ? at / 128 : at, s1 = scale_rows(at + rows[i]);
      fill(names[i] + scale_suffix_, {s1 - s0, scale_cols}, scale.slice(0, s0, s1));
      at += rows[i];
    }
    return t;
  }

  // Experts stored one tensor per expert, packed as [E, 2 I, H] (gate rows, then up: the
  // MoeActivation::swiglu order) and [E, H, I]. fp8 experts are packed the same way in f8e4m3,
  // each one's scales ("<name>_scale_inv", compressed-tensors "<name>_scale") beside them into
  // [E, 2 I / 128, H / 128] and [E, H / 128, I / 128]
  // (moe_grouped_gemm_fp8's w_scale); I and H must be whole 128-blocks, so that the gate's and
  // the up's scale blocks stack without sharing one and the fp8 ops take the widths.
  // Expert parallelism: local expert e is the checkpoint's expert first + e (the E held ones only
  // are read).
  void experts(LayerWeights& lw, const std::string& prefix, int first, int E, int I, int H, bool fp8,
               const char* gate, const char* up, const char* down) {
    auto name = [&](int e, const char* m) {
      return prefix + "." + std::to_string(first + e) + "." + m + ".weight";
    };
    if (fp8 && (I % 128 != 0 || H % 128 != 0))
      throw Error(ErrorKind::unsupported,
                  "checkpoint: fp8 expert '" + name(0, gate) + "' is [" + std::to_string(I) + ", " +
                      std::to_string(H) + "]; the fp8 expert GEMM needs moe_intermediate_size " +
                      "and hidden_size multiples of 128");
    const int64_t ib = I / 128, hb = H / 128;  // scale blocks (fp8)
    for (int e = 0; e < E; ++e) {
      check(name(e, gate), {I, H});
      check(name(e, up), {I, H});
      check(name(e, down), {H, I});
      if (!fp8) continue;
      check(name(e, gate) + scale_suffix_, {ib, hb});
      check(name(e, up) + scale_suffix_, {ib, hb});
      check(name(e, down) + scale_suffix_, {hb, ib});
    }
    const DType t = fp8 ? DType::f8e4m3 : dtype_;
    lw.experts_gate_up = allocate({E, 2 * I, H}, t);
    lw.experts_down = allocate({E, H, I}, t);
    if (fp8) {
      lw.experts_gate_up_scale = allocate({E, 2 * ib, hb}, DType::f32);
      lw.experts_down_scale = allocate({E, hb, ib}, DType::f32);
    }
    for (int e = 0; e < E; ++e) {
      const Tensor gu = lw.experts_gate_up.select(0, e);
      fill(name(e, gate), {I, H}, gu.slice(0, 0, I));
      fill(name(e, up), {I, H}, gu.slice(0, I, 2 * I));
      fill(name(e, down), {H, I}, lw.experts_down.select(0, e));
      if (!fp8) continue;
      const Tensor gu_scale = lw.experts_gate_up_scale.select(0, e);
      fill(name(e, gate) + scale_suffix_, {ib, hb}, gu_scale.slice(0, 0, ib));
      fill(name(e, up) + scale_suffix_, {ib, hb}, gu_scale.slice(0, ib, 2 * ib));
      fill(name(e, down) + scale_suffix_, {hb, ib}, lw.experts_down_scale.select(0, e));
    }
  }

  // kv_b_proj [heads x (nope + v), kv_lora_rank] as the per-head W_UK and W_UV views
  // gemm_batched reads. Both are kept in rows of their k, the layout its decode GEMV path reads:
  // W_UV[b] (rows of r) is a view of the checkpoint's matrix W, and W_UK[b] (rows of dn) a view
  // of a transposed copy, made once by an exact product with the identity (I @ W_UK[b]^T, each
  // product a value times 1). A 16-bit W gives that copy for W_UK's rows alone; an fp8 W is
  // dequantized whole to W^T by gemm with its scales (gemm_batched takes 16-bit weights), and
  // W_UV is then a view of W^T too, in columns of its n (cuBLAS's path).
  void mla_kv_b(LayerWeights& lw, const ModelConfig& c, const std::string& name) {
    const int64_t h = c.num_heads, dn = c.qk_nope_head_dim, dv = c.v_head_dim, r = c.kv_lora_rank;
    const int64_t rows = h * (dn + dv);
    Tensor scale;
    const Tensor w = linear(c.weights, {name}, {rows}, r, scale);
    auto view = [](const Tensor& base, int64_t offset, std::initializer_list<int64_t> shape,
                   std::initializer_list<int64_t> strides) {
      Tensor v = base;
      v.data = base.at(offset);
      v.ndim = 3;
      std::copy(shape.begin(), shape.end(), v.shape);
      std::copy(strides.begin(), strides.end(), v.strides);
      return v;
    };
    OwnedTensor eye_host(dtype_, {r, r}, Device::cpu());
    fill_bytes(eye_host.view(), 0);  // new memory is not zeroed: the off-diagonal must be 0
    for (int64_t i = 0; i < r; ++i) store_from_float(eye_host.data(), dtype_, i * r + i, 1.0f);
    OwnedTensor eye(dtype_, {r, r}, device_);
    copy(eye_host.view(), eye.view());
    if (c.weights == WeightFormat::dense) {
      // W[(b (dn + dv) + j) r + i]: head b's dn W_UK rows, then its dv W_UV rows.
      const Tensor w_uk_t = allocate({r, h * dn});  // [r, heads x dn]
      ops::gemm_batched(view(eye.view(), 0, {r, h, r}, {r, 0, 1}),
                        view(w, 0, {h, dn, r}, {(dn + dv) * r, r, 1}),
                        view(w_uk_t, 0, {r, h, dn}, {h * dn, dn, 1}));
      lw.w_uk = view(w_uk_t, 0, {h, r, dn}, {dn, h * dn, 1});
      lw.w_uv = view(w, dn * r, {h, dv, r}, {(dn + dv) * r, r, 1});
      return;
    }
    const Tensor wt = allocate({r, rows});  // W^T: [r, heads x (dn + dv)]
    ops::gemm(eye.view(), {w, scale}, Tensor{}, wt);
    lw.w_uk = view(wt, 0, {h, r, dn}, {dn + dv, rows, 1});
    lw.w_uv = view(wt, dn, {h, dv, r}, {dn + dv, 1, rows});
  }

 private:
  Device device_;
  DType dtype_;
  Weights& weights_;
  const WeightSource& source_;
  const WeightCheck& check_;
  std::string scale_suffix_;
};

}  // namespace

Weights build_weights(const ModelConfig& c, Device device, DType dtype, const WeightSource& source,
                      const WeightCheck& check, int first_expert) {
#if BRAID_WITH_CUDA
  // A GPU this build's kernels do not run on, or fp8 weights on one without fp8: refused here,
  // before anything is allocated or read.
  if (device.is_cuda())
    check_cuda_device(c, cuda_device_info(device.index), cuda_built_architectures());
#endif
  // attention_mla's CUDA kernel: r a multiple of 64 up to 512, dr a multiple of 32 up to 64.
  if (c.mla() && device.is_cuda() &&
      (c.kv_lora_rank % 64 != 0 || c.kv_lora_rank > 512 || c.qk_rope_head_dim % 32 != 0 ||
       c.qk_rope_head_dim > 64))
    throw Error(ErrorKind::unsupported,
                "config: kv_lora_rank " + std::to_string(c.kv_lora_rank) + " with qk_rope_head_dim " +
                    std::to_string(c.qk_rope_head_dim) +
                    ": the CUDA MLA kernel takes kv_lora_rank a multiple of 64 up to 512 and "
                    "qk_rope_head_dim a multiple of 32 up to 64 (DeepSeek-V2/V3: 512 and 64)");
  // fp8 experts quantize their activations per token and 128 columns (moe_fp8_quantize), which
  // reads f32 or bf16 rows.
  if (c.fp8_experts() && dtype != DType::bf16 && dtype != DType::f32)
    throw Error(ErrorKind::unsupported,
                "checkpoint: fp8 experts run in bf16 or f32, not " + std::string(dtype_name(dtype)) +
                    " (ask for --dtype bf16)");
  Weights w;
  w.device = device;
  w.dtype = dtype;
  Builder b(device, dtype, w, source, check, c.fp8_scale_suffix);
  const int H = c.hidden_size, V = c.vocab_size, hd = c.head_dim;
  const int qd = c.q_dim(), kvd = c.kv_dim();

  w.embed = b.load("model.embed_tokens.weight", {V, H});
  w.final_norm = b.load("model.norm.weight", {H});
  w.lm_head = c.tie_word_embeddings ? w.embed : b.load("lm_head.weight", {V, H});

  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.";
    lw.attn_norm = b.load(p + "input_layernorm.weight", {H});
    if (c.mla()) {
      // q (q_proj, or q LoRA's q_a_proj) and kv_a_proj_with_mqa read the same normed input.
      const int hq = c.num_heads * c.mla_q_head_dim();
      const bool q_lora = c.q_lora_rank > 0;
      lw.qkv = b.linear(c.weights,
                        {a + (q_lora ? "q_a_proj.weight" : "q_proj.weight"), a + "kv_a_proj_with_mqa.weight"},
                        {q_lora ? c.q_lora_rank : hq, c.mla_cache_dim()}, H, lw.qkv_scale);
      if (q_lora) {
        lw.q_a_norm = b.load(a + "q_a_layernorm.weight", {c.q_lora_rank});
        lw.q_b = b.linear(c.weights, {a + "q_b_proj.weight"}, {hq}, c.q_lora_rank, lw.q_b_scale);
      }
      lw.kv_a_norm = b.load(a + "kv_a_layernorm.weight", {c.kv_lora_rank});
      b.mla_kv_b(lw, c, a + "kv_b_proj.weight");
      lw.o_proj = b.linear(c.weights, {a + "o_proj.weight"}, {H}, c.num_heads * c.v_head_dim,
                           lw.o_proj_scale);
    } else {
      lw.qkv = b.linear(c.weights, {a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"},
                        {qd, kvd, kvd}, H, lw.qkv_scale);
      lw.o_proj = b.linear(c.weights, {a + "o_proj.weight"}, {H}, qd, lw.o_proj_scale);
    }
    if (c.qkv_bias)
      lw.qkv_bias = b.stack({a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"},
                            {qd, kvd, kvd}, 0);
    if (c.qk_norm) {
      lw.q_norm = b.load(a + "q_norm.weight", {hd});
      lw.k_norm = b.load(a + "k_norm.weight", {hd});
    }
    if (c.o_bias) lw.o_bias = b.load(a + "o_proj.bias", {H});
    lw.mlp_norm = b.load(p + "post_attention_layernorm.weight", {H});

    if (!c.layer_is_moe(l)) {
      const int I = c.intermediate_size;
      lw.gate_up = b.linear(c.weights, {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"},
                            {I, I}, H, lw.gate_up_scale);
      lw.down = b.linear(c.weights, {p + "mlp.down_proj.weight"}, {H}, I, lw.down_scale);
      continue;
    }
    // The router chooses among all num_experts; the experts below are the held ones (all of them
    // but under expert parallelism).
    const int E = c.num_experts, I = c.moe_intermediate_size, held = c.held_experts();
    if (c.n_shared_experts > 0) {
      const std::string sh = p + "mlp.shared_experts.";
      const int64_t Is = c.shared_experts_width();
      lw.shared_gate_up = b.linear(c.weights, {sh + "gate_proj.weight", sh + "up_proj.weight"},
                                   {Is, Is}, H, lw.shared_gate_up_scale);
      lw.shared_down = b.linear(c.weights, {sh + "down_proj.weight"}, {H}, Is, lw.shared_down_scale);
    }
    if (c.router == ModelConfig::Router::sigmoid_grouped) {
      b.check(p + "mlp.gate.e_score_correction_bias", {E});
      lw.router_bias = b.allocate({E}, DType::f32);
      b.fill(p + "mlp.gate.e_score_correction_bias", {E}, lw.router_bias);
    }
    if (c.arch == Arch::mixtral) {
      lw.router = b.load(p + "block_sparse_moe.gate.weight", {E, H});
      b.experts(lw, p + "block_sparse_moe.experts", first_expert, held, I, H, c.fp8_experts(), "w1",
                "w3", "w2");
    } else {
      lw.router = b.load(p + "mlp.gate.weight", {E, H});
      b.experts(lw, p + "mlp.experts", first_expert, held, I, H, c.fp8_experts(), "gate_proj",
                "up_proj", "down_proj");
    }
  }
  return w;
}

std::optional<Quantize> quantize_from_name(std::string_view name) {
  if (name == "none") return Quantize::none;
  if (name == "fp8") return Quantize::fp8;
  return std::nullopt;
}

std::string_view quantize_name(Quantize q) { return q == Quantize::fp8 ? "fp8" : "none"; }

ModelConfig quantized_config(ModelConfig c, Quantize q) {
  if (q == Quantize::fp8 && c.weights == WeightFormat::dense) c.weights = WeightFormat::fp8_blocks;
  return c;
}

void quantize_fp8_blocks(const std::string& name, const void* w, DType dtype, int64_t rows,
                         int64_t cols, uint8_t* values, float* scales) {
  constexpr int64_t kB = 128;
  const int64_t block_rows = (rows + kB - 1) / kB, block_cols = (cols + kB - 1) / kB;
  // One block row (128 matrix rows) per task, on every core: float_to_f8e4m3 is a few ns a value,
  // minutes for an 8B model on one core. Each task writes its own rows and scales only.
  std::atomic<int64_t> next{0};
  std::atomic<bool> non_finite{false};
  auto work = [&] {
    for (int64_t br; (br = next++) < block_rows;) {
      const int64_t r0 = br * kB, r1 = std::min(rows, r0 + kB);
      for (int64_t bc = 0; bc < block_cols; ++bc) {
        const int64_t c0 = bc * kB, c1 = std::min(cols, c0 + kB);
        float amax = 0.0f;
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t j = c0; j < c1; ++j) {
            const float v = std::fabs(load_as_float(w, dtype, r * cols + j));
            if (!std::isfinite(v)) non_finite = true;
            amax = std::max(amax, v);
          }
        float scale = amax / 448.0f;
        if (scale == 0.0f) scale = 1.0f;  // all zeros (or amax / 448 underflows): no 0 / 0
        scales[br * block_cols + bc] = scale;
        for (int64_t r = r0; r < r1; ++r)
          for (int64_t j = c0; j < c1; ++j)
            values[r * cols + j] = float_to_f8e4m3(load_as_float(w, dtype, r * cols + j) / scale);
      }
    }
  };
  const int64_t n = std::min<int64_t>(block_rows, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  if (non_finite)
    throw Error(ErrorKind::io, "checkpoint: tensor '" + name +
                                   "' holds an infinity or NaN: fp8 e4m3 has no infinity, so it "
                                   "cannot be quantized to fp8");
}

namespace {

// values[r, j] = e4m3 code [r, j] x scales[r] in f32, on every host core (an MoE checkpoint's
// experts are most of its bytes).
void dequantize_fp8_rows(const uint8_t* codes, const float* scales, int64_t rows, int64_t cols,
                         float* values) {
  const int64_t n = std::min<int64_t>(rows, std::max(1u, std::thread::hardware_concurrency()));
  auto work = [&](int64_t t) {
    for (int64_t r = rows * t / n; r < rows * (t + 1) / n; ++r)
      for (int64_t j = 0; j < cols; ++j)
        values[r * cols + j] = f8e4m3_to_float(codes[r * cols + j]) * scales[r];
  };
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < n; ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& t : pool) t.join();
}

}  // namespace

Weights load_weights(const ModelConfig& full, const Checkpoint& checkpoint, Device device,
                     DType dtype, Quantize quantize, TensorParallel tp) {
  // The rank's part (full for one rank), and under expert parallelism its experts.
  const ModelConfig c = shard_config(full, tp.size, tp.expert_parallel);
  const int first_expert = experts_of(full, tp).first;
  OwnedTensor staging;  // host buffer for dtype conversions, reused
  std::vector<uint8_t> columns;  // host buffer for a column slice, reused
  // The shape of the rank's part of a tensor whose whole shape is `shape`.
  auto held_shape = [&](const std::string& name, std::vector<int64_t> shape) {
    const TensorSlice slice = tensor_slice(name, full, tp);
    if (slice.dim >= 0 && static_cast<size_t>(slice.dim) < shape.size())
      shape[static_cast<size_t>(slice.dim)] = slice.end - slice.begin;
    return shape;
  };
  // The tensor, once it is known to be there with the shape the config implies (for a rank of a
  // tensor-parallel group: its slice of the tensor has that shape): checked before its memory is
  // allocated (the dtype, which depends on the destination, when it is filled).
  auto entry = [&](const std::string& name, const std::vector<int64_t>& shape) {
    const TensorEntry* e = checkpoint.find(name);
    if (!e)
      throw Error(ErrorKind::io, "checkpoint: missing tensor '" + name + "' (expected shape " +
                                     shape_text(shape) + ")");
    const std::vector<int64_t> held = held_shape(name, e->shape);
    const TensorSlice slice = tensor_slice(name, full, tp);
    const bool fits = slice.dim < 0 || (static_cast<size_t>(slice.dim) < e->shape.size() &&
                                        e->shape[static_cast<size_t>(slice.dim)] >= slice.end);
    if (!fits || held != shape)
      throw Error(ErrorKind::io, "checkpoint: tensor '" + name + "' in " + e->file +
                                     ": expected shape " + shape_text(shape) +
                                     (slice.dim >= 0 ? " (rank " + std::to_string(tp.rank) + " of " +
                                                           std::to_string(tp.size) + "'s slice)"
                                                     : std::string()) +
                                     ", got " + shape_text(e->shape));
    return e;
  };
  // The bytes of the rank's part of a checked tensor: the whole tensor or a run of its rows in
  // place, or its columns gathered into `columns`.
  auto data_of = [&](const TensorEntry* e, const std::string& name) -> const void* {
    const TensorSlice slice = tensor_slice(name, full, tp);
    if (slice.dim < 0) return e->data;
    const size_t elem = dtype_size(e->dtype);
    int64_t inner = 1;  // elements per index of the sliced dim
    for (size_t d = static_cast<size_t>(slice.dim) + 1; d < e->shape.size(); ++d) inner *= e->shape[d];
    const auto* base = static_cast<const uint8_t*>(e->data);
    if (slice.dim == 0) return base + static_cast<size_t>(slice.begin * inner) * elem;
    const int64_t rows = e->shape[0], cols = e->shape[1], width = slice.end - slice.begin;
    columns.resize(static_cast<size_t>(rows * width) * elem);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(columns.data() + static_cast<size_t>(r * width) * elem,
                  base + static_cast<size_t>(r * cols + slice.begin) * elem,
                  static_cast<size_t>(width) * elem);
    return columns.data();
  };
  // --quantize fp8: a linear layer the fp8 layout wants in fp8 that the checkpoint holds in a
  // 16-bit (or f32) type is quantized here; a rank quantizes its part, whose split falls on the
  // 128 x 128 blocks (shard_config), so it gets exactly the blocks of the whole matrix's
  // quantization. Tensors already fp8 (an fp8 checkpoint, quantized again) load as they are, with
  // their own scales.
  // compressed-tensors' per-channel fp8 experts (llm-compressor's FP8-dynamic of an MoE model):
  // the fp8 expert kernels take 128 x 128 block scales, so each expert matrix (the rank's part) is
  // dequantized (code x its row's scale, in f32) and quantized again in blocks as it is loaded,
  // its block scales computed as --quantize fp8's are. A second rounding: a value keeps e4m3's
  // precision relative to its own row's scale no longer but to its block's largest row's
  // (docs/perf/fp8.md, "Per-channel fp8 experts").
  auto requantizing = [&](const std::string& weight) {
    if (c.weights != WeightFormat::fp8_per_channel || c.num_experts == 0 ||
        weight.find(".experts.") == std::string::npos)
      return false;
    const TensorEntry* e = checkpoint.find(weight);
    return e && e->dtype == DType::f8e4m3;
  };
  auto quantizing = [&](const std::string& weight) {
    if (requantizing(weight)) return true;
    if (quantize != Quantize::fp8 || c.weights != WeightFormat::fp8_blocks) return false;
    const TensorEntry* e = checkpoint.find(weight);
    return e && e->dtype != DType::f8e4m3;
  };
  auto weight_of_scale = [&](const std::string& name) {
    const std::string& suffix = c.fp8_scale_suffix;
    return name.ends_with(suffix) ? name.substr(0, name.size() - suffix.size()) : std::string();
  };
  // compressed-tensors per-tensor scales (fp8_scale_per_tensor): one value per matrix, shape []
  // or [1], asked for as the [rows, 1] per-channel scales the engine holds (for a rank, its rows'):
  // every row gets the value.
  // Scales are read in any float type (f32 or bf16 in the wild).
  auto require_float_scale = [&](const TensorEntry* e, const std::string& name) {
    if (e->dtype != DType::f32 && e->dtype != DType::bf16 && e->dtype != DType::f16)
      throw Error(ErrorKind::io, "checkpoint: tensor '" + name + "' in " + e->file + " is " +
                                     std::string(dtype_name(e->dtype)) +
                                     " but it must be F32, BF16 or F16");
  };
  auto per_tensor_scale = [&](const std::string& name) -> const TensorEntry* {
    if (!c.fp8_scale_per_tensor || !name.ends_with("_scale")) return nullptr;
    const TensorEntry* e = checkpoint.find(name);
    if (!e)
      throw Error(ErrorKind::io, "checkpoint: missing tensor '" + name +
                                     "' (expected one per-tensor scale, shape [] or [1])");
    if (e->shape.size() > 1 || (e->shape.size() == 1 && e->shape[0] != 1))
      throw Error(ErrorKind::io, "checkpoint: tensor '" + name + "' in " + e->file +
                                     ": expected one per-tensor scale, shape [] or [1] "
                                     "(quantization_config's weights strategy is \"tensor\"), got " +
                                     shape_text(e->shape));
    require_float_scale(e, name);
    return e;
  };
  // The Builder asks for a weight, then for its scales: the scales computed with the values wait
  // here for that second call.
  std::map<std::string, std::vector<float>> scales_of;
  std::vector<uint8_t> codes;  // host fp8 values, reused
  std::vector<float> dequantized;  // host f32 values of a requantized matrix, reused
  // The scales a per-channel fp8 matrix `name` (the rank's `rows` of it) holds, one per row: its
  // "<name>_scale" [rows, 1], or its one per-tensor scale copied to every row.
  auto row_scales = [&](const std::string& name, int64_t rows) {
    const std::string scale_name = name + c.fp8_scale_suffix;
    std::vector<float> scales(static_cast<size_t>(rows));
    if (const TensorEntry* t = per_tensor_scale(scale_name)) {
      std::fill(scales.begin(), scales.end(), load_as_float(t->data, t->dtype, 0));
      return scales;
    }
    const TensorEntry* t = entry(scale_name, {rows, 1});
    require_float_scale(t, scale_name);
    const void* data = data_of(t, scale_name);
    for (int64_t r = 0; r < rows; ++r) scales[static_cast<size_t>(r)] = load_as_float(data, t->dtype, r);
    return scales;
  };
  // The block quantization of weight `name` (the rank's `shape` of it) into codes and
  // scales_of[name]: of its 16-bit values (--quantize fp8), or of its per-channel fp8 values
  // dequantized (requantizing).
  auto quantized = [&](const std::string& name, const std::vector<int64_t>& shape) {
    const int64_t rows = shape[0], cols = shape[1];
    const TensorEntry* e = nullptr;
    const void* values = nullptr;
    DType values_dtype = DType::f32;
    if (requantizing(name)) {
      // The scales first: the codes may be read through the column buffer, which data_of reuses.
      const std::vector<float> scale = row_scales(name, rows);
      e = entry(name, shape);
      dequantized.resize(static_cast<size_t>(rows * cols));
      dequantize_fp8_rows(static_cast<const uint8_t*>(data_of(e, name)), scale.data(), rows, cols,
                          dequantized.data());
      values = dequantized.data();
    } else {
      e = entry(name, shape);
      if (e->dtype != DType::f32 && e->dtype != DType::bf16 && e->dtype != DType::f16)
        throw Error(ErrorKind::io, "checkpoint: tensor '" + name + "' in " + e->file + " is " +
                                       std::string(dtype_name(e->dtype)) +
                                       "; quantizing to fp8 takes F32, BF16 or F16 weights");
      values = data_of(e, name);
      values_dtype = e->dtype;
    }
    std::vector<float>& scales = scales_of[name];
    scales.resize(static_cast<size_t>(((rows + 127) / 128) * ((cols + 127) / 128)));
    codes.resize(static_cast<size_t>(rows * cols));
    quantize_fp8_blocks(name, values, values_dtype, rows, cols, codes.data(), scales.data());
    return e;
  };
  auto from_checkpoint = [&](const std::string& name, const std::vector<int64_t>& shape,
                             const Tensor& dst) {
    if (dst.dtype == DType::f8e4m3 && shape.size() == 2 && quantizing(name)) {
      quantized(name, shape);
      const int64_t n = dst.numel();
      copy(Tensor(codes.data(), DType::f8e4m3, Device::cpu(), {n}), dst.reshape({n}));
      return;
    }
    if (const std::string weight = weight_of_scale(name); !weight.empty() && quantizing(weight)) {
      auto it = scales_of.find(weight);
      if (it == scales_of.end()) {  // asked for before its weight (the check saw it 2-D)
        quantized(weight, held_shape(weight, checkpoint.find(weight)->shape));
        it = scales_of.find(weight);
      }
      const std::vector<float> scales = std::move(it->second);
      scales_of.erase(it);
      const int64_t n = dst.numel();
      if (dst.dtype != DType::f32 || n != static_cast<int64_t>(scales.size()))
        throw Error(ErrorKind::internal, "load_weights: the computed scales of '" + weight +
                                             "' do not fit the slice the loader asks for");
      copy(Tensor(const_cast<float*>(scales.data()), DType::f32, Device::cpu(), {n}), dst.reshape({n}));
      return;
    }
    // (After the computed scales: a requantized matrix's per-tensor scale is not what it holds.)
    if (const TensorEntry* e = per_tensor_scale(name)) {
      const int64_t n = dst.numel();
      staging = OwnedTensor(DType::f32, {n}, Device::cpu());
      const float value = load_as_float(e->data, e->dtype, 0);
      for (int64_t i = 0; i < n; ++i) store_from_float(staging.data(), DType::f32, i, value);
      copy(staging.view(), dst.reshape({n}));
      return;
    }
    const TensorEntry* e = entry(name, shape);
    // fp8 values are taken as stored; their scales in any float type (f32 or bf16 in the wild);
    // everything else in the dtype config.json declares.
    const bool fp8 = dst.dtype == DType::f8e4m3;
    // (DeepSeek-V3's e_score_correction_bias, kept in f32, loads as any float type too.)
    const bool scale = dst.dtype == DType::f32 &&
                       ((c.weights != WeightFormat::dense &&
                         (name.ends_with("_scale_inv") || name.ends_with("_scale"))) ||
                        name.ends_with("e_score_correction_bias"));
    const bool ok = fp8 ? e->dtype == DType::f8e4m3
                  : scale ? (e->dtype == DType::f32 || e->dtype == DType::bf16 || e->dtype == DType::f16)
                          : e->dtype == c.dtype;
    if (!ok)
      throw Error(ErrorKind::io, "checkpoint: tensor '" + name + "' in " + e->file + " is " +
                                     std::string(dtype_name(e->dtype)) + " but " +
                                     (fp8 ? std::string("the fp8 checkpoint needs F8_E4M3")
                                      : scale ? std::string("it must be F32, BF16 or F16")
                                              : "config.json says " + std::string(dtype_name(c.dtype))));
    const int64_t n = dst.numel();
    const void* src = data_of(e, name);
    if (e->dtype == dst.dtype) {
      copy(Tensor(const_cast<void*>(src), dst.dtype, Device::cpu(), {n}), dst.reshape({n}));
      return;
    }
    staging = OwnedTensor(dst.dtype, {n}, Device::cpu());
    for (int64_t i = 0; i < n; ++i)
      store_from_float(staging.data(), dst.dtype, i, load_as_float(src, e->dtype, i));
    copy(staging.view(), dst.reshape({n}));
  };
  auto check = [&](const std::string& name, const std::vector<int64_t>& shape) {
    // A quantized weight's scales are computed, not read: the weight itself is checked.
    if (const std::string weight = weight_of_scale(name); !weight.empty() && quantizing(weight))
      return;
    if (per_tensor_scale(name)) return;
    (void)entry(name, shape);
  };
  if (quantize == Quantize::none)
    return build_weights(c, device, dtype, from_checkpoint, check, first_expert);
  try {
    return build_weights(c, device, dtype, from_checkpoint, check, first_expert);
  } catch (const Error& e) {
    // The loader's fp8 messages speak of the checkpoint's tensors; say they come from quantizing.
    throw Error(e.kind(), std::string(e.what()) + " (loading with quantize " +
                              std::string(quantize_name(quantize)) + ")");
  }
}

}  // namespace braid::model
