// safetensors reader/writer and Checkpoint: round trips, the real shared checkpoints, and one
// test per kind of broken file, each checking that the message says what is wrong.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "child_run.h"
#include "common/error.h"
#include "model/checkpoint.h"
#include "model/safetensors.h"
#include "temp_dir.h"

namespace specrun {
namespace {

namespace fs = std::filesystem;

const std::string kShared = SPECRUN_SOURCE_DIR "/../shared";

using test::TempDir;

// The error text of f(), or "" when it does not throw.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A file: u64 header length, header (padded to 8 with spaces), then `data_bytes` bytes.
void write_raw(const std::string& path, std::string header, std::size_t data_bytes,
               std::uint64_t declared_len = 0) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::uint64_t n = declared_len ? declared_len : header.size();
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header;
  for (std::size_t i = 0; i < data_bytes; ++i) out.put(static_cast<char>(i & 0x7f));
}

std::vector<std::byte> f32_bytes(const std::vector<float>& v) {
  std::vector<std::byte> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(Safetensors, RoundTripAllFloatDtypes) {
  TempDir tmp;
  std::vector<float> a = {1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, 7.0f};
  std::vector<std::byte> bf(4), h(4);
  std::uint16_t bf_vals[2] = {f32_to_bf16(1.5f), f32_to_bf16(-0.75f)};
  std::uint16_t h_vals[2] = {f32_to_f16(0.5f), f32_to_f16(-3.0f)};
  std::memcpy(bf.data(), bf_vals, 4);
  std::memcpy(h.data(), h_vals, 4);
  const std::string path = tmp.file("x.safetensors");
  write_safetensors(path, {{"a", DType::kF32, {2, 3}, f32_bytes(a)},
                           {"b", DType::kBF16, {2}, bf},
                           {"c.h", DType::kF16, {1, 2}, h},
                           {"scalar", DType::kF32, {}, f32_bytes({42.0f})},
                           {"empty", DType::kF32, {0, 4}, {}}});
  // Header length is a multiple of 8, so data starts 8-byte aligned.
  std::ifstream in(path, std::ios::binary);
  std::uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);

  SafetensorsFile f(path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b", "c.h", "empty", "scalar"}));
  const TensorView& ta = f.get("a");
  EXPECT_EQ(ta.dtype, DType::kF32);
  EXPECT_EQ(ta.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(ta.numel(), 6);
  EXPECT_EQ(ta.nbytes, 24u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ta.data) % 8, 0u);
  EXPECT_EQ(std::memcmp(ta.data, a.data(), 24), 0);
  const TensorView& tb = f.get("b");
  EXPECT_EQ(tb.dtype, DType::kBF16);
  std::uint16_t got[2];
  std::memcpy(got, tb.data, 4);
  EXPECT_EQ(bf16_to_f32(got[1]), -0.75f);
  const TensorView& tc = f.get("c.h");
  EXPECT_EQ(tc.dtype, DType::kF16);
  std::memcpy(got, tc.data, 4);
  EXPECT_EQ(f16_to_f32(got[1]), -3.0f);
  EXPECT_EQ(f.get("scalar").numel(), 1);
  EXPECT_EQ(f.get("empty").numel(), 0);
  EXPECT_EQ(f.get("a").file, path);
}

TEST(Safetensors, ReadsTheFormatsWorkedExample) {
  TempDir tmp;
  const std::string path = tmp.file("e.safetensors");
  write_raw(path, R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})", 24);
  SafetensorsFile f(path);
  EXPECT_EQ(f.get("attn.0").numel(), 6);
}

TEST(Safetensors, ReadsTheSharedCheckpoint) {
  SafetensorsFile f(kShared + "/models/code-target/model.safetensors");
  const TensorView& e = f.get("model.embed_tokens.weight");
  EXPECT_EQ(e.dtype, DType::kBF16);
  EXPECT_EQ(e.shape, (std::vector<std::int64_t>{2048, 256}));
}

TEST(SafetensorsErrors, FileShorterThanLengthField) {
  TempDir tmp;
  const std::string path = tmp.file("short.safetensors");
  std::ofstream(path) << "abc";
  std::string msg = error_of([&] { SafetensorsFile f(path); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated or not a safetensors file"), std::string::npos) << msg;
}

TEST(SafetensorsErrors, HeaderLengthBeyondFile) {
  TempDir tmp;
  const std::string path = tmp.file("h.safetensors");
  write_raw(path, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8, 123456);
  std::string msg = error_of([&] { SafetensorsFile f(path); });
  EXPECT_NE(msg.find("header length 123456 exceeds file size 72"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(SafetensorsErrors, HeaderLengthOverCap) {
  TempDir tmp;
  const std::string path = tmp.file("big.safetensors");
  write_raw(path, "{}", 0, 150'000'000);
  fs::resize_file(path, 150'000'100);  // sparse: no real disk use
  std::string msg = error_of([&] { SafetensorsFile f(path); });
  EXPECT_NE(msg.find("header length 150000000 exceeds the limit"), std::string::npos) << msg;
}

TEST(SafetensorsErrors, TruncatedFile) {
  TempDir tmp;
  const std::string path = tmp.file("t.safetensors");
  write_safetensors(path, {{"w", DType::kF32, {4, 4}, f32_bytes(std::vector<float>(16, 1.0f))}});
  fs::resize_file(path, fs::file_size(path) - 10);
  std::string msg = error_of([&] { SafetensorsFile f(path); });
  EXPECT_NE(msg.find("tensor 'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("outside the data section of 54 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST(SafetensorsErrors, NotJsonAndNotAnObject) {
  TempDir tmp;
  const std::string p1 = tmp.file("a.safetensors"), p2 = tmp.file("b.safetensors");
  write_raw(p1, R"({"a": {"dtype": )", 0);
  EXPECT_NE(error_of([&] { SafetensorsFile f(p1); }).find("not valid JSON"), std::string::npos);
  write_raw(p2, "[1, 2]", 0);
  EXPECT_NE(error_of([&] { SafetensorsFile f(p2); }).find("does not start with '{'"),
            std::string::npos);
}

TEST(SafetensorsErrors, OffsetsOutOfRange) {
  TempDir tmp;
  const std::string path = tmp.file("o.safetensors");
  write_raw(path, R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})", 16);
  std::string msg = error_of([&] { SafetensorsFile f(path); });
  EXPECT_NE(msg.find("tensor 'a': data_offsets [8, 24] lie outside the data section of 16 bytes"),
            std::string::npos)
      << msg;
}

TEST(SafetensorsErrors, BeginAfterEnd) {
  TempDir tmp;
  const std::string path = tmp.file("o.safetensors");
  write_raw(path, R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8);
  EXPECT_NE(error_of([&] { SafetensorsFile f(path); }).find("begin > end"), std::string::npos);
}

TEST(SafetensorsErrors, SizeDisagreesWithShape) {
  TempDir tmp;
  const std::string path = tmp.file("s.safetensors");
  write_raw(path, R"({"a":{"dtype":"BF16","shape":[3,3],"data_offsets":[0,16]}})", 16);
  std::string msg = error_of([&] { SafetensorsFile f(path); });
  EXPECT_NE(msg.find("span 16 bytes, but shape [3,3] of BF16 needs 18 bytes"), std::string::npos)
      << msg;
}

TEST(SafetensorsErrors, NegativeShape) {
  TempDir tmp;
  const std::string path = tmp.file("n.safetensors");
  write_raw(path, R"({"a":{"dtype":"F32","shape":[-1,4],"data_offsets":[0,16]}})", 16);
  EXPECT_NE(error_of([&] { SafetensorsFile f(path); }).find("not a non-negative integer"),
            std::string::npos);
}

TEST(SafetensorsErrors, OverlappingOffsets) {
  TempDir tmp;
  const std::string path = tmp.file("ov.safetensors");
  write_raw(path,
            R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
            R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
            24);
  std::string msg = error_of([&] { SafetensorsFile f(path); });
  EXPECT_NE(msg.find("tensor 'b' bytes [8, 24) overlap tensor 'a' bytes [0, 16)"),
            std::string::npos)
      << msg;
}

TEST(SafetensorsErrors, HoleInData) {
  TempDir tmp;
  const std::string path = tmp.file("hole.safetensors");
  write_raw(path,
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})",
            20);
  std::string msg = error_of([&] { SafetensorsFile f(path); });
  EXPECT_NE(msg.find("hole of 4 bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("before tensor 'b'"), std::string::npos) << msg;
}

TEST(SafetensorsErrors, TrailingBytes) {
  TempDir tmp;
  const std::string path = tmp.file("tr.safetensors");
  write_raw(path, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12);
  EXPECT_NE(error_of([&] { SafetensorsFile f(path); }).find("4 trailing bytes"), std::string::npos);
}

TEST(SafetensorsErrors, DuplicateKey) {
  TempDir tmp;
  const std::string path = tmp.file("d.safetensors");
  write_raw(path,
            R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
            R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
            8);
  EXPECT_NE(error_of([&] { SafetensorsFile f(path); }).find("tensor 'a' appears twice"),
            std::string::npos);
}

TEST(SafetensorsErrors, UnsupportedDtypeRejectedOnAccess) {
  TempDir tmp;
  const std::string path = tmp.file("i.safetensors");
  write_raw(path,
            R"({"ids":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},)"
            R"("w":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
            16);
  SafetensorsFile f(path);  // opening is fine: the file is well formed
  EXPECT_TRUE(f.has("ids"));
  EXPECT_EQ(f.get("w").numel(), 2);
  std::string msg = error_of([&] { f.get("ids"); });
  EXPECT_NE(msg.find("tensor 'ids' has dtype I32"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(SafetensorsErrors, MissingTensor) {
  TempDir tmp;
  const std::string path = tmp.file("m.safetensors");
  write_safetensors(path, {{"w", DType::kF32, {1}, f32_bytes({1.0f})}});
  SafetensorsFile f(path);
  std::string msg = error_of([&] { f.get("v"); });
  EXPECT_NE(msg.find("tensor 'v' not found"), std::string::npos) << msg;
}

// A tiny Llama checkpoint directory (hidden 16, 1 layer) with `tweak` applied to its tensors.
const char* kTinyConfig = R"({"architectures":["LlamaForCausalLM"],"model_type":"llama",
  "hidden_size":16,"intermediate_size":32,"num_hidden_layers":1,"num_attention_heads":4,
  "num_key_value_heads":2,"vocab_size":10,"max_position_embeddings":64,
  "tie_word_embeddings":true})";

std::vector<TensorToWrite> tiny_tensors() {
  auto t = [](const std::string& name, std::vector<std::int64_t> shape) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return TensorToWrite{name, DType::kF32, shape,
                         f32_bytes(std::vector<float>(static_cast<std::size_t>(n), 0.5f))};
  };
  return {t("model.embed_tokens.weight", {10, 16}),
          t("model.layers.0.input_layernorm.weight", {16}),
          t("model.layers.0.self_attn.q_proj.weight", {16, 16}),
          t("model.layers.0.self_attn.k_proj.weight", {8, 16}),
          t("model.layers.0.self_attn.v_proj.weight", {8, 16}),
          t("model.layers.0.self_attn.o_proj.weight", {16, 16}),
          t("model.layers.0.post_attention_layernorm.weight", {16}),
          t("model.layers.0.mlp.gate_proj.weight", {32, 16}),
          t("model.layers.0.mlp.up_proj.weight", {32, 16}),
          t("model.layers.0.mlp.down_proj.weight", {16, 32}),
          t("model.norm.weight", {16})};
}

TEST(Checkpoint, EveryTensorHasTheShapeConfigImplies) {
  TempDir tmp;
  std::ofstream(tmp.file("config.json")) << kTinyConfig;
  write_safetensors(tmp.file("model.safetensors"), tiny_tensors());
  Checkpoint ck(tmp.path());
  EXPECT_EQ(ck.config().num_kv_heads, 2);
  EXPECT_EQ(ck.names().size(), 11u);
  for (const std::string& name : ck.names()) {
    std::vector<std::int64_t> shape = ck.config_shape(name);
    ASSERT_FALSE(shape.empty()) << name;
    EXPECT_EQ(ck.tensor(name, shape).shape, shape) << name;
  }
  EXPECT_TRUE(ck.config_shape("model.layers.1.mlp.up_proj.weight").empty());  // only 1 layer
}

TEST(Checkpoint, SharedTrainedPairLoadsWithConfigShapes) {
  for (const char* name : {"code-target", "code-draft-f32"}) {
    Checkpoint ck(kShared + "/models/" + name);
    EXPECT_EQ(ck.config().vocab_size, 2048);
    EXPECT_TRUE(ck.has("lm_head.weight"));
    for (const std::string& t : ck.names()) {
      std::vector<std::int64_t> shape = ck.config_shape(t);
      ASSERT_FALSE(shape.empty()) << t;
      EXPECT_NO_THROW(ck.tensor(t, shape)) << t;
    }
  }
}

TEST(CheckpointErrors, ShapeMismatchNamesConfigFields) {
  TempDir tmp;
  std::ofstream(tmp.file("config.json")) << kTinyConfig;
  auto tensors = tiny_tensors();
  tensors[3] = {"model.layers.0.self_attn.k_proj.weight",
                DType::kF32,
                {16, 16},
                f32_bytes(std::vector<float>(256, 0.0f))};
  // Keep the file consistent: the v_proj must still follow, so only the shape changes.
  write_safetensors(tmp.file("model.safetensors"), tensors);
  Checkpoint ck(tmp.path());
  const std::string name = "model.layers.0.self_attn.k_proj.weight";
  std::string msg = error_of([&] { ck.tensor(name, ck.config_shape(name)); });
  EXPECT_NE(msg.find("tensor '" + name + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors has shape [16, 16], expected [8, 16]"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("config.json [num_key_value_heads*head_dim = 2*4 = 8, hidden_size = 16]"),
            std::string::npos)
      << msg;
}

TEST(CheckpointErrors, MissingTensor) {
  TempDir tmp;
  std::ofstream(tmp.file("config.json")) << kTinyConfig;
  auto tensors = tiny_tensors();
  tensors.pop_back();  // model.norm.weight
  write_safetensors(tmp.file("model.safetensors"), tensors);
  Checkpoint ck(tmp.path());
  EXPECT_FALSE(ck.has("model.norm.weight"));
  std::string msg = error_of([&] { ck.tensor("model.norm.weight", {16}); });
  EXPECT_NE(msg.find("tensor 'model.norm.weight' is missing"), std::string::npos) << msg;
  EXPECT_NE(msg.find(tmp.file("model.safetensors")), std::string::npos) << msg;
}

TEST(CheckpointErrors, MissingFiles) {
  TempDir tmp;
  EXPECT_NE(error_of([&] { Checkpoint ck(tmp.file("nope")); }).find("does not exist"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Checkpoint ck(tmp.path()); }).find("has no config.json"),
            std::string::npos);
  std::ofstream(tmp.file("config.json")) << kTinyConfig;
  EXPECT_NE(error_of([&] { Checkpoint ck(tmp.path()); }).find("neither model.safetensors"),
            std::string::npos);
}

TEST(Checkpoint, ShardedIndex) {
  TempDir tmp;
  std::ofstream(tmp.file("config.json")) << kTinyConfig;
  auto tensors = tiny_tensors();
  std::vector<TensorToWrite> a(tensors.begin(), tensors.begin() + 5);
  std::vector<TensorToWrite> b(tensors.begin() + 5, tensors.end());
  write_safetensors(tmp.file("model-00001-of-00002.safetensors"), a);
  write_safetensors(tmp.file("model-00002-of-00002.safetensors"), b);
  std::string map;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    map += (i ? "," : "") + ("\"" + tensors[i].name + "\": \"model-0000" + (i < 5 ? "1" : "2") +
                             "-of-00002.safetensors\"");
  }
  std::ofstream(tmp.file("model.safetensors.index.json"))
      << R"({"metadata":{"total_size":1},"weight_map":{)" << map << "}}";
  Checkpoint ck(tmp.path());
  EXPECT_EQ(ck.num_files(), 2u);
  EXPECT_EQ(ck.names().size(), tensors.size());
  EXPECT_EQ(ck.tensor("model.norm.weight", {16}).file,
            tmp.file("model-00002-of-00002.safetensors"));

  // The index says a tensor lives in a shard that does not hold it.
  std::ofstream(tmp.file("model.safetensors.index.json"))
      << R"({"weight_map":{"model.norm.weight":"model-00001-of-00002.safetensors"}})";
  std::string msg = error_of([&] { Checkpoint bad(tmp.path()); });
  EXPECT_NE(msg.find("'model.norm.weight' is mapped to model-00001-of-00002.safetensors but that "
                     "file does not contain it"),
            std::string::npos)
      << msg;
}

}  // namespace
// A header of 100,000 nested [] is refused before parsing, naming the file. Guards against the
// crash it caused (a stack overflow in the recursive dump() of the error message; issue 18).
TEST(SafetensorsErrors, DeeplyNestedHeaderIsRefused) {
  TempDir tmp;
  const std::string path = tmp.file("deep.safetensors");
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  write_raw(path, R"({"a":{"dtype":"F32","shape":)" + deep + R"(,"data_offsets":[0,16]}})", 16);
  const std::string msg = error_of([&] { SafetensorsFile f(path); });
  EXPECT_NE(msg.find("nested more than 64 levels"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

namespace {

// Peak memory of opening `header` (a safetensors file with `data_bytes` of data), measured in a
// child process whose memory may grow by 2 GiB, from a reset high-water mark: the error it
// threw ("" when none), and its growth in MB and as a multiple of the header's size.
struct HeaderCost {
  std::string error;
  double header_mb = 0, grew_mb = 0;
  double ratio() const { return grew_mb / header_mb; }
};

HeaderCost header_cost(const std::string& what, const std::string& header, std::size_t data_bytes) {
  TempDir tmp;
  const std::string path = tmp.file("h.safetensors");
  write_raw(path, header, data_bytes);
  const test::ChildRun run = test::run_in_child(
      [&] { return std::to_string(SafetensorsFile(path).names().size()); }, 2LL << 30);
  HeaderCost cost;
  cost.error = run.returned ? "" : run.error;
  cost.header_mb = static_cast<double>(header.size()) / 1e6;
  cost.grew_mb = static_cast<double>(run.peak_growth_kb) / 1024.0;
  std::printf("%s: header %.1f MB, %s: peak memory grew by %.1f MB (%.1fx)\n", what.c_str(),
              cost.header_mb,
              run.returned ? ("loaded " + run.value + " tensors").c_str() : "refused", cost.grew_mb,
              cost.ratio());
  return cost;
}

// A header of `n` F32 tensors, each of shape [`dims`] and `elements` elements.
std::string entries_header(int n, const std::string& dims, int elements) {
  std::string header = "{";
  for (int i = 0; i < n; ++i) {
    if (i > 0) header += ",";
    header += "\"model.layers." + std::to_string(i % 1000) + ".mlp.experts." + std::to_string(i) +
              ".weight\":{\"dtype\":\"F32\",\"shape\":[" + dims + "],\"data_offsets\":[" +
              std::to_string(4 * elements * i) + "," + std::to_string(4 * elements * (i + 1)) +
              "]}";
  }
  return header + "}";
}

// Parsing a header costs a bounded multiple of its size. Guards against a 98 MB header costing
// 2.8 GB of memory per rank (29x its size; issue 18): a header of 150,000 entries (~13 MB) costs
// 7x here. And against one entry with a shape of 6.5 million dimensions (a 13 MB header) costing
// 21.9x its size (issue 40): shapes of more than 32 dimensions are refused while they are parsed,
// naming the tensor, and a header of entries that all have 32 dimensions, or one very long name,
// stays within the bound.
TEST(Safetensors, HeaderMemoryIsABoundedMultipleOfItsSize) {
  const int n = 150000;
  const HeaderCost many =
      header_cost("150,000 entries", entries_header(n, "1", 1), 4 * std::size_t{n});
  EXPECT_EQ(many.error, "");
  EXPECT_LT(many.ratio(), 10.0);

  std::string ones = "1";
  for (int i = 1; i < 6'500'000; ++i) ones += ",1";
  const HeaderCost long_shape =
      header_cost("one shape of 6.5M dimensions",
                  "{\"t\":{\"dtype\":\"F32\",\"shape\":[" + ones + "],\"data_offsets\":[0,4]}}", 4);
  EXPECT_NE(long_shape.error.find("tensor 't': shape has more than 32 dimensions"),
            std::string::npos)
      << long_shape.error;
  EXPECT_LT(long_shape.ratio(), 10.0);

  std::string dims32 = "1";
  for (int i = 1; i < 32; ++i) dims32 += ",1";
  const HeaderCost deep = header_cost("60,000 entries of 32 dimensions",
                                      entries_header(60000, dims32, 1), 4 * std::size_t{60000});
  EXPECT_EQ(deep.error, "");
  EXPECT_LT(deep.ratio(), 10.0);

  const HeaderCost long_name =
      header_cost("one name of 13 MB",
                  "{\"" + std::string(13'000'000, 'n') +
                      "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
                  4);
  EXPECT_EQ(long_name.error, "");
  EXPECT_LT(long_name.ratio(), 10.0);
  // A million metadata keys cost 18x: more than 65,536 are refused while they are parsed, and
  // that many cost a few MB.
  auto metadata_header = [](int keys) {
    std::string header = "{\"__metadata__\":{";
    for (int i = 0; i < keys; ++i) header += (i ? ",\"" : "\"") + std::to_string(i) + "\":\"\"";
    return header + "},\"t\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
  };
  const HeaderCost many_keys =
      header_cost("1,000,000 metadata keys", metadata_header(1'000'000), 4);
  EXPECT_NE(many_keys.error.find("__metadata__ has more than 65536 keys"), std::string::npos)
      << many_keys.error;
  EXPECT_LT(many_keys.ratio(), 10.0);
  const HeaderCost most_keys = header_cost("65,536 metadata keys", metadata_header(65536), 4);
  EXPECT_EQ(most_keys.error, "");
  EXPECT_LT(most_keys.grew_mb, 64.0);
}

}  // namespace

}  // namespace specrun
