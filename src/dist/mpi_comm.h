// MPI lifetime and communicators as RAII objects, passed explicitly (no globals).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/world.h"

namespace specrun {

// MPI_Init_thread on construction, MPI_Finalize on destruction (unless already finalized).
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  // World for a given tp; throws (exit code 2) when size is not divisible by tp.
  World world(int tp) const { return World::make(rank_, size_, local_rank_, local_size_, tp); }
  // Library version string (MPI_Get_library_version), first line.
  static std::string library_version();

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
};

// Owns an MPI communicator (freed on destruction unless it is MPI_COMM_WORLD).
class MpiComm final : public Communicator {
 public:
  // Duplicates `comm` so that our traffic never mixes with anyone else's.
  explicit MpiComm(MPI_Comm comm);
  // Splits MPI_COMM_WORLD into this rank's tensor-parallel group (color = dp_index).
  static MpiComm tp_group(const World& world);
  // Ranks with tp_rank == r across all groups (color = tp_rank), ordered by dp index.
  static MpiComm dp_group(const World& world);
  ~MpiComm() override;
  MpiComm(MpiComm&& other) noexcept;
  MpiComm& operator=(MpiComm&&) = delete;
  MpiComm(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm handle() const { return comm_; }

  void all_reduce_sum(float* data, std::size_t count) override;
  void all_reduce_max(float* data, std::size_t count) override;
  void all_gather(const void* send, void* recv, std::size_t bytes_per_rank) override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  void barrier() override;

  // How a collective that outlasts the timeout is judged.
  enum class Overdue {
    // The job fails: the ranks call the group's collectives at about the same moments (a
    // tensor-parallel group, in lockstep inside every step), so a long wait means that another
    // rank is stopped, hung or dead.
    kFails,
    // The job fails once another rank it can see (on this host, in this pid namespace) is
    // stopped or dead; ranks that run, and ranks it cannot see, are waited for, however long:
    // between these collectives the ranks work on their own (the world: each dp group decodes its
    // own batches, rank 0 checks the prompt file or fingerprints the models alone), so a long
    // wait is legitimate while the others run.
    kFailsIfStopped,
  };

  // A deadline for every collective on this communicator (parallel.comm_timeout_s; 0 = none, the
  // default): when one takes longer, judged by `overdue`, a watchdog thread prints an error
  // naming the collective, `group`, the phase (common/activity.h) and the state of the other
  // ranks (stopped, dead or running, read from /proc for those on this host) and ends the
  // process, and mpirun ends the others: a stopped or hung rank fails the job instead of hanging
  // it. Time during which this process itself did not run (it was stopped) does not count, and a
  // rank resumed to find another rank of the group dead on this host (the job failed while it was
  // stopped; mpirun sends SIGCONT before SIGTERM and SIGKILL) says so and ends instead of blaming
  // that rank. Collective: every rank of the communicator calls it (they exchange pids and hosts).
  void set_timeout(double seconds, const std::string& group, Overdue overdue = Overdue::kFails);

  // Each rank's world rank, pid and host name, gathered by set_timeout (empty before).
  struct Peer {
    int world_rank = 0;
    int pid = 0;
    std::string host;
    std::uint64_t start_ticks = 0;  // its process's start time (/proc/<pid>/stat, field 22)
    // Its process is seen in this rank's /proc (the same host and pid namespace), so that the
    // watchdog can read its state.
    bool visible = false;
  };
  const std::vector<Peer>& peers() const { return peers_; }
  double timeout_s() const { return timeout_s_; }
  Overdue overdue() const { return overdue_; }
  const std::string& group() const { return group_; }

  // Marks a collective on this communicator in flight for the watchdog (when a timeout is set),
  // for the scope's lifetime. The member collectives use it; so does code that calls MPI on
  // handle() itself (dist/gather.cpp). `what`: a literal ("gather").
  class Watched {
   public:
    Watched(const MpiComm& comm, const char* what);
    ~Watched();
    Watched(const Watched&) = delete;
    Watched& operator=(const Watched&) = delete;

   private:
    bool active_;
  };

 private:
  MpiComm(MPI_Comm owned, bool) : comm_(owned) { init_rank_size(); }
  void init_rank_size();
  double timeout_s_ = 0;
  Overdue overdue_ = Overdue::kFails;
  std::string group_;
  std::vector<Peer> peers_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

}  // namespace specrun
