// The experts a forward pass of a mixture-of-experts model routed its tokens to, on the host:
// what the expert accounting (the experts each prefill, decode and verify pass reads) is made
// from. Every rank of a tensor-parallel group computes the same routing (the router is
// replicated), so any rank's copy describes the pass.
#pragma once

#include <cstdint>
#include <vector>

namespace specrun {

struct ExpertRouting {
  int top_k = 0;            // experts per token
  int n_experts = 0;        // routed experts per MoE layer
  int ep = 1;               // expert-parallel ranks; expert e lives on rank e / (n_experts / ep)
  std::vector<int> layers;  // the MoE layers' ids (dense layers are not listed), ascending
  int n_tokens = 0;         // the pass's tokens, in batch order (SeqChunk by SeqChunk)
  std::int64_t expert_bytes = 0;  // one routed expert's weights (gate, up, down) as stored, all
                                  // ranks together: what reading the expert costs

  // experts[(l * n_tokens + t) * top_k + j]: the j-th expert (by descending router weight; ties:
  // the lower index first) token t was routed to in MoE layer layers[l].
  std::vector<std::int32_t> experts;

  std::int32_t expert(int l, int t, int j) const {
    return experts[(static_cast<std::size_t>(l) * n_tokens + t) * top_k + j];
  }
  int ep_rank_of(int e) const { return e / (n_experts / ep); }
};

}  // namespace specrun
