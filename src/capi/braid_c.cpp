// The C API's library functions, descriptor conversion and exception boundary. The op wrappers
// are in ops_*.cpp, one file per op family, so a program linking braid_static pulls in only the
// families it calls.
#include <exception>
#include <new>
#include <string>

#include "braid/buffer.h"
#include "braid/error.h"
#include "capi/capi.h"

#ifndef BRAID_VERSION_STRING
#define BRAID_VERSION_STRING "unknown"
#endif

namespace braid::capi {

namespace {

thread_local std::string t_last_error;

void set_last_error(const char* op, const char* what) noexcept {
  try {
    t_last_error = op ? std::string(op) + ": " + what : std::string(what);
  } catch (...) {
    t_last_error.clear();  // no memory even for the message: better empty than stale
  }
}

void set_last_error(const char* message) noexcept { set_last_error(nullptr, message); }

[[noreturn]] void fail(ErrorKind kind, const char* op, const char* arg, const std::string& expected,
                       const std::string& given) {
  throw_arg_error(kind, op, arg, expected, given);
}

DType dtype_of(const char* op, const char* arg, braid_dtype d) {
  const std::string given = "code " + std::to_string(d.code) + " bits " +
                            std::to_string(d.bits) + " lanes " + std::to_string(d.lanes);
  if (d.lanes != 1) fail(ErrorKind::dtype, op, arg, "dtype lanes 1", given);
  switch (d.code) {
    case BRAID_DTYPE_INT:
      if (d.bits == 32) return DType::i32;
      if (d.bits == 64) return DType::i64;
      fail(ErrorKind::dtype, op, arg, "int dtype of 32 or 64 bits", given);
    case BRAID_DTYPE_UINT:
      if (d.bits == 8) return DType::u8;
      fail(ErrorKind::dtype, op, arg, "uint dtype of 8 bits", given);
    case BRAID_DTYPE_FLOAT:
      if (d.bits == 32) return DType::f32;
      if (d.bits == 16) return DType::f16;
      fail(ErrorKind::dtype, op, arg, "float dtype of 16 or 32 bits", given);
    case BRAID_DTYPE_BFLOAT:
      if (d.bits == 16) return DType::bf16;
      fail(ErrorKind::dtype, op, arg, "bfloat dtype of 16 bits", given);
    case BRAID_DTYPE_FLOAT8_E4M3FN:
      if (d.bits == 8) return DType::f8e4m3;
      fail(ErrorKind::dtype, op, arg, "float8_e4m3fn dtype of 8 bits", given);
    case BRAID_DTYPE_FLOAT8_E5M2:
      if (d.bits == 8) return DType::f8e5m2;
      fail(ErrorKind::dtype, op, arg, "float8_e5m2 dtype of 8 bits", given);
    default:
      fail(ErrorKind::dtype, op, arg,
           "a DLPack dtype code of int (0), uint (1), float (2), bfloat (4), float8_e4m3fn (10) "
           "or float8_e5m2 (12)",
           given);
  }
}

Device device_of(const char* op, const char* arg, braid_device d) {
  if (d.device_type == BRAID_DEVICE_CPU) return Device::cpu();
  if (d.device_type == BRAID_DEVICE_CUDA) {
    if (d.device_id < 0)
      fail(ErrorKind::device, op, arg, "a CUDA device_id >= 0", std::to_string(d.device_id));
    return Device::cuda(d.device_id);
  }
  fail(ErrorKind::device, op, arg, "device_type 1 (cpu) or 2 (cuda)",
       "device_type " + std::to_string(d.device_type));
}

}  // namespace

Tensor tensor_arg(const char* op, const char* arg, const braid_tensor* t) {
  if (t == nullptr) fail(ErrorKind::invalid_argument, op, arg, "a tensor descriptor", "NULL");
  if (t->ndim < 0 || t->ndim > BRAID_MAX_DIMS)
    fail(ErrorKind::shape, op, arg, "0 to " + std::to_string(BRAID_MAX_DIMS) + " dimensions",
         "ndim " + std::to_string(t->ndim));
  if (t->ndim > 0 && t->shape == nullptr)
    fail(ErrorKind::invalid_argument, op, arg, "a shape array", "shape NULL");

  Tensor out;
  out.dtype = dtype_of(op, arg, t->dtype);
  out.device = device_of(op, arg, t->device);
  out.ndim = t->ndim;
  for (int d = 0; d < t->ndim; ++d) {
    if (t->shape[d] < 0)
      fail(ErrorKind::shape, op, arg, "sizes >= 0",
           "size " + std::to_string(t->shape[d]) + " in dimension " + std::to_string(d));
    out.shape[d] = t->shape[d];
  }
  if (t->strides == nullptr) {
    int64_t stride = 1;  // DLPack: NULL strides mean compact row-major
    for (int d = t->ndim - 1; d >= 0; --d) {
      out.strides[d] = stride;
      stride *= out.shape[d];
    }
  } else {
    for (int d = 0; d < t->ndim; ++d) out.strides[d] = t->strides[d];
  }
  // A NULL data pointer stays NULL so the op's own check reports it (or accepts an empty tensor).
  out.data = t->data ? static_cast<char*>(t->data) + t->byte_offset : nullptr;
  return out;
}

Tensor optional_tensor_arg(const char* op, const char* arg, const braid_tensor* t) {
  return t == nullptr ? Tensor{} : tensor_arg(op, arg, t);
}

ops::PagedKV paged_kv_arg(const char* op, const braid_tensor* k_pages, const braid_tensor* v_pages,
                          const braid_tensor* page_table, const braid_tensor* kv_lens) {
  ops::PagedKV kv;
  kv.k_pages = tensor_arg(op, "kv.k_pages", k_pages);
  kv.v_pages = tensor_arg(op, "kv.v_pages", v_pages);
  kv.page_table = tensor_arg(op, "kv.page_table", page_table);
  kv.kv_lens = tensor_arg(op, "kv.kv_lens", kv_lens);
  return kv;
}

braid_status status_of_current_exception(const char* op) noexcept {
  try {
    throw;
  } catch (const Error& e) {
    set_last_error(e.what());  // braid::Error messages already start with the op's name
    const int kind = static_cast<int>(e.kind());
    return kind >= BRAID_ERR_INVALID_ARGUMENT && kind <= BRAID_ERR_INTERNAL
               ? static_cast<braid_status>(kind)
               : BRAID_ERR_INTERNAL;
  } catch (const std::bad_alloc&) {
    set_last_error(op, "out of memory (a host allocation failed)");
    return BRAID_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(op, (std::string("internal error: ") + e.what()).c_str());
    return BRAID_ERR_INTERNAL;
  } catch (...) {
    set_last_error(op, "internal error: an unknown exception");
    return BRAID_ERR_INTERNAL;
  }
}

}  // namespace braid::capi

extern "C" {

const char* braid_status_string(braid_status status) {
  switch (status) {
    case BRAID_OK: return "BRAID_OK";
    case BRAID_ERR_INVALID_ARGUMENT: return "BRAID_ERR_INVALID_ARGUMENT";
    case BRAID_ERR_SHAPE: return "BRAID_ERR_SHAPE";
    case BRAID_ERR_DTYPE: return "BRAID_ERR_DTYPE";
    case BRAID_ERR_DEVICE: return "BRAID_ERR_DEVICE";
    case BRAID_ERR_CUDA: return "BRAID_ERR_CUDA";
    case BRAID_ERR_CUBLAS: return "BRAID_ERR_CUBLAS";
    case BRAID_ERR_OUT_OF_MEMORY: return "BRAID_ERR_OUT_OF_MEMORY";
    case BRAID_ERR_UNSUPPORTED: return "BRAID_ERR_UNSUPPORTED";
    case BRAID_ERR_IO: return "BRAID_ERR_IO";
    case BRAID_ERR_INTERNAL: return "BRAID_ERR_INTERNAL";
  }
  return "unknown status";
}

const char* braid_last_error_message(void) { return braid::capi::t_last_error.c_str(); }

const char* braid_version(void) { return BRAID_VERSION_STRING; }

int braid_cuda_device_count(void) {
  // cuda_device_count() swallows "no driver / no device" and returns 0; guard anything else.
  try {
    return braid::cuda_device_count();
  } catch (...) {
    return 0;
  }
}

}  // extern "C"
