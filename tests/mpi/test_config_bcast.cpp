// load_job_on_all_ranks under mpirun: only rank 0 reads the job file; every rank ends with the
// same configuration (rank 0's --set overrides included); a bad job file or --set gives rank 0's
// error on every rank instead of a hang; check_config_agreement names the ranks that differ.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "config/job_broadcast.h"
#include "config/job_config.h"
#include "dist/mpi_comm.h"

namespace specrun {
namespace {

const char* kJob = R"([job]
name = "bcast"
[target]
path = "models/target"
[draft]
path = "models/draft"
[data]
prompts = "prompts.h5"
[decode]
draft_len = 3
temperature = 0.25
)";

// A job file written by rank 0 only, in a fresh directory; the other ranks get a path that
// does not exist on purpose, so any rank but 0 reading the file would fail.
class JobFile {
 public:
  JobFile(MpiComm& comm, const std::string& text) : comm_(comm) {
    if (comm.rank() == 0) {
      char tmpl[] = "/tmp/specrun_config_bcast_XXXXXX";
      EXPECT_NE(mkdtemp(tmpl), nullptr);
      dir_ = tmpl;
      std::ofstream(dir_ + "/job.toml") << text;
    }
  }
  ~JobFile() {
    comm_.barrier();  // nobody still needs the file
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string path() const {
    return comm_.rank() == 0 ? dir_ + "/job.toml" : "/nonexistent/only-rank-0-reads-this.toml";
  }
  std::string dir() const { return dir_; }

 private:
  MpiComm& comm_;
  std::string dir_;
};

std::vector<std::uint64_t> gather_hashes(MpiComm& comm, std::uint64_t hash) {
  std::vector<std::uint64_t> all(static_cast<std::size_t>(comm.size()));
  comm.all_gather(&hash, all.data(), sizeof(hash));
  return all;
}

// The Error `fn` throws on this rank (fails the test when it throws none).
template <class Fn>
Error error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "expected an error on this rank";
  return Error("", "", 0);
}

// The rank that reports a collective error (fn must throw CollectiveError on every rank; exactly
// one of them reports it), or -1 when that does not hold (with a test failure).
template <typename Fn>
int reporting_rank(MpiComm& comm, Fn&& fn) {
  int reports = 0, collective = 0;
  try {
    fn();
  } catch (const CollectiveError& e) {
    collective = 1;
    reports = e.report() ? 1 : 0;
  } catch (const Error&) {
  }
  const int mine[2] = {collective, reports};
  int sums[2] = {0, 0};
  MPI_Allreduce(mine, sums, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(sums[0], comm.size()) << "every rank must throw a CollectiveError";
  EXPECT_EQ(sums[1], 1) << "exactly one rank must report it";
  int rank = reports ? comm.rank() : -1, reporter = -1;
  MPI_Allreduce(&rank, &reporter, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return sums[0] == comm.size() && sums[1] == 1 ? reporter : -1;
}

TEST(ConfigBroadcast, EveryRankGetsRankZerosJobWithTheSameHash) {
  MpiComm comm(MPI_COMM_WORLD);
  JobFile file(comm, kJob);
  JobConfig c = load_job_on_all_ranks(file.path(), {}, comm);
  EXPECT_EQ(c.job.name, "bcast");
  EXPECT_EQ(c.decode.shape.draft_len, 3);
  EXPECT_DOUBLE_EQ(c.decode.temperature, 0.25);
  EXPECT_EQ(c.job_text, kJob);
  // Paths resolve against rank 0's job file directory on every rank.
  std::string dir = file.dir();
  std::uint64_t size = dir.size();
  comm.broadcast(&size, sizeof(size), 0);
  dir.resize(size);
  comm.broadcast(dir.data(), size, 0);
  EXPECT_EQ(c.target.path.resolved, dir + "/models/target");
  const auto hashes = gather_hashes(comm, config_hash(c));
  for (int r = 0; r < comm.size(); ++r) EXPECT_EQ(hashes[r], hashes[0]) << "rank " << r;
}

TEST(ConfigBroadcast, RankZerosOverridesApplyOnEveryRank) {
  MpiComm comm(MPI_COMM_WORLD);
  JobFile file(comm, kJob);
  // Only rank 0's --set list counts; the others pass nothing (or something else).
  std::vector<std::string> overrides;
  if (comm.rank() == 0) overrides = {"decode.draft_len=7", "decode.modes=speculative"};
  if (comm.rank() == 1) overrides = {"decode.draft_len=2"};
  JobConfig c = load_job_on_all_ranks(file.path(), overrides, comm);
  EXPECT_EQ(c.decode.shape.draft_len, 7);
  EXPECT_EQ(c.decode.modes, std::vector<std::string>{"speculative"});
  EXPECT_EQ(c.overrides,
            (std::vector<std::string>{"decode.draft_len=7", "decode.modes=speculative"}));
  const auto hashes = gather_hashes(comm, config_hash(c));
  for (int r = 0; r < comm.size(); ++r) EXPECT_EQ(hashes[r], hashes[0]) << "rank " << r;
}

TEST(ConfigBroadcast, MalformedJobFileFailsOnEveryRankWithRankZerosMessage) {
  MpiComm comm(MPI_COMM_WORLD);
  JobFile file(comm, "[decode]\ndraft_len = = 3\n");
  Error e = error_of([&] { load_job_on_all_ranks(file.path(), {}, comm); });
  EXPECT_EQ(e.exit_code(), kExitUsage);
  EXPECT_NE(e.message().find("job.toml:2:13: malformed TOML"), std::string::npos) << e.what();
  // Printed once, by rank 0 (main() prints only the reporting rank's error).
  EXPECT_EQ(reporting_rank(comm, [&] { load_job_on_all_ranks(file.path(), {}, comm); }), 0);
}

TEST(ConfigBroadcast, BadOverrideOrMissingFileFailsOnEveryRank) {
  MpiComm comm(MPI_COMM_WORLD);
  {
    JobFile file(comm, kJob);
    Error e = error_of([&] { load_job_on_all_ranks(file.path(), {"decode.draftlen=4"}, comm); });
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_NE(e.message().find("unknown --set key 'decode.draftlen'; did you mean "
                               "'decode.draft_len'"),
              std::string::npos)
        << e.what();
  }
  Error e = error_of([&] { load_job_on_all_ranks("/nonexistent/job.toml", {}, comm); });
  EXPECT_EQ(e.exit_code(), kExitUsage);
  EXPECT_NE(e.message().find("cannot read job file '/nonexistent/job.toml'"), std::string::npos)
      << e.what();
  comm.barrier();  // every rank got here: nobody hangs after a failed load
}

TEST(ConfigBroadcast, DisagreementNamesTheRanksThatDiffer) {
  MpiComm comm(MPI_COMM_WORLD);
  JobConfig c = parse_job_config(kJob, "job.toml", {}, "/jobs");
  EXPECT_NO_THROW(check_config_agreement(c, comm));
  // Odd ranks see another draft length, as if their job file or build differed.
  if (comm.rank() % 2 == 1) c.decode.shape.draft_len = 5;
  Error e = error_of([&] { check_config_agreement(c, comm); });
  std::string odd_ranks;
  for (int r = 1; r < comm.size(); r += 2)
    odd_ranks += (odd_ranks.empty() ? "" : ", ") + std::to_string(r);
  EXPECT_NE(e.message().find("differs between ranks: rank(s) " + odd_ranks + " hash it"),
            std::string::npos)
      << e.what();
  EXPECT_NE(e.message().find(config_hash_hex(parse_job_config(kJob, "job.toml", {}, "/jobs"))),
            std::string::npos)
      << e.what();
  // Reported once, by the first rank that differs (its own hash is in the message).
  if (comm.size() > 1) {
    EXPECT_EQ(reporting_rank(comm, [&] { check_config_agreement(c, comm); }), 1);
  }
}

}  // namespace
}  // namespace specrun
