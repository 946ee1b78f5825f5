// Gathers of variable-size data to one rank over an MpiComm. Used for metadata (provenance
// records, JSON text) and each batch's results, never inside a decoding step: these calls are not
// added to the communicator's timing, which measures the decode collectives; its timeout
// (MpiComm::set_timeout) watches them.
#pragma once

#include <string>
#include <vector>

#include "dist/mpi_comm.h"

namespace specrun {

// Collective: every rank of `comm` calls it with its own string (any length, may be empty, may
// hold any bytes). On `root` returns comm.size() strings, rank r's string at index r; on every
// other rank returns an empty vector. Throws specrun::Error when root is out of range or the
// total size exceeds what one MPI_Gatherv can address (2 GiB).
std::vector<std::string> gather_strings(MpiComm& comm, const std::string& local, int root = 0);

}  // namespace specrun
