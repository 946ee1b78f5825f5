#include "io/output_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "common/clock.h"
#include "common/error.h"

namespace specrun {

namespace {

std::string read_all(int fd) {
  std::string text;
  char buf[512];
  ssize_t n = 0;
  ::lseek(fd, 0, SEEK_SET);
  while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<std::size_t>(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

}  // namespace

std::string OutputLock::lock_path(const std::string& output) {
  return output + ".lock";
}

OutputLock OutputLock::acquire(const std::string& output, const std::string& what) {
  const std::string path = lock_path(output);
  // The lock belongs to the file the name points at when we hold it: a holder that removes the
  // file as it releases can leave us locking an unlinked inode, so compare and retry.
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    SPEC_INPUT_CHECK(fd >= 0, "cannot open the lock file " << path << " of " << what << " "
                                                           << output << ": "
                                                           << std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      std::string holder = err == EWOULDBLOCK ? read_all(fd) : "";
      ::close(fd);
      SPEC_INPUT_CHECK(err == EWOULDBLOCK, "cannot lock " << path << ": " << std::strerror(err));
      if (holder.empty()) holder = "a job that has not written its name yet";
      SPEC_INPUT_FAIL(what << " " << output << " is in use by another running job (" << holder
                           << "; lock file " << path
                           << "): wait for it to end, stop it, or choose another " << what);
    }
    struct stat held {
    }, named{};
    if (::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 &&
        held.st_ino == named.st_ino && held.st_dev == named.st_dev) {
      char host[256] = {0};
      ::gethostname(host, sizeof(host) - 1);
      const std::string text = "pid " + std::to_string(::getpid()) + " on host " + host +
                               ", since " + utc_timestamp() + "\n";
      if (::ftruncate(fd, 0) != 0 ||
          ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
        // The lock holds without its text; another job's message is then less specific.
      }
      OutputLock lock;
      lock.path_ = path;
      lock.fd_ = fd;
      return lock;
    }
    ::close(fd);  // the file was replaced or removed between open and flock: again
  }
  SPEC_INPUT_FAIL("cannot lock " << path << ": it keeps being replaced by another process");
}

OutputLock::~OutputLock() {
  release();
}

OutputLock::OutputLock(OutputLock&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

OutputLock& OutputLock::operator=(OutputLock&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void OutputLock::release() {
  if (fd_ < 0) return;
  // Removed while still held, so that no other job locks the file we are about to drop.
  ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

}  // namespace specrun
