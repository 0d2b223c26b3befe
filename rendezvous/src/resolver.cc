#include "trainlet/rendezvous/resolver.h"

#include <ares.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/system/error_code.hpp>
#include <spdlog/spdlog.h>

#include "logging.h"

namespace trainlet::rendezvous {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using exitcodes::Status;

// Rounds of ares_process_fd() per wakeup before yielding to other handlers.
constexpr int kMaxRoundsPerWakeup = 16;

ResolveError MapStatus(int status) {
  switch (status) {
    case ARES_SUCCESS:
      return ResolveError::kNone;
    case ARES_ENOTFOUND:  // NXDOMAIN (RFC 1035 4.1.1 RCODE 3) for every candidate.
    case ARES_ENODATA:    // NOERROR without A/AAAA (RFC 2308 "NODATA").
      return ResolveError::kNotFound;
    case ARES_ESERVFAIL:  // RCODE 2.
    case ARES_EFORMERR:   // RCODE 1: the server could not parse our query.
    case ARES_ENOTIMP:    // RCODE 4.
    case ARES_EBADRESP:   // A reply we could not parse.
      return ResolveError::kServerFailure;
    case ARES_EREFUSED:      // RCODE 5.
    case ARES_ECONNREFUSED:  // ICMP port unreachable on UDP, RST on TCP.
      return ResolveError::kRefused;
    case ARES_ETIMEOUT:
      return ResolveError::kTimeout;
    case ARES_EBADNAME:
    case ARES_ENONAME:
      return ResolveError::kBadName;
    case ARES_ECANCELLED:    // ares_cancel()
    case ARES_EDESTRUCTION:  // ares_destroy()
      return ResolveError::kCancelled;
    default:
      return ResolveError::kOther;
  }
}

// "ARES_ENOTFOUND: Domain name not found": the code is what one greps for.
std::string Detail(int status) {
  const char* code = "ARES_E?";
  switch (status) {
    case ARES_ENODATA: code = "ARES_ENODATA"; break;
    case ARES_EFORMERR: code = "ARES_EFORMERR"; break;
    case ARES_ESERVFAIL: code = "ARES_ESERVFAIL"; break;
    case ARES_ENOTFOUND: code = "ARES_ENOTFOUND"; break;
    case ARES_ENOTIMP: code = "ARES_ENOTIMP"; break;
    case ARES_EREFUSED: code = "ARES_EREFUSED"; break;
    case ARES_EBADNAME: code = "ARES_EBADNAME"; break;
    case ARES_EBADRESP: code = "ARES_EBADRESP"; break;
    case ARES_ECONNREFUSED: code = "ARES_ECONNREFUSED"; break;
    case ARES_ETIMEOUT: code = "ARES_ETIMEOUT"; break;
    case ARES_ENOMEM: code = "ARES_ENOMEM"; break;
    case ARES_EDESTRUCTION: code = "ARES_EDESTRUCTION"; break;
    case ARES_ECANCELLED: code = "ARES_ECANCELLED"; break;
    default: break;
  }
  return std::string(code) + ": " + ares_strerror(status);
}

// A Resolve() handed to c-ares; owned by c-ares until its callback runs. It holds
// what the completion needs, so the callback never touches the Resolver: it may
// run inside ares_destroy() while the Resolver is being torn down.
struct Query {
  asio::any_io_executor ex;
  Resolver::Callback done;
  std::string name;
  Clock::time_point start;
  std::shared_ptr<spdlog::logger> log;
};

void Deliver(const asio::any_io_executor& ex, Resolver::Callback done, ResolveOutcome outcome) {
  asio::post(ex, [done = std::move(done), outcome = std::move(outcome)]() mutable {
    done(std::move(outcome));
  });
}

void AddUnique(std::vector<asio::ip::address>& out, const asio::ip::address& a) {
  if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
}

// The ares_addrinfo_callback of every Resolve(). noexcept: an exception must not
// unwind through c-ares' C frames; running out of memory here terminates.
void OnAddrInfo(void* arg, int status, int timeouts, ares_addrinfo* result) noexcept {
  std::unique_ptr<Query> q(static_cast<Query*>(arg));
  // The result is ours to free, and NULL on failure (ares_getaddrinfo(3)).
  std::unique_ptr<ares_addrinfo, decltype(&ares_freeaddrinfo)> ai(result, &ares_freeaddrinfo);

  ResolveOutcome out;
  out.error = MapStatus(status);
  if (status == ARES_SUCCESS) {
    for (const ares_addrinfo_node* n = ai ? ai->nodes : nullptr; n != nullptr; n = n->ai_next) {
      if (n->ai_family == AF_INET && n->ai_addrlen >= static_cast<int>(sizeof(sockaddr_in))) {
        sockaddr_in sin;
        std::memcpy(&sin, n->ai_addr, sizeof sin);
        AddUnique(out.addresses, asio::ip::address_v4(ntohl(sin.sin_addr.s_addr)));
      } else if (n->ai_family == AF_INET6 &&
                 n->ai_addrlen >= static_cast<int>(sizeof(sockaddr_in6))) {
        sockaddr_in6 sin6;
        std::memcpy(&sin6, n->ai_addr, sizeof sin6);
        asio::ip::address_v6::bytes_type bytes;
        std::memcpy(bytes.data(), sin6.sin6_addr.s6_addr, bytes.size());
        AddUnique(out.addresses, asio::ip::address_v6(bytes, sin6.sin6_scope_id));
      }
    }
    if (out.addresses.empty()) {
      out.error = ResolveError::kNotFound;
      out.detail = "no A or AAAA address in the answer";
    }
  } else {
    out.detail = Detail(status);
  }

  const auto ms = std::chrono::duration<double, std::milli>(Clock::now() - q->start).count();
  if (out.ok()) {
    q->log->debug("dns {}: {} addresses in {:.1f} ms", q->name, out.addresses.size(), ms);
  } else {
    q->log->debug("dns {}: {} ({}) after {:.1f} ms, {} timeouts", q->name,
                  ResolveErrorName(out.error), out.detail, ms, timeouts);
  }
  Deliver(q->ex, std::move(q->done), std::move(out));
}

// Which of `want_read`/`want_write` the socket is ready for right now, by a
// zero-timeout poll(2): POLLIN, POLLOUT or both, 0 when neither.
short ReadyNow(int fd, bool want_read, bool want_write) {
  pollfd p{fd, static_cast<short>((want_read ? POLLIN : 0) | (want_write ? POLLOUT : 0)), 0};
  if (p.events == 0) return 0;
  int n;
  do {
    n = ::poll(&p, 1, 0);
  } while (n < 0 && errno == EINTR);
  return n > 0 ? static_cast<short>(p.revents & (POLLIN | POLLOUT)) : 0;
}

}  // namespace

// The state behind a Resolver. Shared-owned only so that Asio handlers can hold
// a weak_ptr to it: a handler that runs after the Resolver is gone (a wait that
// completed just before the destructor, an aborted wait) finds it expired.
struct Resolver::Impl : std::enable_shared_from_this<Resolver::Impl> {
  // One socket c-ares asked us to watch (ARES_OPT_SOCK_STATE_CB). c-ares owns
  // the fd: the descriptor is only a handle for readiness waits and is
  // release()d, never closed, when c-ares stops watching it. Handlers hold the
  // Watch by shared_ptr and check `closed`, so a wait on a socket that c-ares
  // has since closed (and whose fd number it may have reused) does nothing.
  struct Watch {
    Watch(const asio::any_io_executor& ex, ares_socket_t s) : fd(s), descriptor(ex) {}
    ares_socket_t fd;
    asio::posix::stream_descriptor descriptor;
    bool want_read = false;
    bool want_write = false;
    bool read_pending = false;
    bool write_pending = false;
    bool closed = false;
  };

  explicit Impl(asio::any_io_executor ex)
      : ex_(std::move(ex)), timer_(ex_), log_(Logger("dns")) {}

  ~Impl() { Shutdown(); }

  // Ends all queries (callbacks posted with kCancelled) and drops all sockets.
  void Shutdown() {
    if (channel_ == nullptr) return;
    // ares_destroy() calls each query's callback with ARES_EDESTRUCTION and
    // reports each socket closed through OnSockState(), so `this` must be whole.
    ares_destroy(channel_);
    channel_ = nullptr;
    for (auto& [fd, w] : watches_) Forget(*w);  // Defensive: should be empty now.
    watches_.clear();
    timer_.cancel();
  }

  void Resolve(const std::string& name, Callback done) {
    if (!done) {
      std::fprintf(stderr, "trainlet: Resolver::Resolve needs a callback\n");
      std::abort();
    }
    // RFC 1035 2.3.4: at most 255 octets on the wire, i.e. 253 characters plus
    // an optional root dot. c-ares checks label lengths itself.
    if (name.empty() || name.size() > 254 || name.find('\0') != std::string::npos) {
      Deliver(ex_, std::move(done),
              ResolveOutcome{{}, ResolveError::kBadName, "not a host name"});
      return;
    }
    boost::system::error_code ec;
    const asio::ip::address literal = asio::ip::make_address(name, ec);
    if (!ec) {
      Deliver(ex_, std::move(done), ResolveOutcome{{literal}, ResolveError::kNone, {}});
      return;
    }
    auto q = std::make_unique<Query>(Query{ex_, std::move(done), name, Clock::now(), log_});
    ares_addrinfo_hints hints{};
    hints.ai_family = AF_UNSPEC;  // A and AAAA.
    // The callback may run inline (e.g. a hit in /etc/hosts); it only posts.
    ares_getaddrinfo(channel_, name.c_str(), /*service=*/nullptr, &hints, &OnAddrInfo,
                     q.release());
    ArmTimer();
  }

  void Cancel() {
    if (channel_ == nullptr) return;
    ares_cancel(channel_);  // Callbacks run now with ARES_ECANCELLED and post.
    ArmTimer();
  }

  static void SockStateThunk(void* data, ares_socket_t fd, int readable, int writable) noexcept {
    static_cast<Impl*>(data)->OnSockState(fd, readable != 0, writable != 0);
  }

  // c-ares tells us which sockets to watch for what; (fd, 0, 0) means it is
  // about to close fd. Called from inside ares_* calls, including ares_destroy().
  void OnSockState(ares_socket_t fd, bool readable, bool writable) {
    auto it = watches_.find(fd);
    if (!readable && !writable) {
      if (it != watches_.end()) {
        Forget(*it->second);
        watches_.erase(it);
      }
      return;
    }
    if (it == watches_.end()) {
      auto w = std::make_shared<Watch>(ex_, fd);
      boost::system::error_code ec;
      w->descriptor.assign(fd, ec);  // Registers fd with the reactor.
      if (ec) {
        // Without readiness events the query still ends, by ares_timeout().
        log_->error("dns: cannot watch c-ares socket {}: {}", fd, ec.message());
        return;
      }
      it = watches_.emplace(fd, std::move(w)).first;
    }
    const std::shared_ptr<Watch> w = it->second;
    w->want_read = readable;
    w->want_write = writable;
    Arm(w);
  }

  static void Forget(Watch& w) {
    w.closed = true;
    w.want_read = w.want_write = false;
    // Deregisters from the reactor and aborts pending waits, leaving the fd open.
    (void)w.descriptor.release();
  }

  void Arm(const std::shared_ptr<Watch>& w) {
    if (w->closed) return;
    if (w->want_read && !w->read_pending) {
      w->read_pending = true;
      w->descriptor.async_wait(asio::posix::descriptor_base::wait_read,
                               [self = weak_from_this(), w](const boost::system::error_code& ec) {
                                 w->read_pending = false;
                                 OnWaitDone(self, w, ec, /*read=*/true);
                               });
    }
    if (w->want_write && !w->write_pending) {
      w->write_pending = true;
      w->descriptor.async_wait(asio::posix::descriptor_base::wait_write,
                               [self = weak_from_this(), w](const boost::system::error_code& ec) {
                                 w->write_pending = false;
                                 OnWaitDone(self, w, ec, /*read=*/false);
                               });
    }
  }

  static void OnWaitDone(const std::weak_ptr<Impl>& self, const std::shared_ptr<Watch>& w,
                         const boost::system::error_code& ec, bool read) {
    if (w->closed || ec == asio::error::operation_aborted) return;
    const std::shared_ptr<Impl> impl = self.lock();
    if (!impl) return;
    if (ec) {
      // Not expected for a registered socket; leave it to c-ares' timeouts.
      impl->log_->warn("dns: wait on c-ares socket {} failed: {}", w->fd, ec.message());
      return;
    }
    impl->Service(w, read, !read);
  }

  // Lets c-ares handle a ready socket. Asio's epoll reactor is edge-triggered
  // and async_wait does not look at the socket before waiting, so bytes left
  // unread would never wake us again. c-ares drains UDP sockets but reads a TCP
  // reply one recv(2) at a time, so keep going while poll(2) says it is ready.
  void Service(const std::shared_ptr<Watch>& w, bool read, bool write) {
    read = read && w->want_read;
    write = write && w->want_write;
    int rounds = 0;
    while ((read || write) && channel_ != nullptr) {
      if (++rounds > kMaxRoundsPerWakeup) {
        asio::post(ex_, [self = weak_from_this(), w, read, write] {
          const std::shared_ptr<Impl> impl = self.lock();
          if (impl && !w->closed) impl->Service(w, read, write);
        });
        break;
      }
      ares_process_fd(channel_, read ? w->fd : ARES_SOCKET_BAD, write ? w->fd : ARES_SOCKET_BAD);
      if (w->closed) break;
      const short ready = ReadyNow(w->fd, w->want_read, w->want_write);
      read = (ready & POLLIN) != 0;
      write = (ready & POLLOUT) != 0;
    }
    Arm(w);
    ArmTimer();
  }

  // Keeps one timer wait at c-ares' next deadline (retransmit or timeout).
  void ArmTimer() {
    if (channel_ == nullptr) return;
    timeval tv{};
    if (ares_timeout(channel_, nullptr, &tv) == nullptr) {
      // Nothing in flight.
      if (timer_armed_) {
        timer_.cancel();
        timer_armed_ = false;
      }
      return;
    }
    const Clock::time_point due =
        Clock::now() + std::chrono::seconds(tv.tv_sec) + std::chrono::microseconds(tv.tv_usec);
    // An earlier wait is fine: OnTimer() re-arms for the real deadline.
    if (timer_armed_ && timer_.expiry() <= due) return;
    timer_.expires_at(due);  // Aborts the previous wait, if any.
    timer_armed_ = true;
    const std::uint64_t generation = ++timer_generation_;
    timer_.async_wait([self = weak_from_this(), generation](const boost::system::error_code& ec) {
      if (ec) return;  // Superseded or shut down.
      const std::shared_ptr<Impl> impl = self.lock();
      // A wait that completed just before it was superseded.
      if (!impl || generation != impl->timer_generation_) return;
      impl->timer_armed_ = false;
      impl->OnTimer();
    });
  }

  void OnTimer() {
    if (channel_ == nullptr) return;
    // With no socket named, ares_process_fd() only handles expired queries.
    ares_process_fd(channel_, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
    ArmTimer();
  }

  asio::any_io_executor ex_;
  asio::steady_timer timer_;
  bool timer_armed_ = false;
  std::uint64_t timer_generation_ = 0;
  ares_channel channel_ = nullptr;
  std::unordered_map<ares_socket_t, std::shared_ptr<Watch>> watches_;
  std::shared_ptr<spdlog::logger> log_;
};

Resolver::Resolver(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Resolver::~Resolver() {
  // Explicit, so c-ares is torn down now even if a handler were to hold the Impl.
  impl_->Shutdown();
}

void Resolver::Resolve(const std::string& name, Callback done) {
  impl_->Resolve(name, std::move(done));
}

void Resolver::Cancel() { impl_->Cancel(); }

namespace {

// Checks `options` (resolver.h) and returns the servers as c-ares' CSV ("" = resolv.conf's).
exitcodes::Result<std::string> ValidateOptions(const ResolverOptions& options) {
  if (options.query_timeout.count() <= 0 || options.query_timeout.count() > INT_MAX) {
    return Status::Config("dns: query_timeout must be in (0, INT_MAX] ms");
  }
  if (options.tries < 1) return Status::Config("dns: tries must be >= 1");
  // resolv.conf(5): "The maximum value for ndots is 15".
  if (options.ndots && (*options.ndots < 0 || *options.ndots > 15)) {
    return Status::Config("dns: ndots must be in [0, 15]");
  }
  if (options.search_domains) {
    for (const std::string& d : *options.search_domains) {
      if (d.empty()) return Status::Config("dns: empty search domain");
    }
  }
  if (options.resolv_conf_path && ::access(options.resolv_conf_path->c_str(), R_OK) != 0) {
    return Status::Config("dns: cannot read resolv.conf " + *options.resolv_conf_path + ": " +
                          std::strerror(errno));
  }
  std::string csv;
  for (const std::string& s : options.servers) {
    if (s.empty() || s.find(',') != std::string::npos) {
      return Status::Config("dns: bad server address '" + s + "'");
    }
    if (!csv.empty()) csv += ',';
    csv += s;
  }
  return csv;
}

// ares_library_init() once per process: it is not thread-safe; a no-op on Linux, but required.
Status InitAresLibrary() {
  static std::once_flag once;
  static int library_status = ARES_SUCCESS;
  std::call_once(once, [] { library_status = ares_library_init(ARES_LIB_INIT_ALL); });
  if (library_status != ARES_SUCCESS) {
    return Status::Infra(std::string("dns: ares_library_init: ") + ares_strerror(library_status));
  }
  return Status::Ok();
}

// A channel configured from `options` (ares_init_options(3)) whose sockets are reported to
// `cb(data, ...)`; its servers are set separately.
exitcodes::Result<ares_channel> InitChannel(ResolverOptions& options, ares_sock_state_cb cb,
                                            void* data) {
  ares_options o{};
  int mask = ARES_OPT_FLAGS | ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES;
  // Without NOCHECKRESP, c-ares 1.18 treats a SERVFAIL/REFUSED/NOTIMP answer as
  // a dead server, tries the others, and then fails with ARES_ECONNREFUSED,
  // losing the RCODE. With it, the RCODE reaches us (ARES_ESERVFAIL, ...) at the
  // cost of that failover; our callers retry with backoff anyway.
  o.flags = ARES_FLAG_NOCHECKRESP;
  o.sock_state_cb = cb;
  o.sock_state_cb_data = data;
  o.timeout = static_cast<int>(options.query_timeout.count());
  o.tries = options.tries;
  // ares_init_options() copies everything it is given.
  std::vector<char*> domains;
  if (options.search_domains) {
    for (std::string& d : *options.search_domains) domains.push_back(d.data());
    o.domains = domains.data();
    o.ndomains = static_cast<int>(domains.size());  // 0 overrides resolv.conf too.
    mask |= ARES_OPT_DOMAINS;
  }
  if (options.ndots) {
    o.ndots = *options.ndots;
    mask |= ARES_OPT_NDOTS;
  }
  if (options.resolv_conf_path) {
    o.resolvconf_path = options.resolv_conf_path->data();
    mask |= ARES_OPT_RESOLVCONF;
  }
  char dns_only[] = "b";  // ares_init_options(3) ARES_OPT_LOOKUPS: "b" DNS, "f" hosts file
  if (!options.hosts_file) {
    o.lookups = dns_only;
    mask |= ARES_OPT_LOOKUPS;
  }
  ares_channel channel = nullptr;
  if (int rc = ares_init_options(&channel, &o, mask); rc != ARES_SUCCESS) {
    return Status::Infra(std::string("dns: ares_init_options: ") + ares_strerror(rc));
  }
  return channel;
}

}  // namespace

exitcodes::Result<std::unique_ptr<Resolver>> Resolver::Create(asio::any_io_executor ex,
                                                               ResolverOptions options) {
  auto csv = ValidateOptions(options);
  if (!csv.ok()) return csv.status();
  if (Status s = InitAresLibrary(); !s.ok()) return s;
  auto impl = std::make_shared<Impl>(std::move(ex));
  auto channel = InitChannel(options, &Impl::SockStateThunk, impl.get());
  if (!channel.ok()) return channel.status();
  impl->channel_ = *channel;
  if (!csv->empty()) {
    if (int rc = ares_set_servers_ports_csv(*channel, csv->c_str()); rc != ARES_SUCCESS) {
      return Status::Config("dns: bad server list '" + *csv + "': " + ares_strerror(rc));
    }
  }
  impl->log_->debug("dns resolver: servers {}, query timeout {} ms, {} tries",
                    csv->empty() ? std::string("from resolv.conf") : *csv,
                    options.query_timeout.count(), options.tries);
  return std::unique_ptr<Resolver>(new Resolver(std::move(impl)));
}

}  // namespace trainlet::rendezvous
