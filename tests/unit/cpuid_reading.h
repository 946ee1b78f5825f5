// What this CPU and its operating system support for the CPU kernel variants (kernels/cpu/isa.h),
// read straight from the CPUID and XGETBV instructions: the independent source the tests hold the
// program's own detection (GCC's __builtin_cpu_supports, kernels/cpu/isa.cpp) against. Not
// /proc/cpuinfo: its flags are the kernel's names for CPUID bits, and a kernel may leave some out
// (a 6.18 kernel on an AMD Zen 5 VM listed neither "abm" nor "lzcnt" although CPUID reported
// LZCNT and the instruction ran), so a test reading them failed on a CPU the program handled
// right. Under QEMU's user mode CPUID is the emulated CPU's while /proc/cpuinfo stays the
// host's, another place where only CPUID tells the truth.
//
// Levels (the -march of each variant, as GCC defines them): avx2 = x86-64-v3 = x86-64-v2 (SSE3,
// SSSE3, SSE4.1, SSE4.2, POPCNT, CMPXCHG16B, LAHF/SAHF) + AVX, AVX2, BMI1, BMI2, F16C, FMA,
// LZCNT, MOVBE, with the OS saving the YMM state (CPUID.1:ECX.OSXSAVE, then XCR0 bits 1 and 2);
// avx512 = x86-64-v4 = x86-64-v3 + AVX-512 F, BW, CD, DQ, VL, with the OS saving the opmask and
// ZMM state (XCR0 bits 5, 6 and 7). Bit positions: Intel SDM vol. 2A, CPUID, tables 3-8 to 3-10
// (leaf 1, leaf 7 sub-leaf 0, leaf 0x80000001); AMD APM vol. 3, appendix E (LZCNT is AMD's ABM
// bit, ECX bit 5 of leaf 0x80000001).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace specrun::test {

struct CpuidReading {
  // The features (and OS register states) each level needs that this CPU lacks, by name; a
  // level is supported when its list and those of the levels below are empty.
  std::vector<std::string> lacking_v2;
  std::vector<std::string> lacking_v3;  // the avx2 variant
  std::vector<std::string> lacking_v4;  // the avx512 variant

  bool avx2() const { return lacking_v2.empty() && lacking_v3.empty(); }
  bool avx512() const { return avx2() && lacking_v4.empty(); }

  // "baseline", "avx2" or "avx512": the best variant this reading allows.
  const char* best() const { return avx512() ? "avx512" : avx2() ? "avx2" : "baseline"; }

  // "v3 lacks: lzcnt; v4 lacks: avx512f ..." for messages.
  std::string describe() const {
    std::string s;
    const auto add = [&s](const char* level, const std::vector<std::string>& names) {
      if (names.empty()) return;
      s += s.empty() ? "" : "; ";
      s += level;
      s += " lacks:";
      for (const std::string& n : names) s += " " + n;
    };
    add("x86-64-v2", lacking_v2);
    add("x86-64-v3", lacking_v3);
    add("x86-64-v4", lacking_v4);
    return s.empty() ? "every feature of x86-64-v4" : s;
  }
};

#if defined(__x86_64__)
inline CpuidReading read_cpuid() {
  struct Regs {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  };
  // __get_cpuid_count checks the highest leaf of the range first and leaves zeros above it.
  const auto leaf = [](unsigned id) {
    Regs r;
    if (__get_cpuid_count(id, 0, &r.eax, &r.ebx, &r.ecx, &r.edx) == 0) r = Regs{};
    return r;
  };
  const Regs l1 = leaf(1), l7 = leaf(7), e1 = leaf(0x80000001U);
  const auto bit = [](unsigned reg, int b) { return ((reg >> b) & 1U) != 0; };

  // XCR0, only readable when the OS has turned XSAVE on (CPUID.1:ECX bit 27, OSXSAVE).
  const bool osxsave = bit(l1.ecx, 27);
  std::uint64_t xcr0 = 0;
  if (osxsave) {
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (std::uint64_t{hi} << 32) | lo;
  }

  CpuidReading r;
  const auto need = [](std::vector<std::string>& lacking, bool present, const char* name) {
    if (!present) lacking.emplace_back(name);
  };
  need(r.lacking_v2, bit(l1.ecx, 0), "sse3");
  need(r.lacking_v2, bit(l1.ecx, 9), "ssse3");
  need(r.lacking_v2, bit(l1.ecx, 13), "cx16");
  need(r.lacking_v2, bit(l1.ecx, 19), "sse4.1");
  need(r.lacking_v2, bit(l1.ecx, 20), "sse4.2");
  need(r.lacking_v2, bit(l1.ecx, 23), "popcnt");
  need(r.lacking_v2, bit(e1.ecx, 0), "lahf_lm");

  need(r.lacking_v3, bit(l1.ecx, 28), "avx");
  need(r.lacking_v3, bit(l7.ebx, 5), "avx2");
  need(r.lacking_v3, bit(l1.ecx, 12), "fma");
  need(r.lacking_v3, bit(l1.ecx, 29), "f16c");
  need(r.lacking_v3, bit(l7.ebx, 3), "bmi1");
  need(r.lacking_v3, bit(l7.ebx, 8), "bmi2");
  need(r.lacking_v3, bit(e1.ecx, 5), "lzcnt");
  need(r.lacking_v3, bit(l1.ecx, 22), "movbe");
  need(r.lacking_v3, osxsave, "osxsave");
  need(r.lacking_v3, (xcr0 & 0x6U) == 0x6U, "OS-saved YMM state (XCR0 bits 1-2)");

  need(r.lacking_v4, bit(l7.ebx, 16), "avx512f");
  need(r.lacking_v4, bit(l7.ebx, 30), "avx512bw");
  need(r.lacking_v4, bit(l7.ebx, 28), "avx512cd");
  need(r.lacking_v4, bit(l7.ebx, 17), "avx512dq");
  need(r.lacking_v4, bit(l7.ebx, 31), "avx512vl");
  need(r.lacking_v4, (xcr0 & 0xE6U) == 0xE6U, "OS-saved opmask and ZMM state (XCR0 bits 5-7)");
  return r;
}
#endif

}  // namespace specrun::test
