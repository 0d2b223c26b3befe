// The schedule's text form (sim.h ParseSchedule, ScheduleText): what parses
// prints back to the same schedule, and bad lines are one-line errors.
#include <gtest/gtest.h>

#include "sim.h"

namespace trainlet::sim {
namespace {

std::string ErrorOf(const std::string& text) {
  std::string error;
  EXPECT_FALSE(ParseSchedule(text, &error).has_value()) << text;
  return error;
}

// A fault line before the configuration was checked against the default gang
// (2 pods): it could be refused, or accepted and then refused once printed
// (configuration first). Found by fuzz_schedule's round trip.
TEST(ScheduleTest, FaultsAreCheckedAgainstTheConfigurationWhateverTheOrder) {
  const std::string text = "fault 30000 kill 3 0\nconfig pods=4 min=4 max=4\n";
  std::string error;
  const auto s = ParseSchedule(text, &error);
  ASSERT_TRUE(s) << error;
  EXPECT_EQ(s->faults.at(0).pod, 3u);
  const auto again = ParseSchedule(ScheduleText(*s), &error);
  ASSERT_TRUE(again) << error;
  EXPECT_EQ(ScheduleText(*again), ScheduleText(*s));

  EXPECT_NE(ErrorOf("fault 1 kill 2 0\nconfig pods=1 min=1 max=1\n").find("beyond MAX"),
            std::string::npos);
}

TEST(ScheduleTest, NumbersOutOfTheirFieldAreRefused) {
  // 2^32 + 4 used to wrap to 4 pods.
  EXPECT_NE(ErrorOf("config pods=4294967300 min=4 max=4\n").find("pods="), std::string::npos);
  EXPECT_NE(ErrorOf("config pods=-1\n").find("line 1"), std::string::npos);
  EXPECT_FALSE(ErrorOf("fault 30000 kill 1 5x\n").empty());
  EXPECT_FALSE(ErrorOf("config pods=2 min=2 max=2 colour=blue\n").empty());
  EXPECT_FALSE(ErrorOf("config pods=2000 min=2000 max=2000\n").empty());
  EXPECT_FALSE(ErrorOf("fault 30000 kill 1 5 extra\n").empty());
  EXPECT_FALSE(ErrorOf("expect codes=0,0 restarts=x\n").empty());
}

}  // namespace
}  // namespace trainlet::sim
