#include "trainlet/agent/pod/evidence.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "../src/run/resident.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace trainlet::agent {
namespace {

namespace fs = std::filesystem;

class EvidenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("evidence-" + std::to_string(::getpid()));
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  void Write(const fs::path& rel, const std::string& content) {
    fs::create_directories((root_ / rel).parent_path());
    std::ofstream(root_ / rel) << content;
  }
  std::string Root() const { return root_.string(); }
  fs::path root_;
};

TEST_F(EvidenceTest, CgroupV1MemoryController) {
  Write("memory/kubepods/pod1/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n");
  EXPECT_EQ(ReadOomKillCount("4:memory:/kubepods/pod1\n0::/\n", Root()), 3u);
}

TEST_F(EvidenceTest, CgroupV2MemoryEvents) {
  Write("kubepods.slice/pod2/memory.events",
        "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n");
  EXPECT_EQ(ReadOomKillCount("0::/kubepods.slice/pod2\n", Root()), 2u);
}

TEST_F(EvidenceTest, CgroupNamespaceFallsBackToTheRoot) {
  // Inside a container with a cgroup namespace the path is "/" (or one that does
  // not exist in the container's view): the counter is at the mount's root.
  Write("memory.events", "oom 1\noom_kill 1\n");
  EXPECT_EQ(ReadOomKillCount("0::/\n", Root()), 1u);
  EXPECT_EQ(ReadOomKillCount("0::/not/visible/here\n", Root()), 1u);
}

// The memory limit the read-ahead is sized to: the lowest of the cgroup and
// its visible ancestors; v1's "unlimited" and v2's "max" are none.
TEST_F(EvidenceTest, MemoryLimitIsTheLowestOnThePath) {
  Write("memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1: unlimited
  Write("memory/kubepods/memory.limit_in_bytes", "1073741824\n");
  Write("memory/kubepods/pod1/memory.limit_in_bytes", "2147483648\n");
  MemoryCgroup v1 = ReadMemoryCgroup("12:cpu:/x\n4:memory:/kubepods/pod1\n0::/\n", Root());
  EXPECT_EQ(v1.limit, 1073741824u) << "the parent's limit binds";
  EXPECT_FALSE(v1.v2);
  EXPECT_FALSE(v1.oom_group);
  EXPECT_EQ(ReadMemoryCgroup("4:memory:/\n", Root()).limit, std::nullopt) << "unlimited";

  Write("kubepods.slice/memory.max", "max\n");
  Write("kubepods.slice/pod2/memory.max", "536870912\n");
  Write("kubepods.slice/pod2/memory.oom.group", "1\n");
  MemoryCgroup v2 = ReadMemoryCgroup("0::/kubepods.slice/pod2\n", Root());
  EXPECT_EQ(v2.limit, 536870912u);
  EXPECT_TRUE(v2.v2);
  EXPECT_TRUE(v2.oom_group);
  Write("kubepods.slice/pod2/memory.oom.group", "0\n");
  EXPECT_FALSE(ReadMemoryCgroup("0::/kubepods.slice/pod2\n", Root()).oom_group);
  EXPECT_EQ(ReadMemoryCgroup("0::/kubepods.slice\n", Root()).limit, std::nullopt) << "max";
}

TEST_F(EvidenceTest, MemoryLimitInACgroupNamespaceIsAtTheRoot) {
  Write("memory.max", "268435456\n");
  Write("memory.oom.group", "1\n");
  MemoryCgroup m = ReadMemoryCgroup("0::/\n", Root());
  EXPECT_EQ(m.limit, 268435456u);
  EXPECT_TRUE(m.oom_group);
  EXPECT_EQ(ReadMemoryCgroup("0::/not/visible/here\n", Root()).limit, 268435456u);
  EXPECT_EQ(ReadMemoryCgroup("garbage", Root()).limit, std::nullopt);
}

TEST_F(EvidenceTest, NoCounterIsNoEvidence) {
  EXPECT_EQ(ReadOomKillCount("0::/x\n", Root()), std::nullopt);
  EXPECT_EQ(ReadOomKillCount("garbage", Root()), std::nullopt);
}

TEST_F(EvidenceTest, ThisMachinesRealCounterReads) {
  // Whatever the machine's cgroup layout, the real reader must not crash; on
  // this project's machines (cgroup v1 memory controller) it finds a counter.
  auto n = ReadOomKillCount();
  if (fs::exists("/sys/fs/cgroup/memory/memory.oom_control") ||
      fs::exists("/sys/fs/cgroup/memory.events")) {
    EXPECT_TRUE(n.has_value());
  }
}

TEST_F(EvidenceTest, TorchelasticErrorFileFormats) {
  Write("nested.json",
        R"({"message": {"message": "RuntimeError: CUDA error: uncorrectable ECC error encountered",
            "extraInfo": {"py_callstack": "Traceback (most recent call last): ...",
                          "timestamp": "1700000000"}}})");
  std::string m = ReadErrorFileMessage(Root() + "/nested.json");
  EXPECT_NE(m.find("uncorrectable ECC error"), std::string::npos);
  EXPECT_NE(m.find("Traceback"), std::string::npos);
  Write("flat.json", R"({"message": "ImportError: no module"})");
  EXPECT_EQ(ReadErrorFileMessage(Root() + "/flat.json"), "ImportError: no module");
  Write("bad.json", "{not json");
  EXPECT_EQ(ReadErrorFileMessage(Root() + "/bad.json"), "");
  Write("other.json", R"([1, 2, 3])");
  EXPECT_EQ(ReadErrorFileMessage(Root() + "/other.json"), "");
  EXPECT_EQ(ReadErrorFileMessage(Root() + "/missing.json"), "");
}

TEST_F(EvidenceTest, TerminationLogWritesOnlyWhereAllowed) {
  fs::create_directories(root_);
  WriteTerminationLog(Root() + "/term", R"({"class":"bug"})");
  std::ifstream f(root_ / "term");
  std::string content((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, R"({"class":"bug"})");
  if (!fs::exists("/dev/termination-log")) {
    WriteTerminationLog("", "x");
    EXPECT_FALSE(fs::exists("/dev/termination-log")) << "never created outside Kubernetes";
  }
}

TEST(SharedMemoryTest, ItsSizeFromStatvfsAndAWarningWhenSmall) {
  auto shm = SharedMemoryBytes("/dev/shm");
  ASSERT_TRUE(shm.has_value());
  EXPECT_GT(*shm, 0U);
  EXPECT_FALSE(SharedMemoryBytes("/nonexistent").has_value());
  const std::uint64_t small = 64ULL << 20;
  EXPECT_NE(SmallSharedMemoryWarning(small, 2, false).find("/dev/shm is only 64 MiB"),
            std::string::npos);
  EXPECT_NE(SmallSharedMemoryWarning(small, 1, true).find("emptyDir with medium: Memory"),
            std::string::npos);
  EXPECT_EQ(SmallSharedMemoryWarning(small, 1, false), "") << "one CPU worker: no DataLoader need";
  EXPECT_EQ(SmallSharedMemoryWarning(kSmallSharedMemory, 8, true), "");
  EXPECT_EQ(SmallSharedMemoryWarning(std::nullopt, 8, true), "");
}

}  // namespace
}  // namespace trainlet::agent

// resident.h (private): start-up's code pages go, and the code still runs.
namespace {
long RssFileKiB() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("RssFile:", 0) == 0) return std::stol(line.substr(8));
  }
  return -1;
}
}  // namespace

TEST(ResidentTest, ReleaseStartupCodeDropsCodePagesAndCodeStillRuns) {
  const long before = RssFileKiB();
  ASSERT_GT(before, 0);
  const std::size_t advised = trainlet::agent::ReleaseStartupCode();
  EXPECT_GT(advised, 0u);  // at least this test's own code and libc's
  const long after = RssFileKiB();
  EXPECT_LT(after, before) << "RssFile " << before << " -> " << after << " KiB";
  // Everything faults back in on use: run code from this binary and from libc.
  std::string s = std::to_string(12345) + "x";
  EXPECT_EQ(s, "12345x");
  EXPECT_EQ(std::string(::strerror(ENOENT)).empty(), false);
}
