// Provenance on several ranks: gather_strings, gathering every rank's record to rank 0, and the
// mismatch check on a variable that only some ranks have. Run under mpirun -np 2 and 8.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/build_info.h"
#include "dist/gather.h"
#include "dist/mpi_comm.h"
#include "dist/world.h"
#include "io/provenance.h"

namespace specrun {
namespace {

// mpi_test_main owns the MpiSession; the World carries the same rank, size and local rank.
World this_world() {
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  return World::make(rank, size, local_rank, local_size, 1);
}

TEST(GatherStrings, VariableLengthsArriveInRankOrder) {
  MpiComm comm(MPI_COMM_WORLD);
  const int n = comm.size(), r = comm.rank();
  // Rank r sends r*r copies of a rank-specific letter (rank 0 sends an empty string) plus a NUL.
  auto text_of = [](int q) { return std::string(q * q, static_cast<char>('a' + q % 26)) + '\0'; };
  for (int root : {0, n - 1}) {
    std::vector<std::string> all = gather_strings(comm, text_of(r), root);
    if (r != root) {
      EXPECT_TRUE(all.empty());
      continue;
    }
    ASSERT_EQ(static_cast<int>(all.size()), n);
    for (int q = 0; q < n; ++q) EXPECT_EQ(all[q], text_of(q)) << "from rank " << q;
  }
}

TEST(Provenance, LocalRecordComesFromItsSources) {
  const World w = this_world();
  setenv("NCCL_SPECRUN_TEST_LOCAL", "x=1", 1);
  ProvenanceRecord r = collect_local_provenance(w);
  unsetenv("NCCL_SPECRUN_TEST_LOCAL");
  EXPECT_EQ(r.world_rank, w.rank);
  EXPECT_EQ(r.world_size, w.size);
  EXPECT_EQ(r.local_rank, w.local_rank);
  EXPECT_EQ(r.pid, static_cast<long>(getpid()));
  EXPECT_EQ(r.git_commit, build_info().git_commit);
  EXPECT_EQ(r.hdf5_version, std::to_string(H5_VERS_MAJOR) + "." + std::to_string(H5_VERS_MINOR) +
                                "." + std::to_string(H5_VERS_RELEASE));
  EXPECT_NE(r.mpi_library.find("MPI"), std::string::npos) << r.mpi_library;
  EXPECT_EQ(r.environment.at("NCCL_SPECRUN_TEST_LOCAL"), "x=1");
  // mpirun sets this on every rank; it is recorded (and ignored by the mismatch check).
  EXPECT_EQ(r.environment.at("OMPI_COMM_WORLD_RANK"), std::to_string(w.rank));
  EXPECT_EQ(r.environment.count("PATH"), 0u);
  EXPECT_FALSE(r.hostname.empty());
}

TEST(Provenance, GatherGivesEveryRanksRecordOnRankZero) {
  const World w = this_world();
  MpiComm world(MPI_COMM_WORLD);
  // Only odd ranks have this variable: the check must name exactly them, and nothing else that
  // Open MPI sets differently per rank may show up (that would be a gap in the ignore list).
  if (w.rank % 2 == 1) setenv("NCCL_SPECRUN_TEST_ODD", "LL", 1);
  std::vector<ProvenanceRecord> records = gather_provenance(world, collect_local_provenance(w));
  unsetenv("NCCL_SPECRUN_TEST_ODD");
  if (w.rank != 0) {
    EXPECT_TRUE(records.empty());
    return;
  }
  ASSERT_EQ(static_cast<int>(records.size()), w.size);
  std::vector<long> pids;
  std::vector<int> odd_ranks, even_ranks;
  for (int q = 0; q < w.size; ++q) {
    EXPECT_EQ(records[q].world_rank, q);
    EXPECT_EQ(records[q].world_size, w.size);
    EXPECT_EQ(records[q].environment.at("OMPI_COMM_WORLD_RANK"), std::to_string(q));
    EXPECT_EQ(records[q].git_commit, build_info().git_commit);
    pids.push_back(records[q].pid);
    (q % 2 ? odd_ranks : even_ranks).push_back(q);
  }
  EXPECT_EQ(pids[0], static_cast<long>(getpid()));
  std::sort(pids.begin(), pids.end());
  EXPECT_EQ(std::adjacent_find(pids.begin(), pids.end()), pids.end()) << "two ranks, one pid";

  std::vector<Mismatch> mismatches = find_mismatches(records);
  std::string all;
  for (const Mismatch& each : mismatches) all += "\n  " + describe(each);
  ASSERT_EQ(mismatches.size(), 1u) << "reported:" << all;
  const Mismatch& m = mismatches[0];
  EXPECT_EQ(m.name, "NCCL_SPECRUN_TEST_ODD");
  ASSERT_EQ(m.values.size(), 2u);
  EXPECT_FALSE(m.values[0].set);
  EXPECT_EQ(m.values[0].ranks, even_ranks);
  EXPECT_EQ(m.values[1].value, "LL");
  EXPECT_EQ(m.values[1].ranks, odd_ranks);
}

}  // namespace
}  // namespace specrun
