#include "capi/llm_options.h"

#include <climits>

#include "braid/buffer.h"
#include "braid/error.h"
#include "capi/llm_json.h"

namespace braid::capi::llm {

namespace {

constexpr const char* kCall = "braid_llm_create";

Device device_option(const Where& w, const json& o) {
  const json* v = field(o, "device");
  if (!v) return cuda_available() ? Device::cuda(0) : Device::cpu();
  if (!v->is_string()) bad(w, w.key("device") + " must be a string, got " + shown(*v));
  const std::string name = v->get<std::string>();
  if (name == "cpu") return Device::cpu();
  if (name == "auto") return cuda_available() ? Device::cuda(0) : Device::cpu();
  int ordinal = -1;
  if (name == "cuda") {
    ordinal = 0;
  } else if (name.rfind("cuda:", 0) == 0 && name.size() > 5 && name.size() <= 8 &&
             name.find_first_not_of("0123456789", 5) == std::string::npos) {
    ordinal = std::stoi(name.substr(5));
  } else {
    bad(w, w.key("device") + " must be \"cpu\", \"cuda\", \"cuda:N\" or \"auto\", got " + shown(*v));
  }
  const int count = cuda_device_count();
  if (ordinal >= count)
    throw Error(ErrorKind::unsupported,
                std::string(kCall) + ": " + w.key("device") + " is \"" + name + "\", but " +
                    (count == 0 ? std::string("no CUDA device is usable here (or this build has "
                                              "no CUDA support); use \"cpu\"")
                                : std::to_string(count) + " CUDA device(s) are visible"));
  return Device::cuda(ordinal);
}

std::optional<DType> dtype_option(const Where& w, const json& o) {
  const json* v = field(o, "dtype");
  if (!v) return std::nullopt;
  if (!v->is_string()) bad(w, w.key("dtype") + " must be a string, got " + shown(*v));
  const std::string name = v->get<std::string>();
  if (name == "auto") return std::nullopt;
  DType t;
  try {
    t = dtype_from_name(name);
  } catch (const Error&) {
    t = DType::u8;  // reported below with the names that work
  }
  if (t != DType::f32 && t != DType::f16 && t != DType::bf16)
    bad(w, w.key("dtype") + " must be \"auto\", \"float32\", \"float16\" or \"bfloat16\", got \"" +
               name + "\"");
  return t;
}

model::Quantize quantize_option(const Where& w, const json& o) {
  const json* v = field(o, "quantize");
  if (!v) return model::Quantize::none;
  const auto q = v->is_string() ? model::quantize_from_name(v->get<std::string>()) : std::nullopt;
  if (!q) bad(w, w.key("quantize") + " must be \"none\" or \"fp8\", got " + shown(*v));
  return *q;
}

}  // namespace

LlmOptions parse_options(const char* options_json) {
  const json o = parse(kCall, "options_json", options_json, json::object());
  const Where w{kCall, "options"};
  if (!o.is_object()) bad(w, "options_json must be a JSON object, got " + shown(o));
  reject_unknown_keys(w, o,
                      {"device", "dtype", "quantize", "max_model_len", "max_num_seqs",
                       "max_num_batched_tokens", "gpu_memory_utilization", "num_kv_pages",
                       "enable_prefix_caching", "cuda_graphs", "seed", "tensor_parallel_size",
                       "enable_expert_parallel"});
  LlmOptions out;
  engine::EngineConfig& e = out.engine;
  e.device = device_option(w, o);
  e.dtype = dtype_option(w, o);
  e.quantize = quantize_option(w, o);
  e.max_model_len = static_cast<int>(integer(w, o, "max_model_len", 0, 0, INT_MAX / 2));
  e.max_num_seqs = static_cast<int>(integer(w, o, "max_num_seqs", e.max_num_seqs, 1, 1 << 20));
  e.max_num_batched_tokens = static_cast<int>(
      integer(w, o, "max_num_batched_tokens", e.max_num_batched_tokens, 1, INT_MAX / 2));
  e.gpu_memory_utilization = number(w, o, "gpu_memory_utilization", e.gpu_memory_utilization);
  if (!(e.gpu_memory_utilization > 0 && e.gpu_memory_utilization <= 1))
    bad(w, w.key("gpu_memory_utilization") + " must be in (0, 1], got " +
               std::to_string(e.gpu_memory_utilization));
  e.num_kv_pages = static_cast<int>(integer(w, o, "num_kv_pages", 0, 0, INT_MAX / 2));
  e.enable_prefix_caching = boolean(w, o, "enable_prefix_caching", e.enable_prefix_caching);
  e.cuda_graphs = boolean(w, o, "cuda_graphs", e.cuda_graphs);
  // vLLM's spellings; what does not split (or more GPUs than present) the engine refuses, naming
  // the field, before it reads any weight.
  e.tensor_parallel = static_cast<int>(integer(w, o, "tensor_parallel_size", 1, 1, 64));
  e.expert_parallel = boolean(w, o, "enable_expert_parallel", false);
  if (field(o, "seed")) {
    if (!o["seed"].is_number_integer()) bad(w, w.key("seed") + " must be an integer, got " + shown(o["seed"]));
    out.seed = o["seed"].is_number_unsigned() ? o["seed"].get<uint64_t>()
                                              : static_cast<uint64_t>(o["seed"].get<int64_t>());
  }
  return out;
}

}  // namespace braid::capi::llm
