// Shared by the libFuzzer targets: the readers under test take paths, so each input is written
// to one temporary file per process (in $TMPDIR, /tmp by default) and handed over by name.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
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

}  // namespace specrun::fuzz
