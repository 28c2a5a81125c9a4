// What the fuzz targets share: the input as a file (the loaders take paths and mmap them), the
// input cut in two at a NUL byte, and the rule for what counts as a finding.
//
// The rule: a parser given hostile input may refuse it only with braid::Error (or, in the
// server, ApiError), whose message names the field. Anything else escaping (a json::type_error,
// std::out_of_range, ...) is uncaught, aborts, and libFuzzer records the input as a crash, like
// the sanitizers' reports and timeouts.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

namespace braid::fuzz {

// One anonymous in-memory file, reused by every run: no disk writes, and /proc/self/fd/N is a
// regular file that open(), stat() and mmap() accept like a checkpoint on disk.
class MemFile {
 public:
  MemFile() : fd_(memfd_create("braid_fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  // Replaces the contents with data and returns the path to open.
  const std::string& write(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0 || pwrite(fd_, data, size, 0) != static_cast<ssize_t>(size)) {
      std::perror("memfd write");
      std::abort();
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

// The input as text, split at its first NUL byte: (before, after). No NUL: (all, "").
inline std::pair<std::string_view, std::string_view> split_at_nul(const uint8_t* data,
                                                                  size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  if (nul == std::string_view::npos) return {all, {}};
  return {all.substr(0, nul), all.substr(nul + 1)};
}

// A property the target checks failed: report it and abort, so libFuzzer keeps the input.
[[noreturn]] inline void property_failed(const char* what) {
  std::fprintf(stderr, "braid fuzz: property failed: %s\n", what);
  std::abort();
}

}  // namespace braid::fuzz
