// Scheduler: decode tokens before prompt chunks, the token budget and chunked prefill, the
// sequence bound, and preemption of the newest sequence when pages run out.
#include <memory>

#include "engine/scheduler.h"
#include "test_util.h"

namespace braid::test {
namespace {

struct Fixture {
  Fixture(int pages, int page_size, int max_seqs, int budget)
      : blocks(pages, page_size, true), sched({max_seqs, budget}, blocks) {}
  engine::Sequence* add(int prompt_len, int32_t first = 1) {
    auto s = std::make_unique<engine::Sequence>();
    s->id = seqs.size() + 1;
    for (int i = 0; i < prompt_len; ++i) s->tokens.push_back(first + i);
    s->prompt_len = prompt_len;
    sched.add(s.get());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  }
  // Runs a step: marks the tokens computed and gives every sampling sequence a new token.
  engine::StepPlan step() {
    engine::StepPlan plan = sched.schedule();
    sched.complete(plan);
    for (const auto& s : plan.seqs)
      if (s.seq->num_computed == s.seq->num_tokens()) s.seq->tokens.push_back(9);
    return plan;
  }
  engine::BlockManager blocks;
  engine::Scheduler sched;
  std::vector<std::unique_ptr<engine::Sequence>> seqs;
};

TEST(Scheduler, LongPromptIsChunkedAndDecodesGoFirst) {
  Fixture f(64, 4, 8, /*budget=*/8);
  engine::Sequence* a = f.add(3);
  auto p = f.step();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].num_tokens, 3);
  EXPECT_TRUE(p.seqs[0].samples());

  engine::Sequence* b = f.add(20);
  p = f.step();  // a decodes (1), b takes the remaining budget (7)
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].seq, a);
  EXPECT_EQ(p.seqs[0].num_tokens, 1);
  EXPECT_EQ(p.seqs[1].seq, b);
  EXPECT_EQ(p.seqs[1].num_tokens, 7);
  EXPECT_FALSE(p.seqs[1].samples());
  EXPECT_EQ(p.num_tokens, 8);

  p = f.step();
  EXPECT_EQ(p.seqs[1].num_tokens, 7);
  p = f.step();
  EXPECT_EQ(p.seqs[1].num_tokens, 6);
  EXPECT_TRUE(p.seqs[1].samples());
  p = f.step();
  EXPECT_TRUE(p.decode_only());
}

TEST(Scheduler, AtMostMaxNumSeqsRun) {
  Fixture f(64, 4, /*max_seqs=*/2, 100);
  f.add(2), f.add(2), f.add(2);
  auto p = f.step();
  EXPECT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(f.sched.num_waiting(), 1);
  f.sched.remove(f.seqs[0].get());
  p = f.step();
  EXPECT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(f.sched.num_waiting(), 0);
}

TEST(Scheduler, NewestSequenceIsPreemptedAndRecomputedLater) {
  // 6 usable pages of 2 tokens: two sequences of 4-token prompts fill 4 pages; as they grow the
  // pool runs dry and the newer one gives its pages back.
  Fixture f(7, 2, 8, 64);
  engine::Sequence* a = f.add(4, 10);
  engine::Sequence* b = f.add(4, 50);
  int preempted_b = 0;
  for (int i = 0; i < 6; ++i) {
    const auto p = f.step();
    for (engine::Sequence* s : p.preempted) {
      EXPECT_EQ(s, b) << "the newest sequence goes first";
      ++preempted_b;
    }
  }
  EXPECT_GE(preempted_b, 1);
  EXPECT_GE(b->preemptions, 1);
  // a keeps running; once it is gone, b is recomputed and goes on with all its tokens.
  const int b_tokens = b->num_tokens();
  f.sched.remove(a);
  auto p = f.step();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].seq, b);
  EXPECT_EQ(b->num_computed, b_tokens) << "its whole history is in the cache again";
  EXPECT_GT(b->num_tokens(), b_tokens) << "and it sampled its next token";
  f.sched.remove(b);
  EXPECT_EQ(f.blocks.used_pages(), 0);
}

}  // namespace
}  // namespace braid::test
