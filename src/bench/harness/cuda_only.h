// The one way code outside a cuda/ folder reaches code inside one.
//
// CMake compiles cuda/ folders (and .cu files) only when the build has CUDA. Their functions are
// declared in plain headers, so any file may name them, but only through BRAID_CUDA_ONLY(f): f's
// address in a CUDA build, a null pointer of f's type in a build without CUDA (where f has no
// definition: it appears only in decltype, which does not use it). The caller decides what a null
// pointer means: the registry lists a GPU suite without its command, a device dispatch calls
// cuda_only(), which says the build has no CUDA support. `grep BRAID_CUDA_ONLY` lists every place
// the CPU code of the bench reaches the GPU.
#pragma once

#include <string>

#if BRAID_WITH_CUDA
#define BRAID_CUDA_ONLY(f) ::braid::bench::cuda_function(&(f))
#else
#define BRAID_CUDA_ONLY(f) static_cast<decltype(&(f))>(nullptr)
#endif

namespace braid::bench {

// What BRAID_CUDA_ONLY gives in a CUDA build: the pointer as a value a caller may test.
template <class F>
F* cuda_function(F* f) {
  return f;
}

// Throws braid::Error (unsupported): "WHAT: this build of braidinfer has no CUDA support".
[[noreturn]] void needs_cuda(const std::string& what);

// `f` (a BRAID_CUDA_ONLY pointer) to call, or needs_cuda(what) where this build lacks it.
template <class F>
F* cuda_only(F* f, const char* what) {
  if (!f) needs_cuda(what);
  return f;
}

}  // namespace braid::bench
