// libFuzzer target: config.json of a target model and of an EAGLE-3 head.
#include <cstdint>
#include <string>

#include "common/error.h"
#include "model/eagle3_config.h"
#include "model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const specrun::ModelConfig config = specrun::ModelConfig::from_json_text(text, "config.json");
    // Accepted configurations must survive what loading does next.
    (void)config.rope_inv_freq();
    (void)config.is_eos(0);
    // What make-model writes for an accepted configuration is accepted back.
    const std::string again = config.to_json_text();
    try {
      (void)specrun::ModelConfig::from_json_text(again, "config.json (written back)");
    } catch (const specrun::Error&) {
      __builtin_trap();
    }
    try {
      (void)specrun::Eagle3Config::from_json_text(text, "head/config.json", config);
    } catch (const specrun::Error&) {
    }
  } catch (const specrun::Error&) {
  }
  return 0;
}
