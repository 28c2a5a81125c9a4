// How moe_fp8_block_scale's CUDA path carves its u8 workspace. One function gives both the
// workspace size (moe_fp8_block_scale_workspace_bytes) and the CUDA composition's pointers, so
// the two cannot disagree.
#pragma once

#include <cstdint>

#include "braid/ops.h"

namespace braid::ops::fp8_block_scale {

// Every piece starts on this boundary (TMA wants 16 bytes, vector loads 16; 256 is what the
// allocators give, so a workspace from them has every piece aligned).
inline constexpr int64_t kPieceAlign = 256;

// Byte offsets of the pieces from the workspace start, in the order the layer uses them, and the
// total size. P = tokens * top_k pairs; the transposed scale tensors have a row stride of
// scale_stride = P rounded up to a multiple of 4 floats (16 bytes).
struct Layout {
  int64_t pairs = 0, scale_stride = 0;
  int64_t topk_weights = 0;     // [T, k] f32
  int64_t topk_ids = 0;         // [T, k] i32: global ids, then rewritten to local ids in place
  int64_t expert_offsets = 0;   // [E + 1] i32
  int64_t sorted_pairs = 0;     // [P] i32
  int64_t pair_rows = 0;        // [P] i32
  int64_t permute_scratch = 0;  // [moe_permute_workspace_size(P, E)] i32
  int64_t xs = 0;               // [P, H] f8e4m3: the tokens' rows in expert order
  int64_t xs_scale = 0;         // [H / 128, scale_stride] f32
  int64_t h = 0;                // [P, terms * I] f8e4m3: the SwiGLU output as fp8 terms
  int64_t h_scale = 0;          // [terms * I / 128, scale_stride] f32
  int64_t ys = 0;               // [P, H] f32: each pair's expert output
  int64_t total = 0;
};

inline Layout layout(int64_t tokens, int64_t hidden, int64_t intermediate, int64_t local_experts,
                     int top_k, int intermediate_terms) {
  Layout l;
  l.pairs = tokens * top_k;
  l.scale_stride = (l.pairs + 3) / 4 * 4;
  int64_t end = 0;
  auto piece = [&](int64_t bytes) {
    const int64_t start = end;
    end = start + (bytes + kPieceAlign - 1) / kPieceAlign * kPieceAlign;
    return start;
  };
  const int64_t blocks_h = hidden / kFp8Block, blocks_i = intermediate_terms * intermediate / kFp8Block;
  l.topk_weights = piece(l.pairs * 4);
  l.topk_ids = piece(l.pairs * 4);
  l.expert_offsets = piece((local_experts + 1) * 4);
  l.sorted_pairs = piece(l.pairs * 4);
  l.pair_rows = piece(l.pairs * 4);
  l.permute_scratch = piece(moe_permute_workspace_size(l.pairs, local_experts) * 4);
  l.xs = piece(l.pairs * hidden);
  l.xs_scale = piece(blocks_h * l.scale_stride * 4);
  l.h = piece(l.pairs * intermediate_terms * intermediate);
  l.h_scale = piece(blocks_i * l.scale_stride * 4);
  l.ys = piece(l.pairs * hidden * 4);
  l.total = end;
  return l;
}

}  // namespace braid::ops::fp8_block_scale
