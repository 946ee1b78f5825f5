// Run-time choice of the CPU kernel variant (isa.h), once per process.
//
// Every kernel of kernel_api.inc is compiled once per variant (kernels/cpu/CMakeLists.txt: one
// object library per variant, from the same sources, with its own -march flags and its own
// namespace specrun::cpu::<variant>, variant.h); each variant exports one KernelTable of
// pointers to its kernels. The entry points of ops.h (specrun::cpu::matmul, ...) forward to the
// table chosen here: SPECRUN_CPU_ISA when set (to test a lower variant, or to avoid a fast path
// that misbehaves on some node), otherwise the best variant the CPU supports. The choice is
// made on the first call and never changes; a forced variant the CPU lacks, or a name that is
// no variant, is an error at that point.
#pragma once

#include <stdexcept>
#include <string>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/ops.h"

namespace specrun::cpu {

// The environment variable that forces a variant (isa_name spelling).
inline constexpr const char* kIsaEnvironmentVariable = "SPECRUN_CPU_ISA";

// What the process runs and why.
struct KernelChoice {
  Isa isa;      // the variant in use
  Isa best;     // the best variant this CPU supports
  bool forced;  // SPECRUN_CPU_ISA chose it
};

// Thrown by select_kernels (and so by the first kernel call) when SPECRUN_CPU_ISA names no
// built variant or one this CPU lacks; the message names the value, what is missing and what
// would work.
class IsaError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Chooses the variant (first call) and returns the choice. Thread-safe. Throws IsaError.
const KernelChoice& select_kernels();

// The table in use (select_kernels on first use).
const KernelTable& kernels();

// A built variant's table, whether or not this CPU supports it (calling a kernel the CPU lacks
// dies with SIGILL: check cpu_supports first); nullptr when `isa` is not built.
const KernelTable* kernels_for(Isa isa);

// One line for logs, --version and provenance: "avx2 (best for this CPU)",
// "x86-64-v2 (forced by SPECRUN_CPU_ISA; best for this CPU: avx2)", or the error text. Never
// throws.
std::string describe_kernel_choice();

}  // namespace specrun::cpu
