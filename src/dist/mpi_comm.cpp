#include "dist/mpi_comm.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <iterator>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/activity.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/host_stats.h"

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

MpiComm::MpiComm(MpiComm&& other) noexcept
    : Communicator(other),
      timeout_s_(other.timeout_s_),
      overdue_(other.overdue_),
      group_(std::move(other.group_)),
      peers_(std::move(other.peers_)),
      comm_(other.comm_),
      rank_(other.rank_),
      size_(other.size_) {
  other.comm_ = MPI_COMM_NULL;
  other.timeout_s_ = 0;
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

// The watchdog: collectives stay blocking (non-blocking ones, polled, cost 20% of tp-2 decoding
// throughput here); a thread checks every 100 ms how long the current one has run. Only the main
// thread calls MPI (MPI_THREAD_FUNNELED), so one slot describes the collective in flight. On a
// timeout the thread prints the error and ends the process; mpirun then ends every rank.
namespace {

constexpr std::int64_t kTickNs = 100'000'000;
// A wake-up this much later than the tick: the process did not run meanwhile (SIGSTOP, a
// debugger, a suspended virtual machine); scheduling delays on a loaded host are far shorter.
constexpr std::int64_t kStoppedGapNs = 1'000'000'000;
// How often an overdue Overdue::kFailsIfStopped collective reads the other ranks' states again.
constexpr std::int64_t kRecheckNs = 1'000'000'000;

struct WatchSlot {
  std::atomic<std::int64_t> since_ns{0};  // 0: no watched collective in flight
  std::atomic<const char*> what{nullptr};
  std::atomic<const MpiComm*> comm{nullptr};  // set before since_ns; cleared by ~MpiComm
  std::atomic<std::int64_t> timeout_ns{0};
  // Held by the watchdog while it reads *comm, and by ~MpiComm to clear `comm`.
  std::mutex mutex;
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

// A process's state letter and start time from /proc/<pid>/stat; false when it is gone.
bool read_pid_state(int pid, char& state, std::uint64_t& start_ticks) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_pid_state(text, state, start_ticks);
}

// The state letter of the process `peer` names, 'X' when it is gone (or its pid now names
// another process).
char process_state(const MpiComm::Peer& peer) {
  char state = 'X';
  std::uint64_t start = 0;
  if (!read_pid_state(peer.pid, state, start) || start != peer.start_ticks) return 'X';
  return state;
}

// What the watchdog can tell of another rank of the group.
enum class PeerState { kStopped, kTraced, kDead, kBlocked, kRunning, kNotVisible };

// A /proc state letter, as the watchdog judges it (process_state gives 'X' for a process gone).
PeerState peer_state(char letter) {
  switch (letter) {
    case 'T':
      return PeerState::kStopped;
    case 't':
      return PeerState::kTraced;
    case 'Z':
    case 'X':
      return PeerState::kDead;
    case 'D':
      return PeerState::kBlocked;
    default:
      return PeerState::kRunning;
  }
}

// The state of every rank of `comm` (this one's entry is kRunning); empty when the peers are
// unknown.
std::vector<PeerState> peer_states(const MpiComm& comm) {
  const std::vector<MpiComm::Peer>& peers = comm.peers();
  std::vector<PeerState> states;
  if (peers.empty() || comm.rank() >= static_cast<int>(peers.size())) return states;
  for (std::size_t r = 0; r < peers.size(); ++r) {
    if (static_cast<int>(r) == comm.rank())
      states.push_back(PeerState::kRunning);
    else if (!peers[r].visible)
      states.push_back(PeerState::kNotVisible);
    else
      states.push_back(peer_state(process_state(peers[r])));
  }
  return states;
}

bool stopped_or_dead(PeerState s) {
  return s == PeerState::kStopped || s == PeerState::kTraced || s == PeerState::kDead;
}

// "rank 1 (world rank 1, pid 4242 on node07): stopped (SIGSTOP or a debugger), it did not
// arrive; ..." for every other rank of the group; those on other hosts (or in another pid
// namespace) are not checked.
std::string describe_peers(const MpiComm& comm, const std::vector<PeerState>& states) {
  if (states.empty()) return "The other ranks: unknown";
  std::ostringstream out;
  out << "The other ranks of the group:";
  const char* separator = " ";
  for (std::size_t r = 0; r < states.size(); ++r) {
    if (static_cast<int>(r) == comm.rank()) continue;
    const MpiComm::Peer& p = comm.peers()[r];
    out << separator << "rank " << r << " (world rank " << p.world_rank << ", pid " << p.pid
        << " on " << p.host << "): ";
    separator = "; ";
    switch (states[r]) {
      case PeerState::kStopped:
        out << "stopped (SIGSTOP or a debugger), it did not arrive";
        break;
      case PeerState::kTraced:
        out << "stopped by a tracer, it did not arrive";
        break;
      case PeerState::kDead:
        out << "dead, it did not arrive";
        break;
      case PeerState::kBlocked:
        out << "blocked in the kernel (I/O on a hung file system?)";
        break;
      case PeerState::kRunning:
        out << "running (still computing, or waiting in this collective)";
        break;
      case PeerState::kNotVisible:
        out << (p.host != comm.peers()[static_cast<std::size_t>(comm.rank())].host
                    ? "on another host, not checked from here"
                    : "in another pid namespace, not checked from here");
    }
  }
  return out.str();
}

// "the all-reduce (sum) on the tensor-parallel group (2 ranks, this one is its rank 0), in the
// verify phase"
std::string describe_collective(const MpiComm& comm, const char* what) {
  const char* phase = activity();
  std::ostringstream out;
  out << "the " << what << " on the " << comm.group() << " group (" << comm.size()
      << " ranks, this one is its rank " << comm.rank() << "), "
      << (phase != nullptr ? std::string("in the ") + phase + " phase"
                           : std::string("outside the decoding phases"));
  return out.str();
}

// The text the watchdog prints when it ends the process over an overdue collective.
std::string overdue_message(const MpiComm& comm, const char* what,
                            const std::vector<PeerState>& states) {
  std::ostringstream msg;
  msg << "error: [" << process_label() << "] " << describe_collective(comm, what)
      << ", did not complete within parallel.comm_timeout_s = " << comm.timeout_s() << " s: "
      << (comm.overdue() == MpiComm::Overdue::kFails
              ? "another rank of the group is stopped, hung or dead. "
              : "another rank of the group is stopped or dead. ")
      << describe_peers(comm, states)
      << ". Every batch committed before is in the result file; continue with --resume\n";
  return msg.str();
}

// This process ran again after `gap` ns stopped (SIGSTOP, a debugger). The collective in flight
// does not count that time against the others: its deadline moves by as much. And when another
// rank of the group this process last waited on is dead on this host, the job failed while this
// process was stopped: the others timed out on it and their error names it, and mpirun, ending
// the job, sends the ranks left SIGCONT, then SIGTERM and SIGKILL. Then this process says so and
// ends, rather than time out in turn and blame the dead.
void resumed(WatchSlot& w, std::int64_t gap) {
  std::int64_t since = w.since_ns.load();
  if (since != 0) w.since_ns.compare_exchange_strong(since, since + gap);
  std::lock_guard<std::mutex> lock(w.mutex);
  const MpiComm* comm = w.comm.load();
  if (comm == nullptr) return;
  const std::vector<PeerState> states = peer_states(*comm);
  if (std::none_of(states.begin(), states.end(), [](PeerState s) { return s == PeerState::kDead; }))
    return;
  std::ostringstream msg;
  msg << "note: [" << process_label() << "] this rank was stopped (SIGSTOP or a debugger) for "
      << std::fixed << std::setprecision(1) << static_cast<double>(gap) * 1e-9
      << " s, and other ranks of the " << comm->group()
      << " group ended meanwhile: the job failed while this rank was stopped (the first error "
         "says why); ending this one too\n";
  std::cerr << msg.str() << std::flush;
  std::_Exit(kExitFailure);
}

void watchdog_loop() {
  WatchSlot& w = watch_slot();
  std::int64_t last_wake = now_ns();
  std::int64_t judged_since = 0, next_judgement = 0;  // Overdue::kFailsIfStopped re-checks
  for (;;) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(kTickNs));
    const std::int64_t now = now_ns();
    if (now - last_wake - kTickNs > kStoppedGapNs) resumed(w, now - last_wake - kTickNs);
    last_wake = now;
    const std::int64_t since = w.since_ns.load();
    if (since == 0 || now - since <= w.timeout_ns.load()) continue;
    if (since == judged_since && now < next_judgement) continue;
    std::lock_guard<std::mutex> lock(w.mutex);
    const MpiComm* comm = w.comm.load();
    const char* what = w.what.load();
    // Still the same collective (then the main thread waits in it and *comm stays as it is).
    if (comm == nullptr || w.since_ns.load() != since) continue;
    const std::vector<PeerState> states = peer_states(*comm);
    if (comm->overdue() == MpiComm::Overdue::kFailsIfStopped &&
        std::none_of(states.begin(), states.end(), stopped_or_dead)) {
      judged_since = since;  // the others run: wait on, and look again in a while
      next_judgement = now + kRecheckNs;
      continue;
    }
    std::cerr << overdue_message(*comm, what, states) << std::flush;
    std::_Exit(kExitFailure);
  }
}

}  // namespace

MpiComm::~MpiComm() {
  if (timeout_s_ > 0) {  // the watchdog no longer reads this object
    WatchSlot& w = watch_slot();
    std::lock_guard<std::mutex> lock(w.mutex);
    if (w.comm.load() == this) w.comm = nullptr;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

void MpiComm::set_timeout(double seconds, const std::string& group, Overdue overdue) {
  // Who the partners are, for the timeout message: world rank, pid, host.
  struct Wire {
    std::int32_t world_rank, pid;
    std::uint64_t start_ticks;
    char host[64];
  };
  Wire mine{};
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &mine.world_rank));
  mine.pid = static_cast<std::int32_t>(::getpid());
  char state = '?';
  read_pid_state(mine.pid, state, mine.start_ticks);
  ::gethostname(mine.host, sizeof(mine.host) - 1);
  std::vector<Wire> all(static_cast<std::size_t>(size_));
  MPI_CHECK(
      MPI_Allgather(&mine, sizeof(Wire), MPI_BYTE, all.data(), sizeof(Wire), MPI_BYTE, comm_));
  // A partner is watched through /proc when its process is seen there as itself (same host, same
  // pid namespace: a rank in a container of its own may share the host name but not the pids).
  std::vector<Peer> peers;
  for (const Wire& w : all) {
    Peer p{w.world_rank, w.pid, std::string(w.host, strnlen(w.host, sizeof(w.host))), w.start_ticks,
           false};
    p.visible = w.start_ticks != 0 && process_state(p) != 'X';
    peers.push_back(std::move(p));
  }
  std::lock_guard<std::mutex> lock(watch_slot().mutex);  // the watchdog may read this object
  timeout_s_ = seconds;
  overdue_ = overdue;
  group_ = group;
  peers_ = std::move(peers);
}

MpiComm::Watched::Watched(const MpiComm& comm, const char* what) : active_(comm.timeout_s_ > 0) {
  if (!active_) return;
  static std::once_flag started;
  std::call_once(started, [] { std::thread(watchdog_loop).detach(); });
  WatchSlot& w = watch_slot();
  w.comm = &comm;
  w.timeout_ns = static_cast<std::int64_t>(comm.timeout_s_ * 1e9);
  w.what = what;
  w.since_ns = now_ns();
}

MpiComm::Watched::~Watched() {
  if (active_) watch_slot().since_ns = 0;
}

}  // namespace specrun
