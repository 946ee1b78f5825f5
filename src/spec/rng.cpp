#include "spec/rng.h"

#include "common/error.h"

namespace specrun {
namespace {

// Constants from the Philox paper (and Random123): round multipliers and the Weyl sequence
// increments (golden ratio and sqrt(3)-1, in 32-bit fixed point) that bump the key per round.
constexpr std::uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr std::uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr std::uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr std::uint32_t kPhiloxW1 = 0xBB67AE85u;
constexpr int kPhiloxRounds = 10;

inline void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t* hi, std::uint32_t* lo) {
  const std::uint64_t product = static_cast<std::uint64_t>(a) * b;
  *hi = static_cast<std::uint32_t>(product >> 32);
  *lo = static_cast<std::uint32_t>(product);
}

}  // namespace

std::array<std::uint32_t, 4> philox4x32_10(const std::array<std::uint32_t, 4>& counter,
                                           const std::array<std::uint32_t, 2>& key) {
  std::array<std::uint32_t, 4> c = counter;
  std::uint32_t k0 = key[0];
  std::uint32_t k1 = key[1];
  for (int round = 0; round < kPhiloxRounds; ++round) {
    if (round > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    std::uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kPhiloxM0, c[0], &hi0, &lo0);
    mulhilo(kPhiloxM1, c[2], &hi1, &lo1);
    c = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
  }
  return c;
}

std::array<std::uint32_t, 4> random_words(std::uint64_t seed, std::uint64_t prompt_id,
                                          std::int64_t position, RandPurpose purpose,
                                          std::uint32_t draw) {
  SPEC_CHECK(position >= 0 && position <= static_cast<std::int64_t>(UINT32_MAX),
             "random position " << position << " for prompt " << prompt_id
                                << " is outside [0, 2^32); positions are token indices");
  SPEC_CHECK(draw <= kMaxDrawIndex,
             "draw index " << draw << " for prompt " << prompt_id << " exceeds " << kMaxDrawIndex);
  const std::array<std::uint32_t, 4> counter = {
      static_cast<std::uint32_t>(prompt_id), static_cast<std::uint32_t>(prompt_id >> 32),
      static_cast<std::uint32_t>(position), (static_cast<std::uint32_t>(purpose) << 24) | draw};
  const std::array<std::uint32_t, 2> key = {static_cast<std::uint32_t>(seed),
                                            static_cast<std::uint32_t>(seed >> 32)};
  return philox4x32_10(counter, key);
}

double uniform(std::uint64_t seed, std::uint64_t prompt_id, std::int64_t position,
               RandPurpose purpose, std::uint32_t draw) {
  const std::array<std::uint32_t, 4> w = random_words(seed, prompt_id, position, purpose, draw);
  return words_to_uniform(w[0], w[1]);
}

const char* rand_purpose_name(RandPurpose purpose) {
  switch (purpose) {
    case RandPurpose::kDraftSample:
      return "draft_sample";
    case RandPurpose::kAccept:
      return "accept";
    case RandPurpose::kResidual:
      return "residual";
    case RandPurpose::kBonus:
      return "bonus";
    case RandPurpose::kTargetSample:
      return "target_sample";
    case RandPurpose::kTreeSample:
      return "tree_sample";
  }
  return "unknown";
}

}  // namespace specrun
