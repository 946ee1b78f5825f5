// stream_read: a STREAM-like read kernel that measures how fast this machine streams a buffer
// from memory, the bound for bandwidth-limited decoding. Layout: any bytes, read as float32 in
// 64-byte vectors; threads split the buffer in contiguous static slices (as matmul splits rows).
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu {

#ifdef SPECRUN_CPU_AVX512
namespace {
constexpr int kPrefetchBytes = 8192;
}
#endif

float stream_read(const float* data, std::size_t n) {
  float total = 0.f;
#pragma omp parallel reduction(+ : total)
  {
#ifdef SPECRUN_CPU_AVX512
    // Four independent accumulators keep four loads in flight per iteration.
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const std::size_t n_blocks = n / 64;
#pragma omp for schedule(static) nowait
    for (std::size_t b = 0; b < n_blocks; ++b) {
      const float* p = data + b * 64;
      // The same software prefetch as the matmul kernels (a fair reference for them).
      _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes + 64, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes + 128, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(p) + kPrefetchBytes + 192, _MM_HINT_T0);
      a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p));
      a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + 16));
      a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + 32));
      a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + 48));
    }
    total += detail::reduce16(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
#pragma omp single nowait
    for (std::size_t i = n_blocks * 64; i < n; ++i) total += data[i];
#else
    // Sixteen partial sums the compiler keeps in one vector register.
    float acc[16] = {};
    const std::size_t n_blocks = n / 16;
#pragma omp for schedule(static) nowait
    for (std::size_t b = 0; b < n_blocks; ++b)
      for (int j = 0; j < 16; ++j) acc[j] += data[b * 16 + j];
    for (int j = 0; j < 16; ++j) total += acc[j];
#pragma omp single nowait
    for (std::size_t i = n_blocks * 16; i < n; ++i) total += data[i];
#endif
  }
  return total;
}

}  // namespace specrun::cpu
