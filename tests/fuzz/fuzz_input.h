// Shared by the libFuzzer targets: the readers under test take paths, so each input is written
// to one temporary file per process (in $TMPDIR, /tmp by default) and handed over by name.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace specrun::fuzz {

// Writes `size` bytes to <TMPDIR>/specrun-fuzz-<pid>-<name> (replacing it) and returns the path.
inline const std::string& write_input(const char* name, const uint8_t* data, size_t size) {
  static const std::string path = [name] {
    const char* dir = std::getenv("TMPDIR");
    return std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/specrun-fuzz-" +
           std::to_string(getpid()) + "-" + name;
  }();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot create " + path);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return path;
}

// Counts the inputs the child check (src/common/isolated.h) refused, by kind, and prints the
// counts when the fuzzer exits: how often a mutated file crashed, hung or exhausted libhdf5.
inline void count_refusal(const std::string& message) {
  struct Counts {
    long crashed = 0, hung = 0, memory = 0, other = 0;
    Counts() {
      std::atexit([] {
        const Counts& c = counts();
        std::fprintf(stderr,
                     "refused by the child read: %ld crashed libhdf5, %ld hung it, %ld ran out of "
                     "memory, %ld failed otherwise\n",
                     c.crashed, c.hung, c.memory, c.other);
      });
    }
    static Counts& counts() {
      static Counts c;
      return c;
    }
  };
  if (message.find("is corrupt or unreadable") == std::string::npos) return;
  Counts& c = Counts::counts();
  if (message.find("crashed") != std::string::npos)
    ++c.crashed;
  else if (message.find("did not finish") != std::string::npos)
    ++c.hung;
  else if (message.find("memory") != std::string::npos)
    ++c.memory;
  else
    ++c.other;
}

}  // namespace specrun::fuzz
