#include "braid/ops.h"

namespace braid::ops {

namespace {
thread_local int open_scopes = 0;
}  // namespace

ConstantWeights::ConstantWeights() { ++open_scopes; }
ConstantWeights::~ConstantWeights() { --open_scopes; }
bool ConstantWeights::active() { return open_scopes > 0; }

}  // namespace braid::ops
