#include "trainlet/exitcodes/last_exception.h"

#include <gtest/gtest.h>

#include <string>

namespace trainlet::exitcodes {
namespace {

// The last exception in `text`, fed in pieces of `step` bytes.
std::optional<LastException> LastOf(std::string_view text, std::size_t step = 1 << 20) {
  ExceptionKeeper k;
  for (std::size_t i = 0; i < text.size(); i += step) k.Feed(text.substr(i, step));
  k.Finish();
  return k.last();
}

// CPython's traceback format (Lib/traceback.py): header, indented frames, the
// exception's lines.
constexpr std::string_view kTraceback =
    "Traceback (most recent call last):\n"
    "  File \"/app/train.py\", line 12, in <module>\n"
    "    import apex\n"
    "ModuleNotFoundError: No module named 'apex'\n";

TEST(ExceptionKeeperTest, APythonTracebackIsKeptFromItsExceptionLine) {
  for (std::size_t step : {1, 3, 64, 1 << 20}) {
    auto e = LastOf(std::string("step 1\n") + std::string(kTraceback), step);
    ASSERT_TRUE(e) << step;
    EXPECT_EQ(e->kind, LastException::Kind::kPython);
    EXPECT_EQ(e->text, "ModuleNotFoundError: No module named 'apex'") << step;
    EXPECT_EQ(e->end_offset, 7 + kTraceback.size());
  }
}

TEST(ExceptionKeeperTest, TheFrameSourceLinesAreNotTheException) {
  // "    raise ImportError(...)" is a frame's source line: indented.
  auto e = LastOf(
      "Traceback (most recent call last):\n"
      "  File \"x.py\", line 3, in f\n"
      "    raise ImportError('optional')\n"
      "    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
      "TimeoutError: store get timed out\n");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->text, "TimeoutError: store get timed out");
}

TEST(ExceptionKeeperTest, OfAChainTheLastTracebackEndedTheRank) {
  auto e = LastOf(std::string(kTraceback) +
                  "\nDuring handling of the above exception, another exception occurred:\n\n"
                  "Traceback (most recent call last):\n"
                  "  File \"/app/train.py\", line 14, in <module>\n"
                  "    dist.barrier()\n"
                  "torch.distributed.DistNetworkError: Connection reset by peer\n");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->text, "torch.distributed.DistNetworkError: Connection reset by peer");
}

TEST(ExceptionKeeperTest, AMultiLineMessageEndsAtABlankLineOrALogRecord) {
  auto e = LastOf(
      "[rank1]: Traceback (most recent call last):\n"
      "[rank1]:   File \"t.py\", line 9, in <module>\n"
      "[rank1]:     dist.all_reduce(x)\n"
      "[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
      "unhandled system error\n"
      "[rank1]: ncclSystemError: System call (e.g. socket, malloc) failed.\n"
      "[rank1]:[W1207 12:00:01.000000000 ProcessGroupNCCL.cpp:1250] Warning: process group "
      "has NOT been destroyed before we destruct ProcessGroupNCCL\n"
      "more noise\n");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->text,
            "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
            "unhandled system error\nncclSystemError: System call (e.g. socket, malloc) failed.");
}

TEST(ExceptionKeeperTest, ACxxTerminateReportIsAnException) {
  auto e = LastOf(
      "terminate called after throwing an instance of 'c10::DistBackendError'\n"
      "  what():  [PG 0 Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7)\n"
      "\n"
      "Fatal Python error: Aborted\n");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, LastException::Kind::kCxx);
  EXPECT_NE(e->text.find("Watchdog caught collective operation timeout"), std::string::npos);
  EXPECT_EQ(e->text.find("Fatal Python error"), std::string::npos);
}

// `python -m` of a module that cannot be found: runpy's one line is the
// exception that ended the interpreter (Lib/runpy.py, _run_module_as_main).
TEST(ExceptionKeeperTest, RunpysModuleNotFoundLineIsTheException) {
  const std::string line =
      "/usr/bin/python3: Error while finding module specification for 'no.such.mod' "
      "(ModuleNotFoundError: No module named 'no')";
  auto e = LastOf("[rank0]: " + line + "\n");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->kind, LastException::Kind::kPython);
  EXPECT_EQ(e->text, line);
}

TEST(ExceptionKeeperTest, NoTracebackNoException) {
  EXPECT_FALSE(LastOf("UserWarning: ImportError: apex not found, using native ops\n"));
  EXPECT_FALSE(LastOf("Traceback (most recent call last):\n  File \"x\", line 1\n"));
}

TEST(ExceptionKeeperTest, BoundedWhateverTheInput) {
  std::string text = "Traceback (most recent call last):\n  File \"x\", line 1\nE: ";
  text.append(10 * kKeptLine, 'x');  // one long line
  text += "\n";
  for (int i = 0; i < 100; ++i) text += "more of the message " + std::string(100, 'y') + "\n";
  auto e = LastOf(text, 97);
  ASSERT_TRUE(e);
  EXPECT_LE(e->text.size(), kExceptionText);
  EXPECT_TRUE(e->text.starts_with("E: xxx"));
}

TEST(StripRankPrefixTest, OnlyARankPrefix) {
  EXPECT_EQ(StripRankPrefix("[rank12]: Traceback"), "Traceback");
  EXPECT_EQ(StripRankPrefix("[rank0]:[W1207 x]"), "[W1207 x]");
  EXPECT_EQ(StripRankPrefix("[rankx]: a"), "[rankx]: a");
  EXPECT_EQ(StripRankPrefix("[default0]: a"), "[default0]: a");
}

}  // namespace
}  // namespace trainlet::exitcodes
