#include "dist/mpi_comm.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/activity.h"
#include "common/clock.h"
#include "common/error.h"

namespace specrun {
namespace {

// A collective's wall and CPU seconds (the calling thread's).
struct CallTime {
  double wall = 0, cpu = 0;
};

class ScopedTimer {
 public:
  explicit ScopedTimer(CallTime* out)
      : out_(out), start_(SteadyClock::now()), cpu_start_(thread_cpu_seconds()) {}
  ~ScopedTimer() {
    out_->wall = seconds_since(start_);
    out_->cpu = thread_cpu_seconds() - cpu_start_;
  }

 private:
  CallTime* out_;
  SteadyClockPoint start_;
  double cpu_start_;
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
  CallTime t;
  {
    ScopedTimer timer(&t);
    Watched w(*this, "all-reduce (sum)");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, checked_count(count), MPI_FLOAT, MPI_SUM, comm_));
  }
  add_timing(t.wall, t.cpu);
}

void MpiComm::all_reduce_max(float* data, std::size_t count) {
  if (size_ == 1) return;
  CallTime t;
  {
    ScopedTimer timer(&t);
    Watched w(*this, "all-reduce (max)");
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data, checked_count(count), MPI_FLOAT, MPI_MAX, comm_));
  }
  add_timing(t.wall, t.cpu);
}

void MpiComm::all_gather(const void* send, void* recv, std::size_t bytes_per_rank) {
  CallTime t;
  {
    ScopedTimer timer(&t);
    Watched w(*this, "all-gather");
    MPI_CHECK(MPI_Allgather(send, checked_count(bytes_per_rank), MPI_BYTE, recv,
                            checked_count(bytes_per_rank), MPI_BYTE, comm_));
  }
  add_timing(t.wall, t.cpu);
}

void MpiComm::broadcast(void* data, std::size_t bytes, int root) {
  if (size_ == 1) return;
  CallTime t;
  {
    ScopedTimer timer(&t);
    Watched w(*this, "broadcast");
    MPI_CHECK(MPI_Bcast(data, checked_count(bytes), MPI_BYTE, root, comm_));
  }
  add_timing(t.wall, t.cpu);
}

void MpiComm::barrier() {
  CallTime t;
  {
    ScopedTimer timer(&t);
    Watched w(*this, "barrier");
    MPI_CHECK(MPI_Barrier(comm_));
  }
  add_timing(t.wall, t.cpu);
}

void MpiComm::set_timeout(double seconds, const std::string& group) {
  timeout_s_ = seconds;
  group_ = group;
  // Who the partners are, for the timeout message: world rank, pid, host.
  struct Wire {
    std::int32_t world_rank, pid;
    char host[64];
  };
  Wire mine{};
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &mine.world_rank));
  mine.pid = static_cast<std::int32_t>(::getpid());
  ::gethostname(mine.host, sizeof(mine.host) - 1);
  std::vector<Wire> all(static_cast<std::size_t>(size_));
  MPI_CHECK(
      MPI_Allgather(&mine, sizeof(Wire), MPI_BYTE, all.data(), sizeof(Wire), MPI_BYTE, comm_));
  peers_.clear();
  for (const Wire& w : all)
    peers_.push_back(
        Peer{w.world_rank, w.pid, std::string(w.host, strnlen(w.host, sizeof(w.host)))});
}

// The watchdog: collectives stay blocking (non-blocking ones, polled, cost 20% of tp-2 decoding
// throughput here); a thread checks every 100 ms how long the current one has run. Only the main
// thread calls MPI (MPI_THREAD_FUNNELED), so one slot describes the collective in flight. On a
// timeout the thread prints the error and ends the process; mpirun then ends every rank.
namespace {

struct WatchSlot {
  std::atomic<std::int64_t> since_ns{0};  // 0: no watched collective in flight
  std::atomic<const char*> what{nullptr};
  std::atomic<const MpiComm*> comm{nullptr};
  std::atomic<double> timeout_s{0};
  std::string group;  // written before since_ns is set
  int rank = 0, size = 1;
};

WatchSlot& watch_slot() {
  static WatchSlot slot;
  return slot;
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A process's state from /proc/<pid>/stat (the letter after the command name), '?' when gone.
char process_state(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t paren = text.rfind(')');
  if (paren == std::string::npos || paren + 2 >= text.size()) return '?';
  return text[paren + 2];
}

// "rank 1 (world rank 1, pid 4242 on node07): stopped (SIGSTOP or a debugger), it did not
// arrive; ..." for every other rank of the group; those on other hosts are not checked.
std::string describe_peers(const MpiComm& comm, int me) {
  const std::vector<MpiComm::Peer>& peers = comm.peers();
  if (peers.empty() || me >= static_cast<int>(peers.size())) return "The other ranks: unknown";
  const std::string& here = peers[static_cast<std::size_t>(me)].host;
  std::ostringstream out;
  out << "The other ranks of the group:";
  const char* separator = " ";
  for (std::size_t r = 0; r < peers.size(); ++r) {
    if (static_cast<int>(r) == me) continue;
    const MpiComm::Peer& p = peers[r];
    out << separator << "rank " << r << " (world rank " << p.world_rank << ", pid " << p.pid
        << " on " << p.host << "): ";
    separator = "; ";
    if (p.host != here) {
      out << "on another host, not checked from here";
      continue;
    }
    switch (process_state(p.pid)) {
      case 'T':
        out << "stopped (SIGSTOP or a debugger), it did not arrive";
        break;
      case 't':
        out << "stopped by a tracer, it did not arrive";
        break;
      case 'Z':
      case 'X':
      case '?':
        out << "dead, it did not arrive";
        break;
      case 'D':
        out << "blocked in the kernel (I/O on a hung file system?)";
        break;
      default:
        out << "running (still computing, or waiting in this collective)";
    }
  }
  return out.str();
}

void watchdog_loop() {
  WatchSlot& w = watch_slot();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::int64_t since = w.since_ns.load();
    if (since == 0) continue;
    const double waited = static_cast<double>(now_ns() - since) * 1e-9;
    if (waited <= w.timeout_s.load()) continue;
    const char* phase = activity();
    std::ostringstream msg;
    msg << "error: [" << process_label() << "] the " << w.what.load() << " on the " << w.group
        << " group (" << w.size << " ranks, this one is its rank " << w.rank << "), "
        << (phase != nullptr ? std::string("in the ") + phase + " phase"
                             : std::string("outside the decoding phases"))
        << ", did not complete within parallel.comm_timeout_s = " << w.timeout_s.load()
        << " s: another rank of the group is stopped, hung or dead. "
        << describe_peers(*w.comm.load(), w.rank)
        << ". Every batch committed before is in the result file; continue with --resume\n";
    std::cerr << msg.str() << std::flush;
    std::_Exit(kExitFailure);
  }
}

}  // namespace

MpiComm::Watched::Watched(const MpiComm& comm, const char* what) : active_(comm.timeout_s_ > 0) {
  if (!active_) return;
  static std::once_flag started;
  std::call_once(started, [] { std::thread(watchdog_loop).detach(); });
  WatchSlot& w = watch_slot();
  if (w.comm.load() != &comm) {
    w.group = comm.group_;
    w.rank = comm.rank_;
    w.size = comm.size_;
    w.timeout_s = comm.timeout_s_;
    w.comm = &comm;
  }
  w.what = what;
  w.since_ns = now_ns();
}

MpiComm::Watched::~Watched() {
  if (active_) watch_slot().since_ns = 0;
}

}  // namespace specrun
