// The CUDA backend: the backend interface (backend/backend.h) on one device. Ops launch
// kernels/cuda on the rank's compute stream and never synchronise; weights stay in their
// checkpoint dtype in one device allocation (gate and up concatenated as one [2I, H] matrix);
// activations and KV caches are float32 in device memory. It has every optional fused op of
// backend/default_ops.h, each falling back to the default composition where its kernel does not
// apply. Heads whose keys and values have one width and the default softmax scale take the tuned
// grouped-query kernels (cuda::attention); others (AttentionHeads with key_dim != value_dim,
// values_in_keys or an explicit scale: MLA's latent heads) take cuda::latent_attention, a simple
// kernel built without a GPU and not yet verified on one (docs/gpu.md). Collectives of the graph
// run on NCCL on the same stream.
//
// CudaContext is the rank's device state (device, stream, cuBLAS, the NCCL communicators) made
// once per process by the model factory; every CudaBackend of the rank and the token decisions
// (spec/token_ops.h) share it. Built only with CUDA (SPECRUN_HAVE_CUDA).
#pragma once

#ifdef SPECRUN_HAVE_CUDA

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/default_ops.h"
#include "dist/mpi_comm.h"
#include "dist/nccl_comm.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/step_graphs.h"

namespace specrun {

struct CudaSpace {};

class CudaContext {
 public:
  // Collective over tp_group (NCCL bootstrap). device: this rank's device (choose_device);
  // timeout_s bounds every wait (parallel.comm_timeout_s). tp_group and self (MPI_COMM_SELF)
  // must outlive the context.
  CudaContext(int device, MpiComm& tp_group, MpiComm& self, double timeout_s);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  cuda::DeviceContext& device() { return *device_; }
  cudaStream_t stream() const { return device_->stream(); }
  NcclComm& tp() { return *tp_; }
  // A one-rank communicator on the same stream (replicated models), made on first use.
  NcclComm& self();
  // Waits for the stream with the deadline of the NCCL communicators (a hung collective becomes
  // an error naming the rank) and adds the finished collectives' time to their timing.
  void synchronize();

  // Step graphs (kernels/cuda/step_graphs.h) for the forward passes of this rank's models that
  // allow them (parallel.cuda_graphs; on by default). Read at the start of every pass.
  bool step_graphs() const { return step_graphs_; }
  void set_step_graphs(bool on) { step_graphs_ = on; }
  // Counts over all of this rank's models.
  cuda::StepGraphStats& step_graph_stats() { return graph_stats_; }

  // Whether the kernels of a step graph (projections, norms, RoPE + append, attention) are
  // programmatic dependent launches (parallel.cuda_pdl, on by default;
  // kernels/cuda/device_util.cuh): asked for, and the device has them (compute capability 9.0
  // on). Read at every launch.
  bool dependent_launch() const;
  void set_dependent_launch(bool on) { dependent_launch_ = on; }
  // Whether the projections run as persistent GEMVs (cuda::kGemvPersistent: as many blocks as
  // fit on the device, walking groups of rows; on by default; the benchmark compares both).
  bool persistent_gemv() const { return persistent_gemv_; }
  void set_persistent_gemv(bool on) { persistent_gemv_ = on; }
  // Whether the projections of decode and verify passes run on the tensor cores
  // (cuda::kGemvTensorCores: BF16 weights, compute capability 8.0 on; parallel.cuda_tensor_cores,
  // off by default). Set before a job's first pass: a job uses one kernel for all its passes.
  bool tensor_core_gemv() const { return tensor_core_gemv_; }
  void set_tensor_core_gemv(bool on) { tensor_core_gemv_ = on; }
  // Whether the fused ops added since the H200's runs fuse (parallel.cuda_fused_ops, on by
  // default): rope_attend, add_rmsnorm_linear_multi / add_rmsnorm_swiglu without a pending delta,
  // linear_residual; off, they run their default compositions (backend/default_ops.h). Read at
  // every pass.
  bool fused_ops() const { return fused_ops_; }
  void set_fused_ops(bool on) { fused_ops_ = on; }

 private:
  std::unique_ptr<cuda::DeviceContext> device_;
  MpiComm& self_group_;
  double timeout_s_;
  std::unique_ptr<NcclComm> tp_, self_;
  bool step_graphs_ = true;
  bool dependent_launch_ = true;
  bool persistent_gemv_ = true;
  bool tensor_core_gemv_ = false;
  bool fused_ops_ = true;
  cuda::StepGraphStats graph_stats_;
};

// The bandwidth reference on a device: a device-to-device copy of `bytes` bytes (read + write)
// on the context's stream; pass() runs one and waits for it.
class DeviceCopyProbe {
 public:
  DeviceCopyProbe(CudaContext& context, std::size_t bytes);
  void pass();

 private:
  CudaContext& ctx_;
  std::size_t bytes_;
  cuda::DeviceBuffer a_, b_;
};

class CudaBackend {
 public:
  static constexpr BackendKind kKind = BackendKind::kCuda;
  using F = Ptr<CudaSpace, float>;
  using CF = Ptr<CudaSpace, const float>;

  // A prepared weight in device memory (a view into the backend's weight allocation).
  // Matrices [rows, cols] row-major in dtype; a kGateUp weight is gate's rows followed by up's
  // (rows = rows of each); vectors keep their dtype (biases float32).
  struct Weight {
    const void* data = nullptr;
    DType dtype = DType::kF32;
    int rows = 0, cols = 0;
    bool pair = false;
  };

  // Per layer [capacity][key_floats] then [capacity][value_floats] (KvShape's widths; the
  // kernels' [layers][K, V][capacity][row] when they are equal; value_floats 0 for MLA's latent
  // rows, whose values are inside the keys): exactly layers * capacity * (key_floats +
  // value_floats) floats.
  struct KvBlock {
    cuda::DeviceBuffer data;
    int capacity = 0;
    int key_floats = 0, value_floats = 0;
    std::size_t offset(int layer, int which) const {
      const std::size_t cap = static_cast<std::size_t>(capacity);
      return static_cast<std::size_t>(layer) * cap *
                 (static_cast<std::size_t>(key_floats) + value_floats) +
             (which == 0 ? 0 : cap * key_floats);
    }
  };

  class Scratch {
   public:
    F grow(std::size_t n) {
      buf_.grow(std::max<std::size_t>(n, 1) * sizeof(float));
      return F(buf_.as<float>());
    }

   private:
    cuda::DeviceBuffer buf_;
  };

  class Floats {
   public:
    Floats() = default;
    Floats(cuda::DeviceBuffer buf, std::size_t n) : buf_(std::move(buf)), n_(n) {}
    const float* data() const { return buf_.as<float>(); }
    std::size_t size() const { return n_; }

   private:
    cuda::DeviceBuffer buf_;
    std::size_t n_ = 0;
  };

  struct LinearOut {
    const Weight* w;
    const Weight* bias;
    F y;
  };
  struct KvRows {
    F k, v;
  };

  // context must outlive the backend.
  explicit CudaBackend(CudaContext& context);
  CudaBackend(CudaBackend&&) = default;

  Floats upload_floats(const std::vector<float>& v) const;
  // Throws with advice when `bytes` of weights (the shard of tp rank tp_rank of the checkpoint
  // in `dir`) plus ~1 GiB of working memory do not fit in the device's free memory.
  void check_fits(std::size_t bytes, int tp_rank, int tp, const std::string& dir) const;
  void finish();
  void synchronize() { ctx_->synchronize(); }

  std::size_t weight_bytes(const HostTensor& t, WeightUse use) const;
  void reserve_weights(std::size_t bytes);
  Weight prepare(const HostTensor& t, WeightUse use);
  Weight prepare_pair(const HostTensor& gate, const HostTensor& up);
  Weight prepare_tied(const Weight& lm_head) const { return lm_head; }
  KvBlock new_kv_block(const KvShape& shape, int capacity) const;

  // A forward pass: stages the batch (one pinned host-to-device copy), then, with the
  // context's step graphs on and at most graph_tokens() tokens (decode, verify, drafting: 64,
  // or 512 with every projection on the tensor cores), records the pass's launches and NCCL
  // collectives until end_forward issues them as one CUDA graph (kernels/cuda/step_graphs.h;
  // with tp > 1 the group agrees on each pass's choice, NcclComm::agree_step). Larger passes
  // (prefill, through cuBLAS) run launch by launch.
  void begin_forward(std::span<const SeqSpan<KvBlock>> seqs, const std::int32_t* tokens,
                     const std::int32_t* positions, int n);
  // Issues the recorded pass (if any) and records when its staged inputs have been copied, so that
  // the next begin_forward may rewrite the pinned buffer. Every begin_forward needs one.
  void end_forward() { finish_forward(); }

  void embed(const Weight& table, int vocab_begin, F x);
  void rope_table(const Floats& inv_freq, int head_dim, F table);
  void rope_apply(F x, int n, int heads, int head_dim, std::int64_t row_stride, CF table);
  void linear(CF x, int n, const Weight& w, const Weight* bias, F y);
  // Decode and verify windows: one launch (cuda::matmul_multi); prefill: each on its own.
  void linear_multi(CF x, int n, std::span<const LinearOut> outs);
  void swiglu(CF x, int n, const Weight& gate_up, F y);
  void silu_mul(CF gate, CF up, F y, std::size_t n);
  void rmsnorm(CF x, int n, int dim, const Weight& w, float eps, F y);
  void add_rmsnorm(F x, CF delta, int n, int dim, const Weight& w, float eps, F y);
  // On the GEMV path the projection adds itself to the residual stream in its epilogue
  // (cuda::matmul_accumulate; returns a null pointer, tmp untouched); prefill: the composition
  // (the output in tmp, added by the norm after it).
  CF linear_residual(CF in, int n, const Weight& w, const Weight* bias, F tmp, F x);
  // With nothing to add (delta null) and where cuda::gemv_norm_fits (persistent GEMVs of up to
  // 8 tokens: decode, short verify windows), the norm runs inside the projections' launch and xn
  // is untouched; else the composition (add_rmsnorm or rmsnorm, then the projections).
  void add_rmsnorm_linear_multi(F x, CF delta, int n, int dim, const Weight& norm, float eps, F xn,
                                std::span<const LinearOut> outs);
  void add_rmsnorm_swiglu(F x, CF delta, int n, int dim, const Weight& norm, float eps, F xn,
                          const Weight& gate_up, F y);
  void add_inplace(F y, CF x, std::size_t n);
  void add_bias(F y, const Weight& bias, int n, int dim);
  // Heads of one width and the default scale: the grouped-query kernels (cuda::kv_append,
  // cuda::attention); other heads (latent_heads below): cuda::latent_kv_append and
  // cuda::latent_attention over the split layout (KvBlock), every sequence's block of the heads'
  // widths.
  KvRows kv_rows(int layer, const AttentionHeads& heads);
  void attend(int layer, CF q, int m, bool last_only, F out, const AttentionHeads& heads);
  // RoPE of kv.k and q with `table`, the append and attention in two launches (latent heads: the
  // composition) (the keys rotated
  // as they are appended, the queries as attention loads them): bitwise the composition
  // (backend/default_ops.h); q and kv.k are left as they were.
  void rope_attend(int layer, const KvRows& kv, F q, int n, CF table, F out,
                   const AttentionHeads& heads);
  // LanguageModel::keep's move of the kept slots (kernels/cuda kv_keep).
  void kv_keep(KvBlock& kv, int layers, int first, std::span<const int> rows);
  void keep_last_rows(F a, std::size_t width);
  void gather_rows(CF src, std::size_t width, std::span<const int> rows, F dst);
  void copy_rows(F dst, std::size_t dst_stride, CF src, std::size_t src_stride, int rows,
                 std::size_t width);
  // Weighted row sums (cuda::combine_rows): the host offsets, sources and scales are copied to
  // the device first (pageable memory), so not inside a pass recorded as a step graph (MoE
  // models are refused on CUDA for now: model/graphs_cuda.cpp).
  void combine_rows(F y, int rows, std::size_t width, CF x, std::span<const int> first,
                    std::span<const int> src, std::span<const float> scale);
  void unshard_vocab(CF gathered, int rows, int tp, int v_local, F out);
  // NCCL on the stream; in a recorded pass, launches of the step graph (comm must be an
  // NcclComm on this stream, the same for the whole pass).
  void all_reduce_sum(Communicator& comm, F data, std::size_t count);
  void all_gather(Communicator& comm, CF send, F recv, std::size_t floats);
  void read(CF src, std::size_t count, float* host);
  void read_kv(KvBlock& kv, int layer, int which, int rows, float* host);

  // Whether heads take the latent attention (cuda::latent_attention) rather than the
  // grouped-query kernels: keys and values of different widths, values inside the keys or an
  // explicit softmax scale.
  static bool latent_heads(const AttentionHeads& heads) {
    return heads.key_dim != heads.value_dim || heads.values_in_keys || heads.scale != 0.0f;
  }
  // Off: no pass of this backend is recorded as a step graph, whatever the context says (a graph
  // whose ops read results back on the host, as the MoE router does: model/graphs_cuda.cpp).
  void set_step_graphs(bool on) { step_graphs_ = on; }

 private:
  CudaContext* ctx_;
  cudaStream_t stream_;
  cuda::DeviceBuffer weights_;
  std::size_t weights_bytes_ = 0, weights_used_ = 0;

  // The staged forward call: [slots n][last slots B][tokens n][positions n][last rows B][input
  // rows n][tree paths], one host-to-device copy from pinned memory. The input rows are filled
  // by a recorded pass's gather_rows (an EAGLE-3 head's hidden inputs), after begin_forward.
  cuda::PinnedBuffer staging_host_;
  cuda::DeviceBuffer staging_;
  // Recorded after each pass: the pinned staging buffer is rewritten only once the pass that
  // copies from it has run.
  cuda::Event staged_;
  bool staged_pending_ = false;
  std::unique_ptr<cuda::StepGraphs> graphs_;
  cuda::KvSlot *slots_ = nullptr, *last_slots_ = nullptr;
  std::int32_t *tokens_ = nullptr, *positions_ = nullptr, *last_rows_ = nullptr;
  std::int32_t* input_rows_ = nullptr;       // device side of the staged input rows
  std::int32_t* input_rows_host_ = nullptr;  // their place in the pinned buffer
  bool input_rows_staged_ = false;           // this pass's gather_rows has filled them
  int n_ = 0, n_seqs_ = 0;
  // `rows` copied to the device (keep_rows_dev_), valid until the next call.
  const std::int32_t* upload_rows(std::span<const int> rows);
  void finish_forward();
  // attend for latent heads (cuda::latent_kv_append, cuda::latent_attention).
  void latent_attend(int layer, CF q, int m, bool last_only, F out, const AttentionHeads& heads);
  // fn(stream_, args...) now, or recorded into the pass's step graph.
  template <class... P, class... A>
  void launch(void (*fn)(cudaStream_t, P...), A&&... args) {
    graphs_->launch(fn, stream_, std::forward<A>(args)...);
    const void* f = reinterpret_cast<const void*>(fn);
    after_kernel_ = f != reinterpret_cast<const void*>(&cuda::memcpy_async) &&
                    f != reinterpret_cast<const void*>(&cuda::memcpy2d_async);
  }
  // The projections of a recorded pass, and the small kernels between them (the norms, the two
  // of rope_attend), go as programmatic dependent launches when the context allows them and the
  // launch before was a kernel (a programmatic dependency links two kernels; after a copy, e.g.
  // keep_last_rows before lm_head, the launch waits as usual).
  bool dependent_launch() const {
    return graphs_->recording() && after_kernel_ && ctx_->dependent_launch();
  }
  // linear_multi's single launch, with the input's norm fused when `norm` is given; false
  // (nothing launched) when the outputs or the pass do not allow it.
  bool multi_launch(CF x, int n, std::span<const LinearOut> outs, const Weight* norm, float eps);
  // Whether this pass's projections of a [*, in] weight in dtype take the GEMV path.
  bool gemv_path(int n, DType dtype, int in) const {
    return n <= cuda::gemv_tokens(gemv_flags(), dtype, in);
  }
  // cuda::kGemv* flags of this pass's projections.
  int gemv_flags() const {
    return (dependent_launch() ? cuda::kGemvDependent : 0) |
           (ctx_->persistent_gemv() ? cuda::kGemvPersistent : 0) |
           (ctx_->tensor_core_gemv() ? cuda::kGemvTensorCores : 0);
  }
  // This pass's split of attention over long contexts (cuda::attention_chunks of its largest
  // position; 0: passes above kMaxTensorCoreTokens, never split) and the chunks' states, at most
  // kAttentionStatesBytes of them (more tokens go in groups: 1.1 GB uncapped for 512 tokens of
  // 32 heads at 32K positions).
  static constexpr std::size_t kAttentionStatesBytes = std::size_t{128} << 20;
  cuda::AttentionSplit attention_split(int m, int heads, int head_dim);
  int attention_chunks_ = 0;
  Scratch attention_states_;
  // The (dtype, in) of every linear weight, and the most tokens a pass may have for all of its
  // projections to take the GEMV path with this pass's flags (cuda::gemv_tokens: 64, or 512 on
  // the tensor cores when every weight allows it): the passes a step graph may record.
  void note_linear(DType dtype, int in);
  int graph_tokens() const;
  std::vector<std::pair<DType, int>> linear_shapes_;
  bool after_kernel_ = false;  // the last launch was a kernel, not a copy or a collective
  // The communicator of the collectives recorded in this pass (nullptr: none yet).
  NcclComm* recorded_comm_ = nullptr;
  NcclComm& recorded(Communicator& comm);
  std::vector<std::int32_t> paths_, keep_rows_;  // token-tree paths; kv_keep's / gather's rows
  std::vector<int> path_at_;                     // per token: its path's first entry, or -1
  cuda::DeviceBuffer keep_rows_dev_;
  std::vector<std::int32_t> combine_host_;  // combine_rows' offsets, sources and scales' bits
  cuda::DeviceBuffer combine_dev_;
  Scratch k_, v_, g_, u_, moved_;
  cuda::DeviceBuffer gemm_scratch_;
  int kv_row_floats_ = 0;
  // The staged sequences' cache widths (-1 when they differ) and the latent heads' widths of the
  // last kv_rows (checked by attend).
  int pass_key_floats_ = 0, pass_value_floats_ = 0;
  int latent_key_floats_ = -1, latent_value_floats_ = -1;
  bool step_graphs_ = true;
};

}  // namespace specrun

#else  // no CUDA: the type exists (the model factory holds a null pointer to it), nothing else

namespace specrun {
class CudaContext {};
}  // namespace specrun

#endif  // SPECRUN_HAVE_CUDA
