// matmul: y[T,out] = x[T,in] * W[out,in]^T (+ bias), W in F32/BF16/F16, float32 accumulation.
//
// Layout: x, y row-major float32; W row-major [out, in] in its storage dtype, never widened in
// memory. Threads split the output rows in blocks of four. A block's four weight rows are
// streamed once per chunk of up to kTokenChunk tokens and widened in registers, each loaded
// vector serving up to four tokens (simd.h tile_rows4). Decode (T = 1) and verify (T = k+1 <=
// kTokenChunk) therefore read the weights once; long prefills read them once per chunk while
// the chunk's activations stay in cache.
#include <cstdint>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu {

namespace {

constexpr int kRowBlock = 4;
constexpr int kTokenChunk = 32;
// Below this many multiply-adds a parallel region costs more than it saves.
constexpr std::int64_t kParallelMinWork = 1 << 16;

template <DType KT>
void matmul_typed(const float* x, int n_tokens, int in, const void* w, int out, const float* bias,
                  float* y) {
  const auto* wb = static_cast<const std::uint8_t*>(w);
  const std::size_t row_bytes = dtype_size(KT) * static_cast<std::size_t>(in);
  const int n_blocks = (out + kRowBlock - 1) / kRowBlock;

  const std::int64_t work = static_cast<std::int64_t>(n_tokens) * in * out;
  // One parallel region; a thread keeps the same row blocks in every chunk (static schedule),
  // so chunks need no barrier between them.
#pragma omp parallel if (work >= kParallelMinWork)
  for (int t0 = 0; t0 < n_tokens; t0 += kTokenChunk) {
    const int t_end = n_tokens - t0 < kTokenChunk ? n_tokens : t0 + kTokenChunk;
#pragma omp for schedule(static) nowait
    for (int block = 0; block < n_blocks; ++block) {
      const int o0 = block * kRowBlock;
      const std::uint8_t* wrow = wb + row_bytes * static_cast<std::size_t>(o0);
      if (out - o0 < kRowBlock) {
        // The last few rows: one dot product per row and token.
        for (int t = t0; t < t_end; ++t)
          for (int o = o0; o < out; ++o)
            y[static_cast<std::size_t>(t) * out + o] = detail::dot_weight_row(
                x + static_cast<std::size_t>(t) * in, wb + row_bytes * o, KT, in);
      } else {
        int t = t0;
        for (; t + 4 <= t_end; t += 4)
          detail::tile_rows4<4, KT>(x + static_cast<std::size_t>(t) * in, in, wrow, in, in,
                                    y + static_cast<std::size_t>(t) * out + o0, out);
        const float* xt = x + static_cast<std::size_t>(t) * in;
        float* yt = y + static_cast<std::size_t>(t) * out + o0;
        switch (t_end - t) {
          case 3:
            detail::tile_rows4<3, KT>(xt, in, wrow, in, in, yt, out);
            break;
          case 2:
            detail::tile_rows4<2, KT>(xt, in, wrow, in, in, yt, out);
            break;
          case 1:
            detail::tile_rows4<1, KT>(xt, in, wrow, in, in, yt, out);
            break;
          default:
            break;
        }
      }
      if (bias) {
        const int o_end = out - o0 < kRowBlock ? out : o0 + kRowBlock;
        for (int t = t0; t < t_end; ++t)
          for (int o = o0; o < o_end; ++o) y[static_cast<std::size_t>(t) * out + o] += bias[o];
      }
    }
  }
}

}  // namespace

void matmul(const float* x, int n_tokens, int in, const void* w, DType w_dtype, int out,
            const float* bias, float* y) {
  switch (w_dtype) {
    case DType::kF32:
      return matmul_typed<DType::kF32>(x, n_tokens, in, w, out, bias, y);
    case DType::kBF16:
      return matmul_typed<DType::kBF16>(x, n_tokens, in, w, out, bias, y);
    case DType::kF16:
      return matmul_typed<DType::kF16>(x, n_tokens, in, w, out, bias, y);
  }
}

}  // namespace specrun::cpu
