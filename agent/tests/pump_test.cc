// pump.h (private): line prefixing, and the pump thread against real pipes,
// files and a reader that never reads.
#include "../src/pump.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
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

TEST(LinePrefixerTest, AnUnfinishedLineIsCutAtMaxLineNeverDropped) {
  LinePrefixer p("> ", 4);
  EXPECT_EQ(Fed(p, {"abcdefghij"}, false), "> abcd\n> efgh\n");
  EXPECT_EQ(Fed(p, {"k", "\n"}, false), "> ijk\n");
  // A complete line longer than max_line in one read is kept whole.
  EXPECT_EQ(Fed(p, {"0123456789\n"}, false), "> 0123456789\n");
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
  EXPECT_EQ(Fed(p, {"a \"q\" \\ \t\x01\n"}, false),
            "{\"rank\":3,\"stream\":\"stderr\",\"line\":\"a \\\"q\\\" \\\\ \\t\\u0001\"}\n");
  // Carriage returns end lines; the end is not part of the string.
  EXPECT_EQ(Fed(p, {"\r1%\r2%\r\n"}, false),
            "{\"rank\":3,\"stream\":\"stderr\",\"line\":\"1%\"}\n"
            "{\"rank\":3,\"stream\":\"stderr\",\"line\":\"2%\"}\n");
  // Valid UTF-8 passes; invalid bytes become U+FFFD; long lines are cut.
  EXPECT_EQ(Fed(p, {"\xC3\xA9\xFF\n"}, false),
            "{\"rank\":3,\"stream\":\"stderr\",\"line\":\"\xC3\xA9\xEF\xBF\xBD\"}\n");
  EXPECT_EQ(Fed(p, {"0123456789"}, true),
            "{\"rank\":3,\"stream\":\"stderr\",\"line\":\"01234567\"}\n"
            "{\"rank\":3,\"stream\":\"stderr\",\"line\":\"89\"}\n");
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
    ASSERT_TRUE(RunUntil(io, [&] { return closed; }, 5s));
    EXPECT_EQ(pump.Tail(), "finished") << "the last tail_bytes bytes read";
  }
  ::close(out);
  EXPECT_EQ(FileText(), "[rank2]: first\n[rank2]: second line\n[rank2]: unfinished\n");
}

// A log file written through the pump (SetFile: where it cannot be followed)
// gets every byte as written, without prefix, by the time the pump posts its
// close: redirected alone, or beside the console (teed); O_TRUNC or O_APPEND.
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
        ASSERT_TRUE(RunUntil(io, [&] { return closed; }, 5s));
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
  if (child == 0) {  // inherits write_fd; writes once told to
    char c;
    if (::read(go[0], &c, 1) == 1) (void)!::write(f.write_fd, "late\n", 5);
    ::_exit(0);
  }
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
    ASSERT_TRUE(RunUntil(io, [&] { return closed; }, 5s)) << "no end after WritersGone";
    EXPECT_EQ(pump.Tail(), (bytes + "late\n").substr(bytes.size() + 5 - 16));
  }
  ::close(out);
  ::close(go[0]);
  ::close(go[1]);
  std::ifstream in(log);
  std::stringstream file;
  file << in.rdbuf();
  EXPECT_EQ(file.str(), bytes + "late\n") << "the file is what the writers wrote";
  const std::string text = FileText();
  EXPECT_EQ(text.rfind("[r]: line 0\n[r]: line 1\n", 0), 0u) << text.substr(0, 80);
  EXPECT_NE(text.find("[r]: line 29999\n[r]: late\n"), std::string::npos);
  std::filesystem::remove(log);
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
  int fl = ::fcntl(worker_[1], F_GETFL);
  ::fcntl(worker_[1], F_SETFL, fl | O_NONBLOCK);
  std::string line(98, 'x');
  line += '\n';
  std::size_t written = 0;
  auto progress = std::chrono::steady_clock::now();  // stop once 300 ms pass without any
  while (written < (4u << 20) && std::chrono::steady_clock::now() - progress < 300ms) {
    ssize_t n = ::write(worker_[1], line.data(), line.size());
    if (n > 0) {
      written += static_cast<std::size_t>(n);
      progress = std::chrono::steady_clock::now();
    } else {
      std::this_thread::sleep_for(1ms);
    }
  }
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
  // Stop() ends the blocked write; the pump posts its close and joins fast.
  auto t0 = std::chrono::steady_clock::now();
  pump->Stop();
  ASSERT_TRUE(RunUntil(io, [&] { return closed; }, 2s));
  pump.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
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
  auto give_up = std::chrono::steady_clock::now() + 2s;
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
  auto deadline = std::chrono::steady_clock::now() + 2s;
  while (pump->Tail().find("the last words") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  std::string tail = pump->Tail();
  EXPECT_NE(tail.find("RuntimeError: the last words\n"), std::string::npos);
  EXPECT_LE(tail.size(), 4096u);
  EXPECT_FALSE(closed) << "the output is still pending";
  pump->Stop();
  ASSERT_TRUE(RunUntil(io, [&] { return closed; }, 2s));
  pump.reset();
  ::close(agent_out[0]);
  ::close(agent_out[1]);
}

// Three ranks that write without pause share a pipe whose reader takes 4 KiB
// a millisecond: each gets its share. (A pump that had just written used to
// take the output again before the others looked: one rank got everything,
// and the others' workers stayed blocked in write().)
TEST_F(PumpTest, RanksSharingASlowPipeEachGetTheirShare) {
  int agent_out[2];
  ASSERT_EQ(::pipe2(agent_out, O_CLOEXEC), 0);
  asio::io_context io;
  std::atomic<bool> go{true};
  std::vector<std::unique_ptr<OutputPump>> pumps;
  std::vector<std::thread> workers;
  std::vector<int> write_ends;
  for (int r = 0; r < 3; ++r) {
    int w[2];
    ASSERT_EQ(::pipe2(w, O_CLOEXEC), 0);
    write_ends.push_back(w[1]);
    pumps.push_back(std::make_unique<OutputPump>(w[0], agent_out[1], "[r" + std::to_string(r) + "]: "));
    pumps.back()->Start(io.get_executor(), [] {});
    ::fcntl(w[1], F_SETFL, ::fcntl(w[1], F_GETFL) | O_NONBLOCK);
    workers.emplace_back([fd = w[1], &go] {
      std::string block;
      for (int i = 0; i < 64; ++i) block += std::string(99, 'x') + '\n';
      std::size_t at = 0;
      while (go.load()) {
        ssize_t n = ::write(fd, block.data() + at, block.size() - at);
        if (n > 0) {
          at = (at + static_cast<std::size_t>(n)) % block.size();
        } else {
          std::this_thread::sleep_for(200us);
        }
      }
    });
  }
  std::string got;
  char chunk[4096];
  for (auto end = std::chrono::steady_clock::now() + 1500ms; std::chrono::steady_clock::now() < end;) {
    ssize_t n = ::read(agent_out[0], chunk, sizeof chunk);
    if (n > 0) got.append(chunk, static_cast<std::size_t>(n));
    std::this_thread::sleep_for(1ms);
  }
  go = false;
  for (auto& t : workers) t.join();
  for (auto& p : pumps) p->Stop();
  pumps.clear();
  for (int fd : write_ends) ::close(fd);
  ::close(agent_out[0]);
  ::close(agent_out[1]);
  std::map<std::string, std::size_t> lines;
  std::size_t total = 0;
  for (std::size_t at = 0; at < got.size();) {
    std::size_t nl = got.find('\n', at);
    if (nl == std::string::npos) break;
    ++lines[got.substr(at, got.find(']', at) + 1 - at)];
    ++total;
    at = nl + 1;
  }
  ASSERT_GT(total, 1000u) << "the reader got almost nothing";
  for (int r = 0; r < 3; ++r) {
    std::string key = "[r" + std::to_string(r) + "]";
    EXPECT_GE(lines[key] * 5, total) << key << " got " << lines[key] << " of " << total << " lines";
  }
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
  auto deadline = std::chrono::steady_clock::now() + 2s;
  while (!pump.CaughtUp() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_TRUE(pump.CaughtUp());
  EXPECT_NE(pump.Tail().find("ncclRemoteError\n"), std::string::npos) << pump.Tail();
  CloseWorker();
  ASSERT_TRUE(RunUntil(io, [&] { return closed; }, 2s));
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
  const std::string line = std::string(99, 'y') + '\n';
  std::size_t written = 0;
  for (auto idle_since = std::chrono::steady_clock::now();
       std::chrono::steady_clock::now() - idle_since < 200ms;) {
    if (::write(worker_[1], line.data(), line.size()) > 0) {
      written += line.size();
      idle_since = std::chrono::steady_clock::now();
    } else {
      std::this_thread::sleep_for(1ms);
    }
  }
  ASSERT_GT(written, OutputPump::kMaxAhead) << "the worker was never held back";
  int unread = 0;
  ASSERT_EQ(::ioctl(worker_[1] , FIONREAD, &unread), 0);
  EXPECT_GT(unread, 0) << "bytes wait in the worker's pipe";
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(pump.CaughtUp());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10ms);
  pump.Stop();
  ::close(agent_err[0]);
  ::close(agent_err[1]);
}

// Stopped in the middle of a line longer than PIPE_BUF (its first pieces out,
// the rest waiting for room), the pump ends the line with '\n' once a slow
// reader makes room: the agent's next log line starts on a line of its own.
TEST_F(PumpTest, AStopInsideALineEndsTheLine) {
  // The worker thread may still be writing when the pump (and the read end)
  // is gone, on a loaded machine: it ends on EPIPE.
  auto old = std::signal(SIGPIPE, SIG_IGN);
  int agent_out[2];
  ASSERT_EQ(::pipe2(agent_out, O_CLOEXEC), 0);
  asio::io_context io;
  auto pump = std::make_unique<OutputPump>(std::exchange(worker_[0], -1), agent_out[1], "[r]: ");
  pump->Start(io.get_executor(), [] {});
  // 200 KB lines: more than the pipe holds, so each goes out in pieces.
  std::thread worker([fd = worker_[1]] {
    const std::string big = std::string(200000, 'z') + '\n';
    for (int i = 0; i < 3; ++i) {
      if (::write(fd, big.data(), big.size()) != static_cast<ssize_t>(big.size())) return;
    }
  });
  std::string got;
  char chunk[4096];
  ::fcntl(agent_out[0], F_SETFL, O_NONBLOCK);
  auto read_some = [&](std::chrono::milliseconds for_how_long) {
    for (auto end = std::chrono::steady_clock::now() + for_how_long;
         std::chrono::steady_clock::now() < end;) {
      ssize_t n = ::read(agent_out[0], chunk, sizeof chunk);
      if (n > 0) got.append(chunk, static_cast<std::size_t>(n));
      std::this_thread::sleep_for(1ms);
    }
  };
  read_some(60ms);  // a slow reader: ~240 KB in, so the pump is inside line 2
  ASSERT_GT(got.size(), 70000u);
  std::thread stopper([&] { pump->Stop(); pump.reset(); });
  read_some(150ms);  // still reading slowly while the pump ends its line
  stopper.join();
  for (ssize_t n; (n = ::read(agent_out[0], chunk, sizeof chunk)) > 0;) {
    got.append(chunk, static_cast<std::size_t>(n));
  }
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got.back(), '\n') << "the cut line was left open: " << got.size() << " bytes";
  CloseWorker();
  worker.join();
  ::close(agent_out[0]);
  ::close(agent_out[1]);
  std::signal(SIGPIPE, old);
}

// A worker that keeps writing as fast as it can (2-byte lines, which cost the
// pump far more than the worker), into an output that never blocks: Stop()
// still ends the pump at once, so a supervisor can always be torn down.
TEST_F(PumpTest, StopEndsAPumpWhoseWorkerKeepsWriting) {
  int devnull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  ASSERT_GE(devnull, 0);
  auto old = std::signal(SIGPIPE, SIG_IGN);  // the writer ends on EPIPE
  asio::io_context io;
  bool closed = false;
  std::atomic<bool> writing{true};
  std::thread writer([&, fd = worker_[1]] {
    std::string lines;
    for (int i = 0; i < 32 * 1024; ++i) lines += "x\n";
    while (writing && ::write(fd, lines.data(), lines.size()) > 0) {
    }
  });
  auto pump = std::make_unique<OutputPump>(std::exchange(worker_[0], -1), devnull, "[rank0]: ");
  pump->Start(io.get_executor(), [&] { closed = true; });
  std::this_thread::sleep_for(200ms);
  auto t0 = std::chrono::steady_clock::now();
  pump->Stop();
  ASSERT_TRUE(RunUntil(io, [&] { return closed; }, 2s)) << "the pump never stopped";
  pump.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  writing = false;
  writer.join();  // the pump closed its end: a blocked write gets EPIPE
  CloseWorker();
  std::signal(SIGPIPE, old);
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
  ASSERT_TRUE(RunUntil(io, [&] { return closed == 2; }, 10s));
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
    EXPECT_TRUE(RunUntil(io, [&] { return closed; }, 5s));
  }
  std::signal(SIGPIPE, old);
  ::close(agent_out[1]);
}

}  // namespace
}  // namespace trainlet::agent
