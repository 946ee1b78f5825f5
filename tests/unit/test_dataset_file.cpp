// Dataset files (io/dataset_file.h): round trip in every storage type across part files, commits
// only of sealed parts, --resume continuing a cut shard to the uninterrupted stream (refusing gaps
// and other layouts), SIGKILL at random moments, the top-level file over the parts of two shards
// (refused when a part is missing or replaced), the output lock, and the capture-layer keywords of
// dataset jobs.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>

#include "common/error.h"
#include "engine/dataset_generator.h"
#include "engine/dataset_job.h"
#include "io/dataset_file.h"
#include "io/output_lock.h"
#include "kernels/cpu/dtype.h"
#include "model/synthetic.h"
#include "temp_dir.h"

using namespace specrun;
namespace fs = std::filesystem;

namespace {

using test::TempDir;

DatasetLayout small_layout(StoreType t = StoreType::kBF16) {
  DatasetLayout l;
  l.layers = {1, 2};
  l.num_layers = 3;
  l.hidden_size = 8;
  l.dtype = t;
  l.topk = 3;
  l.topk_dtype = StoreType::kF16;
  l.compression = "gzip";
  l.level = 1;
  l.chunk_rows = 5;
  return l;
}

DatasetHeader header(int shard = 0) {
  DatasetHeader h;
  h.specrun_version = "0.1.0-test";
  h.git_commit = "abc";
  h.world_size = 2;
  h.dp = 2;
  h.shard = shard;
  h.job_toml = "[job]\n";
  h.resolved_json = "{}";
  h.config_hash = "cfg";
  h.prompts_hash = "prompts";
  h.provenance = {"{}", "{}"};
  h.provenance_mismatches = "[]";
  h.target_fingerprint = "fnv1a64:0";
  h.capture_convention = "test";
  return h;
}

// Sequence i of a deterministic stream: 2 + i % 4 prompt tokens, 1 + (3 i) % 7 generated, all
// positions stored (total - 1 rows), values a function of (i, row, element).
DatasetSequence sequence(int i, const DatasetLayout& l) {
  DatasetSequence s;
  s.prompt_index = 10 + i;
  s.prompt_id = "p" + std::to_string(i);
  s.category = i % 2 ? "odd" : "even";
  s.prompt_len = 2 + i % 4;
  s.generated = 1 + (3 * i) % 7;
  s.finish_reason = static_cast<int8_t>(i % 2);
  s.wall_s = 0.25 * i;
  for (int t = 0; t < s.prompt_len + s.generated; ++t) s.tokens.push_back(100 * i + t);
  s.first_row = 0;
  s.n_rows = s.prompt_len + s.generated - 1;
  const int width = static_cast<int>(l.layers.size()) * l.hidden_size;
  for (int r = 0; r < s.n_rows; ++r) {
    for (int e = 0; e < width; ++e)
      s.hidden.push_back(std::sin(0.37f * i + 0.11f * r + 0.013f * e) * (1 + e % 5));
    for (int j = 0; j < l.topk; ++j) {
      s.topk_ids.push_back((7 * i + 3 * r + j) % 50);
      s.topk_probs.push_back(0.5f / (j + 1) + 0.001f * r);
    }
  }
  return s;
}

float stored(StoreType t, float v) {
  if (t == StoreType::kBF16) return bf16_to_f32(f32_to_bf16(v));
  if (t == StoreType::kF16) return f16_to_f32(f32_to_f16(v));
  return v;
}

// The reader's sequences are sequences 0..n-1 exactly (after rounding to the storage types).
void expect_stream(const DatasetReader& r, int n, const DatasetLayout& l) {
  ASSERT_EQ(static_cast<int>(r.sequences().size()), n);
  for (int i = 0; i < n; ++i) {
    const DatasetSequence want = sequence(i, l);
    const DatasetRow& row = r.sequences()[i];
    EXPECT_EQ(row.prompt_index, want.prompt_index);
    EXPECT_EQ(row.prompt_id, want.prompt_id);
    EXPECT_EQ(row.category, want.category);
    EXPECT_EQ(row.prompt_len, want.prompt_len);
    EXPECT_EQ(row.generated, want.generated);
    EXPECT_EQ(row.finish_reason, want.finish_reason);
    EXPECT_EQ(row.n_rows, want.n_rows);
    EXPECT_EQ(r.tokens(row), want.tokens) << "sequence " << i;
    const std::vector<float> h = r.hidden(row);
    ASSERT_EQ(h.size(), want.hidden.size()) << "sequence " << i;
    for (std::size_t e = 0; e < h.size(); ++e)
      ASSERT_EQ(h[e], stored(l.dtype, want.hidden[e])) << "sequence " << i << " value " << e;
    EXPECT_EQ(r.topk_ids(row), want.topk_ids);
    const std::vector<float> p = r.topk_probs(row);
    for (std::size_t e = 0; e < p.size(); ++e)
      ASSERT_EQ(p[e], stored(l.topk_dtype, want.topk_probs[e]));
  }
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

DatasetCommitPolicy every(int64_t sequences) {
  DatasetCommitPolicy p;
  p.seconds = 1e9;
  p.sequences = sequences;
  return p;
}

// The shard's sequences, through a top-level file written over its sealed parts.
void expect_shard(const TempDir& dir, const std::string& shard, int n, const DatasetLayout& l) {
  const std::string top = dir.file("check-index.h5");
  write_dataset_index(top, dataset_shard_parts(shard));
  DatasetReader r(top);
  expect_stream(r, n, l);
}

}  // namespace

TEST(DatasetFile, RoundTripInEveryStorageType) {
  TempDir dir;
  for (StoreType t : {StoreType::kBF16, StoreType::kF16, StoreType::kF32}) {
    const DatasetLayout l = small_layout(t);
    const std::string shard = dir.file(std::string("rt-") + store_type_name(t));
    {
      DatasetShardWriter w = DatasetShardWriter::create(shard, header(), l, every(4), false);
      for (int i = 0; i < 9; ++i) w.add(sequence(i, l));
      w.finish();
      EXPECT_EQ(w.committed_sequences(), 9);
    }
    const std::vector<std::string> parts = dataset_shard_parts(shard);
    ASSERT_EQ(parts.size(), 3u);  // 4 + 4 + 1 sequences
    EXPECT_EQ(parts[1], shard + ".part-00001.h5");
    int first = 0;
    for (const std::string& p : parts) {
      DatasetReader r(p);
      EXPECT_TRUE(r.finished());
      EXPECT_FALSE(r.is_index());
      EXPECT_EQ(r.layout().layers, l.layers);
      EXPECT_EQ(r.header().capture_convention, "test");
      for (const DatasetRow& row : r.sequences()) {
        const DatasetSequence want = sequence(first++, l);
        EXPECT_EQ(row.prompt_id, want.prompt_id);
        EXPECT_EQ(r.tokens(row), want.tokens);
        const std::vector<float> h = r.hidden(row);
        ASSERT_EQ(h.size(), want.hidden.size());
        for (std::size_t e = 0; e < h.size(); ++e) ASSERT_EQ(h[e], stored(t, want.hidden[e]));
      }
    }
    EXPECT_EQ(first, 9);
    expect_shard(dir, shard, 9, l);
  }
}

TEST(DatasetFile, OnlySealedPartsAreCommitted) {
  TempDir dir;
  const DatasetLayout l = small_layout();
  const std::string shard = dir.file("partial");
  {
    DatasetShardWriter w = DatasetShardWriter::create(shard, header(), l, every(3), false);
    for (int i = 0; i < 7; ++i) {
      w.add(sequence(i, l));
      EXPECT_EQ(w.committed_sequences(), (i + 1) / 3 * 3);
    }
    // No finish(): as if the job were killed here.
  }
  EXPECT_EQ(dataset_shard_parts(shard).size(), 2u);
  EXPECT_TRUE(fs::exists(shard + ".part-00002.h5.tmp"));
  expect_shard(dir, shard, 6, l);
  // A graceful stop seals what it has.
  {
    DatasetShardWriter w = DatasetShardWriter::reopen(shard, header(), l, every(3));
    EXPECT_FALSE(fs::exists(shard + ".part-00002.h5.tmp"));
    w.add(sequence(6, l));
    w.commit();
    EXPECT_EQ(w.committed_sequences(), 7);
  }
  expect_shard(dir, shard, 7, l);
}

TEST(DatasetFile, ResumeEndsIdenticalToAnUninterruptedShard) {
  TempDir dir;
  const DatasetLayout l = small_layout();
  for (int stop : {0, 1, 4, 7, 11}) {
    const std::string shard = dir.file("cut" + std::to_string(stop));
    {
      DatasetShardWriter w = DatasetShardWriter::create(shard, header(), l, every(3), false);
      for (int i = 0; i < stop; ++i) w.add(sequence(i, l));
    }
    DatasetShardWriter w = DatasetShardWriter::reopen(shard, header(), l, every(5));
    const int64_t from = w.committed_sequences();
    EXPECT_EQ(from, stop / 3 * 3);
    for (int i = static_cast<int>(from); i < 12; ++i) w.add(sequence(i, l));
    w.finish();
    expect_shard(dir, shard, 12, l);
    // New parts record that they were written by a resumed run.
    const std::vector<std::string> parts = dataset_shard_parts(shard);
    EXPECT_EQ(h5::File::open(parts.back(), h5::File::Access::kReadOnly).attr_int("resumes"), 1);
  }
}

TEST(DatasetFile, ResumeRefusesGapsAndOtherLayouts) {
  TempDir dir;
  const DatasetLayout l = small_layout();
  const std::string shard = dir.file("gap");
  {
    DatasetShardWriter w = DatasetShardWriter::create(shard, header(), l, every(2), false);
    for (int i = 0; i < 6; ++i) w.add(sequence(i, l));
  }
  DatasetLayout other = l;
  other.layers = {1};
  std::string msg = error_of([&] { DatasetShardWriter::reopen(shard, header(), other, every(2)); });
  EXPECT_NE(msg.find("keeps other layers"), std::string::npos) << msg;
  fs::remove(shard + ".part-00001.h5");
  msg = error_of([&] { DatasetShardWriter::reopen(shard, header(), l, every(2)); });
  EXPECT_NE(msg.find(shard + ".part-00001.h5 is missing"), std::string::npos) << msg;
  msg = error_of([&] { DatasetShardWriter::create(shard, header(), l, every(2), false); });
  EXPECT_NE(msg.find("job.overwrite"), std::string::npos) << msg;
  DatasetShardWriter::create(shard, header(), l, every(2), true);  // overwrite: parts deleted
  EXPECT_TRUE(dataset_shard_parts(shard).empty());
}

TEST(DatasetFile, IndexPresentsTheShardsAsOneDataset) {
  TempDir dir;
  const DatasetLayout l = small_layout();
  const std::string top = dir.file("data.h5");
  std::vector<std::string> shards = {dataset_shard_path(top, 0, 2), dataset_shard_path(top, 1, 2)};
  EXPECT_EQ(shards[1], dir.file("data.shard-1-of-2"));
  std::vector<std::string> parts;
  for (int g = 0; g < 2; ++g) {
    DatasetShardWriter w = DatasetShardWriter::create(shards[g], header(g), l, every(2), false);
    for (int i = g; i < 10; i += 2) w.add(sequence(i, l));
    w.finish();
    for (const std::string& p : dataset_shard_parts(shards[g])) parts.push_back(p);
  }
  EXPECT_EQ(parts.size(), 6u);
  write_dataset_index(top, parts);
  DatasetReader r(top);
  EXPECT_TRUE(r.is_index());
  EXPECT_TRUE(r.finished());
  ASSERT_EQ(r.sequences().size(), 10u);
  for (std::size_t k = 0; k < 10; ++k) {
    const int i = k < 5 ? static_cast<int>(2 * k) : static_cast<int>(2 * (k - 5) + 1);
    const DatasetRow& row = r.sequences()[k];
    const DatasetSequence want = sequence(i, l);
    EXPECT_EQ(row.shard, k < 5 ? 0 : 1);
    EXPECT_EQ(row.prompt_index, want.prompt_index);
    EXPECT_EQ(row.prompt_id, want.prompt_id);
    EXPECT_EQ(r.tokens(row), want.tokens);
    const std::vector<float> h = r.hidden(row);
    ASSERT_EQ(h.size(), want.hidden.size());
    for (std::size_t e = 0; e < h.size(); ++e) ASSERT_EQ(h[e], stored(l.dtype, want.hidden[e]));
    EXPECT_EQ(r.topk_ids(row), want.topk_ids);
  }
}

// HDF5 reads the rows of a missing virtual-dataset source as zeros: the reader of a top-level file
// must refuse one whose parts are not all there, or not the parts it indexed (a killed
// job.overwrite run replaces parts of the same names), naming the part.
TEST(DatasetFile, IndexRefusesAMissingOrReplacedPart) {
  TempDir dir;
  const DatasetLayout l = small_layout();
  const std::string top = dir.file("data.h5");
  const std::vector<std::string> shards = {dataset_shard_path(top, 0, 2),
                                           dataset_shard_path(top, 1, 2)};
  auto write_shard = [&](int g, bool overwrite) {
    DatasetShardWriter w = DatasetShardWriter::create(shards[g], header(g), l, every(2), overwrite);
    for (int i = g; i < 10; i += 2) w.add(sequence(i, l));
    w.finish();
  };
  write_shard(0, false);
  write_shard(1, false);
  std::vector<std::string> parts = dataset_shard_parts(shards[0]);
  for (const std::string& p : dataset_shard_parts(shards[1])) parts.push_back(p);
  write_dataset_index(top, parts);
  ASSERT_EQ(DatasetReader(top).sequences().size(), 10u);

  // The same sequences again, as another job would write them: same names and counts, but not
  // the parts the index recorded.
  write_shard(1, true);
  std::string msg = error_of([&] { DatasetReader r(top); });
  EXPECT_NE(msg.find("its part " + parts[3] + " is not the part it indexed"), std::string::npos)
      << msg;
  write_dataset_index(top, parts);  // indexed again: readable
  ASSERT_EQ(DatasetReader(top).sequences().size(), 10u);

  fs::remove(parts[4]);
  msg = error_of([&] { DatasetReader r(top); });
  EXPECT_NE(msg.find("its part " + parts[4] + " is missing"), std::string::npos) << msg;
}

// The lock a dataset job holds on its output (io/output_lock.h): a second holder is refused naming
// the first (pid, host), a lock left by a killed process does not block, and the lock file goes
// when the holder releases it.
TEST(OutputLock, SecondHolderIsRefusedNamingTheFirst) {
  TempDir dir;
  const std::string out = dir.file("data.h5");
  {
    OutputLock first = OutputLock::acquire(out, "job.output");
    EXPECT_TRUE(first.held());
    EXPECT_TRUE(fs::exists(OutputLock::lock_path(out)));
    // flock conflicts between two open descriptions even within one process.
    const std::string msg = error_of([&] { OutputLock::acquire(out, "job.output"); });
    EXPECT_NE(msg.find("job.output " + out + " is in use by another running job (pid " +
                       std::to_string(::getpid()) + " on host "),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find(OutputLock::lock_path(out)), std::string::npos) << msg;
  }
  EXPECT_FALSE(fs::exists(OutputLock::lock_path(out)));  // released and removed
  OutputLock again = OutputLock::acquire(out, "job.output");
  EXPECT_TRUE(again.held());
}

TEST(OutputLock, ALockLeftByAKilledProcessDoesNotBlock) {
  TempDir dir;
  const std::string out = dir.file("data.h5");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    try {
      OutputLock lock = OutputLock::acquire(out, "job.output");
      const char ok = 1;
      (void)!::write(ready[1], &ok, 1);
      ::pause();  // holds it until killed
    } catch (...) {
    }
    ::_exit(1);
  }
  ::close(ready[1]);
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ::close(ready[0]);
  const std::string msg = error_of([&] { OutputLock::acquire(out, "job.output"); });
  EXPECT_NE(msg.find("(pid " + std::to_string(child) + " on host "), std::string::npos) << msg;
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  // The file is still there (a SIGKILL removes nothing), the lock is not.
  EXPECT_TRUE(fs::exists(OutputLock::lock_path(out)));
  OutputLock lock = OutputLock::acquire(out, "job.output");
  EXPECT_TRUE(lock.held());
}

// A child adds sequences as fast as it can and reports every commit through a pipe; the parent
// kills it at a random moment. The sealed parts must hold at least the reported sequences, and a
// resumed writer must end with the uninterrupted stream.
TEST(DatasetFile, SurvivesSigkillAtRandomMoments) {
  TempDir dir;
  DatasetLayout l = small_layout();
  l.chunk_rows = 16;
  const char* seed_env = std::getenv("SPECRUN_KILL_SEED");
  std::mt19937 rng(seed_env ? static_cast<unsigned>(std::atoi(seed_env)) : 20261202u);
  const char* trials_env = std::getenv("SPECRUN_KILL_TRIALS");
  const int trials = trials_env ? std::atoi(trials_env) : 10;
  const int total = 150;
  for (int trial = 0; trial < trials; ++trial) {
    const std::string shard = dir.file("kill" + std::to_string(trial));
    const DatasetCommitPolicy policy = every(1 + trial % 5);
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      try {
        DatasetShardWriter w = DatasetShardWriter::create(shard, header(), l, policy, false);
        for (int i = 0; i < total; ++i) {
          w.add(sequence(i, l));
          const int64_t c = w.committed_sequences();
          if (write(fds[1], &c, sizeof(c)) != sizeof(c)) _exit(3);
        }
        pause();  // wait for the kill
      } catch (...) {
        _exit(2);
      }
      _exit(0);
    }
    close(fds[1]);
    const int64_t wait_for = std::uniform_int_distribution<int64_t>(0, total - 20)(rng);
    int64_t reported = 0, value = 0;
    while (reported < wait_for && read(fds[0], &value, sizeof(value)) == sizeof(value))
      reported = value;
    std::this_thread::sleep_for(
        std::chrono::microseconds(std::uniform_int_distribution<int>(0, 3000)(rng)));
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the writer exited by itself, status " << status;
    while (read(fds[0], &value, sizeof(value)) == sizeof(value)) reported = value;
    close(fds[0]);
    SCOPED_TRACE("trial " + std::to_string(trial) + ", " + std::to_string(reported) +
                 " sequences reported committed");
    int64_t sealed = 0;
    for (const std::string& p : dataset_shard_parts(shard))
      sealed += static_cast<int64_t>(DatasetReader(p).sequences().size());
    ASSERT_GE(sealed, reported);
    DatasetShardWriter w = DatasetShardWriter::reopen(shard, header(), l, policy);
    ASSERT_EQ(w.committed_sequences(), sealed);
    for (int i = static_cast<int>(sealed); i < total; ++i) w.add(sequence(i, l));
    w.finish();
    expect_shard(dir, shard, total, l);
  }
}

TEST(DatasetJob, CaptureLayerKeywords) {
  SyntheticSpec s;
  s.layers = 6;
  ModelConfig c6 = synthetic_config(s, false);
  EXPECT_EQ(dataset_capture_layers("eagle3", c6), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(dataset_capture_layers("eagle3,final", c6), (std::vector<int>{2, 3, 4, 6}));
  EXPECT_EQ(dataset_capture_layers("0, 5,final", c6), (std::vector<int>{0, 5, 6}));
  EXPECT_TRUE(dataset_capture_layers("none", c6).empty());
  s.layers = 4;
  EXPECT_EQ(dataset_capture_layers("eagle3", synthetic_config(s, false)),
            (std::vector<int>{1, 2, 3}));
  s.layers = 32;
  EXPECT_EQ(dataset_capture_layers("eagle3", synthetic_config(s, false)),
            (std::vector<int>{2, 16, 29}));
  EXPECT_NE(error_of([&] { dataset_capture_layers("3,2", c6); }).find("must ascend"),
            std::string::npos);
  EXPECT_NE(error_of([&] { dataset_capture_layers("2,7", c6); }).find("within 0..6"),
            std::string::npos);
  s.layers = 3;
  EXPECT_NE(error_of([&] {
              dataset_capture_layers("eagle3", synthetic_config(s, false));
            }).find("at least 4 layers"),
            std::string::npos);
}

TEST(DatasetJob, StoredRanges) {
  // 5 prompt tokens, 3 generated: rows after reading tokens 0..6 (the last one is never read).
  EXPECT_EQ(stored_range("all", 5, 8).first, 0);
  EXPECT_EQ(stored_range("all", 5, 8).count, 7);
  EXPECT_EQ(stored_range("prompt", 5, 8).count, 4);  // rows predicting prompt tokens 1..4
  EXPECT_EQ(stored_range("generated", 5, 8).first, 4);
  EXPECT_EQ(stored_range("generated", 5, 8).count, 3);  // rows predicting the 3 generated
  EXPECT_EQ(stored_range("prompt", 1, 4).count, 0);
}
