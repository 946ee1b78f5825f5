#include "kernels/cpu/isa.h"

#include <fstream>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "generated/cpu_baseline.h"

namespace specrun::cpu {

namespace {

// One CPU feature a variant needs: its name as /proc/cpuinfo and GCC's __builtin_cpu_supports
// spell it (the builtin wants a literal, hence the macro), and whether this CPU has it. The
// builtin also checks that the OS saves the feature's registers (XCR0), as AVX needs.
struct Feature {
  const char* name;
  bool (*present)();
};
#define SPECRUN_FEATURE(literal)                                 \
  Feature {                                                      \
    literal, [] { return __builtin_cpu_supports(literal) != 0; } \
  }

#if defined(__x86_64__) && defined(__clang__) && __clang_major__ < 19
// Clang before 19 knows neither the -march levels nor f16c, lzcnt and movbe by these names: the
// three are read from CPUID, and a level counts as present when every feature listed for it and
// the levels below is (cpu_supports checks those too).
bool cpuid_bit(unsigned leaf, int reg, int bit) {
  unsigned r[4] = {0, 0, 0, 0};
  if (__get_cpuid(leaf, &r[0], &r[1], &r[2], &r[3]) == 0) return false;
  return ((r[reg] >> bit) & 1U) != 0;
}
#define SPECRUN_LEVEL(literal)   \
  Feature {                      \
    literal, [] { return true; } \
  }
#define SPECRUN_CPUID_FEATURE(literal, leaf, reg, bit) \
  Feature {                                            \
    literal, [] { return cpuid_bit(leaf, reg, bit); }  \
  }
#else
#define SPECRUN_LEVEL(literal) SPECRUN_FEATURE(literal)
#define SPECRUN_CPUID_FEATURE(literal, leaf, reg, bit) SPECRUN_FEATURE(literal)
#endif

// A variant, the -march level it is compiled for (checked as a whole by GCC, which knows every
// feature of the level) and that level's features beyond the one below, listed in messages.
struct IsaRequirement {
  Isa isa;
  Feature level;
  std::vector<Feature> features;
};

const std::vector<IsaRequirement>& requirements() {
#if defined(__x86_64__)
  static const std::vector<IsaRequirement> table = {
      // (baseline_check.cpp has checked the baseline's features before main)
      {Isa::kBaseline, {"baseline", [] { return true; }}, {}},
      {Isa::kAvx2,
       SPECRUN_LEVEL("x86-64-v3"),
       {SPECRUN_FEATURE("avx"), SPECRUN_FEATURE("avx2"), SPECRUN_FEATURE("fma"),
        SPECRUN_CPUID_FEATURE("f16c", 1, 2, 29), SPECRUN_FEATURE("bmi"), SPECRUN_FEATURE("bmi2"),
        SPECRUN_CPUID_FEATURE("lzcnt", 0x80000001U, 2, 5),
        SPECRUN_CPUID_FEATURE("movbe", 1, 2, 22)}},
      {Isa::kAvx512,
       SPECRUN_LEVEL("x86-64-v4"),
       {SPECRUN_FEATURE("avx512f"), SPECRUN_FEATURE("avx512bw"), SPECRUN_FEATURE("avx512cd"),
        SPECRUN_FEATURE("avx512dq"), SPECRUN_FEATURE("avx512vl")}},
  };
#else
  static const std::vector<IsaRequirement> table = {
      {Isa::kBaseline, {"baseline", [] { return true; }}, {}}};
#endif
  return table;
}
#undef SPECRUN_FEATURE
#undef SPECRUN_LEVEL
#undef SPECRUN_CPUID_FEATURE

const IsaRequirement* find(Isa isa) {
  for (const IsaRequirement& r : requirements())
    if (r.isa == isa) return &r;
  return nullptr;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kBaseline:
      return "baseline";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (Isa isa : {Isa::kBaseline, Isa::kAvx2, Isa::kAvx512})
    if (name == isa_name(isa)) return isa;
  return std::nullopt;
}

const std::vector<Isa>& built_isas() {
  static const std::vector<Isa> isas = [] {
    std::vector<Isa> v;
    for (const IsaRequirement& r : requirements()) v.push_back(r.isa);
    return v;
  }();
  return isas;
}

std::string missing_features(Isa isa) {
  const IsaRequirement* r = find(isa);
  if (r == nullptr)
    return std::string("(") + isa_name(isa) + " is not built for this architecture)";
  __builtin_cpu_init();
  std::string missing;
  // The levels below first: a variant needs everything its predecessors need.
  for (const IsaRequirement& lower : requirements()) {
    for (const Feature& f : lower.features)
      if (!f.present()) missing += (missing.empty() ? "" : " ") + std::string(f.name);
    if (lower.isa == isa) break;
  }
  if (missing.empty() && !r->level.present()) missing = r->level.name;  // e.g. xsave, lahf_lm
  return missing;
}

bool cpu_supports(Isa isa) {
  const IsaRequirement* r = find(isa);
  if (r == nullptr) return false;
  __builtin_cpu_init();
  // The level check alone suffices with GCC; the listed features make it exact with clang too.
  return r->level.present() && missing_features(isa).empty();
}

Isa best_isa() {
  Isa best = built_isas().front();
  for (Isa isa : built_isas())
    if (cpu_supports(isa)) best = isa;
  return best;
}

const char* baseline_arch() {
  return SPECRUN_BASELINE_ARCH;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const auto start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "unknown" : line.substr(start);
  }
  return "unknown";
}

}  // namespace specrun::cpu
