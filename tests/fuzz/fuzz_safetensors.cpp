// libFuzzer target: the safetensors reader (header JSON, offsets, dtypes) on arbitrary bytes.
// Every tensor it accepts is read end to end, so an offset it let through outside the mapping
// is an ASan report.
#include <cstdint>

#include "common/error.h"
#include "model/safetensors.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = specrun::fuzz::write_input("model.safetensors", data, size);
  try {
    specrun::SafetensorsFile file(path);
    unsigned sum = 0;
    for (const std::string& name : file.names()) {
      try {
        const specrun::TensorView& t = file.get(name);
        for (size_t i = 0; i < t.nbytes; ++i) sum += static_cast<unsigned>(t.data[i]);
        if (t.numel() < 0) __builtin_trap();
      } catch (const specrun::Error&) {
      }
    }
    for (const auto& [key, value] : file.metadata()) sum += static_cast<unsigned>(key.size());
    volatile unsigned sink = sum;
    (void)sink;
  } catch (const specrun::Error&) {
  }
  return 0;
}
