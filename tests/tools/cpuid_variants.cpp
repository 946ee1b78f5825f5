// Prints the CPU kernel variants this CPU and its OS support, read from CPUID and XGETBV
// (tests/unit/cpuid_reading.h), independently of the program's own detection: one line,
// ascending ("baseline avx2 avx512"), then on stderr what each level lacks. For e2e/cpu_isa.sh,
// which cannot read CPUID from the shell and must not trust /proc/cpuinfo's flags.
#include <cstdio>

#include "../unit/cpuid_reading.h"

int main() {
#if defined(__x86_64__)
  const specrun::test::CpuidReading r = specrun::test::read_cpuid();
  std::printf("baseline%s%s\n", r.avx2() ? " avx2" : "", r.avx512() ? " avx512" : "");
  std::fprintf(stderr, "CPUID: %s\n", r.describe().c_str());
#else
  std::printf("baseline\n");
#endif
  return 0;
}
