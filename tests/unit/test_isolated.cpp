// run_isolated (common/isolated.h): a read that crashes, hangs or runs out of memory in the child
// becomes a clear error in the parent, which keeps running; errors and results come back intact.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/isolated.h"

namespace specrun {
namespace {

std::string error_of(const std::function<std::string()>& read, double timeout_s = 0,
                     int* exit_code = nullptr) {
  try {
    run_isolated("/tmp/some-file.h5", "prompt file", read, timeout_s);
  } catch (const Error& e) {
    if (exit_code != nullptr) *exit_code = e.exit_code();
    return e.what();
  }
  return "(no error)";
}

TEST(Isolated, ReturnsWhatTheChildReturned) {
  std::string big(200000, 'x');  // more than a pipe buffer
  big[12345] = '\0';
  EXPECT_EQ(run_isolated("/tmp/f", "file", [] { return std::string("abc"); }), "abc");
  EXPECT_EQ(run_isolated("/tmp/f", "file", [&] { return big; }), big);
  EXPECT_EQ(run_isolated("/tmp/f", "file", [] { return std::string(); }), "");
}

TEST(Isolated, AnErrorInTheChildIsThrownAgainAsItWas) {
  try {
    run_isolated("/tmp/f", "file",
                 []() -> std::string { SPEC_INPUT_FAIL("prompts.h5: prompt 3 is bad"); });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "prompts.h5: prompt 3 is bad");
    EXPECT_NE(e.where().find("test_isolated.cpp"), std::string::npos) << e.where();
    EXPECT_EQ(e.exit_code(), kExitUsage);
  }
  try {
    run_isolated("/tmp/f", "file", []() -> std::string { SPEC_FAIL("disk on fire"); });
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.message(), "disk on fire");
    EXPECT_EQ(e.exit_code(), kExitFailure);
  }
}

TEST(Isolated, ACrashInTheChildIsAnErrorNamingTheFile) {
  int code = 0;
  const std::string msg = error_of(
      []() -> std::string {
        std::raise(SIGSEGV);
        return "";
      },
      0, &code);
  EXPECT_NE(msg.find("prompt file /tmp/some-file.h5 is corrupt or unreadable: reading it "
                     "crashed the HDF5 library (signal 11"),
            std::string::npos)
      << msg;
  EXPECT_EQ(code, kExitUsage);
  EXPECT_NE(error_of([]() -> std::string { std::abort(); }).find("signal 6"), std::string::npos);
}

TEST(Isolated, AHangInTheChildEndsAtTheTimeLimit) {
  const std::string msg = error_of(
      []() -> std::string {
        volatile int spin = 0;
        for (;;) spin = spin + 1;
      },
      0.3);
  EXPECT_NE(msg.find("reading it did not finish within 0.3 s"), std::string::npos) << msg;
}

TEST(Isolated, OtherExceptionsAndExitsAreErrorsToo) {
  EXPECT_NE(error_of([]() -> std::string {
              throw std::runtime_error("x");
            }).find("is corrupt or unreadable: reading it failed"),
            std::string::npos);
  EXPECT_NE(error_of([]() -> std::string { std::_Exit(5); }).find("exit status 5"),
            std::string::npos);
}

#if !defined(__SANITIZE_ADDRESS__)
TEST(Isolated, UnboundedAllocationHitsTheChildsBudget) {
  // The budget is 4 GiB beyond what the process maps: 64 GiB in 1 GiB steps cannot fit.
  const std::string msg = error_of([]() -> std::string {
    // Mapped, never touched: the address-space limit refuses it without using the memory.
    std::vector<std::unique_ptr<char[]>> hog;
    for (int i = 0; i < 64; ++i) hog.emplace_back(new char[std::size_t{1} << 30]);
    return "";
  });
  EXPECT_NE(msg.find("more memory than its budget"), std::string::npos) << msg;
}
#endif

TEST(Isolated, TheTimeLimitScalesWithTheFileAndHonoursTheEnvironment) {
  unsetenv("SPECRUN_READ_CHECK_TIMEOUT_S");
  EXPECT_DOUBLE_EQ(isolation_timeout_s("/nonexistent"), 60.0);
  setenv("SPECRUN_READ_CHECK_TIMEOUT_S", "2.5", 1);
  EXPECT_DOUBLE_EQ(isolation_timeout_s("/nonexistent"), 2.5);
  setenv("SPECRUN_READ_CHECK_TIMEOUT_S", "nonsense", 1);
  EXPECT_DOUBLE_EQ(isolation_timeout_s("/nonexistent"), 60.0);
  unsetenv("SPECRUN_READ_CHECK_TIMEOUT_S");
}

}  // namespace
}  // namespace specrun
