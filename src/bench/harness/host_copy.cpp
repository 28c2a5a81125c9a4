#include "bench/harness/host_copy.h"

#include "braid/dtype.h"

namespace braid::bench {

namespace {

std::vector<int64_t> shape_of(const Tensor& t) { return {t.shape, t.shape + t.ndim}; }

}  // namespace

OwnedTensor to_host(const Tensor& t) {
  OwnedTensor host(t.dtype, shape_of(t), Device::cpu());
  copy(t, host);
  return host;
}

OwnedTensor host_rows(const Tensor& t, const std::vector<int64_t>& rows) {
  std::vector<int64_t> shape = shape_of(t);
  bool every = static_cast<int64_t>(rows.size()) == shape[0];
  for (size_t i = 0; every && i < rows.size(); ++i) every = rows[i] == static_cast<int64_t>(i);
  if (every) return to_host(t);
  shape[0] = static_cast<int64_t>(rows.size());
  OwnedTensor host(t.dtype, shape, Device::cpu());
  for (size_t i = 0; i < rows.size(); ++i)
    copy(t.slice(0, rows[i], rows[i] + 1),
         host.view().slice(0, static_cast<int64_t>(i), static_cast<int64_t>(i) + 1));
  return host;
}

std::vector<float> host_floats(const Tensor& t) {
  const OwnedTensor host = to_host(t);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_float(host.data(), t.dtype, int64_t(i));
  return v;
}

}  // namespace braid::bench
