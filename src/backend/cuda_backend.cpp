#include "backend/cuda_backend.h"

#ifdef SPECRUN_HAVE_CUDA

#include <algorithm>
#include <cstring>
#include <iomanip>

#include "common/error.h"
#include "kernels/cuda/attention_latent.h"
#include "kernels/cuda/cuda_check.h"

namespace specrun {

static_assert(Backend<CudaBackend>, "CudaBackend has every member the model graphs use");
static_assert(FusesAddRmsnorm<CudaBackend> && FusesLinearMulti<CudaBackend> &&
                  FusesLinearResidual<CudaBackend> && FusesAddRmsnormLinearMulti<CudaBackend> &&
                  FusesAddRmsnormSwiglu<CudaBackend> && FusesRopeAttend<CudaBackend>,
              "CudaBackend has every fused op (the ones fused:: calls)");

static_assert(kCudaBatchInvariantTokens == cuda::kMaxGemvTokens &&
                  kCudaTensorCoreBatchInvariantTokens == cuda::kMaxTensorCoreTokens &&
                  kCudaTensorCoreInputMultiple == cuda::kTensorCoreInputMultiple,
              "backend.h states the GEMV paths' token limits");

namespace {

// Kept free for KV caches, scratch, cuBLAS and NCCL buffers when checking that weights fit.
constexpr std::size_t kHeadroomBytes = std::size_t{1} << 30;
constexpr std::size_t kAlign = 256;

std::size_t aligned(std::size_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

double gib(std::size_t bytes) {
  return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0);
}

template <typename T>
T* carve(std::byte*& at, std::size_t count) {
  T* p = reinterpret_cast<T*>(at);
  at += count * sizeof(T);
  return p;
}

}  // namespace

// ---- CudaContext ---------------------------------------------------------------------------

CudaContext::CudaContext(int device, MpiComm& tp_group, MpiComm& self, double timeout_s)
    : device_(std::make_unique<cuda::DeviceContext>(device)),
      self_group_(self),
      timeout_s_(timeout_s) {
  tp_ = std::make_unique<NcclComm>(tp_group, device, device_->stream(), timeout_s);
}

// Communicators before the device context whose stream they use.
CudaContext::~CudaContext() {
  self_.reset();
  tp_.reset();
}

NcclComm& CudaContext::self() {
  if (!self_)
    self_ =
        std::make_unique<NcclComm>(self_group_, device_->device(), device_->stream(), timeout_s_);
  return *self_;
}

bool CudaContext::dependent_launch() const {
  return dependent_launch_ && device_->compute_major() >= 9 && device_->dependent_launch_code();
}

void CudaContext::synchronize() {
  tp_->synchronize();  // every communicator of the rank shares this stream
  tp_->collect_timing();
  if (self_) self_->collect_timing();
}

DeviceCopyProbe::DeviceCopyProbe(CudaContext& context, std::size_t bytes)
    : ctx_(context), bytes_(bytes), a_(bytes), b_(bytes) {
  CUDA_CHECK(cudaMemsetAsync(a_.get(), 1, bytes, ctx_.stream()));
}

void DeviceCopyProbe::pass() {
  CUDA_CHECK(cudaMemcpyAsync(b_.get(), a_.get(), bytes_, cudaMemcpyDeviceToDevice, ctx_.stream()));
  ctx_.synchronize();
}

// ---- CudaBackend ---------------------------------------------------------------------------

CudaBackend::CudaBackend(CudaContext& context)
    : ctx_(&context),
      stream_(context.stream()),
      graphs_(std::make_unique<cuda::StepGraphs>(context.step_graph_stats())) {}

CudaBackend::Floats CudaBackend::upload_floats(const std::vector<float>& v) const {
  cuda::DeviceBuffer buf(std::max<std::size_t>(v.size(), 1) * sizeof(float));
  // On the compute stream: a pageable cudaMemcpy may return before its DMA lands, and the
  // compute stream does not wait for the legacy default stream.
  CUDA_CHECK(cudaMemcpyAsync(buf.get(), v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice,
                             stream_));
  return Floats(std::move(buf), v.size());
}

void CudaBackend::check_fits(std::size_t need, int tp_rank, int tp, const std::string& dir) const {
  const std::size_t free = ctx_->device().free_bytes();
  SPEC_INPUT_CHECK(need + kHeadroomBytes <= free,
                   "the shard of " << dir << " for tp rank " << tp_rank << " of " << tp << " needs "
                                   << std::fixed << std::setprecision(2) << gib(need)
                                   << " GiB of weights plus ~1 GiB of working memory"
                                   << " but device " << ctx_->device().device() << " has "
                                   << gib(free)
                                   << " GiB free: raise parallel.tp, use a smaller model, or "
                                      "free the GPU (nvidia-smi)");
}

void CudaBackend::finish() {
  // Nothing may still read our buffers when they are freed; errors cannot be thrown here.
  if (!cuda::unwinding()) (void)cudaStreamSynchronize(stream_);
}

namespace {

// Quantized weights are loaded kept packed (issue 44 step 3); the CUDA kernels for them are not
// yet run on a GPU: refused before anything is sized or uploaded.
void refuse_quantized(const HostTensor& t) {
  SPEC_INPUT_CHECK(!t.quantized(), "quantized weight " << describe_quantized(t)
                                                       << ": the CUDA backend's quantized kernels "
                                                          "are not yet run on a GPU (issue 44); "
                                                          "use backend = \"cpu\" or an "
                                                          "F32/F16/BF16 checkpoint");
}

}  // namespace

std::size_t CudaBackend::weight_bytes(const HostTensor& t, WeightUse use) const {
  refuse_quantized(t);
  return aligned(use == WeightUse::kGateUp ? 2 * t.bytes() : t.bytes());
}

void CudaBackend::reserve_weights(std::size_t bytes) {
  weights_.grow(std::max<std::size_t>(bytes, 1));
  weights_bytes_ = bytes;
}

CudaBackend::Weight CudaBackend::prepare(const HostTensor& t, WeightUse use) {
  SPEC_CHECK(use != WeightUse::kGateUp, "gate/up weights are prepared with prepare_pair");
  refuse_quantized(t);
  SPEC_CHECK(weights_used_ + aligned(t.bytes()) <= weights_bytes_, "weight allocation overflow");
  std::byte* dst = weights_.as<std::byte>() + weights_used_;
  // Stream-ordered before every kernel that reads it (see upload_floats); the pageable source
  // is staged before the call returns.
  CUDA_CHECK(cudaMemcpyAsync(dst, t.data, t.bytes(), cudaMemcpyHostToDevice, stream_));
  weights_used_ += aligned(t.bytes());
  if (use == WeightUse::kLinear) note_linear(t.dtype, t.cols);
  return Weight{dst, t.dtype, t.rows, t.cols, false};
}

CudaBackend::Weight CudaBackend::prepare_pair(const HostTensor& gate, const HostTensor& up) {
  refuse_quantized(gate);
  refuse_quantized(up);
  SPEC_CHECK(gate.rows == up.rows && gate.cols == up.cols && gate.dtype == up.dtype,
             "gate_proj and up_proj differ in shape or dtype");
  SPEC_CHECK(weights_used_ + aligned(2 * gate.bytes()) <= weights_bytes_,
             "weight allocation overflow");
  std::byte* dst = weights_.as<std::byte>() + weights_used_;
  CUDA_CHECK(cudaMemcpyAsync(dst, gate.data, gate.bytes(), cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(
      cudaMemcpyAsync(dst + gate.bytes(), up.data, up.bytes(), cudaMemcpyHostToDevice, stream_));
  weights_used_ += aligned(2 * gate.bytes());
  note_linear(gate.dtype, gate.cols);
  return Weight{dst, gate.dtype, gate.rows, gate.cols, true};
}

void CudaBackend::note_linear(DType dtype, int in) {
  const std::pair<DType, int> shape{dtype, in};
  if (std::find(linear_shapes_.begin(), linear_shapes_.end(), shape) == linear_shapes_.end())
    linear_shapes_.push_back(shape);
}

int CudaBackend::graph_tokens() const {
  int tokens = cuda::kMaxTensorCoreTokens;
  for (const auto& [dtype, in] : linear_shapes_)
    tokens = std::min(tokens, cuda::gemv_tokens(gemv_flags(), dtype, in));
  return linear_shapes_.empty() ? cuda::kMaxGemvTokens : tokens;
}

CudaBackend::KvBlock CudaBackend::new_kv_block(const KvShape& shape, int capacity) const {
  SPEC_CHECK(capacity > 0, "KV cache capacity must be positive, got " << capacity);
  SPEC_CHECK(shape.layers > 0 && shape.key_floats > 0 && shape.value_floats >= 0,
             "KV cache of " << shape.layers << " layers, " << shape.key_floats << " + "
                            << shape.value_floats << " floats per token");
  const std::size_t bytes =
      static_cast<std::size_t>(shape.layers) * static_cast<std::size_t>(capacity) *
      (static_cast<std::size_t>(shape.key_floats) + shape.value_floats) * sizeof(float);
  KvBlock b;
  b.capacity = capacity;
  b.key_floats = shape.key_floats;
  b.value_floats = shape.value_floats;
  try {
    b.data.grow(bytes);
  } catch (const Error& e) {
    (void)cudaGetLastError();
    SPEC_FAIL("cannot allocate a KV cache of "
              << std::fixed << std::setprecision(3) << gib(bytes) << " GiB (" << capacity
              << " tokens) on device " << ctx_->device().device() << " (" << e.message()
              << "): lower data.batch_size or decode.max_new_tokens, or raise parallel.tp");
  }
  return b;
}

void CudaBackend::begin_forward(std::span<const SeqSpan<KvBlock>> seqs, const std::int32_t* tokens,
                                const std::int32_t* positions, int n) {
  const int B = static_cast<int>(seqs.size());
  n_ = n;
  n_seqs_ = B;
  // The previous pass may still be copying from the pinned staging buffer.
  if (staged_pending_) {
    CUDA_CHECK(cudaEventSynchronize(staged_.get()));
    staged_pending_ = false;
  }
  graphs_->begin(ctx_->step_graphs() && step_graphs_ && n <= graph_tokens());
  pass_key_floats_ = B > 0 ? seqs[0].kv->key_floats : 0;
  pass_value_floats_ = B > 0 ? seqs[0].kv->value_floats : 0;
  for (const SeqSpan<KvBlock>& s : seqs)
    if (s.kv->key_floats != pass_key_floats_ || s.kv->value_floats != pass_value_floats_)
      pass_key_floats_ = pass_value_floats_ = -1;
  recorded_comm_ = nullptr;
  // Token-tree nodes read their ancestors' slots (KvSlot::path): one list per node.
  paths_.clear();
  path_at_.assign(n, -1);
  for (const SeqSpan<KvBlock>& s : seqs) {
    if (!s.has_tree()) continue;
    for (int slot = std::max(s.start, s.tree_base); slot < s.start + s.n_tokens; ++slot) {
      const std::size_t first = paths_.size();
      for (int at = slot; at >= s.tree_base; at = s.tree_parents[at - s.tree_base])
        paths_.push_back(at);
      std::reverse(paths_.begin() + static_cast<std::ptrdiff_t>(first), paths_.end());
      path_at_[s.first_row + (slot - s.start)] = static_cast<int>(first);
    }
  }
  // The paths go last and their room is rounded up to a power of two, so that the staged
  // layout (whose pointers the kernels take) and the copy's size depend on the pass's shape
  // only, not on the tree's depth profile: passes of one shape can share a step graph.
  std::size_t n_paths = 0;
  if (!paths_.empty()) {
    n_paths = 64;
    while (n_paths < paths_.size()) n_paths *= 2;
  }
  const std::size_t staged = static_cast<std::size_t>(n + B) * sizeof(cuda::KvSlot) +
                             (3 * static_cast<std::size_t>(n) + B + n_paths) * sizeof(std::int32_t);
  staging_host_.grow(staged);
  staging_.grow(staged);
  std::byte* at = staging_host_.as<std::byte>();
  auto* slots = carve<cuda::KvSlot>(at, n);
  auto* last_slots = carve<cuda::KvSlot>(at, B);
  auto* tok = carve<std::int32_t>(at, n);
  auto* pos = carve<std::int32_t>(at, n);
  auto* last = carve<std::int32_t>(at, B);
  input_rows_host_ = carve<std::int32_t>(at, n);
  input_rows_staged_ = false;
  auto* path = carve<std::int32_t>(at, n_paths);
  std::byte* dev = staging_.as<std::byte>();
  slots_ = carve<cuda::KvSlot>(dev, n);
  last_slots_ = carve<cuda::KvSlot>(dev, B);
  tokens_ = carve<std::int32_t>(dev, n);
  positions_ = carve<std::int32_t>(dev, n);
  last_rows_ = carve<std::int32_t>(dev, B);
  input_rows_ = carve<std::int32_t>(dev, n);
  const std::int32_t* dev_paths = carve<std::int32_t>(dev, n_paths);
  for (int b = 0; b < B; ++b) {
    const SeqSpan<KvBlock>& s = seqs[b];
    for (int i = 0; i < s.n_tokens; ++i) {
      const int t = s.first_row + i;
      cuda::KvSlot& slot = slots[t];
      slot = cuda::KvSlot{
          s.kv->data.as<float>(), s.kv->capacity, positions[t], s.start + i, 0, nullptr};
      if (path_at_[t] >= 0) {
        slot.tree_base = s.tree_base;
        slot.path = dev_paths + path_at_[t];
      }
    }
    last[b] = s.first_row + s.n_tokens - 1;
    last_slots[b] = slots[last[b]];
  }
  std::copy(paths_.begin(), paths_.end(), path);
  std::memcpy(tok, tokens, sizeof(std::int32_t) * n);
  std::memcpy(pos, positions, sizeof(std::int32_t) * n);
  // Attention over long contexts splits each token's positions over several blocks in every pass
  // of up to kMaxTensorCoreTokens tokens (decode, verify, drafting: the same arithmetic for a
  // token in all of them), never in larger ones (prefill: enough blocks already).
  attention_chunks_ = 0;
  if (n <= cuda::kMaxTensorCoreTokens)
    attention_chunks_ = cuda::attention_chunks(*std::max_element(positions, positions + n));
  launch(&cuda::memcpy_async, staging_.get(), staging_host_.get(), staged, cudaMemcpyHostToDevice);
}

void CudaBackend::finish_forward() {
  if (recorded_comm_ != nullptr && recorded_comm_->size() > 1) {
    NcclComm* comm = recorded_comm_;
    graphs_->end(stream_, [comm](std::int64_t choice) { return comm->agree_step(choice); });
  } else {
    graphs_->end(stream_);
  }
  recorded_comm_ = nullptr;
  CUDA_CHECK(cudaEventRecord(staged_.get(), stream_));
  staged_pending_ = true;
}

const std::int32_t* CudaBackend::upload_rows(std::span<const int> rows) {
  // Pageable host memory: the copy is staged before cudaMemcpyAsync returns, so the vector may
  // change afterwards. Such a copy cannot be part of a step graph.
  SPEC_CHECK(!graphs_->recording(),
             "a host-index upload inside a forward pass recorded as a "
             "step graph (the model must not ask for one)");
  keep_rows_.assign(rows.begin(), rows.end());
  keep_rows_dev_.grow(keep_rows_.size() * sizeof(std::int32_t));
  CUDA_CHECK(cudaMemcpyAsync(keep_rows_dev_.get(), keep_rows_.data(),
                             keep_rows_.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                             stream_));
  return keep_rows_dev_.as<std::int32_t>();
}

void CudaBackend::kv_keep(KvBlock& kv, int layers, int first, std::span<const int> rows) {
  if (rows.empty()) return;
  const std::int32_t* dev_rows = upload_rows(rows);
  F scratch = moved_.grow(static_cast<std::size_t>(layers) * rows.size() *
                          (static_cast<std::size_t>(kv.key_floats) + kv.value_floats));
  if (kv.key_floats == kv.value_floats)
    launch(&cuda::kv_keep, kv.data.as<float>(), kv.capacity, layers, kv.key_floats, first, dev_rows,
           static_cast<int>(rows.size()), scratch.get());
  else
    launch(&cuda::kv_keep_split, kv.data.as<float>(), kv.capacity, layers, kv.key_floats,
           kv.value_floats, first, dev_rows, static_cast<int>(rows.size()), scratch.get());
}

void CudaBackend::embed(const Weight& table, int vocab_begin, F x) {
  launch(&cuda::gather_rows, table.data, table.dtype, std::int64_t{vocab_begin},
         std::int64_t{table.rows}, table.cols, tokens_, n_, x.get());
}

void CudaBackend::rope_table(const Floats& inv_freq, int head_dim, F table) {
  launch(&cuda::rope_table, inv_freq.data(), head_dim, positions_, n_, table.get());
}

void CudaBackend::rope_apply(F x, int n, int heads, int head_dim, std::int64_t row_stride,
                             CF table) {
  launch(&cuda::rope_apply, x.get(), n, heads, head_dim, row_stride, table.get());
}

void CudaBackend::linear(CF x, int n, const Weight& w, const Weight* bias, F y) {
  gemm_scratch_.grow(std::max<std::size_t>(cuda::matmul_scratch_bytes(n, w.cols, w.dtype), 1));
  const cublasHandle_t cublas = ctx_->device().cublas();
  const float* b = bias != nullptr ? static_cast<const float*>(bias->data) : nullptr;
  if (graphs_->recording()) {  // the GEMV path only (n <= graph_tokens()): no cuBLAS
    launch(&cuda::matmul_multi, x.get(), n, w.cols, w.dtype, 1, w.data, w.rows, b, y.get(), nullptr,
           0, nullptr, nullptr, nullptr, 0, nullptr, nullptr, gemv_flags(), nullptr, DType::kF32,
           0.0f);
    return;
  }
  // The GEMV path up to gemv_tokens (64, or 512 on the tensor cores), else cuBLAS.
  cuda::matmul(cublas, stream_, x.get(), n, w.cols, w.data, w.dtype, w.rows, b, y.get(),
               gemm_scratch_.get(), gemm_scratch_.bytes(), gemv_flags());
}

void CudaBackend::swiglu(CF x, int n, const Weight& gate_up, F y) {
  SPEC_CHECK(gate_up.pair, "swiglu needs a gate/up pair");
  if (gemv_path(n, gate_up.dtype, gate_up.cols)) {
    launch(&cuda::swiglu_gemv, x.get(), n, gate_up.cols, gate_up.data, gate_up.dtype, gate_up.rows,
           y.get(), gemv_flags(), nullptr, DType::kF32, 0.0f);
    return;
  }
  Weight gate = gate_up, up = gate_up;
  gate.pair = up.pair = false;
  up.data = static_cast<const std::byte*>(gate_up.data) +
            static_cast<std::size_t>(gate_up.rows) * gate_up.cols * dtype_size(gate_up.dtype);
  const std::size_t count = static_cast<std::size_t>(n) * gate_up.rows;
  compose_swiglu(*this, x, n, gate, up, g_.grow(count), u_.grow(count), y);
}

void CudaBackend::linear_multi(CF x, int n, std::span<const LinearOut> outs) {
  if (!multi_launch(x, n, outs, nullptr, 0.0f)) compose_linear_multi(*this, x, n, outs);
}

bool CudaBackend::multi_launch(CF x, int n, std::span<const LinearOut> outs, const Weight* norm,
                               float eps) {
  bool fused = !outs.empty() && outs.size() <= 3 &&
               gemv_path(n, outs[0].w->dtype, outs[0].w->cols) &&
               (norm == nullptr || cuda::gemv_norm_fits(n, outs[0].w->cols, gemv_flags()));
  for (const LinearOut& o : outs)
    fused = fused && o.w->dtype == outs[0].w->dtype && o.w->cols == outs[0].w->cols && !o.w->pair;
  if (!fused) return false;
  const void* w[3] = {nullptr, nullptr, nullptr};
  const float* bias[3] = {nullptr, nullptr, nullptr};
  float* y[3] = {nullptr, nullptr, nullptr};
  int rows[3] = {0, 0, 0};
  for (std::size_t i = 0; i < outs.size(); ++i) {
    w[i] = outs[i].w->data;
    rows[i] = outs[i].w->rows;
    bias[i] = outs[i].bias != nullptr ? static_cast<const float*>(outs[i].bias->data) : nullptr;
    y[i] = outs[i].y.get();
  }
  launch(&cuda::matmul_multi, x.get(), n, outs[0].w->cols, outs[0].w->dtype,
         static_cast<int>(outs.size()), w[0], rows[0], bias[0], y[0], w[1], rows[1], bias[1], y[1],
         w[2], rows[2], bias[2], y[2], gemv_flags(), norm != nullptr ? norm->data : nullptr,
         norm != nullptr ? norm->dtype : DType::kF32, eps);
  return true;
}

void CudaBackend::add_rmsnorm_linear_multi(F x, CF delta, int n, int dim, const Weight& norm,
                                           float eps, F xn, std::span<const LinearOut> outs) {
  SPEC_CHECK(norm.rows * norm.cols == dim, "add_rmsnorm_linear_multi: a norm of "
                                               << norm.rows * norm.cols << " for rows of " << dim);
  const bool fusable =
      ctx_->fused_ops() && delta.get() == nullptr && !outs.empty() && outs[0].w->cols == dim;
  if (!fusable || !multi_launch(x, n, outs, &norm, eps))
    compose_add_rmsnorm_linear_multi(*this, x, delta, n, dim, norm, eps, xn, outs);
}

void CudaBackend::add_rmsnorm_swiglu(F x, CF delta, int n, int dim, const Weight& norm, float eps,
                                     F xn, const Weight& gate_up, F y) {
  SPEC_CHECK(
      gate_up.pair && gate_up.cols == dim && norm.rows * norm.cols == dim,
      "add_rmsnorm_swiglu needs a gate/up pair and a norm over its " << gate_up.cols << " inputs");
  if (ctx_->fused_ops() && delta.get() == nullptr && gemv_path(n, gate_up.dtype, gate_up.cols) &&
      cuda::gemv_norm_fits(n, dim, gemv_flags())) {
    launch(&cuda::swiglu_gemv, x.get(), n, gate_up.cols, gate_up.data, gate_up.dtype, gate_up.rows,
           y.get(), gemv_flags(), norm.data, norm.dtype, eps);
    return;
  }
  compose_add_rmsnorm_swiglu(*this, x, delta, n, dim, norm, eps, xn, gate_up, y);
}

CudaBackend::CF CudaBackend::linear_residual(CF in, int n, const Weight& w, const Weight* bias,
                                             F tmp, F x) {
  if (!ctx_->fused_ops() || !gemv_path(n, w.dtype, w.cols))
    return compose_linear_residual(*this, in, n, w, bias, tmp);
  launch(&cuda::matmul_accumulate, in.get(), n, w.cols, w.data, w.dtype, w.rows,
         bias != nullptr ? static_cast<const float*>(bias->data) : nullptr, x.get(), gemv_flags());
  return CF();
}

void CudaBackend::silu_mul(CF gate, CF up, F y, std::size_t n) {
  launch(&cuda::silu_mul, gate.get(), up.get(), y.get(), n);
}

void CudaBackend::rmsnorm(CF x, int n, int dim, const Weight& w, float eps, F y) {
  launch(&cuda::rmsnorm, x.get(), n, dim, w.data, w.dtype, eps, y.get(), dependent_launch());
}

void CudaBackend::add_rmsnorm(F x, CF delta, int n, int dim, const Weight& w, float eps, F y) {
  launch(&cuda::add_rmsnorm, x.get(), delta.get(), n, dim, w.data, w.dtype, eps, y.get(),
         dependent_launch());
}

void CudaBackend::add_inplace(F y, CF x, std::size_t n) {
  launch(&cuda::add_inplace, y.get(), x.get(), n);
}

void CudaBackend::add_bias(F y, const Weight& bias, int n, int dim) {
  launch(&cuda::add_bias, y.get(), static_cast<const float*>(bias.data), n, dim);
}

namespace {

// The CUDA attention kernels take one head_dim for queries, keys and values.
int one_head_dim(const AttentionHeads& heads, const char* op) {
  SPEC_CHECK(heads.key_dim == heads.value_dim,
             op << ": key head size " << heads.key_dim << " differs from value head size "
                << heads.value_dim
                << "; the CUDA attention kernels take one head size (MLA runs on the CPU "
                   "backend only for now)");
  return heads.key_dim;
}

}  // namespace

CudaBackend::KvRows CudaBackend::kv_rows(int, const AttentionHeads& heads) {
  if (latent_heads(heads)) {
    SPEC_CHECK(pass_key_floats_ == heads.key_floats() && pass_value_floats_ == heads.value_floats(),
               "kv_rows: caches of " << pass_key_floats_ << " + " << pass_value_floats_
                                     << " floats per token for heads of " << heads.key_floats()
                                     << " + " << heads.value_floats());
    latent_key_floats_ = heads.key_floats();
    latent_value_floats_ = heads.value_floats();
    kv_row_floats_ = 0;
    const std::size_t n = static_cast<std::size_t>(n_);
    return {k_.grow(n * heads.key_floats()), v_.grow(n * std::max(heads.value_floats(), 1))};
  }
  latent_key_floats_ = latent_value_floats_ = -1;
  const int row_floats = heads.kv_heads * one_head_dim(heads, "kv_rows");
  kv_row_floats_ = row_floats;
  const std::size_t count = static_cast<std::size_t>(n_) * row_floats;
  return {k_.grow(count), v_.grow(count)};
}

void CudaBackend::attend(int layer, CF q, int m, bool last_only, F out,
                         const AttentionHeads& shape) {
  if (latent_heads(shape)) {
    latent_attend(layer, q, m, last_only, out, shape);
    return;
  }
  const int heads = shape.heads, kv_heads = shape.kv_heads;
  const int head_dim = one_head_dim(shape, "attend");
  SPEC_CHECK(!shape.values_in_keys && shape.scale == 0.0f,
             "attend: the CUDA attention has no values inside the keys nor explicit softmax "
             "scale (MLA runs on the CPU backend)");
  SPEC_CHECK(m == (last_only ? n_seqs_ : n_), "attend: " << m << " query rows for a batch of "
                                                         << n_seqs_ << " sequences, " << n_
                                                         << " tokens");
  SPEC_CHECK(kv_row_floats_ == kv_heads * head_dim,
             "attend: kv_rows was not called for this layer");
  launch(&cuda::kv_append, k_.grow(0).get(), v_.grow(0).get(), n_, kv_heads, head_dim, slots_,
         layer);
  launch(&cuda::attention, q.get(), m, heads, kv_heads, head_dim, last_only ? last_slots_ : slots_,
         layer, out.get(), attention_split(m, heads, head_dim));
}

void CudaBackend::rope_attend(int layer, const KvRows& kv, F q, int n, CF table, F out,
                              const AttentionHeads& shape) {
  if (latent_heads(shape)) {
    compose_rope_attend(*this, layer, kv, q, n, table, out, shape);
    return;
  }
  const int heads = shape.heads, kv_heads = shape.kv_heads;
  const int head_dim = one_head_dim(shape, "rope_attend");
  SPEC_CHECK(n == n_, "rope_attend: " << n << " query rows for a pass of " << n_ << " tokens");
  SPEC_CHECK(kv_row_floats_ == kv_heads * head_dim,
             "rope_attend: kv_rows was not called for this layer");
  if (!ctx_->fused_ops()) {
    compose_rope_attend(*this, layer, kv, q, n, table, out, shape);
    return;
  }
  launch(&cuda::rope_kv_append, kv.k.get(), kv.v.get(), n_, kv_heads, head_dim, table.get(), slots_,
         layer, dependent_launch());
  launch(&cuda::attention_rope, q.get(), n_, heads, kv_heads, head_dim, table.get(), slots_, layer,
         out.get(), attention_split(n_, heads, head_dim), dependent_launch());
}

void CudaBackend::latent_attend(int layer, CF q, int m, bool last_only, F out,
                                const AttentionHeads& shape) {
  SPEC_CHECK(m == (last_only ? n_seqs_ : n_), "attend: " << m << " query rows for a batch of "
                                                         << n_seqs_ << " sequences, " << n_
                                                         << " tokens");
  SPEC_CHECK(
      latent_key_floats_ == shape.key_floats() && latent_value_floats_ == shape.value_floats(),
      "attend: kv_rows was not called for this layer's heads");
  SPEC_CHECK(!shape.values_in_keys || (shape.kv_heads == 1 && shape.value_dim <= shape.key_dim),
             "attend: values inside the keys need one kv head and value_dim <= key_dim, got "
                 << shape.kv_heads << " and " << shape.value_dim << " > " << shape.key_dim);
  SPEC_CHECK(shape.key_dim <= cuda::kMaxLatentDim && shape.value_dim <= cuda::kMaxLatentDim,
             "attend: head sizes " << shape.key_dim << " / " << shape.value_dim
                                   << " exceed the CUDA latent attention's limit of "
                                   << cuda::kMaxLatentDim);
  launch(&cuda::latent_kv_append, static_cast<const float*>(k_.grow(0).get()),
         static_cast<const float*>(v_.grow(0).get()), n_, shape.key_floats(), shape.value_floats(),
         static_cast<const cuda::KvSlot*>(slots_), layer);
  launch(&cuda::latent_attention, q.get(), m, shape.heads, shape.kv_heads, shape.key_dim,
         shape.value_dim, shape.softmax_scale(), shape.values_in_keys,
         static_cast<const cuda::KvSlot*>(last_only ? last_slots_ : slots_), layer, out.get());
}

cuda::AttentionSplit CudaBackend::attention_split(int m, int heads, int head_dim) {
  if (attention_chunks_ <= 1) return {};  // every token in one block
  // The states of all m tokens, or of as many as kAttentionStatesBytes hold (the kernel then
  // takes the tokens in groups): at least one token's.
  const std::size_t floats =
      std::max(cuda::attention_split_floats(1, heads, head_dim, attention_chunks_),
               std::min(cuda::attention_split_floats(m, heads, head_dim, attention_chunks_),
                        kAttentionStatesBytes / sizeof(float)));
  return {attention_states_.grow(floats).get(), attention_chunks_, floats};
}

void CudaBackend::keep_last_rows(F a, std::size_t width) {
  const std::size_t count = static_cast<std::size_t>(n_seqs_) * width;
  F tmp = moved_.grow(count);
  launch(&cuda::select_rows, a.get(), static_cast<int>(width), last_rows_, n_seqs_, tmp.get());
  launch(&cuda::memcpy_async, a.get(), tmp.get(), count * sizeof(float), cudaMemcpyDeviceToDevice);
}

void CudaBackend::gather_rows(CF src, std::size_t width, std::span<const int> rows, F dst) {
  if (rows.empty()) return;
  const std::int32_t* dev_rows = nullptr;
  if (graphs_->recording()) {
    // The pass's launches, the staged copy first, run when end_forward issues them: indices
    // written to the pinned staging buffer now travel with that copy, and the graph of a shape
    // reads them from the same place every step. One such gather of at most n rows per pass.
    SPEC_CHECK(!input_rows_staged_ && rows.size() <= static_cast<std::size_t>(n_),
               "gather_rows: " << rows.size() << " host-index rows in a recorded pass of " << n_
                               << " tokens (at most one gather of at most that many)");
    std::copy(rows.begin(), rows.end(), input_rows_host_);
    input_rows_staged_ = true;
    dev_rows = input_rows_;
  } else {
    dev_rows = upload_rows(rows);
  }
  launch(&cuda::select_rows, src.get(), static_cast<int>(width), dev_rows,
         static_cast<int>(rows.size()), dst.get());
}

void CudaBackend::copy_rows(F dst, std::size_t dst_stride, CF src, std::size_t src_stride, int rows,
                            std::size_t width) {
  launch(&cuda::memcpy2d_async, dst.get(), dst_stride * sizeof(float), src.get(),
         src_stride * sizeof(float), width * sizeof(float), static_cast<std::size_t>(rows),
         cudaMemcpyDeviceToDevice);
}

void CudaBackend::unshard_vocab(CF gathered, int rows, int tp, int v_local, F out) {
  const std::size_t local = static_cast<std::size_t>(rows) * v_local;
  const std::size_t V = static_cast<std::size_t>(tp) * v_local;
  for (int r = 0; r < tp; ++r)
    launch(&cuda::memcpy2d_async, out.get() + static_cast<std::size_t>(r) * v_local,
           V * sizeof(float), gathered.get() + r * local,
           static_cast<std::size_t>(v_local) * sizeof(float),
           static_cast<std::size_t>(v_local) * sizeof(float), static_cast<std::size_t>(rows),
           cudaMemcpyDeviceToDevice);
}

NcclComm& CudaBackend::recorded(Communicator& comm) {
  auto* nccl = dynamic_cast<NcclComm*>(&comm);
  SPEC_CHECK(nccl != nullptr && nccl->stream() == stream_,
             "a collective in a recorded pass on a communicator that is not NCCL on this stream");
  SPEC_CHECK(recorded_comm_ == nullptr || recorded_comm_ == nccl,
             "collectives of two communicators in one recorded pass");
  recorded_comm_ = nccl;
  after_kernel_ = false;  // a programmatic dependency links two of this backend's kernels
  return *nccl;
}

void CudaBackend::all_reduce_sum(Communicator& comm, F data, std::size_t count) {
  if (!graphs_->recording()) {
    comm.all_reduce_sum(data.get(), count);
    return;
  }
  NcclComm& nccl = recorded(comm);
  graphs_->launch(&NcclComm::launch_all_reduce_sum, stream_, &nccl, data.get(), count);
}

void CudaBackend::all_gather(Communicator& comm, CF send, F recv, std::size_t floats) {
  if (!graphs_->recording()) {
    comm.all_gather(send.get(), recv.get(), floats * sizeof(float));
    return;
  }
  NcclComm& nccl = recorded(comm);
  graphs_->launch(&NcclComm::launch_all_gather, stream_, &nccl,
                  static_cast<const void*>(send.get()), static_cast<void*>(recv.get()),
                  floats * sizeof(float));
}

void CudaBackend::combine_rows(F y, int rows, std::size_t width, CF x, std::span<const int> first,
                               std::span<const int> src, std::span<const float> scale) {
  SPEC_CHECK(first.size() == static_cast<std::size_t>(rows) + 1 &&
                 src.size() == static_cast<std::size_t>(first[rows]) && scale.size() == src.size(),
             "combine_rows: " << first.size() << " row offsets for " << rows << " rows, "
                              << src.size() << " sources, " << scale.size() << " scales");
  SPEC_CHECK(!graphs_->recording(),
             "combine_rows inside a forward pass recorded as a step graph (its host arrays are "
             "copied from pageable memory)");
  // One copy: [first][src][scale bits].
  combine_host_.assign(first.begin(), first.end());
  combine_host_.insert(combine_host_.end(), src.begin(), src.end());
  const std::size_t scales_at = combine_host_.size();
  combine_host_.resize(scales_at + scale.size());
  if (!scale.empty())
    std::memcpy(combine_host_.data() + scales_at, scale.data(), scale.size() * sizeof(float));
  combine_dev_.grow(combine_host_.size() * sizeof(std::int32_t));
  CUDA_CHECK(cudaMemcpyAsync(combine_dev_.get(), combine_host_.data(),
                             combine_host_.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                             stream_));
  const std::int32_t* dev = combine_dev_.as<std::int32_t>();
  launch(&cuda::combine_rows, y.get(), rows, width, x.get(), dev, dev + first.size(),
         reinterpret_cast<const float*>(dev + scales_at));
}

void CudaBackend::read(CF src, std::size_t count, float* host) {
  SPEC_CHECK(!graphs_->recording(), "read inside a forward pass recorded as a step graph");
  CUDA_CHECK(
      cudaMemcpyAsync(host, src.get(), count * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  ctx_->synchronize();
}

void CudaBackend::read_kv(KvBlock& kv, int layer, int which, int rows, float* host) {
  const int floats = which == 0 ? kv.key_floats : kv.value_floats;
  if (rows > 0 && floats > 0)
    CUDA_CHECK(cudaMemcpyAsync(host, kv.data.as<float>() + kv.offset(layer, which),
                               static_cast<std::size_t>(rows) * floats * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
  ctx_->synchronize();
}

}  // namespace specrun

#endif  // SPECRUN_HAVE_CUDA
