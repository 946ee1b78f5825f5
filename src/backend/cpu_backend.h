// The CPU backend: the reference every test runs. Ops forward to kernels/cpu (the instruction-set
// variant chosen at start-up) on host memory; weights are repacked once at load into one
// anonymous, huge-page-backed arena in the layout of cpu::matmul (packed 32-row blocks; gate and
// up as block pairs for the fused SwiGLU matmul; a tied embedding reads lm_head's packed copy).
// Every op's numerics are those of kernels/cpu/ops.h; the fused ops are bitwise their
// compositions, so the one model graph computes bitwise what the CPU kernels define. Of the
// optional fused ops (backend/default_ops.h) it has add_rmsnorm, linear_multi, moe_experts (and
// swiglu's kernel): the others are their compositions.
//
// One CpuBackend per model (it holds that model's weights and the staged state of its current
// forward call). Not thread-safe: one forward at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "kernels/cpu/ops.h"

namespace specrun {

struct HostSpace {};

class CpuBackend {
 public:
  static constexpr BackendKind kKind = BackendKind::kCpu;
  using F = Ptr<HostSpace, float>;
  using CF = Ptr<HostSpace, const float>;

  // A prepared weight. Matrices of linear layers are packed (cpu::pack_weights); a kGateUp
  // weight holds gate and up as block pairs (rows = rows of each); an embedding is row-major,
  // or lm_head's packed copy when tied; vectors keep their dtype (biases are float32).
  struct Weight {
    enum class Layout { kRowMajor, kPacked, kPackedPair };
    const std::byte* data = nullptr;
    DType dtype = DType::kF32;
    int rows = 0, cols = 0;
    Layout layout = Layout::kRowMajor;
    QuantFormat quant{};  // quantized (kPacked / kPackedPair): pack_quantized's layout
  };

  // One sequence's keys and values, float32: per layer the keys [capacity][key_floats], then
  // the values [capacity][value_floats].
  struct KvBlock {
    std::vector<float> data;
    int capacity = 0;
    int key_floats = 0, value_floats = 0;
    float* keys(int layer) { return data.data() + offset(layer, 0); }
    float* values(int layer) { return data.data() + offset(layer, 1); }
    std::size_t offset(int layer, int which) const {
      const std::size_t layer_floats = static_cast<std::size_t>(key_floats) + value_floats;
      return (static_cast<std::size_t>(layer) * layer_floats +
              (which == 0 ? 0 : static_cast<std::size_t>(key_floats))) *
             static_cast<std::size_t>(capacity);
    }
    int floats(int which) const { return which == 0 ? key_floats : value_floats; }
  };

  // Growable float32 scratch (grows, never shrinks: no allocation per step once warm).
  class Scratch {
   public:
    F grow(std::size_t n) {
      if (v_.size() < n) v_.resize(n);
      return F(v_.data());
    }

   private:
    std::vector<float> v_;
  };

  // A small float32 array the graph keeps on the backend (RoPE inverse frequencies).
  using Floats = std::vector<float>;

  // threads: OpenMP threads of this model's ops.
  explicit CpuBackend(int threads);

  Floats upload_floats(const std::vector<float>& v) const { return v; }
  // Nothing to check on the host: the weights are repacked at their own size.
  void check_fits(std::size_t, int, int, const std::string&) const {}
  // End of a forward call (the CUDA backend issues a recorded step graph and marks the staged
  // inputs reusable; every begin_forward needs its end_forward) and of the model's life: nothing
  // to wait for on the host.
  void end_forward() {}
  void finish() {}
  void synchronize() {}

  // ---- weights: sized first (weight_bytes for each, then reserve_weights once), then prepared.
  std::size_t weight_bytes(const HostTensor& t, WeightUse use) const;
  // One arena of `bytes` (64-byte aligned pieces); throws with advice when it cannot be had.
  void reserve_weights(std::size_t bytes);
  Weight prepare(const HostTensor& t, WeightUse use);
  Weight prepare_pair(const HostTensor& gate, const HostTensor& up);
  // The embedding of a model whose lm_head is tied to it: reads lm_head's prepared copy.
  Weight prepare_tied(const Weight& lm_head) const;

  KvBlock new_kv_block(const KvShape& shape, int capacity) const;

  // ---- one forward call. begin_forward stages the batch (tokens[n], positions[n] and the
  // sequences' spans, host arrays that must stay valid until the call ends); the ops below then
  // refer to it. A backend may issue the ops until end_forward as one graph (CUDA).
  void begin_forward(std::span<const SeqSpan<KvBlock>> seqs, const std::int32_t* tokens,
                     const std::int32_t* positions, int n);

  // x[t, :] = row tokens[t] - vocab_begin of `table` for the staged tokens (zeros outside
  // [vocab_begin, vocab_begin + rows): a sum over vocabulary shards is the lookup).
  void embed(const Weight& table, int vocab_begin, F x);
  // cos/sin table [n, head_dim] of the staged positions (cpu::rope_table).
  void rope_table(const Floats& inv_freq, int head_dim, F table);
  void rope_apply(F x, int n, int heads, int head_dim, std::int64_t row_stride, CF table);
  // y[t, o] = x[t, :] . W[o, :] (+ bias[o]); the numerics of cpu::matmul.
  void linear(CF x, int n, const Weight& w, const Weight* bias, F y);
  // Several linears over one input in one parallel region (bitwise each linear alone).
  struct LinearOut {
    const Weight* w;
    const Weight* bias;
    F y;
  };
  void linear_multi(CF x, int n, std::span<const LinearOut> outs);
  // y = silu(x W_gate^T) * (x W_up^T) of a gate/up pair, in the matmul's epilogue (bitwise two
  // linears and cpu::silu_mul).
  void swiglu(CF x, int n, const Weight& gate_up, F y);
  void rmsnorm(CF x, int n, int dim, const Weight& w, float eps, F y);
  // x += delta, y = rmsnorm(x) in one pass (bitwise add_inplace then rmsnorm).
  void add_rmsnorm(F x, CF delta, int n, int dim, const Weight& w, float eps, F y);
  void add_inplace(F y, CF x, std::size_t n);
  void add_bias(F y, const Weight& bias, int n, int dim);

  // Where this forward's keys and values of `layer` go, [n, heads.key_floats()] and [n,
  // heads.value_floats()]: straight into the cache rows when the batch is one sequence, else
  // scratch that attend() appends per sequence.
  struct KvRows {
    F k, v;
  };
  KvRows kv_rows(int layer, const AttentionHeads& heads);
  // Appends the staged keys/values of `layer` to each sequence's cache (if kv_rows gave
  // scratch), then causal attention of q [m, heads.q_width()] over the caches into out [m,
  // heads.out_width()]: m = all n rows, or (last_only) one row per sequence, its last token's, at
  // row b. Key and value widths may differ (cpu::attention).
  void attend(int layer, CF q, int m, bool last_only, F out, const AttentionHeads& heads);
  // Keeps slots [0, first) of `kv` and moves slot first + rows[j] to first + j, every layer
  // (LanguageModel::keep).
  void kv_keep(KvBlock& kv, int layers, int first, std::span<const int> rows) const;
  // Moves row last[b] (each sequence's last token) of a [*, width] buffer to row b.
  void keep_last_rows(F a, std::size_t width);
  // dst[i, :] = src[rows[i], :] ([*, width] buffers; rows: host indices).
  void gather_rows(CF src, std::size_t width, std::span<const int> rows, F dst);
  // dst[r, :width] = src[r, :width] for r < rows, with row strides.
  void copy_rows(F dst, std::size_t dst_stride, CF src, std::size_t src_stride, int rows,
                 std::size_t width);
  // A mixture-of-experts layer's routed experts (fused::moe_experts; default_ops.h has the
  // contract): the pairs' rows gathered, every selected expert's SwiGLU in one parallel region
  // and their down projections in another (cpu::matmul_grouped, bitwise each expert's own
  // swiglu / linear), then combine_rows. Bitwise the default composition.
  void moe_experts(CF xn, int n, int dim, std::span<const Weight> gate_up,
                   std::span<const Weight> down, const ExpertGroups& groups, F xg, F act, F ye,
                   F out);
  // Weighted row sums (cpu::combine_rows): y[t, :] = sum of scale[i] * x[src[i], :] over i in
  // [first[t], first[t + 1]), in ascending i from zero; zeros for a row without terms. first
  // [rows + 1], src and scale [first[rows]]: host arrays. A mixture-of-experts layer's
  // combination of its experts' outputs.
  void combine_rows(F y, int rows, std::size_t width, CF x, std::span<const int> first,
                    std::span<const int> src, std::span<const float> scale);
  // Vocab-parallel logits gathered as [tp][rows][v_local] -> [rows][tp * v_local].
  void unshard_vocab(CF gathered, int rows, int tp, int v_local, F out);
  // The tensor-parallel group's collectives on this backend's buffers (here: the Communicator's
  // MPI, at once). all_gather: `floats` per rank, recv holds comm.size() blocks.
  void all_reduce_sum(Communicator& comm, F data, std::size_t count) {
    comm.all_reduce_sum(data.get(), count);
  }
  void all_gather(Communicator& comm, CF send, F recv, std::size_t floats) {
    comm.all_gather(send.get(), recv.get(), floats * sizeof(float));
  }
  // Host copies of backend data (here: memcpy).
  void read(CF src, std::size_t count, float* host) const;
  void read_kv(KvBlock& kv, int layer, int which, int rows, float* host) const;

  int threads() const { return threads_; }

 private:
  std::byte* carve(std::size_t bytes);
  // attend() of a sequence with a token tree; last_row >= 0: only its last token, at that row.
  void attend_tree(int layer, const SeqSpan<KvBlock>& s, CF q, int last_row, F out,
                   const AttentionHeads& heads);

  int threads_;
  std::shared_ptr<std::byte> arena_;
  std::size_t arena_bytes_ = 0, arena_used_ = 0;

  // The staged forward call.
  std::vector<SeqSpan<KvBlock>> seqs_;
  const std::int32_t* tokens_ = nullptr;
  const std::int32_t* positions_ = nullptr;
  int n_ = 0;
  std::vector<int> last_rows_;
  Scratch k_, v_;
  float* k_rows_ = nullptr;  // kv_rows' scratch (several sequences)
  float* v_rows_ = nullptr;
  bool direct_kv_ = false;
  std::vector<cpu::MatmulGroup> expert_groups_;  // moe_experts' products
};

}  // namespace specrun
