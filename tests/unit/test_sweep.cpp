// Sweep grids (analysis/sweep.h): axes, coupled keys, the Cartesian product's order and the point
// names that become file names; every malformed axis is an error naming it, as are grids whose
// points would share a file, names too long for a file system and grids too large to list; and
// what a sweep makes of an existing point file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <limits>

#include "analysis/sweep.h"
#include "common/error.h"
#include "io/result_file.h"
#include "tests/unit/temp_dir.h"

using namespace specrun;

namespace {

std::string error_of(const std::string& text) {
  try {
    parse_grid_axis(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The message sweep_points throws for these axes (exit code 2), "(no error)" when none.
std::string grid_error(const std::vector<std::string>& axes) {
  std::vector<GridAxis> parsed;
  for (const std::string& a : axes) parsed.push_back(parse_grid_axis(a));
  try {
    sweep_points(parsed);
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), kExitUsage);
    return e.message();
  }
  return "(no error)";
}

TEST(Sweep, ProductFirstAxisSlowestWithFileSafeNames) {
  const std::vector<SweepPoint> p = sweep_points(
      {parse_grid_axis("decode.draft_len=1,4"), parse_grid_axis("decode.temperature=0,0.8")});
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0].name, "draft_len=1_temperature=0");
  EXPECT_EQ(p[1].name, "draft_len=1_temperature=0.8");
  EXPECT_EQ(p[2].name, "draft_len=4_temperature=0");
  EXPECT_EQ(p[3].sets, (std::vector<std::pair<std::string, std::string>>{
                           {"decode.draft_len", "4"}, {"decode.temperature", "0.8"}}));
  const std::vector<SweepPoint> q = sweep_points({parse_grid_axis("target.path=/m/a b,x/y")});
  EXPECT_EQ(q[0].name, "path=_m_a_b");  // '/' and ' ' cannot be in a file name
  EXPECT_EQ(q[1].sets[0].second, "x/y");
  EXPECT_TRUE(sweep_points({}).empty());
}

TEST(Sweep, CoupledKeysTakeTuples) {
  const GridAxis a =
      parse_grid_axis("decode.tree_top_k+decode.tree_depth+decode.tree_nodes=1/4/4,4/5/15");
  ASSERT_EQ(a.keys.size(), 3u);
  ASSERT_EQ(a.values.size(), 2u);
  const std::vector<SweepPoint> p = sweep_points({a});
  EXPECT_EQ(p[1].name, "tree_top_k+tree_depth+tree_nodes=4-5-15");
  EXPECT_EQ(p[1].sets[2], (std::pair<std::string, std::string>{"decode.tree_nodes", "15"}));
}

// Values that are paths hold '/': their coupled parts are separated by '|' (issue 48).
TEST(Sweep, CoupledPathsAreSeparatedByABar) {
  const GridAxis a = parse_grid_axis("draft.kind+draft.path=model|/m/draft a,eagle3|/m/heads/e3");
  ASSERT_EQ(a.values.size(), 2u);
  EXPECT_EQ(a.values[0], (std::vector<std::string>{"model", "/m/draft a"}));
  EXPECT_EQ(a.values[1], (std::vector<std::string>{"eagle3", "/m/heads/e3"}));
  EXPECT_NE(error_of("draft.kind+draft.path=model/m/draft")
                .find("or with '|' when a value holds a '/', e.g. a path"),
            std::string::npos);
}

TEST(Sweep, MalformedAxesAreErrorsNamingThem) {
  EXPECT_NE(error_of("decode.draft_len").find("--grid decode.draft_len: expected KEY=V1,V2"),
            std::string::npos);
  EXPECT_NE(error_of("draft_len=1,2").find("'draft_len' is not a section.key option name"),
            std::string::npos);
  EXPECT_NE(error_of("decode.draft_len=1,,2").find("an empty value"), std::string::npos);
  EXPECT_NE(error_of("decode.tree_top_k+decode.tree_depth=4/5,8")
                .find("value '8' has 1 part(s) for 2 coupled keys"),
            std::string::npos);
  try {
    sweep_points({parse_grid_axis("decode.draft_len=1"), parse_grid_axis("decode.draft_len=2")});
    FAIL() << "a key swept twice was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("decode.draft_len is swept by two axes"),
              std::string::npos);
  }
}

// Values that differ only in characters the file name replaces would share one result file: the
// second point would be skipped as finished and reported with the first's numbers.
TEST(Sweep, PointsThatWouldShareAFileAreRefusedBeforeAnythingRuns) {
  std::string e = grid_error({"target.path=/m/a_b,/m/a/b"});
  EXPECT_NE(e.find("points 1 (target.path=/m/a_b) and 2 (target.path=/m/a/b) would share the "
                   "result file path=_m_a_b.h5"),
            std::string::npos)
      << e;
  // Coupled values: where the '-' joining the parts falls.
  e = grid_error({"data.prompts+draft.path=a-b/c,a/b-c"});
  EXPECT_NE(e.find("would share the result file prompts+path=a-b-c.h5"), std::string::npos) << e;
  // The same collision behind another axis is found in every combination, named by the first.
  e = grid_error({"decode.draft_len=1,2", "draft.path=x y,x_y"});
  EXPECT_NE(e.find("points 1 (decode.draft_len=1 draft.path=x y) and 2"), std::string::npos) << e;
  EXPECT_EQ(grid_error({"target.path=/m/a,/m/b", "decode.temperature=0,0.7"}), "(no error)");
}

TEST(Sweep, NamesTooLongForAFileAreRefused) {
  const std::string e = grid_error({"draft.path=" + std::string(250, 'p')});
  EXPECT_NE(e.find("point 1 (draft.path=ppp"), std::string::npos) << e;
  EXPECT_NE(e.find("would be written to a file named 255 bytes + \".log\", longer than a file "
                   "name may be (255 bytes)"),
            std::string::npos)
      << e;
  EXPECT_EQ(grid_error({"draft.path=" + std::string(245, 'p')}), "(no error)");  // 251 bytes
}

// A 10^9-point grid is refused from the axes' sizes, before any point is listed (it ended in
// std::bad_alloc).
TEST(Sweep, HugeGridsAreRefusedBeforeListingTheirPoints) {
  std::string values;
  for (int i = 0; i < 1000; ++i) values += (i ? "," : "") + std::to_string(i);
  const std::vector<std::string> axes = {"decode.draft_len=" + values, "decode.top_k=" + values,
                                         "decode.seed=" + values};
  std::vector<GridAxis> parsed;
  for (const std::string& a : axes) parsed.push_back(parse_grid_axis(a));
  EXPECT_EQ(sweep_point_count(parsed), 1000000000);
  const std::string e = grid_error(axes);
  EXPECT_NE(e.find("the grid has 1000000000 points (1000 x 1000 x 1000 values), more than the "
                   "100000 a sweep may run"),
            std::string::npos)
      << e;
  // Saturated rather than overflowed: 1000^7 > 2^63.
  const std::vector<GridAxis> seven(7, parsed.front());
  EXPECT_EQ(sweep_point_count(seven), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(sweep_point_count({}), 0);
}

ResultHeader header_with_hash(const std::string& hash) {
  ResultHeader h;
  h.specrun_version = "0.1.0-test";
  h.job_toml = "[job]\n";
  h.resolved_json = "{}";
  h.config_hash = hash;
  h.prompts_hash = "fnv1a64:0000000000000001";
  h.provenance = {"{}"};
  return h;
}

// What the sweep decides from an existing point file, read in a child process.
TEST(Sweep, ExistingPointFilesAreSkippedOnlyWhenTheyAreThePointsFinishedRun) {
  test::TempDir d;
  using State = PointFile::State;
  EXPECT_EQ(inspect_point_file(d.file("absent.h5"), "0x1").state, State::kAbsent);
  ResultWriter::create(d.file("finished.h5"), header_with_hash("0x1"), false).finish();
  EXPECT_EQ(inspect_point_file(d.file("finished.h5"), "0x1").state, State::kFinished);
  // Finished, but by another configuration (another sweep's file): not this point's numbers.
  const PointFile other = inspect_point_file(d.file("finished.h5"), "0x2");
  EXPECT_EQ(other.state, State::kRefused);
  EXPECT_NE(other.reason.find("is the finished result of another configuration (hash 0x1; this "
                              "point's is 0x2)"),
            std::string::npos)
      << other.reason;
  { ResultWriter w = ResultWriter::create(d.file("partial.h5"), header_with_hash("0x1"), false); }
  EXPECT_EQ(inspect_point_file(d.file("partial.h5"), "0x1").state, State::kUnfinished);
  std::ofstream(d.file("text.h5")) << "not HDF5";
  const PointFile text = inspect_point_file(d.file("text.h5"), "0x1");
  EXPECT_EQ(text.state, State::kRefused);
  EXPECT_NE(text.reason.find("text.h5"), std::string::npos) << text.reason;
  ASSERT_EQ(::symlink(d.file("finished.h5").c_str(), d.file("link.h5").c_str()), 0);
  const PointFile link = inspect_point_file(d.file("link.h5"), "0x1");
  EXPECT_EQ(link.state, State::kRefused);
  EXPECT_NE(link.reason.find("is a symbolic link"), std::string::npos) << link.reason;
}

}  // namespace
