// bench/profile/profile.h on synthetic records: host ranges from probe marks, kernel names, attribution
// through correlation ids, per-phase tables, launch gaps, and the output forms.
#include <gtest/gtest.h>

#include <string>

#include "bench/profile/profile.h"
#include "braid/error.h"

namespace braid::bench {
namespace {

constexpr const char* kEmbed = "_ZN5braid3ops16embedding_kernelEPKiP13__nv_bfloat16l";
constexpr const char* kGemv = "_ZN5braid3ops12_GLOBAL__N_111gemv_kernelILi128E13__nv_bfloat16EEvPKT0_PS4_i";
constexpr const char* kAttention = "_ZN5braid3ops23attention_decode_kernelI13__nv_bfloat16Lb1EEEvPT_f";
constexpr const char* kLmHead = "nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNT";  // extern "C": not mangled

GpuActivity kernel(const char* name, uint64_t start, uint64_t end, uint32_t correlation,
                   uint32_t stream = 7) {
  GpuActivity a;
  a.name = name;
  a.start_ns = start;
  a.end_ns = end;
  a.correlation = correlation;
  a.stream = stream;
  a.grid[0] = 132, a.grid[1] = 1, a.grid[2] = 1;
  a.block[0] = 256, a.block[1] = 1, a.block[2] = 1;
  a.registers = 40;
  a.static_shared = 1024;
  a.dynamic_shared = 2048;
  return a;
}

ApiCall call(uint32_t correlation, uint64_t start, bool runtime = true) {
  return {runtime ? "cudaLaunchKernel" : "cuLaunchKernelEx", runtime, start, start + 5, 1, correlation};
}

// The marks of a one-layer forward (embedding, qkv_proj and attention of layer 0, lm_head) at
// offsets from `t0`.
std::vector<ComponentMark> marks_at(uint64_t t0) {
  return {{"embedding", -1, t0 + 100}, {"qkv_proj", 0, t0 + 200}, {"attention", 0, t0 + 300},
          {"lm_head", -1, t0 + 400}};
}

// A prefill and two eager decode steps of a one-layer model, plus one copy launched outside
// forward() and one kernel with no API record.
ProfileTrace synthetic_trace() {
  ProfileTrace t;
  // Prefill: phase [1000, 20000], forward from 1100; components end at 1200, 1300, 1400, 1500.
  add_step_ranges(t.ranges, "prefill", 0, 1000, 1100, marks_at(1100), 20000);
  t.api_calls = {call(1, 1150), call(2, 1250), call(3, 1350), call(4, 1450)};
  t.activities = {kernel(kEmbed, 5000, 5100, 1), kernel(kGemv, 5110, 5400, 2),
                  kernel(kAttention, 5400, 5600, 3), kernel(kLmHead, 5650, 5900, 4)};
  // Decode step 0: phase [30000, 40000], forward from 30100.
  add_step_ranges(t.ranges, "decode", 0, 30000, 30100, marks_at(30100), 40000);
  t.api_calls.push_back(call(10, 30150));
  t.api_calls.push_back(call(10, 30250, /*runtime=*/false));  // the runtime call wins
  t.api_calls.push_back(call(11, 30260, /*runtime=*/false));  // driver only (cuBLASLt)
  t.api_calls.push_back(call(12, 30350));
  t.api_calls.push_back(call(13, 30450));
  t.activities.push_back(kernel(kEmbed, 31000, 31010, 10));
  t.activities.push_back(kernel(kGemv, 31020, 31120, 11));      // gap 10
  t.activities.push_back(kernel(kAttention, 31125, 31200, 12)); // gap 5
  t.activities.push_back(kernel(kLmHead, 31300, 31400, 13));    // gap 100
  // Decode step 1: phase [50000, 60000], forward from 50100; a copy enqueued before forward().
  add_step_ranges(t.ranges, "decode", 1, 50000, 50100, marks_at(50100), 60000);
  t.api_calls.push_back(call(24, 50050));
  t.api_calls.push_back(call(20, 50150));
  t.api_calls.push_back(call(21, 50250));
  t.api_calls.push_back(call(22, 50350));
  t.api_calls.push_back(call(23, 50450));
  t.activities.push_back(kernel(kEmbed, 51000, 51010, 20));
  t.activities.push_back(kernel(kGemv, 51015, 51115, 21));      // gap 5
  t.activities.push_back(kernel(kAttention, 51120, 51195, 22)); // gap 5
  t.activities.push_back(kernel(kLmHead, 51200, 51300, 23));    // gap 5
  GpuActivity copy;
  copy.kind = ActivityKind::memcpy;
  copy.name = "memcpy HtoD";
  copy.start_ns = 51050;
  copy.end_ns = 51060;
  copy.stream = 8;
  copy.correlation = 24;
  copy.bytes = 24;
  t.activities.push_back(copy);
  t.activities.push_back(kernel(kGemv, 52000, 52100, 99));  // no API record
  return t;
}

const PhaseSummary& phase_of(const ProfileAnalysis& a, const std::string& name) {
  for (const auto& p : a.phases)
    if (p.phase == name) return p;
  throw std::runtime_error("no phase " + name);
}

const ComponentRow& component_of(const PhaseSummary& p, const std::string& name) {
  for (const auto& c : p.components)
    if (c.component == name) return c;
  throw std::runtime_error("no component " + name);
}

TEST(Profile, StepRangesFromMarks) {
  std::vector<HostRange> r;
  add_step_ranges(r, "decode", 3, 1000, 1100, marks_at(1100), 2000);
  ASSERT_EQ(r.size(), 6u);  // phase, layer 0, four components
  EXPECT_EQ(r[0].level, RangeLevel::phase);
  EXPECT_EQ(r[0].name, "decode step 3");
  EXPECT_EQ(r[0].start_ns, 1000u);
  EXPECT_EQ(r[0].end_ns, 2000u);
  EXPECT_EQ(r[1].level, RangeLevel::layer);
  EXPECT_EQ(r[1].name, "layer 0");
  EXPECT_EQ(r[1].start_ns, 1200u);  // qkv_proj starts where embedding ended
  EXPECT_EQ(r[1].end_ns, 1400u);    // attention's end
  EXPECT_EQ(r[2].name, "embedding");
  EXPECT_EQ(r[2].start_ns, 1100u);  // the forward's start
  EXPECT_EQ(r[2].end_ns, 1200u);
  EXPECT_EQ(r[2].layer, -1);
  EXPECT_EQ(r[3].name, "qkv_proj");
  EXPECT_EQ(r[3].layer, 0);
  EXPECT_EQ(r[3].start_ns, 1200u);
  EXPECT_EQ(r[3].end_ns, 1300u);
  EXPECT_EQ(r[5].name, "lm_head");
  EXPECT_EQ(r[5].end_ns, 1500u);
  for (const auto& x : r) EXPECT_EQ(x.step, 3);

  std::vector<HostRange> prefill;
  add_step_ranges(prefill, "prefill", 0, 10, 10, {}, 20);
  ASSERT_EQ(prefill.size(), 1u);
  EXPECT_EQ(prefill[0].name, "prefill");
}

TEST(Profile, StepRangesRejectTimesOutOfOrder) {
  std::vector<HostRange> r;
  auto marks = marks_at(1100);
  std::swap(marks[1].at_ns, marks[2].at_ns);
  EXPECT_THROW(add_step_ranges(r, "decode", 0, 1000, 1100, marks, 2000), Error);
  EXPECT_THROW(add_step_ranges(r, "decode", 0, 1000, 1100, marks_at(1100), 1300), Error);
  EXPECT_THROW(add_step_ranges(r, "decode", 0, 1200, 1100, {}, 1300), Error);
}

TEST(Profile, KernelNames) {
  EXPECT_EQ(demangle_symbol(kGemv),
            "void braid::ops::(anonymous namespace)::gemv_kernel<128, __nv_bfloat16>(__nv_bfloat16 "
            "const*, __nv_bfloat16*, int)");
  EXPECT_EQ(demangle_symbol(kLmHead), kLmHead);
  EXPECT_EQ(demangle_symbol("_Znot a symbol"), "_Znot a symbol");
  EXPECT_EQ(short_kernel_name(demangle_symbol(kGemv)), "gemv_kernel<128, __nv_bfloat16>");
  EXPECT_EQ(short_kernel_name(demangle_symbol(kEmbed)), "embedding_kernel");
  EXPECT_EQ(short_kernel_name(demangle_symbol(kAttention)), "attention_decode_kernel<__nv_bfloat16, true>");
  EXPECT_EQ(short_kernel_name(kLmHead), kLmHead);
  EXPECT_EQ(short_kernel_name("unsigned int ns::f<(int)7>(T1 (*)(int), int)"), "f<(int)7>");
  // Qualifiers inside template arguments go too.
  EXPECT_EQ(short_kernel_name("void braid::cuda::(anonymous namespace)::gemv_fused_kernel<"
                              "__nv_bfloat16, (braid::cuda::(anonymous namespace)::Prologue)0, "
                              "false>(braid::cuda::(anonymous namespace)::FusedArgs)"),
            "gemv_fused_kernel<__nv_bfloat16, (Prologue)0, false>");
  EXPECT_EQ(short_kernel_name("void at::native::vectorized_elementwise_kernel<4, "
                              "at::native::FillFunctor<float>, std::array<char*, 1ul> >(int, "
                              "at::native::FillFunctor<float>, std::array<char*, 1ul>)", 80),
            "vectorized_elementwise_kernel<4, FillFunctor<float>, array<char*, 1ul> >");
  // Too long: template arguments cut, marked.
  const std::string cut = short_kernel_name(demangle_symbol(kGemv), 20);
  EXPECT_EQ(cut, "gemv_kernel<128,...>");
  EXPECT_EQ(cut.size(), 20u);
  EXPECT_EQ(short_kernel_name("a_very_long_kernel_name_without_templates", 12), "a_very_lo...");
}

TEST(Profile, Percentile) {
  EXPECT_EQ(percentile({}, 50), 0);
  EXPECT_EQ(percentile({3, 1, 2}, 50), 2);
  EXPECT_EQ(percentile({5, 5, 5, 5, 10, 100}, 50), 5);
  EXPECT_EQ(percentile({5, 5, 5, 5, 10, 100}, 90), 100);
  EXPECT_EQ(percentile({1, 2, 3, 4}, 100), 4);
  EXPECT_EQ(percentile({1, 2, 3, 4}, 0), 1);
}

TEST(Profile, AttributesActivitiesThroughCorrelationIds) {
  const ProfileTrace t = synthetic_trace();
  const ProfileAnalysis a = analyze_profile(t);
  ASSERT_EQ(a.attribution.size(), t.activities.size());
  EXPECT_EQ(a.unattributed, 1);
  const auto& at = a.attribution;
  EXPECT_EQ(at[0].phase, "prefill");
  EXPECT_EQ(at[0].component, "embedding");
  EXPECT_EQ(at[1].component, "qkv_proj");
  EXPECT_EQ(at[1].layer, 0);
  EXPECT_EQ(at[3].component, "lm_head");
  EXPECT_EQ(at[3].layer, -1);
  EXPECT_EQ(at[4].phase, "decode");
  EXPECT_EQ(at[4].step, 0);
  EXPECT_EQ(at[4].component, "embedding");  // the runtime record, not the driver one
  EXPECT_EQ(at[5].component, "qkv_proj");   // a driver-only launch
  EXPECT_EQ(at[8].step, 1);
  EXPECT_EQ(at[12].component, kOutsideComponent);  // the copy before forward()
  EXPECT_EQ(at[13].phase, "");                     // no API record
}

TEST(Profile, ComponentSpanCountsOverlappingKernelsOnceAndGapsBetweenThem) {
  ProfileTrace t = synthetic_trace();
  // Decode step 0's attention becomes two kernels: a split kernel 31125..31200 and a combine
  // launched early (programmatic dependent launch) that runs 31150..31230: durations 75 + 80 =
  // 155 ns, span 31125..31230 = 105 ns.
  t.api_calls.push_back(call(14, 30360));
  t.activities.push_back(kernel(kAttention, 31150, 31230, 14));
  const ProfileAnalysis a = analyze_profile(t);
  const PhaseSummary& d = phase_of(a, "decode");
  const ComponentRow& attention = component_of(d, "attention");
  EXPECT_NEAR(attention.us_per_step, (0.155 + 0.075) / 2, 1e-12);  // steps 0 and 1
  EXPECT_NEAR(attention.span_us_per_step, (0.105 + 0.075) / 2, 1e-12);
  // Elapsed: from the end of whatever finished before it. Step 0: embedding 31000..31010 (first:
  // its own span, 10), qkv 31020..31120 (110), attention ends 31230 (110), lm_head 31300..31400
  // (170); step 1: embedding 10, the copy outside forward() ends 51060 (50), qkv 51115 (55),
  // attention 51195 (80), lm_head 51300 (105). They add up to the steps' wall time.
  EXPECT_NEAR(attention.elapsed_us_per_step, (0.110 + 0.080) / 2, 1e-12);
  EXPECT_NEAR(component_of(d, "qkv_proj").elapsed_us_per_step, (0.110 + 0.055) / 2, 1e-12);
  EXPECT_NEAR(component_of(d, "lm_head").elapsed_us_per_step, (0.170 + 0.105) / 2, 1e-12);
  double elapsed = 0;
  for (const auto& c : d.components) elapsed += c.elapsed_us_per_step;
  EXPECT_NEAR(elapsed, ((31400 - 31000) + (51300 - 51000)) / 2e3, 1e-12);
  // One kernel per layer: the span is its duration.
  EXPECT_NEAR(component_of(d, "qkv_proj").span_us_per_step,
              component_of(d, "qkv_proj").us_per_step, 1e-12);
  // The kernel rows' elapsed time, the same walk by symbol over the kernels only: the attention
  // symbol's two kernels of step 0 end at 31200 (80 after qkv) and 31230 (30 more), its 155 ns
  // of duration adding 110; step 1's gemv ends 105 after the embedding (the copy is no kernel).
  auto kernel_row = [&](const std::string& symbol) -> const KernelRow& {
    for (const auto& r : d.kernels_table)
      if (r.symbol == symbol) return r;
    throw std::runtime_error("no kernel " + symbol);
  };
  EXPECT_NEAR(kernel_row(kAttention).elapsed_us_per_step, (0.110 + 0.080) / 2, 1e-12);
  EXPECT_NEAR(kernel_row(kGemv).elapsed_us_per_step, (0.110 + 0.105) / 2, 1e-12);
  EXPECT_NEAR(kernel_row(kEmbed).elapsed_us_per_step, 0.010, 1e-12);
  EXPECT_EQ(kernel_row("memcpy HtoD").elapsed_us_per_step, 0.0);
  elapsed = 0;
  for (const auto& r : d.kernels_table) elapsed += r.elapsed_us_per_step;
  EXPECT_NEAR(elapsed, d.wall_us_per_step, 1e-12);
}

TEST(Profile, PhaseTables) {
  const ProfileAnalysis a = analyze_profile(synthetic_trace());
  ASSERT_EQ(a.phases.size(), 2u);
  EXPECT_EQ(a.phases[0].phase, "prefill");
  const PhaseSummary& d = phase_of(a, "decode");
  EXPECT_EQ(d.steps, 2);
  EXPECT_EQ(d.kernels, 8);
  EXPECT_EQ(d.activities, 9);
  EXPECT_DOUBLE_EQ(d.kernels_per_step, 4);
  EXPECT_NEAR(d.gpu_us, 0.580, 1e-12);
  EXPECT_NEAR(d.busy_us_per_step, 0.285, 1e-12);  // kernels only: the copy is not counted
  ASSERT_EQ(d.wall_us.size(), 2u);
  EXPECT_NEAR(d.wall_us[0], 0.400, 1e-12);
  EXPECT_NEAR(d.wall_us[1], 0.300, 1e-12);
  EXPECT_NEAR(d.wall_us_per_step, 0.350, 1e-12);
  // Gaps on stream 7: 10, 5, 100 ns (step 0), 5, 5, 5 ns (step 1); stream 8 has one copy.
  EXPECT_EQ(d.gaps.count, 6);
  EXPECT_NEAR(d.gaps.median_us, 0.005, 1e-12);
  EXPECT_NEAR(d.gaps.p90_us, 0.100, 1e-12);
  EXPECT_NEAR(d.gaps.max_us, 0.100, 1e-12);
  EXPECT_NEAR(d.gaps.total_us, 0.130, 1e-12);
  EXPECT_NEAR(d.gaps.share_of_wall, 0.130 / 0.700, 1e-12);
  EXPECT_NEAR(d.launch_call_us_median, 0.005, 1e-12);  // every synthetic call takes 5 ns

  // Kernel table: by total time; lm_head and gemv both 200 ns, the first seen stays first.
  ASSERT_EQ(d.kernels_table.size(), 5u);
  const KernelRow& top = d.kernels_table[0];
  EXPECT_EQ(top.symbol, kGemv);
  EXPECT_EQ(top.short_name, "gemv_kernel<128, __nv_bfloat16>");
  EXPECT_EQ(top.calls, 2);
  EXPECT_NEAR(top.total_us, 0.200, 1e-12);
  EXPECT_NEAR(top.avg_us, 0.100, 1e-12);
  EXPECT_NEAR(top.share, 0.200 / 0.580, 1e-12);
  EXPECT_EQ(d.kernels_table[1].symbol, kLmHead);
  EXPECT_EQ(d.kernels_table.back().kind, ActivityKind::memcpy);
  double shares = 0;
  for (const auto& r : d.kernels_table) shares += r.share;
  EXPECT_NEAR(shares, 1.0, 1e-12);

  // Components per step, in forward order, then the copy outside forward().
  ASSERT_EQ(d.components.size(), 5u);
  EXPECT_EQ(d.components[0].component, "embedding");
  EXPECT_EQ(d.components[4].component, kOutsideComponent);
  EXPECT_NEAR(component_of(d, "qkv_proj").us_per_step, 0.100, 1e-12);
  EXPECT_NEAR(component_of(d, "attention").us_per_step, 0.075, 1e-12);
  EXPECT_NEAR(component_of(d, "attention").kernels_per_step, 1.0, 1e-12);
  EXPECT_NEAR(component_of(d, kOutsideComponent).kernels_per_step, 0.5, 1e-12);
  EXPECT_NEAR(component_of(d, "lm_head").share, 0.200 / 0.580, 1e-12);

  const PhaseSummary& p = phase_of(a, "prefill");
  EXPECT_EQ(p.steps, 1);
  EXPECT_EQ(p.kernels, 4);
  EXPECT_NEAR(p.wall_us_per_step, 0.900, 1e-12);
  EXPECT_EQ(p.gaps.count, 2);  // 10 ns after the embedding, 50 ns before the LM head
  EXPECT_NEAR(p.gaps.total_us, 0.060, 1e-12);
}

TEST(Profile, GraphReplayHasNoComponents) {
  ProfileTrace t;
  add_step_ranges(t.ranges, "decode", 0, 1000, 1000, {}, 9000);
  t.api_calls = {{"cudaMemcpyAsync", true, 1002, 1008, 1, 49},
                 {"cudaGraphLaunch", true, 1010, 1030, 1, 50}};
  GpuActivity inputs;  // the step's inputs copied in before the replay, long before its kernels
  inputs.kind = ActivityKind::memcpy;
  inputs.name = "memcpy DtoD";
  inputs.start_ns = 1100;
  inputs.end_ns = 1110;
  inputs.stream = 7;
  inputs.correlation = 49;
  t.activities.push_back(inputs);
  for (int i = 0; i < 3; ++i) {
    GpuActivity k = kernel(kGemv, 2000 + 100 * i, 2080 + 100 * i, 50);
    k.graph_id = 7;
    t.activities.push_back(k);
  }
  const ProfileAnalysis a = analyze_profile(t);
  const PhaseSummary& d = phase_of(a, "decode");
  EXPECT_EQ(d.kernels, 3);
  ASSERT_EQ(d.components.size(), 2u);
  EXPECT_EQ(d.components[0].component, kOutsideComponent);  // the copy
  EXPECT_EQ(d.components[1].component, kGraphComponent);
  EXPECT_NEAR(d.components[1].kernels_per_step, 3, 1e-12);
  // Wall, busy and gaps from the kernels alone: the copy's 890 ns lead is no launch gap.
  EXPECT_NEAR(d.wall_us_per_step, 0.280, 1e-12);
  EXPECT_NEAR(d.busy_us_per_step, 0.240, 1e-12);
  EXPECT_EQ(d.gaps.count, 2);
  EXPECT_NEAR(d.gaps.median_us, 0.020, 1e-12);
  EXPECT_NEAR(d.gaps.max_us, 0.020, 1e-12);
}

TEST(Profile, OverlappingStreamsMakeNoGaps) {
  ProfileTrace t;
  add_step_ranges(t.ranges, "decode", 0, 0, 0, {}, 100000);
  t.api_calls = {call(1, 10), call(2, 20), call(3, 30)};
  t.activities = {kernel(kGemv, 1000, 2000, 1, 1), kernel(kGemv, 1500, 2500, 2, 2),
                  kernel(kGemv, 2100, 2200, 3, 1)};  // 100 ns after its stream's last end
  const ProfileAnalysis a = analyze_profile(t);
  const PhaseSummary& d = phase_of(a, "decode");
  EXPECT_NEAR(d.busy_us_per_step, 1.5, 1e-12);
  EXPECT_NEAR(d.wall_us_per_step, 1.5, 1e-12);
  EXPECT_EQ(d.gaps.count, 1);
  EXPECT_NEAR(d.gaps.total_us, 0.1, 1e-12);
}

TEST(Profile, LaunchingCallsPreferTheRuntime) {
  const ProfileTrace t = synthetic_trace();
  const auto calls = launching_calls(t);
  ASSERT_EQ(calls.count(10), 1u);
  EXPECT_TRUE(calls.at(10)->runtime);
  EXPECT_EQ(calls.at(10)->start_ns, 30150u);
  EXPECT_FALSE(calls.at(11)->runtime);  // driver only
  EXPECT_EQ(calls.count(99), 0u);
}

TEST(Profile, DropsRecordsBeforeTheRecording) {
  ProfileTrace t = synthetic_trace();
  drop_records_before(t, 30000);  // everything of the prefill
  for (const auto& c : t.api_calls) EXPECT_GE(c.start_ns, 30000u);
  for (const auto& a : t.activities) EXPECT_GE(a.start_ns, 30000u);
  EXPECT_EQ(t.activities.size(), 10u);
  EXPECT_EQ(t.ranges.size(), synthetic_trace().ranges.size());  // ranges stay
  const ProfileAnalysis a = analyze_profile(t);
  ASSERT_EQ(a.phases.size(), 1u);
  EXPECT_EQ(a.phases[0].phase, "decode");
}

TEST(Profile, RejectsActivityEndingBeforeItStarts) {
  ProfileTrace t;
  t.activities = {kernel(kGemv, 2000, 1000, 1)};
  EXPECT_THROW(analyze_profile(t), Error);
}

TEST(Profile, FoldsNcuResultsBySymbol) {
  ProfileAnalysis a = analyze_profile(synthetic_trace());
  NcuKernelMetrics m;
  m.kernel = kGemv;
  m.launches = 3;
  m.sm_pct = 12.5;
  NcuKernelMetrics other;
  other.kernel = "not_in_the_trace";
  fold_ncu_results(a, {m, other});
  int with_ncu = 0;
  for (const auto& p : a.phases)
    for (const auto& r : p.kernels_table)
      if (r.ncu) {
        ++with_ncu;
        EXPECT_EQ(r.symbol, kGemv);
        EXPECT_EQ(*r.ncu->sm_pct, 12.5);
      }
  EXPECT_EQ(with_ncu, 2);  // prefill and decode rows of the GEMV
}

ProfileSetup synthetic_setup() {
  ProfileSetup s;
  s.model = "tiny";
  s.random_weights = true;
  s.layers = 1;
  s.prompt_tokens = 16;
  s.steps = 2;
  return s;
}

TEST(Profile, TerminalReport) {
  const ProfileAnalysis a = analyze_profile(synthetic_trace());
  const std::string text = format_profile(synthetic_setup(), a, NcuSummary{}, 3);
  EXPECT_NE(text.find("tiny (random weights), 1 layers: prefill of 16 tokens, 2 decode steps (eager)"),
            std::string::npos);
  EXPECT_NE(text.find("14 GPU activities recorded, 1 not attributed"), std::string::npos);
  EXPECT_NE(text.find("== decode: 2 steps, 4.0 kernels per step"), std::string::npos);
  EXPECT_NE(text.find("gemv_kernel<128, __nv_bfloat16>"), std::string::npos);
  EXPECT_NE(text.find("(2 more)"), std::string::npos);  // top 3 of 5 rows
  EXPECT_NE(text.find("launch gaps: 3.0 per step"), std::string::npos);
  EXPECT_NE(text.find("(outside forward)"), std::string::npos);
  EXPECT_EQ(text.find("Nsight Compute"), std::string::npos);

  ProfileAnalysis with_ncu = a;
  NcuKernelMetrics m;
  m.kernel = kGemv;
  m.launches = 2;
  m.sm_pct = 10;
  m.memory_pct = 80;
  m.fp32_flops = 2e6;
  m.dram_bytes = 1e6;
  m.bound = KernelBound::memory;
  m.ridge = 20;
  fold_ncu_results(with_ncu, {m});
  NcuSummary ncu;
  ncu.ran = true;
  ncu.phase = "decode";
  ncu.ceilings.copy_gbps = 3000;
  ncu.ceilings.gemm_tflops = 700;
  ncu.missing_metrics = {"sm__ops_path_tensor_src_fp8.sum"};
  const std::string text2 = format_profile(synthetic_setup(), with_ncu, ncu);
  EXPECT_NE(text2.find("Nsight Compute (decode phase, 1 kernel)"), std::string::npos);
  EXPECT_NE(text2.find("memory-bound"), std::string::npos);
  EXPECT_NE(text2.find("sm__ops_path_tensor_src_fp8.sum"), std::string::npos);
}

TEST(Profile, JsonAndMarkdown) {
  const ProfileAnalysis a = analyze_profile(synthetic_trace());
  const nlohmann::json j = profile_to_json(synthetic_setup(), a, NcuSummary{});
  EXPECT_EQ(j["suite"], "profile");
  EXPECT_EQ(j["setup"]["decode_steps"], 2);
  EXPECT_EQ(j["records"]["unattributed"], 1);
  ASSERT_EQ(j["phases"].size(), 2u);
  const auto& d = j["phases"][1];
  EXPECT_EQ(d["phase"], "decode");
  EXPECT_EQ(d["launch_gaps"]["count"], 6);
  EXPECT_EQ(d["kernels_table"][0]["symbol"], kGemv);
  EXPECT_EQ(d["kernels_table"][0]["name"], demangle_symbol(kGemv));  // the full name
  EXPECT_EQ(d["components"].size(), 5u);
  EXPECT_FALSE(j.contains("ncu"));

  const std::string md = profile_to_markdown(synthetic_setup(), a, NcuSummary{});
  EXPECT_NE(md.find("## decode"), std::string::npos);
  EXPECT_NE(md.find("| kernel | calls | total us | avg us | share | elapsed us/step |"), std::string::npos);
  EXPECT_NE(md.find("| component | us/step | span us/step | elapsed us/step | kernels/step | share |"), std::string::npos);
}

TEST(Profile, ChromeTrace) {
  const ProfileTrace t = synthetic_trace();
  const ProfileAnalysis a = analyze_profile(t);
  const nlohmann::json j = chrome_trace(t, a);
  ASSERT_TRUE(j.contains("traceEvents"));
  const auto& ev = j["traceEvents"];
  int kernels = 0, ranges = 0, api = 0, flows = 0;
  bool gpu_named = false, host_named = false, stream8 = false;
  double first_ts = 1e30;
  for (const auto& e : ev) {
    const std::string ph = e["ph"];
    if (ph == "M") {
      if (e["name"] == "process_name" && e["args"]["name"] == "GPU") gpu_named = e["pid"] == 1;
      if (e["name"] == "process_name" && e["args"]["name"] == "host") host_named = e["pid"] == 2;
      if (e["name"] == "thread_name" && e["pid"] == 1 && e["tid"] == 8) stream8 = true;
      continue;
    }
    first_ts = std::min(first_ts, e["ts"].get<double>());
    if (ph == "s" || ph == "f") {
      ++flows;
      continue;
    }
    ASSERT_EQ(ph, "X");
    if (e["pid"] == 1) {
      ++kernels;
      if (e["args"]["correlation"] == 11) {
        EXPECT_EQ(e["name"], "gemv_kernel<128, __nv_bfloat16>");
        EXPECT_EQ(e["tid"], 7);
        EXPECT_DOUBLE_EQ(e["ts"].get<double>(), (31020 - 1000) / 1e3);  // from the first record
        EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 0.1);
        EXPECT_EQ(e["args"]["grid"], nlohmann::json({132, 1, 1}));
        EXPECT_EQ(e["args"]["block"], nlohmann::json({256, 1, 1}));
        EXPECT_EQ(e["args"]["registers_per_thread"], 40);
        EXPECT_EQ(e["args"]["shared_memory_bytes"], 3072);
        EXPECT_EQ(e["args"]["component"], "qkv_proj");
        EXPECT_EQ(e["args"]["layer"], 0);
        EXPECT_EQ(e["args"]["name"], demangle_symbol(kGemv));
      }
    } else if (e["tid"] == 1) {
      ++ranges;
    } else {
      ++api;
    }
  }
  EXPECT_TRUE(gpu_named);
  EXPECT_TRUE(host_named);
  EXPECT_TRUE(stream8);
  EXPECT_EQ(kernels, static_cast<int>(t.activities.size()));
  EXPECT_EQ(ranges, static_cast<int>(t.ranges.size()));
  EXPECT_EQ(api, static_cast<int>(t.api_calls.size()));
  EXPECT_EQ(flows, 2 * 13);  // every activity with an API record
  EXPECT_DOUBLE_EQ(first_ts, 0.0);
}

}  // namespace
}  // namespace braid::bench
