// Wall-clock helpers shared by the engine, the benchmark and the communicators.
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

// The current UTC time as "2026-12-01T22:09:28Z".
std::string utc_timestamp();

}  // namespace specrun
