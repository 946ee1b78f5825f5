// Helpers of the decoding tests (test_decoder, test_decoder_drafters): a directory every rank
// shares, synthetic prompts, decoding a prompt list in batches, comparing outputs.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "engine/decoder.h"
#include "io/prompt_file.h"

namespace specrun::test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Rank 0 makes a temporary directory (/tmp/specrun-decoder-XXXXXX/<tag>); every rank learns it.
inline std::string shared_dir(const std::string& tag) {
  std::string dir;
  if (world_rank() == 0) {
    char tmpl[] = "/tmp/specrun-decoder-XXXXXX";
    dir = mkdtemp(tmpl);
    dir += "/" + tag;
  }
  int n = static_cast<int>(dir.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  dir.resize(n);
  MPI_Bcast(dir.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
  return dir;
}

// n prompts of 3..22 tokens: BOS (1), then random ids in [3, vocab).
inline std::vector<Prompt> make_prompts(int n, int vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Prompt> out;
  for (int i = 0; i < n; ++i) {
    Prompt p;
    p.index = 100 + i;
    p.id = "p" + std::to_string(i);
    int len = 3 + static_cast<int>(rng() % 20);
    p.tokens.push_back(1);
    for (int j = 1; j < len; ++j) p.tokens.push_back(3 + static_cast<int>(rng() % (vocab - 3)));
    out.push_back(p);
  }
  return out;
}

// Decodes all prompts in batches of batch_size; returns outputs by prompt order.
inline std::vector<SequenceRecord> decode_all(BatchDecoder& decoder, const std::string& mode,
                                              const std::vector<Prompt>& prompts, int batch_size) {
  std::vector<SequenceRecord> out;
  for (std::size_t first = 0; first < prompts.size(); first += batch_size) {
    std::vector<Prompt> batch(prompts.begin() + first,
                              prompts.begin() + std::min(prompts.size(), first + batch_size));
    BatchResult r = decoder.run(mode, static_cast<std::int64_t>(first / batch_size), batch);
    for (auto& s : r.sequences) out.push_back(std::move(s));
  }
  return out;
}

inline void expect_same_outputs(const std::vector<SequenceRecord>& a,
                                const std::vector<SequenceRecord>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].prompt_index, b[i].prompt_index) << what;
    EXPECT_EQ(a[i].output_tokens, b[i].output_tokens)
        << what << ": prompt " << a[i].prompt_index << " differs";
  }
}

}  // namespace specrun::test
