// Synthetic acceptance (decode.acceptance), as vLLM's synthetic rejection sampler and SGLang's
// SIMULATE_ACC_LEN: the target still verifies the drafter's real proposals (the same draft and
// verify work), but how many drafted tokens a step accepts follows a given rule instead of the
// verifier, so that a run measures the system's costs apart from the draft's quality:
//   fixed:L           every step accepts min(L, the proposal's depth) tokens
//   rates:r1,r2,...   position i is accepted with probability ri given that i-1 were (positions
//                     past the list use its last rate), from the sequence's seeded stream
// The accepted path follows each node's first child (a chain's own order); the token after it is
// the next drafted token on that path, else the verifier's. Outputs are then meaningless.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "spec/rng.h"

namespace specrun {

struct SyntheticAcceptance {
  enum class Kind { kReal, kFixed, kRates };
  Kind kind = Kind::kReal;
  int fixed = 0;
  std::vector<double> rates;
  bool synthetic() const { return kind != Kind::kReal; }
};

// Parses "real", "fixed:L" (0 <= L <= 16) or "rates:r1,...,rn" (1 to 16 rates in [0, 1]).
// Throws specrun::Error (exit code 2) saying what is wrong; the caller names the key.
SyntheticAcceptance parse_synthetic_acceptance(const std::string& text);

// How many of `depth` drafted positions a step accepts. `first_position` is the sequence
// position of the first drafted token (it keys the uniforms, so reruns repeat the same lengths).
int synthetic_accepted(const SyntheticAcceptance& rule, const SeqRandKey& key,
                       std::int64_t first_position, int depth);

}  // namespace specrun
