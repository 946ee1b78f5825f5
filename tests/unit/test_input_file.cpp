// Small input files of a model folder (common/input_file.h): regular files only, and only up to a
// size limit of their kind, each refusal naming the file. Issue 40: a config.json that is a FIFO
// blocked for ever, a tokenizer.json linked to /dev/zero was read until memory ran out. The
// loaders run in a child process (child_run.h), so that without the checks the tests fail
// (timed out, or out of memory) instead of hanging or exhausting the machine.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "child_run.h"
#include "common/input_file.h"
#include "model/checkpoint.h"
#include "model/model_config.h"
#include "temp_dir.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace specrun {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

constexpr long long kChildMemory = 1LL << 30;
constexpr unsigned kChildSeconds = 20;

const char* kLlamaConfig =
    R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 256})";

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A file of `bytes` bytes that takes no disk space (all zeros).
void write_sparse(const std::string& path, std::uint64_t bytes) {
  write(path, "");
  fs::resize_file(path, bytes);
}

std::string error_in_child(const std::function<void()>& load) {
  const test::ChildRun run = test::run_in_child(
      [&] {
        load();
        return std::string("loaded");
      },
      kChildMemory, kChildSeconds);
  return run.outcome();
}

TEST(InputFile, ReadsARegularFileAndFollowsLinks) {
  test::TempDir tmp;
  write(tmp.file("a.json"), "{\"x\": 1}");
  EXPECT_EQ(read_input_file(tmp.file("a.json"), kModelConfigFile), "{\"x\": 1}");
  fs::create_symlink(tmp.file("a.json"), tmp.file("link.json"));  // as the Hugging Face cache
  EXPECT_EQ(read_input_file(tmp.file("link.json"), kModelConfigFile), "{\"x\": 1}");
  write(tmp.file("empty"), "");
  EXPECT_EQ(read_input_file(tmp.file("empty"), kModelConfigFile), "");
  EXPECT_TRUE(input_exists(tmp.file("link.json")));
  EXPECT_FALSE(input_exists(tmp.file("nothing")));
  fs::create_symlink(tmp.file("nothing"), tmp.file("dangling"));
  EXPECT_TRUE(input_exists(tmp.file("dangling")));  // read_input_file says what is wrong
}

TEST(InputFile, RefusalsNameTheFileWhatItIsAndTheLimit) {
  test::TempDir tmp;
  auto error = [](const std::string& path, const InputFileKind& kind) {
    try {
      read_input_file(path, kind);
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), kExitUsage);
      return e.message();
    }
    return std::string();
  };
  EXPECT_THAT(error(tmp.file("none.json"), kModelConfigFile),
              HasSubstr("cannot open model config " + tmp.file("none.json") +
                        ": No such file or directory"));
  ASSERT_EQ(::mkfifo(tmp.file("fifo").c_str(), 0600), 0);
  EXPECT_THAT(error(tmp.file("fifo"), kModelConfigFile),
              HasSubstr("model config " + tmp.file("fifo") + " is a FIFO, not a regular file"));
  EXPECT_THAT(error("/dev/zero", kTokenizerJsonFile),
              HasSubstr("tokenizer file /dev/zero is a character device, not a regular file"));
  EXPECT_THAT(error(tmp.path(), kChatTemplateFile),
              HasSubstr("chat template " + tmp.path() + " is a directory, not a regular file"));
  write_sparse(tmp.file("big.jinja"), kChatTemplateFile.max_bytes + 1);
  EXPECT_THAT(error(tmp.file("big.jinja"), kChatTemplateFile),
              HasSubstr("chat template " + tmp.file("big.jinja") +
                        " is 4194305 bytes, more than "
                        "the limit of 4 MiB for a chat template"));
  write_sparse(tmp.file("limit.jinja"), kChatTemplateFile.max_bytes);
  EXPECT_EQ(read_input_file(tmp.file("limit.jinja"), kChatTemplateFile).size(),
            kChatTemplateFile.max_bytes);
}

// Every file a model folder's loaders read whole, replaced by a FIFO, by a link to /dev/zero and
// by a file over its limit: each is refused naming the file.
class ModelFolderFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    write(tmp_.file("config.json"), kLlamaConfig);
    write(tmp_.file("tokenizer_config.json"), R"({"chat_template": "{{ messages }}"})");
  }
  // `name` becomes a FIFO, a link to /dev/zero, then a sparse file one byte over `limit`; `load`
  // must refuse each, naming the file.
  void expect_refused(const std::string& name, std::uint64_t limit,
                      const std::function<void()>& load) {
    const std::string path = tmp_.file(name);
    fs::remove(path);
    ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
    EXPECT_THAT(error_in_child(load), HasSubstr(path + " is a FIFO, not a regular file"));
    fs::remove(path);
    fs::create_symlink("/dev/zero", path);
    EXPECT_THAT(error_in_child(load), HasSubstr(path + " is a character device"));
    fs::remove(path);
    write_sparse(path, limit + 1);
    EXPECT_THAT(error_in_child(load), HasSubstr(path + " is " + std::to_string(limit + 1) +
                                                " bytes, more than the limit of " +
                                                std::to_string(limit >> 20) + " MiB"));
    fs::remove(path);
  }
  test::TempDir tmp_;
};

TEST_F(ModelFolderFiles, ConfigAndGenerationConfig) {
  const std::string config = tmp_.file("config.json");
  expect_refused("generation_config.json", kGenerationConfigFile.max_bytes,
                 [&] { ModelConfig::from_file(config); });
  expect_refused("config.json", kModelConfigFile.max_bytes,
                 [&] { ModelConfig::from_file(config); });
  expect_refused("config.json", kModelConfigFile.max_bytes, [&] { Checkpoint c(tmp_.path()); });
}

TEST_F(ModelFolderFiles, ChatTemplateFiles) {
  expect_refused("tokenizer_config.json", kTokenizerConfigFile.max_bytes,
                 [&] { load_chat_template(tmp_.path()); });
  expect_refused("chat_template.jinja", kChatTemplateFile.max_bytes,
                 [&] { load_chat_template(tmp_.path()); });
  expect_refused("mine.jinja", kChatTemplateFile.max_bytes,
                 [&] { load_chat_template(tmp_.path(), tmp_.file("mine.jinja")); });  // --template
  write(tmp_.file("tokenizer_config.json"), "{}");
  expect_refused("chat_template.json", kChatTemplateJsonFile.max_bytes,
                 [&] { load_chat_template(tmp_.path()); });
}

TEST_F(ModelFolderFiles, TokenizerFiles) {
  expect_refused("tokenizer.json", kTokenizerJsonFile.max_bytes,
                 [&] { load_tokenizer_for(tmp_.path()); });
  expect_refused("tokenizer.model", kTokenizerModelFile.max_bytes,
                 [&] { load_tokenizer_for(tmp_.path()); });
  // A sentencepiece model's tokenizer_config.json (add_bos_token): the file is read first.
  write(tmp_.file("tokenizer.model"), "");
  expect_refused("tokenizer_config.json", kTokenizerConfigFile.max_bytes,
                 [&] { load_tokenizer_for(tmp_.path()); });
}

}  // namespace
}  // namespace specrun
