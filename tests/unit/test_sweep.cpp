// Sweep grids (engine/sweep.h): axes, coupled keys, the Cartesian product's order and the point
// names that become file names; every malformed axis is an error naming it.
#include <gtest/gtest.h>

#include "common/error.h"
#include "engine/sweep.h"

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

}  // namespace
