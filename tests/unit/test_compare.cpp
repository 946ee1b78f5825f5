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
#include "io/comm_config.h"

using namespace specrun;

namespace {

struct Synthetic {
  double verify_ms = 10.0;  // mean verify time per step
  double draft_ms = 4.0;
  double seq_wall_s = 1.0;  // wall time of every sequence
  double noise = 0.1;       // relative standard deviation of every timing
};

// 40 batches x 4 sequences, 10 steps per batch, 2 ranks; timings ~ N(mean, (noise*mean)^2).
ModeData make_mode(const std::string& mode, const Synthetic& s, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> unit(0.0, 1.0);
  auto draw = [&](double mean) {
    return static_cast<float>(std::max(0.0, mean * (1.0 + s.noise * unit(rng))));
  };
  ModeData d;
  d.mode = mode;
  d.n_ranks = 2;
  d.batch_size = 4;
  const bool spec = mode == kModeSpeculative;
  for (int b = 0; b < 40; ++b) {
    for (int j = 0; j < 4; ++j) {
      SequenceRecord r;
      r.prompt_index = b * 4 + j;
      r.generated = 31;
      r.verify_steps = 10;
      r.drafted = spec ? 40 : 0;
      r.accepted = spec ? 20 : 0;
      r.wall_s = s.seq_wall_s * (1.0 + s.noise * unit(rng));
      d.sequences.push_back(r);
      for (int st = 0; st < 10; ++st)
        d.steps.push_back(
            StepRecord{b, st, r.prompt_index, 4, spec ? 4 : 0, spec ? 2 : 0, spec ? 4 : 0});
    }
    for (int st = 0; st < 10; ++st) {
      for (int k = 0; k < 2; ++k) {
        float draft = spec ? draw(s.draft_ms) : 0.0f;
        float verify = draw(s.verify_ms);
        float comm = draw(1.0), sample = draw(0.2), other = draw(0.1);
        for (float v : {draft, verify, comm, sample, other, draft + verify + comm + sample + other})
          d.timings_ms.push_back(v);
      }
    }
  }
  return d;
}

const TimingChange* find(const Comparison& c, const std::string& mode, const std::string& name) {
  for (const TimingChange& t : c.timings)
    if (t.mode == mode && t.name == name) return &t;
  return nullptr;
}

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

namespace {

// Device rows for every timings row of `d` (2 ranks): verify ~ N(verify_ms, 10%), the other
// columns fixed, total their sum.
void add_device_rows(ModeData& d, double verify_ms, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> unit(0.0, 1.0);
  const std::size_t rows = d.timings_ms.size() / (2 * kNumPhases);
  for (std::size_t r = 0; r < rows * 2; ++r) {
    const float verify = static_cast<float>(verify_ms * (1.0 + 0.1 * unit(rng)));
    for (float v : {0.5f, verify, 0.2f, 0.1f, 0.8f + verify}) d.device_ms.push_back(v);
  }
}

// A speculative run (BASE) and one whose verify phase is 20% slower on the host's clock (NEW),
// with device rows (device verify base_device_ms and new_device_ms); seeds seed..seed + 3.
struct RunPair {
  std::vector<ModeData> base, next;
};
RunPair slower_verify(double base_device_ms, double new_device_ms, std::uint64_t seed) {
  Synthetic base_params, slow_params;
  slow_params.verify_ms = base_params.verify_ms * 1.2;
  RunPair p{{make_mode(kModeSpeculative, base_params, seed)},
            {make_mode(kModeSpeculative, slow_params, seed + 1)}};
  add_device_rows(p.base[0], base_device_ms, seed + 2);
  add_device_rows(p.next[0], new_device_ms, seed + 3);
  return p;
}

}  // namespace

// The verify phase 20% slower on the host's clock: whether the device's time moved with it says
// whose it was. Without device rows (CPU runs) the verdict says nothing about a device.
TEST(Compare, DeviceRowsSayWhetherAPhaseChangeRanOnTheDevice) {
  Synthetic base_params, slow_params;
  slow_params.verify_ms = base_params.verify_ms * 1.2;
  auto runs = [&](double base_device_ms, double new_device_ms) {
    RunPair p = slower_verify(base_device_ms, new_device_ms, 31);
    return compare_modes(p.base, p.next, CompareOptions{});
  };

  // The device's verify 8 -> 9.6 ms: the kernels got slower.
  Comparison kernels = runs(8.0, 9.6);
  const TimingChange* dv = nullptr;
  for (const TimingChange& t : kernels.device)
    if (t.mode == kModeSpeculative && t.name == "verify") dv = &t;
  ASSERT_NE(dv, nullptr);
  EXPECT_EQ(dv->unit, "device ms/step");
  EXPECT_NEAR(dv->relative.value, 0.2, 0.03);
  EXPECT_TRUE(dv->regression);
  std::string verdict = format_verdict(kernels);
  EXPECT_NE(verdict.find("speculative verify +"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find("; on the device +"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find(": the device's work"), std::string::npos) << verdict;
  const std::string text = format_comparison(kernels, "a.h5", "b.h5");
  EXPECT_NE(text.find("device time (events"), std::string::npos) << text;
  EXPECT_NE(text.find("speculative verify ms/step"), std::string::npos) << text;
  nlohmann::json j = comparison_to_json(kernels);
  EXPECT_EQ(j["device_timings"].size(), static_cast<std::size_t>(kNumDeviceColumns));

  // The device's verify unchanged at 8 ms: the host's side (launches one by one, a slow CPU).
  Comparison host = runs(8.0, 8.0);
  EXPECT_TRUE(host.regression);  // the wall time still regressed: the job is slower
  verdict = format_verdict(host);
  EXPECT_NE(verdict.find(": not the device's (the host's"), std::string::npos) << verdict;
  // Device changes are never regressions by themselves.
  for (const TimingChange& t : host.device) EXPECT_FALSE(t.regression) << t.name;

  // No device rows: no device section, no note.
  Comparison cpu = compare_modes({make_mode(kModeSpeculative, base_params, 31)},
                                 {make_mode(kModeSpeculative, slow_params, 32)}, CompareOptions{});
  EXPECT_TRUE(cpu.device.empty());
  EXPECT_EQ(format_verdict(cpu).find("on the device"), std::string::npos);
}

namespace {

// Pass rows for every timings row of `d` (2 ranks): 4 draft passes replayed and one verify pass
// per step, of which `verify_graphs` (a fraction of the rows) replayed and the rest launched
// kernel by kernel, unrecorded (or eager).
void add_pass_rows(ModeData& d, double verify_graphs, bool eager = false) {
  const std::size_t rows = d.timings_ms.size() / (2 * kNumPhases);
  for (std::size_t r = 0; r < rows; ++r) {
    const bool graph = static_cast<double>(r) < verify_graphs * static_cast<double>(rows);
    const float replayed = graph ? 1.0f : 0.0f;
    const float recorded = !graph && eager ? 1.0f : 0.0f,
                unrecorded = !graph && !eager ? 1.0f : 0.0f;
    for (int k = 0; k < 2; ++k)
      for (float v : {4.0f, 0.0f, 0.0f, 0.0f, replayed, 0.0f, recorded, unrecorded})
        d.device_passes.push_back(v);
  }
}

}  // namespace

// The story specrun exists for: the verify step got slower on the host's clock, not on the
// device's, because its passes stopped running as CUDA graphs. The verdict names the cause beside
// the phase; a small move of the share is not a finding; CPU runs have no pass rows.
TEST(Compare, VerifyPassesThatLostTheirGraphsAreNamedInTheVerdict) {
  auto runs = [&](double base_graphs, double new_graphs) {
    RunPair p = slower_verify(8.0, 8.0, 41);
    add_pass_rows(p.base[0], base_graphs);
    add_pass_rows(p.next[0], new_graphs);
    return compare_modes(p.base, p.next, CompareOptions{});
  };

  Comparison lost = runs(1.0, 0.0);
  ASSERT_EQ(lost.graphs.size(), 2u);  // draft and verify, in that order
  const GraphChange& draft = lost.graphs[0];
  const GraphChange& verify = lost.graphs[1];
  EXPECT_EQ(draft.phase, "draft");
  EXPECT_FALSE(draft.fell || draft.rose);
  EXPECT_EQ(draft.base.replayed, 4.0 * 400 * 2);  // 400 rows, 2 ranks
  EXPECT_EQ(verify.phase, "verify");
  EXPECT_TRUE(verify.fell);
  EXPECT_EQ(verify.base.graph_share(), 1.0);
  EXPECT_EQ(verify.next.graph_share(), 0.0);
  EXPECT_EQ(verify.next.unrecorded, 800);
  EXPECT_EQ(verify.next.launched(), 800);
  EXPECT_TRUE(lost.regression) << "the job is slower: still a regression";
  const std::string verdict = format_verdict(lost);
  EXPECT_NE(verdict.find("REGRESSION: speculative verify +"), std::string::npos) << verdict;
  EXPECT_NE(verdict.find(": not the device's (the host's: launches, the CPU); its passes as CUDA "
                         "graphs 100% -> 0% (launched kernel by kernel, unrecorded: graphs off or "
                         "passes too large for a step graph)"),
            std::string::npos)
      << verdict;
  const std::string text = format_comparison(lost, "a.h5", "b.h5");
  const std::size_t table = text.find("device forward passes as CUDA graphs");
  ASSERT_NE(table, std::string::npos) << text;
  const std::size_t row = text.find("speculative verify", table);
  ASSERT_NE(row, std::string::npos) << text;
  const std::string line = text.substr(row, text.find('\n', row) - row);
  EXPECT_NE(line.find("100%         0%   of 800 -> 800 passes  FELL (launched kernel by kernel, "
                      "unrecorded"),
            std::string::npos)
      << line;
  const nlohmann::json j = comparison_to_json(lost)["device_passes"];
  ASSERT_EQ(j.size(), 2u);
  EXPECT_TRUE(j[1]["fell"].get<bool>());
  EXPECT_EQ(j[1]["base"]["graph_share"].get<double>(), 1.0);

  // Graphs turned off by configuration: two experiments, the fallen share still in the verdict.
  Comparison off = lost;
  off.experiment_keys = {"parallel.cuda_graphs"};
  const std::string experiments = format_verdict(off);
  EXPECT_NE(experiments.find("DIFFERENT EXPERIMENTS (parallel.cuda_graphs differ"),
            std::string::npos)
      << experiments;
  EXPECT_NE(experiments.find("; passes as CUDA graphs: speculative verify 100% -> 0%\n"),
            std::string::npos)
      << experiments;

  // Graphs regained (the runs swapped): named beside the faster phase, without the launch remark.
  RunPair swapped = slower_verify(8.0, 8.0, 45);
  EXPECT_TRUE(compare_modes(swapped.next, swapped.base, {}).graphs.empty())
      << "no pass rows, no graphs";
  add_pass_rows(swapped.next[0], 0.0);
  add_pass_rows(swapped.base[0], 1.0);
  Comparison regained = compare_modes(swapped.next, swapped.base, {});
  ASSERT_EQ(regained.graphs.size(), 2u);
  EXPECT_TRUE(regained.graphs[1].rose);
  const std::string faster = format_verdict(regained);
  EXPECT_NE(faster.find("FASTER: speculative verify -"), std::string::npos) << faster;
  EXPECT_NE(faster.find("; its passes as CUDA graphs 0% -> 100%\n"), std::string::npos) << faster;
  // Recorded but never captured (shapes that do not repeat): the other cause named.
  RunPair shapes = slower_verify(8.0, 8.0, 49);
  add_pass_rows(shapes.base[0], 1.0);
  add_pass_rows(shapes.next[0], 0.0, true);
  const std::string eager = format_verdict(compare_modes(shapes.base, shapes.next, {}));
  EXPECT_NE(eager.find("100% -> 0% (launched kernel by kernel, recorded but not captured: shapes "
                       "that do not repeat or a capture that failed (the job log's step-graph "
                       "line))"),
            std::string::npos)
      << eager;
  // A share that moved by less than kGraphShareChange: reported in the table, not a finding.
  Comparison small = runs(1.0, 0.95);
  EXPECT_FALSE(small.graphs[1].fell || small.graphs[1].rose);
  EXPECT_EQ(format_verdict(small).find("CUDA graphs"), std::string::npos) << format_verdict(small);
}

namespace {

// The target's expert records of a make_mode speculative run: one verify pass per step over its
// 4 sequences, each the root and 4 drafted nodes of which 2 are accepted (20 tokens, 12 kept;
// every step emits 3 tokens per sequence), two MoE layers of 64 experts, top-2, 2 EP ranks,
// 1 MB per expert; `unique` experts per layer per pass. Expert MB per emitted token:
// 2 layers x unique / 12 tokens.
void with_experts(ModeData& d, int unique) {
  ExpertRecords& r = d.target_experts;
  r = ExpertRecords{};
  r.top_k = 2;
  r.n_experts = 64;
  r.ep = 2;
  r.expert_bytes = 1000000;
  r.layers = {1, 2};
  for (StepRecord& st : d.steps) st.emitted = st.accepted + 1;
  std::map<std::pair<std::int64_t, std::int32_t>, std::vector<std::int64_t>> by_step;
  for (const StepRecord& st : d.steps) by_step[{st.batch, st.step}].push_back(st.prompt_index);
  for (const auto& [key, prompts] : by_step) {
    const int n = static_cast<int>(prompts.size()), tokens = 5 * n, kept = 3 * n;
    r.batch.push_back(key.first);
    r.step.push_back(key.second);
    r.kind.push_back(kPassVerify);
    r.sequences.push_back(n);
    r.tokens.push_back(tokens);
    r.kept_tokens.push_back(kept);
    for (int l = 0; l < 2; ++l) {
      r.unique.push_back(unique);
      r.pairs.push_back(2 * tokens);
      r.max_load.push_back(3);
      r.kept_unique.push_back(unique / 2);
      r.kept_pairs.push_back(2 * kept);
      r.rank_pairs.push_back(tokens);
      r.rank_pairs.push_back(tokens);
    }
    for (std::int64_t p : prompts) {
      r.seq_prompt_index.push_back(p);
      r.seq_tokens.push_back(5);
      r.seq_kept_tokens.push_back(3);
      for (int l = 0; l < 2; ++l) {
        r.seq_unique.push_back(8);
        r.seq_kept_unique.push_back(5);
      }
    }
  }
}

std::vector<ModeData> moe_run(int unique, std::uint64_t seed) {
  Synthetic p;
  std::vector<ModeData> run = {make_mode(kModeBaseline, p, seed),
                               make_mode(kModeSpeculative, p, seed + 1)};
  with_experts(run[1], unique);
  return run;
}

}  // namespace

// A verify that reads more experts per emitted token is a regression the verdict names first,
// even when no timing changed; the same experts are not; another experiment reports the change.
TEST(Compare, MoreExpertBytesPerEmittedTokenIsARegression) {
  const std::vector<ModeData> base = moe_run(20, 11), same = moe_run(20, 13),
                              more = moe_run(26, 13);
  Comparison c = compare_modes(base, more, CompareOptions{});
  ASSERT_EQ(c.experts.size(), 1u);
  const ExpertChange& e = c.experts[0];
  EXPECT_EQ(e.mode, kModeSpeculative);
  EXPECT_EQ(e.kind, "verify");
  EXPECT_NEAR(e.base_mb_per_token, 2 * 20 / 12.0, 1e-9);
  EXPECT_NEAR(e.next_mb_per_token, 2 * 26 / 12.0, 1e-9);
  EXPECT_NEAR(e.relative.value, 0.3, 1e-9);
  EXPECT_EQ(e.base_n, 400);
  EXPECT_TRUE(e.regression);
  EXPECT_TRUE(c.regression);
  EXPECT_EQ(c.exit_code(), kCompareRegression);
  for (const TimingChange& t : c.timings) EXPECT_FALSE(t.regression) << t.mode << " " << t.name;
  const std::string verdict = format_verdict(c);
  EXPECT_EQ(verdict.rfind("REGRESSION: speculative verify expert MB per emitted token +30.0% "
                          "[95% CI +30.0%, +30.0%] (3.333 -> 4.333 MB/token; unique experts per "
                          "layer 20.00 -> 26.00)",
                          0),
            0u)
      << verdict;
  const std::string text = format_comparison(c, "a.h5", "b.h5");
  EXPECT_NE(text.find("  speculative verify MB/token     3.333      4.333    +30.0%   [+30.0%, "
                      "+30.0%]  REGRESSION\n  speculative verify unique       20.00      26.00\n"),
            std::string::npos)
      << text;
  EXPECT_TRUE(comparison_to_json(c)["experts"][0]["regression"].get<bool>());

  // Fewer bytes per token: named as better.
  Comparison fewer = compare_modes(more, base, CompareOptions{});
  ASSERT_EQ(fewer.experts.size(), 1u);
  EXPECT_TRUE(fewer.experts[0].improvement);
  EXPECT_FALSE(fewer.regression);

  Comparison unchanged = compare_modes(base, same, CompareOptions{});
  ASSERT_EQ(unchanged.experts.size(), 1u);
  EXPECT_FALSE(unchanged.experts[0].regression);
  EXPECT_FALSE(unchanged.regression);
  EXPECT_EQ(
      format_verdict(unchanged).rfind("SAME: no phase, throughput, speedup or expert bytes", 0), 0u)
      << format_verdict(unchanged);

  c.experiment_keys = {"target.path"};
  EXPECT_NE(format_verdict(c).find("expert MB per emitted token: speculative verify 3.333 -> "
                                   "4.333 (+30.0%)"),
            std::string::npos)
      << format_verdict(c);

  // Runs without expert records (dense targets) compare nothing of it.
  EXPECT_TRUE(compare_modes(base,
                            {make_mode(kModeBaseline, Synthetic{}, 13),
                             make_mode(kModeSpeculative, Synthetic{}, 14)},
                            CompareOptions{})
                  .experts.empty());
}
