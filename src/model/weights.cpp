// The engine's packed weight layout, filled from a checkpoint (or any other source).
#include "model/weights.h"

#include <string>

#include "braid/error.h"

namespace braid::model {

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

class Builder {
 public:
  Builder(Device device, DType dtype, Weights& w, const WeightSource& source)
      : device_(device), dtype_(dtype), weights_(w), source_(source) {}

  // A new device tensor of the engine's dtype.
  Tensor allocate(const std::vector<int64_t>& shape) {
    weights_.storage.emplace_back(dtype_, shape, device_);
    const Tensor& t = weights_.storage.back().view();
    weights_.bytes += t.nbytes();
    return t;
  }

  void fill(const std::string& name, const std::vector<int64_t>& shape, const Tensor& dst) {
    source_(name, shape, dst);
  }

  Tensor load(const std::string& name, const std::vector<int64_t>& shape) {
    Tensor t = allocate(shape);
    fill(name, shape, t);
    return t;
  }

  // Several Hugging Face matrices stacked by rows into one [sum rows, cols] tensor (or vectors
  // into one [sum] tensor when cols == 0).
  Tensor stack(const std::vector<std::string>& names, const std::vector<int64_t>& rows, int64_t cols) {
    int64_t total = 0;
    for (int64_t r : rows) total += r;
    Tensor t = cols ? allocate({total, cols}) : allocate({total});
    int64_t at = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      fill(names[i], cols ? std::vector<int64_t>{rows[i], cols} : std::vector<int64_t>{rows[i]},
           t.slice(0, at, at + rows[i]));
      at += rows[i];
    }
    return t;
  }

  // Experts stored one tensor per expert, packed as [E, 2 I, H] (gate rows, then up) and [E, H, I].
  void experts(LayerWeights& lw, const std::string& prefix, int E, int I, int H, const char* gate,
               const char* up, const char* down) {
    lw.experts_gate_up = allocate({E, 2 * I, H});
    lw.experts_down = allocate({E, H, I});
    for (int e = 0; e < E; ++e) {
      const std::string p = prefix + "." + std::to_string(e) + ".";
      Tensor gu = lw.experts_gate_up.select(0, e);
      fill(p + gate + ".weight", {I, H}, gu.slice(0, 0, I));
      fill(p + up + ".weight", {I, H}, gu.slice(0, I, 2 * I));
      fill(p + down + ".weight", {H, I}, lw.experts_down.select(0, e));
    }
  }

 private:
  Device device_;
  DType dtype_;
  Weights& weights_;
  const WeightSource& source_;
};

}  // namespace

Weights build_weights(const ModelConfig& c, Device device, DType dtype, const WeightSource& source) {
  Weights w;
  w.device = device;
  w.dtype = dtype;
  Builder b(device, dtype, w, source);
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
    lw.qkv = b.stack({a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"},
                     {qd, kvd, kvd}, H);
    if (c.qkv_bias)
      lw.qkv_bias = b.stack({a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"},
                            {qd, kvd, kvd}, 0);
    if (c.qk_norm) {
      lw.q_norm = b.load(a + "q_norm.weight", {hd});
      lw.k_norm = b.load(a + "k_norm.weight", {hd});
    }
    lw.o_proj = b.load(a + "o_proj.weight", {H, qd});
    if (c.o_bias) lw.o_bias = b.load(a + "o_proj.bias", {H});
    lw.mlp_norm = b.load(p + "post_attention_layernorm.weight", {H});

    if (!c.layer_is_moe(l)) {
      const int I = c.intermediate_size;
      lw.gate_up = b.stack({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, {I, I}, H);
      lw.down = b.load(p + "mlp.down_proj.weight", {H, I});
      continue;
    }
    const int E = c.num_experts, I = c.moe_intermediate_size;
    if (c.arch == Arch::mixtral) {
      lw.router = b.load(p + "block_sparse_moe.gate.weight", {E, H});
      b.experts(lw, p + "block_sparse_moe.experts", E, I, H, "w1", "w3", "w2");
    } else {
      lw.router = b.load(p + "mlp.gate.weight", {E, H});
      b.experts(lw, p + "mlp.experts", E, I, H, "gate_proj", "up_proj", "down_proj");
    }
  }
  return w;
}

Weights load_weights(const ModelConfig& c, const Checkpoint& checkpoint, Device device, DType dtype) {
  OwnedTensor staging;  // host buffer for dtype conversions, reused
  auto from_checkpoint = [&](const std::string& name, const std::vector<int64_t>& shape,
                             const Tensor& dst) {
    const TensorEntry* e = checkpoint.find(name);
    if (!e)
      throw Error(ErrorKind::io, "checkpoint: missing tensor '" + name + "' (expected shape " +
                                     shape_text(shape) + ")");
    if (e->shape != shape)
      throw Error(ErrorKind::io, "checkpoint: tensor '" + name + "' in " + e->file +
                                     ": expected shape " + shape_text(shape) + ", got " +
                                     shape_text(e->shape));
    if (e->dtype != c.dtype)
      throw Error(ErrorKind::io, "checkpoint: tensor '" + name + "' in " + e->file + " is " +
                                     std::string(dtype_name(e->dtype)) + " but config.json says " +
                                     std::string(dtype_name(c.dtype)));
    const int64_t n = dst.numel();
    if (e->dtype == dtype) {
      copy(Tensor(const_cast<void*>(e->data), dtype, Device::cpu(), {n}), dst.reshape({n}));
      return;
    }
    staging = OwnedTensor(dtype, {n}, Device::cpu());
    for (int64_t i = 0; i < n; ++i)
      store_from_float(staging.data(), dtype, i, load_as_float(e->data, e->dtype, i));
    copy(staging.view(), dst.reshape({n}));
  };
  return build_weights(c, device, dtype, from_checkpoint);
}

}  // namespace braid::model
