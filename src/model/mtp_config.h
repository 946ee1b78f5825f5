// The MTP draft head's config (draft.kind = "mtp"; docs/mtp-design.md): a DeepSeek-V3-family
// checkpoint's multi-token-prediction module, layer num_hidden_layers + module of the target's
// own checkpoint (num_nextn_predict_layers of them), or layer 0 of a separate NextN checkpoint
// (num_hidden_layers = 1). The module reads the target's hidden state after its final norm
// (capture id num_layers), as vLLM's and SGLang's proposers do.
#pragma once

#include <string>
#include <vector>

#include "model/model_config.h"

namespace specrun {

struct MtpConfig {
  // The checkpoint's config (MLA shapes, router, YaRN, norms) cut to the module: one layer
  // (layer 0 here, checkpoint layer `layer`) of the module's kind.
  ModelConfig head;
  int layer = 0;             // the module's checkpoint layer: model.layers.{layer}.*
  int modules = 1;           // num_nextn_predict_layers of the checkpoint
  LayerKind kind;            // the module's decoder block: MLA, and MoE or dense
  std::vector<int> capture;  // {target num_layers}: the target's final norm output
  // What a chain's next step takes as h (draft.mtp_chain_hidden): the module's output before
  // shared_head.norm ("pre_norm", vLLM: false) or after it ("shared_head_norm", SGLang: true).
  bool chain_shared_head_norm = false;

  // `checkpoint` is the config of the directory holding the module: the target's own
  // (separate = false: the module is layer num_hidden_layers + module) or a NextN checkpoint
  // (separate = true: layer 0, num_hidden_layers 1). Errors name `source` and the key.
  static MtpConfig from_config(const ModelConfig& checkpoint, const ModelConfig& target,
                               const std::string& source, bool separate, int module = 0);
};

}  // namespace specrun
