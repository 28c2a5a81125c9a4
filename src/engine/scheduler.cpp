#include "engine/scheduler.h"

#include <algorithm>

#include "braid/error.h"

namespace braid::engine {

Scheduler::Scheduler(const SchedulerConfig& config, BlockManager& blocks)
    : config_(config), blocks_(blocks) {
  if (config.max_num_seqs <= 0 || config.max_num_batched_tokens <= 0)
    throw Error(ErrorKind::invalid_argument,
                "scheduler: max_num_seqs and max_num_batched_tokens must be positive");
}

void Scheduler::add(Sequence* seq) {
  seq->status = SequenceStatus::waiting;
  waiting_.push_back(seq);
}

void Scheduler::remove(Sequence* seq) {
  running_.erase(std::remove(running_.begin(), running_.end(), seq), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), seq), waiting_.end());
  blocks_.release(*seq);
}

void Scheduler::preempt(Sequence* seq) {
  blocks_.release(*seq);
  seq->status = SequenceStatus::waiting;
  ++seq->preemptions;
  ++preemptions_;
  waiting_.push_front(seq);
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int budget = config_.max_num_batched_tokens;

  // Running sequences, oldest first; under page pressure the newest are preempted.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence* seq = running_[i];
    const int n = std::min(seq->num_tokens() - seq->num_computed, budget);
    bool self_preempted = false;
    while (!blocks_.grow(*seq, seq->num_computed + n)) {
      Sequence* victim = running_.back();
      running_.pop_back();
      preempt(victim);
      plan.preempted.push_back(victim);
      if (victim == seq) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    plan.seqs.push_back({seq, n, seq->num_computed, seq->num_computed + n == seq->num_tokens()});
    plan.num_tokens += n;
    budget -= n;
    ++i;
  }

  // Then waiting sequences, while nothing had to be preempted this step.
  while (plan.preempted.empty() && !waiting_.empty() && budget > 0 &&
         static_cast<int>(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    if (seq->pages.empty()) blocks_.adopt_cached_prefix(*seq);
    const int n = std::min(seq->num_tokens() - seq->num_computed, budget);
    if (!blocks_.grow(*seq, seq->num_computed + n)) {
      blocks_.release(*seq);  // its adopted pages stay cached for next time
      break;
    }
    waiting_.pop_front();
    seq->status = SequenceStatus::running;
    running_.push_back(seq);
    plan.seqs.push_back({seq, n, seq->num_computed, seq->num_computed + n == seq->num_tokens()});
    plan.num_tokens += n;
    budget -= n;
  }
  // One-token chunks (decodes) first: the forward pass runs them with split-KV decode attention
  // and only the prompt chunks after them with the tiled kernel.
  std::stable_partition(plan.seqs.begin(), plan.seqs.end(),
                        [](const ScheduledSequence& s) { return s.num_tokens == 1; });
  return plan;
}

void Scheduler::complete(const StepPlan& plan) {
  for (const ScheduledSequence& s : plan.seqs) {
    s.seq->num_computed += s.num_tokens;
    blocks_.cache_full_pages(*s.seq);
  }
}

}  // namespace braid::engine
