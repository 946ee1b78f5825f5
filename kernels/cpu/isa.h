// Instruction-set variants of the CPU kernels, and what this CPU supports.
//
// The default build compiles everything outside the compute kernels for one baseline ISA
// (x86-64-v2 unless CMake's SPECRUN_BASELINE_ARCH says otherwise; baseline_check.cpp refuses to
// start on a CPU below it) and the kernels once per variant below, in one binary; dispatch.h
// picks the best variant this CPU and its OS support, once, at start-up. Why x86-64-v2: nothing
// outside the kernels is measurably faster with AVX2 (decoding spends its time in kernels), and
// v2 (SSE4.2, POPCNT, 2009 onwards) is what every x86-64 server of a cluster still in service
// has, including Sandy and Ivy Bridge nodes that lack AVX2; it is also the RHEL 9 baseline.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace specrun::cpu {

// Kernel variants, in ascending order of capability:
//   kBaseline  the baseline's flags (x86-64-v2 by default: SSE4.2): the portable loops, which
//              the compiler vectorises at 128 bits; every CPU that runs the program has it;
//   kAvx2      -march=x86-64-v3 (AVX2, FMA, F16C, BMI2): the portable loops at 256 bits;
//   kAvx512    -march=x86-64-v4 (AVX-512 F, BW, CD, DQ, VL): the AVX-512 intrinsics paths.
// No variant uses AVX512-BF16: its one arithmetic instruction (vdpbf16ps) rounds the activations
// to BF16, which the kernels' float32 contract (ops.h) forbids; BF16 weights are widened with a
// shift, which needs nothing beyond AVX-512 F. Other architectures than x86-64 build kBaseline
// only.
enum class Isa : std::uint8_t { kBaseline, kAvx2, kAvx512 };

// "baseline", "avx2", "avx512": the names SPECRUN_CPU_ISA accepts.
const char* isa_name(Isa isa);

// The -march of the baseline ("x86-64-v2"; CMake's SPECRUN_BASELINE_ARCH).
const char* baseline_arch();

// The variant a name stands for, or nullopt.
std::optional<Isa> parse_isa(std::string_view name);

// The variants this binary holds, ascending.
const std::vector<Isa>& built_isas();

// True when this CPU and its operating system (saved register state) support `isa`.
bool cpu_supports(Isa isa);

// The CPU features `isa` needs that this CPU lacks, space-separated ("avx512f avx512bw"); empty
// when it has them all.
std::string missing_features(Isa isa);

// The best built variant this CPU supports.
Isa best_isa();

// /proc/cpuinfo "model name" of the first CPU, or "unknown".
std::string cpu_model_name();

}  // namespace specrun::cpu
