// matmul: y[T,out] = x[T,in] * W[out,in]^T (+ bias), W in F32/BF16/F16, float32 accumulation.
//
// Layout: x, y row-major float32; W row-major [out, in] in its storage dtype. Threads split the
// output rows in blocks of four. Within a block the four weight rows are read from memory once
// (widened into a small per-thread buffer when not F32) and then used for every token, so the
// cost of T tokens is one pass over the weights plus T * in * out FMAs from cache.
#include <omp.h>

#include <cstdint>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu {

namespace {

constexpr int kRowBlock = 4;
// Below this many multiply-adds a parallel region costs more than it saves.
constexpr std::int64_t kParallelMinWork = 1 << 16;

float* widen_scratch(std::size_t n) {
  static thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

}  // namespace

void matmul(const float* x, int n_tokens, int in, const void* w, DType w_dtype, int out,
            const float* bias, float* y) {
  const auto* wb = static_cast<const std::uint8_t*>(w);
  const std::size_t row_bytes = dtype_size(w_dtype) * static_cast<std::size_t>(in);
  const int n_blocks = (out + kRowBlock - 1) / kRowBlock;
  const std::int64_t work = static_cast<std::int64_t>(n_tokens) * in * out;

#pragma omp parallel for schedule(static) if (work >= kParallelMinWork)
  for (int block = 0; block < n_blocks; ++block) {
    const int o0 = block * kRowBlock;
    const int rows = out - o0 < kRowBlock ? out - o0 : kRowBlock;
    const std::uint8_t* wrow = wb + row_bytes * static_cast<std::size_t>(o0);

    if (n_tokens == 1) {
      // Decode: one fused widen-and-dot pass per row, nothing staged.
      for (int r = 0; r < rows; ++r)
        y[o0 + r] = detail::dot_weight_row(x, wrow + row_bytes * r, w_dtype, in) +
                    (bias ? bias[o0 + r] : 0.f);
      continue;
    }

    const float* wf;
    if (w_dtype == DType::kF32) {
      wf = reinterpret_cast<const float*>(wrow);
    } else {
      float* buf = widen_scratch(static_cast<std::size_t>(kRowBlock) * in);
      for (int r = 0; r < rows; ++r)
        detail::widen_row(wrow + row_bytes * r, w_dtype, in,
                          buf + static_cast<std::size_t>(r) * in);
      wf = buf;
    }
    for (int t = 0; t < n_tokens; ++t) {
      const float* xt = x + static_cast<std::size_t>(t) * in;
      float* yt = y + static_cast<std::size_t>(t) * out + o0;
      if (rows == kRowBlock) {
        detail::dot4_f32(xt, wf, in, in, yt);
      } else {
        for (int r = 0; r < rows; ++r)
          yt[r] = detail::dot_f32(xt, wf + static_cast<std::size_t>(r) * in, in);
      }
      if (bias)
        for (int r = 0; r < rows; ++r) yt[r] += bias[o0 + r];
    }
  }
}

}  // namespace specrun::cpu
