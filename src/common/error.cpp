#include "common/error.h"

#include <mpi.h>
#include <unistd.h>

namespace specrun {

Error::Error(std::string message, std::string where, int exit_code)
    : std::runtime_error(where.empty() ? message : where + ": " + message),
      message_(std::move(message)),
      where_(std::move(where)),
      exit_code_(exit_code) {}

std::string process_label() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    return "rank " + std::to_string(rank) + "@" + host;
  }
  return std::string("host ") + host;
}

void throw_error(const char* file, int line, const char* call, const std::string& msg,
                 int exit_code) {
  std::string file_name = file;
  // Keep paths relative to the repository: "src/model/x.cpp", not the build machine's prefix.
  for (const char* top : {"/src/", "/kernels/", "/tests/"}) {
    auto pos = file_name.rfind(top);
    if (pos != std::string::npos) {
      file_name = file_name.substr(pos + 1);
      break;
    }
  }
  std::string where = "[" + process_label() + "] " + file_name + ":" + std::to_string(line);
  if (call != nullptr && call[0] != '\0') where += " (" + std::string(call) + ")";
  throw Error(msg, where, exit_code);
}

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, len);
}

}  // namespace specrun
