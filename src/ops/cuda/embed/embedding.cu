// Embedding lookup: one block per token copies one table row. The copy is dtype-agnostic, so the
// kernel moves whole 16-byte words when the row bytes and pointers allow it and single elements
// otherwise. An id outside the table's rows writes a zero row: checking on the host would need a
// synchronisation, and a zero row is harmless where an out-of-bounds read would fault (and for
// embedding_rows it is the contract: another rank's id).
#include "core/cuda_check.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/pdl.cuh"

namespace braid::cuda {

namespace {

struct EmbedArgs {
  const void* ids;
  const void* table;
  void* out;
  int64_t vocab;              // the table's rows
  int64_t first;              // the id of the table's first row (embedding_rows)
  int64_t table_stride, out_stride;  // in Words
  int words;                         // Words per row
};

// Word: the unit copied per thread (uint4 = 16 bytes, or one element). Id: int32_t or int64_t.
template <typename Word, typename Id>
__global__ void embedding_kernel(EmbedArgs a) {
  // Launched the ordinary way (the first kernel of a step follows the copy of its inputs), it
  // still lets the next kernel's blocks start staging (pdl.cuh).
  pdl::launch_dependents();
  const int64_t token = blockIdx.x;
  const int64_t id = static_cast<const Id*>(a.ids)[token] - a.first;
  Word* out = static_cast<Word*>(a.out) + token * a.out_stride;
  if (id < 0 || id >= a.vocab) {
    for (int j = threadIdx.x; j < a.words; j += blockDim.x) out[j] = Word{};
    return;
  }
  const Word* row = static_cast<const Word*>(a.table) + id * a.table_stride;
  for (int j = threadIdx.x; j < a.words; j += blockDim.x) out[j] = row[j];
}

template <typename Word>
void launch(const Tensor& ids, EmbedArgs a, int64_t tokens, cudaStream_t s) {
  int threads = (a.words + 31) / 32 * 32;
  threads = threads < 32 ? 32 : (threads > 256 ? 256 : threads);
  const unsigned blocks = static_cast<unsigned>(tokens);
  if (ids.dtype == DType::i32)
    embedding_kernel<Word, int32_t><<<blocks, threads, 0, s>>>(a);
  else
    embedding_kernel<Word, int64_t><<<blocks, threads, 0, s>>>(a);
}

}  // namespace

void embedding_rows(const Tensor& ids, const Tensor& table, int64_t first_id, const Tensor& out,
                    Stream stream) {
  const int64_t elem = static_cast<int64_t>(dtype_size(table.dtype));
  const int64_t row_bytes = table.size(1) * elem;
  const bool can_vec = row_bytes % 16 == 0 && aligned16(table.data) && aligned16(out.data) &&
                       (table.row_stride() * elem) % 16 == 0 && (out.row_stride() * elem) % 16 == 0;
  const int64_t word = can_vec ? 16 : elem;
  EmbedArgs a{ids.data, table.data, out.data, table.size(0), first_id,
              table.row_stride() * elem / word, out.row_stride() * elem / word,
              static_cast<int>(row_bytes / word)};
  auto s = static_cast<cudaStream_t>(stream.handle);
  if (can_vec) launch<uint4>(ids, a, ids.size(0), s);
  else if (elem == 4) launch<uint32_t>(ids, a, ids.size(0), s);
  else launch<uint16_t>(ids, a, ids.size(0), s);
  BRAID_CUDA_CHECK_LAUNCH();
}

void embedding(const Tensor& ids, const Tensor& table, const Tensor& out, Stream stream) {
  embedding_rows(ids, table, 0, out, stream);
}

}  // namespace braid::cuda
