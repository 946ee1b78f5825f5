// Linked into every unit test: when SPECRUN_CPU_ISA names a kernel variant this CPU lacks, its
// kernels cannot run here, and the test program exits with 77 before the first test, which
// ctest reports as skipped (SKIP_RETURN_CODE; GTEST_SKIP in an environment would read as
// passed); otherwise the variant is selected before the first test and checked to be the one in
// use. ctest runs the kernel tests once per variant this way (tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "kernels/cpu/dispatch.h"

namespace {

constexpr int kSkipExitCode = 77;

class IsaEnvironment : public testing::Environment {
 public:
  void SetUp() override {
    const char* request = std::getenv(specrun::cpu::kIsaEnvironmentVariable);
    if (request == nullptr || *request == '\0') return;
    const auto isa = specrun::cpu::parse_isa(request);
    if (isa && specrun::cpu::kernels_for(*isa) != nullptr && !specrun::cpu::cpu_supports(*isa)) {
      std::printf(
          "SKIPPED: SPECRUN_CPU_ISA=%s: this CPU (%s) lacks %s, so these kernels cannot "
          "run here\n",
          request, specrun::cpu::cpu_model_name().c_str(),
          specrun::cpu::missing_features(*isa).c_str());
      std::fflush(stdout);
      std::exit(kSkipExitCode);
    }
    // An unknown name throws here, and every test fails with its message.
    const specrun::cpu::KernelChoice& choice = specrun::cpu::select_kernels();
    ASSERT_EQ(std::string(specrun::cpu::isa_name(choice.isa)), request);
    ASSERT_TRUE(choice.forced);
  }
};

[[maybe_unused]] testing::Environment* const kIsaEnvironment =
    testing::AddGlobalTestEnvironment(new IsaEnvironment);

}  // namespace
