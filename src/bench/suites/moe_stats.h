// Expert load statistics of one routing (issue 6, seed 001's "expert utilization" table): how
// many (token, slot) pairs each expert got, the Switch Transformer auxiliary loss and the spread
// of the load. Plain C++ on host arrays (no CUDA), so it is unit-tested in CI; `bench moe` copies
// the router logits and the chosen ids back to the host and prints these.
#pragma once

#include <cstdint>
#include <vector>

namespace braid::bench {

struct MoeLoadStats {
  int64_t tokens = 0;
  int experts = 0;
  int k = 0;
  std::vector<int64_t> counts;    // pairs routed to each expert
  std::vector<double> fraction;   // f_i = counts[i] / (tokens * k)
  std::vector<double> mean_prob;  // P_i = mean over tokens of softmax(logits[t])[i]
  // Switch Transformer's load-balancing loss without its coefficient: E * sum_i f_i * P_i. It is
  // 1 when both the load and the router's probability mass are spread evenly, and grows to E
  // when every token sends everything to one expert with certainty.
  double aux_loss = 0;
  // Coefficient of variation of counts: population stddev / mean (0 = perfectly even).
  double load_cv = 0;
  int64_t min_load = 0, max_load = 0;
  double max_over_mean = 0;  // max_load / mean load: the straggler a grouped GEMM waits for
  int active_experts = 0;    // experts with at least one pair
  int64_t invalid_ids = 0;   // ids outside [0, experts): counted nowhere else
};

// logits [tokens, experts] (fp32, row-major) and topk_ids [tokens, k] (row-major). The softmax is
// taken in double with the row maximum subtracted. tokens >= 1, experts >= 1, k >= 1.
MoeLoadStats moe_load_stats(const float* logits, const int32_t* topk_ids, int64_t tokens,
                            int experts, int k);

}  // namespace braid::bench
