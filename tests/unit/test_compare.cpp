// `specrun compare` logic (analysis/compare.h) on synthetic runs: a 20% slowdown of the verify
// phase is flagged and named, an unchanged run (fresh noise, same distribution) is not, a
// throughput drop is flagged, small absolute jitter is not; and the provenance diff names the
// commit, the environment variable with its ranks, and the configuration key that changed, while
// ignoring variables that change on every launch.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "analysis/compare.h"
#include "common/error.h"
#include "compare_fixtures.h"
#include "io/comm_config.h"

using namespace specrun;
using namespace specrun::compare_test;

namespace {

TEST(Compare, TwentyPercentSlowerVerifyIsFlaggedAndNamed) {
  Synthetic base_params, slow_params;
  slow_params.verify_ms = base_params.verify_ms * 1.2;
  std::vector<ModeData> base = {make_mode(kModeBaseline, base_params, 1),
                                make_mode(kModeSpeculative, base_params, 2)};
  std::vector<ModeData> slow = {make_mode(kModeBaseline, base_params, 3),
                                make_mode(kModeSpeculative, slow_params, 4)};
  Comparison c = compare_modes(base, slow, CompareOptions{});
  EXPECT_TRUE(c.regression);
  const TimingChange* verify = find(c, kModeSpeculative, "verify");
  ASSERT_NE(verify, nullptr);
  EXPECT_TRUE(verify->regression);
  EXPECT_NEAR(verify->relative.value, 0.2, 0.03);
  EXPECT_GT(verify->relative.low, 0.05);
  EXPECT_LT(verify->relative.low, 0.2);
  EXPECT_GT(verify->relative.high, 0.2);
  EXPECT_EQ(verify->base_n, 400);
  // The total grows by 2 ms of ~15.3 (~13%): also flagged. Nothing else is.
  EXPECT_TRUE(find(c, kModeSpeculative, "total")->regression);
  for (const TimingChange& t : c.timings) {
    if (t.mode == kModeSpeculative && (t.name == "verify" || t.name == "total")) continue;
    EXPECT_FALSE(t.regression) << t.mode << " " << t.name << " " << t.relative.value;
  }
  // Baseline has no draft phase: zero in both runs, not listed.
  EXPECT_EQ(find(c, kModeBaseline, "draft"), nullptr);

  std::string text = format_comparison(c, "a.h5", "b.h5");
  EXPECT_NE(text.find("confidence):\n  speculative verify +"), std::string::npos) << text;
  nlohmann::json j = comparison_to_json(c);
  EXPECT_TRUE(j["regression"].get<bool>());
}

TEST(Compare, UnchangedRunIsNotFlagged) {
  Synthetic p;
  std::vector<ModeData> a = {make_mode(kModeBaseline, p, 11), make_mode(kModeSpeculative, p, 12)};
  std::vector<ModeData> b = {make_mode(kModeBaseline, p, 13), make_mode(kModeSpeculative, p, 14)};
  Comparison c = compare_modes(a, b, CompareOptions{});
  EXPECT_FALSE(c.regression);
  int contain_zero = 0;
  for (const TimingChange& t : c.timings) {
    EXPECT_FALSE(t.regression) << t.mode << " " << t.name;
    EXPECT_LT(std::abs(t.relative.value), 0.05) << t.mode << " " << t.name;
    contain_zero += t.relative.low <= 0.0 && 0.0 <= t.relative.high;
  }
  // The true change is 0: 95% intervals contain it, all but an occasional one of the 13.
  EXPECT_EQ(c.timings.size(), 13u);  // 5 + 6 phases, tokens/s of each mode
  EXPECT_GE(contain_zero, 11);
  EXPECT_NE(format_comparison(c, "a", "b").find("no regression beyond 5%"), std::string::npos);
  ASSERT_EQ(c.acceptance.size(), 1u);
  EXPECT_DOUBLE_EQ(c.acceptance[0].base_tau, 3.0);  // (31 - 1) / 10
  EXPECT_DOUBLE_EQ(c.acceptance[0].next_alpha, 0.5);
}

TEST(Compare, ThroughputDropIsFlaggedAndThresholdMatters) {
  Synthetic p, slow;
  slow.seq_wall_s = p.seq_wall_s * 1.3;  // tokens/s falls to 1/1.3: -23%
  std::vector<ModeData> a = {make_mode(kModeBaseline, p, 21)};
  std::vector<ModeData> b = {make_mode(kModeBaseline, slow, 22)};
  Comparison c = compare_modes(a, b, CompareOptions{});
  const TimingChange* tps = find(c, kModeBaseline, "tokens/s");
  ASSERT_NE(tps, nullptr);
  EXPECT_FALSE(tps->higher_is_worse);
  EXPECT_NEAR(tps->relative.value, 1 / 1.3 - 1, 0.03);
  EXPECT_TRUE(tps->regression);
  EXPECT_TRUE(c.regression);
  // With a 40% threshold the same drop is not a regression.
  CompareOptions loose;
  loose.threshold_pct = 40;
  EXPECT_FALSE(compare_modes(a, b, loose).regression);
  // The reverse direction is an improvement, not a regression.
  Comparison rev = compare_modes(b, a, CompareOptions{});
  EXPECT_FALSE(rev.regression);
  EXPECT_TRUE(find(rev, kModeBaseline, "tokens/s")->improvement);
}

TEST(Compare, TinyPhasesNeedAnAbsoluteChange) {
  // `other` is 0.1 ms of an ~11 ms step. Doubling it is +100% but moves the step by 1%: waits and
  // bookkeeping (comm, other) must also move the step by the threshold. +0.8 ms (7% of the step)
  // is flagged with the default 0.05 ms minimum, not with min_abs_ms = 1.
  Synthetic p;
  std::vector<ModeData> a = {make_mode(kModeBaseline, p, 31)};
  std::vector<ModeData> doubled = {make_mode(kModeBaseline, p, 32)};
  std::vector<ModeData> grown = doubled;
  for (std::size_t i = 4; i < doubled[0].timings_ms.size(); i += kNumPhases) {
    doubled[0].timings_ms[i] *= 2;
    grown[0].timings_ms[i] += 0.8f;
  }
  const TimingChange* other =
      find(compare_modes(a, doubled, CompareOptions{}), kModeBaseline, "other");
  EXPECT_GT(other->relative.low, 0.5);
  EXPECT_FALSE(other->regression);
  EXPECT_TRUE(find(compare_modes(a, grown, CompareOptions{}), kModeBaseline, "other")->regression);
  CompareOptions strict;
  strict.min_abs_ms = 1.0;
  EXPECT_FALSE(find(compare_modes(a, grown, strict), kModeBaseline, "other")->regression);
}

TEST(Compare, ModeInOneRunOnlyIsANote) {
  Synthetic p;
  Comparison c = compare_modes({make_mode(kModeBaseline, p, 1)},
                               {make_mode(kModeBaseline, p, 2), make_mode(kModeSpeculative, p, 3)},
                               CompareOptions{});
  ASSERT_EQ(c.notes.size(), 1u);
  EXPECT_NE(c.notes[0].find("speculative is only in NEW"), std::string::npos);
}

std::string record(int rank, const std::string& hdf5,
                   const std::map<std::string, std::string>& env) {
  nlohmann::json j{{"specrun_version", "0.1.0"}, {"git_commit", "aaa"},
                   {"hdf5_version", hdf5},       {"hostname", "node" + std::to_string(rank / 2)},
                   {"pid", 1000 + rank},         {"world_rank", rank},
                   {"environment", env}};
  return j.dump();
}

ResultInfo make_info(const std::string& commit, bool nccl_on_low_ranks, bool dirty,
                     const std::string& draft_len, const std::string& hdf5_rank3) {
  ResultInfo info;
  info.header.git_commit = commit;
  info.header.git_dirty = dirty;
  info.header.world_size = 4;
  info.header.tp = 2;
  info.header.dp = 2;
  info.header.resolved_json = R"({"decode": {"draft_len": )" + draft_len +
                              R"(, "temperature": 0.0}, "job": {"seed": 1, "output": ")" + commit +
                              R"(.h5"}})";
  for (int r = 0; r < 4; ++r) {
    std::map<std::string, std::string> env{
        {"OMPI_COMM_WORLD_RANK", std::to_string(r)},                   // per process
        {"OMPI_MCA_ess_base_jobid", commit == "aaa" ? "111" : "222"},  // per launch
        {"OMP_NUM_THREADS", "1"}};
    if (nccl_on_low_ranks && r < 2) env["NCCL_PROTO"] = "LL";
    info.header.provenance.push_back(record(r, r == 3 ? hdf5_rank3 : "1.10.8", env));
  }
  return info;
}

TEST(Compare, ProvenanceDiffNamesCommitEnvironmentRanksAndConfig) {
  ResultInfo base = make_info("aaa", false, false, "4", "1.10.8");
  ResultInfo next = make_info("bbb", true, true, "8", "1.14.0");
  ProvenanceDiff d = diff_provenance(base, next, "base.h5", "new.h5");

  auto has = [](const std::vector<ProvenanceChange>& list, const std::string& name) {
    for (const ProvenanceChange& c : list)
      if (c.name == name) return &c;
    return static_cast<const ProvenanceChange*>(nullptr);
  };
  ASSERT_NE(has(d.run, "git_commit"), nullptr);
  EXPECT_EQ(has(d.run, "git_commit")->base, "aaa");
  EXPECT_EQ(has(d.run, "git_commit")->next, "bbb");
  ASSERT_NE(has(d.run, "git_dirty"), nullptr);
  EXPECT_EQ(has(d.run, "git_dirty")->next, "true");
  EXPECT_EQ(has(d.run, "world_size"), nullptr);

  // The environment: NCCL_PROTO added on ranks 0 and 1, nothing else (the per-process rank and
  // the per-launch job id differ but are not reported).
  ASSERT_EQ(d.environment.size(), 1u);
  EXPECT_EQ(d.environment[0].name, "NCCL_PROTO");
  EXPECT_EQ(d.environment[0].kind, ProvenanceChange::Kind::kAdded);
  EXPECT_EQ(d.environment[0].next, "LL");
  EXPECT_EQ(d.environment[0].ranks, (std::vector<int>{0, 1}));

  // Library versions per rank: only rank 3's HDF5 changed.
  ASSERT_EQ(d.libraries.size(), 1u);
  EXPECT_EQ(d.libraries[0].name, "hdf5_version");
  EXPECT_EQ(d.libraries[0].ranks, (std::vector<int>{3}));

  ASSERT_EQ(d.config.size(), 1u);
  EXPECT_EQ(d.config[0].name, "decode.draft_len");
  EXPECT_EQ(d.config[0].base, "4");
  EXPECT_EQ(d.config[0].next, "8");

  Comparison c;
  c.provenance = d;
  std::string text = format_comparison(c, "base.h5", "new.h5");
  EXPECT_NE(text.find("NCCL_PROTO: added \"LL\" on ranks 0-1"), std::string::npos) << text;
  EXPECT_NE(text.find("decode.draft_len: \"4\" -> \"8\""), std::string::npos) << text;

  // Identical provenance: nothing to report.
  EXPECT_TRUE(diff_provenance(base, base, "a", "a").empty());
}

// Models: a whole-file fingerprint that changed is named with the files that differ; one of an
// older scheme (first/last MiB, fnv1a64) against a whole-file one is not comparable and not a
// change; an unchanged model is not reported.
TEST(Compare, ModelFingerprintsNameTheFilesAndSkipOtherSchemes) {
  auto models = [](const std::string& fp, const std::string& weights_header,
                   const std::string& weights_content) {
    nlohmann::json files = nlohmann::json::array();
    files.push_back({{"name", "config.json"}, {"bytes", 10}, {"content", "xxh3:1"}});
    files.push_back({{"name", "model.safetensors"},
                     {"bytes", 100},
                     {"content", weights_content},
                     {"header", weights_header}});
    nlohmann::json m;
    m["target"] = {{"path", "/m/target"}, {"fingerprint", "xxh3:0000000000000001"}};
    m["draft"] = {{"path", "/m/draft"}, {"fingerprint", fp}, {"files", files}};
    return m.dump();
  };
  ResultInfo base = make_info("aaa", false, false, "4", "1.10.8");
  ResultInfo next = base;
  base.header.models = models("xxh3:00000000000000aa", "xxh3:h", "xxh3:c1");
  next.header.models = models("xxh3:00000000000000bb", "xxh3:h", "xxh3:c2");
  ProvenanceDiff d = diff_provenance(base, next, "a.h5", "b.h5");
  ASSERT_EQ(d.models.size(), 1u);
  EXPECT_EQ(d.models[0].name, "draft model");
  EXPECT_EQ(d.models[0].base, "xxh3:00000000000000aa (/m/draft)");
  EXPECT_EQ(d.models[0].next,
            "xxh3:00000000000000bb (/m/draft; model.safetensors: values (same tensors))");

  next.header.models = models("xxh3:00000000000000bb", "xxh3:h2", "xxh3:c2");
  d = diff_provenance(base, next, "a.h5", "b.h5");
  ASSERT_EQ(d.models.size(), 1u);
  EXPECT_NE(d.models[0].next.find("model.safetensors: tensors"), std::string::npos);

  // A job that did not finish has the weights' headers only: compared on them, not a change
  // when they match; a different header still is.
  nlohmann::json partial =
      nlohmann::json::parse(models("xxh3-headers:00000000000000cc", "xxh3:h", "xxh3:c2"));
  partial["draft"]["files"][1].erase("content");
  next.header.models = partial.dump();
  EXPECT_TRUE(diff_provenance(base, next, "a.h5", "b.h5").models.empty());
  partial["draft"]["files"][1]["header"] = "xxh3:h3";
  next.header.models = partial.dump();
  d = diff_provenance(base, next, "a.h5", "b.h5");
  ASSERT_EQ(d.models.size(), 1u);
  EXPECT_NE(d.models[0].next.find("model.safetensors: tensors"), std::string::npos);

  nlohmann::json old = nlohmann::json::parse(base.header.models);
  old["draft"] = {{"path", "/m/draft"}, {"fingerprint", "fnv1a64:0123456789abcdef"}};
  next.header.models = old.dump();
  EXPECT_TRUE(diff_provenance(base, next, "a.h5", "b.h5").models.empty());
  EXPECT_TRUE(diff_provenance(base, base, "a.h5", "a.h5").models.empty());
}

// Quantization (issue 44): a changed `quantization` line is named on its own ("target
// quantization"), also when the files' fingerprints are of another scheme; one that only one run
// recorded (an older file) is not a change.
TEST(Compare, QuantizationChangeIsNamed) {
  auto models = [](const std::string& quantization) {
    nlohmann::json m;
    m["target"] = {{"path", "/m/target"}, {"fingerprint", "xxh3:0000000000000001"}};
    if (!quantization.empty()) m["target"]["quantization"] = quantization;
    return m.dump();
  };
  ResultInfo base = make_info("aaa", false, false, "4", "1.10.8");
  ResultInfo next = base;
  base.header.models = models("none");
  next.header.models =
      models("fp8 e4m3 blocks 128x128; 0 modules not converted; fp8: mlp.down_proj");
  ProvenanceDiff d = diff_provenance(base, next, "a.h5", "b.h5");
  ASSERT_EQ(d.models.size(), 1u);
  EXPECT_EQ(d.models[0].name, "target quantization");
  EXPECT_EQ(d.models[0].base, "none");
  EXPECT_NE(d.models[0].next.find("fp8 e4m3"), std::string::npos);
  next.header.models = models("");
  EXPECT_TRUE(diff_provenance(base, next, "a.h5", "b.h5").models.empty());
}

// An MCA parameter file edited between two runs (nothing in the environment changed): compare
// names the parameter and the file, per rank, among the per-rank differences.
TEST(Compare, EditedMcaParameterFileIsNamedByParameter) {
  auto with_config = [](ResultInfo info, const std::string& limit, const std::string& hash) {
    for (std::string& text : info.header.provenance) {
      nlohmann::json j = nlohmann::json::parse(text);
      CommConfigFile f{
          "/etc/openmpi/openmpi-mca-params.conf", true, hash, {{"btl_tcp_eager_limit", limit}}};
      j["mpi_config"] = resolve_mca_config({f}, {});
      text = j.dump();
    }
    return info;
  };
  const ResultInfo plain = make_info("aaa", false, false, "4", "1.10.8");
  const ResultInfo base = with_config(plain, "65536", "xxh3:1");
  const ResultInfo next = with_config(plain, "4096", "xxh3:2");
  const ProvenanceDiff d = diff_provenance(base, next, "a.h5", "b.h5");
  EXPECT_TRUE(d.environment.empty());
  ASSERT_EQ(d.libraries.size(), 2u);
  EXPECT_EQ(d.libraries[0].name, "Open MPI config btl_tcp_eager_limit");
  EXPECT_EQ(d.libraries[0].base, "65536 (/etc/openmpi/openmpi-mca-params.conf)");
  EXPECT_EQ(d.libraries[0].next, "4096 (/etc/openmpi/openmpi-mca-params.conf)");
  EXPECT_EQ(d.libraries[0].ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(d.libraries[1].name, "Open MPI config file /etc/openmpi/openmpi-mca-params.conf");
  // Files from before the configuration was recorded against newer ones: the parameters appear
  // as added, never as an error.
  EXPECT_EQ(diff_provenance(plain, base, "a.h5", "b.h5").libraries.size(), 2u);
  ResultInfo broken = base;
  nlohmann::json j = nlohmann::json::parse(broken.header.provenance[2]);
  j["mpi_config"]["params"] = 3;
  broken.header.provenance[2] = j.dump();
  try {
    diff_provenance(base, broken, "a.h5", "b.h5");
    FAIL() << "a malformed configuration was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("b.h5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
  }
}

TEST(Compare, MalformedProvenanceIsAnInputError) {
  ResultInfo base = make_info("aaa", false, false, "4", "1.10.8");
  ResultInfo bad = base;
  bad.header.provenance[1] = "{not json";
  try {
    diff_provenance(base, bad, "base.h5", "bad.h5");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    EXPECT_NE(std::string(e.what()).find("bad.h5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

}  // namespace

// The verdict leads (speculative before baseline, "total" only when no phase explains it), the
// speedup change comes with its interval, and per-token costs are filled in: a reader of the
// first lines learns what got slower without reading the tables.
TEST(Compare, VerdictLeadsWithTheSpeculativePhaseAndTheSpeedupChange) {
  Synthetic base_params, slow_params;
  slow_params.verify_ms = base_params.verify_ms * 1.3;
  slow_params.seq_wall_s = base_params.seq_wall_s * 1.2;  // speculative prompts take longer
  std::vector<ModeData> base = {make_mode(kModeBaseline, base_params, 21),
                                make_mode(kModeSpeculative, base_params, 22)};
  std::vector<ModeData> slow = {make_mode(kModeBaseline, slow_params, 23),
                                make_mode(kModeSpeculative, slow_params, 24)};
  Comparison c = compare_modes(base, slow, CompareOptions{});
  ASSERT_TRUE(c.speedup.present);
  // Both modes' prompts got 1.2x slower: the speedup itself is unchanged (interval contains 0).
  EXPECT_NEAR(c.speedup.base.value, 1.0, 0.05);
  EXPECT_LE(c.speedup.relative.low, 0.0);
  EXPECT_GE(c.speedup.relative.high, 0.0);
  EXPECT_FALSE(c.speedup.regression);
  const std::string verdict = format_verdict(c);
  EXPECT_EQ(verdict.rfind("REGRESSION: speculative verify +", 0), 0u) << verdict;
  EXPECT_LT(verdict.find("speculative verify"), verdict.find("baseline verify")) << verdict;
  EXPECT_EQ(verdict.substr(0, verdict.find('\n')).find("total"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find("\nspeedup 1.0"), std::string::npos) << verdict;
  const TimingChange* v = find(c, kModeSpeculative, "verify");
  // 400 steps of 10 ms over 160 sequences of 31 tokens: 4000 / 4960 ms per token.
  EXPECT_NEAR(v->base_per_token, 100.0 / 124.0, 0.05);
  EXPECT_NEAR(v->next_per_token / v->base_per_token, 1.3, 0.05);
  EXPECT_EQ(c.exit_code(), kCompareRegression);
  nlohmann::json j = comparison_to_json(c);
  EXPECT_EQ(j["exit_code"].get<int>(), 1);
  EXPECT_EQ(j["verdict"].size(), 5u);
}

TEST(Compare, SpeedupDropIsARegression) {
  Synthetic p, slow;
  slow.seq_wall_s = p.seq_wall_s * 1.4;  // speculative prompts 1.4x slower, baseline unchanged
  std::vector<ModeData> a = {make_mode(kModeBaseline, p, 31), make_mode(kModeSpeculative, p, 32)};
  std::vector<ModeData> b = {make_mode(kModeBaseline, p, 33),
                             make_mode(kModeSpeculative, slow, 34)};
  Comparison c = compare_modes(a, b, CompareOptions{});
  EXPECT_NEAR(c.speedup.relative.value, 1 / 1.4 - 1, 0.05);
  EXPECT_TRUE(c.speedup.regression);
  EXPECT_TRUE(c.regression);
  EXPECT_NE(format_verdict(c).find("REGRESSION"), std::string::npos);
}

TEST(Compare, ConfigurationKeysThatMakeAnotherExperiment) {
  for (const char* key :
       {"decode.draft_len", "decode.temperature", "decode.tree_top_k", "data.batch_size",
        "parallel.tp", "target.path", "draft.path", "job.seed"})
    EXPECT_TRUE(is_experiment_key(key)) << key;
  for (const char* key : {"job.name", "job.output", "job.overwrite", "parallel.comm_timeout_s",
                          "dataset.commit_s", "debug.inject_delay_ms", "debug.inject_phase"})
    EXPECT_FALSE(is_experiment_key(key)) << key;
  Comparison c;
  c.experiment_keys = {"decode.draft_len"};
  c.regression = true;
  EXPECT_EQ(c.exit_code(), kCompareExperiments);  // not 1: the change explains the phases
  EXPECT_EQ(format_verdict(c).rfind("DIFFERENT EXPERIMENTS (decode.draft_len", 0), 0u);
}

TEST(Compare, LaunchSyntaxVariablesAreNotChanges) {
  for (const char* name : {"OMPI_APP_CTX_NUM_PROCS", "OMPI_FIRST_RANKS", "OMPI_NUM_APP_CTX"})
    EXPECT_TRUE(is_per_launch_variable(name)) << name;
  EXPECT_FALSE(is_per_launch_variable("NCCL_PROTO"));
}
