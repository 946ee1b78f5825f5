// Result files: writer -> reader round trip, the same file checked with h5py as a researcher
// would (tests/e2e/check_result_file.py), overwrite refusal, batch validation, schema checks.
// Resume and kill survival: test_result_resume.cpp; expert records: test_result_experts.cpp.

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
#include "result_file_fixtures.h"
#include "temp_dir.h"

using namespace specrun;
using namespace specrun::result_test;
namespace fs = std::filesystem;

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
