#include "trainlet/session.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>

#include "trainlet/agent/pod/evidence.h"
#include "trainlet/exitcodes/classify.h"
#include "trainlet/gpu/nccl.h"

namespace trainlet {
namespace {

using namespace std::chrono_literals;

// Sets variables for one test and restores them afterwards.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::string>& vars) {
    for (const auto& [k, v] : vars) {
      const char* old = std::getenv(k.c_str());
      saved_[k] = old ? std::optional<std::string>(old) : std::nullopt;
      ::setenv(k.c_str(), v.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v) ::setenv(k.c_str(), v->c_str(), 1); else ::unsetenv(k.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(SessionTest, WithoutALauncherItIsRankZeroOfOne) {
  for (const char* k : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                        "TRAINLET_HEARTBEAT_FILE", "TORCHELASTIC_ERROR_FILE"}) {
    ::unsetenv(k);
  }
  auto s = Session::Create();
  ASSERT_TRUE(s) << s.error;
  Session& session = **s.value;
  EXPECT_FALSE(session.under_trainlet());
  EXPECT_EQ(session.rank(), 0);
  EXPECT_EQ(session.world_size(), 1);
  EXPECT_NE(session.master_port(), 0);
  EXPECT_TRUE(session.store().Barrier("alone", 2s));
  session.Heartbeat();  // no file: nothing to do
}

TEST(SessionTest, MalformedEnvironmentNamesTheVariable) {
  ScopedEnv env(std::map<std::string, std::string>{{"RANK", "4"}, {"WORLD_SIZE", "4"}});
  auto s = Session::Create();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error, "RANK='4' is not a number in [0, 3]");
}

// Four real processes, as trainlet would start them: rank 0 hosts the store.
TEST(SessionTest, FourProcessesShareTheStore) {
  StoreError e;
  auto reserve = StoreServer::Start(0, 1, &e);  // a free port, then released
  ASSERT_NE(reserve, nullptr);
  std::string port = std::to_string(reserve->port());
  reserve.reset();
  std::vector<pid_t> pids;
  for (int r = 0; r < 4; ++r) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", "4", 1);
      ::setenv("LOCAL_RANK", std::to_string(r % 2).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      auto s = Session::Create();
      if (!s) ::_exit(10);
      Session& session = **s.value;
      if (session.device() != r % 2 || !session.under_trainlet()) ::_exit(11);
      if (!session.store().Set("rank/" + std::to_string(r), std::to_string(r * r), 10s)) ::_exit(12);
      if (!session.store().Barrier("all-set", 10s)) ::_exit(13);
      int sum = 0;
      for (int i = 0; i < 4; ++i) {
        auto v = session.store().Get("rank/" + std::to_string(i), 1s);
        if (!v) ::_exit(14);
        sum += std::atoi(v->c_str());
      }
      if (!session.store().Barrier("all-read", 10s)) ::_exit(15);
      s.value.reset();  // rank 0's Session serves until the others have gone
      ::_exit(sum == 0 + 1 + 4 + 9 ? 0 : 16);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
}

TEST(SessionTest, HeartbeatTouchesTheFile) {
  std::string hb = ::testing::TempDir() + "/hb-" + std::to_string(::getpid());
  ScopedEnv env(std::map<std::string, std::string>{{"TRAINLET_HEARTBEAT_FILE", hb}});
  ::unlink(hb.c_str());
  auto s = Session::Create();
  ASSERT_TRUE(s);
  (*s.value)->Heartbeat();
  struct stat st1{};
  ASSERT_EQ(::stat(hb.c_str(), &st1), 0);
  timespec old[2] = {{1, 0}, {1, 0}};
  ::utimensat(AT_FDCWD, hb.c_str(), old, 0);
  (*s.value)->Heartbeat();
  struct stat st2{};
  ASSERT_EQ(::stat(hb.c_str(), &st2), 0);
  EXPECT_GT(st2.st_mtim.tv_sec, 1);
}

TEST(SessionTest, ReportErrorIsWhatTheAgentClassifies) {
  std::string file = ::testing::TempDir() + "/err-" + std::to_string(::getpid()) + ".json";
  ScopedEnv env(std::map<std::string, std::string>{{"TORCHELASTIC_ERROR_FILE", file}});
  auto s = Session::Create();
  ASSERT_TRUE(s);
  const std::vector<std::pair<ErrorClass, exitcodes::FailureClass>> rows = {
      {ErrorClass::kHardware, exitcodes::FailureClass::kHardware},
      {ErrorClass::kInfra, exitcodes::FailureClass::kInfra},
      {ErrorClass::kBug, exitcodes::FailureClass::kBug},
      {ErrorClass::kOom, exitcodes::FailureClass::kOom}};
  for (auto [cls, want] : rows) {
    // A message that would otherwise match another class's marker.
    ASSERT_TRUE((*s.value)->ReportError(cls, "checksum mismatch after ImportError \"quoted\""));
    exitcodes::Evidence e;
    e.first_failure = exitcodes::WorkerFailure{
        .local_rank = 0, .rank = 0, .exit = {.signaled = false, .exit_status = 1},
        .error_file_message = agent::ReadErrorFileMessage(file), .stderr_tail = ""};
    auto v = exitcodes::Classify(e, {}, exitcodes::MarkerTable::Defaults());
    EXPECT_EQ(v.failure_class, want) << v.reason;
    EXPECT_EQ(v.evidence, "error-file");
  }
}

class SessionNcclTest : public ::testing::Test {
 protected:
  // The caller owns a communicator the Session returns.
  static void Destroy(ncclComm_t comm) {
    auto n = gpu::Nccl::Load(FAKE_LIBNCCL);
    ASSERT_TRUE(n.ok());
    (*n)->CommDestroy(comm);
  }
  void SetUp() override {
    auto n = gpu::Nccl::Load(FAKE_LIBNCCL);
    ASSERT_TRUE(n.ok());
    auto ids = (*n)->MakeUniqueIds(1);
    ASSERT_TRUE(ids.ok());
    for (auto& [k, v] : gpu::WorkerNcclEnv(*ids)) env_[k] = v;
    env_["TRAINLET_LIBNCCL"] = FAKE_LIBNCCL;
  }
  std::map<std::string, std::string> env_;
};

TEST_F(SessionNcclTest, UsesTrainletsIdOnceThenTheStore) {
  ScopedEnv env(env_);
  auto s = Session::Create();
  ASSERT_TRUE(s);
  auto c1 = (*s.value)->NcclComm(2s);
  ASSERT_TRUE(c1) << c1.error;
  EXPECT_EQ((*s.value)->nccl_id_source(), "trainlet");
  auto c2 = (*s.value)->NcclComm(2s);  // an id is single-use (NVIDIA/nccl#1038)
  ASSERT_TRUE(c2) << c2.error;
  EXPECT_EQ((*s.value)->nccl_id_source(), "store");
  Destroy(*c1.value);
  Destroy(*c2.value);
}

TEST_F(SessionNcclTest, ADifferentNcclVersionNeverUsesTrainletsId) {
  env_["TRAINLET_NCCL_VERSION"] = "21903";
  ScopedEnv env(env_);
  auto s = Session::Create();
  ASSERT_TRUE(s);
  auto c = (*s.value)->NcclComm(2s);
  ASSERT_TRUE(c) << c.error;
  EXPECT_EQ((*s.value)->nccl_id_source(), "store");
  Destroy(*c.value);
}

TEST_F(SessionNcclTest, InitThatNeverCompletesIsAbortedAtTheDeadline) {
  env_["FAKE_NCCL_MODE"] = "init_hang";
  ScopedEnv env(env_);
  auto s = Session::Create();
  ASSERT_TRUE(s);
  auto t0 = std::chrono::steady_clock::now();
  auto c = (*s.value)->NcclComm(300ms);
  EXPECT_FALSE(c);
  EXPECT_TRUE(c.timed_out);
  EXPECT_NE(c.error.find("aborted"), std::string::npos) << c.error;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s) << "a hang guard: the init never ends";
}

TEST(SessionNcclMissingTest, MissingNcclIsAClearError) {
  ScopedEnv env(std::map<std::string, std::string>{{"TRAINLET_LIBNCCL", "/nonexistent/libnccl.so.2"}});
  auto s = Session::Create();
  ASSERT_TRUE(s);
  auto c = (*s.value)->NcclComm(1s);
  EXPECT_FALSE(c);
  EXPECT_NE(c.error.find("NCCL unavailable"), std::string::npos) << c.error;
}

}  // namespace
}  // namespace trainlet
