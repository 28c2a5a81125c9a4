// The engine's weights for one model, on one device, in one dtype, packed for the forward pass:
// Q|K|V in one [q_dim + 2 kv_dim, hidden] matrix, gate|up in one [2 I, hidden] matrix, and each
// MoE layer's experts in [E, 2 I, hidden] and [E, hidden, I] tensors.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "braid/buffer.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "model/shard.h"

namespace braid::model {

// The linear layers (qkv, o_proj, gate_up, down) are in the weights' dtype, or, for an fp8
// checkpoint (ModelConfig::weights), fp8 e4m3 with the f32 *_scale beside them (ops::Weight's
// layouts: [rows / 128, cols / 128] blocks, or [rows, 1] per row).
struct LayerWeights {
  Tensor attn_norm;  // [hidden]
  Tensor qkv;        // [q_dim + 2 kv_dim, hidden]
  Tensor qkv_scale;  // fp8 only
  Tensor qkv_bias;   // [q_dim + 2 kv_dim] or undefined
  Tensor q_norm;     // [head_dim] or undefined (Qwen3)
  Tensor k_norm;     // [head_dim] or undefined
  Tensor o_proj;     // [hidden, q_dim]
  Tensor o_proj_scale;
  Tensor o_bias;     // [hidden] or undefined
  Tensor mlp_norm;   // [hidden]
  // Dense MLP.
  Tensor gate_up;    // [2 I, hidden]
  Tensor gate_up_scale;
  Tensor down;       // [hidden, I]
  Tensor down_scale;
  // Mixture of experts.
  Tensor router;           // [E, hidden]
  Tensor router_bias;      // [E] f32: DeepSeek-V3's e_score_correction_bias (sigmoid routing)
  Tensor experts_gate_up;  // [E, 2 I_moe, hidden]: each expert's gate rows, then its up rows
  Tensor experts_down;     // [E, hidden, I_moe]
  // fp8 experts (ModelConfig::fp8_experts): the two above in f8e4m3, with their 128 x 128 block
  // scales as moe_grouped_gemm_fp8 takes them: [E, 2 I_moe / 128, hidden / 128] (gate blocks,
  // then up) and [E, hidden / 128, I_moe / 128], f32. Undefined for 16-bit experts.
  Tensor experts_gate_up_scale;
  Tensor experts_down_scale;
  // DeepSeek's shared experts: one dense MLP, n_shared_experts x I_moe wide.
  Tensor shared_gate_up, shared_gate_up_scale;  // [2 I_shared, hidden]
  Tensor shared_down, shared_down_scale;        // [hidden, I_shared]

  // Multi-head latent attention (DeepSeek). qkv is then [q_proj or q_a_proj | kv_a_proj_with_mqa]
  // (both read the normed input: one GEMM), o_proj [hidden, heads x v_head_dim].
  Tensor q_a_norm;            // [q_lora_rank] (q LoRA only)
  Tensor q_b, q_b_scale;      // [heads x (nope + rope), q_lora_rank] (q LoRA only)
  Tensor kv_a_norm;           // [kv_lora_rank]
  // kv_b_proj's per-head parts as gemm_batched takes them (strided views of one tensor):
  Tensor w_uk;  // [heads, kv_lora_rank, nope]: q_nope -> the query's latent (absorbed W_UK)
  Tensor w_uv;  // [heads, v_head_dim, kv_lora_rank]: the attended latent -> v (W_UV)
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

// Where each weight's values come from: called once per Hugging Face tensor with its name, the
// shape the config implies for it and the destination (a contiguous slice on the device, in the
// engine's dtype; for an fp8 checkpoint's linear layers and routed experts an f8e4m3 slice, and
// their scales, named "<weight>_scale_inv" or "<weight>_scale", an f32 slice).
using WeightSource = std::function<void(const std::string& name, const std::vector<int64_t>& shape,
                                        const Tensor& dst)>;

// Called with each Hugging Face tensor's name and shape before the memory that will hold it is
// allocated; throws if the source cannot supply it. A checkpoint's check keeps the loader from
// allocating what a config only claims.
using WeightCheck = std::function<void(const std::string& name, const std::vector<int64_t>& shape)>;

// Load-time quantization of a checkpoint's linear layers (--quantize).
enum class Quantize {
  none,
  // The 16-bit (bf16, f16 or f32) linear layers to fp8 e4m3 with a scale per 128 x 128 block, as
  // a DeepSeek-style fp8 checkpoint holds them (quantize_fp8_blocks); the model then runs as
  // WeightFormat::fp8_blocks: every tensor that format loads in fp8 is quantized (the routed
  // experts too, ModelConfig::fp8_experts). Embeddings, norms, routers and the LM head stay 16-bit.
  fp8,
};
// "none" or "fp8"; nullopt for anything else (callers name their option in the error).
std::optional<Quantize> quantize_from_name(std::string_view name);
std::string_view quantize_name(Quantize q);

// The config the engine runs for a checkpoint loaded with `q`: with fp8 a 16-bit checkpoint's
// becomes WeightFormat::fp8_blocks; a checkpoint that is already fp8 (either format) keeps its
// own, its fp8 tensors loading as they are.
ModelConfig quantized_config(ModelConfig config, Quantize q);

// The 128 x 128 block fp8 quantization of a row-major [rows, cols] matrix of `dtype` values (f32,
// bf16 or f16), partial blocks at the edges: per block scale = amax(|block|) / 448 (448: e4m3's
// largest finite value, so the block's largest value maps to it), values[i] = e4m3(w[i] / scale),
// rounded to nearest even and saturating (float_to_f8e4m3). A block whose scale would be 0 (all
// zeros, or values so small that amax / 448 underflows f32) gets scale 1: its values quantize to
// 0, and a scale of 0 would make them NaN. values: [rows, cols] e4m3 codes; scales: [ceil(rows /
// 128), ceil(cols / 128)] row-major. A non-finite value (fp8 e4m3 has no infinity) is an error
// (ErrorKind::io, a broken checkpoint) naming `name`. Runs on all host cores.
void quantize_fp8_blocks(const std::string& name, const void* w, DType dtype, int64_t rows,
                         int64_t cols, uint8_t* values, float* scales);

// Allocates every weight the config needs in the packed layout and fills each from `source`
// (after `check`, when given, has accepted every tensor going into that allocation). A config of
// an expert-parallel rank (expert_parallel > 1) holds the routed experts [first_expert,
// first_expert + held_experts()) of the checkpoint, packed as local experts 0 .. held - 1: only
// those are asked of `source`.
Weights build_weights(const ModelConfig& config, Device device, DType dtype,
                      const WeightSource& source, const WeightCheck& check = {},
                      int first_expert = 0);

// Loads and packs every weight the config needs, converted to `dtype`, on `device`. Each tensor
// must exist with the shape the config implies and the checkpoint's declared dtype; a missing,
// mis-shaped or mis-typed tensor is an error (ErrorKind::io) that names it; a missing or
// mis-shaped one is found before its memory is allocated, so what is allocated never exceeds what
// the checkpoint holds (converted), whatever sizes config.json claims.
// With quantize fp8, `config` is quantized_config's: each linear layer the fp8 layout wants in
// fp8 that the checkpoint holds 16-bit is quantized on the host (quantize_fp8_blocks) as it is
// loaded, and "<name>_scale_inv" is its computed scales instead of a checkpoint tensor; tensors
// already in fp8 load as they are. A per-channel fp8 checkpoint's routed experts (which the fp8
// expert kernels take in 128 x 128 blocks only) are requantized the same way as they load, from
// each code times its row's scale in f32; its other linear layers keep their per-row scales.
// With tp.size > 1, rank tp.rank's part (shard_config(config, tp.size), tensor_slice): each
// tensor's rows are read in place from the mapped file, a column slice is gathered through a
// host buffer of the slice's size, so no rank copies a whole tensor. With tp.expert_parallel the
// rank reads only its own routed experts (experts_of), whole, renumbered from 0.
Weights load_weights(const ModelConfig& config, const Checkpoint& checkpoint, Device device,
                     DType dtype, Quantize quantize = Quantize::none, TensorParallel tp = {});

}  // namespace braid::model
