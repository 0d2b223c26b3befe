#include <unistd.h>
#include "trainlet/gpu/devices.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>

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

namespace trainlet::gpu {
namespace {

TEST(DiscoverTest, ListsTheFakeDriversDevices) {
  ::setenv("FAKE_CUDA_DEVICES", "2", 1);
  Discovery d = Discover(FAKE_LIBCUDA);
  ASSERT_TRUE(d.available) << d.detail;
  ASSERT_EQ(d.gpus.size(), 2u);
  EXPECT_EQ(d.gpus[1].index, 1);
  EXPECT_EQ(d.gpus[1].uuid, "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f");
  EXPECT_EQ(d.gpus[1].pci_bus_id, "0000:1a:00.0");
  ::unsetenv("FAKE_CUDA_DEVICES");
}

TEST(DiscoverTest, NoDeviceAndNoLibraryAreUnavailable) {
  ::setenv("FAKE_CUDA_DEVICES", "0", 1);
  Discovery none = Discover(FAKE_LIBCUDA);
  EXPECT_FALSE(none.available);
  EXPECT_NE(none.detail.find("no CUDA-capable device"), std::string::npos) << none.detail;
  ::unsetenv("FAKE_CUDA_DEVICES");
  Discovery missing = Discover("/nonexistent/libcuda.so.1");
  EXPECT_FALSE(missing.available);
  EXPECT_NE(missing.detail.find("no CUDA driver"), std::string::npos) << missing.detail;
}

TEST(DiscoverInChildTest, SameAnswerAsInProcess) {
  ::setenv("FAKE_CUDA_DEVICES", "3", 1);
  Discovery d = DiscoverInChild(FAKE_LIBCUDA);
  ::unsetenv("FAKE_CUDA_DEVICES");
  ASSERT_TRUE(d.available) << d.detail;
  ASSERT_EQ(d.gpus.size(), 3u);
  EXPECT_EQ(d.gpus[2].pci_bus_id, "0000:1b:00.0");
  EXPECT_TRUE(d.gpus[0].uuid.starts_with("GPU-00010203-"));
}

TEST(DiscoverInChildTest, AHungDriverIsKilledAtTheDeadline) {
  ::setenv("FAKE_CUDA_HANG", "1", 1);
  auto t0 = std::chrono::steady_clock::now();
  Discovery d = DiscoverInChild(FAKE_LIBCUDA, std::chrono::milliseconds(300));
  auto took = std::chrono::steady_clock::now() - t0;
  ::unsetenv("FAKE_CUDA_HANG");
  EXPECT_FALSE(d.available);
  EXPECT_NE(d.detail.find("no answer within 300 ms"), std::string::npos) << d.detail;
  EXPECT_LT(took, std::chrono::seconds(3));
}

TEST(WorkersPerPodTest, Table) {
  Discovery two{true, {{0, "GPU-a", ""}, {1, "GPU-b", ""}}, "2 GPU(s)"};
  Discovery none{false, {}, "no CUDA driver: libcuda.so.1: cannot open"};
  struct Row {
    std::string value;
    const Discovery* d;
    std::optional<std::string> want;  // nullopt: a config error
  };
  const std::vector<Row> rows = {
      {"auto", &two, "2"}, {"gpu", &two, "2"}, {"auto", &none, std::to_string(::sysconf(_SC_NPROCESSORS_ONLN))},
      {"gpu", &none, std::nullopt}, {"4", &none, "4"}, {"x", &two, "x"},
  };
  for (const Row& r : rows) {
    auto got = ResolveWorkersPerPod("--nproc-per-node", r.value, *r.d);
    ASSERT_EQ(got.ok(), r.want.has_value()) << r.value;
    if (r.want) {
      EXPECT_EQ(*got, *r.want) << r.value;
    } else {
      EXPECT_EQ(got.status().failure_class(), exitcodes::FailureClass::kConfig);
      EXPECT_NE(got.status().message().find("--nproc-per-node='gpu' but no GPU"), std::string::npos);
      EXPECT_NE(got.status().message().find("cannot open"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace trainlet::gpu
