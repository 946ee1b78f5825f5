// The table of one kernel variant's entry points (dispatch.h explains the variants). Separate
// from dispatch.h so that the variants' table sources include nothing but the kernels' types.
#pragma once

#include "kernels/cpu/ops.h"

namespace specrun::cpu {

// The kernels of kernel_api.inc, one line each: the table's fields and every variant's entries
// come from this list, and their types from the declarations (a variant whose signature
// differs does not compile).
// clang-format off
#define SPECRUN_CPU_KERNELS(X) \
  X(matmul) \
  X(matmul_multi) \
  X(matmul_grouped) \
  X(gather_rows) \
  X(gather_rows_packed) \
  X(rmsnorm) \
  X(add_rmsnorm) \
  X(rope) \
  X(rope_table) \
  X(rope_apply) \
  X(attention) \
  X(attention_strided) \
  X(silu_mul) \
  X(add_inplace) \
  X(argmax) \
  X(stream_read) \
  X(softmax)
// clang-format on

// One variant's kernels.
struct KernelTable {
#define SPECRUN_CPU_KERNEL_FIELD(name) decltype(&::specrun::cpu::name) name;
  SPECRUN_CPU_KERNELS(SPECRUN_CPU_KERNEL_FIELD)
#undef SPECRUN_CPU_KERNEL_FIELD
};

}  // namespace specrun::cpu
