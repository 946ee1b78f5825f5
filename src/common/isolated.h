// Reading untrusted files whose library may crash or hang on them. libhdf5 1.10 crashes
// (SIGSEGV), hangs or allocates without bound on some corrupted files, inside its own code where
// no check of ours can run first (docs/reliability.md). So a file from the user is read once in
// a forked child process: when the child crashes, hangs past a time limit or runs out of memory,
// the caller gets a clear specrun::Error naming the file instead of a dead or hung rank, and
// reads the file itself only when the child could.
#pragma once

#include <functional>
#include <string>

namespace specrun {

// Runs `read` in a child process and returns the string it returned. A specrun::Error thrown in
// the child is thrown again here with the same message, location and exit code. A child that
// dies by a signal, exits otherwise, takes longer than `timeout_s` (<= 0: isolation_timeout_s)
// or needs more than its memory budget (isolation_memory_bytes) throws specrun::Error (exit
// code 2): "<what> <path> is corrupt or unreadable: ...". `what` names the file's kind ("prompt
// file"). Call it where no other thread is inside libhdf5 (the child has only the calling
// thread).
std::string run_isolated(const std::string& path, const std::string& what,
                         const std::function<std::string()>& read, double timeout_s = 0);

// The default time limit: SPECRUN_READ_CHECK_TIMEOUT_S when set, else 60 s plus 1 s per 20 MB of
// the file (slow shared file systems).
double isolation_timeout_s(const std::string& path);
// The child's address-space budget beyond what the process has mapped already: 4 GiB plus 16
// bytes per byte of the file (not enforced in sanitizer builds, whose shadow memory it would
// break).
long long isolation_memory_bytes(const std::string& path);

}  // namespace specrun
