// The run-time acceptance alarm (engine/acceptance_alarm.h): silent before alarm_steps verify
// steps, a warning said once when the acceptance is 0 or tau rounds to 1.00, a stop whenever tau
// is below min_tau past that point, nothing when the draft accepts or the alarm is off; and the
// result file keeps the alarms (ResultWriter::record_alarm, read back as ResultInfo::alarms).
#include <gtest/gtest.h>

#include <string>

#include "engine/acceptance_alarm.h"
#include "io/result_file.h"
#include "result_file_fixtures.h"

using namespace specrun;

namespace {

// A speculative batch of `seqs` sequences, each with `steps` verify steps of `draft` drafted
// tokens, `accepted` of them accepted in all.
BatchResult batch(int seqs, int steps, int draft, int accepted) {
  BatchResult b;
  for (int i = 0; i < seqs; ++i) {
    SequenceRecord s;
    s.verify_steps = steps;
    s.drafted = static_cast<std::int64_t>(steps) * draft;
    s.accepted = accepted;
    s.generated = 1 + steps + accepted;
    b.sequences.push_back(s);
  }
  return b;
}

}  // namespace

TEST(AcceptanceAlarm, WarnsOnceAfterAlarmStepsWhenNothingIsAccepted) {
  AcceptanceAlarm alarm(100, 0.0);
  EXPECT_TRUE(alarm.add(batch(4, 15, 4, 0)).warning.empty());        // 60 steps: too early
  const AcceptanceAlarm::Verdict v = alarm.add(batch(4, 15, 4, 0));  // 120
  EXPECT_NE(v.warning.find("tau 1.00 after 120 verify steps (0 of 480 drafted tokens accepted)"),
            std::string::npos)
      << v.warning;
  EXPECT_TRUE(v.stop.empty());
  EXPECT_TRUE(alarm.add(batch(4, 15, 4, 0)).warning.empty());  // said once
}

TEST(AcceptanceAlarm, TauThatRoundsToOneWarnsAndAcceptingDraftsDoNot) {
  AcceptanceAlarm low(10, 0.0);
  EXPECT_FALSE(low.add(batch(1, 400, 4, 1)).warning.empty());  // tau 1.0025
  AcceptanceAlarm fine(10, 0.0);
  EXPECT_TRUE(fine.add(batch(1, 400, 4, 3)).warning.empty());  // tau 1.0075
  AcceptanceAlarm good(10, 1.5);
  const AcceptanceAlarm::Verdict v = good.add(batch(4, 15, 4, 30));  // tau 3
  EXPECT_TRUE(v.warning.empty() && v.stop.empty());
  EXPECT_DOUBLE_EQ(good.tau(), 3.0);
}

TEST(AcceptanceAlarm, MinTauStopsOncePastAlarmStepsAndNotBefore) {
  AcceptanceAlarm alarm(50, 1.5);
  EXPECT_TRUE(alarm.add(batch(2, 20, 4, 5)).stop.empty());  // 40 steps, tau 1.25: too early
  const AcceptanceAlarm::Verdict v = alarm.add(batch(2, 20, 4, 5));
  EXPECT_NE(v.stop.find("decode.min_tau = 1.5: tau 1.25 after 80 verify steps"), std::string::npos)
      << v.stop;
  EXPECT_TRUE(v.warning.empty());  // tau 1.25 is low, not an acceptance of nothing
  // Later batches that lift tau above min_tau end the stop.
  EXPECT_TRUE(alarm.add(batch(2, 20, 4, 60)).stop.empty());
}

TEST(AcceptanceAlarm, OffWhenAlarmStepsIsZero) {
  AcceptanceAlarm alarm(0, 2.0);
  const AcceptanceAlarm::Verdict v = alarm.add(batch(8, 100, 4, 0));
  EXPECT_TRUE(v.warning.empty() && v.stop.empty());
}

TEST(AcceptanceAlarm, ResultFileKeepsTheAlarmsInOrder) {
  using namespace specrun::result_test;
  TempDir dir;
  const std::string path = dir.file("alarms.h5");
  {
    ResultWriter w = ResultWriter::create(path, make_header(), false);
    w.append_batch(kModeSpeculative, make_batch(0, kDraftLen));
    w.record_alarm("first");
    w.record_alarm("second");
  }  // not finished: a stopped job's file
  ResultReader r(path);
  ASSERT_EQ(r.info().alarms.size(), 2u);
  EXPECT_NE(r.info().alarms[0].find(" first"), std::string::npos);
  EXPECT_NE(r.info().alarms[1].find(" second"), std::string::npos);
  EXPECT_TRUE(r.info().finished.empty());
  EXPECT_EQ(r.batches_committed(kModeSpeculative), 1);
}
