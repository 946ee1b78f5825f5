// The weight loader's quantized half (issue 44 step 3; docs/quantization-design.md 3.3): for one
// schema row's module, the storage config.json's quantization_config decides (QuantConfig::decide)
// is checked against the tensors the file holds (M.weight, M.weight_packed, M.weight_scale,
// M.weight_scale_inv, M.weight_zero_point, M.weight_shape, M.weight_g_idx) and either agreed or
// refused, naming the tensor, its file and the config field; a quantized module is loaded kept
// packed as a quantized HostTensor (backend.h), cut for tensor parallelism (3.3.1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/quant_config.h"
#include "model/weight_schema.h"

namespace specrun {

class Checkpoint;

// The module a tensor name is the weight of, as decide() is asked about it: the name without
// ModelConfig::tensor_prefix (compressed-tensors matched the text model's names: Kimi-K2.5's
// ignore entry "lm_head" is its language_model.lm_head) and without ".weight". Empty for a
// name that is not a module's weight (a bias).
std::string quant_module_name(const ModelConfig& config, const std::string& tensor);

// DeepSeek-V3's FP8 files keep these Linears float by convention, not by config (design 1.2):
// lm_head, an MTP module's eh_proj and shared_head.head.
bool fp8_float_by_convention(const TensorSpec& spec, const std::string& module);

// How the module of `tensor` (row `spec`, compressed-tensors class `cls`) is stored, agreed
// between config.json and the file: kind kNone when it is a float `tensor` (read as before),
// else the decision whose packed tensors the file holds. Throws (exit code 2) naming the tensor,
// its file and the config field when they disagree (a float weight the config quantizes, packed
// or fp8 tensors the config leaves float, both forms, a quantized non-Linear role, g_idx).
// tied_head: `tensor` is the embedding read for a tied lm_head (a quantized lm_head is refused).
QuantDecision resolve_storage(const Checkpoint& checkpoint, const TensorSpec& spec,
                              const std::string& tensor, ModuleClass cls, bool tied_head = false);

// The rank's shard of a quantized module (`tensor` names its ".weight"; `decision` from
// resolve_storage), its logical shape `shape` [rows, cols] as config.json implies it (`why`: the
// fields, for messages). split/begin/count: the schema's cut (kRows: rows [begin, begin +
// count), kCols: columns); copies go to `owned`. Every tensor's dtype and shape is checked; a
// column shard must start at a scale group (int: group_size, fp8: the block's columns) and an
// fp8 row shard at a block's first row, else refused naming tp, the tensor and the config field;
// fp8 NaN codes (0x7F, 0xFF) and non-finite scales are refused naming the first (row, col).
HostTensor load_quantized(const Checkpoint& checkpoint, const std::string& tensor,
                          const QuantDecision& decision, const std::vector<std::int64_t>& shape,
                          const std::string& why, Split split, std::int64_t begin,
                          std::int64_t count, int tp, std::vector<std::vector<std::byte>>& owned);

}  // namespace specrun
