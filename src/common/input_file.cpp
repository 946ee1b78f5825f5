#include "common/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace specrun {

namespace {

const char* file_type(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::string read_input_file(const std::string& path, const InputFileKind& kind) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; it changes nothing
  // for the regular files read below.
  const Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  SPEC_INPUT_CHECK(fd.get() >= 0,
                   "cannot open " << kind.what << " " << path << ": " << std::strerror(errno));
  struct stat st {};
  SPEC_INPUT_CHECK(::fstat(fd.get(), &st) == 0,
                   "cannot stat " << kind.what << " " << path << ": " << std::strerror(errno));
  SPEC_INPUT_CHECK(S_ISREG(st.st_mode), kind.what << " " << path << " is " << file_type(st.st_mode)
                                                  << ", not a regular file: refused (a FIFO or a "
                                                     "device would be read without end)");
  const auto too_large = [&](const char* bytes) {
    SPEC_INPUT_FAIL(kind.what << " " << path << " is " << bytes << " bytes, more than the limit of "
                              << kind.max_bytes / kMiB << " MiB for a " << kind.what
                              << " (real ones are far smaller: is it the right file?)");
  };
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > kind.max_bytes) too_large(std::to_string(size).c_str());
  // Reads to the end, at most one byte past the limit (the file may grow meanwhile).
  const std::size_t cap = static_cast<std::size_t>(kind.max_bytes) + 1;
  std::string text(static_cast<std::size_t>(size), '\0');
  std::size_t done = 0;
  for (;;) {
    if (done == text.size()) {
      if (done == cap) too_large(("over " + std::to_string(kind.max_bytes)).c_str());
      text.resize(std::min(cap, done + 64 * 1024));
    }
    const ssize_t got = ::read(fd.get(), text.data() + done, text.size() - done);
    if (got < 0 && errno == EINTR) continue;
    SPEC_INPUT_CHECK(got >= 0,
                     "cannot read " << kind.what << " " << path << ": " << std::strerror(errno));
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  text.resize(done);
  return text;
}

bool input_exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

}  // namespace specrun
