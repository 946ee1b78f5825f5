// A draft head's config, whatever its kind: which kind of head it is and that kind's own config
// behind it. A head is a small network over the target's hidden states that drafts tokens
// (model/draft_head.h); each kind is a graph of its own (EAGLE-3: model/eagle3_model.h).
//
// Adding a head kind (as the MTP head was; a block drafter): its config type and reader (as
// model/eagle3_config.h), one alternative in HeadKind and HeadConfig::Of, the branch of
// HeadConfig::from_dir that recognises its config.json, its graph implementing DraftHead, and
// its line in make_head (model/head_graphs.h). ModelFactory::load_head and the loaders of each
// backend stay as they are.
#pragma once

#include <span>
#include <string>
#include <variant>

#include "model/eagle3_config.h"
#include "model/model_config.h"
#include "model/mtp_config.h"

namespace specrun {

enum class HeadKind {
  kEagle3,  // Eagle3Config: one midlayer over [embedding, fc(three target layers)]
  kMtp,     // MtpConfig: a DeepSeek-V3 MTP module over [enorm(embedding), hnorm(h)]
};

struct HeadConfig {
  // Each kind's config, in HeadKind's order. Every one has `head` (its layers as a Llama-shaped
  // ModelConfig) and `capture` (the target layers it reads).
  using Of = std::variant<Eagle3Config, MtpConfig>;
  Of of;

  // Implicit: a kind's config is a head config.
  HeadConfig(Eagle3Config config) : of(std::move(config)) {}
  HeadConfig(MtpConfig config) : of(std::move(config)) {}

  HeadKind kind() const { return static_cast<HeadKind>(of.index()); }
  // The head's layers: the shapes of its checkpoint (hidden size, heads, head_dim, vocabulary).
  const ModelConfig& layers() const {
    return std::visit([](const auto& c) -> const ModelConfig& { return c.head; }, of);
  }
  // The target layers whose hidden states it reads (LanguageModel capture ids, in its order).
  std::span<const int> target_capture() const {
    return std::visit([](const auto& c) { return std::span<const int>(c.capture); }, of);
  }

  // Reads `dir`/config.json, a head for a target of config `target`; the kind is the one whose
  // reader recognises the file (its "architectures": a DeepSeek-V3-family checkpoint is its
  // MTP layer, MtpConfig), else the error names what was expected.
  static HeadConfig from_dir(const std::string& dir, const ModelConfig& target);
};

}  // namespace specrun
