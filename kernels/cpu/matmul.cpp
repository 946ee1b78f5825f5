// matmul: y[T,out] = x[T,in] * W[out,in]^T (+ bias), W in F32/BF16/F16, float32 accumulation;
// matmul_multi: several such products sharing x (q/k/v, gate/up) in one parallel region.
//
// Layout: x, y row-major float32; W row-major [out, in] in its storage dtype, never widened in
// memory. The row blocks of all outputs (kRowBlock rows each) are split over the threads in
// contiguous ranges, one parallel region per call: each thread streams its share of the
// weights, software-prefetching one row block ahead, and widens them in registers, each loaded
// vector serving up to kTokenTile tokens (simd.h tile_rows). Up to kBlockTokens tokens (decode,
// verify, batched decode) a block's weights are read from memory once and used for all tokens;
// longer prefills run token tiles over L2-resident super-blocks of kSuperRows rows (rows_kernel).
//
// Numerics: every (row, token) dot product is accumulated in one fixed order (tile_rows'
// contract) whatever the tile, blocking, thread count or number of tokens, so a token's outputs are
// bitwise the same in any batch shape.
#include <omp.h>

#include <cstdint>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/simd.h"

namespace specrun::cpu {

namespace {

constexpr int kRowBlock = 4;      // rows per tile, and the unit the threads split
constexpr int kWideRowBlock = 8;  // rows per tile for one or two tokens
constexpr int kTokenTile = 6;
constexpr int kSuperRows = 64;    // prefill: rows whose weights stay in L2
constexpr int kBlockTokens = 12;  // up to this many tokens: all of them per row block
// Software prefetch distance: one row block ahead, at most this many bytes (an L1's worth of
// weights in flight would evict the activations).
constexpr std::int64_t kMaxPrefetchBytes = 16384;
// Below this many multiply-adds a parallel region costs more than it saves.
constexpr std::int64_t kParallelMinWork = 1 << 16;

// One tile of R rows x nt tokens (nt <= kTokenTile), dispatched inline so that the compiler
// sees the whole block loop (an indirect call per block halved the streaming rate here).
template <DType KT, int R>
inline void tile(int nt, const float* x, std::int64_t x_stride, const std::uint8_t* w, int in,
                 float* y, std::int64_t y_stride, std::int64_t prefetch) {
  switch (nt) {
    case 6:
      return detail::tile_rows<KT, R, 6>(x, x_stride, w, in, in, y, y_stride, prefetch);
    case 5:
      return detail::tile_rows<KT, R, 5>(x, x_stride, w, in, in, y, y_stride, prefetch);
    case 4:
      return detail::tile_rows<KT, R, 4>(x, x_stride, w, in, in, y, y_stride, prefetch);
    case 3:
      return detail::tile_rows<KT, R, 3>(x, x_stride, w, in, in, y, y_stride, prefetch);
    case 2:
      return detail::tile_rows<KT, R, 2>(x, x_stride, w, in, in, y, y_stride, prefetch);
    default:
      return detail::tile_rows<KT, R, 1>(x, x_stride, w, in, in, y, y_stride, prefetch);
  }
}

// Width of tile i when n tokens are cut into n_tiles tiles of near-equal width.
inline int tile_width(int n, int n_tiles, int i) {
  return n / n_tiles + (i < n % n_tiles ? 1 : 0);
}

// One row block (`rows` <= kWideRowBlock rows starting at r0) for token tiles
// [t_begin, t_end).
template <DType KT>
inline void row_block(const float* x, int in, const MatmulOutput& o, const std::uint8_t* w, int r0,
                      int rows, int t_begin, int t_end, std::int64_t prefetch) {
  const std::uint8_t* wr = w + dtype_size(KT) * static_cast<std::size_t>(in) * r0;
  // Tiles of near-equal width (8 tokens: 4 + 4, not 6 + 2: narrow tiles waste the conversions).
  const int n = t_end - t_begin, n_tiles = (n + kTokenTile - 1) / kTokenTile;
  for (int i = 0, t = t_begin; i < n_tiles; ++i) {
    const int nt = tile_width(n, n_tiles, i);
    const float* xt = x + static_cast<std::size_t>(t) * in;
    float* yt = o.y + static_cast<std::size_t>(t) * o.out + r0;
    switch (rows) {
      case kWideRowBlock:
        if (nt == 2)
          detail::tile_rows<KT, kWideRowBlock, 2>(xt, in, wr, in, in, yt, o.out, prefetch);
        else
          detail::tile_rows<KT, kWideRowBlock, 1>(xt, in, wr, in, in, yt, o.out, prefetch);
        break;
      case 4:
        tile<KT, 4>(nt, xt, in, wr, in, yt, o.out, prefetch);
        break;
      case 3:
        tile<KT, 3>(nt, xt, in, wr, in, yt, o.out, prefetch);
        break;
      case 2:
        tile<KT, 2>(nt, xt, in, wr, in, yt, o.out, prefetch);
        break;
      default:
        tile<KT, 1>(nt, xt, in, wr, in, yt, o.out, prefetch);
        break;
    }
    t += nt;
  }
}

// Rows [row_begin, row_end) of one output for tokens [t0, t_end).
//   <= 2 tokens (decode): 8-row tiles streaming the weights (8 independent streams and FMA
//     chains stream ~10% faster than 4);
//   <= kBlockTokens tokens (verify, batches): 4-row tiles, all tokens per block, so that each
//     weight is read from memory once and reused from L1;
//   more (prefill): super-blocks of kSuperRows rows whose weights stay in L2 while
//     every token tile passes over them, each tile's activations staying in L1.
template <DType KT>
void rows_kernel(const float* x, int in, const MatmulOutput& o, int row_begin, int row_end, int t0,
                 int t_end) {
  const std::size_t row_bytes = dtype_size(KT) * static_cast<std::size_t>(in);
  const auto* w = static_cast<const std::uint8_t*>(o.w);
  const int n_tokens = t_end - t0;
  const int block_rows = n_tokens <= 2 ? kWideRowBlock : kRowBlock;
  const std::int64_t block_bytes = static_cast<std::int64_t>(row_bytes) * block_rows;
  const std::int64_t prefetch = block_bytes < kMaxPrefetchBytes ? block_bytes : kMaxPrefetchBytes;
  const bool prefill = n_tokens > kBlockTokens;
  const int super_rows = prefill ? kSuperRows : row_end - row_begin;
  for (int s0 = row_begin; s0 < row_end; s0 += super_rows) {
    const int s1 = row_end - s0 < super_rows ? row_end : s0 + super_rows;
    // Decode, verify, small batches: one pass over all tokens; prefill: a token tile per pass
    // (near-equal widths: 128 tokens = 18 x 6 + 4 x 5).
    const int n_passes = prefill ? (n_tokens + kTokenTile - 1) / kTokenTile : 1;
    for (int i = 0, t = t0; i < n_passes; ++i) {
      const int t1 = t + (prefill ? tile_width(n_tokens, n_passes, i) : n_tokens);
      for (int r0 = s0; r0 < s1;) {
        const int left = s1 - r0;
        const int rows = left >= block_rows ? block_rows : left >= kRowBlock ? kRowBlock : left;
        row_block<KT>(x, in, o, w, r0, rows, t, t1, prefetch);
        r0 += rows;
      }
      t = t1;
    }
    if (o.bias)
      for (int t = t0; t < t_end; ++t)
        for (int r = s0; r < s1; ++r) o.y[static_cast<std::size_t>(t) * o.out + r] += o.bias[r];
  }
}

void run_rows(const float* x, int in, const MatmulOutput& o, int row_begin, int row_end, int t0,
              int t_end) {
  switch (o.dtype) {
    case DType::kF32:
      return rows_kernel<DType::kF32>(x, in, o, row_begin, row_end, t0, t_end);
    case DType::kBF16:
      return rows_kernel<DType::kBF16>(x, in, o, row_begin, row_end, t0, t_end);
    case DType::kF16:
      return rows_kernel<DType::kF16>(x, in, o, row_begin, row_end, t0, t_end);
  }
}

int blocks_of(const MatmulOutput& o) {
  return (o.out + kRowBlock - 1) / kRowBlock;
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
  // One parallel region; each thread a contiguous range of row blocks (static: a dynamic
  // schedule interleaving the threads' blocks streamed a third slower here).
#pragma omp parallel if (work >= kParallelMinWork)
  {
    const int nt = omp_get_num_threads(), tid = omp_get_thread_num();
    const int begin = static_cast<int>(static_cast<std::int64_t>(n_blocks) * tid / nt);
    const int end = static_cast<int>(static_cast<std::int64_t>(n_blocks) * (tid + 1) / nt);
    // Output j holds blocks [first, first + blocks_of(j)) of the concatenation.
    for (int j = 0, first = 0; j < n_outputs && first < end; first += blocks_of(outputs[j++])) {
      const int b0 = begin > first ? begin - first : 0;
      const int b1 = end - first < blocks_of(outputs[j]) ? end - first : blocks_of(outputs[j]);
      if (b0 >= b1) continue;
      const int r1 = b1 * kRowBlock < outputs[j].out ? b1 * kRowBlock : outputs[j].out;
      run_rows(x, in, outputs[j], b0 * kRowBlock, r1, 0, n_tokens);
    }
  }
}

void matmul(const float* x, int n_tokens, int in, const void* w, DType w_dtype, int out,
            const float* bias, float* y) {
  const MatmulOutput o{w, w_dtype, out, bias, y};
  matmul_multi(x, n_tokens, in, &o, 1);
}

}  // namespace specrun::cpu
