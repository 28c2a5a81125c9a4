#include "bench/profile/ncu_csv.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>

#include <fmt/core.h>

#include "braid/error.h"

namespace braid::bench {

namespace {

// Metric names, each once; the folding below reads them by these constants.
constexpr const char* kSm = "sm__throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* kDram = "dram__throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* kMemory = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed";
constexpr const char* kOccupancy = "sm__warps_active.avg.pct_of_peak_sustained_active";
constexpr const char* kL1Hit = "l1tex__t_sector_hit_rate.pct";
constexpr const char* kL2Hit = "lts__t_sector_hit_rate.pct";
constexpr const char* kDuration = "gpu__time_duration.sum";
constexpr const char* kFadd = "sm__sass_thread_inst_executed_op_fadd_pred_on.sum";
constexpr const char* kFmul = "sm__sass_thread_inst_executed_op_fmul_pred_on.sum";
constexpr const char* kFfma = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum";
// Tensor-pipe math ops per source type: ncu counts a multiply-add as two, so these are FLOPs
// (a 4096^3 bf16 GEMM reads 2 * 4096^3 on an H100).
constexpr const char* kTensorBf16 = "sm__ops_path_tensor_src_bf16_dst_fp32.sum";
constexpr const char* kTensorFp16 = "sm__ops_path_tensor_src_fp16.sum";
constexpr const char* kTensorFp8 = "sm__ops_path_tensor_src_fp8.sum";
constexpr const char* kTensorTf32 = "sm__ops_path_tensor_src_tf32_dst_fp32.sum";
constexpr const char* kDramBytes = "dram__bytes.sum";
constexpr const char* kFfmaPeak = "sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained";
constexpr const char* kSmClock = "sm__cycles_elapsed.avg.per_second";

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && is_space(s[b])) ++b;
  while (e > b && is_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}

// Mean of the column's numbers in `rows` (base units); nullopt when the column is absent or no
// row has a number there.
std::optional<double> column_mean(const NcuTable& t, const std::vector<size_t>& rows,
                                  const char* metric) {
  const int c = t.column(metric);
  if (c < 0) return std::nullopt;
  double sum = 0;
  int n = 0;
  for (size_t r : rows) {
    const auto v = parse_ncu_number(t.rows[r][static_cast<size_t>(c)]);
    if (!v) continue;
    sum += to_base_unit(*v, t.units[static_cast<size_t>(c)]);
    ++n;
  }
  if (n == 0) return std::nullopt;
  return sum / n;
}

// Sum of the parts present; nullopt when none is.
std::optional<double> sum_present(std::initializer_list<std::optional<double>> parts) {
  std::optional<double> total;
  for (const auto& p : parts)
    if (p) total = total.value_or(0) + *p;
  return total;
}

}  // namespace

int NcuTable::column(const std::string& name) const {
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return static_cast<int>(i);
  return -1;
}

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> fields;
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      fields.push_back(std::move(field));
      field.clear();
    } else if (c != '\r' && c != '\n') {
      field += c;
    }
  }
  fields.push_back(std::move(field));
  return fields;
}

NcuTable parse_ncu_csv(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  NcuTable t;
  std::string messages;  // what ncu said before the table, for the error
  enum { header, units, rows } expect = header;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.rfind("==", 0) == 0) {  // "==PROF== ...", "==WARNING== ...", "==ERROR== ..."
      if (expect == header) messages += line + "\n";
      continue;
    }
    if (trim(line).empty()) continue;
    std::vector<std::string> fields = split_csv_line(line);
    if (expect == header) {
      bool has_name = false;
      for (const auto& f : fields) has_name = has_name || f == "Kernel Name";
      if (fields.empty() || fields[0] != "ID" || !has_name) {
        messages += line + "\n";
        continue;
      }
      t.header = std::move(fields);
      expect = units;
      continue;
    }
    if (fields.size() != t.header.size())
      throw Error(ErrorKind::io,
                  fmt::format("ncu CSV: line {} has {} fields, the header has {}", line_no,
                              fields.size(), t.header.size()));
    if (expect == units) {
      t.units = std::move(fields);
      expect = rows;
    } else {
      t.rows.push_back(std::move(fields));
    }
  }
  if (t.header.empty()) {
    if (messages.size() > 2000) messages = "..." + messages.substr(messages.size() - 2000);
    throw Error(ErrorKind::io,
                "ncu CSV: no table of profiled kernels in ncu's output (did the kernel regex match "
                "any kernel?); ncu said:\n" + messages);
  }
  if (expect == units)
    throw Error(ErrorKind::io, "ncu CSV: the header is not followed by a line of units");
  return t;
}

std::optional<double> parse_ncu_number(const std::string& field) {
  std::string s;
  for (char c : trim(field))
    if (c != ',') s += c;  // thousands separators
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

double to_base_unit(double value, const std::string& unit) {
  static const std::map<std::string, double> scale = {
      {"ns", 1},         {"nsecond", 1},    {"us", 1e3},        {"usecond", 1e3},
      {"ms", 1e6},       {"msecond", 1e6},  {"s", 1e9},         {"second", 1e9},
      {"byte", 1},       {"Kbyte", 1e3},    {"Mbyte", 1e6},     {"Gbyte", 1e9},
      {"Tbyte", 1e12},   {"KB", 1e3},       {"MB", 1e6},        {"GB", 1e9},
      {"hz", 1},         {"Khz", 1e3},      {"Mhz", 1e6},       {"Ghz", 1e9},
      {"cycle/second", 1}, {"cycle/nsecond", 1e9}, {"cycle/usecond", 1e6}, {"cycle/msecond", 1e3},
      {"byte/second", 1}, {"Kbyte/second", 1e3}, {"Mbyte/second", 1e6}, {"Gbyte/second", 1e9},
      {"Tbyte/second", 1e12},
  };
  const auto it = scale.find(unit);
  return it == scale.end() ? value : value * it->second;
}

std::vector<std::string> ncu_metric_names() {
  return {kSm,        kDram,       kMemory,     kOccupancy,  kL1Hit,    kL2Hit,
          kDuration,  kFadd,       kFmul,       kFfma,       kTensorBf16, kTensorFp16,
          kTensorFp8, kTensorTf32, kDramBytes,  kFfmaPeak,   kSmClock};
}

std::string ncu_metric_list() {
  std::string list;
  for (const auto& m : ncu_metric_names()) list += (list.empty() ? "" : ",") + m;
  return list;
}

const char* kernel_bound_name(KernelBound b) {
  switch (b) {
    case KernelBound::memory: return "memory-bound";
    case KernelBound::balanced: return "balanced";
    case KernelBound::compute: return "compute-bound";
    case KernelBound::unknown: break;
  }
  return "unknown";
}

std::optional<double> NcuKernelMetrics::flops() const { return sum_present({fp32_flops, tensor_flops}); }

std::optional<double> NcuKernelMetrics::intensity() const {
  const auto f = flops();
  if (!f || !dram_bytes) return std::nullopt;
  if (*dram_bytes <= 0) return *f > 0 ? std::numeric_limits<double>::infinity() : 0.0;
  return *f / *dram_bytes;
}

std::vector<NcuKernelMetrics> fold_ncu_table(const NcuTable& t) {
  const int name_col = t.column("Kernel Name");
  if (name_col < 0) throw Error(ErrorKind::io, "ncu CSV: no \"Kernel Name\" column");
  std::vector<std::string> order;
  std::map<std::string, std::vector<size_t>> launches;
  for (size_t r = 0; r < t.rows.size(); ++r) {
    const std::string& name = t.rows[r][static_cast<size_t>(name_col)];
    auto [it, fresh] = launches.try_emplace(name);
    if (fresh) order.push_back(name);
    it->second.push_back(r);
  }
  std::vector<NcuKernelMetrics> out;
  for (const auto& name : order) {
    const auto& rows = launches[name];
    NcuKernelMetrics m;
    m.kernel = name;
    m.launches = static_cast<int>(rows.size());
    m.sm_pct = column_mean(t, rows, kSm);
    m.dram_pct = column_mean(t, rows, kDram);
    m.memory_pct = column_mean(t, rows, kMemory);
    m.occupancy_pct = column_mean(t, rows, kOccupancy);
    m.l1_hit_pct = column_mean(t, rows, kL1Hit);
    m.l2_hit_pct = column_mean(t, rows, kL2Hit);
    if (auto ns = column_mean(t, rows, kDuration)) m.duration_us = *ns / 1e3;
    const auto fadd = column_mean(t, rows, kFadd), fmul = column_mean(t, rows, kFmul);
    const auto ffma = column_mean(t, rows, kFfma);
    m.fp32_flops = sum_present({fadd, fmul, ffma ? std::optional<double>(2 * *ffma) : std::nullopt});
    m.fp8_tensor_flops = column_mean(t, rows, kTensorFp8);
    m.tensor_flops = sum_present({column_mean(t, rows, kTensorBf16), column_mean(t, rows, kTensorFp16),
                                  m.fp8_tensor_flops, column_mean(t, rows, kTensorTf32)});
    m.dram_bytes = column_mean(t, rows, kDramBytes);
    const auto ffma_peak = column_mean(t, rows, kFfmaPeak), clock = column_mean(t, rows, kSmClock);
    if (ffma_peak && clock) m.fp32_peak_flops_per_s = 2 * *ffma_peak * *clock;
    out.push_back(std::move(m));
  }
  return out;
}

std::vector<std::string> missing_ncu_metrics(const NcuTable& t) {
  std::vector<std::string> missing;
  for (const auto& m : ncu_metric_names())
    if (t.column(m) < 0) missing.push_back(m);
  return missing;
}

double kernel_ridge(const NcuKernelMetrics& m, const Ceilings& c) {
  if (c.copy_gbps <= 0) return 0;
  const double bytes_per_s = c.copy_gbps * 1e9;
  double peak = 0;  // FLOP/s
  if (m.fp8_tensor_flops.value_or(0) > 0)
    peak = c.fp8_gemm_tflops * 1e12;
  else if (m.tensor_flops.value_or(0) > 0)
    peak = c.gemm_tflops * 1e12;
  else
    peak = m.fp32_peak_flops_per_s.value_or(0);
  return peak > 0 ? peak / bytes_per_s : 0;
}

KernelBound classify_kernel(const NcuKernelMetrics& m, double ridge) {
  const auto intensity = m.intensity();
  if (!intensity || ridge <= 0 || !m.sm_pct || !m.memory_pct) return KernelBound::unknown;
  if (*intensity < ridge && *m.memory_pct >= *m.sm_pct + kMeaningfulPctPoints)
    return KernelBound::memory;
  if (*intensity >= ridge && *m.sm_pct >= *m.memory_pct + kMeaningfulPctPoints)
    return KernelBound::compute;
  return KernelBound::balanced;
}

void classify_kernels(std::vector<NcuKernelMetrics>& kernels, const Ceilings& c) {
  for (auto& k : kernels) {
    k.ridge = kernel_ridge(k, c);
    k.bound = classify_kernel(k, k.ridge);
  }
}

}  // namespace braid::bench
