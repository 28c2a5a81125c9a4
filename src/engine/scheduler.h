// Continuous batching: which sequences run in the next step, and how many tokens each.
//
// Every step has a token budget. Running sequences come first, in the order they were admitted:
// each takes its next token (decode) or its next chunk of prompt (a prompt longer than the budget
// is prefilled over several steps, so it never stalls the others). Waiting sequences then fill
// what is left, up to max_num_seqs running. When the page pool runs dry, the newest running
// sequence gives its pages back and waits at the head of the queue to be recomputed (its tokens
// are kept; the prefix cache often still has most of them).
#pragma once

#include <deque>
#include <vector>

#include "engine/block_manager.h"
#include "engine/sequence.h"

namespace braid::engine {

struct SchedulerConfig {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 2048;
};

struct ScheduledSequence {
  Sequence* seq = nullptr;
  int num_tokens = 0;  // tokens [start, start + num_tokens) run this step
  int start = 0;       // seq->num_computed when scheduled
  // The chunk ends at the sequence's last token: the step samples its next one.
  bool sample = false;
  bool samples() const { return sample; }
};

struct StepPlan {
  std::vector<ScheduledSequence> seqs;  // one-token chunks first, then in scheduling order
  int num_tokens = 0;
  std::vector<Sequence*> preempted;  // sent back to the queue this step
  bool empty() const { return seqs.empty(); }
  bool decode_only() const { return num_tokens == static_cast<int>(seqs.size()); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, BlockManager& blocks);

  void add(Sequence* seq);      // to the back of the queue
  void remove(Sequence* seq);   // finished or aborted: out of the queue or the batch, pages freed
  StepPlan schedule();
  // After the step ran: the scheduled tokens are now in the cache.
  void complete(const StepPlan& plan);

  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  Sequence* front_waiting() const { return waiting_.empty() ? nullptr : waiting_.front(); }
  bool idle() const { return running_.empty() && waiting_.empty(); }
  int64_t preemptions() const { return preemptions_; }

 private:
  void preempt(Sequence* seq);

  SchedulerConfig config_;
  BlockManager& blocks_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // in admission order
  int64_t preemptions_ = 0;
};

}  // namespace braid::engine
