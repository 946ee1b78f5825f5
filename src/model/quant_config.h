// A checkpoint's quantization_config (issue 44; docs/quantization-design.md), parsed and
// validated, and the decision, module by module, of how its weight is stored:
//  - compressed-tensors, format pack-quantized: INT4/INT8 weights in groups or per output channel,
//    symmetric or with zero points, no activation quantization; config groups whose `targets` name
//    modules exactly, by `re:` pattern (Python's re.match: anchored at the start only) or by the
//    class "Linear"; an `ignore` list matched the same way;
//  - DeepSeek-V3's FP8 block-scaled weights (quant_method "fp8", fmt e4m3, weight_block_size),
//    with `modules_to_not_convert` / `ignored_layers` (substring match, as Hugging Face's).
// What would change the numbers and is not implemented is refused naming the key
// (quantization_config.<path>) and its value. Parsing only: which tensors a decision requires,
// and their checks, are the weight loader's.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "kernels/cpu/dtype.h"

namespace specrun {

enum class QuantMethod : std::uint8_t { kNone, kCompressedTensors, kFp8Block };

// What a module is, for compressed-tensors' class targets ("Linear"): DeepSeek's router (MoEGate)
// is not an nn.Linear, Qwen3-MoE's and Mixtral's (mlp.gate) are.
enum class ModuleClass : std::uint8_t { kLinear, kRouter, kEmbedding, kOther };

struct CompiledPattern;  // a compiled regular expression (quant_config.cpp)

// One entry of a compressed-tensors `targets` or `ignore` list: a module's full name, a pattern
// ("re:<p>", matched at the start of the name as Python's re.match), or the class "Linear".
struct QuantTarget {
  enum class Kind : std::uint8_t { kName, kPattern, kClass };
  std::string text;  // verbatim
  Kind kind = Kind::kName;
  std::shared_ptr<const CompiledPattern> pattern;  // kPattern
  bool matches(const std::string& module, ModuleClass cls) const;
};

// One compressed-tensors config group's weight scheme.
struct QuantGroup {
  std::string name;  // its key in config_groups
  std::vector<QuantTarget> targets;
  int bits = 4;           // 4 or 8
  bool channel = false;   // strategy channel (one scale per row); else group
  int group_size = 0;     // inputs per scale (strategy group)
  bool symmetric = true;  // false: weight_zero_point tensors
};

// How one module's weight is stored, and the config entry that decided it (for messages, e.g.
// `quantization_config.ignore[1] "re:.*self_attn.*"`).
struct QuantDecision {
  QuantKind kind = QuantKind::kNone;
  const QuantGroup* group = nullptr;  // compressed-tensors: the group that matched
  std::string why;
};

struct QuantConfig {
  QuantMethod method = QuantMethod::kNone;
  std::string source;  // the file (and which config object) it came from, for messages
  // compressed-tensors
  std::vector<QuantGroup> groups;
  std::vector<QuantTarget> ignore;
  // fp8
  int block_rows = 0, block_cols = 0;
  std::vector<std::string> not_convert;  // modules_to_not_convert and ignored_layers together
  std::string scale_fmt;                 // recorded (it concerns activation scales only)

  bool quantized() const { return method != QuantMethod::kNone; }

  // `q`: the quantization_config object of `source` (a config.json). Throws (exit code 2) naming
  // quantization_config.<key> and the value for anything not supported.
  static QuantConfig parse(const nlohmann::json& q, const std::string& source);

  // The storage of module `module` (its full name as the checkpoint spells it, without
  // ".weight"), of class `cls`. Throws (exit code 2) when two config groups claim it.
  QuantDecision decide(const std::string& module, ModuleClass cls) const;

  // One line: method, schemes and exclusions ("compressed-tensors pack-quantized: group_0 int4
  // group 32 symmetric; 4 ignore entries").
  std::string describe() const;
};

const char* quant_kind_name(QuantKind kind);

}  // namespace specrun
