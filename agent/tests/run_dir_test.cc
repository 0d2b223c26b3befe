// run_dir.h: where error and heartbeat files go on read-only images, and what
// its absence means. Real directories (a read-only one made with chmod; as
// root, which ignores modes, that case is skipped).
#include "trainlet/agent/spec/run_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

namespace trainlet::agent {
namespace {

TEST(RunDirTest, CandidatesInTheDocumentedOrder) {
  EXPECT_EQ(RunDirCandidates("/flag", {{"TMPDIR", "/tmpdir"}}, "/logs"),
            (std::vector<std::string>{"/flag", "/tmpdir", "/dev/shm", "/tmp", "/logs"}));
  EXPECT_EQ(RunDirCandidates("", {}, ""), (std::vector<std::string>{"/dev/shm", "/tmp"}));
}

TEST(RunDirTest, TheFirstWritableCandidateIsChosen) {
  const std::string good = ::testing::TempDir() + "/run-dir-good";
  std::filesystem::create_directories(good);
  RunDirChoice c = ChooseRunDir({"/nonexistent/a", good, "/tmp"});
  EXPECT_EQ(c.base, good);
  ASSERT_EQ(c.refused.size(), 1U);
  EXPECT_NE(c.refused[0].find("/nonexistent/a (No such file or directory)"), std::string::npos);
  EXPECT_TRUE(std::filesystem::is_empty(good)) << "the probe is removed";
  std::filesystem::remove_all(good);
}

TEST(RunDirTest, NoneWritableIsAWarningOrConfigWhenAFeatureNeedsIt) {
  const RunDirChoice none{"", {"/dev/shm (Read-only file system)", "/tmp (Permission denied)"}};
  std::string warning;
  exitcodes::Status s = JudgeRunDir(none, false, false, &warning);
  EXPECT_TRUE(s.ok());
  EXPECT_NE(warning.find("error files (TORCHELASTIC_ERROR_FILE"), std::string::npos) << warning;
  EXPECT_NE(warning.find("heartbeat files"), std::string::npos) << warning;
  EXPECT_NE(warning.find("/tmp (Permission denied)"), std::string::npos) << warning;
  s = JudgeRunDir(none, false, true, &warning);
  EXPECT_EQ(s.failure_class(), exitcodes::FailureClass::kConfig);
  EXPECT_NE(s.message().find("--hang-timeout"), std::string::npos) << s.message();
  // --run-dir given but not writable: config, even though /tmp would do.
  const RunDirChoice fallback{"/tmp", {"/ro (Read-only file system)"}};
  s = JudgeRunDir(fallback, true, false, &warning);
  EXPECT_EQ(s.failure_class(), exitcodes::FailureClass::kConfig);
  EXPECT_NE(s.message().find("--run-dir /ro"), std::string::npos) << s.message();
  EXPECT_TRUE(JudgeRunDir(fallback, false, true, &warning).ok());
  EXPECT_EQ(warning, "");
}

}  // namespace
}  // namespace trainlet::agent
