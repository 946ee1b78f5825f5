// Counter-based random numbers for decoding: Philox4x32-10 (Salmon, Moraes, Dror, Shaw, SC'11),
// written from the published algorithm and checked against Random123's known-answer vectors.
//
// Every random number the decoder draws is a pure function of
//   key     = the job's seed (64 bits),
//   counter = (prompt id, position, purpose, draw index).
// Nothing is carried from one draw to the next, so the tokens a prompt gets do not depend on
// which other prompts share its batch, on the batch size, on the rank that decodes it or on tp.
//
// What `position` means (the contract that keeps speculative sampling lossless): it is the
// absolute index, in the sequence (prompt + generated), of the token that the draw decides. Each
// position is decided exactly once per mode: a draft token proposed for a position that is later
// discarded by a rejection is re-proposed in the next step with the same uniform, which is
// harmless because the discarded proposal had no influence on what was emitted.
#pragma once

#include <array>
#include <cstdint>

namespace specrun {

// What a uniform is used for; each purpose is its own stream, so e.g. the acceptance test and
// the residual sample at one position are independent.
enum class RandPurpose : std::uint32_t {
  kDraftSample = 0,   // the draft model sampling its proposal x_i ~ q_i
  kAccept = 1,        // the acceptance test u_i <= p_i(x_i) / q_i(x_i)
  kResidual = 2,      // the correction token ~ norm(max(0, p - q)) after a rejection
  kBonus = 3,         // the bonus token ~ p_{k+1} when all k draft tokens were accepted
  kTargetSample = 4,  // plain target sampling (baseline mode)
  kTreeSample = 5,    // the target's sample at a node of a verified token tree (verifier.h)
};
inline constexpr int kNumRandPurposes = 6;

// Philox4x32-10 block function: 10 rounds over a 128-bit counter with a 64-bit key. Returns
// four independent 32-bit words. Pure; safe from any thread.
std::array<std::uint32_t, 4> philox4x32_10(const std::array<std::uint32_t, 4>& counter,
                                           const std::array<std::uint32_t, 2>& key);

// The draws index within one (prompt, position, purpose); 24 bits are available.
inline constexpr std::uint32_t kMaxDrawIndex = (1u << 24) - 1;

// Counter layout: word0/word1 = prompt id (low/high 32 bits), word2 = position,
// word3 = purpose << 24 | draw index. Key = seed (low/high 32 bits). Throws when position is
// negative or >= 2^32, or draw > kMaxDrawIndex.
std::array<std::uint32_t, 4> random_words(std::uint64_t seed, std::uint64_t prompt_id,
                                          std::int64_t position, RandPurpose purpose,
                                          std::uint32_t draw = 0);

// A uniform double in [0, 1) with 53 random bits (a multiple of 2^-53; the largest value is
// 1 - 2^-53), made from the first two words of random_words(). Same arguments, same number.
double uniform(std::uint64_t seed, std::uint64_t prompt_id, std::int64_t position,
               RandPurpose purpose, std::uint32_t draw = 0);

// The same 53-bit mapping on two raw 32-bit words (hi supplies the top 32 bits).
inline double words_to_uniform(std::uint32_t hi, std::uint32_t lo) {
  const std::uint64_t bits = ((static_cast<std::uint64_t>(hi) << 32) | lo) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53;
}

// The per-sequence part of the key, so that callers pass one value around instead of two.
struct SeqRandKey {
  std::uint64_t seed = 0;
  std::uint64_t prompt_id = 0;
  double uniform(std::int64_t position, RandPurpose purpose, std::uint32_t draw = 0) const {
    return ::specrun::uniform(seed, prompt_id, position, purpose, draw);
  }
};

const char* rand_purpose_name(RandPurpose purpose);

}  // namespace specrun
