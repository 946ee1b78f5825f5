// This variant's KernelTable (dispatch.h): a pointer to its implementation of every kernel.
// Compiled once per variant, like the kernels themselves.
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu::SPECRUN_ISA {

extern const KernelTable kTable;

#define SPECRUN_CPU_KERNEL_ENTRY(name) &name,
const KernelTable kTable = {SPECRUN_CPU_KERNELS(SPECRUN_CPU_KERNEL_ENTRY)};
#undef SPECRUN_CPU_KERNEL_ENTRY

}  // namespace specrun::cpu::SPECRUN_ISA
