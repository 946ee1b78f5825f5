// What this process is doing right now, in a word, for messages written from other threads (the
// communication watchdog, dist/mpi_comm.cpp, names the phase a collective timed out in). Only
// string literals: the text is read from another thread while it may change.
#pragma once

#include <atomic>

namespace specrun {

namespace detail {
inline std::atomic<const char*>& activity_slot() {
  static std::atomic<const char*> slot{nullptr};
  return slot;
}
}  // namespace detail

// `what`: a literal ("verify", "prefill"), or nullptr for nothing in particular.
inline void set_activity(const char* what) {
  detail::activity_slot().store(what, std::memory_order_relaxed);
}
inline const char* activity() {
  return detail::activity_slot().load(std::memory_order_relaxed);
}

}  // namespace specrun
