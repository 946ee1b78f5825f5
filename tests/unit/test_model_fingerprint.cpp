// Model fingerprints (io/model_fingerprint.h): whole-file content hashes that tell a replaced
// checkpoint apart, header hashes that tell "other values" from "other tensors", files that do
// not change the model left out, and the same hash for any thread count.
#include "io/model_fingerprint.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/safetensors.h"
#include "temp_dir.h"

namespace specrun {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// One F32 tensor "w" of `rows` x 4 with values start, start+1, ...
void write_model(const TempDir& d, int rows, float start) {
  write_text(d.file("config.json"), R"({"hidden_size": 4})");
  TensorToWrite t{"w", DType::kF32, {rows, 4}, {}};
  t.bytes.resize(static_cast<std::size_t>(rows) * 4 * sizeof(float));
  for (int i = 0; i < rows * 4; ++i) {
    const float v = start + static_cast<float>(i);
    std::memcpy(t.bytes.data() + i * sizeof(float), &v, sizeof v);
  }
  write_safetensors(d.file("model.safetensors"), {t});
}

std::vector<std::string> changes(const ModelFingerprint& a, const ModelFingerprint& b) {
  return describe_file_changes(nlohmann::json(a)["files"], nlohmann::json(b)["files"]);
}

TEST(ModelFingerprint, EqualContentEqualIdAcrossDirectories) {
  TempDir a, b;
  write_model(a, 8, 0.0f);
  write_model(b, 8, 0.0f);
  const ModelFingerprint fa = fingerprint_model(a.path()), fb = fingerprint_model(b.path());
  EXPECT_EQ(fa.id, fb.id);
  EXPECT_EQ(fa.id.rfind("xxh3:", 0), 0u);
  EXPECT_EQ(fa.id.size(), 5u + 16u);
  ASSERT_EQ(fa.files.size(), 2u);
  EXPECT_EQ(fa.files[0].name, "config.json");
  EXPECT_TRUE(fa.files[0].header.empty());
  EXPECT_EQ(fa.files[1].name, "model.safetensors");
  EXPECT_FALSE(fa.files[1].header.empty());
  EXPECT_EQ(fa.files[1].bytes, fs::file_size(a.file("model.safetensors")));
  EXPECT_TRUE(changes(fa, fb).empty());
}

TEST(ModelFingerprint, OneChangedValueIsOtherValuesSameTensors) {
  TempDir a, b;
  write_model(a, 8, 0.0f);
  write_model(b, 8, 0.0f);
  // The last byte of the data section: far from the first and last MiB a sampled hash reads
  // only in a large file, but here the point is that any byte counts.
  {
    std::fstream f(b.file("model.safetensors"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  const ModelFingerprint fa = fingerprint_model(a.path()), fb = fingerprint_model(b.path());
  EXPECT_NE(fa.id, fb.id);
  EXPECT_EQ(fa.files[1].header, fb.files[1].header);
  EXPECT_NE(fa.files[1].content, fb.files[1].content);
  EXPECT_EQ(changes(fa, fb), std::vector<std::string>{"model.safetensors: values (same tensors)"});
}

TEST(ModelFingerprint, OtherShapeIsOtherTensorsAndConfigChangeIsNamed) {
  TempDir a, b;
  write_model(a, 8, 0.0f);
  write_model(b, 16, 0.0f);
  write_text(b.file("config.json"), R"({"hidden_size": 4, "num_hidden_layers": 2})");
  const ModelFingerprint fa = fingerprint_model(a.path()), fb = fingerprint_model(b.path());
  EXPECT_NE(fa.files[1].header, fb.files[1].header);
  EXPECT_EQ(changes(fa, fb),
            (std::vector<std::string>{"config.json: content", "model.safetensors: tensors"}));
}

TEST(ModelFingerprint, TokenizerFilesCountOtherFilesDoNot) {
  TempDir a;
  write_model(a, 8, 0.0f);
  const ModelFingerprint before = fingerprint_model(a.path());
  write_text(a.file("README.md"), "# a model card\n");
  write_text(a.file(".gitattributes"), "*.safetensors filter=lfs\n");
  write_text(a.file("training_args.bin"), "optimizer state");
  EXPECT_EQ(fingerprint_model(a.path()).id, before.id);
  write_text(a.file("tokenizer.json"), R"({"model": {"type": "BPE"}})");
  const ModelFingerprint after = fingerprint_model(a.path());
  EXPECT_NE(after.id, before.id);
  EXPECT_EQ(changes(before, after), std::vector<std::string>{"tokenizer.json: added"});
  EXPECT_EQ(changes(after, before), std::vector<std::string>{"tokenizer.json: removed"});
  EXPECT_TRUE(fingerprinted_file("tokenizer.model"));
  EXPECT_TRUE(fingerprinted_file("chat_template.jinja"));
  EXPECT_TRUE(fingerprinted_file("model-00001-of-00002.safetensors"));
  EXPECT_TRUE(fingerprinted_file("model.safetensors.index.json"));
  EXPECT_FALSE(fingerprinted_file("pytorch_model.bin.md"));
}

// A file of several 16 MiB pieces: the pieces' order counts (swapping two pieces changes the
// hash) and the hash does not depend on the number of threads.
TEST(ModelFingerprint, PiecesInOrderAndThreadCountIndependent) {
  TempDir a, b;
  const std::size_t piece = std::size_t{16} << 20;
  std::string data(3 * piece + 12345, '\0');
  for (std::size_t i = 0; i < data.size(); i += 4096) data[i] = static_cast<char>(i / piece + 1);
  write_text(a.file("config.json"), "{}");
  write_text(b.file("config.json"), "{}");
  write_text(a.file("big.safetensors"), data);
  std::string swapped = data;
  std::swap_ranges(swapped.begin(), swapped.begin() + piece, swapped.begin() + piece);
  write_text(b.file("big.safetensors"), swapped);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const ModelFingerprint one = fingerprint_model(a.path());
  omp_set_num_threads(3);
  const ModelFingerprint three = fingerprint_model(a.path());
  const ModelFingerprint other = fingerprint_model(b.path());
  omp_set_num_threads(threads);
  EXPECT_EQ(one.id, three.id);
  EXPECT_NE(one.files[0].content, other.files[0].content);
  EXPECT_GT(one.seconds, 0.0);
  // The JSON form carries every file with its sizes and hashes.
  const nlohmann::json j = one;
  EXPECT_EQ(j["fingerprint"], one.id);
  EXPECT_EQ(j["files"].size(), 2u);
  EXPECT_EQ(j["files"][0]["bytes"], data.size());
}

// Without the weights' contents (a job's start): safetensors files by size and header, every
// other file whole; changed values cannot be told (not a change), a changed shape or config can;
// a partial fingerprint against a whole one of the same files is not a change either.
TEST(ModelFingerprint, HeadersOnlyComparesWhatItHas) {
  TempDir a, b, c;
  write_model(a, 8, 0.0f);
  write_model(b, 8, 100.0f);  // other values, same tensors
  write_model(c, 16, 0.0f);   // another shape
  const ModelFingerprint pa = fingerprint_model(a.path(), false);
  const ModelFingerprint pb = fingerprint_model(b.path(), false);
  const ModelFingerprint pc = fingerprint_model(c.path(), false);
  const ModelFingerprint wa = fingerprint_model(a.path(), true);
  const ModelFingerprint wb = fingerprint_model(b.path(), true);
  EXPECT_FALSE(pa.complete);
  EXPECT_TRUE(wa.complete);
  EXPECT_EQ(pa.id.rfind("xxh3-headers:", 0), 0u) << pa.id;
  EXPECT_EQ(pa.id, pb.id);  // the headers cannot tell other values
  EXPECT_NE(pa.id, wa.id);
  ASSERT_EQ(pa.files.size(), 2u);
  EXPECT_FALSE(pa.files[0].content.empty());  // config.json whole
  EXPECT_TRUE(pa.files[1].content.empty());   // the weights: header only
  EXPECT_EQ(pa.files[1].header, wa.files[1].header);
  const nlohmann::json j = pa;
  EXPECT_FALSE(j["complete"].get<bool>());
  EXPECT_FALSE(j["files"][1].contains("content"));
  EXPECT_TRUE(changes(pa, pb).empty());
  EXPECT_TRUE(changes(pa, wa).empty());
  EXPECT_TRUE(changes(wa, pb).empty());
  EXPECT_EQ(changes(wa, wb), std::vector<std::string>{"model.safetensors: values (same tensors)"});
  EXPECT_EQ(changes(pa, pc), std::vector<std::string>{"model.safetensors: tensors"});
}

TEST(ModelFingerprint, MissingConfigNamesTheDirectory) {
  TempDir a;
  try {
    fingerprint_model(a.path());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(a.path()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace specrun
