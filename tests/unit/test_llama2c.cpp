// import-llama2c: header, file-size validation, conversion of stories260K (shapes, tied
// classifier, wq/wk rows permuted into HF rotary order), a separate classifier, BF16 output.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "common/error.h"
#include "model/checkpoint.h"
#include "model/llama2c.h"
#include "temp_dir.h"
#include "text/tokenizer.h"

namespace specrun {
namespace {

namespace fs = std::filesystem;
const std::string kShared = SPECRUN_SOURCE_DIR "/../shared";
const std::string kStories = kShared + "/models/stories260K/stories260K.bin";
const std::string kTok512 = kShared + "/models/stories260K/tok512.bin";

using test::TempDir;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Floats of a llama2.c file, indexed from the end of the 28-byte header.
std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(0, std::ios::end);
  std::size_t n = (static_cast<std::size_t>(in.tellg()) - 28) / 4;
  std::vector<float> out(n);
  in.seekg(28);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(n * 4));
  return out;
}

std::vector<float> row(const TensorView& t, std::int64_t r) {
  const std::int64_t cols = t.dim(1);
  std::vector<float> out(static_cast<std::size_t>(cols));
  if (t.dtype == DType::kF32) {
    std::memcpy(out.data(), t.data + r * cols * 4, static_cast<std::size_t>(cols) * 4);
  } else {
    for (std::int64_t i = 0; i < cols; ++i) {
      std::uint16_t b;
      std::memcpy(&b, t.data + (r * cols + i) * 2, 2);
      out[static_cast<std::size_t>(i)] = bf16_to_f32(b);
    }
  }
  return out;
}

std::vector<float> src_row(const std::vector<float>& f, std::int64_t start, std::int64_t r,
                           std::int64_t cols) {
  return std::vector<float>(f.begin() + start + r * cols, f.begin() + start + (r + 1) * cols);
}

TEST(Llama2c, StoriesHeader) {
  Llama2cHeader h = read_llama2c_header(kStories);
  EXPECT_EQ(h.dim, 64);
  EXPECT_EQ(h.hidden_dim, 172);
  EXPECT_EQ(h.n_layers, 5);
  EXPECT_EQ(h.n_heads, 8);
  EXPECT_EQ(h.n_kv_heads, 4);
  EXPECT_EQ(h.vocab_size, 512);
  EXPECT_EQ(h.seq_len, 512);
  EXPECT_TRUE(h.shared_classifier);
  EXPECT_EQ(h.head_size(), 8);
  EXPECT_EQ(h.kv_dim(), 32);
  EXPECT_EQ(h.expected_file_size(), 1056540u);  // docs/reference.md, "stories260K"
}

TEST(Llama2c, PermutationIndexFormula) {
  // head_dim 8: HF rows 0..3 are the even (real) parts of pairs 0..3, rows 4..7 the odd parts.
  const std::int64_t expected[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  for (int r = 0; r < 8; ++r) EXPECT_EQ(llama2c_row_for_hf_row(r, 8), expected[r]) << r;
  EXPECT_EQ(llama2c_row_for_hf_row(8 + 5, 8), 8 + 3);  // second head, c=1, j=1
}

TEST(Llama2c, ImportsStories260K) {
  TempDir tmp;
  const std::string out = tmp.file("stories");
  ModelConfig c = import_llama2c(kStories, out, {kTok512, DType::kF32});
  EXPECT_TRUE(c.tie_word_embeddings);
  ASSERT_TRUE(fs::exists(out + "/tokenizer.bin"));
  EXPECT_TRUE(fs::exists(out + "/generation_config.json"));

  Checkpoint ck(out);
  const ModelConfig& cfg = ck.config();
  EXPECT_EQ(cfg.architecture, "LlamaForCausalLM");
  EXPECT_EQ(cfg.hidden_size, 64);
  EXPECT_EQ(cfg.intermediate_size, 172);
  EXPECT_EQ(cfg.num_layers, 5);
  EXPECT_EQ(cfg.num_heads, 8);
  EXPECT_EQ(cfg.num_kv_heads, 4);
  EXPECT_EQ(cfg.head_dim, 8);
  EXPECT_EQ(cfg.vocab_size, 512);
  EXPECT_EQ(cfg.max_position_embeddings, 512);
  EXPECT_FLOAT_EQ(cfg.rms_norm_eps, 1e-5f);
  EXPECT_EQ(cfg.rope_theta, 10000.0);
  EXPECT_TRUE(cfg.tie_word_embeddings);
  EXPECT_EQ(cfg.bos_token_id, 1);
  EXPECT_TRUE(cfg.is_eos(2));
  EXPECT_FALSE(ck.has("lm_head.weight"));
  EXPECT_EQ(ck.names().size(), 1u + 5 * 9 + 1);
  for (const std::string& name : ck.names()) {
    EXPECT_NO_THROW(ck.tensor(name, ck.config_shape(name))) << name;
  }

  // Source offsets (floats after the header): emb 512*64, rms_att 5*64, wq 5*64*64, wk 5*32*64,
  // wv 5*32*64.
  const std::vector<float> src = read_floats(kStories);
  const std::int64_t D = 64, KV = 32;
  const std::int64_t wq0 = 512 * D + 5 * D, wk0 = wq0 + 5 * D * D, wv0 = wk0 + 5 * KV * D;
  EXPECT_EQ(row(ck.tensor("model.embed_tokens.weight"), 403), src_row(src, 0, 403, D));
  // Layer 2, q head 3, second half (c=1), j=2: HF row 3*8+4+2 = 30 is llama2.c row 3*8+2*2+1 = 29.
  const std::int64_t l = 2;
  EXPECT_EQ(row(ck.tensor("model.layers.2.self_attn.q_proj.weight"), 30),
            src_row(src, wq0 + l * D * D, 29, D));
  // First half (c=0), j=3 of the same head: HF row 27 is llama2.c row 30.
  EXPECT_EQ(row(ck.tensor("model.layers.2.self_attn.q_proj.weight"), 27),
            src_row(src, wq0 + l * D * D, 30, D));
  // k: layer 4, kv head 1, c=0, j=3: HF row 8+3 = 11 is llama2.c row 8+6 = 14.
  EXPECT_EQ(row(ck.tensor("model.layers.4.self_attn.k_proj.weight"), 11),
            src_row(src, wk0 + 4 * KV * D, 14, D));
  EXPECT_NE(row(ck.tensor("model.layers.4.self_attn.k_proj.weight"), 11),
            src_row(src, wk0 + 4 * KV * D, 11, D));
  // v is not permuted.
  EXPECT_EQ(row(ck.tensor("model.layers.4.self_attn.v_proj.weight"), 11),
            src_row(src, wv0 + 4 * KV * D, 11, D));

  // The copied tokenizer decodes through the model directory.
  auto tok = load_tokenizer_for(out);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->decode({1, 403, 407, 261, 378}), "Once upon a time");
}

TEST(Llama2c, Bf16ImportRoundsEachWeight) {
  TempDir tmp;
  import_llama2c(kStories, tmp.file("bf"), {"", DType::kBF16});
  Checkpoint ck(tmp.file("bf"));
  const TensorView& e = ck.tensor("model.embed_tokens.weight");
  EXPECT_EQ(e.dtype, DType::kBF16);
  const std::vector<float> src = read_floats(kStories);
  std::vector<float> r = row(e, 7);
  for (std::size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(r[i], bf16_to_f32(f32_to_bf16(src[7 * 64 + i])));
  }
  EXPECT_FALSE(fs::exists(tmp.file("bf") + "/tokenizer.bin"));
}

// A tiny llama2.c file with a separate classifier (negative vocab_size in the header).
TEST(Llama2c, SeparateClassifier) {
  TempDir tmp;
  const int dim = 8, hidden = 12, layers = 1, heads = 2, kv = 1, vocab = 5, seq = 4;
  Llama2cHeader h{dim, hidden, layers, heads, kv, vocab, seq, false};
  const std::size_t floats = (h.expected_file_size() - 28) / 4;
  std::vector<float> data(floats);
  for (std::size_t i = 0; i < floats; ++i) data[i] = static_cast<float>(i);
  const std::string path = tmp.file("sep.bin");
  {
    std::ofstream out(path, std::ios::binary);
    std::int32_t hdr[7] = {dim, hidden, layers, heads, kv, -vocab, seq};
    out.write(reinterpret_cast<const char*>(hdr), 28);
    out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(floats * 4));
  }
  ModelConfig c = import_llama2c(path, tmp.file("out"));
  EXPECT_FALSE(c.tie_word_embeddings);
  Checkpoint ck(tmp.file("out"));
  EXPECT_FALSE(ck.config().tie_word_embeddings);
  const TensorView& lm = ck.tensor("lm_head.weight", {vocab, dim});
  // wcls is the last vocab*dim floats of the file.
  EXPECT_EQ(row(lm, 0), src_row(data, static_cast<std::int64_t>(floats) - vocab * dim, 0, dim));
  EXPECT_EQ(row(lm, 4)[7], static_cast<float>(floats - 1));
}

TEST(Llama2cErrors, TruncatedFile) {
  TempDir tmp;
  const std::string path = tmp.file("cut.bin");
  fs::copy_file(kStories, path);
  fs::resize_file(path, 500000);
  std::string msg = error_of([&] { import_llama2c(path, tmp.file("out")); });
  EXPECT_NE(msg.find("file is 500000 bytes but its header"), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs 1056540 bytes: the file is truncated"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(tmp.file("out")));
}

TEST(Llama2cErrors, NotALlama2cFile) {
  TempDir tmp;
  const std::string path = tmp.file("x.bin");
  std::ofstream(path) << "this is certainly not a checkpoint header";
  EXPECT_NE(error_of([&] { read_llama2c_header(path); }).find("implausible llama2.c header"),
            std::string::npos);
  std::ofstream(path, std::ios::binary)
      .write("\x32\x34\x6b\x61\x01\0\0\0 padding to 28 bytes....", 28);
  EXPECT_NE(error_of([&] { read_llama2c_header(path); }).find("--version 1 export"),
            std::string::npos);
}

TEST(Llama2cErrors, TokenizerThatDoesNotFit) {
  TempDir tmp;
  const std::string path = tmp.file("tok.bin");
  fs::copy_file(kTok512, path);
  fs::resize_file(path, 3000);
  std::string msg = error_of([&] { import_llama2c(kStories, tmp.file("out"), {path}); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

}  // namespace
}  // namespace specrun
