#include "engine/stop_request.h"

#include <chrono>
#include <csignal>
#include <thread>

#include "common/error.h"

namespace specrun {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
}

}  // namespace

void install_stop_handlers(bool interrupt) {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  if (interrupt) sigaction(SIGINT, &action, nullptr);
}

bool stop_requested(int* signal) {
  int sig = g_stop_signal;
  if (signal != nullptr) *signal = sig;
  return sig != 0;
}

std::string stop_signal_name(int signal) {
  switch (signal) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "signal " + std::to_string(signal);
  }
}

StopVote::StopVote(const MpiComm& world, double timeout_s) : comm_(world.handle()) {
  // Strict (Overdue::kFails) although the groups do not step together: every rank takes part at
  // each of its step boundaries, so a round completes within about a step of the slowest rank.
  if (timeout_s > 0) comm_.set_timeout(timeout_s, "world", MpiComm::Overdue::kFails);
}

StopVote::~StopVote() {
  // A round still in flight (an exception on the way to MPI_Abort) cannot be cancelled or freed
  // (MPI forbids it for collectives); the process ends anyway.
}

void StopVote::start_round(bool working) {
  int sig = 0;
  stop_requested(&sig);
  send_[0] = sig;
  send_[1] = working ? 1 : 0;
  MPI_CHECK(MPI_Iallreduce(send_, recv_, 2, MPI_INT, MPI_MAX, comm_.handle(), &request_));
}

bool StopVote::test_round() {
  int complete = 0;
  MPI_CHECK(MPI_Test(&request_, &complete, MPI_STATUS_IGNORE));
  if (!complete) return false;
  request_ = MPI_REQUEST_NULL;
  if (recv_[0] != 0) {
    signal_ = recv_[0];
    over_ = true;
  } else if (recv_[1] == 0) {
    over_ = true;
  }
  return true;
}

bool StopVote::poll() {
  if (over_) return signal_ != 0;
  if (request_ == MPI_REQUEST_NULL || (test_round() && !over_)) start_round(true);
  return signal_ != 0;
}

int StopVote::finish() {
  while (!over_) {
    if (request_ == MPI_REQUEST_NULL) start_round(false);
    const MpiComm::Watched watched(comm_, "stop vote (a non-blocking all-reduce)");  // one round
    while (!test_round()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return signal_;
}

}  // namespace specrun
