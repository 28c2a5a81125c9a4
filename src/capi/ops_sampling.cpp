// C wrappers: sample_tokens and its workspace size.
#include "braid/ops.h"
#include "capi/capi.h"

using namespace braid::capi;

extern "C" {

int64_t braid_sample_tokens_workspace_bytes(int64_t rows, int64_t vocab) {
  const char* op = "sample_tokens_workspace_bytes";
  int64_t bytes = -1;  // what a refused size returns; the message says why
  guarded(op, [&] { bytes = braid::ops::sample_tokens_workspace_bytes(rows, vocab); });
  return bytes;
}

braid_status braid_sample_tokens(const braid_tensor* logits, const braid_tensor* temperature,
                                 const braid_tensor* top_k, const braid_tensor* top_p,
                                 const braid_tensor* min_p, const braid_tensor* seeds,
                                 const braid_tensor* steps, const braid_tensor* workspace,
                                 const braid_tensor* tokens, void* stream) {
  const char* op = "sample_tokens";
  return guarded(op, [&] {
    braid::ops::sample_tokens(
        tensor_arg(op, "logits", logits), tensor_arg(op, "temperature", temperature),
        tensor_arg(op, "top_k", top_k), tensor_arg(op, "top_p", top_p),
        tensor_arg(op, "min_p", min_p), tensor_arg(op, "seeds", seeds),
        tensor_arg(op, "steps", steps), optional_tensor_arg(op, "workspace", workspace),
        tensor_arg(op, "tokens", tokens), stream_arg(stream));
  });
}

}  // extern "C"
