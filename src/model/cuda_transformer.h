// The Llama-family decoder on the CUDA backend: the device twin of the CPU Transformer
// (transformer.h), one tensor-parallel rank's shard of it, same sharding (weights.h) and same
// LanguageModel contract, so the engine drives either without knowing which.
//
// On the device: the weights in their checkpoint dtype (BF16 stays BF16, no float32 copy),
// every sequence's KV cache (float32, KvCache over device storage), all activations (float32)
// and all ops (kernels/cuda). Collectives are NCCL on the rank's compute stream. Decode and
// verify windows (<= cuda::kMaxGemvTokens tokens per call) use batch-invariant kernels, so the
// greedy speculative output equals the baseline token for token, as on the CPU.
// What comes back to the host: float32 logits of the requested rows after each forward (the
// sampler, the verifier and the argmax of greedy decoding run on the host, in src/spec).
//
// Built only with CUDA (SPECRUN_HAVE_CUDA); model_factory.h is the build-independent entry.
#pragma once

#ifdef SPECRUN_HAVE_CUDA

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/ops.h"
#include "model/language_model.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace specrun {

class Checkpoint;
class NcclComm;

class CudaTransformer final : public LanguageModel {
 public:
  // Loads this rank's shard of `checkpoint` (weights.h) and uploads it to `device` in the
  // checkpoint's dtype; the checkpoint is not needed afterwards. comm: the tensor-parallel group
  // (size tp, this rank tp_rank), enqueuing on device.stream(). comm and device must outlive the
  // model. Throws naming the config.json field when tp does not fit the model's shapes, and with
  // advice when the shard does not fit in the device's free memory.
  CudaTransformer(const Checkpoint& checkpoint, NcclComm& comm, cuda::DeviceContext& device,
                  int tp_rank, int tp);
  ~CudaTransformer() override;

  const ModelConfig& config() const override { return config_; }
  const ShardPlan& plan() const { return plan_; }
  // Bytes of weights this rank holds on the device.
  std::size_t weight_bytes() const { return weight_bytes_; }

  // A cache for one sequence of at most `capacity` tokens, in device memory (freed with it).
  std::unique_ptr<KvCache> new_cache(int capacity) const override;

  // Same contract as Transformer::forward: appends every chunk's tokens to its (device) cache
  // and returns float32 logits in host memory, [total new tokens, vocab] (all_logits) or
  // [batch, vocab]. All ranks of the tp group call it with the same inputs. Validates before
  // touching any cache. Returns after the logits are on the host (the stream is synchronised
  // with a deadline: NcclComm::synchronize), and adds the step's NCCL time to comm's timing.
  void forward(std::span<const SeqChunk> batch, bool all_logits,
               std::vector<float>& logits) override;

 private:
  struct Matrix {  // [rows, cols] in dtype
    cuda::DeviceBuffer data;
    DType dtype = DType::kF32;
    int rows = 0, cols = 0;
  };
  struct Vector {  // a norm weight [size] in dtype, or a float32 bias
    cuda::DeviceBuffer data;
    DType dtype = DType::kF32;
    int size = 0;
  };
  struct Layer {
    Vector input_norm, post_attention_norm;
    Matrix q, k, v, o, gate, up, down;
    Vector q_bias, k_bias, v_bias, o_bias;  // size 0 when absent
  };

  Matrix upload(const WeightMatrix& m);
  Vector upload(const WeightVector& v);
  Vector upload_bias(const std::vector<float>& b);
  void linear(const float* x, int n, const Matrix& w, const Vector& bias, float* y);
  void attention_block(int layer, int n);
  void mlp_block(int layer, int n);
  void reserve(int n, int rows);

  ModelConfig config_;
  NcclComm& comm_;
  cuda::DeviceContext& device_;
  cudaStream_t stream_;
  int tp_;
  ShardPlan plan_;
  std::size_t weight_bytes_ = 0;

  Matrix embed_, lm_head_own_;
  const Matrix* lm_head_ = nullptr;  // &lm_head_own_, or &embed_ when tied (same rows)
  Vector final_norm_;
  std::vector<Layer> layers_;
  cuda::DeviceBuffer inv_freq_;

  // Per-call inputs: [slots n][tokens n][positions n][last rows B] staged in pinned memory and
  // copied with one cudaMemcpyAsync. Scratch grows, never shrinks.
  cuda::PinnedBuffer staging_host_, logits_host_;
  cuda::DeviceBuffer staging_;
  cuda::KvSlot* slots_ = nullptr;
  std::int32_t *tokens_ = nullptr, *positions_ = nullptr, *last_rows_ = nullptr;
  cuda::DeviceBuffer x_, xn_, q_, k_, v_, attn_, proj_, gate_, up_, logits_local_, gathered_,
      gemm_scratch_;
};

}  // namespace specrun

#endif  // SPECRUN_HAVE_CUDA
