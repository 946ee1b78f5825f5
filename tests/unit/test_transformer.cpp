// Whole-model checks of the CPU transformer against the independent references in
// shared/models (float32 logits of every prompt position, greedy continuations with F32 and
// BF16 weights), and the cache invariants speculative decoding relies on: incremental decode
// equals one-shot, truncate-and-redo equals no rollback, batching does not change results.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "dist/communicator.h"
#include "kernels/cpu/ops.h"
#include "model/checkpoint.h"
#include "model/llama2c.h"
#include "model/model_factory.h"
#include "model/safetensors.h"
#include "model/synthetic.h"
#include "model/weight_schema.h"
#include "single_rank_comm.h"

namespace fs = std::filesystem;
using namespace specrun;

namespace {

using test::SingleRankComm;

fs::path shared_dir() {
  if (const char* env = std::getenv("SPECRUN_SHARED_DIR")) return env;
  return fs::path(SPECRUN_SOURCE_DIR) / ".." / "shared";
}

#define REQUIRE_SHARED_MODELS()                                                 \
  do {                                                                          \
    if (!fs::exists(shared_dir() / "models" / "reference.json"))                \
      GTEST_SKIP() << "shared models not found at " << shared_dir()             \
                   << " (set SPECRUN_SHARED_DIR); skipping whole-model checks"; \
  } while (0)

const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    std::ifstream in(shared_dir() / "models" / "reference.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

std::vector<std::int32_t> prompt_tokens(int k) {
  return reference()["prompts"][k]["tokens"].get<std::vector<std::int32_t>>();
}

struct Model {
  explicit Model(const std::string& name, int threads = 2)
      : checkpoint((shared_dir() / "models" / name).string()),
        owned(load_cpu_model(checkpoint, comm, threads)),
        transformer(*owned) {}
  SingleRankComm comm;
  Checkpoint checkpoint;
  std::unique_ptr<LanguageModel> owned;
  LanguageModel& transformer;
};

// Greedy continuation: prefill, then one token at a time, argmax with lowest id on ties.
std::vector<std::int32_t> greedy(LanguageModel& model, const std::vector<std::int32_t>& prompt,
                                 int n_new) {
  auto cache = model.new_cache(static_cast<int>(prompt.size()) + n_new);
  std::vector<float> logits;
  std::vector<std::int32_t> out;
  SeqChunk chunk{cache.get(), prompt.data(), static_cast<int>(prompt.size())};
  model.forward({&chunk, 1}, false, logits);
  for (int i = 0; i < n_new; ++i) {
    out.push_back(cpu::argmax(logits.data(), model.config().vocab_size));
    if (i + 1 == n_new) break;
    SeqChunk step{cache.get(), &out.back(), 1};
    model.forward({&step, 1}, false, logits);
  }
  return out;
}

std::vector<float> all_logits(LanguageModel& model, const std::vector<std::int32_t>& tokens) {
  auto cache = model.new_cache(static_cast<int>(tokens.size()));
  std::vector<float> logits;
  SeqChunk chunk{cache.get(), tokens.data(), static_cast<int>(tokens.size())};
  model.forward({&chunk, 1}, true, logits);
  return logits;
}

double max_abs_diff(const float* a, const float* b, std::size_t n, std::size_t* where = nullptr) {
  double worst = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - b[i]);
    if (!(d <= worst)) {
      worst = d;
      if (where) *where = i;
    }
  }
  return worst;
}

void check_reference_logits(const std::string& model_dir, const std::string& prefix) {
  Model m(model_dir);
  SafetensorsFile ref((shared_dir() / "models" / "reference_logits.safetensors").string());
  const int V = m.transformer.config().vocab_size;
  double overall = 0;
  for (std::size_t k = 0; k < reference()["prompts"].size(); ++k) {
    const auto tokens = prompt_tokens(static_cast<int>(k));
    const TensorView& expected = ref.get(prefix + ".p" + std::to_string(k));
    ASSERT_EQ(expected.dtype, DType::kF32);
    ASSERT_EQ(expected.shape,
              (std::vector<std::int64_t>{static_cast<std::int64_t>(tokens.size()), V}));
    std::vector<float> want(expected.numel());
    std::memcpy(want.data(), expected.data, expected.nbytes);
    const auto got = all_logits(m.transformer, tokens);
    std::size_t where = 0;
    const double err = max_abs_diff(got.data(), want.data(), want.size(), &where);
    overall = std::max(overall, err);
    EXPECT_LT(err, 1e-3) << model_dir << " prompt " << k << ": position " << where / V << " token "
                         << where % V << " expected " << want[where] << " actual " << got[where];
  }
  std::printf("%s: max |logit - reference| over all prompts and positions = %.3g\n",
              model_dir.c_str(), overall);
}

}  // namespace

TEST(TransformerReference, TargetF32LogitsMatch) {
  REQUIRE_SHARED_MODELS();
  check_reference_logits("code-target-f32", "target");
}

TEST(TransformerReference, DraftF32LogitsMatch) {
  REQUIRE_SHARED_MODELS();
  check_reference_logits("code-draft-f32", "draft");
}

TEST(TransformerReference, GreedyContinuationsMatch) {
  REQUIRE_SHARED_MODELS();
  const int n_new = reference()["n_new_tokens"].get<int>();
  struct Case {
    const char* dir;
    const char* role;
    const char* key;
  };
  for (Case c :
       {Case{"code-target-f32", "target", "greedy"}, Case{"code-draft-f32", "draft", "greedy"},
        Case{"code-target", "target", "greedy_bf16_weights"},
        Case{"code-draft", "draft", "greedy_bf16_weights"}}) {
    Model m(c.dir);
    for (std::size_t k = 0; k < reference()["prompts"].size(); ++k) {
      const auto& p = reference()["prompts"][k];
      const auto want = p[c.role][c.key].get<std::vector<std::int32_t>>();
      EXPECT_EQ(greedy(m.transformer, prompt_tokens(static_cast<int>(k)), n_new), want)
          << c.dir << " prompt " << k;
    }
  }
}

TEST(TransformerReference, Stories260KGreedyFromBosMatchesLlama2c) {
  const fs::path stories = shared_dir() / "models" / "stories260K";
  if (!fs::exists(stories / "stories260K.bin"))
    GTEST_SKIP() << "stories260K not found at " << stories << " (set SPECRUN_SHARED_DIR)";
  // Greedy ids from BOS that llama2.c's run.c produces (docs/reference.md, "stories260K").
  const std::vector<std::int32_t> want = {
      403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426,
      338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433,
      426, 385, 328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426, 338,
      391, 266, 267, 337, 335, 312, 432, 398, 312, 286, 267, 414, 270, 333, 415};
  const fs::path out =
      fs::temp_directory_path() / ("specrun_test_stories260K_" + std::to_string(::getpid()));
  import_llama2c((stories / "stories260K.bin").string(), out.string());
  {
    SingleRankComm comm;
    Checkpoint checkpoint(out.string());
    auto model = load_cpu_model(checkpoint, comm, 2);
    EXPECT_EQ(greedy(*model, {1}, static_cast<int>(want.size())), want);
  }
  fs::remove_all(out);
}

TEST(TransformerCache, IncrementalDecodeEqualsOneShot) {
  REQUIRE_SHARED_MODELS();
  Model m("code-target");
  const auto tokens = prompt_tokens(1);
  const int V = m.transformer.config().vocab_size, L = static_cast<int>(tokens.size());
  const auto one_shot = all_logits(m.transformer, tokens);

  auto cache = m.transformer.new_cache(L);
  std::vector<float> logits;
  const int prefix = L / 2;
  SeqChunk chunk{cache.get(), tokens.data(), prefix};
  m.transformer.forward({&chunk, 1}, true, logits);
  ASSERT_EQ(logits.size(), static_cast<std::size_t>(prefix) * V);
  EXPECT_LT(max_abs_diff(logits.data(), one_shot.data(), logits.size()), 1e-4);
  for (int i = prefix; i < L; ++i) {
    SeqChunk step{cache.get(), &tokens[i], 1};
    m.transformer.forward({&step, 1}, false, logits);
    ASSERT_EQ(logits.size(), static_cast<std::size_t>(V));
    EXPECT_LT(max_abs_diff(logits.data(), &one_shot[static_cast<std::size_t>(i) * V], V), 1e-4)
        << "position " << i;
  }
  EXPECT_EQ(cache->length(), L);
}

TEST(TransformerCache, TruncateAndRedoEqualsNoRollback) {
  REQUIRE_SHARED_MODELS();
  Model m("code-draft");
  const auto tokens = prompt_tokens(2);
  const int L = static_cast<int>(tokens.size()), V = m.transformer.config().vocab_size;
  const int prefix = L - 6;
  std::vector<float> logits, straight, redone;

  auto a = m.transformer.new_cache(L);
  SeqChunk pa{a.get(), tokens.data(), L};
  m.transformer.forward({&pa, 1}, true, straight);

  // Prefill the prefix, verify a window of wrong "draft" tokens, roll back, then run the real
  // continuation as one verify window: every logit equals the straight run.
  auto b = m.transformer.new_cache(L + 4);
  SeqChunk pb{b.get(), tokens.data(), prefix};
  m.transformer.forward({&pb, 1}, false, logits);
  const std::vector<std::int32_t> wrong = {5, 900, 17, 2000, 33};
  SeqChunk draft{b.get(), wrong.data(), 5};
  m.transformer.forward({&draft, 1}, true, logits);
  EXPECT_EQ(b->length(), prefix + 5);
  b->truncate(prefix + 1);  // keep one "accepted" token, then overwrite it too
  b->truncate(prefix);
  SeqChunk rest{b.get(), tokens.data() + prefix, L - prefix};
  m.transformer.forward({&rest, 1}, true, redone);
  const float* want = &straight[static_cast<std::size_t>(prefix) * V];
  EXPECT_LT(max_abs_diff(redone.data(), want, redone.size()), 1e-4);
  EXPECT_EQ(cpu::argmax(redone.data() + (L - prefix - 1) * V, V),
            cpu::argmax(want + (L - prefix - 1) * V, V));
}

TEST(TransformerCache, BatchOfSequencesEqualsEachAlone) {
  REQUIRE_SHARED_MODELS();
  Model m("code-draft");
  const int V = m.transformer.config().vocab_size;
  // Sequence 0 prefills, 1 decodes one token, 2 verifies a window of 3.
  const auto p0 = prompt_tokens(3), p1 = prompt_tokens(4), p2 = prompt_tokens(5);
  std::vector<std::unique_ptr<KvCache>> caches;
  for (int i = 0; i < 3; ++i) caches.push_back(m.transformer.new_cache(400));
  std::vector<float> logits;
  SeqChunk c1{caches[1].get(), p1.data(), static_cast<int>(p1.size()) - 1};
  m.transformer.forward({&c1, 1}, false, logits);
  SeqChunk c2{caches[2].get(), p2.data(), static_cast<int>(p2.size()) - 3};
  m.transformer.forward({&c2, 1}, false, logits);

  std::vector<SeqChunk> batch = {{caches[0].get(), p0.data(), static_cast<int>(p0.size())},
                                 {caches[1].get(), &p1.back(), 1},
                                 {caches[2].get(), p2.data() + p2.size() - 3, 3}};
  m.transformer.forward(batch, false, logits);
  ASSERT_EQ(logits.size(), static_cast<std::size_t>(3) * V);
  const std::vector<std::vector<std::int32_t>> prompts = {p0, p1, p2};
  for (int s = 0; s < 3; ++s) {
    const auto alone = all_logits(m.transformer, prompts[s]);
    EXPECT_LT(max_abs_diff(&logits[static_cast<std::size_t>(s) * V],
                           &alone[(prompts[s].size() - 1) * V], V),
              1e-4)
        << "sequence " << s;
  }
}

// Wanting only each sequence's last logits lets the last layer skip every other row after its
// keys and values: the logits and the caches must be bitwise those of the full pass.
TEST(TransformerCache, LastTokenLogitsAreBitwiseThoseOfTheFullPass) {
  REQUIRE_SHARED_MODELS();
  for (const char* dir : {"code-draft", "code-target-f32"}) {
    Model m(dir);
    const int V = m.transformer.config().vocab_size;
    const std::vector<std::vector<std::int32_t>> prompts = {prompt_tokens(3), prompt_tokens(4),
                                                            prompt_tokens(5)};
    // One sequence (a prefill), then three of different lengths, one of them a single token.
    for (const std::vector<int>& lengths :
         {std::vector<int>{static_cast<int>(prompts[0].size())},
          std::vector<int>{static_cast<int>(prompts[0].size()), 1, 7}}) {
      std::vector<std::unique_ptr<KvCache>> last_only, full;
      std::vector<SeqChunk> a, b;
      for (std::size_t s = 0; s < lengths.size(); ++s) {
        last_only.push_back(m.transformer.new_cache(400));
        full.push_back(m.transformer.new_cache(400));
        a.push_back({last_only.back().get(), prompts[s].data(), lengths[s]});
        b.push_back({full.back().get(), prompts[s].data(), lengths[s]});
      }
      std::vector<float> got, want;
      m.transformer.forward(a, false, got);
      m.transformer.forward(b, true, want);
      ASSERT_EQ(got.size(), lengths.size() * V);
      for (std::size_t s = 0, end = 0; s < lengths.size(); ++s) {
        end += static_cast<std::size_t>(lengths[s]);
        EXPECT_EQ(std::memcmp(&got[s * V], &want[(end - 1) * V], V * sizeof(float)), 0)
            << dir << ": sequence " << s << " of " << lengths.size();
        const KvCache& c = *last_only[s];
        const std::size_t floats = static_cast<std::size_t>(lengths[s]) * m.transformer.kv_heads() *
                                   m.transformer.config().head_dim;
        std::vector<float> mine(floats), theirs(floats);
        for (int layer = 0; layer < m.transformer.config().num_layers; ++layer) {
          for (int which : {0, 1}) {
            m.transformer.read_kv(c, layer, which, mine.data());
            m.transformer.read_kv(*full[s], layer, which, theirs.data());
            EXPECT_EQ(std::memcmp(mine.data(), theirs.data(), floats * sizeof(float)), 0)
                << dir << ": " << (which ? "values" : "keys") << " of layer " << layer
                << ", sequence " << s;
          }
        }
      }
    }
  }
}

TEST(TransformerErrors, TokenOutOfVocabularyIsRejectedBeforeAnyChange) {
  REQUIRE_SHARED_MODELS();
  Model m("code-draft");
  auto cache = m.transformer.new_cache(16);
  cache->set_sequence_id(7);
  const std::vector<std::int32_t> bad = {1, 50, 2048};
  std::vector<float> logits;
  SeqChunk c{cache.get(), bad.data(), 3};
  try {
    m.transformer.forward({&c, 1}, false, logits);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("token id 2048"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("sequence 7"), std::string::npos) << e.message();
  }
  EXPECT_EQ(cache->length(), 0);
}

TEST(TransformerErrors, ForeignCacheIsRejectedBeforeAnyChange) {
  REQUIRE_SHARED_MODELS();
  Model m("code-draft");
  const auto tokens = prompt_tokens(0);
  auto good = m.transformer.new_cache(16);
  // Made by another model (one layer more), and by another instance of the same model.
  Model target("code-target"), twin("code-draft");
  auto other = target.transformer.new_cache(16);
  auto twins = twin.transformer.new_cache(16);
  for (KvCache* bad : {other.get(), twins.get()}) {
    std::vector<float> logits;
    const SeqChunk batch[2] = {{good.get(), tokens.data(), 2}, {bad, tokens.data(), 2}};
    try {
      m.transformer.forward(batch, false, logits);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_NE(e.message().find("batch entry 1: KV cache was not made by this model"),
                std::string::npos)
          << e.message();
    }
    EXPECT_EQ(good->length(), 0);
  }
}

TEST(TransformerErrors, CapacityAndContextAreChecked) {
  REQUIRE_SHARED_MODELS();
  Model m("code-draft");
  const auto tokens = prompt_tokens(0);
  auto small = m.transformer.new_cache(8);
  std::vector<float> logits;
  SeqChunk c{small.get(), tokens.data(), 9};
  EXPECT_THROW(m.transformer.forward({&c, 1}, false, logits), Error);
  EXPECT_EQ(small->length(), 0);

  // The model's context is 1024 positions (max_position_embeddings).
  ASSERT_EQ(m.transformer.config().max_position_embeddings, 1024);
  auto owned_big = m.transformer.new_cache(2000);
  KvCache& big = *owned_big;
  big.set_sequence_id(3);
  big.advance(1020);
  try {
    big.check_append(5);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("sequence 3 would reach position 1025 but the model's context "
                               "is 1024: lower decode.max_new_tokens"),
              std::string::npos)
        << e.message();
    EXPECT_EQ(e.exit_code(), kExitUsage);
  }
  big.check_append(4);
  EXPECT_THROW(big.truncate(1021), Error);
  big.truncate(3);
  EXPECT_EQ(big.length(), 3);
}

TEST(ShardPlan, SplitsHeadsAndReplicatesKvHeads) {
  ModelConfig c;
  c.num_heads = 8;
  c.num_kv_heads = 4;
  c.intermediate_size = 768;
  c.vocab_size = 2048;
  // tp = 2: two kv heads each, query heads 4r..4r+3 read kv heads 2r, 2r+1.
  for (int r = 0; r < 2; ++r) {
    ShardPlan p = ShardPlan::make(c, 2, r);
    EXPECT_EQ(p.q_heads, 4);
    EXPECT_EQ(p.q_head_begin, 4 * r);
    EXPECT_EQ(p.kv_heads, 2);
    EXPECT_EQ(p.kv_head_begin, 2 * r);
    EXPECT_EQ(p.intermediate_begin, 384 * r);
    EXPECT_EQ(p.vocab_begin, 1024 * r);
  }
  // tp = 8 > 4 kv heads: one query head per rank, kv head r/2 replicated on two ranks.
  for (int r = 0; r < 8; ++r) {
    ShardPlan p = ShardPlan::make(c, 8, r);
    EXPECT_EQ(p.q_heads, 1);
    EXPECT_EQ(p.kv_heads, 1);
    EXPECT_EQ(p.kv_head_begin, r / 2);
  }
}

TEST(ShardPlan, IndivisibleShapesNameTheField) {
  ModelConfig c;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.intermediate_size = 384;
  c.vocab_size = 2048;
  auto message = [&](int tp) {
    try {
      ShardPlan::make(c, tp, 0);
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), kExitUsage);
      return e.message();
    }
    return std::string("no error");
  };
  EXPECT_NE(message(8).find("num_attention_heads = 4 is not divisible by tp = 8"),
            std::string::npos);
  EXPECT_NE(message(3).find("num_attention_heads"), std::string::npos);
  c.num_heads = 12;
  c.num_kv_heads = 6;
  EXPECT_NE(message(4).find("num_key_value_heads = 6"), std::string::npos);
  c.num_kv_heads = 4;  // tp 6: rank 1's query heads 2, 3 would need kv heads 0 and 1
  EXPECT_NE(message(6).find("num_key_value_heads = 4 is smaller than tp = 6"), std::string::npos);
  c.num_kv_heads = 3;  // tp 6: two ranks per kv head
  c.vocab_size = 2040;
  EXPECT_EQ(message(6), "no error");
  c.num_kv_heads = 6;
  c.intermediate_size = 385;
  EXPECT_NE(message(2).find("intermediate_size = 385"), std::string::npos);
  c.intermediate_size = 384;
  c.vocab_size = 2047;
  EXPECT_NE(message(2).find("vocab_size"), std::string::npos);
}

// Hidden-state capture (ForwardRequest::capture): layer id i is the residual stream at the input
// of layer i, num_layers the final norm's output, for every new token, in request order.
TEST(HiddenCapture, LayerInputsAndFinalNormFollowTheConvention) {
  const fs::path dir =
      fs::temp_directory_path() / ("specrun_test_capture_" + std::to_string(::getpid()));
  SyntheticSpec spec;
  spec.dtype = DType::kF32;
  spec.layers = 4;
  spec.draft_layers = 2;
  make_model_pair(spec, dir.string());
  {
    SingleRankComm comm;
    Checkpoint target_ckpt((dir / "target").string()), draft_ckpt((dir / "draft").string());
    auto target = load_cpu_model(target_ckpt, comm, 2);
    auto draft = load_cpu_model(draft_ckpt, comm, 2);
    const int H = spec.hidden, V = spec.vocab;
    const std::vector<std::int32_t> a = {1, 17, 300, 42, 9}, b = {1, 250, 7};
    auto run = [&](LanguageModel& m, std::vector<int> capture, bool all, std::vector<float>& hidden,
                   std::vector<float>& logits) {
      auto ca = m.new_cache(16), cb = m.new_cache(16);
      const SeqChunk batch[2] = {{ca.get(), a.data(), 5}, {cb.get(), b.data(), 3}};
      const ForwardResult out = m.forward(batch, ForwardRequest{all, capture});
      EXPECT_EQ(out.hidden.rows, capture.empty() ? 0 : 8);
      EXPECT_EQ(out.hidden.width, static_cast<int>(capture.size()) * H);
      hidden.resize(static_cast<std::size_t>(out.hidden.rows) * out.hidden.width);
      if (!capture.empty()) m.read(out.hidden, 0, out.hidden.rows, hidden.data());
      logits.resize(static_cast<std::size_t>(out.logits.rows) * V);
      m.read(out.logits, 0, out.logits.rows, logits.data());
    };
    // Target: the embeddings (layer 0), the input of the first layer the draft lacks, the final
    // norm; in that order of columns for every one of the 8 tokens.
    std::vector<float> hidden, logits, plain_hidden, plain_logits;
    run(*target, {0, spec.draft_layers, spec.layers}, false, hidden, logits);
    run(*target, {}, false, plain_hidden, plain_logits);
    EXPECT_EQ(std::memcmp(logits.data(), plain_logits.data(), logits.size() * sizeof(float)), 0)
        << "capturing changed the logits";
    const TensorView& embed = target_ckpt.tensor("model.embed_tokens.weight");
    const std::vector<std::int32_t> tokens = {1, 17, 300, 42, 9, 1, 250, 7};
    for (int t = 0; t < 8; ++t)
      EXPECT_EQ(std::memcmp(&hidden[static_cast<std::size_t>(t) * 3 * H],
                            embed.data + static_cast<std::size_t>(tokens[t]) * H * sizeof(float),
                            H * sizeof(float)),
                0)
          << "layer 0's input of token " << t << " is not its embedding";
    // The draft is the target's first draft_layers layers with the same final norm: its final
    // norm's output equals the target's residual at the input of layer draft_layers, normed.
    std::vector<float> draft_hidden, draft_logits;
    run(*draft, {spec.draft_layers}, true, draft_hidden, draft_logits);
    std::vector<float> normed(H);
    const TensorView& final_norm = target_ckpt.tensor("model.norm.weight");
    for (int t = 0; t < 8; ++t) {
      cpu::rmsnorm(&hidden[static_cast<std::size_t>(t) * 3 * H + H], 1, H, final_norm.data,
                   final_norm.dtype, target_ckpt.config().rms_norm_eps, normed.data());
      EXPECT_EQ(std::memcmp(normed.data(), &draft_hidden[static_cast<std::size_t>(t) * H],
                            H * sizeof(float)),
                0)
          << "token " << t << ": the target's input of layer " << spec.draft_layers
          << " is not the draft's last residual";
    }
    // The final norm's output (last column block) differs from the inputs (a real capture).
    EXPECT_NE(std::memcmp(&hidden[2 * H], &hidden[H], H * sizeof(float)), 0);
    EXPECT_THROW(run(*target, {spec.layers + 1}, false, hidden, logits), Error);
  }
  fs::remove_all(dir);
}

// Token trees: a tree verified in one forward pass gives every node bitwise the logits of a
// sequential decode of its path, and keeping an accepted path leaves the cache bitwise that of a
// plain prefill of the same tokens (the KV-compaction invariant).
namespace {

struct Tree {
  std::vector<std::int32_t> tokens, parents;  // parents: index of the parent node, -1 = root
};

// A tree of n nodes under the root, made of up to `top_k` children per node, parents first.
Tree random_tree(int n, int top_k, int vocab, unsigned seed) {
  std::mt19937 rng(seed);
  Tree t;
  for (int i = 0; i < n; ++i) {
    int parent;
    while (true) {
      parent = static_cast<int>(rng() % (i + 1)) - 1;
      int count = 0;
      for (int j = 0; j < i; ++j) count += t.parents[j] == parent;
      if (count < top_k) break;
    }
    t.parents.push_back(parent);
    t.tokens.push_back(3 + static_cast<std::int32_t>(rng() % (vocab - 3)));
  }
  return t;
}

// Logits [vocab] of the last token of `tokens` decoded from scratch, prefill then one by one.
std::vector<float> sequential_last(LanguageModel& m, const std::vector<std::int32_t>& tokens,
                                   int prefill) {
  auto cache = m.new_cache(static_cast<int>(tokens.size()));
  std::vector<float> logits;
  SeqChunk p{cache.get(), tokens.data(), prefill};
  m.forward({&p, 1}, false, logits);
  for (std::size_t i = prefill; i < tokens.size(); ++i) {
    SeqChunk s{cache.get(), &tokens[i], 1};
    m.forward({&s, 1}, false, logits);
  }
  return logits;
}

}  // namespace

TEST(TreeAttention, EveryNodeGetsTheLogitsOfItsPathDecodedAlone) {
  REQUIRE_SHARED_MODELS();
  // Also a synthetic model with head_dim 16 (the decoder tests' shape).
  const fs::path synthetic =
      fs::temp_directory_path() / ("specrun_test_tree_" + std::to_string(::getpid()));
  SyntheticSpec spec;
  spec.hidden = 128;
  spec.layers = 3;
  spec.heads = 8;
  spec.kv_heads = 4;
  spec.intermediate = 256;
  spec.vocab = 2048;
  make_model_pair(spec, synthetic.string());
  for (const std::string& dir : {std::string("code-target-f32"), std::string("code-target"),
                                 (synthetic / "target").string()}) {
    Model m(dir);
    const int V = m.transformer.config().vocab_size;
    const auto prompt = prompt_tokens(2);
    const Tree tree = random_tree(15, 4, V, 7);
    const int P = static_cast<int>(prompt.size());
    // Cache: the prompt but its last token (the root is fed with the tree, as in a verify
    // step: uncommitted chain tokens first, then the nodes).
    auto cache = m.transformer.new_cache(P + 16);
    std::vector<float> logits;
    SeqChunk pre{cache.get(), prompt.data(), P - 1};
    m.transformer.forward({&pre, 1}, false, logits);
    std::vector<std::int32_t> tokens = {prompt.back()}, parents = {kChainParent};
    for (std::size_t i = 0; i < tree.tokens.size(); ++i) {
      tokens.push_back(tree.tokens[i]);
      parents.push_back(tree.parents[i] < 0 ? P - 1 : P + tree.parents[i]);
    }
    SeqChunk verify{cache.get(), tokens.data(), static_cast<int>(tokens.size()), parents.data()};
    m.transformer.forward({&verify, 1}, true, logits);
    ASSERT_EQ(logits.size(), tokens.size() * V);
    EXPECT_EQ(cache->tree_base(), P);
    for (std::size_t i = 0; i <= tree.tokens.size(); ++i) {
      std::vector<std::int32_t> path_tokens;
      for (int at = static_cast<int>(i) - 1; at >= 0; at = tree.parents[at])
        path_tokens.insert(path_tokens.begin(), tree.tokens[at]);
      std::vector<std::int32_t> seq = prompt;
      seq.insert(seq.end(), path_tokens.begin(), path_tokens.end());
      EXPECT_EQ(cache->position_of(P - 1 + static_cast<int>(i)),
                P - 1 + static_cast<int>(path_tokens.size()));
      const auto want = sequential_last(m.transformer, seq, P);
      EXPECT_EQ(std::memcmp(&logits[i * V], want.data(), V * sizeof(float)), 0)
          << dir << ": node " << i << " (depth " << path_tokens.size() << ")";
    }
  }
  fs::remove_all(synthetic);
}

TEST(TreeAttention, KeepingAPathEqualsAPlainPrefill) {
  REQUIRE_SHARED_MODELS();
  Model m("code-target-f32");
  const int V = m.transformer.config().vocab_size;
  const auto prompt = prompt_tokens(3), other = prompt_tokens(4);
  const int P = static_cast<int>(prompt.size());
  const Tree tree = random_tree(12, 3, V, 11);
  // The deepest node's path is the "accepted" one.
  int deepest = 0, best_depth = -1;
  for (int i = 0; i < static_cast<int>(tree.tokens.size()); ++i) {
    int d = 0;
    for (int at = i; at >= 0; at = tree.parents[at]) ++d;
    if (d > best_depth) best_depth = d, deepest = i;
  }
  std::vector<int> path;  // node indices, root-first
  for (int at = deepest; at >= 0; at = tree.parents[at]) path.insert(path.begin(), at);

  auto cache = m.transformer.new_cache(P + 16);
  auto bystander = m.transformer.new_cache(static_cast<int>(other.size()) + 4);
  std::vector<float> logits;
  SeqChunk pre{cache.get(), prompt.data(), P};
  m.transformer.forward({&pre, 1}, false, logits);
  // The tree in two calls, as a drafter grows one level at a time, batched with a chain
  // sequence in the second call.
  std::vector<std::int32_t> parents(tree.tokens.size());
  for (std::size_t i = 0; i < tree.tokens.size(); ++i)
    parents[i] = tree.parents[i] < 0 ? P - 1 : P + tree.parents[i];
  const int half = 5;
  SeqChunk first{cache.get(), tree.tokens.data(), half, parents.data()};
  m.transformer.forward({&first, 1}, true, logits);
  const SeqChunk second[2] = {{cache.get(), tree.tokens.data() + half,
                               static_cast<int>(tree.tokens.size()) - half, parents.data() + half},
                              {bystander.get(), other.data(), static_cast<int>(other.size())}};
  m.transformer.forward(second, true, logits);
  std::vector<int> rows;
  for (int node : path) rows.push_back(node);
  m.transformer.keep(*cache, P, rows);
  EXPECT_EQ(cache->length(), P + static_cast<int>(path.size()));
  EXPECT_EQ(cache->tree_base(), cache->length());

  std::vector<std::int32_t> seq = prompt;
  for (int node : path) seq.push_back(tree.tokens[node]);
  auto plain = m.transformer.new_cache(static_cast<int>(seq.size()) + 1);
  SeqChunk all{plain.get(), seq.data(), static_cast<int>(seq.size())};
  m.transformer.forward({&all, 1}, false, logits);
  const std::size_t floats =
      seq.size() * m.transformer.kv_heads() * m.transformer.config().head_dim;
  std::vector<float> a(floats), b(floats);
  for (int layer = 0; layer < m.transformer.config().num_layers; ++layer)
    for (int which : {0, 1}) {
      m.transformer.read_kv(*cache, layer, which, a.data());
      m.transformer.read_kv(*plain, layer, which, b.data());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), floats * sizeof(float)), 0)
          << (which ? "values" : "keys") << " of layer " << layer << " after keep";
    }
  // The next step's logits agree too (stated tolerance: bitwise).
  const std::int32_t next = 77;
  std::vector<float> la, lb;
  SeqChunk sa{cache.get(), &next, 1}, sb{plain.get(), &next, 1};
  m.transformer.forward({&sa, 1}, false, la);
  m.transformer.forward({&sb, 1}, false, lb);
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), V * sizeof(float)), 0);
  // A path that is not one is refused before anything moves.
  std::vector<int> broken = {0, 0};
  EXPECT_THROW(m.transformer.keep(*cache, P, broken), Error);
}
