// CPU-only builds: `braidinfer profile` exists but says why it cannot run.
#if !BRAID_WITH_CUDA

#include <string>

#include "bench/profile/profile.h"
#include "braid/error.h"

namespace braid::bench {

namespace {

[[noreturn]] void no_cuda() {
  throw Error(ErrorKind::unsupported, "profile: this build of braidinfer has no CUDA support");
}

}  // namespace

ProfileRun run_profile(const ProfileOptions&) { no_cuda(); }
void run_profile_for_ncu(const ProfileOptions&, const std::string&) { no_cuda(); }

}  // namespace braid::bench

#endif  // !BRAID_WITH_CUDA
