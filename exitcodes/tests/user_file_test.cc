// The safe reader of user-named files, on real files: a FIFO with no writer,
// devices, a folder, an oversized file, a symlink, a path too long.
#include "trainlet/exitcodes/user_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>

namespace trainlet::exitcodes {
namespace {

namespace fs = std::filesystem;

class UserFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("user-file-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& content) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << content;
    return path;
  }
  fs::path dir_;
};

TEST_F(UserFileTest, ARegularFileUpToTheCapAndNothingForAMissingOne) {
  auto r = ReadUserFile(Write("t", "abc\n"), "--token-file", 4);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(**r, "abc\n");
  auto missing = ReadUserFile((dir_ / "none").string(), "--token-file", 4);
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  auto under_a_file = ReadUserFile(Write("f", "x") + "/labels", "the downward-API file", 4);
  ASSERT_TRUE(under_a_file.ok()) << "ENOTDIR is no such file";
  EXPECT_FALSE(under_a_file->has_value());
}

TEST_F(UserFileTest, SymlinksAreFollowedAsAMountedSecretsAre) {
  // A Secret volume: token -> ..data/token.
  fs::create_directories(dir_ / "..data");
  Write("..data/token", "s3cret");
  fs::create_symlink("..data/token", dir_ / "token");
  auto r = ReadUserFile((dir_ / "token").string(), "--token-file", kSecretMaxBytes);
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status().ToString();
  EXPECT_EQ(**r, "s3cret");
}

// Each refusal is one line of class config naming the file and what it is,
// at once: a FIFO without a writer used to block open(2) forever, /dev/zero
// to grow the agent until the OOM killer came.
TEST_F(UserFileTest, WhatIsNotARegularFileIsRefusedAtOnceSayingWhatItIs) {
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string big = Write("big", std::string(2 * 1024 * 1024 + 512, 'x'));
  struct Row {
    std::string path, expected;
  };
  const std::vector<Row> rows = {
      {fifo, "--token-file '" + fifo + "' is a FIFO, not a regular file"},
      {"/dev/zero", "--token-file '/dev/zero' is a character device, not a regular file"},
      {"/dev/urandom", "'/dev/urandom' is a character device"},
      {dir_.string(), "--token-file '" + dir_.string() + "' is a directory, not a regular file"},
      {big, "--token-file '" + big + "' is 2097664 bytes (2.0 MiB), more than the 1 MiB such a file may hold"},
      {"/" + std::string(4100, 'a'), "cannot be read: File name too long"},
  };
  for (const Row& r : rows) {
    const auto t0 = std::chrono::steady_clock::now();
    auto got = ReadUserFile(r.path, "--token-file", kSecretMaxBytes);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2)) << r.path;
    ASSERT_FALSE(got.ok()) << r.path;
    EXPECT_EQ(got.status().failure_class(), FailureClass::kConfig);
    EXPECT_NE(got.status().message().find(r.expected), std::string::npos)
        << got.status().message();
    EXPECT_EQ(got.status().message().find('\n'), std::string::npos);
  }
}

TEST_F(UserFileTest, TheCapIsExact) {
  auto fits = ReadUserFile(Write("fits", std::string(1024, 'x')), "f", 1024);
  ASSERT_TRUE(fits.ok() && fits->has_value());
  EXPECT_EQ((*fits)->size(), 1024u);
  auto over = ReadUserFile(Write("over", std::string(1025, 'x')), "f", 1024);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("is 1025 bytes (1.0 KiB), more than the 1 KiB"), std::string::npos)
      << over.status().message();
}

TEST(FormatBytesTest, NeverRoundsToZero) {
  EXPECT_EQ(FormatBytes(0), "0 bytes");
  EXPECT_EQ(FormatBytes(1), "1 byte");
  EXPECT_EQ(FormatBytes(1023), "1023 bytes");
  EXPECT_EQ(FormatBytes(1024), "1 KiB");
  EXPECT_EQ(FormatBytes(256 * 1024), "256 KiB");
  EXPECT_EQ(FormatBytes(1536 * 1024), "1.5 MiB");
  EXPECT_EQ(FormatBytes(64ULL << 20), "64 MiB");
  EXPECT_EQ(FormatBytes(5ULL << 29), "2.5 GiB");
  EXPECT_EQ(FormatBytes(3ULL << 40), "3 TiB");
}

TEST(PendingStopSignalTest, SeesABlockedSigtermUntilItIsTaken) {
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &term, &old), 0);
  EXPECT_EQ(PendingStopSignal(), 0);
  ::raise(SIGTERM);
  EXPECT_EQ(PendingStopSignal(), SIGTERM);
  int got = 0;
  ASSERT_EQ(::sigwait(&term, &got), 0);
  EXPECT_EQ(PendingStopSignal(), 0);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace
}  // namespace trainlet::exitcodes
