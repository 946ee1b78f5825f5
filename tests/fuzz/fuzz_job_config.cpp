// libFuzzer target: a job file and its --set overrides. The input is TOML; lines after a line
// "#--set" are overrides ("section.key=value"), one per line. An accepted job must also give
// the same configuration hash when its canonical TOML is parsed back (what --resume relies on).
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "config/job_config.h"
#include "spec/drafter_registry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> overrides;
  const std::string marker = "\n#--set\n";
  if (const size_t at = text.find(marker); at != std::string::npos) {
    std::string rest = text.substr(at + marker.size());
    text.resize(at + 1);
    size_t start = 0;
    while (start <= rest.size()) {
      size_t end = rest.find('\n', start);
      if (end == std::string::npos) end = rest.size();
      if (end > start) overrides.push_back(rest.substr(start, end - start));
      start = end + 1;
    }
  }
  try {
    const specrun::JobConfig config = specrun::parse_job_config(
        text, "fuzz.toml", overrides, "/fuzz-base", specrun::validate_drafter_config);
    const std::uint64_t hash = specrun::config_hash(config);
    (void)specrun::to_json(config).dump();
    const std::string canonical = specrun::to_toml(config);
    try {
      const specrun::JobConfig again = specrun::parse_job_config(
          canonical, "canonical.toml", {}, "/fuzz-base", specrun::validate_drafter_config);
      if (specrun::config_hash(again) != hash) __builtin_trap();
    } catch (const specrun::Error&) {
      __builtin_trap();  // the canonical form of an accepted job is accepted
    }
  } catch (const specrun::Error&) {
  }
  return 0;
}
