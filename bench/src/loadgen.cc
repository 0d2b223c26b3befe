// trainlet-loadgen: simulates many member pods of one gang from one process.
//
//   trainlet-loadgen --port P --nnodes N --first-index 1 --count N-1 [options]
//
// Opens one TCP connection per simulated pod to a trainlet leader and speaks the
// rendezvous protocol through the sans-IO codec (trainlet/rendezvous/wire.h),
// with the Hello the real agent builds (trainlet/rendezvous/launch.h), so it
// stays admissible when the wire or the launch configuration changes. After its
// Assignment each connection stays open as a control channel: it answers every
// leader heartbeat, reports success after --report-after-ms (never when < 0)
// and closes on Stop. A connection the leader drops or refuses as retriable
// before the assignment is retried after --retry-ms, as a real member would.
//
// Prints "assigned <CLOCK_REALTIME ns>" once every simulated pod has its
// assignment, then one JSON line when every connection has closed (or at
// --timeout-s, exit 1): the start, the moment the last pod started joining,
// the moment the last assignment arrived, counts of retries and rejects.
// Faults, for bench/wire_faults.py: --idle N opens N more connections that never
// send a byte, each reopened as soon as the leader drops it; --misaligned-s S makes
// every simulated pod, once assigned, stream heartbeat frames for S seconds in
// writes of 4097 bytes (each ending one byte into a frame), then report success.
// Single-threaded; not a supported tool, a benchmark harness.
#include <sys/resource.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "trainlet/exitcodes/ports.h"
#include "trainlet/rendezvous/launch.h"
#include "trainlet/rendezvous/wire.h"

namespace asio = boost::asio;
using asio::ip::tcp;
namespace wire = trainlet::rendezvous::wire;

namespace {

std::int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

struct Options {
  std::string host = "127.0.0.1";
  std::uint16_t port = trainlet::exitcodes::ports::kRendezvous;
  trainlet::rendezvous::LaunchSettings launch{.job_id = "bench"};
  std::uint32_t first_index = 1;
  std::uint32_t count = 1;
  int report_after_ms = 0;
  int retry_ms = 50;
  int timeout_s = 120;
  std::uint32_t idle = 0;
  int misaligned_s = 0;
};

struct Stats {
  std::int64_t started_ns = 0;
  std::int64_t last_started_ns = 0;
  std::int64_t all_assigned_ns = 0;
  std::int64_t first_assigned_ns = 0;
  std::uint32_t assigned = 0;
  std::uint64_t retries = 0;
  std::uint64_t rejects = 0;
  std::uint64_t stops = 0;
  std::uint64_t heartbeats = 0;
  std::uint64_t errors = 0;
  std::uint64_t idle_reopens = 0;
  std::uint64_t misaligned_bytes = 0;
  std::uint32_t open = 0;
  std::string last_error;
};

class Pod : public std::enable_shared_from_this<Pod> {
 public:
  Pod(asio::io_context& io, const Options& o, Stats& st, tcp::endpoint ep, std::uint32_t index)
      : io_(io), o_(o), st_(st), ep_(ep), index_(index), socket_(io), timer_(io) {}

  void Start() {
    ++st_.open;
    Connect();
  }

 private:
  void Connect() {
    decoder_ = wire::Decoder();
    socket_ = tcp::socket(io_);
    socket_.async_connect(ep_, [self = shared_from_this()](boost::system::error_code ec) {
      if (ec) return self->Retry("connect: " + ec.message());
      boost::system::error_code ignored;
      self->socket_.set_option(tcp::no_delay(true), ignored);
      auto hello = trainlet::rendezvous::MakeHello(
          {.job_id = self->o_.launch.job_id, .attempt = self->o_.launch.attempt,
           .index = self->index_, .nnodes = self->o_.launch.nnodes,
           .nproc_per_node = self->o_.launch.nproc_per_node,
           .master_port = self->o_.launch.master_port});
      self->Send(wire::Encode(hello));
      self->Read();
    });
  }

  void Retry(const std::string& why) {
    boost::system::error_code ignored;
    socket_.close(ignored);
    if (assigned_ || done_) return Close(why);
    ++st_.retries;
    st_.last_error = why;
    out_.clear();
    timer_.expires_after(std::chrono::milliseconds(o_.retry_ms));
    timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (!ec) self->Connect();
    });
  }

  void Close(const std::string& why) {
    if (done_) return;
    done_ = true;
    if (!assigned_) {
      ++st_.errors;
      st_.last_error = why;
    }
    boost::system::error_code ignored;
    socket_.close(ignored);
    timer_.cancel();
    if (--st_.open == 0) io_.stop();
  }

  void Read() {
    socket_.async_read_some(
        asio::buffer(buf_), [self = shared_from_this()](boost::system::error_code ec, std::size_t n) {
          if (self->done_) return;
          if (ec) {
            if (self->assigned_) return self->Close("closed");
            return self->Retry("read: " + ec.message());
          }
          if (auto s = self->decoder_.Feed(std::span(self->buf_.data(), n)); !s.ok()) {
            return self->Close(s.message());
          }
          for (;;) {
            auto next = self->decoder_.Next();
            if (!next.ok()) return self->Close(next.status().message());
            if (!next->has_value()) break;
            if (!self->OnMessage(**next)) return;
          }
          self->Read();
        });
  }

  // False when the connection is finished with.
  bool OnMessage(const wire::Message& m) {
    if (const auto* a = std::get_if<wire::Assignment>(&m)) {
      if (assigned_ || a->rank_base != index_ * o_.launch.nproc_per_node) {
        Close("unexpected assignment");
        return false;
      }
      assigned_ = true;
      if (st_.first_assigned_ns == 0) st_.first_assigned_ns = NowNs();
      if (++st_.assigned == o_.count) {
        st_.all_assigned_ns = NowNs();
        std::printf("assigned %lld\n", static_cast<long long>(st_.all_assigned_ns));
        std::fflush(stdout);
      }
      if (o_.misaligned_s > 0) {
        Flood(std::chrono::steady_clock::now() + std::chrono::seconds(o_.misaligned_s));
      } else if (o_.report_after_ms == 0) {
        SendReport();
      } else if (o_.report_after_ms > 0) {
        timer_.expires_after(std::chrono::milliseconds(o_.report_after_ms));
        timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
          if (!ec && !self->done_) self->SendReport();
        });
      }
      return true;
    }
    if (std::holds_alternative<wire::Heartbeat>(m)) {
      ++st_.heartbeats;
      if (flooding_) return true;  // one writer at a time: the flood is heartbeats anyway
      Send(wire::Encode(wire::Heartbeat{}));
      return true;
    }
    if (const auto* r = std::get_if<wire::Reject>(&m)) {
      ++st_.rejects;
      if (r->retriable) {
        Retry("rejected: " + r->reason);
      } else {
        Close("rejected: " + r->reason);
      }
      return false;
    }
    if (std::holds_alternative<wire::Stop>(m)) {
      ++st_.stops;
      Close("stopped");
      return false;
    }
    Close("unexpected message (a token-protected leader?)");
    return false;
  }

  // Heartbeats as one endless byte stream, cut into writes that end one byte
  // into a frame (4097 = 341 frames + 5 bytes), until `until`; then the report.
  void Flood(std::chrono::steady_clock::time_point until) {
    if (done_) return;
    flooding_ = std::chrono::steady_clock::now() < until;
    if (!flooding_) return SendReport();
    static const std::vector<std::uint8_t> hb = wire::Encode(wire::Heartbeat{});
    flood_.resize(4097);
    for (auto& b : flood_) {
      b = hb[flood_pos_];
      flood_pos_ = (flood_pos_ + 1) % hb.size();
    }
    asio::async_write(socket_, asio::buffer(flood_),
                      [self = shared_from_this(), until](boost::system::error_code ec,
                                                         std::size_t n) {
                        self->st_.misaligned_bytes += n;
                        if (!ec) self->Flood(until);
                      });
  }

  void SendReport() { Send(wire::Encode(wire::Report{.index = index_, .ok = true, .failure_class = 0, .reason = ""})); }

  void Send(std::vector<std::uint8_t> frame) {
    out_.push_back(std::move(frame));
    if (out_.size() == 1) WriteFront();
  }

  void WriteFront() {
    asio::async_write(socket_, asio::buffer(out_.front()),
                      [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                        if (self->out_.empty()) return;  // reset by a retry
                        self->out_.pop_front();
                        if (ec) return;  // the read side sees the broken connection
                        if (!self->out_.empty()) self->WriteFront();
                      });
  }

  asio::io_context& io_;
  const Options& o_;
  Stats& st_;
  tcp::endpoint ep_;
  std::uint32_t index_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  wire::Decoder decoder_;
  std::array<std::uint8_t, 512> buf_{};
  std::deque<std::vector<std::uint8_t>> out_;
  std::vector<std::uint8_t> flood_;
  std::size_t flood_pos_ = 0;
  bool flooding_ = false;
  bool assigned_ = false;
  bool done_ = false;
};

// A connection that never sends: reconnects as soon as the leader drops it.
class Idle : public std::enable_shared_from_this<Idle> {
 public:
  Idle(asio::io_context& io, Stats& st, tcp::endpoint ep)
      : io_(io), st_(st), ep_(ep), socket_(io), timer_(io) {}
  void Connect() {
    socket_ = tcp::socket(io_);
    socket_.async_connect(ep_, [self = shared_from_this()](boost::system::error_code ec) {
      if (ec) {  // not listening (yet, or any more): try again soon
        self->timer_.expires_after(std::chrono::milliseconds(10));
        self->timer_.async_wait([self](boost::system::error_code e) {
          if (!e) self->Connect();
        });
        return;
      }
      self->socket_.async_read_some(asio::buffer(self->buf_),
                                    [self](boost::system::error_code, std::size_t) {
                                      ++self->st_.idle_reopens;
                                      self->Connect();  // dropped: straight back
                                    });
    });
  }

 private:
  asio::io_context& io_;
  Stats& st_;
  tcp::endpoint ep_;
  tcp::socket socket_;
  asio::steady_timer timer_;
  std::array<std::uint8_t, 64> buf_{};
};

std::string JsonSafe(std::string s) {
  s = s.substr(0, 200);
  for (char& c : s) {
    if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) c = '\'';
  }
  return s;
}

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "trainlet-loadgen: %s\nusage: trainlet-loadgen --port P --nnodes N "
               "[--first-index 1] [--count N-1] [--host 127.0.0.1] [--nproc-per-node 1] "
               "[--master-port 29500] [--job-id bench] [--attempt 0] [--report-after-ms 0] "
               "[--retry-ms 50] [--timeout-s 120]\n",
               why);
  std::exit(78);
}

long Number(const char* flag, const char* v, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
    Usage((std::string(flag) + ": not a number in range: " + v).c_str());
  }
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool count_given = false;
  for (int i = 1; i < argc; ++i) {
    std::string f = argv[i];
    if (i + 1 >= argc) Usage(("missing value for " + f).c_str());
    const char* v = argv[++i];
    if (f == "--host") o.host = v;
    else if (f == "--port") o.port = static_cast<std::uint16_t>(Number(argv[i - 1], v, 1, 65535));
    else if (f == "--nnodes") o.launch.nnodes = Number(argv[i - 1], v, 1, 1 << 20);
    else if (f == "--nproc-per-node") o.launch.nproc_per_node = Number(argv[i - 1], v, 1, 1024);
    else if (f == "--master-port") o.launch.master_port = Number(argv[i - 1], v, 1, 65535);
    else if (f == "--job-id") o.launch.job_id = v;
    else if (f == "--attempt") o.launch.attempt = Number(argv[i - 1], v, 0, 1 << 30);
    else if (f == "--first-index") o.first_index = Number(argv[i - 1], v, 1, 1 << 20);
    else if (f == "--count") { o.count = Number(argv[i - 1], v, 0, 1 << 20); count_given = true; }
    else if (f == "--report-after-ms") o.report_after_ms = Number(argv[i - 1], v, -1, 1 << 30);
    else if (f == "--retry-ms") o.retry_ms = Number(argv[i - 1], v, 1, 60'000);
    else if (f == "--timeout-s") o.timeout_s = Number(argv[i - 1], v, 1, 86'400);
    else if (f == "--idle") o.idle = Number(argv[i - 1], v, 0, 1 << 20);
    else if (f == "--misaligned-s") o.misaligned_s = Number(argv[i - 1], v, 0, 86'400);
    else Usage(("unknown flag " + f).c_str());
  }
  if (!count_given && o.launch.nnodes <= o.first_index) Usage("nothing to simulate");
  if (count_given && o.count == 0 && o.idle == 0) Usage("--count 0 needs --idle");
  if (!count_given) o.count = o.launch.nnodes - o.first_index;
  if (o.first_index + o.count > o.launch.nnodes) Usage("first-index + count exceeds nnodes");

  // One descriptor per simulated pod: raise the soft limit to the hard one.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < o.count + o.idle + 16) {
    std::fprintf(stderr, "trainlet-loadgen: RLIMIT_NOFILE %llu is below %u connections\n",
                 static_cast<unsigned long long>(rl.rlim_cur), o.count);
    return 75;
  }

  asio::io_context io(1);
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(o.host, ec);
  if (ec) Usage(("--host must be an IP address: " + o.host).c_str());
  tcp::endpoint ep(addr, o.port);
  Stats st;
  st.started_ns = NowNs();
  std::vector<std::shared_ptr<Pod>> pods;
  pods.reserve(o.count);
  for (std::uint32_t k = 0; k < o.count; ++k) {
    pods.push_back(std::make_shared<Pod>(io, o, st, ep, o.first_index + k));
    pods.back()->Start();
  }
  std::vector<std::shared_ptr<Idle>> idle;
  for (std::uint32_t k = 0; k < o.idle; ++k) {
    idle.push_back(std::make_shared<Idle>(io, st, ep));
    idle.back()->Connect();
  }
  st.last_started_ns = NowNs();

  asio::signal_set signals(io, SIGTERM, SIGINT);
  signals.async_wait([&](boost::system::error_code, int) { io.stop(); });
  asio::steady_timer deadline(io);
  bool timed_out = false;
  deadline.expires_after(std::chrono::seconds(o.timeout_s));
  deadline.async_wait([&](boost::system::error_code e) {
    if (!e) {
      timed_out = true;
      io.stop();
    }
  });
  io.run();
  std::printf(
      "{\"count\": %u, \"first_assigned_ns\": %lld, \"started_ns\": %lld, \"last_started_ns\": %lld, \"all_assigned_ns\": %lld, "
      "\"assigned\": %u, \"retries\": %llu, \"rejects\": %llu, \"stops\": %llu, "
      "\"heartbeats\": %llu, \"errors\": %llu, \"idle_reopens\": %llu, "
      "\"misaligned_bytes\": %llu, \"timed_out\": %s, \"last_error\": \"%s\"}\n",
      o.count, static_cast<long long>(st.first_assigned_ns), static_cast<long long>(st.started_ns), static_cast<long long>(st.last_started_ns),
      static_cast<long long>(st.all_assigned_ns), st.assigned,
      static_cast<unsigned long long>(st.retries), static_cast<unsigned long long>(st.rejects),
      static_cast<unsigned long long>(st.stops), static_cast<unsigned long long>(st.heartbeats),
      static_cast<unsigned long long>(st.errors),
      static_cast<unsigned long long>(st.idle_reopens),
      static_cast<unsigned long long>(st.misaligned_bytes), timed_out ? "true" : "false",
      JsonSafe(st.last_error).c_str());
  return (st.assigned == o.count && !timed_out) ? 0 : 1;
}
