// Clock helpers shared by the engine, the benchmark and the communicators: wall time on the
// steady clock, and the calling thread's CPU time.
#pragma once

#include <chrono>
#include <string>

namespace specrun {

using SteadyClock = std::chrono::steady_clock;
using SteadyClockPoint = SteadyClock::time_point;

// Seconds elapsed since t0 on the steady clock.
inline double seconds_since(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

// The calling thread's CPU time in seconds (CLOCK_THREAD_CPUTIME_ID; a vDSO call, well under a
// microsecond), from an arbitrary origin.
double thread_cpu_seconds();

// The current UTC time as "2026-12-01T22:09:28Z".
std::string utc_timestamp();

}  // namespace specrun
