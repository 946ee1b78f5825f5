#include "common/atomic_output.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

#include "common/error.h"

namespace specrun {

namespace {

constexpr std::size_t kBufferBytes = std::size_t{1} << 20;
constexpr int kCreateTries = 16;

std::string folder_of(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

std::string name_of(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

long name_max(const std::string& dir) {
  errno = 0;
  const long n = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  return n > 0 ? n : NAME_MAX;
}

// What an errno means for a file being written, with advice; the exit code: the user's choice of
// path (2) or the machine (a full disk, an I/O error: 1).
std::pair<std::string, int> write_failure(int err, const std::string& dir) {
  switch (err) {
    case EACCES:
    case EPERM:
      return {"permission denied: the folder " + dir +
                  " is not writable by this user (choose another path, or change its "
                  "permissions)",
              kExitUsage};
    case EROFS:
      return {"the file system holding " + dir + " is read-only (choose another path)", kExitUsage};
    case ENAMETOOLONG:
      return {"the name is too long for the file system (at most " + std::to_string(name_max(dir)) +
                  " bytes a name, " + std::to_string(PATH_MAX - 1) +
                  " a path): choose a shorter one",
              kExitUsage};
    case ENOENT:
      return {"the folder " + dir + " does not exist (create it first)", kExitUsage};
    case ENOTDIR:
      return {"a component of the path is not a folder", kExitUsage};
    case ELOOP:
      return {
          "it is a symbolic link, and specrun does not write through links (remove the link "
          "or choose another path)",
          kExitUsage};
    case ENOSPC:
      return {"no space left on the device (disk full)", kExitFailure};
    case EDQUOT:
      return {"the disk quota is exhausted", kExitFailure};
    case EFBIG:
      return {"the file exceeds the largest size allowed (ulimit -f, or the file system's limit)",
              kExitFailure};
    default:
      return {std::strerror(err), kExitFailure};
  }
}

[[noreturn]] void fail_writing(const OutputPolicy& policy, const std::string& path, int err,
                               const std::string& doing = "") {
  const auto [reason, code] = write_failure(err, folder_of(path));
  throw_error(__FILE__, __LINE__, doing.c_str(),
              "cannot write " + policy.what + " " + path + ": " + reason +
                  (code == kExitFailure ? "; " + path + " was left as it was" : std::string()),
              code);
}

[[noreturn]] void refuse(const OutputPolicy& policy, const std::string& path,
                         const std::string& why) {
  throw_error(__FILE__, __LINE__, "", policy.what + " " + path + " " + why, kExitUsage);
}

// The checks on the target itself, before the work and again just before the rename.
void check_target(const std::string& path, const OutputPolicy& policy) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) fail_writing(policy, path, errno);
    return;
  }
  if (S_ISLNK(st.st_mode))
    refuse(policy, path,
           "is a symbolic link, and specrun does not write through links (remove the link or "
           "choose another path)");
  if (!S_ISREG(st.st_mode))
    refuse(policy, path, "exists and is not a regular file (a folder, a fifo or a device)");
  for (const std::string& input : policy.inputs) {
    std::string same = same_file(path, input) ? input : "";
    std::error_code ec;
    if (same.empty() && std::filesystem::is_directory(input, ec))
      for (const auto& entry : std::filesystem::directory_iterator(input, ec))
        if (same_file(path, entry.path().string())) same = entry.path().string();
    if (!same.empty())
      refuse(policy, path,
             "is " +
                 (same == path ? std::string("one of this command's inputs")
                               : "the same file as " + same +
                                     ", one of this command's "
                                     "inputs") +
                 ": writing it would destroy what is being read; choose another path");
  }
  if (!policy.overwrite) refuse(policy, path, "already exists; pass --overwrite to replace it");
}

std::string random_suffix() {
  std::uint64_t r = 0;
  if (::getrandom(&r, sizeof r, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof r))
    r = static_cast<std::uint64_t>(::getpid()) * 0x9e3779b97f4a7c15ull ^
        static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&r));
  static const char kHex[] = "0123456789abcdef";
  std::string s(8, '0');
  for (char& c : s) {
    c = kHex[r & 15];
    r >>= 4;
  }
  return s;
}

void fsync_folder(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // the rename is done; a folder we cannot open cannot be synced either
  (void)::fsync(fd);   // EINVAL on file systems without directory fsync
  ::close(fd);
}

}  // namespace

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

void check_output_path(const std::string& path, const OutputPolicy& policy) {
  if (path.empty()) refuse(policy, "\"\"", "is an empty path; name a file");
  const std::string name = name_of(path);
  if (name.empty() || name == "." || name == "..")
    refuse(policy, path, "names a folder; name a file in it");
  const std::string dir = folder_of(path);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 && errno == ENOENT && policy.creates_folder) {
    // The folder will be made: the nearest existing ancestor must be a writable folder.
    std::filesystem::path up = std::filesystem::path(dir).lexically_normal();
    while (up.has_relative_path() && ::stat(up.c_str(), &st) != 0 && errno == ENOENT)
      up = up.has_parent_path() && up.parent_path() != up ? up.parent_path() : ".";
    const std::string ancestor = up.empty() ? "." : up.string();
    if (::stat(ancestor.c_str(), &st) != 0) fail_writing(policy, path, errno);
    if (!S_ISDIR(st.st_mode))
      refuse(policy, path, "cannot be written: " + ancestor + " is not a folder");
    if (::faccessat(AT_FDCWD, ancestor.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
      const int err = errno;
      const auto [reason, code] = write_failure(err, ancestor);
      throw_error(__FILE__, __LINE__, "faccessat",
                  "cannot write " + policy.what + " " + path + ": " + reason, code);
    }
    return;
  }
  if (::stat(dir.c_str(), &st) != 0) fail_writing(policy, path, errno);
  if (!S_ISDIR(st.st_mode)) refuse(policy, path, "cannot be written: " + dir + " is not a folder");
  const long max = name_max(dir);
  if (static_cast<long>(name.size()) > max)
    refuse(policy, path,
           "has a name of " + std::to_string(name.size()) + " bytes, and the file system allows " +
               std::to_string(max) + ": choose a shorter name");
  check_target(path, policy);
  if (::faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) != 0)
    fail_writing(policy, path, errno);
}

AtomicOutput::AtomicOutput(std::string path, OutputPolicy policy)
    : path_(std::move(path)), policy_(std::move(policy)) {
  check_output_path(path_, policy_);
  const std::string dir = folder_of(path_);
  // The temporary name is longer than the target's: shorten its copy of the name if needed.
  std::string name = name_of(path_);
  const std::size_t extra = 1 + 1 + 8 + 4;  // ".", ".", 8 hex digits, ".tmp"
  const std::size_t max = static_cast<std::size_t>(name_max(dir));
  if (name.size() + extra > max) name.resize(max > extra ? max - extra : 0);
  for (int attempt = 0; attempt < kCreateTries; ++attempt) {
    const std::string tmp =
        (std::filesystem::path(dir) / ("." + name + "." + random_suffix() + ".tmp")).string();
    fd_ = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd_ >= 0) {
      tmp_ = tmp;
      return;
    }
    if (errno != EEXIST) fail_writing(policy_, path_, errno, "open(O_CREAT | O_EXCL)");
  }
  fail_writing(policy_, path_, EEXIST, "open(O_CREAT | O_EXCL)");
}

AtomicOutput::~AtomicOutput() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicOutput::write(std::string_view bytes) {
  SPEC_CHECK(!committed_ && fd_ >= 0, "AtomicOutput::write on " << path_ << " after commit");
  if (buffer_.size() + bytes.size() > kBufferBytes) flush();
  if (bytes.size() >= kBufferBytes)
    write_all(bytes);
  else
    buffer_.append(bytes);
}

void AtomicOutput::write(const void* data, std::size_t bytes) {
  write(std::string_view(static_cast<const char*>(data), bytes));
}

void AtomicOutput::write_all(std::string_view bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_writing(policy_, path_, errno, "write");
    done += static_cast<std::size_t>(n);
  }
}

void AtomicOutput::flush() {
  write_all(buffer_);
  buffer_.clear();
}

void AtomicOutput::commit() {
  SPEC_CHECK(!committed_ && fd_ >= 0, "AtomicOutput::commit on " << path_ << " twice");
  flush();
  if (::fsync(fd_) != 0) fail_writing(policy_, path_, errno, "fsync");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail_writing(policy_, path_, errno, "close");
  // Again: a link, a folder or a file may have appeared at the path while this one was written.
  check_target(path_, policy_);
  if (policy_.overwrite) {
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail_writing(policy_, path_, errno, "rename");
  } else if (::renameat2(AT_FDCWD, tmp_.c_str(), AT_FDCWD, path_.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == EEXIST)
      refuse(policy_, path_, "was created by another process while this one was written");
    if (errno != EINVAL && errno != ENOSYS) fail_writing(policy_, path_, errno, "renameat2");
    // A file system without RENAME_NOREPLACE: link() refuses an existing target too.
    if (::link(tmp_.c_str(), path_.c_str()) != 0) {
      if (errno == EEXIST)
        refuse(policy_, path_, "was created by another process while this one was written");
      fail_writing(policy_, path_, errno, "link");
    }
    ::unlink(tmp_.c_str());
  }
  committed_ = true;
  fsync_folder(folder_of(path_));
}

void write_file_atomically(const std::string& path, std::string_view content,
                           const OutputPolicy& policy) {
  AtomicOutput out(path, policy);
  out.write(content);
  out.commit();
}

int open_append_output(const std::string& path) {
  OutputPolicy policy;
  policy.what = "log file";
  // O_NONBLOCK: a fifo without a reader fails at once (ENXIO) instead of blocking the open.
  const int fd = ::open(path.c_str(),
                        O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd < 0) {
    if (errno == ENXIO) refuse(policy, path, "exists and is not a regular file (a fifo)");
    fail_writing(policy, path, errno, "open(O_APPEND | O_NOFOLLOW)");
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    refuse(policy, path, "exists and is not a regular file (a folder, a fifo or a device)");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

void create_output_folder(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec.value() == EEXIST || ec.value() == ENOTDIR)
    throw_error(__FILE__, __LINE__, "create_directories",
                "cannot create the output folder " + dir + ": a file is in the way of its path",
                kExitUsage);
  if (ec) {
    const auto [reason, code] = write_failure(
        ec.value(), folder_of(std::filesystem::path(dir).lexically_normal().string()));
    throw_error(__FILE__, __LINE__, "create_directories",
                "cannot create the output folder " + dir + ": " + reason, code);
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw_error(__FILE__, __LINE__, "",
                "cannot create the output folder " + dir + ": a file of that name is in the way",
                kExitUsage);
}

}  // namespace specrun
