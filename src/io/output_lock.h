// An exclusive claim on a job's output while the job runs: two jobs writing the same output would
// delete or rename each other's files. The claim is an flock(2) on "<output>.lock" (beside the
// output), which records the holder's pid, host and start time for the other job's error
// message. The kernel releases an flock when its process dies however it dies (SIGKILL
// included), so a lock file left by a dead job never blocks the next one; on NFS, Linux maps
// flock to a POSIX lock, which the server releases when the client's lease expires.
#pragma once

#include <string>

namespace specrun {

class OutputLock {
 public:
  // Takes the lock of `output` or throws (exit code 2) naming the job that holds it (pid, host,
  // since). `what` names the output in messages ("job.output").
  static OutputLock acquire(const std::string& output, const std::string& what);
  // "<output>.lock".
  static std::string lock_path(const std::string& output);

  OutputLock() = default;
  ~OutputLock();  // removes the lock file and releases the lock
  OutputLock(OutputLock&& other) noexcept;
  OutputLock& operator=(OutputLock&& other) noexcept;
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

  bool held() const { return fd_ >= 0; }

 private:
  void release();
  std::string path_;
  int fd_ = -1;
};

}  // namespace specrun
