#include "dist/gather.h"

#include <climits>
#include <cstdint>

#include "common/error.h"

namespace specrun {

std::vector<std::string> gather_strings(MpiComm& comm, const std::string& local, int root) {
  const int size = comm.size();
  SPEC_CHECK(root >= 0 && root < size,
             "gather_strings: root " << root << " is outside the communicator of size " << size);
  SPEC_CHECK(local.size() <= static_cast<std::size_t>(INT_MAX),
             "gather_strings: a string of " << local.size() << " bytes is too large for MPI");
  const bool is_root = comm.rank() == root;
  // Both steps under the communicator's watchdog (a stopped rank fails the job, not hangs it).
  const MpiComm::Watched watched(comm, "gather");

  // Step 1: every rank's length to root, so that root can size the receive buffer.
  int local_len = static_cast<int>(local.size());
  std::vector<int> lengths(is_root ? size : 0);
  MPI_CHECK(MPI_Gather(&local_len, 1, MPI_INT, is_root ? lengths.data() : nullptr, 1, MPI_INT, root,
                       comm.handle()));

  // Step 2: the bytes themselves, concatenated in rank order.
  std::vector<int> displs(is_root ? size : 0);
  std::int64_t total = 0;
  if (is_root) {
    for (int r = 0; r < size; ++r) {
      SPEC_CHECK(total <= INT_MAX, "gather_strings: " << total << " bytes gathered so far exceed "
                                                      << "the 2 GiB one MPI_Gatherv can address");
      displs[r] = static_cast<int>(total);
      total += lengths[r];
    }
    SPEC_CHECK(total <= INT_MAX, "gather_strings: " << total << " bytes in all exceed the 2 GiB "
                                                    << "one MPI_Gatherv can address");
  }
  std::string buffer(static_cast<std::size_t>(total), '\0');
  // MPI wants a non-const send buffer in older bindings; it does not write to it.
  MPI_CHECK(MPI_Gatherv(const_cast<char*>(local.data()), local_len, MPI_BYTE,
                        is_root ? buffer.data() : nullptr, is_root ? lengths.data() : nullptr,
                        is_root ? displs.data() : nullptr, MPI_BYTE, root, comm.handle()));

  std::vector<std::string> out;
  if (!is_root) return out;
  out.reserve(size);
  for (int r = 0; r < size; ++r) out.emplace_back(buffer, displs[r], lengths[r]);
  return out;
}

}  // namespace specrun
