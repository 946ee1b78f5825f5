// GoogleTest main for multi-rank tests: MPI is initialised once around all tests; every rank
// runs every test; only rank 0 prints the GoogleTest report (others print failures only).
#include <gtest/gtest.h>
#include <mpi.h>

#include "dist/mpi_comm.h"

int main(int argc, char** argv) {
  specrun::MpiSession mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (mpi.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (mpi.rank() == 0 && any_failed && !failed)
    std::fprintf(stderr, "a test failed on another rank\n");
  return any_failed;
}
