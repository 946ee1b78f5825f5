// Host load in `specrun compare` (analysis/host_load.h, compare.h) on synthetic runs with CPU rows
// and host snapshots: a rerun on a busier host is not a regression (its wall times grew, its CPU
// times barely did), slower code on the same busier host still is and is named, a quiet rerun
// is judged as before, files without the records are never reattributed, and communication is
// judged on the rank that waited least; a difference the runs recorded (code, kernel variant,
// configuration, environment variables) is never attributed to the host.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "analysis/compare.h"
#include "analysis/host_load.h"

using namespace specrun;

namespace {

// Per-step means of one run's mode; every value gets noise * N(0, 1) relative jitter.
struct RunSpec {
  double draft = 4, verify = 10, comm = 0.5, sample = 0.2, other = 0.1;  // wall ms
  double draft_cpu = 3.5, verify_cpu = 8, sample_cpu = 0.2;              // main-thread CPU ms
  double comm_skew = 0;  // rank 0 waits this much longer than rank 1 in comm
  double wait = 1;       // run-queue wait ms per step
  double busy = 0;       // busy processes per snapshot
  bool records = true;   // CPU rows and host snapshots (schema 3)
  double noise = 0.05;
  // The GPU (CUDA runs, schema 4): SM clock (NaN: a CPU run, no GPU fields) and whether a
  // slowdown reason (power or thermal) was set in every snapshot.
  double gpu_sm = std::nan("");
  bool gpu_slowdown = false;
};

// 30 batches x 4 sequences x 10 steps, 2 ranks.
ModeData make_mode(const std::string& mode, const RunSpec& r, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> unit(0.0, 1.0);
  auto draw = [&](double mean) {
    return static_cast<float>(std::max(0.0, mean * (1.0 + r.noise * unit(rng))));
  };
  const bool spec = mode == kModeSpeculative;
  ModeData d;
  d.mode = mode;
  d.n_ranks = 2;
  d.batch_size = 4;
  for (int b = 0; b < 30; ++b) {
    for (int j = 0; j < 4; ++j) {
      SequenceRecord s;
      s.prompt_index = b * 4 + j;
      s.generated = spec ? 31 : 11;
      s.verify_steps = 10;
      s.drafted = spec ? 40 : 0;
      s.accepted = spec ? 20 : 0;
      s.wall_s = 0.2 * (1.0 + r.noise * unit(rng));
      d.sequences.push_back(s);
      for (int st = 0; st < 10; ++st)
        d.steps.push_back(StepRecord{b, st, s.prompt_index, 4, spec ? 4 : 0, spec ? 2 : 0,
                                     spec ? 4 : 0, 0, spec ? 3 : 1});
    }
    for (int st = 0; st < 10; ++st)
      for (int k = 0; k < 2; ++k) {
        const float draft = spec ? draw(r.draft) : 0.0f, verify = draw(r.verify);
        const float comm = draw(r.comm) + (k == 0 ? static_cast<float>(r.comm_skew) : 0.0f);
        const float sample = draw(r.sample), other = draw(r.other);
        for (float v : {draft, verify, comm, sample, other, draft + verify + comm + sample + other})
          d.timings_ms.push_back(v);
        if (!r.records) continue;
        const float dc = spec ? draw(r.draft_cpu) : 0.0f, vc = draw(r.verify_cpu);
        const float cc = comm * 0.9f, sc = draw(r.sample_cpu), oc = other;
        for (float v : {dc, vc, cc, sc, oc, dc + vc + cc + sc + oc, draw(r.wait)})
          d.cpu_ms.push_back(v);
      }
    if (!r.records) continue;
    for (int k = 0; k < 2; ++k) {
      std::vector<float> snap(kNumHostFields, 0.0f);
      for (int f = kGpuSmMhz; f < kNumHostFields; ++f) snap[f] = std::nanf("");
      if (!std::isnan(r.gpu_sm)) {
        snap[kGpuSmMhz] = static_cast<float>(r.gpu_sm);
        snap[kGpuMemMhz] = 3201;
        snap[kGpuTempC] = r.gpu_slowdown ? 88 : 45;
        snap[kGpuPowerW] = 700;
        snap[kGpuSlowdown] = r.gpu_slowdown ? 0x20 : 0;  // software thermal slowdown
        snap[kGpuEccUncorrected] = 0;
        snap[kGpuXid] = 0;
      }
      snap[kHostLoad1] = static_cast<float>(1 + r.busy);
      snap[kHostBusyProcesses] = static_cast<float>(r.busy);
      snap[kHostCpusAllowed] = 2;
      d.host.insert(d.host.end(), snap.begin(), snap.end());
    }
    d.host_busy.push_back(r.busy > 0 ? "rank 0: sha256sum (4242) 99% | rank 1: sha256sum (4242) 98%"
                                     : "");
  }
  return d;
}

std::vector<ModeData> make_run(const RunSpec& baseline, const RunSpec& speculative,
                               std::uint64_t seed) {
  return {make_mode(kModeBaseline, baseline, seed),
          make_mode(kModeSpeculative, speculative, seed + 1)};
}

const TimingChange& find(const Comparison& c, const std::string& mode, const std::string& name) {
  for (const TimingChange& t : c.timings)
    if (t.mode == mode && t.name == name) return t;
  throw std::runtime_error("no timing " + mode + " " + name);
}

// What a competing CPU-bound process does to a rerun: the ranks wait for CPUs (run-queue wait,
// comm waits for a descheduled partner grow ~100x), compute phases take longer on the wall clock
// and their CPU time is inflated a little, all alike.
RunSpec on_busier_host(RunSpec r) {
  r.draft *= 1.25, r.verify *= 1.4, r.sample *= 1.3, r.comm *= 100, r.other *= 1.3;
  r.draft_cpu *= 1.15, r.verify_cpu *= 1.2, r.sample_cpu *= 1.1;
  r.wait = 25, r.busy = 1;
  return r;
}

}  // namespace

TEST(HostLoad, RerunOnABusierHostIsEnvironmentNotARegression) {
  const RunSpec quiet;
  const std::vector<ModeData> base = make_run(quiet, quiet, 1);
  const std::vector<ModeData> next = make_run(on_busier_host(quiet), on_busier_host(quiet), 11);
  const Comparison c = compare_modes(base, next, CompareOptions{});
  EXPECT_FALSE(c.regression);
  EXPECT_EQ(c.exit_code(), kCompareSame);
  for (const char* name : {"verify", "comm", "total"}) {
    const TimingChange& t = find(c, kModeSpeculative, name);
    EXPECT_TRUE(t.environment) << "speculative " << name << " " << t.relative.value;
    EXPECT_FALSE(t.regression) << name;
  }
  ASSERT_FALSE(c.hosts.empty());
  EXPECT_TRUE(c.hosts[0].next_busier);
  EXPECT_NEAR(c.hosts[0].next.busy, 1.0, 1e-9);
  ASSERT_FALSE(c.hosts[0].next.busy_names.empty());
  EXPECT_EQ(c.hosts[0].next.busy_names[0], "sha256sum (4242)");
  const std::string verdict = format_verdict(c);
  EXPECT_EQ(verdict.rfind("ENVIRONMENT", 0), 0u) << verdict;
  EXPECT_NE(verdict.find("sha256sum (4242)"), std::string::npos) << verdict;
}

TEST(HostLoad, SlowerCodeOnABusierHostIsStillARegressionAndNamed) {
  const RunSpec quiet;
  RunSpec slower = on_busier_host(quiet);
  slower.verify += 5, slower.verify_cpu += 5;  // the code: 5 ms more work per verify, on the CPU
  const std::vector<ModeData> base = make_run(quiet, quiet, 2);
  const std::vector<ModeData> next = make_run(slower, slower, 12);
  const Comparison c = compare_modes(base, next, CompareOptions{});
  EXPECT_TRUE(c.regression);
  EXPECT_TRUE(find(c, kModeSpeculative, "verify").regression);
  EXPECT_TRUE(find(c, kModeSpeculative, "comm").environment);
  EXPECT_FALSE(find(c, kModeSpeculative, "draft").regression);
  const std::string verdict = format_verdict(c);
  EXPECT_EQ(verdict.rfind("REGRESSION: speculative verify", 0), 0u) << verdict;
}

TEST(HostLoad, QuietHostAndOldFilesAreJudgedAsBefore) {
  const RunSpec quiet;
  RunSpec slower = quiet;
  slower.verify *= 1.2, slower.verify_cpu *= 1.2;
  Comparison c =
      compare_modes(make_run(quiet, quiet, 3), make_run(slower, slower, 13), CompareOptions{});
  EXPECT_TRUE(find(c, kModeSpeculative, "verify").regression);
  ASSERT_FALSE(c.hosts.empty());
  EXPECT_FALSE(c.hosts[0].next_busier);

  // Without the records (schema 1 and 2 files) a busier host cannot be seen: nothing moves.
  RunSpec old_quiet = quiet, old_busy = on_busier_host(quiet);
  old_quiet.records = old_busy.records = false;
  c = compare_modes(make_run(old_quiet, old_quiet, 4), make_run(old_busy, old_busy, 14),
                    CompareOptions{});
  EXPECT_TRUE(c.regression);
  EXPECT_FALSE(c.hosts[0].base.recorded);
  for (const TimingChange& t : c.timings) EXPECT_FALSE(t.environment) << t.name;
}

TEST(HostLoad, BaseOnABusierHostMakesNoImprovement) {
  const RunSpec quiet;
  const Comparison c = compare_modes(make_run(on_busier_host(quiet), on_busier_host(quiet), 5),
                                     make_run(quiet, quiet, 15), CompareOptions{});
  EXPECT_TRUE(c.hosts[0].base_busier);
  for (const TimingChange& t : c.timings) EXPECT_FALSE(t.improvement) << t.mode << " " << t.name;
  EXPECT_EQ(format_verdict(c).rfind("ENVIRONMENT", 0), 0u) << format_verdict(c);
}

TEST(HostLoad, CommIsJudgedOnTheRankThatWaitedLeast) {
  RunSpec base = {}, skewed = {}, slower_collective = {};
  skewed.comm_skew = 3;        // rank 0 waits 3 ms more for a late partner: skew, not comm
  slower_collective.comm = 3;  // both ranks' collectives take 2.5 ms longer
  Comparison c =
      compare_modes(make_run(base, base, 6), make_run(skewed, skewed, 16), CompareOptions{});
  EXPECT_FALSE(find(c, kModeSpeculative, "comm").regression);
  c = compare_modes(make_run(base, base, 7), make_run(slower_collective, slower_collective, 17),
                    CompareOptions{});
  EXPECT_TRUE(find(c, kModeSpeculative, "comm").regression);
}

TEST(HostLoad, SmallCommChangesMustMoveTheStep) {
  // comm +60% of 0.5 ms is 0.3 ms: under 5% of a ~15 ms step, so not a regression.
  RunSpec base = {}, next = {};
  next.comm = 0.8;
  const Comparison c =
      compare_modes(make_run(base, base, 8), make_run(next, next, 18), CompareOptions{});
  const TimingChange& comm = find(c, kModeSpeculative, "comm");
  EXPECT_GT(comm.relative.low, 0.3);
  EXPECT_FALSE(comm.regression);
}

// A CUDA rerun whose GPU throttled (SM clock 1980 -> 1500 MHz, a thermal slowdown reason in every
// snapshot) on an otherwise quiet host: device phases that slowed by no more than the clock
// ratio (1980/1500 = +32%) are the GPU's, not the code's, even with the main thread's CPU time
// following them (a spinning synchronisation); a phase that slowed more is still a regression;
// the same slowdown at the same clocks is one; CPU runs print no GPU line.
TEST(HostLoad, ThrottledGpuExplainsSlowdownsUpToItsClockRatio) {
  RunSpec cool;
  cool.gpu_sm = 1980;
  RunSpec hot = cool;
  hot.gpu_sm = 1500, hot.gpu_slowdown = true;
  hot.verify *= 1.25, hot.verify_cpu *= 1.25, hot.draft *= 1.25, hot.draft_cpu *= 1.25;
  const std::vector<ModeData> base = make_run(cool, cool, 7);
  Comparison c = compare_modes(base, make_run(hot, hot, 17), CompareOptions{});
  EXPECT_FALSE(c.regression);
  EXPECT_TRUE(find(c, kModeSpeculative, "verify").environment);
  ASSERT_FALSE(c.hosts.empty());
  EXPECT_TRUE(c.hosts[0].gpu_slower);
  EXPECT_FALSE(c.hosts[0].cpu_busier);
  EXPECT_NEAR(c.hosts[0].gpu_clock_ratio, 1500.0 / 1980.0, 1e-6);
  EXPECT_NEAR(c.hosts[0].next.gpu_slowdown_share, 1.0, 1e-9);
  std::string verdict = format_verdict(c);
  EXPECT_EQ(verdict.rfind("ENVIRONMENT (GPU clocks", 0), 0u) << verdict;
  EXPECT_NE(verdict.find("GPU sm clock 1980 -> 1500 MHz"), std::string::npos) << verdict;

  RunSpec worse = hot;
  worse.verify = cool.verify * 1.8, worse.verify_cpu = cool.verify_cpu * 1.8;
  c = compare_modes(base, make_run(worse, worse, 27), CompareOptions{});
  EXPECT_TRUE(c.regression);
  EXPECT_TRUE(find(c, kModeSpeculative, "verify").regression);
  EXPECT_TRUE(find(c, kModeSpeculative, "draft").environment);
  verdict = format_verdict(c);
  EXPECT_EQ(verdict.rfind("REGRESSION: speculative verify", 0), 0u) << verdict;

  RunSpec same_clocks = hot;
  same_clocks.gpu_sm = 1980, same_clocks.gpu_slowdown = false;
  c = compare_modes(base, make_run(same_clocks, same_clocks, 37), CompareOptions{});
  EXPECT_TRUE(find(c, kModeSpeculative, "verify").regression);
  EXPECT_FALSE(c.hosts[0].gpu_slower);

  const std::string hosts = format_hosts(base);
  EXPECT_NE(hosts.find("GPU sm 1980 MHz, mem 3201 MHz, 45 C, 700 W, slowed down in 0% of batches"),
            std::string::npos)
      << hosts;
  EXPECT_EQ(format_hosts(make_run(RunSpec{}, RunSpec{}, 3)).find("GPU"), std::string::npos);
}

// A difference the runs recorded (here the CPU kernel variant, forced with SPECRUN_CPU_ISA) is
// never the environment's: the same slower rerun on a busier host that the previous tests call
// ENVIRONMENT is judged as code when compare_results finds a recorded cause
// (attribute_host = false), and the verdict names the recorded difference first.
TEST(HostLoad, ARecordedDifferenceIsNeverTheEnvironment) {
  const RunSpec quiet;
  const std::vector<ModeData> base = make_run(quiet, quiet, 1);
  const std::vector<ModeData> next = make_run(on_busier_host(quiet), on_busier_host(quiet), 11);
  CompareOptions options;
  options.attribute_host = false;
  Comparison c = compare_modes(base, next, options);
  EXPECT_TRUE(c.regression);
  EXPECT_EQ(c.exit_code(), kCompareRegression);
  EXPECT_TRUE(find(c, kModeSpeculative, "verify").regression);
  for (const TimingChange& t : c.timings) EXPECT_FALSE(t.environment) << t.mode << " " << t.name;
  EXPECT_TRUE(find(c, kModeSpeculative, "comm").host_suspect);  // marked, judged anyway
  ASSERT_FALSE(c.hosts.empty());
  EXPECT_TRUE(c.hosts[0].next_busier);  // still measured and printed, just not blamed
  c.base_code = c.next_code = "abc1234 (clean)";
  c.provenance.libraries.push_back(
      ProvenanceChange{"cpu_isa", ProvenanceChange::Kind::kChanged, "avx512", "avx2", {0, 1}});
  const std::string verdict = format_verdict(c);
  EXPECT_EQ(
      verdict.rfind("CHANGED: cpu_isa: \"avx512\" -> \"avx2\" on ranks 0-1 | REGRESSION: ", 0), 0u)
      << verdict;
  EXPECT_EQ(verdict.find("ENVIRONMENT"), std::string::npos) << verdict;
}

// What counts as a recorded cause: build, libraries, models, configuration that defines the
// experiment or stands in for code (debug.*), environment variables; not the node's name, the
// GPUs' identities, or bookkeeping keys.
TEST(HostLoad, RecordedCausesLeaveOutTheNodeAndBookkeeping) {
  using K = ProvenanceChange::Kind;
  ProvenanceDiff d;
  d.libraries = {{"hostname", K::kChanged, "node1", "node2", {0}},
                 {"cuda_devices", K::kChanged, "[uuid-a]", "[uuid-b]", {0}}};
  d.config = {{"job.name", K::kChanged, "a", "b", {}},
              {"parallel.comm_timeout_s", K::kChanged, "60", "120", {}}};
  EXPECT_TRUE(recorded_causes(d).empty());
  d.config.push_back({"debug.inject_delay_ms", K::kChanged, "0", "2", {}});
  d.environment.push_back({"OMP_PROC_BIND", K::kAdded, "", "close", {0, 1}});
  d.libraries.push_back({"cpu_isa", K::kChanged, "avx512", "avx2", {0}});
  d.run.push_back({"git_commit", K::kChanged, "aaa", "bbb", {}});
  const auto causes = recorded_causes(d);
  ASSERT_EQ(causes.size(), 4u);
  EXPECT_EQ(causes[0]->name, "git_commit");  // code first
  EXPECT_EQ(causes[1]->name, "cpu_isa");
  EXPECT_EQ(causes[2]->name, "debug.inject_delay_ms");
  EXPECT_EQ(causes[3]->name, "OMP_PROC_BIND");
}
