// Graceful stop on SIGUSR1 / SIGTERM (Slurm's --signal=B:USR1@T, preemption, time limits), and on
// SIGINT in dataset jobs.
//
// A signal only sets a flag (the one process-wide state here: a signal handler cannot reach
// anything else). The job runner polls it at batch boundaries and decides collectively (an
// all-reduce of the flags), so every rank stops after the same batch, with everything before it
// written and flushed; the job then exits with kExitStopped and `run --resume` continues it.
// Dataset jobs, whose dp groups do not step together, agree through a StopVote instead.
#pragma once

#include <string>

#include "dist/mpi_comm.h"

namespace specrun {

// Exit code of a job stopped by a signal at a batch boundary: EX_TEMPFAIL ("try again later").
// slurm/specrun.sbatch requeues the job when it sees this code.
inline constexpr int kExitStopped = 75;

// Installs the handlers for SIGUSR1 and SIGTERM, and SIGINT too when `interrupt` (idempotent).
void install_stop_handlers(bool interrupt = false);
// True once a handled signal arrived; the signal number in *signal when given.
bool stop_requested(int* signal = nullptr);
// "SIGTERM", "SIGINT", "SIGUSR1", else "signal N".
std::string stop_signal_name(int signal);

// The job-wide agreement on a stop for ranks that do not reach their boundaries together (a
// dataset job: each dp group decodes its own stream in steps of its own, and no step is
// synchronised across groups). A stop requested on any one rank (a signal to that rank alone,
// or to mpirun, which forwards it to all) reaches every rank at one of its next boundaries,
// without a blocking collective per step: rounds of a non-blocking all-reduce
// (MPI_Iallreduce, over a duplicate of the world communicator) in which each rank contributes
// its stop request and whether it still works; a rank starts the next round when it sees the
// previous one complete, so a round completes within about one step of the slowest rank. Every
// rank sees the same sequence of round results, so every rank ends at the same round.
class StopVote {
 public:
  // Collective over `world`. timeout_s: finish()'s longest wait for one round
  // (parallel.comm_timeout_s; 0 = wait forever): a rank that reaches no boundary for that long is
  // stopped, hung or dead, and MpiComm's watchdog fails the job naming every rank's state.
  StopVote(const MpiComm& world, double timeout_s);
  ~StopVote();
  StopVote(const StopVote&) = delete;
  StopVote& operator=(const StopVote&) = delete;

  // At one of this rank's boundaries; never blocks. True once a round has agreed on a stop
  // (then the caller stops at this boundary and calls finish()).
  bool poll();
  // This rank has no more work (its stream is done, or it stopped): takes part in rounds as "done"
  // until every rank is done or a stop is agreed. Returns the agreed stop's signal number (the
  // largest requested), 0 when every rank finished its work. Every rank calls it once, last.
  int finish();

 private:
  void start_round(bool working);
  bool test_round();  // true when the round in flight completed (it is then over)
  MpiComm comm_;
  MPI_Request request_ = MPI_REQUEST_NULL;
  int send_[2] = {0, 0}, recv_[2] = {0, 0};  // {signal, working}
  bool over_ = false;                        // a round said stop, or that every rank is done
  int signal_ = 0;
};

}  // namespace specrun
