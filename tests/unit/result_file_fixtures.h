// Shared by the result-file tests (test_result_file.cpp, test_result_resume.cpp,
// test_result_experts.cpp): make_batch(b), a formula that tests/e2e/check_result_file.py
// reimplements so that the Python check compares a file against independently computed values;
// the header every test writes; the h5py check; the reader-side check of a batch.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "analysis/summary.h"
#include "common/error.h"
#include "io/result_file.h"
#include "temp_dir.h"

namespace specrun::result_test {

inline constexpr int32_t kRanks = 2;
inline constexpr int32_t kDraftLen = 4;
inline constexpr int kSeqsPerBatch = 3;

using test::TempDir;

// Keep in sync with make_batch in tests/e2e/check_result_file.py.
inline BatchResult make_batch(int64_t b, int32_t draft_len) {
  BatchResult r;
  r.batch = b;
  r.n_ranks = kRanks;
  r.n_steps = static_cast<int32_t>(2 + b % 3);
  // Every sequence takes part in every step; its row is the sum of its step rows (the writer
  // checks that), the first token coming from the prefill. Odd prompts end at EOS, which cuts
  // their last step to one emitted token.
  for (int j = 0; j < kSeqsPerBatch; ++j) {
    int64_t idx = b * kSeqsPerBatch + j;
    SequenceRecord q;
    q.prompt_index = idx;
    q.prompt_id = "p" + std::to_string(idx);
    q.category = j % 2 == 0 ? "code" : "chat";
    q.prompt_len = 5 + j;
    q.generated = 1;
    q.finish_reason = static_cast<int8_t>(idx % 2);
    for (int32_t s = 0; s < r.n_steps; ++s) {
      StepRecord st{b, s, idx, kSeqsPerBatch, draft_len, (s + j) % (draft_len + 1), draft_len};
      st.bonus = draft_len > 0 && st.accepted == draft_len ? 1 : 0;
      st.emitted = q.finish_reason == 1 && s == r.n_steps - 1 ? 1 : st.accepted + 1;
      r.steps.push_back(st);
      q.verify_steps += 1;
      q.drafted += st.drafted;
      q.accepted += st.accepted;
      q.generated += st.emitted;
    }
    for (int32_t t = 0; t < q.generated; ++t)
      q.output_tokens.push_back(static_cast<int32_t>((idx * 7 + t) % 1000));
    q.wall_s = 0.5 + static_cast<double>(idx);
    r.sequences.push_back(q);
  }
  // Step rows in step order, sequences interleaved.
  std::stable_sort(r.steps.begin(), r.steps.end(),
                   [](const StepRecord& a, const StepRecord& c) { return a.step < c.step; });
  for (int32_t s = 0; s < r.n_steps; ++s)
    for (int32_t rank = 0; rank < kRanks; ++rank)
      for (int p = 0; p < kNumPhases; ++p)
        r.timings_ms.push_back(static_cast<float>(b * 1000 + s * 100 + rank * 10 + p));
  // Device rows for even batches only (a batch without them is stored as NaN).
  if (b % 2 == 0)
    for (int32_t s = 0; s < r.n_steps; ++s)
      for (int32_t rank = 0; rank < kRanks; ++rank)
        for (int c = 0; c < kNumDeviceColumns; ++c)
          r.device_ms.push_back(static_cast<float>(b * 1000 + s * 100 + rank * 10 + c) + 0.5f);
  // Pass rows with the device rows (counts; schema 6).
  if (b % 2 == 0)
    for (int32_t s = 0; s < r.n_steps; ++s)
      for (int32_t rank = 0; rank < kRanks; ++rank)
        for (int c = 0; c < kNumPassColumns; ++c)
          r.device_passes.push_back(static_cast<float>((b + s + rank + c) % 7));
  for (int32_t i = 0; i < draft_len; ++i) r.accepted_per_position.push_back(b + i);
  return r;
}

// Keep in sync with HEADER in tests/e2e/check_result_file.py.
inline ResultHeader make_header() {
  ResultHeader h;
  h.specrun_version = "0.1.0-test";
  h.git_commit = "0123456789abcdef";
  h.git_dirty = true;
  h.world_size = kRanks;
  h.tp = 2;
  h.dp = 1;
  h.job_toml = "[job]\nname = \"unit\"\n";
  h.resolved_json = "{\"job\": {\"name\": \"unit\"}}";
  h.config_hash = "cfg-hash-1";
  h.prompts_path = "prompts.h5";
  h.prompts_hash = "fnv1a64:0000000000000001";
  h.provenance = {"{\"rank\": 0}", "{\"rank\": 1}"};
  h.provenance_mismatches = "[{\"name\": \"NCCL_PROTO\"}]";
  h.target_weight_bytes = {1000, 1001};
  return h;
}

inline std::string mode_draft_len_arg() {
  return "baseline:0,speculative:" + std::to_string(kDraftLen);
}

// Runs the h5py checker; returns its exit status (0 = the file matches).
inline int run_h5py_check(const std::string& path, const std::string& extra) {
  std::string cmd = "/usr/bin/python3 " SPECRUN_SOURCE_DIR "/tests/e2e/check_result_file.py '" +
                    path + "' --modes " + mode_draft_len_arg() + " --ranks " +
                    std::to_string(kRanks) + " " + extra;
  int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline void expect_batches_match(const ResultReader& r, const std::string& mode, int32_t draft_len,
                                 const std::vector<int64_t>& batch_ids) {
  ASSERT_EQ(r.committed_batches(mode), batch_ids);
  std::vector<SequenceRecord> seqs = r.sequences(mode);
  std::vector<StepRecord> steps = r.steps(mode);
  TimingTable timings = r.timings(mode);
  TimingTable device = r.device_timings(mode);
  TimingTable passes = r.device_passes(mode);
  EXPECT_EQ(device.rows, timings.rows);
  EXPECT_EQ(passes.rows, timings.rows);
  EXPECT_EQ(passes.phases, std::vector<std::string>(kPassColumns.begin(), kPassColumns.end()));
  EXPECT_EQ(device.phases, std::vector<std::string>(kDeviceColumns.begin(), kDeviceColumns.end()));
  size_t si = 0, ti = 0;
  int64_t row = 0;
  std::vector<int64_t> apos(static_cast<size_t>(draft_len), 0);
  for (int64_t b : batch_ids) {
    BatchResult want = make_batch(b, draft_len);
    for (const SequenceRecord& w : want.sequences) {
      ASSERT_LT(si, seqs.size());
      const SequenceRecord& g = seqs[si++];
      EXPECT_EQ(g.prompt_index, w.prompt_index);
      EXPECT_EQ(g.prompt_id, w.prompt_id);
      EXPECT_EQ(g.category, w.category);
      EXPECT_EQ(g.prompt_len, w.prompt_len);
      EXPECT_EQ(g.generated, w.generated);
      EXPECT_EQ(g.verify_steps, w.verify_steps);
      EXPECT_EQ(g.drafted, w.drafted);
      EXPECT_EQ(g.accepted, w.accepted);
      EXPECT_EQ(g.finish_reason, w.finish_reason);
      EXPECT_EQ(g.wall_s, w.wall_s);
      EXPECT_EQ(g.output_tokens, w.output_tokens) << "prompt " << w.prompt_index;
    }
    for (const StepRecord& w : want.steps) {
      ASSERT_LT(ti, steps.size());
      const StepRecord& g = steps[ti++];
      EXPECT_EQ(g.batch, w.batch);
      EXPECT_EQ(g.step, w.step);
      EXPECT_EQ(g.prompt_index, w.prompt_index);
      EXPECT_EQ(g.active, w.active);
      EXPECT_EQ(g.drafted, w.drafted);
      EXPECT_EQ(g.accepted, w.accepted);
      EXPECT_EQ(g.depth, w.depth);
      EXPECT_EQ(g.bonus, w.bonus);
      EXPECT_EQ(g.emitted, w.emitted);
    }
    for (int32_t s = 0; s < want.n_steps; ++s, ++row) {
      ASSERT_LT(row, timings.rows);
      EXPECT_EQ(timings.batch[static_cast<size_t>(row)], b);
      for (int32_t rank = 0; rank < kRanks; ++rank)
        for (int p = 0; p < kNumPhases; ++p)
          EXPECT_EQ(timings.at(row, rank, p),
                    static_cast<float>(b * 1000 + s * 100 + rank * 10 + p));
      for (int32_t rank = 0; rank < kRanks; ++rank)
        for (int c = 0; c < kNumDeviceColumns; ++c) {
          const float got = device.at(row, rank, c);
          if (b % 2 == 0)
            EXPECT_EQ(got, static_cast<float>(b * 1000 + s * 100 + rank * 10 + c) + 0.5f);
          else
            EXPECT_TRUE(std::isnan(got)) << "batch " << b << " has no device rows";
        }
      for (int32_t rank = 0; rank < kRanks; ++rank)
        for (int c = 0; c < kNumPassColumns; ++c) {
          const float got = passes.at(row, rank, c);
          if (b % 2 == 0)
            EXPECT_EQ(got, static_cast<float>((b + s + rank + c) % 7));
          else
            EXPECT_TRUE(std::isnan(got)) << "batch " << b << " has no pass rows";
        }
    }
    for (int32_t i = 0; i < draft_len; ++i) apos[static_cast<size_t>(i)] += b + i;
  }
  EXPECT_EQ(si, seqs.size());
  EXPECT_EQ(ti, steps.size());
  EXPECT_EQ(row, timings.rows);
  EXPECT_EQ(timings.ranks, kRanks);
  EXPECT_EQ(timings.phases, std::vector<std::string>(kPhaseNames.begin(), kPhaseNames.end()));
  EXPECT_EQ(r.accepted_per_position(mode), apos);
  std::vector<int64_t> prompts;
  for (const SequenceRecord& s : seqs) prompts.push_back(s.prompt_index);
  EXPECT_EQ(r.committed_prompt_indices(mode), prompts);
}

inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error was thrown";
  return "";
}

}  // namespace specrun::result_test
