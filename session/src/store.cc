#include "trainlet/store.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <thread>

namespace trainlet {
namespace {

using Clock = std::chrono::steady_clock;

enum Op : std::uint8_t { kSet = 1, kGet = 2, kAdd = 3 };
constexpr std::size_t kMaxFrame = 1 + 4 + kMaxStoreKey + 4 + kMaxStoreValue;

void PutU32(std::string& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out += static_cast<char>((v >> s) & 0xff);
}
std::uint32_t GetU32(const char* p) {
  auto b = reinterpret_cast<const unsigned char*>(p);
  return std::uint32_t(b[0]) << 24 | std::uint32_t(b[1]) << 16 | std::uint32_t(b[2]) << 8 | b[3];
}

std::string Frame(const std::string& payload) {
  std::string f;
  PutU32(f, static_cast<std::uint32_t>(payload.size()));
  return f + payload;
}

// Parses a request payload: op, key, value. False when malformed.
bool ParseRequest(const std::string& p, Op* op, std::string* key, std::string* value) {
  if (p.size() < 9) return false;
  *op = static_cast<Op>(p[0]);
  std::uint32_t klen = GetU32(p.data() + 1);
  if (klen > kMaxStoreKey || p.size() < 9 + std::size_t(klen)) return false;
  *key = p.substr(5, klen);
  std::uint32_t vlen = GetU32(p.data() + 5 + klen);
  if (vlen > kMaxStoreValue || p.size() != 9 + std::size_t(klen) + vlen) return false;
  *value = p.substr(9 + klen, vlen);
  return *op == kSet || *op == kGet || *op == kAdd;
}

}  // namespace

// ---- Server: one thread, poll(2) over the listener, a wake pipe and clients ----

struct StoreServer::Impl {
  int listen_fd = -1;
  int wake[2] = {-1, -1};
  std::uint16_t port = 0;
  std::thread thread;
  struct Conn {
    int fd;
    std::string in, out;
    std::optional<std::string> waiting_for;  // a GET parked until the key exists
  };
  std::map<std::string, std::string> data;
  std::atomic<int> connections{0};

  void Reply(Conn& c, const std::string& value) { c.out += Frame(std::string(1, '\0') + value); }

  // Handles complete frames in c.in; false to drop the connection.
  bool Serve(Conn& c, std::vector<Conn*>& woken) {
    while (!c.waiting_for && c.in.size() >= 4) {
      std::uint32_t len = GetU32(c.in.data());
      if (len > kMaxFrame) return false;  // before allocating anything for it
      if (c.in.size() < 4 + std::size_t(len)) break;
      Op op;
      std::string key, value;
      if (!ParseRequest(c.in.substr(4, len), &op, &key, &value)) return false;
      c.in.erase(0, 4 + len);
      if (op == kSet) {
        data[key] = value;
        Reply(c, "");
        woken.push_back(nullptr);  // recheck parked GETs
      } else if (op == kAdd) {
        std::int64_t delta = std::strtoll(value.c_str(), nullptr, 10);
        std::int64_t now = std::strtoll(data[key].c_str(), nullptr, 10) + delta;
        data[key] = std::to_string(now);
        Reply(c, data[key]);
        woken.push_back(nullptr);
      } else if (auto it = data.find(key); it != data.end()) {
        Reply(c, it->second);
      } else {
        c.waiting_for = key;
      }
    }
    return true;
  }

  void Run() {
    std::vector<std::unique_ptr<Conn>> conns;
    for (;;) {
      std::vector<pollfd> fds = {{wake[0], POLLIN, 0}, {listen_fd, POLLIN, 0}};
      for (auto& c : conns) {
        fds.push_back({c->fd, static_cast<short>(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
      }
      if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
      if (fds[0].revents != 0) return;  // Stop
      if (fds[1].revents & POLLIN) {
        int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) {
          int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          conns.push_back(std::make_unique<Conn>(Conn{fd, {}, {}, std::nullopt}));
        }
      }
      bool changed = false;
      for (std::size_t i = 2; i < fds.size(); ++i) {
        Conn& c = *conns[i - 2];
        bool drop = false;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
          char buf[65536];
          ssize_t n = ::read(c.fd, buf, sizeof(buf));
          if (n > 0) {
            c.in.append(buf, static_cast<std::size_t>(n));
            std::vector<Conn*> woken;
            drop = !Serve(c, woken);
            changed = changed || !woken.empty();
          } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
            drop = true;
          }
        }
        if (!drop && (fds[i].revents & POLLOUT) && !c.out.empty()) {
          ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
          if (n > 0) c.out.erase(0, static_cast<std::size_t>(n));
          if (n < 0 && errno != EAGAIN && errno != EINTR) drop = true;
        }
        if (drop) {
          ::close(c.fd);
          c.fd = -1;
        }
      }
      std::erase_if(conns, [](const auto& c) { return c->fd < 0; });
      connections = static_cast<int>(conns.size());
      // A Set or Add may release parked GETs (and their pipelined requests).
      while (changed) {
        changed = false;
        for (auto& c : conns) {
          if (!c->waiting_for) continue;
          auto it = data.find(*c->waiting_for);
          if (it == data.end()) continue;
          Reply(*c, it->second);
          c->waiting_for.reset();
          std::vector<Conn*> woken;
          Serve(*c, woken);
          changed = changed || !woken.empty();
        }
      }
    }
  }
};

StoreServer::StoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<StoreServer> StoreServer::Start(std::uint16_t port, int world_size,
                                                StoreError* error) {
  auto impl = std::make_unique<Impl>();
  int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool v6 = fd >= 0;
  if (!v6) fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    if (error) *error = {std::string("socket: ") + std::strerror(errno), false};
    return nullptr;
  }
  int one = 1, zero = 0;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_storage ss{};
  socklen_t len;
  if (v6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_any;
    a->sin6_port = htons(port);
    len = sizeof(sockaddr_in6);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_ANY);
    a->sin_port = htons(port);
    len = sizeof(sockaddr_in);
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 ||
      ::listen(fd, std::max(128, world_size)) != 0) {
    if (error) {
      *error = {"store port " + std::to_string(port) + ": " + std::strerror(errno), false};
    }
    ::close(fd);
    return nullptr;
  }
  socklen_t got = sizeof(ss);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &got);
  impl->port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                        : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  impl->listen_fd = fd;
  if (::pipe2(impl->wake, O_CLOEXEC) != 0) {
    if (error) *error = {"pipe failed", false};
    ::close(fd);
    return nullptr;
  }
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<StoreServer>(new StoreServer(std::move(impl)));
}

StoreServer::~StoreServer() {
  char c = 1;
  (void)!::write(impl_->wake[1], &c, 1);
  if (impl_->thread.joinable()) impl_->thread.join();
  ::close(impl_->listen_fd);
  ::close(impl_->wake[0]);
  ::close(impl_->wake[1]);
}

std::uint16_t StoreServer::port() const { return impl_->port; }

bool StoreServer::WaitIdle(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (impl_->connections.load() > 0) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// ---- Client: a blocking socket driven with poll(2) and a deadline ----

struct StoreClient::Impl {
  std::string host;
  std::uint16_t port;
  int world_size;
  int fd = -1;
  std::map<std::string, int> barrier_rounds;
  std::minstd_rand rng{std::random_device{}()};

  void Close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }

  static int Remaining(Clock::time_point deadline) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return ms < 0 ? 0 : static_cast<int>(std::min<long long>(ms, 1 << 30));
  }

  bool Connect(Clock::time_point deadline, StoreError* error) {
    if (fd >= 0) return true;
    std::chrono::milliseconds backoff(10);
    std::string last = "no attempt";
    for (;;) {
      addrinfo hints{};
      hints.ai_socktype = SOCK_STREAM;
      addrinfo* res = nullptr;
      int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
      if (rc != 0) {
        last = host + ": " + ::gai_strerror(rc);
      } else {
        for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
          int s = ::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
          if (s < 0) continue;
          if (::connect(s, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
            pollfd p{s, POLLOUT, 0};
            int err = 0;
            socklen_t elen = sizeof(err);
            if (::poll(&p, 1, std::min(Remaining(deadline), 2000)) == 1 &&
                ::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &elen) == 0 && err == 0) {
              int one = 1;
              ::setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
              fd = s;
              break;
            }
            last = host + ":" + std::to_string(port) + ": " +
                   (err != 0 ? std::strerror(err) : "connect timed out");
          } else {
            last = host + ":" + std::to_string(port) + ": " + std::strerror(errno);
          }
          ::close(s);
        }
        ::freeaddrinfo(res);
      }
      if (fd >= 0) return true;
      if (Clock::now() + backoff >= deadline) {
        if (error) *error = {"store unreachable: " + last, true};
        return false;
      }
      // Capped, jittered exponential backoff (PyTorch TCPStore's lesson: never a fixed stagger).
      std::uniform_int_distribution<long> jitter(backoff.count() / 2, backoff.count());
      std::this_thread::sleep_for(std::chrono::milliseconds(jitter(rng)));
      backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
    }
  }

  // One request and its reply within the deadline. On any failure the
  // connection is closed (a late reply would desynchronise it).
  std::optional<std::string> Call(Op op, const std::string& key, const std::string& value,
                                  std::chrono::milliseconds timeout, StoreError* error) {
    if (key.size() > kMaxStoreKey || value.size() > kMaxStoreValue) {
      if (error) *error = {"store: key or value over its limit", false};
      return std::nullopt;
    }
    auto deadline = Clock::now() + timeout;
    if (!Connect(deadline, error)) return std::nullopt;
    std::string p(1, static_cast<char>(op));
    PutU32(p, static_cast<std::uint32_t>(key.size()));
    p += key;
    PutU32(p, static_cast<std::uint32_t>(value.size()));
    p += value;
    std::string out = Frame(p);
    std::size_t sent = 0;
    auto fail = [&](const std::string& why, bool timed_out) -> std::optional<std::string> {
      Close();
      if (error) *error = {"store: " + why + " (key '" + key + "')", timed_out};
      return std::nullopt;
    };
    while (sent < out.size()) {
      pollfd pf{fd, POLLOUT, 0};
      if (::poll(&pf, 1, Remaining(deadline)) != 1) return fail("deadline while sending", true);
      ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return fail(std::string("send: ") + std::strerror(errno), false);
      sent += static_cast<std::size_t>(n);
    }
    std::string in;
    for (;;) {
      if (in.size() >= 4) {
        std::uint32_t len = GetU32(in.data());
        if (len == 0 || len > 1 + kMaxStoreValue) return fail("malformed reply", false);
        if (in.size() >= 4 + std::size_t(len)) {
          if (in[4] != 0) return fail("server refused the request", false);
          return in.substr(5, len - 1);
        }
      }
      pollfd pf{fd, POLLIN, 0};
      int r = ::poll(&pf, 1, Remaining(deadline));
      if (r == 0) return fail("deadline of " + std::to_string(timeout.count()) + " ms passed", true);
      if (r < 0 && errno == EINTR) continue;
      char buf[65536];
      ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return fail("the store closed the connection", false);
      in.append(buf, static_cast<std::size_t>(n));
    }
  }
};

StoreClient::StoreClient(std::string host, std::uint16_t port, int world_size)
    : impl_(std::make_unique<Impl>()) {
  impl_->host = std::move(host);
  impl_->port = port;
  impl_->world_size = world_size;
}

StoreClient::~StoreClient() { impl_->Close(); }

bool StoreClient::Set(const std::string& key, const std::string& value,
                      std::chrono::milliseconds timeout, StoreError* error) {
  return impl_->Call(kSet, key, value, timeout, error).has_value();
}

std::optional<std::string> StoreClient::Get(const std::string& key,
                                            std::chrono::milliseconds timeout, StoreError* error) {
  return impl_->Call(kGet, key, "", timeout, error);
}

std::optional<std::int64_t> StoreClient::Add(const std::string& key, std::int64_t delta,
                                             std::chrono::milliseconds timeout,
                                             StoreError* error) {
  auto v = impl_->Call(kAdd, key, std::to_string(delta), timeout, error);
  if (!v) return std::nullopt;
  return std::strtoll(v->c_str(), nullptr, 10);
}

bool StoreClient::Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                       StoreError* error) {
  auto deadline = Clock::now() + timeout;
  for (const auto& k : keys) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (!Get(k, std::max(left, std::chrono::milliseconds(0)), error)) return false;
  }
  return true;
}

bool StoreClient::Barrier(const std::string& name, std::chrono::milliseconds timeout,
                          StoreError* error) {
  auto deadline = Clock::now() + timeout;
  int round = impl_->barrier_rounds[name]++;
  std::string base = "trainlet/barrier/" + name + "/" + std::to_string(round);
  auto n = Add(base + "/count", 1, timeout, error);
  if (!n) return false;
  if (*n == impl_->world_size) {
    if (!Set(base + "/done", "1", timeout, error)) return false;
  }
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (!Get(base + "/done", std::max(left, std::chrono::milliseconds(0)), error)) {
    if (error) {
      error->message = "barrier '" + name + "': " + std::to_string(*n) + " of " +
                       std::to_string(impl_->world_size) + " ranks had arrived when this one did; " +
                       error->message;
    }
    return false;
  }
  return true;
}

}  // namespace trainlet
