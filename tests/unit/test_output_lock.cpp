// The lock a dataset job holds on its output (io/output_lock.h): a second holder is refused with
// a message naming the first (pid, host), a lock left by a killed process does not block, and
// the lock file goes when the holder releases it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>

#include "common/error.h"
#include "io/output_lock.h"
#include "temp_dir.h"

using namespace specrun;
namespace fs = std::filesystem;
using test::TempDir;

namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(OutputLock, SecondHolderIsRefusedNamingTheFirst) {
  TempDir dir;
  const std::string out = dir.file("data.h5");
  {
    OutputLock first = OutputLock::acquire(out, "job.output");
    EXPECT_TRUE(first.held());
    EXPECT_TRUE(fs::exists(OutputLock::lock_path(out)));
    // flock conflicts between two open descriptions even within one process.
    const std::string msg = error_of([&] { OutputLock::acquire(out, "job.output"); });
    EXPECT_NE(msg.find("job.output " + out + " is in use by another running job (pid " +
                       std::to_string(::getpid()) + " on host "),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find(OutputLock::lock_path(out)), std::string::npos) << msg;
  }
  EXPECT_FALSE(fs::exists(OutputLock::lock_path(out)));  // released and removed
  OutputLock again = OutputLock::acquire(out, "job.output");
  EXPECT_TRUE(again.held());
}

TEST(OutputLock, ALockLeftByAKilledProcessDoesNotBlock) {
  TempDir dir;
  const std::string out = dir.file("data.h5");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    try {
      OutputLock lock = OutputLock::acquire(out, "job.output");
      const char ok = 1;
      (void)!::write(ready[1], &ok, 1);
      ::pause();  // holds it until killed
    } catch (...) {
    }
    ::_exit(1);
  }
  ::close(ready[1]);
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ::close(ready[0]);
  const std::string msg = error_of([&] { OutputLock::acquire(out, "job.output"); });
  EXPECT_NE(msg.find("(pid " + std::to_string(child) + " on host "), std::string::npos) << msg;
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  // The file is still there (a SIGKILL removes nothing), the lock is not.
  EXPECT_TRUE(fs::exists(OutputLock::lock_path(out)));
  OutputLock lock = OutputLock::acquire(out, "job.output");
  EXPECT_TRUE(lock.held());
}
