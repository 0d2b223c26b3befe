#include "trainlet/gpu/devices.h"

#include <gtest/gtest.h>

namespace trainlet::gpu {
namespace {

using Kind = VisibleDevices::Kind;

TEST(VisibleDevicesTest, Table) {
  struct Row {
    std::optional<std::string> value;
    bool ok;
    Kind kind;
    std::vector<std::string> entries;
  };
  const std::vector<Row> rows = {
      {std::nullopt, true, Kind::kUnset, {}},
      {"all", true, Kind::kAll, {}},
      {"none", true, Kind::kNone, {}},
      {"void", true, Kind::kNone, {}},
      {"", true, Kind::kNone, {}},
      {"0", true, Kind::kList, {"0"}},
      {"3,1", true, Kind::kList, {"3", "1"}},
      {"GPU-8f6c1e2a-0000-1111-2222-333344445555,1", true, Kind::kList,
       {"GPU-8f6c1e2a-0000-1111-2222-333344445555", "1"}},
      {"0,,1", false, Kind::kList, {}},
      {"0,x", false, Kind::kList, {}},
      {"1,1", false, Kind::kList, {}},
  };
  for (const Row& r : rows) {
    auto got = ParseVisibleDevices("CUDA_VISIBLE_DEVICES", r.value);
    ASSERT_EQ(got.ok(), r.ok) << r.value.value_or("(unset)");
    if (!r.ok) {
      EXPECT_NE(got.status().message().find("CUDA_VISIBLE_DEVICES="), std::string::npos);
      continue;
    }
    EXPECT_EQ(got->kind, r.kind) << r.value.value_or("(unset)");
    EXPECT_EQ(got->entries, r.entries);
  }
}

TEST(ProbeTest, ReportsAvailabilityWithoutCrashing) {
  Availability a = Probe();
  EXPECT_FALSE(a.detail.empty());
  if (!a.available) {
    EXPECT_EQ(a.device_count, 0);
  }
}

}  // namespace
}  // namespace trainlet::gpu
