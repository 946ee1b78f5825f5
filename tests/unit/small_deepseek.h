// Test helper: the small synthetic DeepSeek-V3-family target the MLA tests run (make_model_pair
// with --arch deepseek_v3 or kimi_k25: hidden 64, 2 layers, 4 heads, q_lora_rank q_lora (0: a
// plain q_proj), kv_lora_rank kv_lora, qk_nope 16, qk_rope rope, v_head_dim 24, 8 experts of 32,
// vocabulary 256, F32), dense below first_k_dense (2: no MoE layer).
#pragma once

#include <string>

#include "model/synthetic.h"

namespace specrun::test {

inline SyntheticSpec small_deepseek_spec(const std::string& arch, int first_k_dense, int q_lora,
                                         int kv_lora = 32, int rope = 8) {
  SyntheticSpec spec;
  spec.architecture = arch;
  spec.hidden = 64;
  spec.heads = 4;
  spec.kv_heads = 4;
  spec.layers = 2;
  spec.intermediate = 96;
  spec.vocab = 256;
  spec.q_lora_rank = q_lora;
  spec.kv_lora_rank = kv_lora;
  spec.qk_nope_head_dim = 16;
  spec.qk_rope_head_dim = rope;
  spec.v_head_dim = 24;
  spec.experts = 8;
  spec.moe_intermediate = 32;
  spec.first_k_dense_replace = first_k_dense;
  spec.dtype = DType::kF32;
  return spec;
}

}  // namespace specrun::test
