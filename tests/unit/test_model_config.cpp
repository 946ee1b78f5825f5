// ModelConfig: config.json fields, defaults, rope variants, and the rejection of everything that
// would silently change the numbers.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>

#include "common/error.h"
#include "common/json_depth.h"
#include "model/model_config.h"

namespace specrun {
namespace {

const std::string kShared = SPECRUN_SOURCE_DIR "/../shared";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A Llama config with `extra` fields appended (a JSON fragment starting with ',').
std::string llama(const std::string& extra = "", const std::string& arch = "LlamaForCausalLM") {
  return R"({"architectures":[")" + arch +
         R"("],"hidden_size":256,"intermediate_size":688,"num_hidden_layers":4,
             "num_attention_heads":8,"vocab_size":512)" +
         extra + "}";
}

ModelConfig parse(const std::string& text) {
  return ModelConfig::from_json_text(text, "cfg.json");
}

TEST(ModelConfig, SharedCodeTarget) {
  ModelConfig c = ModelConfig::from_file(kShared + "/models/code-target/config.json");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.intermediate_size, 768);
  EXPECT_EQ(c.num_layers, 6);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.vocab_size, 2048);
  EXPECT_EQ(c.max_position_embeddings, 1024);
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-5f);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_type, "default");
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2});
  EXPECT_TRUE(c.is_eos(2));
  EXPECT_FALSE(c.is_eos(1));
}

TEST(ModelConfig, DefaultsWhenFieldsAreAbsent) {
  ModelConfig c = parse(llama());
  EXPECT_EQ(c.num_kv_heads, 8);            // = num_attention_heads
  EXPECT_EQ(c.head_dim, 32);               // hidden_size / num_attention_heads
  EXPECT_FLOAT_EQ(c.rms_norm_eps, 1e-6f);  // transformers' LlamaConfig default
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST(ModelConfig, ExplicitHeadDimAndEosList) {
  ModelConfig c = parse(llama(R"(,"head_dim":64,"num_key_value_heads":2,"eos_token_id":[3,7,9],
                                 "tie_word_embeddings":true,"bos_token_id":5)"));
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{3, 7, 9}));
  EXPECT_TRUE(c.is_eos(7));
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 5);
}

TEST(ModelConfig, Qwen2HasQkvBiasAndMistralIsAccepted) {
  ModelConfig q =
      parse(llama(R"(,"use_sliding_window":false,"sliding_window":4096)", "Qwen2ForCausalLM"));
  EXPECT_EQ(q.model_type, "qwen2");
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_FALSE(q.o_bias);
  ModelConfig m = parse(llama(R"(,"sliding_window":null)", "MistralForCausalLM"));
  EXPECT_EQ(m.model_type, "mistral");
  EXPECT_FALSE(m.qkv_bias);
  ModelConfig b = parse(llama(R"(,"attention_bias":true)"));
  EXPECT_TRUE(b.qkv_bias);
  EXPECT_TRUE(b.o_bias);
}

TEST(ModelConfig, DefaultInvFreqFollowsTheFormula) {
  ModelConfig c = parse(llama(R"(,"rope_theta":10000.0)"));
  std::vector<float> f = c.rope_inv_freq();
  ASSERT_EQ(f.size(), 16u);
  EXPECT_EQ(f[0], 1.0f);
  // 10000^(-2*8/32) = 10000^(-1/2) = 0.01 and 10000^(-2*4/32) = 0.1
  EXPECT_FLOAT_EQ(f[8], 0.01f);
  EXPECT_FLOAT_EQ(f[4], 0.1f);
}

// Llama-3.1-8B: head_dim 128, theta 500000, factor 8, low 1, high 4, original context 8192.
// Expected values worked out from the formula of docs/reference.md "Llama 3 RoPE scaling"
// separately (Python, double precision, then rounded to float32): j=0..25 high band (unchanged),
// j=30 medium band (interpolated, wavelength 2948.3), j>=35 low band (divided by 8).
TEST(ModelConfig, Llama3InvFreqMatchesHandComputedValues) {
  const char* rope = R"(,"head_dim":128,"rope_theta":500000.0,"max_position_embeddings":131072,
      "rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,
                      "high_freq_factor":4.0,"original_max_position_embeddings":8192})";
  ModelConfig c = parse(llama(rope));
  EXPECT_EQ(c.rope_type, "llama3");
  EXPECT_EQ(c.rope_original_max_position, 8192);
  std::vector<float> f = c.rope_inv_freq();
  ASSERT_EQ(f.size(), 64u);
  const std::pair<int, float> expected[] = {{0, 1.0f},
                                            {10, 1.286873668e-01f},
                                            {20, 1.656044088e-02f},
                                            {25, 5.940730218e-03f},
                                            {30, 1.371893566e-03f},
                                            {35, 9.556212171e-05f},
                                            {40, 3.428102355e-05f},
                                            {50, 4.411534519e-06f},
                                            {63, 3.068925878e-07f}};
  for (const auto& [j, want] : expected) EXPECT_FLOAT_EQ(f[j], want) << "j=" << j;
  // The unscaled value at j=30 is 2*pi/2948.3; the medium band must lie strictly between
  // it divided by 8 and it.
  const double f30 = 1.0 / std::pow(500000.0, 60.0 / 128.0);
  EXPECT_LT(f[30], f30);
  EXPECT_GT(f[30], f30 / 8);

  // Legacy key "type" and transformers v5's rope_parameters give the same result.
  ModelConfig legacy = parse(llama(R"(,"head_dim":128,"rope_theta":500000.0,
      "rope_scaling":{"type":"llama3","factor":8.0,"low_freq_factor":1.0,
                      "high_freq_factor":4.0,"original_max_position_embeddings":8192})"));
  EXPECT_EQ(legacy.rope_inv_freq(), f);
  ModelConfig v5 = parse(llama(R"(,"head_dim":128,
      "rope_parameters":{"rope_type":"llama3","rope_theta":500000.0,"factor":8.0,
                         "low_freq_factor":1.0,"high_freq_factor":4.0,
                         "original_max_position_embeddings":8192})"));
  EXPECT_EQ(v5.rope_theta, 500000.0);
  EXPECT_EQ(v5.rope_inv_freq(), f);
  ModelConfig v5_default =
      parse(llama(R"(,"rope_parameters":{"rope_type":"default","rope_theta":123.0})"));
  EXPECT_EQ(v5_default.rope_type, "default");
  EXPECT_EQ(v5_default.rope_theta, 123.0);
}

TEST(ModelConfig, JsonTextRoundTrips) {
  ModelConfig c = parse(llama(R"(,"head_dim":128,"rope_theta":500000.0,"num_key_value_heads":2,
      "rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1.0,
                      "high_freq_factor":4.0,"original_max_position_embeddings":8192},
      "eos_token_id":[2,3],"tie_word_embeddings":true,"rms_norm_eps":1e-5)"));
  ModelConfig r = parse(c.to_json_text());
  EXPECT_EQ(r.architecture, c.architecture);
  EXPECT_EQ(r.hidden_size, c.hidden_size);
  EXPECT_EQ(r.num_kv_heads, 2);
  EXPECT_EQ(r.head_dim, 128);
  EXPECT_EQ(r.rms_norm_eps, c.rms_norm_eps);
  EXPECT_EQ(r.eos_token_ids, c.eos_token_ids);
  EXPECT_TRUE(r.tie_word_embeddings);
  EXPECT_EQ(r.rope_inv_freq(), c.rope_inv_freq());
  ModelConfig q = parse(parse(llama("", "Qwen2ForCausalLM")).to_json_text());
  EXPECT_TRUE(q.qkv_bias);
  EXPECT_FALSE(q.o_bias);
  // The range's ends: kept as float32 (0.1 is 0.100000001 there, 1e-12 is 9.99999998e-13), written
  // as that value, read back as accepted (found by fuzz_model_config).
  for (const char* eps : {"0.1", "1e-12"}) {
    const ModelConfig e = parse(llama(std::string(R"(,"rms_norm_eps":)") + eps));
    ModelConfig back;
    EXPECT_EQ(error_of([&] { back = parse(e.to_json_text()); }), "") << "rms_norm_eps " << eps;
    EXPECT_EQ(back.rms_norm_eps, e.rms_norm_eps) << "rms_norm_eps " << eps;
  }
}

// Each unsupported setting is an error that names the field and the file.
TEST(ModelConfigErrors, UnsupportedSettingsNameTheField) {
  struct Case {
    std::string text, field;
  };
  const Case cases[] = {
      {llama("", "GPT2LMHeadModel"), "GPT2LMHeadModel"},
      {llama(R"(,"hidden_act":"gelu")"), "hidden_act"},
      {llama(R"(,"quantization_config":{"quant_method":"bitsandbytes"})"), "quantization_config"},
      {llama(R"(,"rope_scaling":{"rope_type":"yarn","factor":4.0})"), "rope_scaling"},
      {llama(R"(,"rope_scaling":{"type":"linear","factor":2.0})"), "\"linear\""},
      {llama(R"(,"rope_scaling":{"rope_type":"dynamic","factor":2.0})"), "\"dynamic\""},
      {llama(R"(,"rope_parameters":{"rope_type":"yarn","rope_theta":1e6})"), "rope_parameters"},
      {llama(R"(,"rope_scaling":{"rope_type":"llama3","factor":8.0})"), "low_freq_factor"},
      {llama(R"(,"partial_rotary_factor":0.5)"), "partial_rotary_factor"},
      {llama(R"(,"use_sliding_window":true)", "Qwen2ForCausalLM"), "use_sliding_window"},
      {llama(R"(,"max_position_embeddings":32768,"sliding_window":4096)", "MistralForCausalLM"),
       "sliding_window"},
      {llama(R"(,"layer_types":["full_attention","sliding_attention"])"), "layer_types"},
      {llama(R"(,"num_key_value_heads":3)"), "num_key_value_heads"},
      {llama(R"(,"hidden_size":"256")"), "hidden_size"},
      {R"({"architectures":["LlamaForCausalLM"],"hidden_size":256})", "intermediate_size"},
      {llama(R"(,"eos_token_id":[2,99999])"), "eos_token_id"},
      {"{not json", "not valid JSON"},
  };
  for (const Case& tc : cases) {
    std::string msg = error_of([&] { parse(tc.text); });
    EXPECT_NE(msg.find(tc.field), std::string::npos) << "case " << tc.text << "\nmessage: " << msg;
    EXPECT_NE(msg.find("cfg.json"), std::string::npos) << msg;
  }
  // A Mistral window at least as long as the context is full attention: accepted.
  EXPECT_NO_THROW(parse(
      llama(R"(,"max_position_embeddings":4096,"sliding_window":4096)", "MistralForCausalLM")));
}

TEST(ModelConfigErrors, MissingFileIsClear) {
  std::string msg = error_of([] { ModelConfig::from_file("/nonexistent/config.json"); });
  EXPECT_NE(msg.find("cannot open /nonexistent/config.json"), std::string::npos) << msg;
}

}  // namespace
// A config.json value nested 100,000 deep is refused before parsing, and "[" inside strings do
// not count. Guards against the crash it caused (a stack overflow in the recursive dump() of the
// error message; issue 18).
TEST(ModelConfig, DeeplyNestedJsonIsRefused) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string msg = error_of(
      [&] { ModelConfig::from_json_text(R"({"hidden_size": )" + deep + "}", "cfg.json"); });
  EXPECT_NE(msg.find("cfg.json: JSON nested more than 64 levels"), std::string::npos) << msg;
  EXPECT_EQ(json_too_deep_at(R"({"a": ")" + std::string(1000, '[') + R"("})"),
            std::string_view::npos);
  EXPECT_EQ(json_too_deep_at(std::string(65, '[')), 64u);
}

// Absurd numeric values (rms_norm_eps 1e300, rope_theta 1e13, a billion layers) are refused,
// naming the field, instead of reaching the model's arithmetic or its allocations (issue 18).
TEST(ModelConfig, AbsurdNumbersAreRefused) {
  EXPECT_NE(error_of([&] {
              parse(llama(R"(,"rms_norm_eps":1e300)"));
            }).find("\"rms_norm_eps\" = 1e+300 is not a plausible value"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              parse(llama(R"(,"rms_norm_eps":0.5)"));
            }).find("rms_norm_eps = 0.5 is out of range"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse(llama(R"(,"rope_theta":1e13)")); }).find("rope_theta\" = 1e+13"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { parse(llama(R"(,"rms_norm_eps":1e-5)")); }), "");
  // num_hidden_layers = 1000000000 passed, and loading the model ended in std::bad_alloc naming
  // nothing (issue 40). Every size is bounded, far above any real model; the bound itself is
  // accepted.
  const std::vector<std::pair<std::string, long long>> sizes = {
      {"num_hidden_layers", 4096},
      {"hidden_size", 1 << 18},
      {"intermediate_size", 1 << 20},
      {"num_attention_heads", 4096},
      {"head_dim", 8192},
      {"vocab_size", 1 << 24},
      {"max_position_embeddings", 1 << 28},
      {"num_key_value_heads", 4096}};
  for (const auto& [field, bound] : sizes) {
    // With a head_dim of its own (else hidden_size / num_attention_heads must be one).
    const std::string base =
        llama(std::string(field == "head_dim" ? "" : R"(,"head_dim":64)") +
              (field == "num_key_value_heads" ? R"(,"num_attention_heads":4096)" : ""));
    auto with = [&](long long value) {
      std::string text = base;
      text.insert(text.size() - 1, ",\"" + field + "\":" + std::to_string(value));
      return text;
    };
    EXPECT_NE(error_of([&] { parse(with(1000000000)); })
                  .find("cfg.json: field \"" + field + "\" = 1000000000 is out of range [1, " +
                        std::to_string(bound) + "] (far above any real model)"),
              std::string::npos)
        << field;
    EXPECT_NE(error_of([&] { parse(with(bound + 1)); }).find("\"" + field + "\""),
              std::string::npos)
        << field;
    const std::string at_bound = error_of([&] { parse(with(bound)); });
    EXPECT_EQ(at_bound.find("out of range"), std::string::npos) << field << ": " << at_bound;
  }
  EXPECT_NE(error_of([&] {
              parse(llama(R"(,"hidden_size":262144,"num_attention_heads":2)"));
            }).find("hidden_size / num_attention_heads = 131072 is out of range [1, 8192]"),
            std::string::npos);
}

}  // namespace specrun

namespace specrun {
namespace {

// An instruct model's end-of-turn id lives in generation_config.json: it joins config.json's ids
// (no duplicates), else decoding runs past the end of the turn; a malformed file is an error
// naming it.
TEST(ModelConfig, GenerationConfigEosJoinsConfigEos) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("specrun-gen-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
  };
  write("config.json", llama(R"(,"eos_token_id":2)"));
  EXPECT_EQ(ModelConfig::from_file((dir / "config.json").string()).eos_token_ids,
            std::vector<int>{2});
  write("generation_config.json", R"({"bos_token_id":1,"eos_token_id":[2,7,9]})");
  EXPECT_EQ(ModelConfig::from_file((dir / "config.json").string()).eos_token_ids,
            (std::vector<int>{2, 7, 9}));
  write("generation_config.json", R"({"eos_token_id":600})");
  EXPECT_NE(error_of([&] {
              ModelConfig::from_file((dir / "config.json").string());
            }).find("generation_config.json: \"eos_token_id\" 600 must be an id"),
            std::string::npos);
  write("generation_config.json", "{nope");
  EXPECT_NE(error_of([&] {
              ModelConfig::from_file((dir / "config.json").string());
            }).find("generation_config.json is not valid JSON"),
            std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace specrun
