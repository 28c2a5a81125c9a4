// profile/cuda/cupti_collector.h: libcupti loaded with dlopen, activity records read through its buffer
// callbacks. Only the types come from the CUPTI headers; every function is resolved with dlsym.
#include <cupti.h>
#include <dlfcn.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "bench/profile/cuda/cupti_collector.h"
#include "braid/error.h"

namespace braid::bench {

// The functions used, by their declared types.
struct CuptiCollector::Library {
  void* handle = nullptr;
  std::string path;
  decltype(&cuptiGetVersion) get_version = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  decltype(&cuptiGetTimestamp) timestamp = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiActivityGetNumDroppedRecords) dropped_records = nullptr;
  decltype(&cuptiGetCallbackName) callback_name = nullptr;  // optional: names API calls

  std::string error(CUptiResult r) const {
    const char* s = nullptr;
    if (result_string && result_string(r, &s) == CUPTI_SUCCESS && s) return s;
    return fmt::format("CUPTI error {}", static_cast<int>(r));
  }
  void check(CUptiResult r, const char* what) const {
    if (r != CUPTI_SUCCESS)
      throw Error(ErrorKind::unsupported, fmt::format("profile: {} failed: {}", what, error(r)));
  }
};

namespace {

constexpr size_t kBufferBytes = size_t{8} << 20;
constexpr CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER, CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET};

// What the buffer callbacks fill; CUPTI may call them from its own thread.
struct Sink {
  std::mutex mutex;
  const CuptiCollector::Library* lib = nullptr;
  ProfileTrace trace;
  std::map<std::pair<int, uint32_t>, std::string> api_names;  // (domain, cbid) -> name
  std::string record_error;  // the first record-iteration failure
};
Sink g_sink;

std::string memcpy_name(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "memcpy HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy PtoP";
    default: return "memcpy (array)";
  }
}

// "cudaLaunchKernel_v7000" -> "cudaLaunchKernel".
std::string strip_version(std::string name) {
  const size_t v = name.rfind("_v");
  if (v != std::string::npos && v + 2 < name.size() &&
      name.find_first_not_of("0123456789", v + 2) == std::string::npos)
    name.erase(v);
  return name;
}

std::string api_name(Sink& sink, bool runtime, uint32_t cbid) {
  const CUpti_CallbackDomain domain =
      runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API;
  auto [it, fresh] = sink.api_names.try_emplace({static_cast<int>(domain), cbid});
  if (fresh) {
    const char* name = nullptr;
    if (sink.lib->callback_name && sink.lib->callback_name(domain, cbid, &name) == CUPTI_SUCCESS && name)
      it->second = strip_version(name);
    else
      it->second = fmt::format("{} API {}", runtime ? "runtime" : "driver", cbid);
  }
  return it->second;
}

void take_record(Sink& sink, const CUpti_Activity* record) {
  ProfileTrace& t = sink.trace;
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      if (k->start == 0 && k->end == 0) {  // CUPTI could not time it
        ++t.dropped_records;
        return;
      }
      GpuActivity a;
      a.kind = ActivityKind::kernel;
      a.name = k->name ? k->name : "(unnamed kernel)";
      a.start_ns = k->start;
      a.end_ns = k->end;
      a.device = k->deviceId;
      a.stream = k->streamId;
      a.correlation = k->correlationId;
      a.graph_id = k->graphId;
      a.grid[0] = k->gridX, a.grid[1] = k->gridY, a.grid[2] = k->gridZ;
      a.block[0] = k->blockX, a.block[1] = k->blockY, a.block[2] = k->blockZ;
      a.registers = k->registersPerThread;
      a.static_shared = k->staticSharedMemory;
      a.dynamic_shared = k->dynamicSharedMemory;
      t.activities.push_back(std::move(a));
      return;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      if (m->start == 0 && m->end == 0) {
        ++t.dropped_records;
        return;
      }
      GpuActivity a;
      a.kind = ActivityKind::memcpy;
      a.name = memcpy_name(m->copyKind);
      a.start_ns = m->start;
      a.end_ns = m->end;
      a.device = m->deviceId;
      a.stream = m->streamId;
      // The driver call's id; the runtime call's when the copy came through the runtime.
      a.correlation = m->runtimeCorrelationId != 0 ? m->runtimeCorrelationId : m->correlationId;
      a.graph_id = m->graphId;
      a.bytes = m->bytes;
      t.activities.push_back(std::move(a));
      return;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
      if (m->start == 0 && m->end == 0) {
        ++t.dropped_records;
        return;
      }
      GpuActivity a;
      a.kind = ActivityKind::memset;
      a.name = "memset";
      a.start_ns = m->start;
      a.end_ns = m->end;
      a.device = m->deviceId;
      a.stream = m->streamId;
      a.correlation = m->correlationId;
      a.graph_id = m->graphId;
      a.bytes = m->bytes;
      t.activities.push_back(std::move(a));
      return;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const auto* c = reinterpret_cast<const CUpti_ActivityAPI*>(record);
      ApiCall call;
      call.runtime = record->kind == CUPTI_ACTIVITY_KIND_RUNTIME;
      call.name = api_name(sink, call.runtime, c->cbid);
      call.start_ns = c->start;
      call.end_ns = c->end;
      call.thread = c->threadId;
      call.correlation = c->correlationId;
      t.api_calls.push_back(std::move(call));
      return;
    }
    default:
      return;  // kinds not enabled here
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;  // no buffer: CUPTI drops the records and counts them
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream_id, uint8_t* buffer, size_t,
                               size_t valid_size) {
  std::lock_guard<std::mutex> lock(g_sink.mutex);
  if (g_sink.lib && valid_size > 0) {
    CUpti_Activity* record = nullptr;
    for (;;) {
      const CUptiResult r = g_sink.lib->next_record(buffer, valid_size, &record);
      if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;
      if (r != CUPTI_SUCCESS) {
        if (g_sink.record_error.empty()) g_sink.record_error = g_sink.lib->error(r);
        break;
      }
      take_record(g_sink, record);
    }
    size_t dropped = 0;
    if (g_sink.lib->dropped_records(context, stream_id, &dropped) == CUPTI_SUCCESS)
      g_sink.trace.dropped_records += dropped;
  }
  std::free(buffer);
}

template <typename F>
void resolve(void* handle, const char* name, F& fn, const std::string& path) {
  fn = reinterpret_cast<F>(dlsym(handle, name));
  if (!fn)
    throw Error(ErrorKind::unsupported,
                fmt::format("profile: {} has no symbol {} (not a usable CUPTI)", path, name));
}

std::vector<std::string> candidate_paths() {
  std::vector<std::string> paths = {"libcupti.so.13", "libcupti.so"};
  std::vector<std::string> roots;
  if (const char* home = std::getenv("CUDA_HOME"); home && *home) roots.push_back(home);
  roots.push_back("/usr/local/cuda");
  for (const auto& root : roots)
    for (const char* dir : {"/lib64/", "/extras/CUPTI/lib64/"})
      for (const char* file : {"libcupti.so.13", "libcupti.so"}) paths.push_back(root + dir + file);
  return paths;
}

}  // namespace

CuptiCollector::CuptiCollector() : lib_(std::make_unique<Library>()) {
  std::string tried;
  for (const auto& path : candidate_paths()) {
    lib_->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib_->handle) {
      lib_->path = path;
      break;
    }
    const char* why = dlerror();
    tried += fmt::format("\n  {}: {}", path, why ? why : "not loadable");
  }
  if (!lib_->handle)
    throw Error(ErrorKind::unsupported,
                "profile: cannot load CUPTI (libcupti.so.13); set LD_LIBRARY_PATH or CUDA_HOME to "
                "a CUDA 13 toolkit that has it. Tried:" + tried);
  const std::string& p = lib_->path;
  resolve(lib_->handle, "cuptiGetVersion", lib_->get_version, p);
  resolve(lib_->handle, "cuptiGetResultString", lib_->result_string, p);
  resolve(lib_->handle, "cuptiGetTimestamp", lib_->timestamp, p);
  resolve(lib_->handle, "cuptiActivityRegisterCallbacks", lib_->register_callbacks, p);
  resolve(lib_->handle, "cuptiActivityEnable", lib_->enable, p);
  resolve(lib_->handle, "cuptiActivityDisable", lib_->disable, p);
  resolve(lib_->handle, "cuptiActivityFlushAll", lib_->flush_all, p);
  resolve(lib_->handle, "cuptiActivityGetNextRecord", lib_->next_record, p);
  resolve(lib_->handle, "cuptiActivityGetNumDroppedRecords", lib_->dropped_records, p);
  lib_->callback_name =
      reinterpret_cast<decltype(lib_->callback_name)>(dlsym(lib_->handle, "cuptiGetCallbackName"));
  uint32_t version = 0;
  lib_->check(lib_->get_version(&version), "cuptiGetVersion");
  // Records are read through this build's struct layouts; a CUPTI of another major version may
  // lay them out differently. Newer minor versions only add fields at the end.
  if (version / 10000 != CUPTI_API_VERSION / 10000)
    throw Error(ErrorKind::unsupported,
                fmt::format("profile: {} is CUPTI API version {}; this build reads the record "
                            "layouts of version {} (CUDA {}.x)",
                            p, version, CUPTI_API_VERSION, CUPTI_API_VERSION / 10000));
}

CuptiCollector::~CuptiCollector() {
  if (started_) {
    for (CUpti_ActivityKind k : kKinds) lib_->disable(k);
    lib_->flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::lock_guard<std::mutex> lock(g_sink.mutex);
    g_sink.lib = nullptr;
  }
  // libcupti stays loaded: CUPTI keeps hooks in the driver for the life of the process.
}

void CuptiCollector::start() {
  {
    std::lock_guard<std::mutex> lock(g_sink.mutex);
    if (g_sink.lib)
      throw Error(ErrorKind::internal, "profile: a CUPTI collector is already recording");
    g_sink.lib = lib_.get();
    g_sink.trace = ProfileTrace{};
    g_sink.record_error.clear();
  }
  lib_->check(lib_->register_callbacks(buffer_requested, buffer_completed),
              "cuptiActivityRegisterCallbacks");
  started_ = true;
  for (CUpti_ActivityKind k : kKinds)
    lib_->check(lib_->enable(k), fmt::format("cuptiActivityEnable(kind {})", static_cast<int>(k)).c_str());
}

ProfileTrace CuptiCollector::stop() {
  if (!started_) throw Error(ErrorKind::internal, "profile: CUPTI collector stopped before start");
  lib_->check(lib_->flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  for (CUpti_ActivityKind k : kKinds) lib_->check(lib_->disable(k), "cuptiActivityDisable");
  lib_->check(lib_->flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  started_ = false;
  std::lock_guard<std::mutex> lock(g_sink.mutex);
  g_sink.lib = nullptr;
  if (!g_sink.record_error.empty())
    throw Error(ErrorKind::unsupported,
                "profile: reading CUPTI activity records failed: " + g_sink.record_error);
  return std::move(g_sink.trace);
}

uint64_t CuptiCollector::now() const {
  uint64_t t = 0;
  lib_->check(lib_->timestamp(&t), "cuptiGetTimestamp");
  return t;
}

}  // namespace braid::bench
