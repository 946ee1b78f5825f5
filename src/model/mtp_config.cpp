#include "model/mtp_config.h"

#include "common/error.h"

namespace specrun {

MtpConfig MtpConfig::from_config(const ModelConfig& checkpoint, const ModelConfig& target,
                                 const std::string& source, bool separate, int module) {
  SPEC_INPUT_CHECK(checkpoint.is_mla(),
                   source << ": architectures \"" << checkpoint.architecture
                          << "\" has no MTP layer: draft.kind = \"mtp\" needs a DeepSeek-V3-family "
                             "checkpoint (DeepseekV3ForCausalLM, kimi_k2, "
                             "KimiK25ForConditionalGeneration)");
  SPEC_INPUT_CHECK(checkpoint.num_nextn_predict_layers >= 1,
                   source << ": num_nextn_predict_layers is " << checkpoint.num_nextn_predict_layers
                          << ": the checkpoint has no MTP layer for draft.kind = \"mtp\"");
  SPEC_INPUT_CHECK(module >= 0 && module < checkpoint.num_nextn_predict_layers,
                   source << ": MTP module " << module << " of num_nextn_predict_layers "
                          << checkpoint.num_nextn_predict_layers);
  SPEC_INPUT_CHECK(!separate || checkpoint.num_layers == 1,
                   source << ": num_hidden_layers is " << checkpoint.num_layers
                          << ": a separate NextN checkpoint holds the MTP layer as layer 0 of 1");
  SPEC_INPUT_CHECK(
      checkpoint.hidden_size == target.hidden_size && checkpoint.vocab_size == target.vocab_size,
      source << ": hidden_size " << checkpoint.hidden_size << " and vocab_size "
             << checkpoint.vocab_size << " differ from the target's (" << target.hidden_size << ", "
             << target.vocab_size << "): the MTP layer shares the target's embedding and head");
  MtpConfig c;
  c.head = checkpoint;
  c.modules = checkpoint.num_nextn_predict_layers;
  c.capture = {target.num_layers};
  if (separate) {
    // SGLang's NextN layer: MoE whenever the model has experts (is_nextn).
    c.layer = 0;
    c.kind = LayerKind{AttentionKind::kMla,
                       checkpoint.num_experts > 0 ? MlpKind::kMoe : MlpKind::kDenseSwiGlu};
  } else {
    // Layer num_hidden_layers + module, its kind by the decoder's rule (first_k_dense_replace,
    // moe_layer_freq) as if the decoder went on.
    c.layer = checkpoint.num_layers + module;
    ModelConfig wide = checkpoint;
    wide.num_layers += checkpoint.num_nextn_predict_layers;
    c.kind = wide.layer_kind(c.layer);
  }
  // The head's own config: the module's one decoder layer, of its kind (layer 0 of this config
  // is read from checkpoint layer c.layer); the embedding and the head are loaded explicitly.
  c.head.num_layers = 1;
  c.head.first_k_dense_replace = c.kind.mlp == MlpKind::kMoe ? 0 : 1;
  c.head.moe_layer_freq = 1;
  c.head.tie_word_embeddings = false;
  return c;
}

}  // namespace specrun
