// The kernel variant a translation unit is compiled for (kernels/cpu/dispatch.h explains the
// variants). Each variant's sources are compiled with its own instruction-set flags and
// -DSPECRUN_ISA=<variant>; everything else is compiled once, for the baseline.
//
// The one-definition rule is why this exists: an inline function or template instantiated in
// two translation units built with different flags becomes two machine-code copies of one
// symbol, and the linker keeps one of them for every caller, so baseline code could end up
// running an AVX-512 copy. Every inline function that a variant compiles therefore lives in a
// namespace named after the variant: its own code in specrun::cpu::<variant>, and the inline
// helpers of headers that both sides include (dtype.h, ops.h) in the inline namespace
// SPECRUN_ISA_NS, which is the variant's name in a variant and `program` everywhere else.
// tests/CMakeLists.txt's kernel_variants_isolated test fails the build if a variant object defines
// any other global or weak symbol.
#pragma once

#if defined(SPECRUN_ISA)
#define SPECRUN_ISA_NS SPECRUN_ISA
#else
#define SPECRUN_ISA_NS program
#endif
