// The memory bandwidth a backend's decoding is judged against (`specrun bench`, engine/bench.h):
// a pass over a buffer as large as this rank's weights, in the kind of memory the backend reads
// them from.
//   cpu   STREAM-like reads (cpu::stream_read) of a float32 buffer in anonymous memory (huge pages
//         where the kernel gives them; filled once, before the first pass), with `threads`
//         OpenMP threads: one probe per read kernel of every kernel variant this CPU runs;
//   cuda  a device-to-device copy (read + write) of at least 64 MiB on the context's stream
//         (DeviceCopyProbe): one probe.
// Bench picks the fastest as the bound. Built once per rank; a pass is timed by the caller.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace specrun {

class CudaContext;

class MemoryProbe {
 public:
  virtual ~MemoryProbe() = default;
  // One pass over the buffer, returned when it is done (on a device: synchronised).
  virtual void pass() = 0;
  // The bytes one pass moves on this rank (reads, plus writes for a copy).
  virtual double bytes() const = 0;
  // Where and how it reads, for the report: the kernel variant ("avx512"; "cuda") and the read
  // kernel ("wide+prefetch"; "device-to-device copy").
  virtual std::string isa() const = 0;
  virtual std::string kernel() const = 0;
};

// The probes of `backend` over `bytes` bytes (this rank's share of the weights); `cuda`: the
// rank's context on the CUDA backend (ModelFactory::cuda_context), nullptr on the CPU. Never
// empty.
std::vector<std::unique_ptr<MemoryProbe>> make_memory_probes(BackendKind backend, CudaContext* cuda,
                                                             std::size_t bytes, int threads);

}  // namespace specrun
