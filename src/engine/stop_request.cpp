#include "engine/stop_request.h"

#include <csignal>

namespace specrun {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
}

}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

bool stop_requested(int* signal) {
  int sig = g_stop_signal;
  if (signal != nullptr) *signal = sig;
  return sig != 0;
}

}  // namespace specrun
