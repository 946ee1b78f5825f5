#include "dist/mpi_comm.h"

#include <climits>

#include "common/clock.h"
#include "common/error.h"

namespace specrun {
namespace {

class ScopedTimer {
 public:
  explicit ScopedTimer(double* out) : out_(out), start_(SteadyClock::now()) {}
  ~ScopedTimer() { *out_ = seconds_since(start_); }

 private:
  double* out_;
  SteadyClockPoint start_;
};

int checked_count(std::size_t n) {
  SPEC_CHECK(n <= static_cast<std::size_t>(INT_MAX),
             "message of " << n << " elements is too large for MPI");
  return static_cast<int>(n);
}

}  // namespace

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  // Errors come back as codes so that MPI_CHECK can report them with rank and call.
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  MPI_Comm node = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &local_rank_));
  MPI_CHECK(MPI_Comm_size(node, &local_size_));
  MPI_Comm_free(&node);
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

std::string MpiSession::library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(text, &len);
  std::string s(text, len);
  auto nl = s.find('\n');
  if (nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == ',' || s.back() == ' ')) s.pop_back();
  return s;
}

MpiComm::MpiComm(MPI_Comm comm) {
  MPI_CHECK(MPI_Comm_dup(comm, &comm_));
  MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  init_rank_size();
}

void MpiComm::init_rank_size() {
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

MpiComm MpiComm::tp_group(const World& world) {
  MPI_Comm split = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, world.dp_index, world.tp_rank, &split));
  MPI_CHECK(MPI_Comm_set_errhandler(split, MPI_ERRORS_RETURN));
  return MpiComm(split, true);
}

MpiComm MpiComm::dp_group(const World& world) {
  MPI_Comm split = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, world.tp_rank, world.dp_index, &split));
  MPI_CHECK(MPI_Comm_set_errhandler(split, MPI_ERRORS_RETURN));
  return MpiComm(split, true);
}

MpiComm::~MpiComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

MpiComm::MpiComm(MpiComm&& other) noexcept
    : Communicator(other), comm_(other.comm_), rank_(other.rank_), size_(other.size_) {
  other.comm_ = MPI_COMM_NULL;
}

void MpiComm::all_reduce_sum(float* data, std::size_t count) {
  if (size_ == 1) return;
  double t = 0;
  {
    ScopedTimer timer(&t);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, checked_count(count), MPI_FLOAT, MPI_SUM, comm_));
  }
  add_timing(t);
}

void MpiComm::all_reduce_max(float* data, std::size_t count) {
  if (size_ == 1) return;
  double t = 0;
  {
    ScopedTimer timer(&t);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, checked_count(count), MPI_FLOAT, MPI_MAX, comm_));
  }
  add_timing(t);
}

void MpiComm::all_gather(const void* send, void* recv, std::size_t bytes_per_rank) {
  double t = 0;
  {
    ScopedTimer timer(&t);
    MPI_CHECK(MPI_Allgather(send, checked_count(bytes_per_rank), MPI_BYTE, recv,
                            checked_count(bytes_per_rank), MPI_BYTE, comm_));
  }
  add_timing(t);
}

void MpiComm::broadcast(void* data, std::size_t bytes, int root) {
  if (size_ == 1) return;
  double t = 0;
  {
    ScopedTimer timer(&t);
    MPI_CHECK(MPI_Bcast(data, checked_count(bytes), MPI_BYTE, root, comm_));
  }
  add_timing(t);
}

void MpiComm::barrier() {
  double t = 0;
  {
    ScopedTimer timer(&t);
    MPI_CHECK(MPI_Barrier(comm_));
  }
  add_timing(t);
}

}  // namespace specrun
