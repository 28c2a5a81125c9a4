// qk_norm_rope_kv_append, CPU reference: the three reference ops in sequence, literally.
#include "ops/cpu/cpu_ops.h"

namespace braid::cpu {

void qk_norm_rope_kv_append(const Tensor& q, const Tensor& k, const Tensor& v,
                            const Tensor& q_norm, const Tensor& k_norm, float eps,
                            const Tensor& positions, const ops::RopeTable& table,
                            const Tensor& slots, const Tensor& k_pages, const Tensor& v_pages) {
  if (q_norm.data != nullptr) {  // the entry passes both norms or neither
    rms_norm(q, q_norm, eps, q);
    rms_norm(k, k_norm, eps, k);
  }
  rope_apply(q, k, positions, table);
  kv_append(k, v, slots, k_pages, v_pages);
}

}  // namespace braid::cpu
