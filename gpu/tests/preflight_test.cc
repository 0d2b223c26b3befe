#include "trainlet/gpu/preflight.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/wait.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <thread>
#include <sstream>

namespace trainlet::gpu {
namespace {

using exitcodes::FailureClass;

class PreflightTest : public ::testing::Test {
 protected:
  void SetUp() override {
    trace_ = ::testing::TempDir() + "/nccl-trace-" + std::to_string(::getpid());
    ::unlink(trace_.c_str());
    auto nccl = Nccl::Load(FAKE_LIBNCCL);
    ASSERT_TRUE(nccl.ok());
    auto ids = (*nccl)->MakeUniqueIds(1);
    ASSERT_TRUE(ids.ok());
    o_.self_exe = PREFLIGHT_CHILD;
    o_.env = {{"TRAINLET_LIBCUDA", FAKE_LIBCUDA},
              {"TRAINLET_LIBNCCL", FAKE_LIBNCCL},
              {"FAKE_NCCL_TRACE", trace_},
              {"FAKE_CUDA_DEVICES", "2"}};
    o_.rank_base = 2;
    o_.nproc_per_node = 2;
    o_.world_size = 4;
    o_.ids = *ids;
    o_.timeout = std::chrono::milliseconds(2000);
    o_.bytes = 1 << 16;
    o_.pod = "trainer-1";
  }
  std::string Trace() {
    std::ifstream in(trace_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  PreflightOptions o_;
  std::string trace_;
};

TEST_F(PreflightTest, HealthyGangPasses) {
  PreflightReport r = RunPreflight(o_);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_FALSE(r.skipped);
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_EQ(r.ranks[1].rank, 3u);
  EXPECT_EQ(r.ranks[1].gpu, "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f");
  EXPECT_GT(r.ranks[0].busbw_gbps, 0);
  EXPECT_NE(r.summary.find("GPU preflight ok: 2 GPU(s), world 4"), std::string::npos);
  std::string trace = Trace();
  EXPECT_NE(trace.find("ncclCommInitRankConfig"), std::string::npos);
  EXPECT_NE(trace.find("ncclCommDestroy"), std::string::npos);
  EXPECT_EQ(trace.find("ncclCommAbort"), std::string::npos);
}

TEST_F(PreflightTest, NoGpuIsSkippedUnlessRequired) {
  o_.env["FAKE_CUDA_DEVICES"] = "0";
  PreflightReport r = RunPreflight(o_);
  ASSERT_TRUE(r.status.ok()) << r.status.message();
  EXPECT_TRUE(r.skipped);
  EXPECT_NE(r.summary.find("no GPU: preflight skipped"), std::string::npos) << r.summary;
  o_.env["TRAINLET_LIBCUDA"] = "/nonexistent/libcuda.so.1";
  r = RunPreflight(o_);
  EXPECT_TRUE(r.status.ok() && r.skipped);
  o_.require_gpus = true;
  r = RunPreflight(o_);
  EXPECT_EQ(r.status.failure_class(), FailureClass::kHardware);
  EXPECT_NE(r.status.message().find("--require-gpus but no GPU"), std::string::npos);
}

TEST_F(PreflightTest, InitThatNeverCompletesIsAbortedAtTheDeadline) {
  o_.env["FAKE_NCCL_MODE"] = "init_hang";
  o_.timeout = std::chrono::milliseconds(500);
  auto t0 = std::chrono::steady_clock::now();
  PreflightReport r = RunPreflight(o_);
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.status.failure_class(), FailureClass::kInfra);
  EXPECT_NE(r.status.message().find("pod trainer-1, rank 2 (local rank 0, GPU-00010203"),
            std::string::npos)
      << r.status.message();
  EXPECT_NE(r.status.message().find("NCCL init timed out"), std::string::npos);
  EXPECT_NE(Trace().find("ncclCommAbort"), std::string::npos);
  EXPECT_LT(took, std::chrono::seconds(5));
}

TEST_F(PreflightTest, CancelEndsAHungPreflightAtOnceAndReapsTheChildren) {
  o_.env["FAKE_NCCL_MODE"] = "init_hang";
  o_.timeout = std::chrono::milliseconds(60'000);
  std::atomic<bool> cancel{false};
  o_.cancel = &cancel;
  std::thread canceller([&cancel] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancel.store(true);
  });
  auto t0 = std::chrono::steady_clock::now();
  PreflightReport r = RunPreflight(o_);
  auto took = std::chrono::steady_clock::now() - t0;
  canceller.join();
  EXPECT_EQ(r.status.failure_class(), FailureClass::kTerminated) << r.status.message();
  EXPECT_LT(took, std::chrono::seconds(5));
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);  // no child left: killed and reaped
  EXPECT_EQ(errno, ECHILD);
}

TEST_F(PreflightTest, FailureClasses) {
  struct Row {
    std::map<std::string, std::string> env;
    double min_busbw;
    FailureClass want;
    std::string text;
  };
  const std::vector<Row> rows = {
      {{{"FAKE_NCCL_MODE", "async_error"}}, 0, FailureClass::kInfra, "NCCL init failed: ncclRemoteError"},
      {{{"FAKE_NCCL_MODE", "cuda_error"}}, 0, FailureClass::kHardware, "ncclUnhandledCudaError"},
      {{{"FAKE_NCCL_MODE", "wrong_result"}}, 0, FailureClass::kHardware, "expected 10.0"},
      {{{"FAKE_NCCL_MODE", "slow"}}, 1e6, FailureClass::kInfra, "is below --preflight-min-busbw"},
      {{{"FAKE_NCCL_VERSION", "22703"}}, 0, FailureClass::kInfra, "differs from the leader's 22809"},
      {{{"TRAINLET_LIBNCCL", "/nonexistent/libnccl.so.2"}}, 0, FailureClass::kInfra, "NCCL unavailable"},
      {{{"FAKE_CUDA_ALLOC_RC", "214"}}, 0, FailureClass::kHardware, "CUDA_ERROR_ECC_UNCORRECTABLE"},
      {{{"FAKE_CUDA_DEVICES", "1"}}, 0, FailureClass::kHardware, "local rank 1 has no GPU"},
  };
  {
    PreflightOptions o = o_;
    o.ids = {};  // the leader had no NCCL
    PreflightReport r = RunPreflight(o);
    EXPECT_EQ(r.status.failure_class(), FailureClass::kInfra);
    EXPECT_NE(r.status.message().find("no NCCL unique id from the leader"), std::string::npos);
  }
  for (const Row& row : rows) {
    PreflightOptions o = o_;
    for (const auto& [k, v] : row.env) o.env[k] = v;
    o.min_busbw_gbps = row.min_busbw;
    PreflightReport r = RunPreflight(o);
    EXPECT_EQ(r.status.failure_class(), row.want) << r.status.message();
    EXPECT_NE(r.status.message().find(row.text), std::string::npos) << r.status.message();
    EXPECT_NE(r.status.message().find("pod trainer-1, rank "), std::string::npos);
  }
}

TEST(PreflightLineTest, ParsesTheChildsLine) {
  PreflightRank r;
  ASSERT_TRUE(ParsePreflightLine(
      R"({"rank":5,"local_rank":1,"gpu":"GPU-x","class":"hardware","reason":"bad","busbw_gbps":3.5})",
      &r));
  EXPECT_EQ(r.rank, 5u);
  EXPECT_EQ(r.failure_class, FailureClass::kHardware);
  EXPECT_EQ(r.busbw_gbps, 3.5);
  EXPECT_FALSE(ParsePreflightLine("Segmentation fault", &r));
}

}  // namespace
}  // namespace trainlet::gpu
