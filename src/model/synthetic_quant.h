// `make-model --quantize`: a synthetic model's float tensors written as the publishers' quantized
// checkpoints (issue 44): compressed-tensors pack-quantized INT4 (group 32 symmetric, or group
// 128 with zero points) and DeepSeek-V3's FP8 e4m3 with 128 x 128 block scales. The rules (which
// modules, the scales, the rounding, the layouts) are written down in docs/reference.md, "`make-
// model --quantize`"; tests/e2e/quant_writer.py implements them independently and
// tests/e2e/quant_reference.sh compares the two byte for byte.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model_config.h"
#include "model/safetensors.h"

namespace specrun {

// The formats and roles make-model accepts (--quantize, --quant-roles).
inline constexpr const char* kQuantizeFormats[] = {"int4-g32", "int4-g128-asym", "fp8-block"};
inline constexpr const char* kQuantRoles[] = {"experts", "linear", "all"};

// Throws (exit code 2) naming --quantize or --quant-roles when `format` or `roles` is not one of
// the above or they do not go together (fp8-block keeps lm_head float: not `all`).
void validate_quantize(const std::string& format, const std::string& roles);

// The quantization_config object of a model of `config` (architecture, layers, experts) under
// `format` and `roles` (roles resolved: not empty).
nlohmann::ordered_json quantization_config_json(const ModelConfig& config,
                                                const std::string& format,
                                                const std::string& roles);

// The float8_e4m3fn code nearest to x: saturating at 448, a tie to the even code, the sign bit
// set for any x < 0 (so a negative x that rounds to 0 is 0x80).
std::uint8_t e4m3_nearest(float x);

// `tensors` (as make-model writes them, BF16 or F32) with each module `config.quant` quantizes
// replaced by its quantized tensors; `config.quant` must be parsed from
// quantization_config_json(). Other tensors are unchanged.
std::vector<TensorToWrite> quantize_tensors(const ModelConfig& config,
                                            std::vector<TensorToWrite> tensors);

}  // namespace specrun
