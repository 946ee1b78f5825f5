// JobConfig: defaults, TOML reading, --set overrides, precedence, path resolution, dumps, hash,
// help, and every user-facing error message (each with exit code 2).
#include <gtest/gtest.h>

#include <toml++/toml.h>
#include <filesystem>
#include <fstream>
#include <functional>

#include "common/error.h"
#include "common/utf8.h"
#include "config/job_config.h"
#include "config/option_table.h"
#include "spec/drafter_registry.h"

namespace specrun {
namespace {

// The smallest valid job: the three required paths.
const char* kMinimal = R"([target]
path = "models/target"

[draft]
path = "models/draft"

[data]
prompts = "prompts.h5"
)";

// Parsed as `specrun run` parses a job: with the drafter registry's checks of draft.* keys.
JobConfig parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_job_config(text, "job.toml", overrides, "/jobs", validate_drafter_config);
}

// The message of the Error that `fn` throws; fails the test when it throws nothing or an error
// with an exit code other than 2.
std::string input_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "expected an input error";
  return "";
}

std::string parse_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return input_error([&] { parse(text, overrides); });
}

#define EXPECT_CONTAINS(haystack, needle)                          \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) \
      << "expected to find: " << (needle) << "\nin: " << (haystack)

TEST(JobConfig, DefaultsComeFromTheStructInitializers) {
  JobConfig c = parse(kMinimal);
  const JobConfig d;
  EXPECT_EQ(c.decode.shape.draft_len, d.decode.shape.draft_len);
  EXPECT_EQ(c.decode.shape.draft_len, 4);
  EXPECT_EQ(c.decode.modes, (std::vector<std::string>{"baseline", "speculative"}));
  EXPECT_EQ(c.decode.temperature, 0.0);
  EXPECT_EQ(c.decode.top_p, 1.0);
  EXPECT_EQ(c.decode.top_k, 0);
  EXPECT_TRUE(c.decode.stop_at_eos);
  EXPECT_EQ(c.parallel.tp, 1);
  EXPECT_EQ(c.parallel.backend, "cpu");
  EXPECT_TRUE(c.parallel.cuda_graphs);
  EXPECT_TRUE(c.parallel.cuda_pdl);
  EXPECT_FALSE(c.parallel.cuda_tensor_cores);  // until a GPU has measured it
  EXPECT_TRUE(c.parallel.cuda_fused_ops);
  EXPECT_EQ(c.target.dtype, "auto");
  EXPECT_EQ(c.draft.kind, "model");
  EXPECT_EQ(c.data.max_prompts, 0);
  EXPECT_EQ(c.debug.inject_delay_ms, 0.0);
  EXPECT_EQ(c.debug.inject_phase, "none");
  EXPECT_FALSE(c.job.overwrite);
  EXPECT_EQ(c.job_text, kMinimal);
  EXPECT_EQ(c.job_path, "job.toml");
}

TEST(JobConfig, ReadsEveryTypeFromTheFile) {
  JobConfig c = parse(std::string(kMinimal) + R"(
[job]
name = "sweep-k8"
seed = 77
overwrite = true
[parallel]
tp = 4
backend = "cuda"
comm_timeout_s = 30   # an integer is accepted for a float option
cuda_pdl = false
cuda_tensor_cores = true
cuda_fused_ops = false
[decode]
modes = ["speculative"]
draft_len = 8
temperature = 0.7
top_p = 0.9
stop_at_eos = false
)");
  EXPECT_EQ(c.job.name, "sweep-k8");
  EXPECT_EQ(c.job.seed, 77);
  EXPECT_TRUE(c.job.overwrite);
  EXPECT_EQ(c.parallel.tp, 4);
  EXPECT_EQ(c.parallel.backend, "cuda");
  EXPECT_EQ(c.parallel.comm_timeout_s, 30.0);
  EXPECT_FALSE(c.parallel.cuda_pdl);
  EXPECT_TRUE(c.parallel.cuda_tensor_cores);
  EXPECT_FALSE(c.parallel.cuda_fused_ops);
  EXPECT_EQ(c.decode.modes, std::vector<std::string>{"speculative"});
  EXPECT_EQ(c.decode.shape.draft_len, 8);
  EXPECT_DOUBLE_EQ(c.decode.temperature, 0.7);
  EXPECT_DOUBLE_EQ(c.decode.top_p, 0.9);
  EXPECT_FALSE(c.decode.stop_at_eos);
  EXPECT_TRUE(c.uses_mode("speculative"));
  EXPECT_FALSE(c.uses_mode("baseline"));
}

TEST(JobConfig, RelativePathsAreResolvedAgainstTheJobFileDirectory) {
  JobConfig c = parse(R"([target]
path = "../models/target"
[draft]
path = "/abs/draft"
[data]
prompts = "./data/p.h5"
)");
  EXPECT_EQ(c.target.path.text, "../models/target");
  EXPECT_EQ(c.target.path.resolved, "/models/target");
  EXPECT_EQ(c.draft.path.resolved, "/abs/draft");
  EXPECT_EQ(c.data.prompts.text, "./data/p.h5");
  EXPECT_EQ(c.data.prompts.resolved, "/jobs/data/p.h5");
  // The default output is not in the file: it is relative to the current directory.
  EXPECT_EQ(c.job.output.resolved, (std::filesystem::current_path() / "result.h5").string());
}

TEST(JobConfig, SetOverridesTheFileWhichOverridesDefaults) {
  const std::string text = std::string(kMinimal) + "[decode]\ndraft_len = 3\ntop_k = 5\n";
  JobConfig file_only = parse(text);
  EXPECT_EQ(file_only.decode.shape.draft_len, 3);
  EXPECT_EQ(file_only.decode.top_k, 5);
  JobConfig c =
      parse(text, {"decode.draft_len=8", "decode.temperature = 0.5", "decode.stop_at_eos=false",
                   "job.name=\"quoted name\"", "decode.draft_len=9"});
  EXPECT_EQ(c.decode.shape.draft_len, 9);  // the last --set wins
  EXPECT_EQ(c.decode.top_k, 5);            // untouched by --set: the file's value
  EXPECT_DOUBLE_EQ(c.decode.temperature, 0.5);
  EXPECT_FALSE(c.decode.stop_at_eos);
  EXPECT_EQ(c.job.name, "quoted name");
  EXPECT_EQ(c.overrides.size(), 5u);
}

TEST(JobConfig, SetAcceptsListsAsTomlArraysOrCommaSeparated) {
  EXPECT_EQ(parse(kMinimal, {"decode.modes=baseline"}).decode.modes,
            std::vector<std::string>{"baseline"});
  EXPECT_EQ(parse(kMinimal, {"decode.modes=speculative, baseline"}).decode.modes,
            (std::vector<std::string>{"speculative", "baseline"}));
  EXPECT_EQ(parse(kMinimal, {R"(decode.modes=["speculative", "baseline"])"}).decode.modes,
            (std::vector<std::string>{"speculative", "baseline"}));
}

TEST(JobConfig, SetPathsAreRelativeToTheCurrentDirectory) {
  JobConfig c = parse(kMinimal, {"target.path=other/target"});
  EXPECT_EQ(c.target.path.text, "other/target");
  EXPECT_EQ(c.target.path.resolved, (std::filesystem::current_path() / "other/target").string());
}

TEST(JobConfig, MalformedTomlNamesFileLineAndColumn) {
  std::string msg = parse_error("[decode]\ndraft_len = 4\ntop_k = = 3\n");
  EXPECT_CONTAINS(msg, "job.toml:3:9: malformed TOML");
}

TEST(JobConfig, UnknownKeyNamesItsLocationAndTheClosestKey) {
  std::string msg =
      parse_error(std::string(kMinimal) + "[decode]\ntemperature = 0.5\ndraft_lenn = 4\n");
  EXPECT_CONTAINS(msg, "job.toml:11:1: unknown key 'decode.draft_lenn'");
  EXPECT_CONTAINS(msg, "did you mean 'decode.draft_len'");
  EXPECT_CONTAINS(msg, "keys of [decode]: modes, max_new_tokens, draft_len");
}

TEST(JobConfig, KeyOutsideAnySectionSuggestsItsSection) {
  std::string msg = parse_error("seed = 3\n" + std::string(kMinimal));
  EXPECT_CONTAINS(msg, "job.toml:1:1: unknown key 'seed' outside any section");
  EXPECT_CONTAINS(msg, "did you mean 'job.seed'");
}

TEST(JobConfig, UnknownSectionSuggestsTheClosestSection) {
  std::string msg = parse_error(std::string(kMinimal) + "\n[decod]\ndraft_len = 4\n");
  EXPECT_CONTAINS(msg, "job.toml:10:2: unknown section [decod]; did you mean [decode]?");
}

TEST(JobConfig, WrongTypeNamesKeyExpectedTypeAndLine) {
  std::string msg = parse_error(std::string(kMinimal) + "[decode]\ndraft_len = \"four\"\n");
  EXPECT_CONTAINS(
      msg, "job.toml:10:13: wrong type for decode.draft_len: expected integer, got a string");
  msg = parse_error(std::string(kMinimal) + "[decode]\ndraft_len = 4.0\n");
  EXPECT_CONTAINS(msg, "wrong type for decode.draft_len: expected integer, got a float");
  msg = parse_error(std::string(kMinimal) + "[decode]\nmodes = \"baseline\"\n");
  EXPECT_CONTAINS(msg, "job.toml:10:9: wrong type for decode.modes: expected list of strings");
  msg = parse_error(std::string(kMinimal) + "[decode]\nmodes = [\"baseline\", 3]\n");
  EXPECT_CONTAINS(msg, "element 2 is an integer");
  msg = parse_error(std::string(kMinimal) + "[job]\noverwrite = \"yes\"\n");
  EXPECT_CONTAINS(msg, "wrong type for job.overwrite: expected boolean");
  msg = parse_error("decode = 3\n" + std::string(kMinimal));
  EXPECT_CONTAINS(msg, "job.toml:1:1: 'decode' must be a table");
}

// decode.stop_tokens mixes token ids and token strings, in the file and on the command line;
// other lists keep refusing integers.
TEST(JobConfig, StopTokensTakeIdsAndStrings) {
  JobConfig c = parse(std::string(kMinimal) + "[decode]\nstop_tokens = [128009, \"<|im_end|>\"]\n");
  EXPECT_EQ(c.decode.stop_tokens, (std::vector<std::string>{"128009", "<|im_end|>"}));
  c = parse(kMinimal, {"decode.stop_tokens=[7, \"</s>\"]"});
  EXPECT_EQ(c.decode.stop_tokens, (std::vector<std::string>{"7", "</s>"}));
  c = parse(kMinimal, {"decode.stop_tokens=7,8"});
  EXPECT_EQ(c.decode.stop_tokens, (std::vector<std::string>{"7", "8"}));
  EXPECT_TRUE(parse(kMinimal).decode.stop_tokens.empty());
  EXPECT_CONTAINS(parse_error(std::string(kMinimal) + "[decode]\nstop_tokens = [1.5]\n"),
                  "element 1 is a float");
}

TEST(JobConfig, OutOfRangeNamesKeyValueOriginAndAllowedRange) {
  std::string msg = parse_error(std::string(kMinimal) + "[decode]\ndraft_len = 40\n");
  EXPECT_CONTAINS(msg,
                  "decode.draft_len = 40 is out of range (set at job.toml:10:13): allowed 1..16");
  msg = parse_error(std::string(kMinimal) + "[decode]\ntop_p = 0.0\n");
  EXPECT_CONTAINS(msg, "decode.top_p = 0 is out of range (set at job.toml:10:9): allowed (0, 1]");
  msg = parse_error(std::string(kMinimal) + "[decode]\ntemperature = -0.5\n");
  EXPECT_CONTAINS(msg, "decode.temperature = -0.5 is out of range");
  EXPECT_CONTAINS(msg, "allowed [0, 100]");
  msg = parse_error(kMinimal, {"data.batch_size=0"});
  EXPECT_CONTAINS(msg, "data.batch_size = 0 is out of range");
  msg = parse_error(std::string(kMinimal) + "[parallel]\ntp = 5000000000\n");  // beyond int
  EXPECT_CONTAINS(
      msg, "parallel.tp = 5000000000 is out of range (set at job.toml:10:6): allowed 1..1024");
  msg = parse_error(kMinimal, {"decode.draft_len=0"});
  EXPECT_CONTAINS(
      msg, "decode.draft_len = 0 is out of range (set by --set decode.draft_len=0): allowed 1..16");
  msg = parse_error(kMinimal, {"decode.temperature=nan"});
  EXPECT_CONTAINS(msg, "decode.temperature = nan is out of range");
}

TEST(JobConfig, ValueNotAmongTheChoicesListsThem) {
  std::string msg = parse_error(std::string(kMinimal) + "[parallel]\nbackend = \"cudaa\"\n");
  EXPECT_CONTAINS(msg,
                  "parallel.backend = \"cudaa\" is not allowed (set at job.toml:10:11): choose one "
                  "of cpu, cuda; did you mean \"cuda\"?");
  msg = parse_error(kMinimal, {"decode.modes=baseline,speculativ"});
  EXPECT_CONTAINS(msg, "decode.modes = \"speculativ\" is not allowed");
  msg = parse_error(kMinimal, {"decode.modes=baseline,baseline"});
  EXPECT_CONTAINS(msg, "decode.modes lists \"baseline\" twice");
}

TEST(JobConfig, UnknownSetKeySuggestsTheClosestKey) {
  std::string msg = parse_error(kMinimal, {"decode.draftlen=4"});
  EXPECT_CONTAINS(msg, "unknown --set key 'decode.draftlen'; did you mean 'decode.draft_len'?");
  msg = parse_error(kMinimal, {"temperature=0.5"});
  EXPECT_CONTAINS(msg, "did you mean 'decode.temperature'?");
}

TEST(JobConfig, MalformedSetIsAnError) {
  std::string msg = parse_error(kMinimal, {"decode.draft_len"});
  EXPECT_CONTAINS(msg, "malformed --set 'decode.draft_len': expected section.key=value");
  msg = parse_error(kMinimal, {"=4"});
  EXPECT_CONTAINS(msg, "malformed --set '=4'");
  msg = parse_error(kMinimal, {"decode.draft_len=four"});
  EXPECT_CONTAINS(
      msg,
      "--set decode.draft_len=four: wrong type for decode.draft_len: expected integer, got 'four'");
  msg = parse_error(kMinimal, {"decode.stop_at_eos=yes"});
  EXPECT_CONTAINS(msg, "expected boolean, got 'yes'");
  msg = parse_error(kMinimal, {"decode.modes=[\"baseline\""});
  EXPECT_CONTAINS(msg, "not a valid TOML array");
}

TEST(JobConfig, RequiredPathsAndRulesBetweenOptions) {
  std::string msg = parse_error("[data]\nprompts = \"p.h5\"\n[draft]\nkind = \"none\"\n",
                                {"decode.modes=baseline"});
  EXPECT_CONTAINS(msg, "target.path is not set (default)");
  EXPECT_CONTAINS(msg, "--set target.path=VALUE");
  msg = parse_error("[target]\npath = \"t\"\n[data]\nprompts = \"p.h5\"\n");
  EXPECT_CONTAINS(msg, "draft.path is not set but decode.modes includes \"speculative\"");
  msg = parse_error(kMinimal, {"draft.kind=none"});
  EXPECT_CONTAINS(msg, "but draft.kind = \"none\" (set by --set draft.kind=none)");
  // Baseline only needs no draft at all.
  EXPECT_NO_THROW(parse("[target]\npath = \"t\"\n[data]\nprompts = \"p.h5\"\n",
                        {"decode.modes=baseline", "draft.kind=none"}));
  msg = parse_error(kMinimal, {"decode.modes=[]"});
  EXPECT_CONTAINS(msg, "decode.modes is not set");
  msg = parse_error(kMinimal, {"debug.inject_delay_ms=5"});
  EXPECT_CONTAINS(msg,
                  "debug.inject_delay_ms = 5 (set by --set debug.inject_delay_ms=5) has no effect");
  JobConfig c = parse(kMinimal, {"debug.inject_delay_ms=2.5", "debug.inject_phase=verify"});
  EXPECT_EQ(c.debug.inject_delay_ms, 2.5);
  EXPECT_EQ(c.debug.inject_phase, "verify");
}

TEST(JobConfig, ValidateCatchesChangesMadeInCode) {
  JobConfig c = parse(kMinimal);
  EXPECT_NO_THROW(validate_job_config(c));
  c.decode.shape.draft_len = 17;
  std::string msg = input_error([&] { validate_job_config(c); });
  EXPECT_CONTAINS(msg, "decode.draft_len = 17 is out of range (default): allowed 1..16");
}

TEST(JobConfig, MissingJobFileNamesThePath) {
  std::string msg = input_error([] { load_job_config("/nonexistent/job.toml"); });
  EXPECT_CONTAINS(msg, "cannot read job file '/nonexistent/job.toml': no such file");
}

TEST(JobConfig, CanonicalTomlParsesBackToTheSameConfig) {
  JobConfig c = parse(kMinimal, {"decode.temperature=0.3", "job.name=a \"quoted\"\\name",
                                 "parallel.comm_timeout_s=600"});
  std::string dumped = to_toml(c);
  EXPECT_CONTAINS(dumped, "[decode]\nmodes = [\"baseline\", \"speculative\"]\n");
  EXPECT_CONTAINS(dumped, "comm_timeout_s = 600.0\n");  // stays a float
  EXPECT_CONTAINS(dumped, "path = \"/jobs/models/target\"\n");
  JobConfig back = parse_job_config(dumped, "dump.toml", {}, "/elsewhere");
  EXPECT_EQ(to_json(back), to_json(c));
  EXPECT_EQ(config_hash(back), config_hash(c));
  EXPECT_EQ(back.job.name, "a \"quoted\"\\name");
}

TEST(JobConfig, JsonHoldsEveryOptionWithResolvedPaths) {
  JobConfig c = parse(kMinimal);
  nlohmann::json j = to_json(c);
  EXPECT_EQ(j["decode"]["draft_len"], 4);
  EXPECT_EQ(j["target"]["path"], "/jobs/models/target");
  EXPECT_EQ(j["decode"]["modes"], nlohmann::json({"baseline", "speculative"}));
  std::size_t options = 0;
  for_each_option(c, [&](const OptionSpec& spec, const auto&) {
    ++options;
    EXPECT_TRUE(j[spec.section].contains(spec.key)) << spec.name();
  });
  std::size_t in_json = 0;
  for (auto& [section, keys] : j.items()) in_json += keys.size();
  EXPECT_EQ(in_json, options);
}

TEST(JobConfig, HashIgnoresFormattingButSeesEveryOption) {
  const JobConfig a = parse(kMinimal);
  const JobConfig b = parse(
      "# a comment\n[data]\nprompts='prompts.h5'\n[draft]\npath = "
      "\"models/draft\"\n[target]\npath = \"models/../models/target\"\n");
  EXPECT_NE(a.job_text, b.job_text);
  EXPECT_EQ(config_hash(a), config_hash(b));
  EXPECT_EQ(config_hash_hex(a).size(), 18u);
  // Changing any one option, whatever its type, changes the hash.
  std::size_t index = 0;
  for_each_option(a, [&](const OptionSpec& spec, const auto&) {
    JobConfig changed = a;
    std::size_t i = 0;
    for_each_option(changed, [&](const OptionSpec&, auto& member) {
      if (i++ != index) return;
      using T = std::decay_t<decltype(member)>;
      if constexpr (std::is_same_v<T, bool>) {
        member = !member;
      } else if constexpr (std::is_arithmetic_v<T>) {
        member = member + 1;
      } else if constexpr (std::is_same_v<T, ConfigPath>) {
        member.resolved += "x";
      } else if constexpr (std::is_same_v<T, std::string>) {
        member += "x";
      } else {
        member.push_back("x");
      }
    });
    EXPECT_NE(config_hash(changed), config_hash(a)) << spec.name();
    ++index;
  });
}

TEST(JobConfig, HelpListsEveryKeyWithTypeDefaultAndHelp) {
  const std::string help = config_help();
  const JobConfig defaults;
  for_each_option(defaults, [&](const OptionSpec& spec, const auto& member) {
    EXPECT_CONTAINS(help, "  " + spec.name() + "  (" + option_type_name(member));
    EXPECT_CONTAINS(help, spec.help);
  });
  EXPECT_CONTAINS(help, "decode.draft_len  (integer in 1..16; default 4)");
  EXPECT_CONTAINS(help, "decode.top_p  (float in (0, 1]; default 1.0)");
  EXPECT_CONTAINS(help, "parallel.backend  (string in cpu, cuda; default \"cpu\")");
  EXPECT_CONTAINS(help, "target.path  (path, required; default (none))");
  EXPECT_CONTAINS(help,
                  "decode.modes  (list of strings in baseline, speculative, dataset, required; "
                  "default [\"baseline\", \"speculative\"])");
  EXPECT_CONTAINS(help, "TEST ONLY");
}

// Both example jobs parse and document every option.
void check_example_job(const std::string& file, const std::string& name,
                       const std::string& target_text) {
  const std::string path = std::string(SPECRUN_SOURCE_DIR) + "/jobs/" + file;
  JobConfig c = load_job_config(path, {"decode.draft_len=6"});
  const std::filesystem::path jobs = std::filesystem::path(SPECRUN_SOURCE_DIR) / "jobs";
  EXPECT_EQ(c.job.name, name);
  EXPECT_EQ(c.decode.shape.draft_len, 6);
  EXPECT_EQ(c.decode.modes, (std::vector<std::string>{"baseline", "speculative"}));
  EXPECT_EQ(c.target.path.text, target_text);
  EXPECT_EQ(c.target.path.resolved, (jobs / target_text).lexically_normal().string());
  EXPECT_FALSE(c.job_text.empty());
  // Every option appears in the demo file, so that it documents all of them.
  toml::table doc = toml::parse_file(path);
  for_each_option(c, [&](const OptionSpec& spec, const auto&) {
    EXPECT_TRUE(doc[spec.section][spec.key]) << spec.name() << " missing from jobs/" << file;
  });
}

TEST(JobConfig, DemoJobParses) {
  check_example_job("demo.toml", "demo", "../demo-out/models/target");
}

TEST(JobConfig, CodePairJobParses) {
  check_example_job("code-pair.toml", "code-pair", "../../shared/models/code-target");
}

}  // namespace
// Invalid UTF-8 in a --set value or in the job file is an input error naming the key or the line.
// Guards against an uncaught exception in config_hash and toml++ reaching undefined behaviour on
// some bytes (issue 18).
TEST(JobConfig, InvalidUtf8IsRefusedNamingWhere) {
  EXPECT_CONTAINS(parse_error(kMinimal, {"job.name=ab\xff"}),
                  "--set job.name=...: the value is not valid UTF-8 (at byte 2 of the value)");
  EXPECT_CONTAINS(parse_error(std::string(kMinimal) + "\n# \xc3\x28\n"), "job.toml:");
  EXPECT_CONTAINS(parse_error("\xca"), "job.toml:1:1: not valid UTF-8 (byte 0xca)");
  EXPECT_NO_THROW(parse(std::string(kMinimal) + "\n# caf\xc3\xa9 \xe2\x82\xac\n"));
  EXPECT_EQ(invalid_utf8_at("caf\xc3\xa9 \xf0\x9f\x98\x80"), std::string_view::npos);
  EXPECT_EQ(invalid_utf8_at("\xc0\xaf"), 0u);            // overlong
  EXPECT_EQ(invalid_utf8_at("a\xed\xa0\x80"), 1u);       // surrogate
  EXPECT_EQ(invalid_utf8_at("ab\xf4\x90\x80\x80"), 2u);  // above U+10FFFF
  EXPECT_EQ(invalid_utf8_at("x\xe2\x82"), 1u);           // truncated
}

}  // namespace specrun
