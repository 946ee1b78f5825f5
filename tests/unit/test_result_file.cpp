// Result files: writer -> reader round trip, the same file checked with h5py as a researcher
// would (tests/e2e/check_result_file.py), overwrite refusal, batch validation, resume
// (reopen + truncate of uncommitted rows) and survival of SIGKILL at random moments.
//
// Batches come from make_batch(b), a formula that check_result_file.py reimplements, so the
// Python check compares the file against independently computed values.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <regex>
#include <thread>

#include "analysis/summary.h"
#include "common/error.h"
#include "engine/expert_accounting.h"
#include "io/h5.h"
#include "io/result_file.h"
#include "temp_dir.h"

using namespace specrun;
namespace fs = std::filesystem;

namespace {

constexpr int32_t kRanks = 2;
constexpr int32_t kDraftLen = 4;
constexpr int kSeqsPerBatch = 3;

using test::TempDir;

// Keep in sync with make_batch in tests/e2e/check_result_file.py.
BatchResult make_batch(int64_t b, int32_t draft_len) {
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
ResultHeader make_header() {
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

std::string mode_draft_len_arg() {
  return "baseline:0,speculative:" + std::to_string(kDraftLen);
}

// Runs the h5py checker; returns its exit status (0 = the file matches).
int run_h5py_check(const std::string& path, const std::string& extra) {
  std::string cmd = "/usr/bin/python3 " SPECRUN_SOURCE_DIR "/tests/e2e/check_result_file.py '" +
                    path + "' --modes " + mode_draft_len_arg() + " --ranks " +
                    std::to_string(kRanks) + " " + extra;
  int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void expect_batches_match(const ResultReader& r, const std::string& mode, int32_t draft_len,
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

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error was thrown";
  return "";
}

}  // namespace

TEST(ResultFile, RoundTripThroughReaderAndH5py) {
  TempDir dir;
  std::string path = dir.file("r.h5");
  ResultHeader header = make_header();
  {
    ResultWriter w = ResultWriter::create(path, header, false);
    // Batches interleaved between modes, and not contiguous (a dp group's share).
    for (int64_t b : {0, 2, 5}) {
      w.append_batch(kModeBaseline, make_batch(b, 0));
      w.append_batch(kModeSpeculative, make_batch(b, kDraftLen));
    }
    w.append_batch(kModeSpeculative, make_batch(7, kDraftLen));
    EXPECT_EQ(w.batches_committed(kModeBaseline), 3);
    EXPECT_EQ(w.batches_committed(kModeSpeculative), 4);
    EXPECT_EQ(w.sequences_committed(kModeSpeculative), 4 * kSeqsPerBatch);
    w.finish();
  }
  ResultReader r(path);
  const ResultInfo& info = r.info();
  EXPECT_EQ(info.schema, kResultSchema);
  EXPECT_EQ(info.schema_version, kResultSchemaVersion);
  EXPECT_EQ(info.header.git_commit, header.git_commit);
  EXPECT_TRUE(info.header.git_dirty);
  EXPECT_EQ(info.header.world_size, kRanks);
  EXPECT_EQ(info.header.tp, 2);
  EXPECT_EQ(info.header.dp, 1);
  EXPECT_EQ(info.header.job_toml, header.job_toml);
  EXPECT_EQ(info.header.resolved_json, header.resolved_json);
  EXPECT_EQ(info.header.config_hash, header.config_hash);
  EXPECT_EQ(info.header.prompts_hash, header.prompts_hash);
  EXPECT_EQ(info.header.provenance, header.provenance);
  EXPECT_EQ(info.header.provenance_mismatches, header.provenance_mismatches);
  EXPECT_EQ(info.header.target_weight_bytes, header.target_weight_bytes);
  EXPECT_TRUE(r.experts(kModeSpeculative, kExpertTarget).empty());  // dense batches: none
  std::regex iso(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)");
  EXPECT_TRUE(std::regex_match(info.started, iso)) << info.started;
  EXPECT_TRUE(std::regex_match(info.finished, iso)) << info.finished;
  EXPECT_LE(info.started, info.finished);
  EXPECT_EQ(info.resumes, 0);
  EXPECT_EQ(r.modes(), (std::vector<std::string>{"baseline", "speculative"}));
  EXPECT_EQ(r.draft_len(kModeSpeculative), kDraftLen);
  EXPECT_EQ(r.draft_len(kModeBaseline), 0);
  expect_batches_match(r, kModeBaseline, 0, {0, 2, 5});
  expect_batches_match(r, kModeSpeculative, kDraftLen, {0, 2, 5, 7});

  EXPECT_EQ(run_h5py_check(path, "--exact --finished"), 0);
}

TEST(ResultFile, ModeWithoutBatchesReadsEmpty) {
  TempDir dir;
  std::string path = dir.file("r.h5");
  ResultWriter::create(path, make_header(), false).finish();
  ResultReader r(path);
  EXPECT_TRUE(r.modes().empty());
  EXPECT_FALSE(r.has_mode(kModeSpeculative));
  EXPECT_EQ(r.batches_committed(kModeSpeculative), 0);
  EXPECT_TRUE(r.sequences(kModeBaseline).empty());
  EXPECT_THROW(r.sequences("turbo"), Error);
}

TEST(ResultFile, LargeJobTextFitsInAttributes) {
  // Compact attribute storage is limited to 64 KiB; the 1.8 format's dense storage is not.
  TempDir dir;
  std::string path = dir.file("r.h5");
  ResultHeader h = make_header();
  h.job_toml = "# " + std::string(200 * 1024, 'x') + "\n";
  h.resolved_json = "\"" + std::string(100 * 1024, 'y') + "\"";
  ResultWriter::create(path, h, false).finish();
  ResultReader r(path);
  EXPECT_EQ(r.info().header.job_toml, h.job_toml);
  EXPECT_EQ(r.info().header.resolved_json, h.resolved_json);
}

TEST(ResultFile, RefusesToOverwriteUnlessAsked) {
  TempDir dir;
  std::string path = dir.file("r.h5");
  {
    ResultWriter w = ResultWriter::create(path, make_header(), false);
    w.append_batch(kModeBaseline, make_batch(0, 0));
    w.finish();
  }
  std::string msg = error_of([&] { ResultWriter::create(path, make_header(), false); });
  EXPECT_NE(msg.find("already exists"), std::string::npos) << msg;
  EXPECT_NE(msg.find("job.overwrite"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--resume"), std::string::npos) << msg;
  EXPECT_EQ(ResultReader(path).batches_committed(kModeBaseline), 1);  // untouched
  ResultWriter::create(path, make_header(), true).finish();
  EXPECT_EQ(ResultReader(path).batches_committed(kModeBaseline), 0);  // replaced
}

// job.overwrite replaces a result only when the new one is finished: until then the new file is
// written beside it (result_replacement_path), which --resume continues and finish() renames.
TEST(ResultFile, OverwriteReplacesOnlyWhenTheNewResultIsFinished) {
  TempDir dir;
  const std::string path = dir.file("r.h5");
  const std::string replacement = result_replacement_path(path);
  {
    ResultWriter w = ResultWriter::create(path, make_header(), false);
    for (int64_t b = 0; b < 2; ++b) w.append_batch(kModeBaseline, make_batch(b, 0));
    w.finish();
  }
  {
    ResultWriter w = ResultWriter::create(path, make_header(), true);
    EXPECT_EQ(w.path(), replacement);
    EXPECT_EQ(w.output(), path);
    w.append_batch(kModeBaseline, make_batch(0, 0));
    // Stopped here (a signal, a kill, a full disk): the old result is whole.
  }
  EXPECT_EQ(ResultReader(path).batches_committed(kModeBaseline), 2);
  EXPECT_FALSE(ResultReader(path).info().finished.empty());
  EXPECT_EQ(ResultReader(replacement).batches_committed(kModeBaseline), 1);
  EXPECT_EQ(result_resume_path(path), replacement);
  {
    ResultWriter w = ResultWriter::reopen(path);  // continues the replacement
    EXPECT_EQ(w.path(), replacement);
    EXPECT_EQ(w.batches_committed(kModeBaseline), 1);
    w.append_batch(kModeBaseline, make_batch(1, 0));
    w.append_batch(kModeBaseline, make_batch(2, 0));
    w.finish();
    EXPECT_EQ(w.path(), path);
  }
  EXPECT_FALSE(fs::exists(replacement));
  EXPECT_EQ(result_resume_path(path), path);
  ResultReader r(path);
  EXPECT_EQ(r.batches_committed(kModeBaseline), 3);
  EXPECT_EQ(r.info().resumes, 1);

  // A fresh run removes an earlier run's unfinished replacement; one that is not a specrun
  // result (or a link) is refused, not removed.
  {
    ResultWriter(ResultWriter::create(path, make_header(), true))
        .append_batch(kModeBaseline, make_batch(0, 0));
  }
  ASSERT_TRUE(fs::exists(replacement));
  ResultWriter::create(path, make_header(), true).finish();
  EXPECT_FALSE(fs::exists(replacement));
  EXPECT_EQ(ResultReader(path).batches_committed(kModeBaseline), 0);
  { std::ofstream(replacement) << "notes\n"; }
  std::string msg = error_of([&] { ResultWriter::create(path, make_header(), true); });
  EXPECT_NE(msg.find("is not a specrun output"), std::string::npos) << msg;
  EXPECT_TRUE(fs::exists(replacement));
  fs::remove(replacement);
  fs::create_symlink(dir.file("elsewhere.h5"), replacement);
  msg = error_of([&] { ResultWriter::create(path, make_header(), true); });
  EXPECT_NE(msg.find("symbolic link"), std::string::npos) << msg;
}

// A small tmpfs of the test's own (root only: the test skips visibly elsewhere), unmounted when
// the object goes out of scope.
class SmallFileSystem {
 public:
  SmallFileSystem(const std::string& dir, const char* size) : dir_(dir) {
    fs::create_directories(dir);
    mounted_ =
        ::mount("tmpfs", dir.c_str(), "tmpfs", 0, (std::string("size=") + size).c_str()) == 0;
  }
  ~SmallFileSystem() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  // Writes `name` until the file system is full.
  void fill(const std::string& name) const {
    std::FILE* f = std::fopen((fs::path(dir_) / name).c_str(), "wb");
    ASSERT_NE(f, nullptr);
    std::vector<char> block(4096, 'x');
    while (std::fwrite(block.data(), 1, block.size(), f) == block.size() && std::fflush(f) == 0) {
    }
    std::fclose(f);
  }

 private:
  std::string dir_;
  bool mounted_ = false;
};

// A disk without room for the next batch: refused before anything is written, naming the file
// and the space; the file keeps its committed batches and continues once there is room.
TEST(ResultFile, BatchWithoutRoomIsRefusedBeforeAnythingIsWritten) {
  TempDir dir;
  SmallFileSystem small(dir.file("fs"), "8m");
  if (!small.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here (not root?)";
  const std::string path = dir.file("fs/r.h5");
  {
    ResultWriter w = ResultWriter::create(path, make_header(), false);
    w.append_batch(kModeSpeculative, make_batch(0, kDraftLen));
    small.fill("filler");
    const std::string msg =
        error_of([&] { w.append_batch(kModeSpeculative, make_batch(1, kDraftLen)); });
    EXPECT_NE(msg.find("disk full: cannot write the speculative batch 1 to " + path),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("keeps the batches committed before (1 speculative)"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("--resume"), std::string::npos) << msg;
    // Nothing was written: with room again, the same writer goes on.
    fs::remove(dir.file("fs/filler"));
    w.append_batch(kModeSpeculative, make_batch(1, kDraftLen));
    w.finish();
  }
  ResultReader r(path);
  expect_batches_match(r, kModeSpeculative, kDraftLen, {0, 1});
  EXPECT_TRUE(r.warnings().empty());
  EXPECT_EQ(run_h5py_check(path, "--exact --finished"), 0);
  EXPECT_TRUE(h5::cleanup_at_exit_disabled());
}

// A damaged last commit record is left out, and said: report and compare print the reader's
// warnings (they dropped a batch silently before).
TEST(ResultFile, DamagedCommitRecordIsLeftOutAndSaid) {
  TempDir dir;
  const std::string path = dir.file("r.h5");
  {
    ResultWriter w = ResultWriter::create(path, make_header(), false);
    for (int64_t b = 0; b < 3; ++b) w.append_batch(kModeSpeculative, make_batch(b, kDraftLen));
    w.finish();
  }
  EXPECT_TRUE(ResultReader(path).warnings().empty());
  {
    h5::File f = h5::File::open(path, h5::File::Access::kReadWrite);
    const int64_t before = kSeqsPerBatch;  // the first record's end, smaller than the second's
    f.dataset("speculative/batches/sequences_end").write(2, 1, &before);
    f.close();
  }
  ResultReader r(path);
  EXPECT_EQ(r.batches_committed(kModeSpeculative), 2);
  expect_batches_match(r, kModeSpeculative, kDraftLen, {0, 1});
  const std::vector<std::string> warnings = r.warnings();
  ASSERT_EQ(warnings.size(), 1u);
  const std::string& w = warnings[0];
  EXPECT_NE(w.find(path + ":/speculative: 1 of 3 recorded batches left out"), std::string::npos)
      << w;
  EXPECT_NE(w.find("commit record 3 of"), std::string::npos) << w;
  EXPECT_NE(w.find("does not follow the one before it"), std::string::npos) << w;
}

TEST(ResultFile, InvalidBatchIsRejectedBeforeAnythingIsWritten) {
  TempDir dir;
  std::string path = dir.file("r.h5");
  ResultWriter w = ResultWriter::create(path, make_header(), false);
  w.append_batch(kModeSpeculative, make_batch(0, kDraftLen));

  BatchResult bad = make_batch(1, kDraftLen);
  bad.timings_ms.pop_back();
  EXPECT_NE(error_of([&] { w.append_batch(kModeSpeculative, bad); }).find("timing values"),
            std::string::npos);
  bad = make_batch(1, kDraftLen - 1);
  EXPECT_NE(error_of([&] { w.append_batch(kModeSpeculative, bad); }).find("draft_len is 4"),
            std::string::npos);
  bad = make_batch(1, kDraftLen);
  bad.sequences[1].generated += 1;
  EXPECT_NE(error_of([&] { w.append_batch(kModeSpeculative, bad); }).find("output tokens"),
            std::string::npos);
  bad = make_batch(2, kDraftLen);
  bad.device_ms.pop_back();
  EXPECT_NE(error_of([&] { w.append_batch(kModeSpeculative, bad); }).find("device values"),
            std::string::npos);
  bad = make_batch(2, kDraftLen);
  bad.device_passes.push_back(1);
  EXPECT_NE(error_of([&] { w.append_batch(kModeSpeculative, bad); }).find("device pass counts"),
            std::string::npos);
  bad = make_batch(1, kDraftLen);
  bad.n_ranks = 3;
  EXPECT_NE(error_of([&] { w.append_batch(kModeSpeculative, bad); }).find("world size is 2"),
            std::string::npos);
  bad = make_batch(1, kDraftLen);
  bad.steps[0].batch = 9;
  EXPECT_NE(error_of([&] { w.append_batch(kModeSpeculative, bad); }).find("names batch 9"),
            std::string::npos);
  // Step rows that do not add up to their sequence's row, or an impossible step.
  bad = make_batch(1, kDraftLen);
  bad.steps[2].accepted = (bad.steps[2].accepted + 1) % (kDraftLen + 1);
  EXPECT_NE(error_of([&] { w.append_batch(kModeSpeculative, bad); }).find("step rows sum to"),
            std::string::npos);
  bad = make_batch(1, kDraftLen);
  bad.steps[0].emitted -= 1;
  EXPECT_NE(error_of([&] { w.append_batch(kModeSpeculative, bad); }).find("emitted but"),
            std::string::npos);
  bad = make_batch(1, kDraftLen);
  bad.steps[0].depth = kDraftLen + 1;
  EXPECT_NE(
      error_of([&] { w.append_batch(kModeSpeculative, bad); }).find("accepted <= depth <= drafted"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              w.append_batch(kModeSpeculative, make_batch(0, kDraftLen));
            }).find("already committed"),
            std::string::npos);
  EXPECT_THROW(w.append_batch("turbo", make_batch(1, kDraftLen)), Error);
  // The writer is still usable, and the file holds exactly the good batches.
  w.append_batch(kModeSpeculative, make_batch(1, kDraftLen));
  w.finish();
  ResultReader r(path);
  expect_batches_match(r, kModeSpeculative, kDraftLen, {0, 1});
}

TEST(ResultFile, ReopenContinuesAnUnfinishedFile) {
  TempDir dir;
  std::string path = dir.file("r.h5");
  {
    ResultWriter w = ResultWriter::create(path, make_header(), false);
    for (int64_t b = 0; b < 3; ++b) w.append_batch(kModeSpeculative, make_batch(b, kDraftLen));
    w.append_batch(kModeBaseline, make_batch(0, 0));
    // No finish(): the job "died".
  }
  {
    ResultReader r(path);
    EXPECT_EQ(r.info().finished, "");
    EXPECT_EQ(r.committed_prompt_indices(kModeBaseline), (std::vector<int64_t>{0, 1, 2}));
  }
  {
    ResultWriter w = ResultWriter::reopen(path);
    EXPECT_EQ(w.batches_committed(kModeSpeculative), 3);
    EXPECT_THROW(w.append_batch(kModeSpeculative, make_batch(2, kDraftLen)), Error);
    for (int64_t b = 3; b < 5; ++b) w.append_batch(kModeSpeculative, make_batch(b, kDraftLen));
    w.append_batch(kModeBaseline, make_batch(1, 0));
    w.finish();
  }
  ResultReader r(path);
  EXPECT_EQ(r.info().resumes, 1);
  EXPECT_NE(r.info().finished, "");
  expect_batches_match(r, kModeSpeculative, kDraftLen, {0, 1, 2, 3, 4});
  expect_batches_match(r, kModeBaseline, 0, {0, 1});
  EXPECT_EQ(run_h5py_check(path, "--exact --finished"), 0);
}

TEST(ResultFile, UncommittedRowsAreIgnoredAndTruncatedOnReopen) {
  TempDir dir;
  std::string path = dir.file("r.h5");
  {
    ResultWriter w = ResultWriter::create(path, make_header(), false);
    for (int64_t b = 0; b < 2; ++b) w.append_batch(kModeSpeculative, make_batch(b, kDraftLen));
  }
  // Simulate a kill in the middle of batch 2: some rows appended, no commit record; then a
  // stale commit record whose rows never made it, and a count attribute ahead of the table.
  {
    h5::File f = h5::File::open(path, h5::File::Access::kReadWrite);
    h5::Group seq = f.group("speculative/sequences");
    seq.dataset("prompt_index").append(std::vector<int64_t>{100, 101});
    seq.dataset("output_tokens").append(std::vector<int32_t>{9, 9, 9});
    f.group("speculative/steps").dataset("step").append(std::vector<int32_t>{0});
    f.dataset("speculative/timings").append(std::vector<float>(kRanks * kNumPhases, 1.f));
    h5::Group batches = f.group("speculative/batches");
    batches.dataset("batch").append(std::vector<int64_t>{2});
    batches.dataset("sequences_end").append(std::vector<int64_t>{1000});
    f.group("speculative").set_attr_int64("batches_committed", 7);
    f.close();
  }
  {
    ResultReader r(path);
    EXPECT_EQ(r.batches_committed(kModeSpeculative), 2);
    expect_batches_match(r, kModeSpeculative, kDraftLen, {0, 1});
  }
  EXPECT_EQ(run_h5py_check(path, "--at-least 2"), 0);
  {
    ResultWriter w = ResultWriter::reopen(path);
    EXPECT_EQ(w.batches_committed(kModeSpeculative), 2);
    w.append_batch(kModeSpeculative, make_batch(2, kDraftLen));
    w.finish();
  }
  ResultReader r(path);
  expect_batches_match(r, kModeSpeculative, kDraftLen, {0, 1, 2});
  EXPECT_EQ(run_h5py_check(path, "--exact --finished"), 0);
}

TEST(ResultFile, RejectsFilesThatAreNotResults) {
  TempDir dir;
  std::string path = dir.file("x.h5");
  {
    h5::File f = h5::File::create(path, false);
    f.set_attr_string("schema", "specrun.prompts");
    f.set_attr_int32("schema_version", 1);
  }
  std::string msg = error_of([&] { ResultReader r(path); });
  EXPECT_NE(msg.find("not a specrun result file"), std::string::npos) << msg;
  EXPECT_THROW(ResultWriter::reopen(path), Error);
  {
    h5::File f = h5::File::open(path, h5::File::Access::kReadWrite);
    f.set_attr_string("schema", kResultSchema);
    f.set_attr_int32("schema_version", 9);
  }
  msg = error_of([&] { ResultReader r(path); });
  EXPECT_NE(msg.find("version 9"), std::string::npos) << msg;
}

// A file of result schema 1 (tests/golden, written by specrun 836c867): read with the tree
// columns derived (chains), but not resumed.
TEST(ResultFile, SchemaOneFilesAreReadButNotResumed) {
  TempDir dir;
  const std::string path = dir.file("v1.h5");
  fs::copy_file(SPECRUN_SOURCE_DIR "/tests/golden/result-v1-836c867.h5", path);
  {
    ResultReader r(path);
    EXPECT_EQ(r.info().schema_version, 1);
    const std::vector<StepRecord> steps = r.steps(kModeSpeculative);
    ASSERT_FALSE(steps.empty());
    for (const StepRecord& st : steps) {
      EXPECT_EQ(st.depth, st.drafted);
      EXPECT_EQ(st.bonus, st.drafted > 0 && st.accepted == st.drafted ? 1 : 0);
      EXPECT_EQ(st.emitted, -1);
    }
    EXPECT_TRUE(r.experts(kModeSpeculative, kExpertTarget).empty());  // before schema 7
    EXPECT_TRUE(r.info().header.target_weight_bytes.empty());
  }
  const std::string msg = error_of([&] { ResultWriter::reopen(path); });
  EXPECT_NE(msg.find("has result schema version 1 (written by specrun 0.1.0)"), std::string::npos)
      << msg;
}

// A child process appends batches as fast as it can and reports each commit through a pipe; the
// parent kills it with SIGKILL after a random delay. The file must open (here and in h5py), hold
// at least every batch reported committed, with exactly the expected contents, and accept more
// batches after reopen.
TEST(ResultFile, SurvivesSigkillAtRandomMoments) {
  TempDir dir;
  std::mt19937 rng(20240601);
  std::uniform_int_distribution<int64_t> wait_batches(0, 40);
  std::uniform_int_distribution<int> delay_us(0, 30000);
  // SPECRUN_KILL_TRIALS raises the number of kills for a stress run (default 8).
  const char* trials_env = std::getenv("SPECRUN_KILL_TRIALS");
  const int trials = trials_env ? std::atoi(trials_env) : 8;
  for (int trial = 0; trial < trials; ++trial) {
    std::string path = dir.file("kill" + std::to_string(trial) + ".h5");
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      try {
        ResultWriter w = ResultWriter::create(path, make_header(), false);
        for (int64_t b = 0;; ++b) {
          w.append_batch(kModeSpeculative, make_batch(b, kDraftLen));
          if (b % 2 == 0) w.append_batch(kModeBaseline, make_batch(b, 0));
          int64_t done = b + 1;
          if (write(fds[1], &done, sizeof(done)) != sizeof(done)) _exit(3);
        }
      } catch (...) {
        _exit(2);
      }
    }
    close(fds[1]);
    // Wait until the child has committed a random number of batches, then kill it at a random
    // moment in the batches that follow.
    const int64_t target = wait_batches(rng);
    int64_t reported = 0, value = 0;
    auto started = std::chrono::steady_clock::now();
    while (reported < target && read(fds[0], &value, sizeof(value)) == sizeof(value))
      reported = value;
    double ms_per_batch =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count() /
        std::max<int64_t>(1, reported);
    int delay = delay_us(rng);
    std::this_thread::sleep_for(std::chrono::microseconds(delay));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer exited by itself, status " << status;
    while (read(fds[0], &value, sizeof(value)) == sizeof(value)) reported = value;
    close(fds[0]);
    SCOPED_TRACE("trial " + std::to_string(trial) + ", " + std::to_string(reported) +
                 " batches reported committed");
    if (!fs::exists(path)) {
      EXPECT_EQ(reported, 0);
      continue;
    }
    int64_t committed = 0;
    try {
      ResultReader r(path);
      committed = r.batches_committed(kModeSpeculative);
      EXPECT_GE(committed, reported);
      EXPECT_LE(committed, reported + 1);  // at most the batch in flight
      std::vector<int64_t> ids;
      for (int64_t b = 0; b < committed; ++b) ids.push_back(b);
      if (r.has_mode(kModeSpeculative)) expect_batches_match(r, kModeSpeculative, kDraftLen, ids);
      EXPECT_EQ(r.info().finished, "");
    } catch (const Error& e) {
      // Killed before the header was flushed: acceptable only if nothing was committed.
      EXPECT_EQ(reported, 0) << e.what();
      continue;
    }
    std::printf(
        "trial %d: killed %d us after batch %lld (%.1f ms per batch); %lld reported, "
        "%lld committed in the file\n",
        trial, delay, static_cast<long long>(target), ms_per_batch,
        static_cast<long long>(reported), static_cast<long long>(committed));
    EXPECT_EQ(run_h5py_check(path, "--at-least " + std::to_string(reported)), 0);
    ResultWriter w = ResultWriter::reopen(path);
    w.append_batch(kModeSpeculative, make_batch(committed, kDraftLen));
    w.finish();
    ResultReader r(path);
    EXPECT_EQ(r.batches_committed(kModeSpeculative), committed + 1);
    EXPECT_EQ(run_h5py_check(path, "--exact --finished"), 0);
  }
}

// The state a SIGKILL left in 5 of 22 runs of the test above under load: an uncommitted batch's
// string rows reached the file (their chunk), the global heap collection they name and the
// superblock did not. Resuming must cut those rows without HDF5 freeing what they name.
TEST(ResultFile, ResumesAfterAKillThatLeftStringRowsNamingUnwrittenHeapObjects) {
  TempDir dir;
  const std::string path = dir.file("stale.h5");
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    try {
      {
        ResultWriter w = ResultWriter::create(path, make_header(), false);
        for (int64_t b = 0; b < 2; ++b) w.append_batch(kModeSpeculative, make_batch(b, kDraftLen));
      }
      // The next batch's strings, with no chunk cache: their chunk is written at once, the
      // dataset's new extent and the heap collection stay in HDF5's metadata cache.
      hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
      hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
      if (f < 0 || H5Pset_chunk_cache(dapl, 0, 0, 1.0) < 0) _exit(3);
      hid_t type = H5Tcopy(H5T_C_S1);
      H5Tset_size(type, H5T_VARIABLE);
      const char* rows[kSeqsPerBatch] = {"uncommitted-1", "uncommitted-2", "uncommitted-3"};
      for (const char* table :
           {"/speculative/sequences/prompt_id", "/speculative/sequences/category"}) {
        hid_t d = H5Dopen2(f, table, dapl);
        const hsize_t first = 2 * kSeqsPerBatch, n = kSeqsPerBatch, end = first + n;
        hid_t file_space = H5Dset_extent(d, &end) < 0 ? -1 : H5Dget_space(d);
        hid_t mem_space = H5Screate_simple(1, &n, nullptr);
        if (d < 0 || file_space < 0 ||
            H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &first, nullptr, &n, nullptr) < 0 ||
            H5Dwrite(d, type, mem_space, file_space, H5P_DEFAULT, rows) < 0)
          _exit(4);
      }
      _exit(0);  // no flush, no close: as if killed
    } catch (...) {
      _exit(2);
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  {
    ResultReader r(path);
    EXPECT_EQ(r.batches_committed(kModeSpeculative), 2);
  }
  ResultWriter w = ResultWriter::reopen(path);
  for (int64_t b = 2; b < 4; ++b) w.append_batch(kModeSpeculative, make_batch(b, kDraftLen));
  w.finish();
  ResultReader r(path);
  EXPECT_EQ(r.batches_committed(kModeSpeculative), 4);
  expect_batches_match(r, kModeSpeculative, kDraftLen, {0, 1, 2, 3});
  EXPECT_EQ(run_h5py_check(path, "--exact --finished"), 0);
}

TEST(H5Errors, NameTheFileQuoteHdf5AndKeepStderrQuiet) {
  TempDir dir;
  std::string path = dir.file("no/such/dir/r.h5");
  // ResultWriter checks the directory itself, before HDF5 is asked.
  std::string msg = error_of([&] { ResultWriter::create(path, make_header(), false); });
  EXPECT_NE(msg.find("cannot write result file " + path + ": directory " + dir.file("no/such/dir") +
                     " does not exist (job.output)"),
            std::string::npos)
      << msg;
  testing::internal::CaptureStderr();
  msg = error_of([&] { h5::File::create(path, false); });
  std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_NE(msg.find("cannot create HDF5 file " + path), std::string::npos) << msg;
  EXPECT_NE(msg.find("HDF5 says: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
  EXPECT_EQ(printed, "") << "HDF5 printed its own error stack";

  // A failing read names the dataset and the rows.
  std::string ok = dir.file("r.h5");
  {
    ResultWriter w = ResultWriter::create(ok, make_header(), false);
    w.append_batch(kModeBaseline, make_batch(0, 0));
  }
  h5::File f = h5::File::open(ok, h5::File::Access::kReadOnly);
  h5::Dataset d = f.dataset("baseline/sequences/prompt_index");
  msg = error_of([&] { d.read<int64_t>(2, 5); });
  EXPECT_NE(msg.find("rows [2, 7) are outside " + ok + ":/baseline/sequences/prompt_index"),
            std::string::npos)
      << msg;
  EXPECT_EQ(d.read<int64_t>(0, 3), (std::vector<int64_t>{0, 1, 2}));
}

// A negative output offset (a damaged or hostile file) is an error naming the dataset. Guards
// against the out-of-bounds read it caused (issue 18).
TEST(ResultFile, NegativeOutputOffsetIsRefused) {
  TempDir dir;
  std::string path = dir.file("neg.h5");
  {
    ResultWriter w = ResultWriter::create(path, make_header(), false);
    w.append_batch(kModeBaseline, make_batch(0, 0));
    w.finish();
  }
  {
    h5::File f = h5::File::open(path, h5::File::Access::kReadWrite);
    h5::Dataset d = f.group(kModeBaseline).group("sequences").dataset("output_offsets");
    const int64_t bad = -1000000;
    d.write(1, 1, &bad);
  }
  ResultReader r(path);
  const std::string msg = error_of([&] { r.sequences(kModeBaseline); });
  EXPECT_NE(msg.find("output_offsets is not monotone"), std::string::npos) << msg;
  EXPECT_NE(msg.find("-1000000"), std::string::npos) << msg;
}

namespace {

// The expert records of a batch made by make_batch: the prefill (step -1, every sequence's
// prompt) and one pass per step, routed by a formula; `experts` experts in `layers` MoE layers
// (ids 1, 3, ...), top-2 over 2 EP ranks. The draft model (draft = true) has 4 experts, top-1.
ExpertRecords make_experts(const BatchResult& b, bool draft) {
  ExpertRecords rec;
  ExpertRouting r;
  r.top_k = draft ? 1 : 2;
  r.n_experts = draft ? 4 : 8;
  r.ep = draft ? 1 : 2;
  r.expert_bytes = draft ? 300 : 4096;
  r.layers = draft ? std::vector<int>{0} : std::vector<int>{1, 3};
  PassExpertCounts counts;
  std::vector<std::int64_t> prompts;
  for (const SequenceRecord& s : b.sequences) prompts.push_back(s.prompt_index);
  for (int32_t step = -1; step < b.n_steps; ++step) {
    std::vector<int> per_seq;
    std::vector<std::uint8_t> kept;
    for (const SequenceRecord& s : b.sequences) {
      const int n = step < 0 ? s.prompt_len : 1 + (draft ? 0 : kDraftLen);
      per_seq.push_back(n);
      for (int i = 0; i < n; ++i) kept.push_back(step < 0 || i <= (step + 1) % 3 ? 1 : 0);
    }
    r.n_tokens = 0;
    for (int n : per_seq) r.n_tokens += n;
    r.experts.clear();
    for (std::size_t l = 0; l < r.layers.size(); ++l)
      for (int t = 0; t < r.n_tokens; ++t)
        for (int j = 0; j < r.top_k; ++j)
          r.experts.push_back(static_cast<int>(
              (b.batch * 3 + t * 5 + static_cast<int>(l) + j + std::max(step, 0)) % r.n_experts));
    count_experts(r, PassTokens{per_seq, kept}, counts);
    append_pass(rec, r, counts, b.batch, step,
                step < 0 ? (draft ? kPassDraftPrefill : kPassPrefill)
                         : (draft ? kPassPropose : kPassVerify),
                prompts);
  }
  return rec;
}

BatchResult make_expert_batch(int64_t b) {
  BatchResult r = make_batch(b, kDraftLen);
  r.target_experts = make_experts(r, false);
  r.draft_experts = make_experts(r, true);
  return r;
}

}  // namespace

// The expert accounting round trip: records in, the same records out (committed batches only),
// the file's tables as documented (h5py), dense modes without them.
TEST(ResultFile, ExpertRecordsRoundTrip) {
  TempDir dir;
  const std::string path = dir.file("moe.h5");
  ExpertRecords want_target, want_draft;
  {
    ResultWriter w = ResultWriter::create(path, make_header(), false);
    for (int64_t b : {0, 3, 4}) {
      const BatchResult batch = make_expert_batch(b);
      ASSERT_EQ(expert_records_problem(batch.target_experts), "");
      want_target.append(batch.target_experts);
      want_draft.append(batch.draft_experts);
      w.append_batch(kModeSpeculative, batch);
      w.append_batch(kModeBaseline, make_batch(b, 0));
    }
    w.finish();
  }
  ResultReader r(path);
  EXPECT_EQ(r.experts(kModeSpeculative, kExpertTarget), want_target);
  EXPECT_EQ(r.experts(kModeSpeculative, kExpertDraft), want_draft);
  EXPECT_TRUE(r.experts(kModeBaseline, kExpertTarget).empty());
  EXPECT_EQ(want_target.passes(), 3 + (2 + 0 % 3) + (2 + 3 % 3) + (2 + 4 % 3));
  // As a researcher reads it.
  const std::string py = R"PY(
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    assert "experts" not in f["baseline"]
    nb = int(f["speculative"].attrs["batches_committed"])
    for model, k, E, L, ep in (("target", 2, 8, 2, 2), ("draft", 1, 4, 1, 1)):
        g = f["speculative/experts/" + model]
        assert int(g.attrs["top_k"]) == k and int(g.attrs["n_experts"]) == E, model
        assert int(g.attrs["ep"]) == ep, model
        assert list(g["layers"][:]) == ([1, 3] if model == "target" else [0]), model
        kinds = list(g.attrs["kinds"])
        assert kinds[:3] == ["prefill", "decode", "verify"], kinds
        P = int(g["commits/passes_end"][nb - 1])
        R = int(g["commits/rows_end"][nb - 1])
        p = {c: g["passes/" + c][:P] for c in g["passes"]}
        assert p["unique"].shape == (P, L) and p["rank_pairs"].shape == (P, L, ep)
        assert (p["bytes"] == p["unique"] * int(g.attrs["expert_bytes"])).all()
        assert (p["pairs"] == p["tokens"][:, None] * k).all()
        assert (p["rank_pairs"].sum(axis=2) == p["pairs"]).all()
        assert (p["unique"] <= np.minimum(E, p["pairs"])).all()
        assert (p["kept_unique"] <= p["unique"]).all()
        assert (p["kept_tokens"] <= p["tokens"]).all()
        s = {c: g["sequences/" + c][:R] for c in g["sequences"]}
        assert s["unique"].shape == (R, L) and p["sequences"].sum() == R
        assert np.array_equal(np.add.reduceat(s["tokens"], np.r_[0, np.cumsum(p["sequences"])[:-1]]),
                              p["tokens"])
        assert g["passes/unique"].attrs["description"], model
        assert set(kinds[i] for i in p["kind"]) == (
            {"prefill", "verify"} if model == "target" else {"draft_prefill", "propose"})
    # docs/file-formats.md's example: expert MB per emitted token of the step passes.
    mode = "speculative"
    g, e = f[mode], f[mode]["experts/target"]
    nb = min([int(g.attrs["batches_committed"])] + [len(d) for d in g["batches"].values()]
             + [len(d) for d in e["commits"].values()])
    P = int(e["commits/passes_end"][nb - 1]) if nb else 0
    kinds = list(e.attrs["kinds"])
    kind = np.array(kinds)[e["passes/kind"][:P]]
    unique, nbytes = e["passes/unique"][:P], e["passes/bytes"][:P]
    step = (kind == "decode") | (kind == "verify")
    ns = int(g["batches/steps_end"][nb - 1]) if nb else 0
    key = lambda b, s: (int(b), int(s))
    emitted = {}
    for b, s, n in zip(g["steps/batch"][:ns], g["steps/step"][:ns], g["steps/emitted"][:ns]):
        emitted[key(b, s)] = emitted.get(key(b, s), 0) + int(n)
    toks = sum(emitted[key(b, s)] for b, s in zip(e["passes/batch"][:P][step],
                                                 e["passes/step"][:P][step]))
    got = (unique[step].mean(), nbytes[step].sum() / 1e6 / toks)
    want = (float(sys.argv[2]), float(sys.argv[3]))
    assert abs(got[0] - want[0]) < 1e-9 and abs(got[1] - want[1]) < 1e-9, (got, want)
)PY";
  const std::string script = dir.file("check.py");
  std::ofstream(script) << py;
  const ExpertSummary summary = summarize_experts(want_target, r.steps(kModeSpeculative), 0);
  const ExpertPassSummary* verify = summary.kind("verify");
  ASSERT_NE(verify, nullptr);
  char figures[128];
  std::snprintf(figures, sizeof figures, " %.17g %.17g", verify->unique_per_layer,
                verify->mb_per_emitted_token);
  EXPECT_EQ(std::system(("/usr/bin/python3 " + script + " " + path + figures).c_str()), 0);
}

// A kill between an expert table's rows and the batch's commit: the reader reads up to the last
// commit, and --resume cuts the rows off before it continues.
TEST(ResultFile, UncommittedExpertRowsAreIgnoredAndTruncatedOnReopen) {
  TempDir dir;
  const std::string path = dir.file("moe.h5");
  ExpertRecords want;
  {
    ResultWriter w = ResultWriter::create(path, make_header(), false);
    for (int64_t b = 0; b < 2; ++b) {
      const BatchResult batch = make_expert_batch(b);
      want.append(batch.target_experts);
      w.append_batch(kModeSpeculative, batch);
    }
  }
  {
    h5::File f = h5::File::open(path, h5::File::Access::kReadWrite);
    h5::Group g = f.group("speculative/experts/target");
    g.group("passes").dataset("unique").append(std::vector<int32_t>{1, 1});
    g.group("passes").dataset("batch").append(std::vector<int64_t>{2});
    g.group("sequences").dataset("tokens").append(std::vector<int32_t>{4, 4});
    // A commit row of the expert table with no batch commit record after it.
    g.group("commits").dataset("passes_end").append(std::vector<int64_t>{1000});
    f.close();
  }
  {
    ResultReader r(path);
    EXPECT_EQ(r.experts(kModeSpeculative, kExpertTarget), want);
  }
  {
    ResultWriter w = ResultWriter::reopen(path);
    const BatchResult batch = make_expert_batch(2);
    want.append(batch.target_experts);
    w.append_batch(kModeSpeculative, batch);
    w.finish();
  }
  ResultReader r(path);
  EXPECT_EQ(r.experts(kModeSpeculative, kExpertTarget), want);
  EXPECT_EQ(r.committed_batches(kModeSpeculative), (std::vector<int64_t>{0, 1, 2}));
}

// A batch whose expert records break an identity, change shape or start late is refused before
// anything is written; a file whose stored counts break one is refused naming the group.
TEST(ResultFile, InconsistentExpertRecordsAreRefused) {
  TempDir dir;
  const std::string path = dir.file("moe.h5");
  {
    ResultWriter w = ResultWriter::create(path, make_header(), false);
    w.append_batch(kModeSpeculative, make_expert_batch(0));
    BatchResult bad = make_expert_batch(1);
    bad.target_experts.pairs[0] += 1;
    EXPECT_NE(error_of([&] { w.append_batch(kModeSpeculative, bad); }).find("pairs"),
              std::string::npos);
    bad = make_expert_batch(1);
    bad.target_experts.batch[0] = 7;
    EXPECT_THROW(w.append_batch(kModeSpeculative, bad), Error);
    bad = make_expert_batch(1);
    bad.draft_experts.expert_bytes = 1;
    EXPECT_NE(error_of([&] { w.append_batch(kModeSpeculative, bad); }).find("another shape"),
              std::string::npos);
    w.append_batch(kModeBaseline, make_batch(0, 0));
    bad = make_batch(1, 0);
    bad.target_experts = make_experts(bad, false);
    EXPECT_NE(error_of([&] { w.append_batch(kModeBaseline, bad); }).find("earlier batches"),
              std::string::npos);
    w.append_batch(kModeSpeculative, make_expert_batch(1));
    w.finish();
  }
  EXPECT_EQ(ResultReader(path).committed_batches(kModeSpeculative), (std::vector<int64_t>{0, 1}));
  {
    h5::File f = h5::File::open(path, h5::File::Access::kReadWrite);
    f.group("speculative/experts/target/passes")
        .dataset("bytes")
        .write(0, 1, std::vector<int64_t>{1, 1}.data());
    f.close();
  }
  const std::string msg =
      error_of([&] { ResultReader(path).experts(kModeSpeculative, kExpertTarget); });
  EXPECT_NE(msg.find("speculative/experts/target/passes/bytes row 0 is not unique x expert_bytes"),
            std::string::npos)
      << msg;
}

// A schema 6 file (as the previous specrun wrote it: no expert tables, no weight memory) reads
// with empty expert records; --resume refuses it by its version.
TEST(ResultFile, SchemaSixFilesReadWithoutExperts) {
  TempDir dir;
  const std::string path = dir.file("v6.h5");
  {
    ResultHeader h = make_header();
    h.target_weight_bytes.clear();
    ResultWriter w = ResultWriter::create(path, h, false);
    w.append_batch(kModeSpeculative, make_batch(0, kDraftLen));
    w.finish();
  }
  {
    h5::File f = h5::File::open(path, h5::File::Access::kReadWrite);
    f.set_attr_int32("schema_version", 6);
    f.close();
  }
  {
    ResultReader r(path);
    EXPECT_EQ(r.info().schema_version, 6);
    EXPECT_TRUE(r.experts(kModeSpeculative, kExpertTarget).empty());
    EXPECT_TRUE(r.info().header.target_weight_bytes.empty());
    expect_batches_match(r, kModeSpeculative, kDraftLen, {0});
  }
  const std::string msg = error_of([&] { ResultWriter::reopen(path); });
  EXPECT_NE(msg.find("has result schema version 6"), std::string::npos) << msg;
}
