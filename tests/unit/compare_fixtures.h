// Synthetic runs for the compare tests (test_compare.cpp, test_compare_device.cpp): a mode's
// records with per-step timings drawn around given means, seeded.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>

#include "analysis/compare.h"

namespace specrun::compare_test {

struct Synthetic {
  double verify_ms = 10.0;  // mean verify time per step
  double draft_ms = 4.0;
  double seq_wall_s = 1.0;  // wall time of every sequence
  double noise = 0.1;       // relative standard deviation of every timing
};

// 40 batches x 4 sequences, 10 steps per batch, 2 ranks; timings ~ N(mean, (noise*mean)^2).
inline ModeData make_mode(const std::string& mode, const Synthetic& s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> unit(0.0, 1.0);
  auto draw = [&](double mean) {
    return static_cast<float>(std::max(0.0, mean * (1.0 + s.noise * unit(rng))));
  };
  ModeData d;
  d.mode = mode;
  d.n_ranks = 2;
  d.batch_size = 4;
  const bool spec = mode == kModeSpeculative;
  for (int b = 0; b < 40; ++b) {
    for (int j = 0; j < 4; ++j) {
      SequenceRecord r;
      r.prompt_index = b * 4 + j;
      r.generated = 31;
      r.verify_steps = 10;
      r.drafted = spec ? 40 : 0;
      r.accepted = spec ? 20 : 0;
      r.wall_s = s.seq_wall_s * (1.0 + s.noise * unit(rng));
      d.sequences.push_back(r);
      for (int st = 0; st < 10; ++st)
        d.steps.push_back(
            StepRecord{b, st, r.prompt_index, 4, spec ? 4 : 0, spec ? 2 : 0, spec ? 4 : 0});
    }
    for (int st = 0; st < 10; ++st) {
      for (int k = 0; k < 2; ++k) {
        float draft = spec ? draw(s.draft_ms) : 0.0f;
        float verify = draw(s.verify_ms);
        float comm = draw(1.0), sample = draw(0.2), other = draw(0.1);
        for (float v : {draft, verify, comm, sample, other, draft + verify + comm + sample + other})
          d.timings_ms.push_back(v);
      }
    }
  }
  return d;
}

inline const TimingChange* find(const Comparison& c, const std::string& mode,
                                const std::string& name) {
  for (const TimingChange& t : c.timings)
    if (t.mode == mode && t.name == name) return &t;
  return nullptr;
}

}  // namespace specrun::compare_test
