// pump.h (private): line prefixing, and the pump thread against real pipes,
// files and a reader that never reads.
#include "../src/run/pump.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/ioctl.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <gtest/gtest.h>

namespace trainlet::agent {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;

std::string Fed(LinePrefixer& p, std::initializer_list<std::string_view> pieces, bool finish) {
  for (auto piece : pieces) p.Feed(piece);
  if (finish) p.Finish();
  std::string out(p.output());
  p.ClearOutput();
  return out;
}

TEST(LinePrefixerTest, EveryLineGetsThePrefixAndUnfinishedLinesWait) {
  LinePrefixer p("[r1]: ", 1024);
  EXPECT_EQ(Fed(p, {"a\nbb\n"}, false), "[r1]: a\n[r1]: bb\n");
  // A line split across reads comes out once, whole, when its end arrives.
  EXPECT_EQ(Fed(p, {"hel", "lo", " world"}, false), "");
  EXPECT_EQ(Fed(p, {"!\nnext"}, false), "[r1]: hello world!\n");
  EXPECT_EQ(Fed(p, {"\n\n"}, false), "[r1]: next\n[r1]: \n");
  // At end of stream the unfinished line is ended.
  EXPECT_EQ(Fed(p, {"tail"}, true), "[r1]: tail\n");
  EXPECT_EQ(Fed(p, {}, true), "") << "nothing pending: Finish adds nothing";
}

// torch 2.x puts "[rankN]:" before its own exception and c10 log lines: a
// line that already has the prefix's tag is not tagged again, however it was
// fed; another rank's tag, a tag later in the line, a prefix that is no
// "[...]:" tag, and JSON records are prefixed as ever.
TEST(LinePrefixerTest, ALineThatAlreadyHasTheRanksTagIsNotTaggedAgain) {
  LinePrefixer p("[rank1]: ", 1024);
  EXPECT_EQ(Fed(p, {"[rank1]: Traceback (most recent call last):\n"}, false),
            "[rank1]: Traceback (most recent call last):\n");
  EXPECT_EQ(Fed(p, {"[rank1]:[W1207 12:00:00 ProcessGroupNCCL.cpp:1250] Warning\n"}, false),
            "[rank1]:[W1207 12:00:00 ProcessGroupNCCL.cpp:1250] Warning\n");
  EXPECT_EQ(Fed(p, {"[ra", "nk1]: split\r", "[rank1]: bar\r\n"}, false),
            "[rank1]: split\r[rank1]: bar\r\n");
  EXPECT_EQ(Fed(p, {"[rank10]: other\n", "x [rank1]: later\n", "[rank1]\n"}, false),
            "[rank1]: [rank10]: other\n[rank1]: x [rank1]: later\n[rank1]: [rank1]\n");
  LinePrefixer cut("[rank1]: ", 10);
  EXPECT_EQ(Fed(cut, {"[rank1]: 0123456789abc\n"}, false),
            "[rank1]: 0\n[rank1]: 123456789a\n[rank1]: bc\n")
      << "only a split line's first piece can carry the tag";
  LinePrefixer plain("> ", 1024);
  EXPECT_EQ(Fed(plain, {"> quoted\n"}, false), "> > quoted\n");
  LinePrefixer json(JsonLinePrefix(1, "stderr"), 1024, LinePrefixer::Format::kJson);
  EXPECT_EQ(Fed(json, {"[rank1]: x\n"}, false),
            "{\"rank\":1,\"stream\":\"stderr\",\"line\":\"[rank1]: x\"}\n");
}

TEST(LinePrefixerTest, AnUnfinishedLineIsCutAtMaxLineNeverDropped) {
  LinePrefixer p("> ", 4);
  EXPECT_EQ(Fed(p, {"abcdefghij"}, false), "> abcd\n> efgh\n");
  EXPECT_EQ(Fed(p, {"k", "\n"}, false), "> ijk\n");
  // A complete line longer than max_line in one read is cut the same way.
  EXPECT_EQ(Fed(p, {"0123456789\n"}, false), "> 0123\n> 4567\n> 89\n");
  // Exactly max_line bytes, its end in the next read: one line, not cut.
  EXPECT_EQ(Fed(p, {"wxyz", "\n"}, false), "> wxyz\n");
}

// Where a long line is split depends on the line alone: a 70,006-byte line
// comes out as 65,536 + 4,470 bytes however the reads cut it (once it came out
// whole when its end and most of it arrived in one read). In JSON each piece
// says which it is.
TEST(LinePrefixerTest, ALongLineIsSplitAtMaxLineWhateverTheReads) {
  const std::size_t kMax = 64 * 1024;
  std::string line;
  for (std::size_t i = 0; i < 70006; ++i) line += static_cast<char>('a' + i % 26);
  const std::string in = line + "\nnext\n";
  const std::vector<std::vector<std::size_t>> cuts = {
      {}, {65536}, {5000}, {70006}, {70000, 70007}, {1, 65535, 65537}, {4096, 8192, 69999}};
  for (auto format : {LinePrefixer::Format::kText, LinePrefixer::Format::kJson}) {
    const bool json = format == LinePrefixer::Format::kJson;
    const std::string prefix = json ? JsonLinePrefix(0, "stdout") : "[r0]: ";
    const auto record = [&](std::string_view piece, std::string_view part) {
      return prefix + std::string(piece) + (json ? "\"" + std::string(part) + "}\n" : "\n");
    };
    const std::string want =
        record(line.substr(0, kMax), json ? ",\"part\":1,\"last\":false" : "") +
        record(line.substr(kMax), json ? ",\"part\":2,\"last\":true" : "") + record("next", "");
    for (const auto& at : cuts) {
      SCOPED_TRACE(std::string(json ? "json" : "text") + ", pieces cut at " +
                   ::testing::PrintToString(at));
      LinePrefixer p(prefix, kMax, format);
      std::size_t from = 0;
      for (std::size_t to : at) {
        p.Feed(std::string_view(in).substr(from, to - from));
        from = to;
      }
      p.Feed(std::string_view(in).substr(from));
      EXPECT_EQ(std::string(p.output()), want);
    }
  }
}

TEST(LinePrefixerTest, ACarriageReturnEndsALineAndKeepsIt) {
  LinePrefixer p("[r0]: ", 1024);
  // tqdm: "\r" before each redraw. Each redraw goes out when the next begins,
  // with the prefix; the leading '\r' goes out bare.
  EXPECT_EQ(Fed(p, {"\r 10%|#", "\r 20%|##"}, false), "\r[r0]:  10%|#\r");
  EXPECT_EQ(Fed(p, {"\r 30%|###\n"}, false), "[r0]:  20%|##\r[r0]:  30%|###\n");
  // "\r\n" is one line end, also when split between reads.
  EXPECT_EQ(Fed(p, {"dos\r\nline\r"}, false), "[r0]: dos\r\n[r0]: line\r");
  EXPECT_EQ(Fed(p, {"\nnext\n"}, false), "\n[r0]: next\n");
  // A partial line completed by a '\r'.
  EXPECT_EQ(Fed(p, {"ab", "c\rd\n"}, false), "[r0]: abc\r[r0]: d\n");
}

TEST(LinePrefixerTest, JsonFormatWrapsEachLineAsOneObject) {
  LinePrefixer p(JsonLinePrefix(3, "stderr"), 8, LinePrefixer::Format::kJson);
  EXPECT_EQ(Fed(p, {"\"q\" \\\t\x01\n"}, false),
            "{\"rank\":3,\"stream\":\"stderr\",\"line\":\"\\\"q\\\" \\\\\\t\\u0001\"}\n");
  // Carriage returns end lines; the end is not part of the string.
  EXPECT_EQ(Fed(p, {"\r1%\r2%\r\n"}, false),
            "{\"rank\":3,\"stream\":\"stderr\",\"line\":\"1%\"}\n"
            "{\"rank\":3,\"stream\":\"stderr\",\"line\":\"2%\"}\n");
  // Valid UTF-8 passes; invalid bytes become U+FFFD; long lines are cut.
  EXPECT_EQ(Fed(p, {"\xC3\xA9\xFF\n"}, false),
            "{\"rank\":3,\"stream\":\"stderr\",\"line\":\"\xC3\xA9\xEF\xBF\xBD\"}\n");
  EXPECT_EQ(Fed(p, {"0123456789"}, true),
            "{\"rank\":3,\"stream\":\"stderr\",\"line\":\"01234567\",\"part\":1,\"last\":false}\n"
            "{\"rank\":3,\"stream\":\"stderr\",\"line\":\"89\",\"part\":2,\"last\":true}\n");
  // Three pieces, ended by "\r\n"; the next line is whole again.
  EXPECT_EQ(Fed(p, {"abcdefgh", "ijklmnop", "q\r\nr\n"}, false),
            "{\"rank\":3,\"stream\":\"stderr\",\"line\":\"abcdefgh\",\"part\":1,\"last\":false}\n"
            "{\"rank\":3,\"stream\":\"stderr\",\"line\":\"ijklmnop\",\"part\":2,\"last\":false}\n"
            "{\"rank\":3,\"stream\":\"stderr\",\"line\":\"q\",\"part\":3,\"last\":true}\n"
            "{\"rank\":3,\"stream\":\"stderr\",\"line\":\"r\"}\n");
}

TEST(LinePrefixerTest, OutputGrowsPastItsFirstBuffer) {
  LinePrefixer p("[rank0]: ", 1 << 16);
  std::string in, want;
  for (int i = 0; i < 20000; ++i) {
    in += "line " + std::to_string(i) + "\n";
    want += "[rank0]: line " + std::to_string(i) + "\n";
  }
  // Fed in odd-sized pieces so lines straddle the calls.
  for (std::size_t at = 0; at < in.size(); at += 777) p.Feed(std::string_view(in).substr(at, 777));
  p.Finish();
  EXPECT_EQ(std::string(p.output()), want);
}

// Runs `io` until `pred` or `limit`; true if pred became true.
template <class Pred>
bool RunUntil(asio::io_context& io, Pred pred, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred() && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_for(10ms);
  }
  return pred();
}

// Runs `f` on every way out of a scope (a failed ASSERT returns early).
template <class F>
struct OnExit {
  F f;
  ~OnExit() { f(); }
};
template <class F>
OnExit(F) -> OnExit<F>;

// A pipe whose ends are closed on every way out of a test; -1 once taken.
struct Pipe {
  Pipe() {
    if (::pipe2(fd, O_CLOEXEC) != 0) ADD_FAILURE() << "pipe2: " << std::strerror(errno);
  }
  ~Pipe() {
    for (int f : fd) {
      if (f >= 0) ::close(f);
    }
  }
  Pipe(Pipe&& o) noexcept : fd{std::exchange(o.fd[0], -1), std::exchange(o.fd[1], -1)} {}
  Pipe& operator=(Pipe&&) = delete;
  int TakeRead() { return std::exchange(fd[0], -1); }
  int fd[2] = {-1, -1};
  int& r = fd[0];
  int& w = fd[1];
};

// SIGPIPE ignored for the test's scope (writes to a closed pipe get EPIPE).
struct SigpipeIgnored {
  SigpipeIgnored() : old(std::signal(SIGPIPE, SIG_IGN)) {}
  ~SigpipeIgnored() { std::signal(SIGPIPE, old); }
  void (*old)(int);
};

// Writes `line` again and again to `fd` (a worker's pipe, made non-blocking)
// until the pump has paused reading at its bound with bytes left in the pipe
// (CaughtUp() while the pipe is not empty), or `limit` bytes are written.
// Returns the bytes written. No timing: it waits for the state, a minute at
// most (then the caller's checks fail).
std::size_t FillUntilPaused(int fd, const OutputPump& pump, const std::string& line,
                            std::size_t limit) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  std::size_t written = 0;
  for (auto give_up = std::chrono::steady_clock::now() + 60s;
       written < limit && std::chrono::steady_clock::now() < give_up;) {
    if (::write(fd, line.data(), line.size()) > 0) {
      written += line.size();  // at most PIPE_BUF: whole or not at all (pipe(7))
      continue;
    }
    int unread = 0;
    if (pump.CaughtUp() && ::ioctl(fd, FIONREAD, &unread) == 0 && unread > 0) break;
    std::this_thread::sleep_for(1ms);
  }
  return written;
}

class PumpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::pipe2(worker_, O_CLOEXEC), 0);
    path_ = std::filesystem::temp_directory_path() / ("pump-" + std::to_string(::getpid()));
  }
  void TearDown() override {
    for (int fd : worker_) {
      if (fd >= 0) ::close(fd);
    }
    std::filesystem::remove(path_);
  }
  void Write(std::string_view s) {
    ASSERT_EQ(::write(worker_[1], s.data(), s.size()), static_cast<ssize_t>(s.size()));
  }
  void CloseWorker() {
    ::close(worker_[1]);
    worker_[1] = -1;
  }
  std::string FileText() {
    std::ifstream f(path_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  int worker_[2] = {-1, -1};  // [0] goes to the pump
  std::filesystem::path path_;
};

TEST_F(PumpTest, CopiesToAFileUntilEofThenPostsCloseAndKeepsTheTail) {
  int out = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(out, 0);
  asio::io_context io;
  bool closed = false;
  {
    OutputPump pump(std::exchange(worker_[0], -1), out, "[rank2]: ", 8);
    pump.Start(io.get_executor(), [&] { closed = true; });
    Write("first\nsecond line\nunfinished");
    EXPECT_FALSE(RunUntil(io, [&] { return closed; }, 100ms)) << "closed while a writer is open";
    CloseWorker();
    ASSERT_TRUE(RunUntil(io, [&] { return closed; }, 60s));
    EXPECT_EQ(pump.Tail(), "finished") << "the last tail_bytes bytes read";
  }
  ::close(out);
  EXPECT_EQ(FileText(), "[rank2]: first\n[rank2]: second line\n[rank2]: unfinished\n");
}

// A log file written through the pump (SetFile: where it cannot be followed)
// gets every byte as written, without prefix, by the time the pump posts its
// close: redirected alone, or beside the console (teed); O_TRUNC or O_APPEND.
// The exception that ended a worker is kept apart from the 8 KiB tail: a
// 20 KB thread dump after it does not push it out; with how much followed it.
TEST_F(PumpTest, TheLastExceptionOutlivesTheTail) {
  int out = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(out, 0);
  asio::io_context io;
  bool closed = false;
  std::string dump;
  for (int t = 0; t < 50; ++t) dump += "Thread 0x7f" + std::to_string(t) + " (most recent call first):\n" + std::string(400, ' ') + "\n";
  {
    OutputPump pump(std::exchange(worker_[0], -1), out, "[rank2]: ", 8192);
    pump.KeepLastException();
    pump.Start(io.get_executor(), [&] { closed = true; });
    Write("[rank2]: Traceback (most recent call last):\n"
          "[rank2]:   File \"t.py\", line 1, in <module>\n"
          "[rank2]: torch.distributed.DistBackendError: NCCL error: ncclSystemError\n\n");
    Write(dump);
    CloseWorker();
    ASSERT_TRUE(RunUntil(io, [&] { return closed; }, 60s));
    EXPECT_EQ(pump.Tail().find("DistBackendError"), std::string::npos) << "pushed out of the tail";
    auto e = pump.LastException();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->text, "torch.distributed.DistBackendError: NCCL error: ncclSystemError");
    EXPECT_EQ(e->bytes_after, dump.size() + 1);
    EXPECT_GE(e->age_ms, 0);
    EXPECT_LT(e->age_ms, 30'000);
  }
  ::close(out);
}

TEST_F(PumpTest, ALogFileHoldsEveryByteWhenThePumpCloses) {
  std::string bytes;
  for (int i = 0; i < 40000; ++i) bytes += "line " + std::to_string(i) + (i % 7 ? "\n" : "");
  bytes += "no end";
  const std::filesystem::path log = path_.string() + ".log";
  for (int flags : {O_TRUNC, O_APPEND}) {
    for (bool console : {false, true}) {
      SCOPED_TRACE(std::string(flags == O_APPEND ? "O_APPEND" : "O_TRUNC") +
                   (console ? ", console" : ", file only"));
      if (worker_[0] < 0) {
        ASSERT_EQ(::pipe2(worker_, O_CLOEXEC), 0);
      }
      int out = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      int file = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | flags | O_CLOEXEC, 0600);
      ASSERT_GE(file, 0);
      asio::io_context io;
      bool closed = false;
      {
        OutputPump pump(std::exchange(worker_[0], -1), console ? out : -1, "[r]: ");
        pump.SetFile(file);
        pump.Start(io.get_executor(), [&] { closed = true; });
        // From another thread: more than the pipe holds, so the pump reads
        // while the writer waits.
        std::thread writer([&] {
          for (std::size_t at = 0; at < bytes.size(); at += 1000) {
            std::string_view piece = std::string_view(bytes).substr(at, 1000);
            ASSERT_EQ(::write(worker_[1], piece.data(), piece.size()),
                      static_cast<ssize_t>(piece.size()));
          }
          CloseWorker();
        });
        writer.join();
        ASSERT_TRUE(RunUntil(io, [&] { return closed; }, 60s));
        std::ifstream f(log);
        std::stringstream ss;
        ss << f.rdbuf();
        EXPECT_EQ(ss.str(), bytes);  // before the pump is gone: complete at its close
      }
      ::close(out);
      if (console) {
        const std::string text = FileText();
        EXPECT_EQ(text.rfind("[r]: line 0line 1\n[r]: line 2\n", 0), 0u) << text.substr(0, 80);
        EXPECT_NE(text.find("[r]: no end\n"), std::string::npos);
      }
    }
  }
  std::filesystem::remove(log);
}

// A log file the worker writes itself (OpenFollowedFile): the pump follows
// it to the console, with the prefix, and its tail is the file's; the stream
// stays open while writers may remain: after the "worker" closed its fd, while
// a forked child holds it and writes, and when another writable description
// of the file is opened and closed (a shell's `echo >>/dev/stderr`, which
// inotify reports as IN_CLOSE_WRITE). It ends at WritersGone().
TEST_F(PumpTest, FollowsALogFileUntilTheWritersAreGone) {
  const std::filesystem::path log = path_.string() + ".log";
  FollowedFile f = OpenFollowedFile(log, /*follow=*/true);
  ASSERT_GE(f.write_fd, 0);
  ASSERT_GE(f.read_fd, 0);
  ASSERT_GE(f.watch_fd, 0);
  int out = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  int go[2];
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  const pid_t child = ::fork();
  if (child == 0) {  // inherits write_fd; writes once told to, ends at EOF
    ::close(go[1]);
    char c;
    if (::read(go[0], &c, 1) == 1) (void)!::write(f.write_fd, "late\n", 5);
    ::_exit(0);
  }
  // On every way out: the child sees EOF, ends, and is reaped.
  OnExit reap{[&] {
    ::close(go[1]);
    ::waitpid(child, nullptr, 0);
  }};
  std::string bytes;
  for (int i = 0; i < 30000; ++i) bytes += "line " + std::to_string(i) + "\n";
  asio::io_context io;
  bool closed = false;
  {
    OutputPump pump(f.read_fd, out, "[r]: ", 16);
    pump.Follow(f.watch_fd);
    pump.Start(io.get_executor(), [&] { closed = true; });
    for (std::size_t at = 0; at < bytes.size(); at += 4096) {
      std::string_view piece = std::string_view(bytes).substr(at, 4096);
      ASSERT_EQ(::write(f.write_fd, piece.data(), piece.size()), static_cast<ssize_t>(piece.size()));
    }
    ::close(f.write_fd);  // the "worker" is done; its child still holds the file
    EXPECT_EQ(pump.Tail(), bytes.substr(bytes.size() - 16)) << "the file's own end";
    ::close(::open(log.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));  // another description
    EXPECT_FALSE(RunUntil(io, [&] { return closed; }, 300ms)) << "closed while writers remain";
    ASSERT_EQ(::write(go[1], "x", 1), 1);
    ASSERT_EQ(::waitpid(child, nullptr, 0), child);
    EXPECT_FALSE(RunUntil(io, [&] { return closed; }, 100ms)) << "closed before WritersGone";
    pump.WritersGone();
    ASSERT_TRUE(RunUntil(io, [&] { return closed; }, 60s)) << "no end after WritersGone";
    EXPECT_EQ(pump.Tail(), (bytes + "late\n").substr(bytes.size() + 5 - 16));
  }
  ::close(out);
  ::close(go[0]);
  std::ifstream in(log);
  std::stringstream file;
  file << in.rdbuf();
  EXPECT_EQ(file.str(), bytes + "late\n") << "the file is what the writers wrote";
  const std::string text = FileText();
  EXPECT_EQ(text.rfind("[r]: line 0\n[r]: line 1\n", 0), 0u) << text.substr(0, 80);
  EXPECT_NE(text.find("[r]: line 29999\n[r]: late\n"), std::string::npos);
  std::filesystem::remove(log);
}

// A 64 KiB tmpfs (mount(8) -t tmpfs -o size=64k) at a fresh directory, for a
// full disk; unmounted on every way out. mounted() false without the privilege.
class TinyTmpfs {
 public:
  TinyTmpfs() : dir_(std::filesystem::temp_directory_path() /
                     ("pump-tmpfs-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir_);
    mounted_ = ::mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=64k") == 0;
  }
  ~TinyTmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
    std::filesystem::remove_all(dir_);
  }
  bool mounted() const { return mounted_; }
  std::string File(const std::string& name) const { return (dir_ / name).string(); }

 private:
  std::filesystem::path dir_;
  bool mounted_ = false;
};

// A log file written through the pump (SetFile) on a full disk: the first
// failed write is reported once, with its error, and the console still gets
// every line.
TEST_F(PumpTest, AFullDiskUnderALogFileIsReportedOnceAndTheConsoleKeepsEveryLine) {
  TinyTmpfs disk;
  if (!disk.mounted()) GTEST_SKIP() << "mounting a tmpfs needs CAP_SYS_ADMIN";
  const std::string log = disk.File("0.out");
  int file = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(file, 0);
  int out = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(out, 0);
  asio::io_context io;
  bool closed = false;
  std::vector<int> errors;
  std::string bytes;
  for (int i = 0; i < 20000; ++i) bytes += "line " + std::to_string(i) + "\n";  // ~190 KB
  {
    OutputPump pump(std::exchange(worker_[0], -1), out, "[r]: ");
    pump.SetFile(file);
    pump.OnFileError([&](int err) { errors.push_back(err); });
    pump.Start(io.get_executor(), [&] { closed = true; });
    std::jthread writer([&, fd = worker_[1]] {
      for (std::size_t at = 0; at < bytes.size(); at += 4096) {
        std::string_view piece = std::string_view(bytes).substr(at, 4096);
        if (::write(fd, piece.data(), piece.size()) != static_cast<ssize_t>(piece.size())) return;
      }
      CloseWorker();
    });
    writer.join();
    EXPECT_TRUE(RunUntil(io, [&] { return closed; }, 60s));
  }
  io.restart();
  io.poll();  // whatever else the pump posted
  ::close(out);
  EXPECT_EQ(errors, std::vector<int>{ENOSPC}) << "reported once, with the write's error";
  const std::string file_text = [&] {
    std::ifstream f(log);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  EXPECT_LT(file_text.size(), bytes.size());
  EXPECT_EQ(bytes.compare(0, file_text.size(), file_text), 0) << "the file has what fitted";
  const std::string text = FileText();
  EXPECT_NE(text.find("[r]: line 0\n"), std::string::npos);
  EXPECT_NE(text.find("[r]: line 19999\n"), std::string::npos) << "the console lost lines";
}

// A log file the worker writes itself (followed) on a full disk: the worker's
// writes fail where the pump cannot see them, so it looks at the filesystem:
// a full one is reported once (ENOSPC), even when no more write reaches it.
TEST_F(PumpTest, AFollowedLogFileOnAFullDiskIsReportedOnce) {
  TinyTmpfs disk;
  if (!disk.mounted()) GTEST_SKIP() << "mounting a tmpfs needs CAP_SYS_ADMIN";
  FollowedFile f = OpenFollowedFile(disk.File("0.err"), /*follow=*/true);
  ASSERT_GE(f.watch_fd, 0);
  int out = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  asio::io_context io;
  bool closed = false;
  std::vector<int> errors;
  {
    OutputPump pump(f.read_fd, out, "[r]: ");
    pump.Follow(f.watch_fd);
    pump.OnFileError([&](int err) { errors.push_back(err); });
    pump.Start(io.get_executor(), [&] { closed = true; });
    // The "worker" writes until the disk is full, as torchrun's would.
    const std::string line = std::string(99, 'w') + '\n';
    ssize_t w = 0;
    int write_errno = 0;
    for (int i = 0; i < 10000 && w >= 0; ++i) {
      w = ::write(f.write_fd, line.data(), line.size());
      write_errno = errno;
    }
    ASSERT_LT(w, 0);
    EXPECT_EQ(write_errno, ENOSPC);
    EXPECT_TRUE(RunUntil(io, [&] { return !errors.empty(); }, 60s)) << "never reported";
    for (int i = 0; i < 3; ++i) (void)!::write(f.write_fd, line.data(), line.size());
    ::close(f.write_fd);
    pump.WritersGone();
    EXPECT_TRUE(RunUntil(io, [&] { return closed; }, 60s));
  }
  ::close(out);
  EXPECT_EQ(errors, std::vector<int>{ENOSPC}) << "reported once";
  EXPECT_NE(FileText().find("[r]: " + std::string(99, 'w') + "\n"), std::string::npos)
      << "the console copy has what the file has";
}

// Without a watch to be had (here: no fd left for the inotify instance; in a
// pod, usually fs.inotify.max_user_instances), the file still opens for the
// worker, and the reader is dropped so that the caller pipes the stream.
TEST(OpenFollowedFileTest, WithoutAWatchOnlyTheWorkersFdIsOpened) {
  const std::filesystem::path log =
      std::filesystem::temp_directory_path() / ("follow-" + std::to_string(::getpid()) + ".log");
  {
    std::ofstream(log) << "old contents";
  }
  int probe[3];
  for (int& fd : probe) fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  for (int fd : probe) ::close(fd);
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
  rlimit two_more = saved;
  two_more.rlim_cur = static_cast<rlim_t>(probe[2]);  // probe[0], probe[1] fit; the third does not
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &two_more), 0);
  FollowedFile f = OpenFollowedFile(log, /*follow=*/true);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_GE(f.write_fd, 0);
  EXPECT_EQ(f.read_fd, -1);
  EXPECT_EQ(f.watch_fd, -1);
  EXPECT_EQ(std::filesystem::file_size(log), 0u) << "truncated, as torchrun opens it";
  if (f.write_fd >= 0) ::close(f.write_fd);
  FollowedFile plain = OpenFollowedFile(log, /*follow=*/false);
  EXPECT_GE(plain.write_fd, 0);
  EXPECT_EQ(plain.read_fd, -1);
  if (plain.write_fd >= 0) ::close(plain.write_fd);
  EXPECT_EQ(OpenFollowedFile("/nonexistent-dir/x.log", true).write_fd, -1);
  std::filesystem::remove(log);
}

// The container's output is a pipe whose reader stops reading: the pump waits
// (so the worker feels the backpressure), writes whole lines only, and Stop()
// ends the wait at once; the thread that owns it never blocks.
TEST_F(PumpTest, AStalledReaderBlocksOnlyThePumpAndStopEndsIt) {
  int agent_out[2];
  ASSERT_EQ(::pipe2(agent_out, O_CLOEXEC), 0);
  asio::io_context io;
  bool closed = false;
  auto pump = std::make_unique<OutputPump>(std::exchange(worker_[0], -1), agent_out[1], "[r]: ");
  pump->Start(io.get_executor(), [&] { closed = true; });
  // Fill the agent's pipe, the pump's read-ahead and then the worker's pipe:
  // up to 4 MiB of 99-byte lines.
  const std::string line = std::string(98, 'x') + '\n';
  const std::size_t written = FillUntilPaused(worker_[1], *pump, line, 4u << 20);
  EXPECT_LT(written, 4u << 20) << "the worker never felt the backpressure";
  EXPECT_GE(written, OutputPump::kMaxAhead) << "the pump did not read ahead";
  // What reached the agent's pipe is whole prefixed lines: read it to EAGAIN
  // (every write the pump made by then, as it made them).
  ::fcntl(agent_out[0], F_SETFL, O_NONBLOCK);
  std::string got;
  char chunk[PIPE_BUF];
  for (ssize_t n; (n = ::read(agent_out[0], chunk, sizeof chunk)) > 0;) got.append(chunk, n);
  ASSERT_GE(got.size(), 32u * 1024) << "the pump never filled the agent's pipe";
  const std::string want = "[r]: " + line;
  EXPECT_EQ(got.size() % want.size(), 0u) << "a line was torn";
  for (std::size_t at = 0; at < got.size(); at += want.size()) {
    ASSERT_EQ(got.compare(at, want.size(), want), 0) << "at byte " << at;
  }
  // Stop() ends the blocked write; the pump posts its close and joins, never
  // waiting for the stalled reader (the limit only catches a hang).
  auto t0 = std::chrono::steady_clock::now();
  pump->Stop();
  ASSERT_TRUE(RunUntil(io, [&] { return closed; }, 60s));
  pump.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  ::close(agent_out[0]);
  ::close(agent_out[1]);
}

// Failure classification reads the end of a worker's stderr (Tail()). While the
// container's output is backed up, the pump still reads ahead, so a worker's
// last words (a traceback after much logging) are in the tail, not stuck unread
// in its pipe.
TEST_F(PumpTest, TheTailHoldsTheLastLinesWhileTheOutputIsBackedUp) {
  int agent_out[2];
  ASSERT_EQ(::pipe2(agent_out, O_CLOEXEC), 0);  // nobody reads it
  asio::io_context io;
  bool closed = false;
  auto pump = std::make_unique<OutputPump>(std::exchange(worker_[0], -1), agent_out[1], "[r]: ",
                                           4096);
  pump->Start(io.get_executor(), [&] { closed = true; });
  // 400 KiB: more than the agent's pipe, one read and the worker's pipe
  // together. Non-blocking, with a deadline: a pump that stops reading makes
  // this fail, not hang.
  ::fcntl(worker_[1], F_SETFL, ::fcntl(worker_[1], F_GETFL) | O_NONBLOCK);
  std::string all;
  for (int i = 0; i < 4096; ++i) all += std::string(99, 'x') + '\n';
  all += "RuntimeError: the last words\n";
  std::size_t at = 0;
  auto give_up = std::chrono::steady_clock::now() + 60s;
  while (at < all.size() && std::chrono::steady_clock::now() < give_up) {
    ssize_t n = ::write(worker_[1], all.data() + at, all.size() - at);
    if (n > 0) {
      at += static_cast<std::size_t>(n);
    } else {
      std::this_thread::sleep_for(1ms);
    }
  }
  EXPECT_EQ(at, all.size()) << "the pump stopped reading while its output was backed up";
  CloseWorker();
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (pump->Tail().find("the last words") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  std::string tail = pump->Tail();
  EXPECT_NE(tail.find("RuntimeError: the last words\n"), std::string::npos);
  EXPECT_LE(tail.size(), 4096u);
  EXPECT_FALSE(closed) << "the output is still pending";
  pump->Stop();
  ASSERT_TRUE(RunUntil(io, [&] { return closed; }, 60s));
  pump.reset();
  ::close(agent_out[0]);
  ::close(agent_out[1]);
}

// The turn at an output goes to the pumps in the order they asked, handed over
// directly: a pump that has just written cannot take it again ahead of those
// waiting (it used to: on a slow reader one rank got everything, and the
// others' workers stayed blocked in write()). How evenly ranks share a slow
// console is measured in bench/ (bench/logs.py), not asserted here.
TEST(OutputTurnsTest, TheTurnGoesToTheWaitingInTheOrderTheyAsked) {
  OutputTurns turns;
  int a = 0, b = 0, c = 0;  // three pumps
  const int wake_b = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int wake_c = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  ASSERT_GE(wake_b, 0);
  ASSERT_GE(wake_c, 0);
  auto woken = [](int fd) {
    std::uint64_t n = 0;
    return ::read(fd, &n, sizeof n) == sizeof n && n > 0;
  };
  EXPECT_TRUE(turns.Take(&a, -1)) << "a free turn is taken at once";
  EXPECT_TRUE(turns.Take(&a, -1)) << "the holder still holds it";
  EXPECT_FALSE(turns.Take(&b, wake_b));
  EXPECT_FALSE(turns.Take(&c, wake_c));
  EXPECT_FALSE(turns.Take(&b, wake_b)) << "asking again keeps b's place";
  turns.Leave(&a);
  EXPECT_TRUE(woken(wake_b)) << "handed to b, the first to ask";
  EXPECT_FALSE(woken(wake_c));
  EXPECT_FALSE(turns.Take(&a, -1)) << "a, who just wrote, waits behind c";
  EXPECT_TRUE(turns.Take(&b, wake_b));
  turns.Leave(&b);
  EXPECT_TRUE(woken(wake_c));
  EXPECT_TRUE(turns.Take(&c, wake_c));
  turns.Leave(&a);  // a stops waiting (Stop()): it leaves the queue
  turns.Leave(&c);
  EXPECT_TRUE(turns.Take(&b, wake_b)) << "nobody waits: the turn is free";
  ::close(wake_b);
  ::close(wake_c);
}

// Three ranks that write without pause share a pipe with a slow reader: the
// lines of every rank keep coming, whole. (Counts of lines, not shares: how
// many each gets in a given time depends on how the machine runs the threads.)
TEST_F(PumpTest, RanksSharingASlowPipeAllGetThrough) {
  SigpipeIgnored sigpipe;  // a writer may write once more after its pump is gone
  Pipe agent_out;
  asio::io_context io;
  // Declared before the pumps: on any way out the pumps go first, then the
  // writers are told to stop and joined (a failed ASSERT leaves nothing behind).
  std::vector<Pipe> ranks(3);
  std::vector<std::jthread> writers;
  std::vector<std::unique_ptr<OutputPump>> pumps;
  for (int r = 0; r < 3; ++r) {
    pumps.push_back(std::make_unique<OutputPump>(ranks[r].TakeRead(), agent_out.w,
                                                 "[r" + std::to_string(r) + "]: "));
    pumps.back()->Start(io.get_executor(), [] {});
    ::fcntl(ranks[r].w, F_SETFL, ::fcntl(ranks[r].w, F_GETFL) | O_NONBLOCK);
    writers.emplace_back([fd = ranks[r].w](std::stop_token stop) {
      std::string block;
      for (int i = 0; i < 64; ++i) block += std::string(99, 'x') + '\n';
      std::size_t at = 0;
      while (!stop.stop_requested()) {
        ssize_t n = ::write(fd, block.data() + at, block.size() - at);
        if (n > 0) {
          at = (at + static_cast<std::size_t>(n)) % block.size();
        } else {
          std::this_thread::sleep_for(200us);
        }
      }
    });
  }
  // Read slowly (4 KiB, then a pause) until every rank has 200 lines through;
  // the limit only keeps a starved rank from hanging the test.
  std::map<std::string, std::size_t> lines;
  std::string got;
  char chunk[4096];
  auto every_rank_through = [&] {
    return lines.size() == 3 && std::all_of(lines.begin(), lines.end(),
                                            [](const auto& l) { return l.second >= 200; });
  };
  std::size_t at = 0;
  for (auto give_up = std::chrono::steady_clock::now() + 120s;
       !every_rank_through() && std::chrono::steady_clock::now() < give_up;) {
    ssize_t n = ::read(agent_out.r, chunk, sizeof chunk);
    if (n > 0) got.append(chunk, static_cast<std::size_t>(n));
    for (std::size_t nl; (nl = got.find('\n', at)) != std::string::npos; at = nl + 1) {
      const std::string line = got.substr(at, nl - at);
      const std::string key = line.substr(0, line.find(']') + 1);
      ASSERT_EQ(line, key + ": " + std::string(99, 'x')) << "a torn line";
      ++lines[key];
    }
    std::this_thread::sleep_for(1ms);
  }
  for (int r = 0; r < 3; ++r) {
    const std::string key = "[r" + std::to_string(r) + "]";
    EXPECT_GE(lines[key], 200u) << key << " starved: " << ::testing::PrintToString(lines);
  }
  pumps.clear();  // the reader stops: the pumps are stopped waiting for room
}

// CaughtUp(): whether the tail holds everything the worker wrote so far. What
// waits unread in the pipe (the pump not started yet, as when its thread has
// not run since the worker's last write) is not caught up; once the pump has
// read it, it is, and the tail has the last line.
TEST_F(PumpTest, CaughtUpOnceTheTailHoldsWhatThePipeHeld) {
  int agent_err[2];
  ASSERT_EQ(::pipe2(agent_err, O_CLOEXEC), 0);
  asio::io_context io;
  bool closed = false;
  OutputPump pump(std::exchange(worker_[0], -1), agent_err[1], "[r]: ", 4096);
  Write("step 1\nRuntimeError: NCCL error: ncclRemoteError\n");
  EXPECT_FALSE(pump.CaughtUp()) << "bytes wait in the pipe";
  EXPECT_EQ(pump.Tail(), "");
  pump.Start(io.get_executor(), [&] { closed = true; });
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!pump.CaughtUp() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(pump.CaughtUp());
  EXPECT_NE(pump.Tail().find("ncclRemoteError\n"), std::string::npos) << pump.Tail();
  CloseWorker();
  ASSERT_TRUE(RunUntil(io, [&] { return closed; }, 60s));
  EXPECT_TRUE(pump.CaughtUp()) << "after EOF";
  ::close(agent_err[0]);
  ::close(agent_err[1]);
}

// With the output backed up past kMaxAhead the pump stops reading: CaughtUp()
// says so at once (a caller must not wait for a tail that cannot move).
TEST_F(PumpTest, CaughtUpWhileReadingIsPausedAtTheBound) {
  int agent_err[2];
  ASSERT_EQ(::pipe2(agent_err, O_CLOEXEC), 0);  // nobody reads it
  asio::io_context io;
  OutputPump pump(std::exchange(worker_[0], -1), agent_err[1], "[r]: ", 4096);
  pump.Start(io.get_executor(), [] {});
  ::fcntl(worker_[1], F_SETFL, ::fcntl(worker_[1], F_GETFL) | O_NONBLOCK);
  const std::size_t written =
      FillUntilPaused(worker_[1], pump, std::string(99, 'y') + '\n', 4u << 20);
  ASSERT_GT(written, OutputPump::kMaxAhead) << "the worker was never held back";
  int unread = 0;
  ASSERT_EQ(::ioctl(worker_[1] , FIONREAD, &unread), 0);
  EXPECT_GT(unread, 0) << "bytes wait in the worker's pipe";
  EXPECT_TRUE(pump.CaughtUp()) << "it answers at once: it never waits for the tail to move";
  pump.Stop();
  ::close(agent_err[0]);
  ::close(agent_err[1]);
}

// Stopped in the middle of a line longer than PIPE_BUF (its first pieces out,
// the rest waiting for room), the pump ends the line with '\n' once a slow
// reader makes room: the agent's next log line starts on a line of its own.
TEST_F(PumpTest, AStopInsideALineEndsTheLine) {
  SigpipeIgnored sigpipe;  // the worker thread ends on EPIPE once the pump is gone
  Pipe agent_out;
  asio::io_context io;
  std::jthread worker, stopper;  // joined after the pump is gone (declared before it)
  auto pump = std::make_unique<OutputPump>(std::exchange(worker_[0], -1), agent_out.w, "[r]: ");
  // The room the reader makes comes when this thread runs: on a busy machine
  // that can be long after the default 50 ms.
  pump->SetEndLineWait(20s);
  pump->Start(io.get_executor(), [] {});
  // 200 KB lines (cut at 64 KiB): more than the pipe holds, so each goes out
  // in pieces of at most PIPE_BUF bytes.
  worker = std::jthread([fd = worker_[1]] {
    const std::string big = std::string(200000, 'z') + '\n';
    for (int i = 0; i < 3; ++i) {
      if (::write(fd, big.data(), big.size()) != static_cast<ssize_t>(big.size())) return;
    }
  });
  std::string got;
  char chunk[4096];
  // Take 70,000 bytes, then no more: the pump fills the pipe and waits for
  // room, inside one of its 65,541-byte lines.
  ::fcntl(agent_out.r, F_SETFL, O_NONBLOCK);
  for (auto give_up = std::chrono::steady_clock::now() + 60s;
       got.size() < 70000 && std::chrono::steady_clock::now() < give_up;) {
    ssize_t n = ::read(agent_out.r, chunk, std::min(sizeof chunk, 70000 - got.size()));
    if (n > 0) got.append(chunk, static_cast<std::size_t>(n));
    if (n <= 0) std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(got.size(), 70000u) << "the pump wrote too little";
  std::atomic<bool> stopped{false};
  stopper = std::jthread([&] {
    pump->Stop();
    pump.reset();  // returns once the '\n' is out (or the wait gave up)
    stopped = true;
  });
  while (!stopped) {  // a slow reader makes room meanwhile
    ssize_t n = ::read(agent_out.r, chunk, sizeof chunk);
    if (n > 0) got.append(chunk, static_cast<std::size_t>(n));
    std::this_thread::sleep_for(1ms);
  }
  for (ssize_t n; (n = ::read(agent_out.r, chunk, sizeof chunk)) > 0;) {
    got.append(chunk, static_cast<std::size_t>(n));
  }
  EXPECT_EQ(got.back(), '\n') << "the cut line was left open: " << got.size() << " bytes";
}

// A worker that keeps writing as fast as it can (2-byte lines, which cost the
// pump far more than the worker), into an output that never blocks: Stop()
// still ends the pump at once, so a supervisor can always be torn down.
TEST_F(PumpTest, StopEndsAPumpWhoseWorkerKeepsWriting) {
  int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(devnull, 0);
  SigpipeIgnored sigpipe;  // the writer ends on EPIPE
  asio::io_context io;
  bool closed = false;
  // Joined after the pump is gone (declared before it): its blocked write then
  // gets EPIPE, on every way out of the test.
  std::jthread writer;
  auto pump = std::make_unique<OutputPump>(std::exchange(worker_[0], -1), devnull, "[rank0]: ");
  writer = std::jthread([fd = worker_[1]](std::stop_token stop) {
    std::string lines;
    for (int i = 0; i < 32 * 1024; ++i) lines += "x\n";
    while (!stop.stop_requested() && ::write(fd, lines.data(), lines.size()) > 0) {
    }
  });
  pump->Start(io.get_executor(), [&] { closed = true; });
  std::this_thread::sleep_for(200ms);  // let it get busy (any time will do)
  auto t0 = std::chrono::steady_clock::now();
  pump->Stop();
  ASSERT_TRUE(RunUntil(io, [&] { return closed; }, 60s)) << "the pump never stopped";
  pump.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s) << "a hang, not a speed target";
  ::close(devnull);
}

// Two ranks write lines longer than PIPE_BUF into one pipe (the container's
// stdout): each line goes out in several writes, and none of the other rank's
// lands between them.
TEST_F(PumpTest, LongLinesFromTwoRanksAreNotInterleavedOnAPipe) {
  int agent_out[2], other[2];
  ASSERT_EQ(::pipe2(agent_out, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(other, O_CLOEXEC), 0);
  asio::io_context io;
  int closed = 0;
  auto p0 = std::make_unique<OutputPump>(std::exchange(worker_[0], -1), agent_out[1], "[r0]: ");
  auto p1 = std::make_unique<OutputPump>(other[0], agent_out[1], "[r1]: ");
  p0->Start(io.get_executor(), [&] { ++closed; });
  p1->Start(io.get_executor(), [&] { ++closed; });
  std::string got;
  std::thread reader([&, fd = agent_out[0]] {
    char chunk[4096];
    for (ssize_t n; (n = ::read(fd, chunk, sizeof chunk)) > 0;) got.append(chunk, n);
  });
  auto writer = [](int fd, char c) {
    std::string line(3 * PIPE_BUF, c);
    line += '\n';
    for (int i = 0; i < 200; ++i) ASSERT_EQ(::write(fd, line.data(), line.size()), line.size());
    ::close(fd);
  };
  std::thread a(writer, worker_[1], 'a'), b(writer, other[1], 'b');
  worker_[1] = -1;
  a.join();
  b.join();
  // No early return before the reader is joined: it ends at the pipe's EOF.
  EXPECT_TRUE(RunUntil(io, [&] { return closed == 2; }, 60s));
  p0.reset();
  p1.reset();
  ::close(agent_out[1]);  // the reader sees EOF
  reader.join();
  ::close(agent_out[0]);
  std::istringstream lines(got);
  int count = 0;
  for (std::string line; std::getline(lines, line); ++count) {
    const bool whole = line == "[r0]: " + std::string(3 * PIPE_BUF, 'a') ||
                       line == "[r1]: " + std::string(3 * PIPE_BUF, 'b');
    ASSERT_TRUE(whole) << "line " << count << " is torn: " << line.substr(0, 40) << "...";
  }
  EXPECT_EQ(count, 400);
}

// A non-root pod: fd 1 is a pipe the (root) runtime made, so it cannot be
// reopened non-blocking and the pumps poll for room, then write. With the
// reader stalled after taking a little, Stop() still ends every pump: none is
// left blocked inside write(). Runs in a child that drops to nobody.
TEST_F(PumpTest, StopEndsPumpsOnAPipeThatCannotBeReopened) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a root-owned pipe and drop to nobody";
  int agent_out[2];
  ASSERT_EQ(::pipe2(agent_out, O_CLOEXEC), 0);
  pid_t child = ::fork();
  if (child == 0) {
    std::signal(SIGPIPE, SIG_IGN);
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) _exit(10);
    if (::open(("/proc/self/fd/" + std::to_string(agent_out[1])).c_str(), O_WRONLY) >= 0) {
      _exit(11);  // the reopen works here: not the case under test
    }
    asio::io_context io;
    std::vector<std::unique_ptr<OutputPump>> pumps;
    std::vector<int> workers;
    for (int r = 0; r < 4; ++r) {
      int w[2];
      if (::pipe2(w, O_CLOEXEC) != 0) _exit(12);
      pumps.push_back(std::make_unique<OutputPump>(w[0], agent_out[1], "[r]: "));
      pumps.back()->Start(io.get_executor(), [] {});
      ::fcntl(w[1], F_SETFL, O_NONBLOCK);
      workers.push_back(w[1]);
    }
    std::string line(99, 'x');
    line += '\n';
    auto fill = [&] {
      for (int i = 0; i < 3000; ++i) {
        for (int fd : workers) [[maybe_unused]] ssize_t n = ::write(fd, line.data(), line.size());
      }
    };
    fill();
    char chunk[PIPE_BUF];
    for (int k = 0; k < 20; ++k) {  // the reader takes a little, several times, then stalls
      std::this_thread::sleep_for(20ms);
      [[maybe_unused]] ssize_t n = ::read(agent_out[0], chunk, sizeof chunk);
      fill();
    }
    std::this_thread::sleep_for(300ms);
    std::thread watchdog([] {
      std::this_thread::sleep_for(5s);
      _exit(1);  // a pump is still not joined
    });
    watchdog.detach();
    pumps.clear();
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ::close(agent_out[0]);
  ::close(agent_out[1]);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 11) GTEST_SKIP() << "this kernel lets nobody reopen a root's pipe";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: a pump was still blocked 5 s after Stop()";
}

// A reader that goes away: output is dropped, but the worker is still drained
// (it must not block on a full pipe forever) and EOF is still seen.
TEST_F(PumpTest, AGoneReaderDropsOutputButDrainsTheWorker) {
  int agent_out[2];
  ASSERT_EQ(::pipe2(agent_out, O_CLOEXEC), 0);
  ::close(agent_out[0]);  // EPIPE from the first write (SIGPIPE is ignored below)
  auto old = std::signal(SIGPIPE, SIG_IGN);
  asio::io_context io;
  bool closed = false;
  {
    OutputPump pump(std::exchange(worker_[0], -1), agent_out[1], "[r]: ");
    pump.Start(io.get_executor(), [&] { closed = true; });
    std::thread writer([fd = worker_[1]] {
      std::string block(64 * 1024, 'y');
      block.back() = '\n';
      for (int i = 0; i < 64; ++i) {  // 4 MiB: far more than the pipe holds
        if (::write(fd, block.data(), block.size()) <= 0) break;
      }
    });
    writer.join();
    CloseWorker();
    EXPECT_TRUE(RunUntil(io, [&] { return closed; }, 60s));
  }
  std::signal(SIGPIPE, old);
  ::close(agent_out[1]);
}

}  // namespace
}  // namespace trainlet::agent
