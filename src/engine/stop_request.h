// Graceful stop on SIGUSR1 / SIGTERM (Slurm's --signal=B:USR1@T, preemption, time limits).
//
// A signal only sets a flag (the one process-wide state here: a signal handler cannot reach
// anything else). The job runner polls it at batch boundaries and decides collectively (an
// all-reduce of the flags), so every rank stops after the same batch, with everything before it
// written and flushed; the job then exits with kExitStopped and `run --resume` continues it.
#pragma once

namespace specrun {

// Exit code of a job stopped by a signal at a batch boundary: EX_TEMPFAIL ("try again later").
// slurm/specrun.sbatch requeues the job when it sees this code.
inline constexpr int kExitStopped = 75;

// Installs the handlers for SIGUSR1 and SIGTERM (idempotent).
void install_stop_handlers();
// True once a handled signal arrived; the signal number in *signal when given.
bool stop_requested(int* signal = nullptr);

}  // namespace specrun
