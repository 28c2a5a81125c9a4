// Benchmark results: rows of timings with the bytes and FLOPs behind them, the device they ran
// on, and their JSON and terminal-table forms. CPU-only (no CUDA headers), so it is tested in CI.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/harness/accuracy.h"
#include "bench/harness/stats.h"

namespace braid::bench {

// What the CUDA runtime reports about the device (clocks are the reported peak clocks, not
// what the card ran at).
struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  uint64_t memory_bytes = 0;
  uint64_t l2_bytes = 0;
  int sm_clock_mhz = 0;
  int memory_clock_mhz = 0;
  int memory_bus_bits = 0;
  int driver_version = 0;   // cudaDriverGetVersion: 13000 = 13.0
  std::string kernel_driver;  // the NVIDIA kernel module's version, "580.159.04" ("" if unknown)
  int runtime_version = 0;  // cudaRuntimeGetVersion
  int cublas_version = 0;   // cublasLtGetVersion: 130100 = 13.1.0
};

// DRAM bandwidth implied by the reported memory clock and bus width (double data rate), GB/s.
double reported_peak_gbps(const DeviceInfo& d);
// "13.0" from 13000 (CUDA driver/runtime encoding), "13.1.0" from 130100 (cuBLAS encoding).
std::string cuda_version_string(int v);
std::string cublas_version_string(int v);
// Several lines describing the device, for `braidinfer info` and report headers.
std::string describe_device(const DeviceInfo& d);

// Which ceiling a row is measured against: compute = the bf16 GEMM ceiling, compute_fp8 = the
// fp8 e4m3 GEMM ceiling (rows of fp8 tensor-core work).
enum class Bound { none, memory, compute, compute_fp8 };

struct ResultRow {
  std::string name;    // "gemm_bf16"
  std::string params;  // "m=8192 n=8192 k=8192"
  std::string timing;  // timing_label(): "back_to_back x5"
  Stats stats;
  double bytes = 0;  // minimum bytes moved through device memory per launch
  double flops = 0;  // floating-point operations per launch
  Bound bound = Bound::none;
  std::string note;  // free text, e.g. the peer figure to compare with
  std::optional<Accuracy> accuracy = std::nullopt;  // the output checked against its reference, if it was
};

// Achieved rates from the median time; nullopt where the row moves no bytes / does no FLOPs.
std::optional<double> achieved_gbps(const ResultRow& r);
std::optional<double> achieved_tflops(const ResultRow& r);

// Ceilings measured in the same run (0 = not measured).
struct Ceilings {
  double copy_gbps = 0;
  double gemm_tflops = 0;      // bf16 GEMM
  double fp8_gemm_tflops = 0;  // fp8 e4m3 GEMM (cuBLASLt, bf16 out, fp32 accumulation)
};
// The same ceilings with the fp8 GEMM rate standing in for the GEMM ceiling: the ridge point and
// roofline class of fp8 work (roofline_class(flops, bytes, fp8_ceilings(c))).
Ceilings fp8_ceilings(const Ceilings& c);

// Achieved rate as a percentage of the ceiling for the row's bound; nullopt when either is
// unknown.
std::optional<double> percent_of_ceiling(const ResultRow& r, const Ceilings& c);

// Roofline of a row: FLOPs per byte against the ridge point of the run (GEMM ceiling / copy
// ceiling). Below half the ridge it is memory bound, above twice the ridge compute bound,
// between the two "balanced". Rows without FLOPs are memory bound; with unknown ceilings a row
// with FLOPs is "balanced".
enum class Roofline { memory, balanced, compute };
const char* roofline_name(Roofline r);
double ridge_flop_per_byte(const Ceilings& c);  // 0 when a ceiling is unknown
Roofline roofline_class(double flops, double bytes, const Ceilings& c);
// The ceiling a row's "% of ceiling" is read against: compute at or above the ridge.
Bound roofline_bound(double flops, double bytes, const Ceilings& c);
// The roofline class of a row in a run with ceilings `c` (fp8 rows against the fp8 ridge);
// nullopt for rows that move no bytes and do no FLOPs (launch-cost rows).
std::optional<Roofline> row_roofline(const ResultRow& r, const Ceilings& c);

struct Report {
  std::string suite;  // "ceilings"
  std::string git_commit;
  std::string date_utc;  // ISO 8601, "2026-11-22T10:04:05Z"
  bool has_device = false;
  DeviceInfo device;
  Ceilings ceilings;
  std::vector<ResultRow> rows;
};

// The current time as ISO 8601 UTC.
std::string utc_now();
// The source's git commit: $BRAID_GIT_COMMIT if set; else the build's own stamp, the first line of
// a COMMIT file beside the running executable (tools/device/pack-build.sh writes one when it packs
// a build for the GPU machine, whose copy of the repository may carry an older .git); else `git
// rev-parse --short=12 HEAD` in the current directory (with "+dirty" when the work tree differs
// from HEAD); else "unknown".
std::string git_commit();
// The first line of DIR/COMMIT, without surrounding white space; nothing if there is no such
// file or the line is empty.
std::optional<std::string> build_stamp(const std::filesystem::path& dir);

// A report of `suite` on `device`, its header filled: commit, date, device (ceilings and rows are
// the caller's).
Report start_report(const std::string& suite, const DeviceInfo& device);
// Appends `row` to run.rows and prints its progress line to stderr:
// "  measured NAME PARAMS [TIMING]: MEDIAN us  NOTE".
void record_row(Report& run, ResultRow row);

nlohmann::json to_json(const Report& run);
// Reads what to_json wrote (derived fields such as gbps are recomputed, not read). Throws
// braid::Error (io) naming the missing or mistyped field.
Report report_from_json(const nlohmann::json& j);
// Writes to_json(run) to `path`, indented. Throws braid::Error (io) if it cannot.
void write_json(const Report& run, const std::string& path);

// Number formats used in the table: fixed-point with the digits that matter at that size.
std::string format_us(double us);
std::string format_rate(double v);  // GB/s, TFLOP/s
std::string format_bytes(double bytes);  // "1.00 GiB", "86.0 MiB", "512 B"

// The rows as an aligned text table, one header line, one line per row.
std::string format_table(const Report& run);
// The same columns as CSV (RFC 4180 quoting, one header line, numbers unformatted) and as a
// Markdown document (the device, commit and ceilings, then the table).
std::string to_csv(const Report& run);
std::string to_markdown(const Report& run);
// Writes text to `path`. Throws braid::Error (io) if it cannot.
void write_text(const std::string& text, const std::string& path);

}  // namespace braid::bench
