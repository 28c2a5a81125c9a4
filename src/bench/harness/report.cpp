#include "bench/harness/report.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <string_view>

#include <fmt/core.h>
#include <fmt/format.h>

#include "braid/error.h"

namespace braid::bench {

// ---- device ----

double reported_peak_gbps(const DeviceInfo& d) {
  // Double data rate: two transfers per memory clock, bus_bits / 8 bytes each.
  return 2.0 * d.memory_clock_mhz * 1e6 * (d.memory_bus_bits / 8.0) / 1e9;
}

std::string cuda_version_string(int v) { return fmt::format("{}.{}", v / 1000, (v % 1000) / 10); }

std::string cublas_version_string(int v) {
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

std::string describe_device(const DeviceInfo& d) {
  return fmt::format(
      "device {}: {} (compute capability {}.{}, {} SMs)\n"
      "  memory {}, L2 {}, bus {} bit, memory clock {} MHz (reported peak {:.0f} GB/s), "
      "SM clock {} MHz\n"
      "  driver {} (CUDA {}), CUDA runtime {}, cuBLASLt {}\n",
      d.index, d.name, d.cc_major, d.cc_minor, d.sm_count, format_bytes(double(d.memory_bytes)),
      format_bytes(double(d.l2_bytes)), d.memory_bus_bits, d.memory_clock_mhz,
      reported_peak_gbps(d), d.sm_clock_mhz,
      d.kernel_driver.empty() ? std::string("unknown") : d.kernel_driver,
      cuda_version_string(d.driver_version),
      cuda_version_string(d.runtime_version), cublas_version_string(d.cublas_version));
}

// ---- rates ----

std::optional<double> achieved_gbps(const ResultRow& r) {
  if (r.bytes <= 0 || r.stats.median_us <= 0) return std::nullopt;
  return r.bytes / r.stats.median_us / 1e3;  // bytes/us = MB/s
}

std::optional<double> achieved_tflops(const ResultRow& r) {
  if (r.flops <= 0 || r.stats.median_us <= 0) return std::nullopt;
  return r.flops / r.stats.median_us / 1e6;
}

std::optional<double> percent_of_ceiling(const ResultRow& r, const Ceilings& c) {
  if (r.bound == Bound::memory) {
    auto v = achieved_gbps(r);
    if (v && c.copy_gbps > 0) return 100.0 * *v / c.copy_gbps;
  } else if (r.bound == Bound::compute) {
    auto v = achieved_tflops(r);
    if (v && c.gemm_tflops > 0) return 100.0 * *v / c.gemm_tflops;
  } else if (r.bound == Bound::compute_fp8) {
    auto v = achieved_tflops(r);
    if (v && c.fp8_gemm_tflops > 0) return 100.0 * *v / c.fp8_gemm_tflops;
  }
  return std::nullopt;
}

Ceilings fp8_ceilings(const Ceilings& c) {
  Ceilings f = c;
  f.gemm_tflops = c.fp8_gemm_tflops;
  return f;
}

const char* roofline_name(Roofline r) {
  switch (r) {
    case Roofline::memory: return "memory";
    case Roofline::balanced: return "balanced";
    case Roofline::compute: return "compute";
  }
  return "?";
}

double ridge_flop_per_byte(const Ceilings& c) {
  if (c.copy_gbps <= 0 || c.gemm_tflops <= 0) return 0;
  return c.gemm_tflops * 1e3 / c.copy_gbps;  // (TFLOP/s * 1e12) / (GB/s * 1e9)
}

Roofline roofline_class(double flops, double bytes, const Ceilings& c) {
  if (flops <= 0 || bytes <= 0) return Roofline::memory;
  const double ridge = ridge_flop_per_byte(c);
  if (ridge <= 0) return Roofline::balanced;
  const double intensity = flops / bytes;
  if (intensity < ridge / 2) return Roofline::memory;
  if (intensity > ridge * 2) return Roofline::compute;
  return Roofline::balanced;
}

std::optional<Roofline> row_roofline(const ResultRow& r, const Ceilings& c) {
  if (r.bytes <= 0 && r.flops <= 0) return std::nullopt;
  if (r.bytes <= 0) return Roofline::compute;
  return roofline_class(r.flops, r.bytes, r.bound == Bound::compute_fp8 ? fp8_ceilings(c) : c);
}

Bound roofline_bound(double flops, double bytes, const Ceilings& c) {
  if (flops <= 0 || bytes <= 0) return Bound::memory;
  const double ridge = ridge_flop_per_byte(c);
  return ridge > 0 && flops / bytes >= ridge ? Bound::compute : Bound::memory;
}

// ---- provenance ----

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::array<char, 32> buf{};
  std::strftime(buf.data(), buf.size(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf.data();
}

namespace {

// stdout of a shell command, trailing whitespace removed; nullopt if it could not run or failed.
std::optional<std::string> command_output(const char* cmd) {
  FILE* p = popen(cmd, "r");
  if (!p) return std::nullopt;
  std::string out;
  std::array<char, 256> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  if (pclose(p) != 0) return std::nullopt;
  while (!out.empty() && std::isspace(static_cast<unsigned char>(out.back()))) out.pop_back();
  return out;
}

}  // namespace

std::optional<std::string> build_stamp(const std::filesystem::path& dir) {
  std::ifstream in(dir / "COMMIT");
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  while (!line.empty() && space(line.back())) line.pop_back();
  line.erase(line.begin(), std::find_if_not(line.begin(), line.end(), space));
  if (line.empty()) return std::nullopt;
  return line;
}

std::string git_commit() {
  if (const char* env = std::getenv("BRAID_GIT_COMMIT"); env && *env) return env;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec)
    if (auto stamp = build_stamp(exe.parent_path())) return *stamp;
  auto head = command_output("git rev-parse --short=12 HEAD 2>/dev/null");
  if (!head || head->empty()) return "unknown";
  auto changes = command_output("git status --porcelain --untracked-files=no 2>/dev/null");
  if (changes && !changes->empty()) *head += "+dirty";
  return *head;
}

// ---- JSON ----

namespace {

const char* bound_name(Bound b) {
  switch (b) {
    case Bound::none: return "none";
    case Bound::memory: return "memory";
    case Bound::compute: return "compute";
    case Bound::compute_fp8: return "compute_fp8";
  }
  return "none";
}

nlohmann::json optional_number(std::optional<double> v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json roofline_json(std::optional<Roofline> r) {
  return r ? nlohmann::json(roofline_name(*r)) : nlohmann::json(nullptr);
}

// NaN (an error figure of an output with NaN in it) is written as null and read back as NaN.
nlohmann::json number_or_null(double v) {
  return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v);
}

nlohmann::json accuracy_json(const std::optional<Accuracy>& a) {
  if (!a) return nullptr;
  const ErrorSummary& e = a->error;
  return {{"reference", a->reference},
          {"elements", e.elements},
          {"max_abs", number_or_null(e.max_abs)},
          {"mean_abs", number_or_null(e.mean_abs)},
          {"max_rel", number_or_null(e.max_rel)},
          {"rel_l2", number_or_null(e.rel_l2)},
          {"rounding_max_abs", number_or_null(e.rounding_max_abs)},
          {"rel_l2_tolerance", a->rel_l2_tolerance},
          {"other_checks_passed", a->other_checks_passed},
          {"passed", a->passed()}};
}

nlohmann::json device_json(const DeviceInfo& d) {
  return {{"index", d.index},
          {"name", d.name},
          {"compute_capability", fmt::format("{}.{}", d.cc_major, d.cc_minor)},
          {"sm_count", d.sm_count},
          {"memory_bytes", d.memory_bytes},
          {"l2_bytes", d.l2_bytes},
          {"sm_clock_mhz", d.sm_clock_mhz},
          {"memory_clock_mhz", d.memory_clock_mhz},
          {"memory_bus_bits", d.memory_bus_bits},
          {"reported_peak_gbps", reported_peak_gbps(d)},
          {"driver_version", cuda_version_string(d.driver_version)},
          {"driver_version_code", d.driver_version},
          {"kernel_driver", d.kernel_driver},
          {"runtime_version", cuda_version_string(d.runtime_version)},
          {"runtime_version_code", d.runtime_version},
          {"cublas_version", cublas_version_string(d.cublas_version)},
          {"cublas_version_code", d.cublas_version}};
}

// Field access that names the field when it is missing or of the wrong type.
[[noreturn]] void bad_json(const std::string& field, const std::string& expected,
                           const nlohmann::json* got) {
  throw Error(ErrorKind::io, fmt::format("bench json: field '{}': expected {}, got {}", field,
                                         expected, got ? got->type_name() : "nothing"));
}

std::string join(std::string_view path, std::string_view key) {
  std::string s(path);
  if (!s.empty()) s += ".";
  return s.append(key);
}

const nlohmann::json& field(const nlohmann::json& j, std::string_view path,
                            std::string_view key) {
  const std::string name = join(path, key);
  if (!j.is_object()) bad_json(path.empty() ? "(top level)" : std::string(path), "an object", &j);
  auto it = j.find(std::string(key));
  if (it == j.end()) bad_json(name, "a value", nullptr);
  return *it;
}

std::string get_string(const nlohmann::json& j, std::string_view path, std::string_view key) {
  const auto& v = field(j, path, key);
  if (!v.is_string()) bad_json(join(path, key), "a string", &v);
  return v.get<std::string>();
}

double get_number(const nlohmann::json& j, std::string_view path, std::string_view key) {
  const auto& v = field(j, path, key);
  if (!v.is_number()) bad_json(join(path, key), "a number", &v);
  return v.get<double>();
}

// Number or null (null reads as 0: "not measured").
double get_number_or_null(const nlohmann::json& j, std::string_view path,
                          std::string_view key) {
  const auto& v = field(j, path, key);
  if (v.is_null()) return 0.0;
  if (!v.is_number()) bad_json(join(path, key), "a number or null", &v);
  return v.get<double>();
}

int get_int(const nlohmann::json& j, std::string_view path, std::string_view key) {
  const auto& v = field(j, path, key);
  if (!v.is_number_integer()) bad_json(join(path, key), "an integer", &v);
  return v.get<int>();
}

double get_number_or_nan(const nlohmann::json& j, std::string_view path, std::string_view key) {
  const auto& v = field(j, path, key);
  if (v.is_null()) return std::nan("");
  if (!v.is_number()) bad_json(join(path, key), "a number or null", &v);
  return v.get<double>();
}

std::optional<Accuracy> accuracy_from_json(const nlohmann::json& row, const std::string& path) {
  auto it = row.find("accuracy");  // absent in results from before rows carried it
  if (it == row.end() || it->is_null()) return std::nullopt;
  const std::string p = path + ".accuracy";
  Accuracy a;
  a.reference = get_string(*it, p, "reference");
  a.error.elements = static_cast<int64_t>(get_number(*it, p, "elements"));
  a.error.max_abs = get_number_or_nan(*it, p, "max_abs");
  a.error.mean_abs = get_number_or_nan(*it, p, "mean_abs");
  a.error.max_rel = get_number_or_nan(*it, p, "max_rel");
  a.error.rel_l2 = get_number_or_nan(*it, p, "rel_l2");
  a.error.rounding_max_abs = get_number_or_nan(*it, p, "rounding_max_abs");
  a.rel_l2_tolerance = get_number(*it, p, "rel_l2_tolerance");
  a.other_checks_passed = it->value("other_checks_passed", true);  // absent before it existed
  return a;
}

Bound bound_from_name(const std::string& s, const std::string& path) {
  if (s == "none") return Bound::none;
  if (s == "memory") return Bound::memory;
  if (s == "compute") return Bound::compute;
  if (s == "compute_fp8") return Bound::compute_fp8;
  throw Error(ErrorKind::io, fmt::format("bench json: field '{}.bound': expected none, memory, "
                                         "compute or compute_fp8, got \"{}\"", path, s));
}

DeviceInfo device_from_json(const nlohmann::json& j) {
  const std::string p = "device";
  DeviceInfo d;
  d.index = get_int(j, p, "index");
  d.name = get_string(j, p, "name");
  const std::string cc = get_string(j, p, "compute_capability");
  if (std::sscanf(cc.c_str(), "%d.%d", &d.cc_major, &d.cc_minor) != 2)
    bad_json(p + ".compute_capability", "\"<major>.<minor>\"", &field(j, p, "compute_capability"));
  d.sm_count = get_int(j, p, "sm_count");
  d.memory_bytes = static_cast<uint64_t>(get_number(j, p, "memory_bytes"));
  d.l2_bytes = static_cast<uint64_t>(get_number(j, p, "l2_bytes"));
  d.sm_clock_mhz = get_int(j, p, "sm_clock_mhz");
  d.memory_clock_mhz = get_int(j, p, "memory_clock_mhz");
  d.memory_bus_bits = get_int(j, p, "memory_bus_bits");
  d.driver_version = get_int(j, p, "driver_version_code");
  d.kernel_driver = j.value("kernel_driver", std::string());  // absent in older results
  d.runtime_version = get_int(j, p, "runtime_version_code");
  d.cublas_version = get_int(j, p, "cublas_version_code");
  return d;
}

}  // namespace

Report start_report(const std::string& suite, const DeviceInfo& device) {
  Report run;
  run.suite = suite;
  run.git_commit = git_commit();
  run.date_utc = utc_now();
  run.has_device = true;
  run.device = device;
  return run;
}

void record_row(Report& run, ResultRow row) {
  fmt::print(stderr, "  measured {} {} [{}]: {} us{}{}\n", row.name, row.params, row.timing,
             format_us(row.stats.median_us), row.note.empty() ? "" : "  ", row.note);
  run.rows.push_back(std::move(row));
}

nlohmann::json to_json(const Report& run) {
  nlohmann::json rows = nlohmann::json::array();
  for (const ResultRow& r : run.rows) {
    rows.push_back({{"name", r.name},
                    {"params", r.params},
                    {"timing", r.timing},
                    {"samples", r.stats.count},
                    {"median_us", r.stats.median_us},
                    {"min_us", r.stats.min_us},
                    {"max_us", r.stats.max_us},
                    {"mean_us", r.stats.mean_us},
                    {"bytes", r.bytes},
                    {"flops", r.flops},
                    {"bound", bound_name(r.bound)},
                    {"gbps", optional_number(achieved_gbps(r))},
                    {"tflops", optional_number(achieved_tflops(r))},
                    {"percent_of_ceiling", optional_number(percent_of_ceiling(r, run.ceilings))},
                    {"arithmetic_intensity",
                     r.bytes > 0 && r.flops > 0 ? nlohmann::json(r.flops / r.bytes) : nullptr},
                    {"roofline", roofline_json(row_roofline(r, run.ceilings))},
                    {"note", r.note},
                    {"accuracy", accuracy_json(r.accuracy)}});
  }
  auto positive = [](double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
  return {{"schema", "braidinfer.bench.run/1"},
          {"suite", run.suite},
          {"git_commit", run.git_commit},
          {"date_utc", run.date_utc},
          {"device", run.has_device ? device_json(run.device) : nlohmann::json(nullptr)},
          {"ceilings",
           {{"copy_gbps", positive(run.ceilings.copy_gbps)},
            {"gemm_tflops", positive(run.ceilings.gemm_tflops)},
            {"fp8_gemm_tflops", positive(run.ceilings.fp8_gemm_tflops)}}},
          {"rows", rows}};
}

Report report_from_json(const nlohmann::json& j) {
  const std::string schema = get_string(j, "", "schema");
  if (schema != "braidinfer.bench.run/1")
    throw Error(ErrorKind::io, "bench json: field 'schema': expected \"braidinfer.bench.run/1\", "
                               "got \"" + schema + "\"");
  Report run;
  run.suite = get_string(j, "", "suite");
  run.git_commit = get_string(j, "", "git_commit");
  run.date_utc = get_string(j, "", "date_utc");
  const auto& dev = field(j, "", "device");
  if (!dev.is_null()) {
    run.has_device = true;
    run.device = device_from_json(dev);
  }
  const auto& ceil = field(j, "", "ceilings");
  run.ceilings.copy_gbps = get_number_or_null(ceil, "ceilings", "copy_gbps");
  run.ceilings.gemm_tflops = get_number_or_null(ceil, "ceilings", "gemm_tflops");
  // Absent in results from before the fp8 ceiling existed: "not measured".
  if (ceil.contains("fp8_gemm_tflops"))
    run.ceilings.fp8_gemm_tflops = get_number_or_null(ceil, "ceilings", "fp8_gemm_tflops");
  const auto& rows = field(j, "", "rows");
  if (!rows.is_array()) bad_json("rows", "an array", &rows);
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::string p = fmt::format("rows[{}]", i);
    const auto& rj = rows[i];
    ResultRow r;
    r.name = get_string(rj, p, "name");
    r.params = get_string(rj, p, "params");
    r.timing = get_string(rj, p, "timing");
    r.stats.count = get_int(rj, p, "samples");
    r.stats.median_us = get_number(rj, p, "median_us");
    r.stats.min_us = get_number(rj, p, "min_us");
    r.stats.max_us = get_number(rj, p, "max_us");
    r.stats.mean_us = get_number(rj, p, "mean_us");
    r.bytes = get_number(rj, p, "bytes");
    r.flops = get_number(rj, p, "flops");
    r.bound = bound_from_name(get_string(rj, p, "bound"), p);
    r.note = get_string(rj, p, "note");
    r.accuracy = accuracy_from_json(rj, p);
    run.rows.push_back(std::move(r));
  }
  return run;
}

void write_json(const Report& run, const std::string& path) {
  write_text(to_json(run).dump(2) + "\n", path);
}

// ---- table ----

std::string format_us(double us) {
  if (us < 10) return fmt::format("{:.3f}", us);
  if (us < 1000) return fmt::format("{:.2f}", us);
  return fmt::format("{:.1f}", us);
}

std::string format_rate(double v) {
  if (v < 10) return fmt::format("{:.3f}", v);
  if (v < 100) return fmt::format("{:.2f}", v);
  if (v < 1000) return fmt::format("{:.1f}", v);
  return fmt::format("{:.0f}", v);
}

std::string format_bytes(double bytes) {
  constexpr double KiB = 1024.0, MiB = KiB * 1024, GiB = MiB * 1024;
  if (bytes >= GiB) return fmt::format("{:.2f} GiB", bytes / GiB);
  if (bytes >= MiB) return fmt::format("{:.1f} MiB", bytes / MiB);
  if (bytes >= KiB) return fmt::format("{:.1f} KiB", bytes / KiB);
  return fmt::format("{:.0f} B", bytes);
}

namespace {

std::string format_error(double v) {
  if (std::isnan(v)) return "nan";
  return v == 0 ? "0" : fmt::format("{:.2e}", v);
}

// The columns shared by the text table, CSV and Markdown: a title, whether the cell is a number
// (right-aligned in the text table), and its text.
struct Column {
  const char* title;
  bool number;
  std::function<std::string(const ResultRow&, const Ceilings&)> cell;
};

const std::vector<Column>& columns() {
  auto or_dash = [](std::optional<double> v, auto fmt_fn) { return v ? fmt_fn(*v) : "-"; };
  auto error_cell = [](double ErrorSummary::*field) {
    return [field](const ResultRow& r, const Ceilings&) {
      return r.accuracy ? format_error(r.accuracy->error.*field) : std::string("-");
    };
  };
  static const std::vector<Column> cols = {
      {"name", false, [](const ResultRow& r, const Ceilings&) { return r.name; }},
      {"params", false, [](const ResultRow& r, const Ceilings&) { return r.params; }},
      {"timing", false, [](const ResultRow& r, const Ceilings&) { return r.timing; }},
      {"median us", true,
       [](const ResultRow& r, const Ceilings&) { return format_us(r.stats.median_us); }},
      {"min us", true, [](const ResultRow& r, const Ceilings&) { return format_us(r.stats.min_us); }},
      {"max us", true, [](const ResultRow& r, const Ceilings&) { return format_us(r.stats.max_us); }},
      {"GB/s", true,
       [or_dash](const ResultRow& r, const Ceilings&) { return or_dash(achieved_gbps(r), format_rate); }},
      {"TFLOP/s", true,
       [or_dash](const ResultRow& r, const Ceilings&) {
         return or_dash(achieved_tflops(r), format_rate);
       }},
      {"% ceil", true,
       [or_dash](const ResultRow& r, const Ceilings& c) {
         return or_dash(percent_of_ceiling(r, c), [](double p) { return fmt::format("{:.1f}", p); });
       }},
      {"roofline", false,
       [](const ResultRow& r, const Ceilings& c) {
         const auto k = row_roofline(r, c);
         return k ? std::string(roofline_name(*k)) : std::string("-");
       }},
      {"max abs", true, error_cell(&ErrorSummary::max_abs)},
      {"mean abs", true, error_cell(&ErrorSummary::mean_abs)},
      {"max rel", true, error_cell(&ErrorSummary::max_rel)},
      {"check", false,
       [](const ResultRow& r, const Ceilings&) {
         return r.accuracy ? std::string(r.accuracy->passed() ? "ok" : "FAIL") : std::string("-");
       }},
      {"note", false, [](const ResultRow& r, const Ceilings&) { return r.note; }},
  };
  return cols;
}

std::vector<std::vector<std::string>> cells_of(const Report& run) {
  std::vector<std::vector<std::string>> cells;
  for (const ResultRow& r : run.rows) {
    std::vector<std::string> line;
    for (const Column& col : columns()) line.push_back(col.cell(r, run.ceilings));
    cells.push_back(std::move(line));
  }
  return cells;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) {
    if (ch == '"') q += '"';
    q += ch;
  }
  return q + "\"";
}

std::string csv_number(std::optional<double> v) {
  if (!v || std::isnan(*v)) return "";
  return fmt::format("{}", *v);
}

}  // namespace

std::string format_table(const Report& run) {
  const auto& cols = columns();
  const auto cells = cells_of(run);
  std::vector<size_t> width(cols.size());
  for (size_t c = 0; c < cols.size(); ++c) {
    width[c] = std::string(cols[c].title).size();
    for (const auto& row : cells) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& v) {
    std::string s;
    for (size_t c = 0; c < cols.size(); ++c) {
      if (c > 0) s += "  ";
      s += cols[c].number ? fmt::format("{:>{}}", v[c], width[c])
                          : fmt::format("{:<{}}", v[c], width[c]);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::vector<std::string> header;
  for (const auto& c : cols) header.push_back(c.title);
  std::string out = line(header);
  std::vector<std::string> rule;
  for (size_t w : width) rule.push_back(std::string(w, '-'));
  out += line(rule);
  for (const auto& row : cells) out += line(row);
  return out;
}

std::string to_csv(const Report& run) {
  // Numbers unformatted (full precision) so a spreadsheet or pandas reads them as numbers.
  std::string out =
      "suite,git_commit,device,name,params,timing,samples,median_us,min_us,max_us,mean_us,bytes,"
      "flops,bound,gbps,tflops,percent_of_ceiling,roofline,max_abs,mean_abs,max_rel,rel_l2,"
      "check,note\n";
  for (const ResultRow& r : run.rows) {
    const auto k = row_roofline(r, run.ceilings);
    const Accuracy* a = r.accuracy ? &*r.accuracy : nullptr;
    auto err = [&](double v) { return a ? csv_number(v) : std::string(); };
    std::vector<std::string> f = {
        csv_field(run.suite), csv_field(run.git_commit),
        csv_field(run.has_device ? run.device.name : ""), csv_field(r.name), csv_field(r.params),
        csv_field(r.timing), fmt::format("{}", r.stats.count), csv_number(r.stats.median_us),
        csv_number(r.stats.min_us), csv_number(r.stats.max_us), csv_number(r.stats.mean_us),
        csv_number(r.bytes), csv_number(r.flops), bound_name(r.bound),
        csv_number(achieved_gbps(r)), csv_number(achieved_tflops(r)),
        csv_number(percent_of_ceiling(r, run.ceilings)), k ? roofline_name(*k) : "",
        err(a ? a->error.max_abs : 0), err(a ? a->error.mean_abs : 0),
        err(a ? a->error.max_rel : 0), err(a ? a->error.rel_l2 : 0),
        a ? (a->passed() ? "ok" : "FAIL") : "", csv_field(r.note)};
    for (size_t i = 0; i < f.size(); ++i) {
      if (i > 0) out += ',';
      out += f[i];
    }
    out += "\n";
  }
  return out;
}

std::string to_markdown(const Report& run) {
  auto md_cell = [](std::string s) {
    std::string o;
    for (char ch : s) {
      if (ch == '|') o += '\\';
      o += ch;
    }
    return o;
  };
  std::string out = fmt::format("# braidinfer bench {}\n\n", run.suite);
  if (run.has_device) {
    const DeviceInfo& d = run.device;
    out += fmt::format("- GPU: {} (compute capability {}.{}, {} SMs)\n", d.name, d.cc_major,
                       d.cc_minor, d.sm_count);
    out += fmt::format("- driver {} (CUDA {}), CUDA runtime {}, cuBLASLt {}\n",
                       d.kernel_driver.empty() ? std::string("unknown") : d.kernel_driver,
                       cuda_version_string(d.driver_version), cuda_version_string(d.runtime_version),
                       cublas_version_string(d.cublas_version));
  }
  out += fmt::format("- git {}, {}\n", run.git_commit, run.date_utc);
  const Ceilings& c = run.ceilings;
  auto ceil = [](double v, const char* unit) {
    return v > 0 ? fmt::format("{} {}", format_rate(v), unit) : std::string("not measured");
  };
  out += fmt::format("- ceilings of this run: copy {}, bf16 GEMM {}, fp8 GEMM {}\n\n",
                     ceil(c.copy_gbps, "GB/s"), ceil(c.gemm_tflops, "TFLOP/s"),
                     ceil(c.fp8_gemm_tflops, "TFLOP/s"));
  const auto& cols = columns();
  std::string header = "|", rule = "|";
  for (const auto& col : cols) {
    header += fmt::format(" {} |", col.title);
    rule += col.number ? "---:|" : "---|";
  }
  out += header + "\n" + rule + "\n";
  for (const auto& row : cells_of(run)) {
    std::string line = "|";
    for (const auto& cell : row) {
      line += ' ';
      line += md_cell(cell);
      line += " |";
    }
    out += line + "\n";
  }
  return out;
}

void write_text(const std::string& text, const std::string& path) {
  std::ofstream f(path);
  if (!f) throw Error(ErrorKind::io, "bench: cannot open '" + path + "' for writing");
  f << text;
  f.close();
  if (!f) throw Error(ErrorKind::io, "bench: writing '" + path + "' failed");
}

}  // namespace braid::bench
