// Device rows of the phase timings (result schema 5) and pass rows (schema 6): DevicePhaseLog
// turns a batch's device marks into one row of each per step (engine/step_timer.h), the gather
// merges and places them like the other per-step rows (engine/batch_codec.h), and the summary
// reports them beside the host's wall time (analysis/summary.h). The device clock here is a
// scripted DeviceTimeline whose intervals the test chooses, so every expected value is exact; the
// CUDA events behind the real one are tested on the GPU (test_cuda_transformer,
// tests/gpu/e2e_greedy.sh).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "analysis/summary.h"
#include "engine/batch_codec.h"
#include "engine/step_timer.h"
#include "single_rank_comm.h"

using namespace specrun;

namespace {

// Mark i is at time sum(gaps[0..i)) ms; read() hands the gaps between the marks made.
class ScriptedTimeline final : public DeviceTimeline {
 public:
  explicit ScriptedTimeline(std::vector<double> gaps) : gaps_(std::move(gaps)) {}
  int mark() override { return marks_++; }
  void reserve(int marks) override { reserved = marks; }
  void read(std::vector<double>& out) override {
    out.clear();
    for (int i = 0; i + 1 < marks_; ++i) out.push_back(gaps_.at(next_ + i));
    next_ += marks_;  // the gap after the last mark belongs to no read
    marks_ = 0;
    ++reads;
  }
  DevicePasses passes() const override { return issued; }
  int marks() const { return marks_; }
  int reads = 0;
  int reserved = 0;
  DevicePasses issued;  // what the "device" has issued so far: the test advances it

 private:
  std::vector<double> gaps_;
  int marks_ = 0;
  std::size_t next_ = 0;
};

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> row(float draft, float verify, float sample, float other) {
  return {draft, verify, sample, other, draft + verify + sample + other};
}

}  // namespace

TEST(DevicePhaseLog, StepsOfBothModesResolveToExactRows) {
  // A speculative step: draft 1, verify 10, sample 2, other 0.5, draft again 3; then 7 ms between
  // steps (in no step); then a baseline-shaped step: verify 4, sample 1, other 0.25.
  ScriptedTimeline clock({1, 10, 2, 0.5, 3, 7, 4, 1, 0.25, 99});
  DevicePhaseLog log(&clock);
  ASSERT_TRUE(log.on());
  log.phase(kPhaseDraft);
  log.phase(kPhaseVerify);
  log.phase(kPhaseSample);
  log.phase(kPhaseOther);
  log.phase(kPhaseDraft);
  log.end_step();
  log.phase(kPhaseVerify);
  log.phase(kPhaseSample);
  log.phase(kPhaseOther);
  log.end_step();
  EXPECT_EQ(clock.marks(), 10);
  std::vector<float> out;
  log.resolve(out);
  EXPECT_EQ(clock.reads, 1);  // one wait for the batch
  std::vector<float> expect = row(4, 10, 2, 0.5f);
  const std::vector<float> second = row(0, 4, 1, 0.25f);
  expect.insert(expect.end(), second.begin(), second.end());
  EXPECT_EQ(out, expect);
  EXPECT_FALSE(log.pending());
}

TEST(DevicePhaseLog, PassRowsCountEachPhasesPassesByHowTheyWereIssued) {
  ScriptedTimeline clock(std::vector<double>(20, 1.0));
  DevicePhaseLog log(&clock);
  // A speculative step: the drafter's two passes replayed and one captured, the verify pass
  // launched kernel by kernel unrecorded, nothing in sample and other, one more draft pass
  // replayed and one eager after the verdicts.
  log.phase(kPhaseDraft);
  clock.issued.replayed += 2;
  clock.issued.captured += 1;
  log.phase(kPhaseVerify);
  clock.issued.unrecorded += 1;
  log.phase(kPhaseSample);
  log.phase(kPhaseOther);
  log.phase(kPhaseDraft);
  clock.issued.replayed += 1;
  clock.issued.eager += 1;
  log.end_step();
  // Between steps (a prefill): in no row.
  clock.issued.unrecorded += 5;
  // A baseline-shaped step: the verify pass replayed; a pass in the sample phase counts with
  // verify.
  log.phase(kPhaseVerify);
  clock.issued.replayed += 1;
  log.phase(kPhaseSample);
  clock.issued.captured += 1;
  log.end_step();
  // A step cut short: dropped.
  log.phase(kPhaseVerify);
  clock.issued.replayed += 1;
  std::vector<float> device, passes;
  log.resolve(device, passes);
  EXPECT_EQ(device.size(), 2u * kNumDeviceColumns);
  // Step 1: draft 3 replayed, 1 captured, 1 eager; verify 1 unrecorded. Step 2: verify 1
  // replayed, 1 captured.
  const std::vector<float> expect = {3, 1, 1, 0, 0, 0, 0, 1,  //
                                     0, 0, 0, 0, 1, 1, 0, 0};
  EXPECT_EQ(passes, expect);
  EXPECT_EQ(kPassColumns[pass_column(kPhaseVerify)], std::string("verify_replayed"));
}

TEST(DevicePhaseLog, MarksAfterTheLastStepAreDroppedAndNoDeviceMeansNoMarks) {
  ScriptedTimeline clock({2, 3, 5, 8, 13});
  DevicePhaseLog log(&clock);
  log.phase(kPhaseVerify);
  log.phase(kPhaseSample);
  log.end_step();
  log.phase(kPhaseVerify);  // a step cut short (an error in the middle of a batch)
  log.phase(kPhaseSample);
  std::vector<float> out;
  log.resolve(out);
  EXPECT_EQ(out, row(0, 2, 3, 0));
  EXPECT_FALSE(log.pending());

  DevicePhaseLog none(nullptr);
  EXPECT_FALSE(none.on());
  test::SingleRankComm comm;
  StepTimer timer(comm, nullptr, &none);  // must not touch the (absent) timeline
  timer.begin(kPhaseVerify);
  timer.end();
  std::vector<float> wall, cpu;
  timer.finish(wall, cpu);
  EXPECT_EQ(wall.size(), static_cast<std::size_t>(kNumPhases));
  EXPECT_FALSE(none.pending());
}

TEST(DevicePhaseLog, StepTimerMarksEachPhaseStartAndTheStepEnd) {
  ScriptedTimeline clock({1.5, 2.5, 0.5, 100});
  DevicePhaseLog log(&clock);
  log.reserve(3, 5);
  EXPECT_EQ(clock.reserved, 18) << "a batch's marks are made before its steps";
  test::SingleRankComm comm;
  std::vector<float> wall, cpu, device;
  {
    StepTimer timer(comm, nullptr, &log);
    for (Phase p : {kPhaseVerify, kPhaseSample, kPhaseOther}) {
      timer.begin(p);
      timer.end();
    }
    timer.finish(wall, cpu);
  }
  EXPECT_EQ(clock.marks(), 4);
  log.resolve(device);
  EXPECT_EQ(device, row(0, 1.5f, 2.5f, 0.5f));
}

TEST(DeviceRows, GatherMergesAndPlacesThemLikeTheOtherRows) {
  // Two tp ranks, two steps; rank 1 has no device (empty rows become NaN), then neither has.
  BatchResult r0, r1;
  r0.batch = r1.batch = 3;
  r0.n_steps = r1.n_steps = 2;
  r0.n_ranks = r1.n_ranks = 1;
  r0.timings_ms.assign(2 * kNumPhases, 1.0f);
  r1.timings_ms.assign(2 * kNumPhases, 2.0f);
  r0.device_ms = row(1, 2, 3, 4);
  const std::vector<float> step2 = row(5, 6, 7, 8);
  r0.device_ms.insert(r0.device_ms.end(), step2.begin(), step2.end());
  for (int i = 0; i < 2 * kNumPassColumns; ++i) r0.device_passes.push_back(static_cast<float>(i));
  BatchResult decoded = decode_batch(encode_batch(r0, true));
  EXPECT_EQ(decoded.device_ms, r0.device_ms);
  EXPECT_EQ(decoded.device_passes, r0.device_passes);
  EXPECT_TRUE(decode_batch(encode_batch(r1, false)).device_ms.empty());
  EXPECT_TRUE(decode_batch(encode_batch(r1, false)).device_passes.empty());

  BatchResult merged = merge_group({decoded, decode_batch(encode_batch(r1, false))});
  ASSERT_EQ(merged.device_ms.size(), 2u * 2u * kNumDeviceColumns);
  for (int s = 0; s < 2; ++s)
    for (int c = 0; c < kNumDeviceColumns; ++c) {
      EXPECT_EQ(merged.device_ms[(s * 2 + 0) * kNumDeviceColumns + c],
                r0.device_ms[s * kNumDeviceColumns + c]);
      EXPECT_TRUE(std::isnan(merged.device_ms[(s * 2 + 1) * kNumDeviceColumns + c]));
    }
  ASSERT_EQ(merged.device_passes.size(), 2u * 2u * kNumPassColumns);
  for (int s = 0; s < 2; ++s)
    for (int c = 0; c < kNumPassColumns; ++c) {
      EXPECT_EQ(merged.device_passes[(s * 2 + 0) * kNumPassColumns + c],
                static_cast<float>(s * kNumPassColumns + c));
      EXPECT_TRUE(std::isnan(merged.device_passes[(s * 2 + 1) * kNumPassColumns + c]));
    }
  // Placed as world ranks 2 and 3 of 4.
  BatchResult placed = place_group(merged, 2, 4);
  ASSERT_EQ(placed.device_passes.size(), 2u * 4u * kNumPassColumns);
  EXPECT_EQ(placed.device_passes[(1 * 4 + 2) * kNumPassColumns + 4], kNumPassColumns + 4.0f);
  EXPECT_TRUE(std::isnan(placed.device_passes[(1 * 4 + 0) * kNumPassColumns + 4]));
  ASSERT_EQ(placed.device_ms.size(), 2u * 4u * kNumDeviceColumns);
  EXPECT_EQ(placed.device_ms[(1 * 4 + 2) * kNumDeviceColumns + 1], 6.0f);
  EXPECT_TRUE(std::isnan(placed.device_ms[(1 * 4 + 0) * kNumDeviceColumns + 1]));

  r0.device_ms.clear();
  r0.device_passes.clear();
  EXPECT_TRUE(merge_group({r0, r1}).device_ms.empty());  // no device anywhere: nothing kept
  EXPECT_TRUE(merge_group({r0, r1}).device_passes.empty());
  EXPECT_TRUE(place_group(merge_group({r0, r1}), 0, 2).device_ms.empty());
}

TEST(DeviceRows, SummaryReportsThemBesideTheWallTimeOnlyWhenRecorded) {
  ModeData d;
  d.mode = kModeBaseline;
  d.n_ranks = 2;
  SequenceRecord s;
  s.prompt_index = 0;
  s.generated = 4;
  s.verify_steps = 3;
  d.sequences = {s};
  for (int st = 0; st < 3; ++st) {
    d.steps.push_back(StepRecord{0, st, 0, 1, 0, 0, 0, 0, 1});
    for (int k = 0; k < 2; ++k)
      for (int p = 0; p < kNumPhases; ++p) d.timings_ms.push_back(1.0f);
  }
  ModeSummary plain = summarize_mode(d);
  EXPECT_TRUE(plain.device_phases.empty());
  RunSummary run;
  run.modes = {plain};
  EXPECT_EQ(format_summary(run).find("device:"), std::string::npos);
  EXPECT_TRUE(summary_to_json(run)["modes"][kModeBaseline]["device_phases_ms"].empty());

  // Device verify 2, 4, 6 ms on rank 0; rank 1 without a device (NaN): the mean over ranks with
  // a value is rank 0's.
  for (int st = 0; st < 3; ++st) {
    const std::vector<float> r = row(0, 2.0f * (st + 1), 0.5f, 0.1f);
    d.device_ms.insert(d.device_ms.end(), r.begin(), r.end());
    d.device_ms.insert(d.device_ms.end(), kNumDeviceColumns, kNaN);
  }
  ModeSummary m = summarize_mode(d);
  ASSERT_EQ(m.device_phases.size(), static_cast<std::size_t>(kNumDeviceColumns));
  EXPECT_NEAR(m.device_phases.at("verify").mean, 4.0, 1e-6);
  EXPECT_NEAR(m.device_phases.at("verify").p50, 4.0, 1e-6);
  EXPECT_NEAR(m.device_phases.at("total").mean, 4.6, 1e-5);
  run.modes = {m};
  const std::string text = format_summary(run);
  EXPECT_NE(text.find("device: mean"), std::string::npos) << text;
  // The verify line carries its device mean; comm has none on the device.
  const std::size_t verify = text.find("baseline    verify");
  ASSERT_NE(verify, std::string::npos) << text;
  const std::string verify_line = text.substr(verify, text.find('\n', verify) - verify);
  EXPECT_NE(verify_line.find("4.000    4.000    5.600"), std::string::npos) << verify_line;
  const std::size_t comm = text.find("baseline    comm");
  ASSERT_NE(comm, std::string::npos) << text;
  EXPECT_NE(text.substr(comm, text.find('\n', comm) - comm).find('-'), std::string::npos) << text;
  const nlohmann::json j = summary_to_json(run)["modes"][kModeBaseline]["device_phases_ms"];
  EXPECT_NEAR(j["verify"]["mean"].get<double>(), 4.0, 1e-6);
  EXPECT_TRUE(m.device_passes.empty());
  EXPECT_EQ(text.find("device forward passes"), std::string::npos) << text;

  // Pass rows: the verify pass captured in step 0, replayed in steps 1 and 2, then launched kernel
  // by kernel in step 2: once eager, twice unrecorded; rank 1 without a device.
  for (int st = 0; st < 3; ++st) {
    std::vector<float> r(kNumPassColumns, 0.0f);
    r[static_cast<std::size_t>(pass_column(kPhaseVerify) + (st == 0 ? 1 : 0))] = 1;
    if (st == 2) r[static_cast<std::size_t>(pass_column(kPhaseVerify) + 2)] = 1;
    if (st == 2) r[static_cast<std::size_t>(pass_column(kPhaseVerify) + 3)] = 2;
    d.device_passes.insert(d.device_passes.end(), r.begin(), r.end());
    d.device_passes.insert(d.device_passes.end(), kNumPassColumns, kNaN);
  }
  m = summarize_mode(d);
  ASSERT_EQ(m.device_passes.size(), 1u) << "no draft passes: no draft entry";
  const DevicePassCounts& v = m.device_passes.at("verify");
  EXPECT_EQ(v.replayed, 2);
  EXPECT_EQ(v.captured, 1);
  EXPECT_EQ(v.eager, 1);
  EXPECT_EQ(v.unrecorded, 2);
  EXPECT_NEAR(v.graph_share(), 0.5, 1e-12);
  run.modes = {m};
  const std::string with_passes = format_summary(run);
  const std::size_t table = with_passes.find("device forward passes");
  ASSERT_NE(table, std::string::npos) << with_passes;
  EXPECT_NE(
      with_passes.find(
          "baseline    verify               6           50.0%         1         1           2",
          table),
      std::string::npos)
      << with_passes;
  EXPECT_EQ(with_passes.find("<-- mostly kernel by kernel"), std::string::npos) << with_passes;
  const nlohmann::json jp = summary_to_json(run)["modes"][kModeBaseline]["device_passes"];
  EXPECT_EQ(jp["verify"]["passes"].get<double>(), 6);
  EXPECT_EQ(jp["verify"]["unrecorded"].get<double>(), 2);
  EXPECT_NEAR(jp["verify"]["graph_share"].get<double>(), 0.5, 1e-12);
  // Fewer than half as graphs: the row is marked.
  d.device_passes[pass_column(kPhaseVerify) + 3] += 1;
  run.modes = {summarize_mode(d)};
  EXPECT_NE(format_summary(run).find("42.9%         1         1           3  <-- mostly kernel by "
                                     "kernel\n"),
            std::string::npos)
      << format_summary(run);
}
