// The CPU backend's memory probes (backend/memory_probe.h), the reference `specrun bench` judges
// its cases' bandwidth against: one per read kernel of every kernel variant this CPU runs, each
// over the whole buffer, named as the report prints them.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <utility>

#include "backend/memory_probe.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops.h"

using namespace specrun;

TEST(MemoryProbe, CpuProbesEveryReadKernelOfEverySupportedVariant) {
  constexpr std::size_t kBytes = std::size_t{1} << 20;
  const auto probes = make_memory_probes(BackendKind::kCpu, nullptr, kBytes, 1);
  std::set<std::pair<std::string, std::string>> want;
  for (cpu::Isa isa : cpu::built_isas())
    if (cpu::cpu_supports(isa))
      for (int k = 0; k < cpu::kReadKernels; ++k)
        want.insert({cpu::isa_name(isa), cpu::read_kernel_name(k)});
  ASSERT_FALSE(want.empty());
  std::set<std::pair<std::string, std::string>> got;
  for (const auto& p : probes) {
    got.insert({p->isa(), p->kernel()});
    EXPECT_DOUBLE_EQ(p->bytes(), static_cast<double>(kBytes)) << p->isa() << " " << p->kernel();
    p->pass();
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(probes.size(), want.size()) << "each probe once";
}
