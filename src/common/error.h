// One error type for the whole library, and the family of check macros built on one generic
// macro. Every error carries the rank and host it happened on, file:line, the failing call as
// text and a message that says what to do. Library code throws; src/app/main.cpp catches,
// prints and calls MPI_Abort so that no rank hangs.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace specrun {

// Exit codes used by main.
inline constexpr int kExitFailure = 1;     // runtime failure
inline constexpr int kExitUsage = 2;       // bad command line, configuration or input file
inline constexpr int kExitRegression = 1;  // `compare` found a regression

class Error : public std::runtime_error {
 public:
  // what() is the full formatted text; message() is the bare message.
  Error(std::string message, std::string where, int exit_code);
  const std::string& message() const { return message_; }
  const std::string& where() const { return where_; }
  int exit_code() const { return exit_code_; }

 private:
  std::string message_;
  std::string where_;
  int exit_code_;
};

// An error every rank of MPI_COMM_WORLD raises together, having agreed on it (e.g. rank 0's bad
// job file, broadcast to all): one rank reports it (report() true on one rank only) and every
// rank exits with its code through MPI_Finalize, so that the message appears once, not once per
// rank. main() handles it (a barrier on MPI_COMM_WORLD, then exit).
class CollectiveError : public Error {
 public:
  CollectiveError(const Error& error, bool report) : Error(error), report_(report) {}
  bool report() const { return report_; }

 private:
  bool report_;
};

// Rank and host of this process: "rank 3@node07", or "host node07" before MPI is up. Asks MPI
// each time (no global rank).
std::string process_label();

[[noreturn]] void throw_error(const char* file, int line, const char* call, const std::string& msg,
                              int exit_code);

}  // namespace specrun

#define SPEC_STRINGIFY_MSG_(msg) \
  (static_cast<std::ostringstream&&>(std::ostringstream() << msg).str())

// The generic check: `ok` is evaluated once; on failure throws specrun::Error naming `call`.
#define SPEC_CHECK_GEN_(ok, call, msg, code)                                                     \
  do {                                                                                           \
    if (!(ok)) ::specrun::throw_error(__FILE__, __LINE__, call, SPEC_STRINGIFY_MSG_(msg), code); \
  } while (0)

// SPEC_CHECK(cond, "message " << value): internal invariant or input check (exit code 1).
#define SPEC_CHECK(cond, msg) SPEC_CHECK_GEN_((cond), #cond, msg, ::specrun::kExitFailure)
// SPEC_INPUT_CHECK: the user's input (config, files, command line) is wrong (exit code 2).
#define SPEC_INPUT_CHECK(cond, msg) SPEC_CHECK_GEN_((cond), #cond, msg, ::specrun::kExitUsage)
// SPEC_FAIL / SPEC_INPUT_FAIL: unconditional.
#define SPEC_FAIL(msg) \
  ::specrun::throw_error(__FILE__, __LINE__, "", SPEC_STRINGIFY_MSG_(msg), ::specrun::kExitFailure)
#define SPEC_INPUT_FAIL(msg) \
  ::specrun::throw_error(__FILE__, __LINE__, "", SPEC_STRINGIFY_MSG_(msg), ::specrun::kExitUsage)

// MPI_CHECK(MPI_Allreduce(...)): message from MPI_Error_string.
#define MPI_CHECK(call)                                                                            \
  do {                                                                                             \
    int spec_mpi_rc_ = (call);                                                                     \
    SPEC_CHECK_GEN_(spec_mpi_rc_ == MPI_SUCCESS, #call, ::specrun::mpi_error_string(spec_mpi_rc_), \
                    ::specrun::kExitFailure);                                                      \
  } while (0)

// H5_CHECK(H5Dwrite(...)): negative return values are failures (herr_t and hid_t alike).
#define H5_CHECK(call, msg)                                                 \
  ([&]() {                                                                  \
    auto spec_h5_rc_ = (call);                                              \
    SPEC_CHECK_GEN_(spec_h5_rc_ >= 0, #call, msg, ::specrun::kExitFailure); \
    return spec_h5_rc_;                                                     \
  }())

namespace specrun {
std::string mpi_error_string(int code);
}
