// Loading Hugging Face tensors into the engine's packed layout.
#include "model/weights.h"

#include <cstring>
#include <string>

#include "braid/error.h"

namespace braid::model {

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

class Loader {
 public:
  Loader(const ModelConfig& c, const Checkpoint& ck, Device device, DType dtype, Weights& w)
      : config_(c), checkpoint_(ck), device_(device), dtype_(dtype), weights_(w) {}

  bool has(const std::string& name) const { return checkpoint_.find(name) != nullptr; }

  // A new device tensor of the engine's dtype.
  Tensor allocate(const std::vector<int64_t>& shape) {
    weights_.storage.emplace_back(dtype_, shape, device_);
    const Tensor& t = weights_.storage.back().view();
    weights_.bytes += t.nbytes();
    return t;
  }

  // Copies checkpoint tensor `name` (which must have exactly `shape`) into `dst` (a contiguous
  // slice of an allocated tensor with the same number of elements), converting the dtype.
  void copy_into(const std::string& name, const std::vector<int64_t>& shape, const Tensor& dst) {
    const TensorEntry* e = checkpoint_.find(name);
    if (!e)
      throw Error(ErrorKind::io, "checkpoint: missing tensor '" + name + "' (expected shape " +
                                     shape_text(shape) + ")");
    if (e->shape != shape)
      throw Error(ErrorKind::io, "checkpoint: tensor '" + name + "' in " + e->file +
                                     ": expected shape " + shape_text(shape) + ", got " +
                                     shape_text(e->shape));
    if (e->dtype != config_.dtype)
      throw Error(ErrorKind::io, "checkpoint: tensor '" + name + "' in " + e->file + " is " +
                                     std::string(dtype_name(e->dtype)) + " but config.json says " +
                                     std::string(dtype_name(config_.dtype)));
    const int64_t n = dst.numel();
    if (e->dtype == dtype_) {
      Tensor src(const_cast<void*>(e->data), dtype_, Device::cpu(), {n});
      copy(src, dst.reshape({n}));
      return;
    }
    staging_ = OwnedTensor(dtype_, {n}, Device::cpu());
    for (int64_t i = 0; i < n; ++i)
      store_from_float(staging_.data(), dtype_, i, load_as_float(e->data, e->dtype, i));
    copy(staging_.view(), dst.reshape({n}));
  }

  Tensor load(const std::string& name, const std::vector<int64_t>& shape) {
    Tensor t = allocate(shape);
    copy_into(name, shape, t);
    return t;
  }

  // Rows of several checkpoint matrices stacked into one [sum rows, cols] tensor (or vectors
  // into one [sum] tensor when cols == 0).
  Tensor stack(const std::vector<std::string>& names, const std::vector<int64_t>& rows, int64_t cols) {
    int64_t total = 0;
    for (int64_t r : rows) total += r;
    Tensor t = cols ? allocate({total, cols}) : allocate({total});
    int64_t at = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      std::vector<int64_t> shape = cols ? std::vector<int64_t>{rows[i], cols}
                                        : std::vector<int64_t>{rows[i]};
      Tensor part = t.slice(0, at, at + rows[i]);
      copy_into(names[i], shape, part);
      at += rows[i];
    }
    return t;
  }

 private:
  const ModelConfig& config_;
  const Checkpoint& checkpoint_;
  Device device_;
  DType dtype_;
  Weights& weights_;
  OwnedTensor staging_;
};

// Experts stored one tensor per expert (transformers 4 and the original checkpoints).
void load_experts(Loader& ld, LayerWeights& lw, const std::string& experts, int E, int I, int H,
                  const char* gate, const char* up, const char* down) {
  lw.experts_gate_up = ld.allocate({E, 2 * I, H});
  lw.experts_down = ld.allocate({E, H, I});
  for (int e = 0; e < E; ++e) {
    const std::string p = experts + "." + std::to_string(e) + ".";
    Tensor gu = lw.experts_gate_up.select(0, e);
    ld.copy_into(p + gate + ".weight", {I, H}, gu.slice(0, 0, I));
    ld.copy_into(p + up + ".weight", {I, H}, gu.slice(0, I, 2 * I));
    ld.copy_into(p + down + ".weight", {H, I}, lw.experts_down.select(0, e));
  }
}

}  // namespace

Weights load_weights(const ModelConfig& c, const Checkpoint& ck, Device device, DType dtype) {
  Weights w;
  w.device = device;
  w.dtype = dtype;
  Loader ld(c, ck, device, dtype, w);
  const int H = c.hidden_size, V = c.vocab_size, hd = c.head_dim;
  const int qd = c.q_dim(), kvd = c.kv_dim();

  w.embed = ld.load("model.embed_tokens.weight", {V, H});
  w.final_norm = ld.load("model.norm.weight", {H});
  if (c.tie_word_embeddings)
    w.lm_head = w.embed;
  else
    w.lm_head = ld.load("lm_head.weight", {V, H});

  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (int l = 0; l < c.num_layers; ++l) {
    LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.";
    lw.attn_norm = ld.load(p + "input_layernorm.weight", {H});
    lw.qkv = ld.stack({a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"},
                      {qd, kvd, kvd}, H);
    if (c.qkv_bias)
      lw.qkv_bias = ld.stack({a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"},
                             {qd, kvd, kvd}, 0);
    if (c.qk_norm) {
      lw.q_norm = ld.load(a + "q_norm.weight", {hd});
      lw.k_norm = ld.load(a + "k_norm.weight", {hd});
    }
    lw.o_proj = ld.load(a + "o_proj.weight", {H, qd});
    if (c.o_bias) lw.o_bias = ld.load(a + "o_proj.bias", {H});
    lw.mlp_norm = ld.load(p + "post_attention_layernorm.weight", {H});

    if (!c.layer_is_moe(l)) {
      const int I = c.intermediate_size;
      lw.gate_up = ld.stack({p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"}, {I, I}, H);
      lw.down = ld.load(p + "mlp.down_proj.weight", {H, I});
      continue;
    }
    const int E = c.num_experts, I = c.moe_intermediate_size;
    if (c.arch == Arch::mixtral) {
      const std::string m = p + "block_sparse_moe.";
      lw.router = ld.load(m + "gate.weight", {E, H});
      load_experts(ld, lw, m + "experts", E, I, H, "w1", "w3", "w2");
    } else {
      lw.router = ld.load(p + "mlp.gate.weight", {E, H});
      load_experts(ld, lw, p + "mlp.experts", E, I, H, "gate_proj", "up_proj", "down_proj");
    }
  }
  return w;
}

}  // namespace braid::model
