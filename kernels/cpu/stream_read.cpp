// stream_read: STREAM-like read kernels that measure how fast this machine streams a buffer from
// memory, the bound for bandwidth-limited decoding (ops.h). Threads split the buffer in
// contiguous static slices, as matmul splits its blocks. The loads are 64-byte vectors of the
// compiler's vector extension, so each variant reads with its widest registers (one zmm, two
// ymm, four xmm) from the same source; the prefetch distance is matmul's.
#include <omp.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu::SPECRUN_ISA {

namespace {

// 16 floats; may_alias and 4-byte alignment: loads from any float pointer.
typedef float Vec16 __attribute__((vector_size(64), aligned(4), may_alias));

constexpr std::size_t kVecFloats = 16;
constexpr std::size_t kPrefetchFloats = 8192 / sizeof(float);  // matmul's kPrefetchBytes

// (Pointers and references only: a 64-byte vector passed by value changes the ABI without
// AVX-512, which GCC warns about.)
inline const Vec16& load(const float* p) {
  return *reinterpret_cast<const Vec16*>(p);
}

inline float horizontal_sum(const Vec16& v) {
  float s = 0.f;
  for (std::size_t i = 0; i < kVecFloats; ++i) s += v[i];
  return s;
}

// Sum of [begin, end) (multiples of 64 floats apart) in one stream: 4 vectors (256 bytes) per
// iteration into four accumulators, optionally prefetching every line 8 KiB ahead.
template <bool kPrefetch>
float read_one_stream(const float* data, std::size_t begin, std::size_t end) {
  Vec16 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  for (std::size_t i = begin; i < end; i += 4 * kVecFloats) {
    const float* p = data + i;
    if constexpr (kPrefetch)
      for (std::size_t line = 0; line < 4; ++line)
        __builtin_prefetch(p + kPrefetchFloats + line * kVecFloats, 0, 3);
    a0 += load(p);
    a1 += load(p + kVecFloats);
    a2 += load(p + 2 * kVecFloats);
    a3 += load(p + 3 * kVecFloats);
  }
  const Vec16 sum = (a0 + a1) + (a2 + a3);
  return horizontal_sum(sum);
}

// Sum of [begin, end) cut into four equal sub-slices read in lockstep, one vector of each per
// iteration, each prefetched: the access pattern of matmul's 4-block decode tiles.
float read_four_streams(const float* data, std::size_t begin, std::size_t end) {
  const std::size_t quarter = (end - begin) / (4 * kVecFloats) * kVecFloats;
  const float* s0 = data + begin;
  const float* s1 = s0 + quarter;
  const float* s2 = s1 + quarter;
  const float* s3 = s2 + quarter;
  Vec16 a0 = {}, a1 = {}, a2 = {}, a3 = {};
  for (std::size_t i = 0; i < quarter; i += kVecFloats) {
    __builtin_prefetch(s0 + i + kPrefetchFloats, 0, 3);
    __builtin_prefetch(s1 + i + kPrefetchFloats, 0, 3);
    __builtin_prefetch(s2 + i + kPrefetchFloats, 0, 3);
    __builtin_prefetch(s3 + i + kPrefetchFloats, 0, 3);
    a0 += load(s0 + i);
    a1 += load(s1 + i);
    a2 += load(s2 + i);
    a3 += load(s3 + i);
  }
  const Vec16 sum = (a0 + a1) + (a2 + a3);
  float total = horizontal_sum(sum);
  // What the four equal quarters left over (< 4 vectors).
  for (std::size_t i = begin + 4 * quarter; i < end; ++i) total += data[i];
  return total;
}

}  // namespace

float stream_read(const float* data, std::size_t n, int kernel) {
  const std::size_t n_blocks = n / (4 * kVecFloats);  // 256-byte blocks split over the threads
  float total = 0.f;
#pragma omp parallel reduction(+ : total)
  {
    const std::size_t nt = static_cast<std::size_t>(omp_get_num_threads());
    const std::size_t tid = static_cast<std::size_t>(omp_get_thread_num());
    const std::size_t begin = n_blocks * tid / nt * 4 * kVecFloats;
    const std::size_t end = n_blocks * (tid + 1) / nt * 4 * kVecFloats;
    switch (kernel) {
      case 0:
        total += read_one_stream<false>(data, begin, end);
        break;
      case 1:
        total += read_one_stream<true>(data, begin, end);
        break;
      default:
        total += read_four_streams(data, begin, end);
        break;
    }
#pragma omp single nowait
    for (std::size_t i = n_blocks * 4 * kVecFloats; i < n; ++i) total += data[i];
  }
  return total;
}

}  // namespace specrun::cpu::SPECRUN_ISA
