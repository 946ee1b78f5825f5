#include "model/cuda_transformer.h"

#ifdef SPECRUN_HAVE_CUDA

#include <algorithm>
#include <cstring>
#include <iomanip>

#include "common/error.h"
#include "dist/nccl_comm.h"
#include "kernels/cuda/cuda_check.h"
#include "model/checkpoint.h"

namespace specrun {
namespace {

// Kept free for KV caches, scratch, cuBLAS and NCCL buffers when checking that weights fit.
constexpr std::size_t kHeadroomBytes = std::size_t{1} << 30;

std::size_t matrix_bytes(const WeightMatrix& m) {
  return static_cast<std::size_t>(m.rows) * static_cast<std::size_t>(m.cols) * dtype_size(m.dtype);
}

std::size_t shard_bytes(const ModelWeights& w) {
  std::size_t total = matrix_bytes(w.embed);
  if (w.lm_head.data != w.embed.data) total += matrix_bytes(w.lm_head);
  for (const LayerWeights& l : w.layers)
    for (const WeightMatrix* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      total += matrix_bytes(*m);
  return total;
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

CudaTransformer::CudaTransformer(const Checkpoint& checkpoint, NcclComm& comm,
                                 cuda::DeviceContext& device, int tp_rank, int tp)
    : config_(checkpoint.config()),
      comm_(comm),
      device_(device),
      stream_(device.stream()),
      tp_(tp) {
  SPEC_CHECK(comm.size() == tp && comm.rank() == tp_rank,
             "tensor-parallel communicator has rank " << comm.rank() << " of " << comm.size()
                                                      << " but the model was asked for rank "
                                                      << tp_rank << " of " << tp);
  SPEC_CHECK(comm.stream() == device.stream() && comm.device() == device.device(),
             "the NCCL communicator and the model must share the rank's device and stream");
  SPEC_INPUT_CHECK(config_.head_dim <= cuda::kMaxHeadDim,
                   checkpoint.dir()
                       << "/config.json: head_dim " << config_.head_dim
                       << " exceeds the CUDA attention kernel's limit of " << cuda::kMaxHeadDim);
  ModelWeights host = ModelWeights::load(checkpoint, tp, tp_rank);
  plan_ = host.plan;
  const std::size_t need = shard_bytes(host), free = device.free_bytes();
  SPEC_INPUT_CHECK(need + kHeadroomBytes <= free,
                   "the shard of " << checkpoint.dir() << " for tp rank " << tp_rank << " of " << tp
                                   << " needs " << std::fixed << std::setprecision(2) << gib(need)
                                   << " GiB of weights plus ~1 GiB of working memory"
                                   << " but device " << device.device() << " has " << gib(free)
                                   << " GiB free: raise parallel.tp, use a smaller model, or "
                                      "free the GPU (nvidia-smi)");

  const std::vector<float> inv_freq = config_.rope_inv_freq();
  SPEC_CHECK(
      static_cast<int>(inv_freq.size()) == config_.head_dim / 2,
      "rope_inv_freq returned " << inv_freq.size() << " values for head_dim " << config_.head_dim);
  inv_freq_.grow(inv_freq.size() * sizeof(float));
  CUDA_CHECK(cudaMemcpy(inv_freq_.get(), inv_freq.data(), inv_freq.size() * sizeof(float),
                        cudaMemcpyHostToDevice));

  embed_ = upload(host.embed);
  if (host.lm_head.data == host.embed.data && host.lm_head.rows == host.embed.rows &&
      host.lm_head.cols == host.embed.cols) {
    lm_head_ = &embed_;  // tied: the same rows, uploaded once
  } else {
    lm_head_own_ = upload(host.lm_head);
    lm_head_ = &lm_head_own_;
  }
  final_norm_ = upload(host.final_norm);
  layers_.reserve(host.layers.size());
  for (const LayerWeights& l : host.layers) {
    Layer d;
    d.input_norm = upload(l.input_norm);
    d.post_attention_norm = upload(l.post_attention_norm);
    d.q = upload(l.q);
    d.k = upload(l.k);
    d.v = upload(l.v);
    d.o = upload(l.o);
    d.gate = upload(l.gate);
    d.up = upload(l.up);
    d.down = upload(l.down);
    d.q_bias = upload_bias(l.q_bias);
    d.k_bias = upload_bias(l.k_bias);
    d.v_bias = upload_bias(l.v_bias);
    d.o_bias = upload_bias(l.o_bias);
    layers_.push_back(std::move(d));
  }
}

CudaTransformer::~CudaTransformer() {
  // Nothing may still read our buffers when they are freed; errors cannot be thrown here.
  if (!cuda::unwinding()) (void)cudaStreamSynchronize(stream_);
}

CudaTransformer::Matrix CudaTransformer::upload(const WeightMatrix& m) {
  Matrix d;
  d.dtype = m.dtype;
  d.rows = m.rows;
  d.cols = m.cols;
  const std::size_t bytes = matrix_bytes(m);
  d.data.grow(bytes);
  CUDA_CHECK(cudaMemcpy(d.data.get(), m.data, bytes, cudaMemcpyHostToDevice));
  weight_bytes_ += bytes;
  return d;
}

CudaTransformer::Vector CudaTransformer::upload(const WeightVector& v) {
  Vector d;
  d.dtype = v.dtype;
  d.size = v.size;
  const std::size_t bytes = static_cast<std::size_t>(v.size) * dtype_size(v.dtype);
  d.data.grow(bytes);
  CUDA_CHECK(cudaMemcpy(d.data.get(), v.data, bytes, cudaMemcpyHostToDevice));
  return d;
}

CudaTransformer::Vector CudaTransformer::upload_bias(const std::vector<float>& b) {
  Vector d;
  if (b.empty()) return d;
  d.size = static_cast<int>(b.size());
  d.data.grow(b.size() * sizeof(float));
  CUDA_CHECK(cudaMemcpy(d.data.get(), b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

std::unique_ptr<KvCache> CudaTransformer::new_cache(int capacity) const {
  SPEC_CHECK(capacity > 0, "KV cache capacity must be positive, got " << capacity);
  const std::size_t floats = static_cast<std::size_t>(config_.num_layers) * 2 *
                             static_cast<std::size_t>(capacity) * plan_.kv_heads * config_.head_dim;
  float* storage = nullptr;
  const cudaError_t rc = cudaMalloc(&storage, floats * sizeof(float));
  if (rc != cudaSuccess) (void)cudaGetLastError();
  SPEC_CHECK(rc == cudaSuccess, "cannot allocate a KV cache of "
                                    << std::fixed << std::setprecision(3)
                                    << gib(floats * sizeof(float)) << " GiB (" << capacity
                                    << " tokens) on device " << device_.device() << ": "
                                    << cudaGetErrorString(rc)
                                    << "; lower data.batch_size or decode.max_new_tokens, or "
                                       "raise parallel.tp");
  std::shared_ptr<float> owner(storage, [](float* p) {
    if (!cuda::unwinding()) (void)cudaFree(p);  // see cuda::unwinding()
  });
  return std::make_unique<KvCache>(config_.num_layers, capacity, plan_.kv_heads, config_.head_dim,
                                   config_.max_position_embeddings, std::move(owner));
}

void CudaTransformer::reserve(int n, int rows) {
  const std::size_t N = static_cast<std::size_t>(n), F = sizeof(float);
  const std::size_t H = config_.hidden_size, hd = config_.head_dim;
  const std::size_t qw = plan_.q_heads * hd, kvw = plan_.kv_heads * hd, I = plan_.intermediate;
  x_.grow(N * H * F);
  xn_.grow(N * H * F);
  q_.grow(N * qw * F);
  k_.grow(N * kvw * F);
  v_.grow(N * kvw * F);
  attn_.grow(N * qw * F);
  proj_.grow(N * H * F);
  gate_.grow(N * I * F);
  up_.grow(N * I * F);
  const std::size_t local = static_cast<std::size_t>(rows) * plan_.vocab * F;
  logits_local_.grow(local);
  if (tp_ > 1) gathered_.grow(local * tp_);
  logits_host_.grow(local * tp_);
  const DType dt = layers_.empty() ? embed_.dtype : layers_[0].q.dtype;
  std::size_t scratch = 0;
  for (int in : {static_cast<int>(H), static_cast<int>(qw), static_cast<int>(I)})
    scratch = std::max(scratch, cuda::matmul_scratch_bytes(n, in, dt));
  scratch =
      std::max(scratch, cuda::matmul_scratch_bytes(rows, static_cast<int>(H), lm_head_->dtype));
  gemm_scratch_.grow(std::max<std::size_t>(scratch, 1));
}

void CudaTransformer::linear(const float* x, int n, const Matrix& w, const Vector& bias, float* y) {
  cuda::matmul(device_.cublas(), stream_, x, n, w.cols, w.data.get(), w.dtype, w.rows,
               bias.size > 0 ? bias.data.as<float>() : nullptr, y, gemm_scratch_.get(),
               gemm_scratch_.bytes());
}

void CudaTransformer::forward(std::span<const SeqChunk> batch, bool all_logits,
                              std::vector<float>& logits) {
  // Validate everything before any cache changes.
  const int n = check_batch(batch, config_, plan_.kv_heads, true, "this CUDA model");
  const int B = static_cast<int>(batch.size());
  const int rows = all_logits ? n : B;
  reserve(n, rows);

  // Stage slots, tokens, positions and last rows; one copy to the device.
  const std::size_t staged = static_cast<std::size_t>(n) * sizeof(cuda::KvSlot) +
                             (2 * static_cast<std::size_t>(n) + B) * sizeof(std::int32_t);
  staging_host_.grow(staged);
  staging_.grow(staged);
  {
    std::byte* at = staging_host_.as<std::byte>();
    auto* slots = carve<cuda::KvSlot>(at, n);
    auto* tokens = carve<std::int32_t>(at, n);
    auto* positions = carve<std::int32_t>(at, n);
    auto* last = carve<std::int32_t>(at, B);
    int t = 0;
    for (int b = 0; b < B; ++b) {
      const SeqChunk& s = batch[b];
      for (int i = 0; i < s.n_tokens; ++i, ++t) {
        tokens[t] = s.tokens[i];
        positions[t] = s.cache->length() + i;
        slots[t] = cuda::KvSlot{s.cache->keys(0), s.cache->capacity(), positions[t]};
      }
      last[b] = t - 1;
    }
    std::byte* dev = staging_.as<std::byte>();
    slots_ = carve<cuda::KvSlot>(dev, n);
    tokens_ = carve<std::int32_t>(dev, n);
    positions_ = carve<std::int32_t>(dev, n);
    last_rows_ = carve<std::int32_t>(dev, B);
  }
  CUDA_CHECK(cudaMemcpyAsync(staging_.get(), staging_host_.get(), staged, cudaMemcpyHostToDevice,
                             stream_));

  const int H = config_.hidden_size;
  float* x = x_.as<float>();
  cuda::gather_rows(stream_, embed_.data.get(), embed_.dtype, plan_.vocab_begin, plan_.vocab, H,
                    tokens_, n, x);
  if (tp_ > 1) comm_.all_reduce_sum(x, static_cast<std::size_t>(n) * H);
  for (int layer = 0; layer < config_.num_layers; ++layer) {
    attention_block(layer, n);
    mlp_block(layer, n);
  }
  for (const SeqChunk& s : batch) s.cache->advance(s.n_tokens);

  // Final norm of the rows whose logits are wanted, then the (vocab-parallel) lm_head.
  float* xn = xn_.as<float>();
  const Vector& fnorm = final_norm_;
  if (all_logits) {
    cuda::rmsnorm(stream_, x, n, H, fnorm.data.get(), fnorm.dtype, config_.rms_norm_eps, xn);
  } else {
    float* last = proj_.as<float>();
    cuda::select_rows(stream_, x, H, last_rows_, B, last);
    cuda::rmsnorm(stream_, last, B, H, fnorm.data.get(), fnorm.dtype, config_.rms_norm_eps, xn);
  }
  const int V = config_.vocab_size, v_local = plan_.vocab;
  float* local = logits_local_.as<float>();
  linear(xn, rows, *lm_head_, Vector{}, local);
  const std::size_t local_floats = static_cast<std::size_t>(rows) * v_local;
  const float* result = local;
  if (tp_ > 1) {
    comm_.all_gather(local, gathered_.get(), local_floats * sizeof(float));
    result = gathered_.as<float>();
  }
  CUDA_CHECK(cudaMemcpyAsync(logits_host_.get(), result, local_floats * tp_ * sizeof(float),
                             cudaMemcpyDeviceToHost, stream_));
  comm_.synchronize();  // the wait with a deadline: a hung collective becomes an error
  comm_.collect_timing();

  logits.resize(static_cast<std::size_t>(rows) * V);
  const float* host = logits_host_.as<float>();
  if (tp_ == 1) {
    std::memcpy(logits.data(), host, local_floats * sizeof(float));
    return;
  }
  // Gathered as [tp][rows][V/tp]; the vocabulary of rank r is columns r*V/tp.. of each row.
  for (int r = 0; r < tp_; ++r)
    for (int t = 0; t < rows; ++t)
      std::memcpy(
          logits.data() + static_cast<std::size_t>(t) * V + static_cast<std::size_t>(r) * v_local,
          host + r * local_floats + static_cast<std::size_t>(t) * v_local, sizeof(float) * v_local);
}

void CudaTransformer::attention_block(int layer, int n) {
  const Layer& L = layers_[layer];
  const int H = config_.hidden_size, hd = config_.head_dim;
  const std::int64_t q_width = static_cast<std::int64_t>(plan_.q_heads) * hd;
  const std::int64_t kv_width = static_cast<std::int64_t>(plan_.kv_heads) * hd;
  float *x = x_.as<float>(), *xn = xn_.as<float>(), *q = q_.as<float>(), *k = k_.as<float>(),
        *v = v_.as<float>(), *attn = attn_.as<float>(), *proj = proj_.as<float>();

  cuda::rmsnorm(stream_, x, n, H, L.input_norm.data.get(), L.input_norm.dtype, config_.rms_norm_eps,
                xn);
  linear(xn, n, L.q, L.q_bias, q);
  linear(xn, n, L.k, L.k_bias, k);
  linear(xn, n, L.v, L.v_bias, v);
  cuda::rope(stream_, q, n, plan_.q_heads, hd, q_width, inv_freq_.as<float>(), positions_);
  cuda::rope(stream_, k, n, plan_.kv_heads, hd, kv_width, inv_freq_.as<float>(), positions_);
  cuda::kv_append(stream_, k, v, n, plan_.kv_heads, hd, slots_, layer);
  cuda::attention(stream_, q, n, plan_.q_heads, plan_.kv_heads, hd, slots_, layer, attn);

  // Row-parallel o_proj: partial sums over this rank's heads, then summed across the group.
  linear(attn, n, L.o, Vector{}, proj);
  if (tp_ > 1) comm_.all_reduce_sum(proj, static_cast<std::size_t>(n) * H);
  if (L.o_bias.size > 0) cuda::add_bias(stream_, proj, L.o_bias.data.as<float>(), n, H);
  cuda::add_inplace(stream_, x, proj, static_cast<std::size_t>(n) * H);
}

void CudaTransformer::mlp_block(int layer, int n) {
  const Layer& L = layers_[layer];
  const int H = config_.hidden_size, I = plan_.intermediate;
  float *x = x_.as<float>(), *xn = xn_.as<float>(), *gate = gate_.as<float>(),
        *up = up_.as<float>(), *proj = proj_.as<float>();

  cuda::rmsnorm(stream_, x, n, H, L.post_attention_norm.data.get(), L.post_attention_norm.dtype,
                config_.rms_norm_eps, xn);
  linear(xn, n, L.gate, Vector{}, gate);
  linear(xn, n, L.up, Vector{}, up);
  cuda::silu_mul(stream_, gate, up, gate, static_cast<std::size_t>(n) * I);
  linear(gate, n, L.down, Vector{}, proj);
  if (tp_ > 1) comm_.all_reduce_sum(proj, static_cast<std::size_t>(n) * H);
  cuda::add_inplace(stream_, x, proj, static_cast<std::size_t>(n) * H);
}

}  // namespace specrun

#endif  // SPECRUN_HAVE_CUDA
