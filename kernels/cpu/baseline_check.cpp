// Refuses to start on a CPU below the baseline the program was compiled for (isa.h), with a
// message instead of a SIGILL somewhere later. It runs as a constructor before any other of
// this program's (priority 101), and this file alone is compiled for plain x86-64, so that the
// check itself runs anywhere. The features to check come from the compiler's own macros for
// the baseline -march (generated/cpu_baseline.h, made by cmake/cpu_variants.cmake).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "generated/cpu_baseline.h"

namespace {

// The first "model name" of /proc/cpuinfo into `out` ("unknown" when absent). Not
// cpu::cpu_model_name (isa.cpp): that is compiled for the baseline this check guards, and uses
// std::string; this runs before it is known that the CPU can execute such code.
void read_model_name(char* out, std::size_t size) {
  std::snprintf(out, size, "unknown");
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (f == nullptr) return;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "model name", 10) != 0) continue;
    const char* colon = std::strchr(line, ':');
    if (colon == nullptr) continue;
    ++colon;
    while (*colon == ' ' || *colon == '\t') ++colon;
    std::snprintf(out, size, "%s", colon);
    out[std::strcspn(out, "\n")] = '\0';
    break;
  }
  std::fclose(f);
}

__attribute__((constructor(101))) void check_baseline_cpu() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  char missing[1024] = "";
#define SPECRUN_CHECK_FEATURE(name)                                         \
  if (!__builtin_cpu_supports(name)) {                                      \
    std::strncat(missing, " ", sizeof missing - std::strlen(missing) - 1);  \
    std::strncat(missing, name, sizeof missing - std::strlen(missing) - 1); \
  }
  SPECRUN_BASELINE_FEATURES(SPECRUN_CHECK_FEATURE)
#undef SPECRUN_CHECK_FEATURE
  if (missing[0] == '\0') return;
  char model[256];
  read_model_name(model, sizeof model);
  std::fprintf(stderr,
               "specrun: this CPU (%s) lacks%s, which this build requires (compiled for "
               "-march=%s outside the kernels); run it on a newer node, or build with "
               "-DSPECRUN_BASELINE_ARCH=x86-64 for this one\n",
               model, missing, SPECRUN_BASELINE_ARCH);
  std::fflush(stderr);
  std::_Exit(1);
#endif
}

}  // namespace
