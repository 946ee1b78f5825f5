// matmul: y[T,out] = x[T,in] * W[out,in]^T (+ bias), W in F32/BF16/F16, float32 accumulation;
// matmul_multi: several such products sharing x (q/k/v, gate/up) in one parallel region.
//
// Layout: x, y row-major float32; W row-major [out, in] in its storage dtype, never widened in
// memory. The row blocks of all outputs (kRowBlock rows each) are split over the threads in
// contiguous ranges, one parallel region per call: each thread streams its share of the
// weights. A block's weight rows are read from memory once per chunk of up to kTokenChunk
// tokens and widened in registers, each loaded vector serving up to kTokenTile tokens
// (simd.h tile_rows). Decode (T = 1), verify (T = k+1) and batched decode therefore read the
// weights once; long prefills read them once per chunk while the chunk's activations stay in
// the L2 cache.
//
// Numerics: every (row, token) dot product is accumulated in one fixed order (tile_rows'
// contract) whatever the tile, chunk, thread count or number of tokens, so a token's outputs are
// bitwise the same in any batch shape.
#include <omp.h>

#include <array>
#include <cstdint>
#include <utility>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu {

namespace {

constexpr int kRowBlock = 4;
constexpr int kTokenTile = 6;
constexpr int kTokenChunk = 48;
// Below this many multiply-adds a parallel region costs more than it saves.
constexpr std::int64_t kParallelMinWork = 1 << 16;

using TileFn = void (*)(const float* x, std::int64_t x_stride, const void* w, std::int64_t w_stride,
                        int n, float* y, std::int64_t y_stride);

template <DType KT, int R, int NT>
void tile_fn(const float* x, std::int64_t x_stride, const void* w, std::int64_t w_stride, int n,
             float* y, std::int64_t y_stride) {
  detail::tile_rows<KT, R, NT>(x, x_stride, w, w_stride, n, y, y_stride);
}

template <DType KT, int R, std::size_t... I>
constexpr std::array<TileFn, kTokenTile> tiles_for_rows(std::index_sequence<I...>) {
  return {&tile_fn<KT, R, static_cast<int>(I) + 1>...};
}

// kTiles[dtype][rows - 1][tokens - 1]
template <DType KT>
constexpr std::array<std::array<TileFn, kTokenTile>, kRowBlock> tiles_for_dtype() {
  const auto seq = std::make_index_sequence<kTokenTile>{};
  return {tiles_for_rows<KT, 1>(seq), tiles_for_rows<KT, 2>(seq), tiles_for_rows<KT, 3>(seq),
          tiles_for_rows<KT, 4>(seq)};
}

const std::array<std::array<TileFn, kTokenTile>, kRowBlock>& tiles(DType t) {
  static constexpr auto f32 = tiles_for_dtype<DType::kF32>();
  static constexpr auto bf16 = tiles_for_dtype<DType::kBF16>();
  static constexpr auto f16 = tiles_for_dtype<DType::kF16>();
  return t == DType::kF32 ? f32 : t == DType::kBF16 ? bf16 : f16;
}

int blocks_of(const MatmulOutput& o) {
  return (o.out + kRowBlock - 1) / kRowBlock;
}

// Rows [block_begin, block_end) of the concatenated row blocks of all outputs, tokens
// [t0, t_end): the work of one thread for one token chunk.
void run_blocks(const float* x, int in, const MatmulOutput* outs, int n_outs, int block_begin,
                int block_end, int t0, int t_end) {
  int j = 0, first = 0;  // output j holds blocks [first, first + blocks_of(outs[j]))
  while (j < n_outs && first + blocks_of(outs[j]) <= block_begin) first += blocks_of(outs[j++]);
  for (int block = block_begin; block < block_end; ++block) {
    while (block >= first + blocks_of(outs[j])) first += blocks_of(outs[j++]);
    const MatmulOutput& o = outs[j];
    const int o0 = (block - first) * kRowBlock;
    const int rows = o.out - o0 < kRowBlock ? o.out - o0 : kRowBlock;
    const auto& by_tokens = tiles(o.dtype)[rows - 1];
    const auto* w = static_cast<const std::uint8_t*>(o.w) +
                    dtype_size(o.dtype) * static_cast<std::size_t>(in) * o0;
    for (int t = t0; t < t_end; t += kTokenTile) {
      const int nt = t_end - t < kTokenTile ? t_end - t : kTokenTile;
      by_tokens[nt - 1](x + static_cast<std::size_t>(t) * in, in, w, in, in,
                        o.y + static_cast<std::size_t>(t) * o.out + o0, o.out);
    }
    if (o.bias)
      for (int t = t0; t < t_end; ++t)
        for (int r = 0; r < rows; ++r)
          o.y[static_cast<std::size_t>(t) * o.out + o0 + r] += o.bias[o0 + r];
  }
}

}  // namespace

void matmul_multi(const float* x, int n_tokens, int in, const MatmulOutput* outputs,
                  int n_outputs) {
  int n_blocks = 0;
  std::int64_t rows = 0;
  for (int j = 0; j < n_outputs; ++j) {
    n_blocks += blocks_of(outputs[j]);
    rows += outputs[j].out;
  }
  const std::int64_t work = static_cast<std::int64_t>(n_tokens) * in * rows;
  // One parallel region; a thread keeps the same row blocks in every chunk, so chunks need no
  // barrier between them.
#pragma omp parallel if (work >= kParallelMinWork)
  {
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int begin = static_cast<int>(static_cast<std::int64_t>(n_blocks) * tid / nt);
    const int end = static_cast<int>(static_cast<std::int64_t>(n_blocks) * (tid + 1) / nt);
    for (int t0 = 0; t0 < n_tokens; t0 += kTokenChunk) {
      const int t_end = n_tokens - t0 < kTokenChunk ? n_tokens : t0 + kTokenChunk;
      run_blocks(x, in, outputs, n_outputs, begin, end, t0, t_end);
    }
  }
}

void matmul(const float* x, int n_tokens, int in, const void* w, DType w_dtype, int out,
            const float* bias, float* y) {
  const MatmulOutput o{w, w_dtype, out, bias, y};
  matmul_multi(x, n_tokens, in, &o, 1);
}

}  // namespace specrun::cpu
