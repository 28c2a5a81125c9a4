// The engine's weights for one model, on one device, in one dtype, packed for the forward pass:
// Q|K|V in one [q_dim + 2 kv_dim, hidden] matrix, gate|up in one [2 I, hidden] matrix, and each
// MoE layer's experts in [E, 2 I, hidden] and [E, hidden, I] tensors.
#pragma once

#include <vector>

#include "braid/buffer.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace braid::model {

struct LayerWeights {
  Tensor attn_norm;  // [hidden]
  Tensor qkv;        // [q_dim + 2 kv_dim, hidden]
  Tensor qkv_bias;   // [q_dim + 2 kv_dim] or undefined
  Tensor q_norm;     // [head_dim] or undefined (Qwen3)
  Tensor k_norm;     // [head_dim] or undefined
  Tensor o_proj;     // [hidden, q_dim]
  Tensor o_bias;     // [hidden] or undefined
  Tensor mlp_norm;   // [hidden]
  // Dense MLP.
  Tensor gate_up;    // [2 I, hidden]
  Tensor down;       // [hidden, I]
  // Mixture of experts.
  Tensor router;           // [E, hidden]
  Tensor experts_gate_up;  // [E, 2 I_moe, hidden]
  Tensor experts_down;     // [E, hidden, I_moe]
};

struct Weights {
  Device device;
  DType dtype = DType::bf16;
  Tensor embed;       // [vocab, hidden]
  Tensor final_norm;  // [hidden]
  Tensor lm_head;     // [vocab, hidden]; the embedding when tied
  std::vector<LayerWeights> layers;
  std::vector<OwnedTensor> storage;  // owns everything above
  size_t bytes = 0;                  // total weight bytes on the device
};

// Loads and packs every weight the config needs, converted to `dtype`, on `device`. Each tensor
// must exist with the shape the config implies and the checkpoint's declared dtype; a missing,
// mis-shaped or mis-typed tensor is an error (ErrorKind::io) that names it.
Weights load_weights(const ModelConfig& config, const Checkpoint& checkpoint, Device device,
                     DType dtype);

}  // namespace braid::model
