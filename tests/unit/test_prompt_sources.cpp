// `prepare`'s input layouts (io/prompt_sources.h): text and chat lines through the code pair's
// sentencepiece tokenizer and a ChatML template file; the benchmark layouts; every error names
// what is wrong.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "io/prompt_sources.h"
#include "temp_dir.h"

using namespace specrun;
namespace fs = std::filesystem;

namespace {

const std::string kCodeTarget = SPECRUN_SOURCE_DIR "/../shared/models/code-target";

using test::TempDir;

std::vector<PreparedPrompt> convert_ok(const PromptConverter& c, const std::string& line) {
  std::vector<PreparedPrompt> out;
  const std::string what = c.convert(line, out);
  EXPECT_EQ(what, "") << line;
  return out;
}

std::string convert_error(const PromptConverter& c, const std::string& line) {
  std::vector<PreparedPrompt> out;
  return c.convert(line, out);
}

TEST(PromptSources, TokensNeedNoModel) {
  PromptConverter c{PrepareOptions{}};
  auto out = convert_ok(c, R"({"tokens": [1, 2, 3], "id": 7, "text": "as given"})");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(out[0].id, "7");
  EXPECT_EQ(out[0].text, "as given");
  EXPECT_NE(convert_error(c, R"({"text": "hi"})").find("pass --model DIR"), std::string::npos);
  EXPECT_NE(convert_error(c, R"({"messages": []})").find("pass --model DIR"), std::string::npos);
  EXPECT_NE(convert_error(c, R"({"id": 1})").find("missing \"tokens\""), std::string::npos);
  EXPECT_NE(convert_error(c, R"({"tokens": [1], "messages": []})").find("give one"),
            std::string::npos);
  EXPECT_TRUE(c.provenance()["tokenizer"].is_null());
}

TEST(PromptSources, TextIsEncodedWithBos) {
  PrepareOptions o;
  o.model_dir = kCodeTarget;
  PromptConverter c(o);
  auto out = convert_ok(c, R"({"text": "def foo(x):\n    return"})");
  ASSERT_EQ(out.size(), 1u);
  // python3-sentencepiece's ids, after BOS.
  EXPECT_EQ(out[0].tokens,
            (std::vector<int32_t>{1, 308, 286, 1967, 1967, 1981, 1988, 291, 13, 260, 320}));
  EXPECT_EQ(out[0].text, "def foo(x):\n    return");
  const nlohmann::json p = c.provenance();
  EXPECT_EQ(p["tokenizer"]["format"], "sentencepiece");
  EXPECT_EQ(p["tokenizer"]["fingerprint"].get<std::string>().size(), 16u);
  EXPECT_TRUE(p["chat_template"].is_null());  // the code pair has none
  // A chat needs a template the code pair does not have.
  EXPECT_NE(convert_error(c, R"({"messages": [{"role": "user", "content": "x"}]})")
                .find("has no chat template"),
            std::string::npos);
  EXPECT_NE(convert_error(c, R"({"text": ""})").find("empty"), std::string::npos);
}

TEST(PromptSources, MessagesRenderWithATemplateFile) {
  TempDir dir;
  const std::string tmpl = dir.file("chatml.jinja");
  std::ofstream(tmpl) << "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] "
                         "}}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>"
                         "assistant\n{% endif %}";
  PrepareOptions o;
  o.model_dir = kCodeTarget;
  o.template_file = tmpl;
  o.system_prompt = "Be brief.";
  PromptConverter c(o);
  auto out = convert_ok(c, R"({"messages": [{"role": "user", "content": "Hi"}], "id": "a"})");
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].text, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_NE(out[0].tokens.front(), 1);  // no BOS added to a rendered chat
  EXPECT_TRUE(c.provenance()["chat_template"]["used"].get<bool>());
  // ... which the converter counts (prepare warns): sentencepiece puts BOS (1) before plain text.
  EXPECT_EQ(c.plain_bos(), 1);
  EXPECT_EQ(c.templated_without_bos(), 1);
  const std::string with_bos = dir.file("bos.jinja");
  std::ofstream(with_bos) << "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}";
  o.template_file = with_bos;
  PromptConverter b(o);
  EXPECT_EQ(convert_ok(b, R"({"messages": [{"role": "user", "content": "Hi"}]})")[0].tokens.front(),
            1);
  EXPECT_EQ(b.templated_without_bos(), 0);
  o.template_file = tmpl;
  // Benchmark turns through the same template, after the system prompt.
  o.layout = PromptLayout::kMtBench;
  o.all_turns = true;
  PromptConverter turns(o);
  auto q = convert_ok(turns, R"({"question_id": 81, "category": "writing", "turns": ["A", "B"]})");
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0].id, "81/t1");
  EXPECT_EQ(q[1].id, "81/t2");
  EXPECT_EQ(q[1].category, "writing");
  EXPECT_EQ(q[1].text,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nB<|im_end|>\n"
            "<|im_start|>assistant\n");
  // --chat never: the turn as plain text, with BOS.
  o.chat = ChatUse::kNever;
  PromptConverter plain(o);
  auto t = convert_ok(plain, R"({"question_id": "x", "category": "c", "turns": ["A"]})");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].text, "A");
  EXPECT_EQ(t[0].tokens.front(), 1);
}

TEST(PromptSources, BenchmarkLayoutErrorsNameTheKey) {
  PrepareOptions o;
  o.model_dir = kCodeTarget;
  o.layout = PromptLayout::kSpeedBench;
  PromptConverter c(o);
  EXPECT_NE(convert_error(c, R"({"question_id": "a", "turns": ["x"]})")
                .find("missing \"category\", which every speed-bench question has"),
            std::string::npos);
  EXPECT_NE(convert_error(c, R"({"question_id": "a", "category": "c", "turns": []})")
                .find("\"turns\" must be a non-empty list"),
            std::string::npos);
  EXPECT_NE(convert_error(c, R"({"question_id": "a", "category": "c", "turns": [3]})")
                .find("\"turns\"[0] must be a string"),
            std::string::npos);
  EXPECT_NE(convert_error(c, R"({"question_id": [1], "category": "c", "turns": ["x"]})")
                .find("\"question_id\" must be a string or an integer"),
            std::string::npos);
  auto ok = convert_ok(c, R"({"question_id": "coding_1", "category": "coding", "sub_category":
                              "py", "turns": ["Write a sort."], "multiturn": false})");
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].id, "coding_1");
  EXPECT_EQ(ok[0].category, "coding");
  EXPECT_THROW(parse_prompt_layout("sharegpt"), Error);
  EXPECT_EQ(parse_prompt_layout("spec-bench"), PromptLayout::kSpecBench);
}

TEST(PromptSources, ModelWithoutATokenizerIsRefused) {
  TempDir dir;
  PrepareOptions o;
  o.model_dir = dir.file("");
  try {
    PromptConverter c(o);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no tokenizer"), std::string::npos) << e.what();
  }
}

}  // namespace

// A prompt file made with another tokenizer is refused before the first step (issue 48: caught
// only when an id exceeded the vocabulary), naming both files; the same tokenizer, token-id
// prompts and a folder without a tokenizer pass; tokenizer_config.json does not count.
TEST(PromptSources, PromptsOfAnotherTokenizerAreRefused) {
  PrepareOptions o;
  o.model_dir = kCodeTarget;
  PromptConverter c(o);
  nlohmann::json prepared = c.provenance();
  EXPECT_NO_THROW(check_prompt_tokenizer(prepared.dump(), "p.h5", kCodeTarget, "target.path"));
  EXPECT_NO_THROW(check_prompt_tokenizer("", "p.h5", kCodeTarget, "target.path"));
  EXPECT_NO_THROW(check_prompt_tokenizer(PromptConverter{PrepareOptions{}}.provenance().dump(),
                                         "p.h5", kCodeTarget, "target.path"));
  TempDir dir;
  EXPECT_NO_THROW(check_prompt_tokenizer(prepared.dump(), "p.h5", dir.path(), "target.path"));
  bool changed_model_file = false;
  for (nlohmann::json& f : prepared["tokenizer"]["files"]) {
    const std::string path = f["path"];
    if (path.ends_with("tokenizer_config.json")) {
      f["fnv1a64"] = "0000000000000000";  // another chat template: the same ids
    } else {
      f["fnv1a64"] = "1111111111111111";  // another tokenizer
      changed_model_file = true;
    }
  }
  ASSERT_TRUE(changed_model_file);
  try {
    check_prompt_tokenizer(prepared.dump(), "p.h5", kCodeTarget, "target.path");
    ADD_FAILURE() << "prompts of another tokenizer accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    const std::string m = e.message();
    for (const std::string& part :
         std::vector<std::string>{"p.h5 was prepared with another tokenizer than target.path's",
                                  "tokenizer.model 1111111111111111",
                                  "Run `specrun prepare` again with --model " + kCodeTarget})
      EXPECT_NE(m.find(part), std::string::npos) << part << "\n" << m;
  }
}
