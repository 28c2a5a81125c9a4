// Nsight Compute's CSV (`ncu --csv --page raw --print-units base`): a header line of metric names,
// a line of units, one line per profiled kernel launch, every field quoted; numbers may carry
// thousands separators ("1,980,000", "62.50"), and ncu's own messages ("==PROF== ...") may come
// before the table. Parsing it, folding the launches per kernel, and the roofline class of each
// kernel (seed 004's rule). CPU-only, unit-tested in CI.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bench/harness/report.h"

namespace braid::bench {

struct NcuTable {
  std::vector<std::string> header;  // "ID", "Kernel Name", ..., metric names
  std::vector<std::string> units;   // same length ("" where none)
  std::vector<std::vector<std::string>> rows;  // one per launch, same length
  int column(const std::string& name) const;   // -1 when absent
};

// One CSV line split into fields (RFC 4180 quoting: "" inside quotes is a quote).
std::vector<std::string> split_csv_line(const std::string& line);

// The table in ncu's output. Lines before the header (the first line whose first field is "ID"
// and that has a "Kernel Name" field) are skipped, and so are "==" message lines after it.
// Throws braid::Error (io) when there is no table (ncu profiled no kernel: the error quotes what
// ncu said), or (io) for a row whose field count differs from the header's.
NcuTable parse_ncu_csv(const std::string& text);

// A number as ncu prints it: "1,980,000", "62.50", "-3", "1e+06". nullopt for "", "n/a" and
// anything else that is not a number.
std::optional<double> parse_ncu_number(const std::string& field);

// The value in the metric's base unit: times in ns ("ns", "us"/"usecond", "ms"/"msecond",
// "s"/"second"), sizes in bytes ("byte", "Kbyte", "Mbyte", "Gbyte", "Tbyte"), rates in per
// second ("hz", "Khz", "Mhz", "Ghz", ...). Other units (%, inst, cycle, "") are returned as is.
double to_base_unit(double value, const std::string& unit);

// The metrics `profile --ncu` asks for (seed 004's table, the FLOP counters, DRAM bytes and the
// FP32 peak of ncu's roofline).
std::vector<std::string> ncu_metric_names();
std::string ncu_metric_list();  // comma-separated, for --metrics

// Seed 004's roofline classes.
enum class KernelBound { memory, balanced, compute, unknown };
const char* kernel_bound_name(KernelBound b);  // "memory-bound", "balanced", "compute-bound", "unknown"

// One kernel's Nsight Compute figures, averaged over its profiled launches (nullopt: the metric
// was not in ncu's output).
struct NcuKernelMetrics {
  std::string kernel;  // "Kernel Name" as ncu printed it (mangled with --print-kernel-base mangled)
  int launches = 0;
  std::optional<double> sm_pct;         // sm__throughput.avg.pct_of_peak_sustained_elapsed
  std::optional<double> dram_pct;       // dram__throughput.avg.pct_of_peak_sustained_elapsed
  std::optional<double> memory_pct;     // gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed
  std::optional<double> occupancy_pct;  // sm__warps_active.avg.pct_of_peak_sustained_active
  std::optional<double> l1_hit_pct;     // l1tex__t_sector_hit_rate.pct
  std::optional<double> l2_hit_pct;     // lts__t_sector_hit_rate.pct
  std::optional<double> duration_us;    // gpu__time_duration.sum
  std::optional<double> fp32_flops;     // fadd + fmul + 2 * ffma (thread instructions, pred on)
  std::optional<double> tensor_flops;   // sm__ops_path_tensor_src_{bf16_dst_fp32,fp16,fp8,tf32_dst_fp32}.sum
  std::optional<double> fp8_tensor_flops;  // the fp8 part of tensor_flops
  std::optional<double> dram_bytes;     // dram__bytes.sum
  std::optional<double> fp32_peak_flops_per_s;  // 2 * ffma peak_sustained * SM clock (ncu's roofline)
  std::optional<double> flops() const;  // fp32_flops + tensor_flops (nullopt when both are)
  // flops / dram_bytes: nullopt when either is missing, infinity for FLOPs without DRAM bytes.
  std::optional<double> intensity() const;
  KernelBound bound = KernelBound::unknown;  // classify_kernel, once ceilings are known
  double ridge = 0;  // the FLOP/byte ridge it was classified against (0: none)
};

// Launches folded per kernel name (means of each metric over the launches that have it), in order
// of first appearance.
std::vector<NcuKernelMetrics> fold_ncu_table(const NcuTable& table);
// Requested metrics with no column in the table (ncu silently drops names it does not know).
std::vector<std::string> missing_ncu_metrics(const NcuTable& table);

// "Meaningfully higher" in seed 004's rule: by at least this many points of peak.
inline constexpr double kMeaningfulPctPoints = 10.0;

// The FLOP/byte ridge for a kernel: its compute peak over the copy ceiling. The compute peak is
// the measured fp8 GEMM ceiling when the kernel ran fp8 tensor ops, the bf16 GEMM ceiling when it
// ran other tensor ops, else ncu's FP32 peak. 0 when a needed figure is unknown.
double kernel_ridge(const NcuKernelMetrics& m, const Ceilings& c);

// Seed 004: memory-bound = intensity below the ridge and memory throughput meaningfully above SM
// throughput; compute-bound = intensity at or above the ridge and SM throughput meaningfully above
// memory throughput; balanced = neither. unknown when the intensity, ridge or throughputs are
// missing. A kernel that reads no DRAM byte has infinite intensity.
KernelBound classify_kernel(const NcuKernelMetrics& m, double ridge);

// Sets bound and ridge of every kernel.
void classify_kernels(std::vector<NcuKernelMetrics>& kernels, const Ceilings& c);

}  // namespace braid::bench
