// One rank's shard of a checkpoint's weights under Megatron-style tensor parallelism.
//
//   q/k/v, gate/up  column-parallel: each rank holds the rows of [out, in] for its heads /
//                   its slice of the intermediate dimension (a contiguous row range);
//   o/down          row-parallel: each rank holds the columns matching its heads / slice, and
//                   the partial outputs are summed with all_reduce_sum;
//   embed, lm_head  vocab-parallel: each rank holds a contiguous range of vocabulary rows.
// Query heads are split evenly; each rank keeps the kv heads its query heads read, so kv heads
// are replicated when tp > num_key_value_heads.
//
// Weights stay in the checkpoint's dtype. Row ranges point straight into the memory-mapped
// file (no copy); only column slices (o_proj, down_proj when tp > 1) are copied. The Checkpoint
// must therefore outlive the ModelWeights loaded from it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/dtype.h"

namespace specrun {

class Checkpoint;
struct ModelConfig;

// Which part of the model a rank holds. Pure arithmetic on the config, tested without MPI.
struct ShardPlan {
  int tp = 1, tp_rank = 0;
  int q_heads = 0, q_head_begin = 0;    // this rank's query heads
  int kv_heads = 0, kv_head_begin = 0;  // the kv heads they read
  int intermediate = 0, intermediate_begin = 0;
  int vocab = 0, vocab_begin = 0;

  // Throws (exit code 2) naming the config.json field when tp does not divide
  // num_attention_heads, num_key_value_heads (tp <= kv heads) or is not a multiple of it
  // (tp > kv heads), intermediate_size or vocab_size. `source` names the config file.
  static ShardPlan make(const ModelConfig& config, int tp, int tp_rank,
                        const std::string& source = "config.json");
};

// A [rows, cols] matrix in `dtype`, either viewing mapped memory or owning a copy. Row-major as
// in the checkpoint, or after make_resident, for the matmul operands, packed for the CPU
// kernels (cpu::pack_weights). Move-only: `data` may point into `owned`.
struct WeightMatrix {
  const std::byte* data = nullptr;
  DType dtype = DType::kF32;
  int rows = 0, cols = 0;
  bool packed = false;  // data is cpu::pack_weights' layout, not row-major
  std::vector<std::byte> owned;

  WeightMatrix() = default;
  WeightMatrix(WeightMatrix&&) = default;
  WeightMatrix& operator=(WeightMatrix&&) = default;
  WeightMatrix(const WeightMatrix&) = delete;
  WeightMatrix& operator=(const WeightMatrix&) = delete;
  bool is_copy() const { return !owned.empty(); }
};

// A norm weight [size] in the checkpoint dtype (views mapped memory).
struct WeightVector {
  const std::byte* data = nullptr;
  DType dtype = DType::kF32;
  int size = 0;
};

struct LayerWeights {
  WeightVector input_norm, post_attention_norm;
  WeightMatrix q, k, v, o;      // q [q_heads*hd, H], k/v [kv_heads*hd, H], o [H, q_heads*hd]
  WeightMatrix gate, up, down;  // gate/up [I_local, H], down [H, I_local]
  // After make_resident: gate and up packed as block pairs for the fused SwiGLU matmul
  // (cpu::pack_weight_pairs; rows = I_local, cols = H); gate and up are then empty.
  WeightMatrix gate_up;
  // float32 copies; empty when the model has none (Qwen2: q/k/v; attention_bias: also o).
  std::vector<float> q_bias, k_bias, v_bias, o_bias;
};

struct ModelWeights {
  ShardPlan plan;
  WeightMatrix embed;    // [vocab_local, H] rows vocab_begin..
  WeightMatrix lm_head;  // [vocab_local, H] (the embedding's rows when tie_word_embeddings)
  WeightVector final_norm;
  std::vector<LayerWeights> layers;

  // Loads this rank's shard; every tensor is checked against config.json's shapes.
  static ModelWeights load(const Checkpoint& checkpoint, int tp, int tp_rank);

  // Copies every matrix into one anonymous, 64-byte-aligned arena backed by transparent huge
  // pages where the kernel allows them (the CPU backend calls this; the CUDA backend uploads the
  // views instead): lm_head and the layers' projections packed for cpu::matmul (packed = true;
  // gate and up together, as gate_up pairs),
  // the embedding row-major for the row gathers, or, when tied to lm_head, viewing lm_head's
  // packed copy (packed = true: cpu::gather_rows_packed). Why: pages
  // of a mapped file can be evicted while a decoder waits (the kernel's reclaim sees them as
  // page cache), and a 4 KiB-page mapping costs TLB misses on every pass; decode streams all
  // weights per token, so both show up directly as lost bandwidth. Afterwards the matrices no
  // longer view the checkpoint (norm weights still do). Throws when the memory cannot be
  // allocated.
  void make_resident();
  // The arena of make_resident (null before); shared so that moved-from copies stay valid.
  std::shared_ptr<std::byte> arena;
};

}  // namespace specrun
