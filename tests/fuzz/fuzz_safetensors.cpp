// Fuzz target: a .safetensors file (8-byte header length, JSON header, tensor table, data).
// Opens it as a checkpoint and, when it is accepted, views every tensor and reads its first and
// last byte: an accepted table must describe memory inside the mapping, with a shape whose
// strides fit int64.
#include <cstdint>

#include "braid/error.h"
#include "fuzz/fuzz_util.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static braid::fuzz::MemFile file;
  const std::string& path = file.write(data, size);
  try {
    const braid::model::Checkpoint c = braid::model::Checkpoint::open(path);
    volatile uint8_t sink = 0;
    for (const std::string& name : c.names()) {
      const braid::model::TensorEntry* e = c.find(name);
      if (e == nullptr) braid::fuzz::property_failed("names() lists a tensor find() misses");
      if (e->nbytes > 0) {
        const auto* bytes = static_cast<const uint8_t*>(e->data);
        sink = sink + bytes[0] + bytes[e->nbytes - 1];  // a bad offset faults here
      }
      try {
        const braid::Tensor t = c.view(name);
        if (t.nbytes() != e->nbytes)
          braid::fuzz::property_failed("a view's size differs from its entry's byte count");
      } catch (const braid::Error&) {  // more dimensions than a Tensor holds: refused, fine
      }
    }
  } catch (const braid::Error&) {
  }
  return 0;
}
