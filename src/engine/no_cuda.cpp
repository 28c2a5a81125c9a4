// CPU-only builds: the CUDA decode graph exists but is never used (the engine runs on the CPU).
#if !BRAID_WITH_CUDA

#include "braid/error.h"
#include "engine/decode_graph.h"

namespace braid::engine {

DecodeGraph::DecodeGraph(int, int32_t*, int, int32_t*, std::function<void(Stream)>) {
  throw Error(ErrorKind::unsupported, "decode graph: this build of braidinfer has no CUDA support");
}
DecodeGraph::~DecodeGraph() = default;
const int32_t* DecodeGraph::run() { return nullptr; }

}  // namespace braid::engine

#endif
