// trainlet/rendezvous/resolver.h — asynchronous host name resolution on our event loop.
//
// A `Resolver` looks up the A and AAAA records of a name with c-ares, the way
// getaddrinfo(3) would: search domains and `ndots` from resolv.conf(5) apply, so
// a member pod can resolve the leader as `trainer-0.trainer`. There is no
// resolver thread and nothing blocks: c-ares' sockets and retransmit timer are
// driven by Asio waits on the executor given to Create().
//
// Thread rules: not thread-safe. Create it, call it and destroy it on the one
// thread that runs the executor's handlers (or before that loop starts); the
// executor must not run handlers concurrently (one thread, or a strand). Every
// completion callback runs on that executor, never inline inside Resolve().
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/address.hpp>

#include "trainlet/exitcodes/status.h"
#include "trainlet/rendezvous/resolve_error.h"

namespace trainlet::rendezvous {

struct ResolveOutcome {
  // Every A and AAAA address, without duplicates, in RFC 6724 order (the order
  // getaddrinfo(3) would give). Empty unless ok().
  std::vector<boost::asio::ip::address> addresses;
  ResolveError error = ResolveError::kNone;
  // For a failure, c-ares' code and message ("ARES_ESERVFAIL: ..."); empty on success.
  std::string detail;

  bool ok() const { return error == ResolveError::kNone; }
};

struct ResolverOptions {
  // "ip", "ip:port", "[ipv6]:port"; empty: the nameservers of resolv.conf.
  // A server that does not answer is retried and the next one tried; a
  // SERVFAIL, REFUSED or NOTIMP answer is final for that Resolve (no failover).
  std::vector<std::string> servers;
  // nullopt: from resolv.conf ("search"/"domain"). An empty list: no search domains.
  std::optional<std::vector<std::string>> search_domains;
  // nullopt: from resolv.conf ("options ndots:N"), else 1. A name with fewer
  // dots is tried with each search domain before it is tried as is.
  std::optional<int> ndots;
  // The resolv.conf(5) to read; nullopt: /etc/resolv.conf. Must exist if set.
  std::optional<std::string> resolv_conf_path;
  // Timeout of the first try of one query, in milliseconds; c-ares doubles it
  // on each further round over the servers. > 0.
  std::chrono::milliseconds query_timeout{2000};
  // Rounds over the servers for one query; >= 1. A silent network fails a
  // Resolve after about servers * query_timeout * (2^tries - 1): 6 s with one
  // server and the defaults.
  int tries = 2;
  // false: DNS only, never /etc/hosts (c-ares lookups "b"). The kubelet writes
  // the pod's own FQDN there, so only the cluster's DNS tells whether other pods
  // can resolve a name (LeaderNameCheck).
  bool hosts_file = true;
};

// One per event-loop thread; see the thread rules above.
class Resolver {
 public:
  using Callback = std::function<void(ResolveOutcome)>;

  // Builds a resolver whose sockets and timer run on `ex`. Reads resolv.conf now
  // (not on each query). Fails with kConfig for invalid options (bad server
  // address, tries < 1, missing resolv_conf_path, ...) and kInfra if c-ares
  // cannot be initialised. Does not block beyond reading resolv.conf.
  [[nodiscard]] static exitcodes::Result<std::unique_ptr<Resolver>> Create(
      boost::asio::any_io_executor ex, ResolverOptions options);

  // Ends every query still in flight: its callback is posted with kCancelled,
  // and runs on the executor after the destructor returns (if the executor still
  // runs handlers; a destroyed io_context discards it without calling it).
  // Completions already posted keep their outcome. Closes c-ares' sockets.
  ~Resolver();

  Resolver(const Resolver&) = delete;
  Resolver& operator=(const Resolver&) = delete;

  // Looks up the A and AAAA records of `name`, trying search domains per ndots
  // (and, as getaddrinfo does, /etc/hosts first: a small local file read in
  // place). An IP literal ("10.0.0.7", "fd00::1") completes with itself and
  // sends no query. `done` must be non-null; it runs exactly once, on the
  // executor, never inline. A timeout on one candidate name ends the
  // whole lookup with kTimeout, so the time to failure is bounded as described
  // at ResolverOptions::tries.
  // Any number of queries may be in flight at once.
  void Resolve(const std::string& name, Callback done);

  // Ends every query in flight with kCancelled, as the destructor does; the
  // resolver stays usable. Completions already posted keep their outcome.
  void Cancel();

 private:
  struct Impl;
  explicit Resolver(std::shared_ptr<Impl> impl);

  std::shared_ptr<Impl> impl_;
};

}  // namespace trainlet::rendezvous
