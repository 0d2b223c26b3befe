#include "trainlet/gpu/health.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace trainlet::gpu {
namespace {

TEST(HealthTest, HealthyGpusGiveNoEvidence) {
  ::unsetenv("FAKE_NVML_BAD");
  HealthReport r = CheckHealth(FAKE_LIBNVML, std::chrono::milliseconds(20));
  ASSERT_TRUE(r.available) << r.detail;
  ASSERT_EQ(r.gpus.size(), 2u);
  EXPECT_FALSE(HardwareEvidence(r).has_value());
}

TEST(HealthTest, EccXidAndRecoveryActionNameTheGpu) {
  ::setenv("FAKE_NVML_BAD", "1", 1);
  ::setenv("FAKE_NVML_XID", "79", 1);
  HealthReport r = CheckHealthInChild(FAKE_LIBNVML, std::chrono::milliseconds(50));
  ::unsetenv("FAKE_NVML_BAD");
  ::unsetenv("FAKE_NVML_XID");
  ASSERT_TRUE(r.available) << r.detail;
  auto e = HardwareEvidence(r);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(*e,
            "GPU 1 (GPU-00000000-0000-0000-0000-000000000001): 3 uncorrected ECC errors, Xid 79, "
            "recovery action: node reboot");
}

TEST(HealthTest, NvmlXidsGoThroughTheCatalogueByNumber) {
  ::setenv("FAKE_NVML_BAD", "1", 1);
  ::setenv("FAKE_NVML_ECC", "0", 1);
  ::setenv("FAKE_NVML_ACTION", "0", 1);
  ::setenv("FAKE_NVML_XID", "31", 1);
  HealthReport r = CheckHealthInChild(FAKE_LIBNVML, std::chrono::milliseconds(50));
  for (const char* n : {"FAKE_NVML_BAD", "FAKE_NVML_ECC", "FAKE_NVML_ACTION", "FAKE_NVML_XID"}) {
    ::unsetenv(n);
  }
  ASSERT_TRUE(r.available) << r.detail;
  ASSERT_EQ(r.gpus.size(), 2U);
  EXPECT_EQ(r.gpus[1].xids, (std::vector<std::uint64_t>{31}));
  EXPECT_FALSE(HardwareEvidence(r).has_value()) << "Xid 31 is the application's";
  HealthReport mixed{true, "1 GPU(s)", {{0, "GPU-a", 0, false, false, false, 0, {31, 13, 94}}}};
  EXPECT_EQ(HardwareEvidence(mixed), "GPU 0 (GPU-a): Xid 94");
  mixed.gpus[0].xids = {31};
  mixed.gpus[0].ecc_uncorrected = 1;  // the ECC counter decides
  EXPECT_EQ(HardwareEvidence(mixed), "GPU 0 (GPU-a): 1 uncorrected ECC errors");
}

TEST(HealthTest, MissingNvmlIsUnavailableNotAFault) {
  HealthReport r = CheckHealthInChild("/nonexistent/libnvml.so.1");
  EXPECT_FALSE(r.available);
  EXPECT_NE(r.detail.find("NVML unavailable"), std::string::npos) << r.detail;
  EXPECT_FALSE(HardwareEvidence(r).has_value());
}

TEST(HealthTest, SerializeRoundTrips) {
  HealthReport r{true, "1 GPU(s)", {{0, "GPU-a", 2, true, false, true, 1, {48, 79}}}};
  HealthReport back = ParseHealth(SerializeHealth(r));
  EXPECT_EQ(HardwareEvidence(back), HardwareEvidence(r));
  EXPECT_EQ(back.gpus[0].xids, (std::vector<std::uint64_t>{48, 79}));
}

}  // namespace
}  // namespace trainlet::gpu
