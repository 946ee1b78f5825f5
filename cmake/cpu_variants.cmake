# CPU instruction sets: one portable baseline for the program, and the compute kernels
# (kernels/cpu) once per variant in the same binary, chosen at run time (kernels/cpu/dispatch.h).
#
#   SPECRUN_BASELINE_ARCH  -march for everything outside the kernels and for the `baseline`
#                          kernel variant (default x86-64-v2, kernels/cpu/isa.h says why). The
#                          program refuses to start on a CPU without the features the compiler
#                          enables for it (kernels/cpu/baseline_check.cpp).
#   SPECRUN_NATIVE         opt-in: the baseline becomes -march=native (a binary for this machine
#                          and its like only; other CPUs are refused at start-up).
#   SPECRUN_CPU_TUNE       -mtune for every file (default generic, or native with a native
#                          baseline); for checking the compiler's tunings, e.g. rocketlake.
#
# GCC 12 and 13 miscompile 256- and 512-bit integer constants that their by-pieces moves and
# folded memcpys create when AVX is on and the tuning moves 32 bytes at a time (every AVX-512
# -march, and -mtune of Intel's AVX-512 cores with AVX2): the upper zero words of the constant
# are dropped and word 0 is broadcast (GCC PR target/108599; std::vector<double>{0.5, 0.5, 0, 0}
# became four 0.5s). Limiting those moves to 128 bits (-mmove-max=128 -mstore-max=128) keeps such
# constants from being formed: tests/CMakeLists.txt's gcc_pr108599_guard test compiles the
# reproducer with every variant's flags and checks.
set(SPECRUN_BASELINE_ARCH "x86-64-v2" CACHE STRING
    "-march for code outside the kernels and for the baseline kernel variant")
option(SPECRUN_NATIVE "Compile the baseline for the build machine's CPU (-march=native)" OFF)
set(SPECRUN_CPU_TUNE "" CACHE STRING "-mtune for every file (empty: generic, native when native)")

if(SPECRUN_NATIVE)
  set(SPECRUN_BASELINE_ARCH_EFFECTIVE native)
else()
  set(SPECRUN_BASELINE_ARCH_EFFECTIVE ${SPECRUN_BASELINE_ARCH})
endif()
if(SPECRUN_CPU_TUNE)
  set(SPECRUN_TUNE_EFFECTIVE ${SPECRUN_CPU_TUNE})
elseif(SPECRUN_BASELINE_ARCH_EFFECTIVE STREQUAL "native")
  set(SPECRUN_TUNE_EFFECTIVE native)
else()
  set(SPECRUN_TUNE_EFFECTIVE generic)
endif()

set(SPECRUN_X86_64 OFF)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(SPECRUN_X86_64 ON)
endif()

set(SPECRUN_ISA_GUARD_FLAGS "")
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12
   AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 14 AND SPECRUN_X86_64)
  set(SPECRUN_ISA_GUARD_FLAGS -mmove-max=128 -mstore-max=128)
endif()

# Flags of the baseline (every file but the kernel variants) and of each variant.
if(SPECRUN_X86_64)
  set(SPECRUN_BASELINE_FLAGS -march=${SPECRUN_BASELINE_ARCH_EFFECTIVE}
      -mtune=${SPECRUN_TUNE_EFFECTIVE} ${SPECRUN_ISA_GUARD_FLAGS})
  set(SPECRUN_CPU_VARIANTS baseline avx2 avx512)
  set(SPECRUN_CPU_VARIANT_FLAGS_baseline ${SPECRUN_BASELINE_FLAGS})
  set(SPECRUN_CPU_VARIANT_FLAGS_avx2 -march=x86-64-v3 -mtune=${SPECRUN_TUNE_EFFECTIVE}
      ${SPECRUN_ISA_GUARD_FLAGS})
  set(SPECRUN_CPU_VARIANT_FLAGS_avx512 -march=x86-64-v4 -mtune=${SPECRUN_TUNE_EFFECTIVE}
      ${SPECRUN_ISA_GUARD_FLAGS})
else()
  set(SPECRUN_BASELINE_FLAGS "")
  set(SPECRUN_CPU_VARIANTS baseline)
  set(SPECRUN_CPU_VARIANT_FLAGS_baseline "")
endif()
string(REPLACE ";" " " SPECRUN_BASELINE_FLAGS_TEXT "${SPECRUN_BASELINE_FLAGS}")
message(STATUS "specrun baseline: ${SPECRUN_BASELINE_FLAGS_TEXT}; kernel variants: "
               "${SPECRUN_CPU_VARIANTS}")

# generated/cpu_baseline.h: the baseline's -march and the CPU features the compiler enables for
# it (from its predefined macros), in __builtin_cpu_supports spelling, for baseline_check.cpp.
function(specrun_write_cpu_baseline_header out)
  set(features "")
  if(SPECRUN_X86_64)
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} ${SPECRUN_BASELINE_FLAGS} -dM -E -x c++ /dev/null
                    OUTPUT_VARIABLE macros RESULT_VARIABLE rc ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "${CMAKE_CXX_COMPILER} rejects the baseline flags "
                          "${SPECRUN_BASELINE_FLAGS_TEXT}: ${err}")
    endif()
    # macro:feature pairs for the extensions GCC's code generation uses on its own (the kernels'
    # intrinsics are checked by the dispatcher per variant).
    set(pairs SSE3:sse3 SSSE3:ssse3 SSE4_1:sse4.1 SSE4_2:sse4.2 POPCNT:popcnt AVX:avx AVX2:avx2
        FMA:fma F16C:f16c BMI:bmi BMI2:bmi2 LZCNT:lzcnt MOVBE:movbe AVX512F:avx512f
        AVX512BW:avx512bw AVX512CD:avx512cd AVX512DQ:avx512dq AVX512VL:avx512vl
        AVX512BF16:avx512bf16 AVX512FP16:avx512fp16 AVX512VNNI:avx512vnni
        AVX512IFMA:avx512ifma AVX512VBMI:avx512vbmi AVX512VBMI2:avx512vbmi2
        AVX512BITALG:avx512bitalg AVX512VPOPCNTDQ:avx512vpopcntdq AVXVNNI:avxvnni GFNI:gfni
        VAES:vaes VPCLMULQDQ:vpclmulqdq)
    foreach(pair ${pairs})
      string(REPLACE ":" ";" pair "${pair}")
      list(GET pair 0 macro)
      list(GET pair 1 feature)
      if(macros MATCHES "#define __${macro}__ 1")
        string(APPEND features " X(\"${feature}\")")
      endif()
    endforeach()
  endif()
  set(content "// Generated by cmake/cpu_variants.cmake; do not edit.
#pragma once
#define SPECRUN_BASELINE_ARCH \"${SPECRUN_BASELINE_ARCH_EFFECTIVE}\"
#define SPECRUN_BASELINE_FEATURES(X)${features}
")
  if(EXISTS ${out})
    file(READ ${out} old)
  endif()
  if(NOT old STREQUAL content)
    file(WRITE ${out} "${content}")
  endif()
endfunction()

# The kernel sources compiled once per variant (the rest of kernels/cpu is baseline code).
set(SPECRUN_CPU_VARIANT_SOURCES activation.cpp argmax.cpp attention.cpp embedding.cpp
    matmul.cpp matmul_quant.cpp rmsnorm.cpp rope.cpp stream_read.cpp variant_table.cpp)
list(TRANSFORM SPECRUN_CPU_VARIANT_SOURCES PREPEND ${CMAKE_SOURCE_DIR}/kernels/cpu/)

# specrun_add_cpu_kernels(<core>): the variants' object libraries (specrun_cpu_<variant>) into
# <core>, and the baseline check into every executable that links <core>.
function(specrun_add_cpu_kernels core)
  specrun_write_cpu_baseline_header(${CMAKE_BINARY_DIR}/generated/cpu_baseline.h)
  target_include_directories(${core} PUBLIC ${CMAKE_BINARY_DIR})
  foreach(v ${SPECRUN_CPU_VARIANTS})
    add_library(specrun_cpu_${v} OBJECT ${SPECRUN_CPU_VARIANT_SOURCES})
    target_include_directories(specrun_cpu_${v} PRIVATE ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
    target_compile_definitions(specrun_cpu_${v} PRIVATE SPECRUN_ISA=${v})
    target_compile_options(specrun_cpu_${v} PRIVATE ${SPECRUN_WARNINGS}
                           ${SPECRUN_CPU_VARIANT_FLAGS_${v}})
    target_link_libraries(specrun_cpu_${v} PRIVATE OpenMP::OpenMP_CXX)
    target_sources(${core} PRIVATE $<TARGET_OBJECTS:specrun_cpu_${v}>)
  endforeach()
  # The check runs before main and must run on any x86-64: plain -march=x86-64 for its file.
  add_library(specrun_baseline_check OBJECT ${CMAKE_SOURCE_DIR}/kernels/cpu/baseline_check.cpp)
  target_include_directories(specrun_baseline_check PRIVATE ${CMAKE_BINARY_DIR})
  target_compile_options(specrun_baseline_check PRIVATE ${SPECRUN_WARNINGS})
  if(SPECRUN_X86_64)
    target_compile_options(specrun_baseline_check PRIVATE -march=x86-64 -mtune=generic)
  endif()
  target_sources(${core} INTERFACE $<TARGET_OBJECTS:specrun_baseline_check>)
endfunction()
