// The workload lines of `report` (analysis/workload.h): the unique n-gram share of outputs
// (loops flagged as degenerate, short outputs not judged) and the prompt-length buckets with
// the speculative tau of each, on hand-made records.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "analysis/workload.h"

using namespace specrun;

namespace {

SequenceRecord seq(const std::string& id, int prompt_len, std::vector<std::int32_t> out,
                   int verify_steps) {
  SequenceRecord s;
  s.prompt_id = id;
  s.prompt_len = prompt_len;
  s.generated = static_cast<std::int32_t>(out.size());
  s.verify_steps = verify_steps;
  s.output_tokens = std::move(out);
  return s;
}

std::vector<std::int32_t> loop(int period, int n) {
  std::vector<std::int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(100 + i % period);
  return v;
}

std::vector<std::int32_t> distinct(int n) {
  std::vector<std::int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(i);
  return v;
}

TEST(Workload, UniqueNgramShare) {
  EXPECT_DOUBLE_EQ(unique_ngram_share(distinct(30)), 1.0);
  // A loop of period 3 over 30 tokens: 3 distinct 4-grams among 27.
  EXPECT_DOUBLE_EQ(unique_ngram_share(loop(3, 30)), 3.0 / 27.0);
  EXPECT_DOUBLE_EQ(unique_ngram_share({1, 2, 3}), 1.0);  // fewer tokens than n
  EXPECT_DOUBLE_EQ(unique_ngram_share(loop(1, 10), 2), 1.0 / 9.0);
}

TEST(Workload, DegenerateOutputsAndPromptLengthBuckets) {
  ModeData spec;
  spec.mode = "speculative";
  spec.sequences = {seq("loop", 10, loop(3, 32), 8),      // 31 emitted by 8 steps
                    seq("fine", 20, distinct(32), 16),    // 31 by 16
                    seq("short", 600, loop(1, 8), 2),     // too short to judge
                    seq("long", 3000, distinct(17), 4)};  // 16 by 4
  ModeData base = spec;
  base.mode = "baseline";
  base.sequences[1].output_tokens = loop(2, 32);  // judged only when there is no speculative mode
  const WorkloadSummary w = summarize_workload({base, spec});
  EXPECT_EQ(w.mode, "speculative");
  EXPECT_EQ(w.judged, 3);
  EXPECT_EQ(w.degenerate, 1);
  EXPECT_EQ(w.degenerate_ids, std::vector<std::string>{"loop"});
  ASSERT_EQ(w.buckets.size(), 3u);
  EXPECT_EQ(w.buckets[0].name, "<128");
  EXPECT_EQ(w.buckets[0].prompts, 2);
  EXPECT_DOUBLE_EQ(w.buckets[0].tau, 62.0 / 24.0);
  EXPECT_EQ(w.buckets[1].name, "512-2047");
  EXPECT_DOUBLE_EQ(w.buckets[1].tau, 7.0 / 2.0);
  EXPECT_EQ(w.buckets[2].name, "2048-8191");
  EXPECT_DOUBLE_EQ(w.buckets[2].tau, 4.0);
  const std::string text = format_workload(w);
  EXPECT_NE(text.find("NOTE: 1 of 3 outputs repeat themselves"), std::string::npos) << text;
  EXPECT_NE(text.find("e.g. loop)"), std::string::npos) << text;
  const nlohmann::json j = workload_to_json(w);
  EXPECT_EQ(j["degenerate"]["degenerate"], 1);
  EXPECT_EQ(j["prompt_length_buckets"][0]["prompts"], 2);

  // Baseline only: its outputs are judged, no tau.
  const WorkloadSummary b = summarize_workload({base});
  EXPECT_EQ(b.mode, "baseline");
  EXPECT_EQ(b.degenerate, 2);
  EXPECT_DOUBLE_EQ(b.buckets[0].tau, 0.0);
}

}  // namespace
