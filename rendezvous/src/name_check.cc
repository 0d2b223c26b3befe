#include "trainlet/rendezvous/name_check.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

#include <boost/asio/steady_timer.hpp>
#include <spdlog/spdlog.h>

#include "logging.h"
#include "net_util.h"

namespace trainlet::rendezvous {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

std::vector<asio::ip::address> LocalAddresses() {
  std::vector<asio::ip::address> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_flags & IFF_UP) == 0) continue;
    if (i->ifa_addr->sa_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      asio::ip::address_v4::bytes_type b;
      std::memcpy(b.data(), &a->sin_addr, b.size());
      out.emplace_back(asio::ip::address_v4(b));
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      asio::ip::address_v6::bytes_type b;
      std::memcpy(b.data(), &a->sin6_addr, b.size());
      out.emplace_back(asio::ip::address_v6(b, a->sin6_scope_id));
    }
  }
  ::freeifaddrs(list);
  return out;
}

bool IsOwnAddress(const asio::ip::address& address, const std::vector<asio::ip::address>& ours) {
  asio::ip::address a = address;
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    a = asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
  }
  if (a.is_loopback()) return true;
  for (const auto& o : ours) {
    if (o == a) return true;
    if (a.is_v6() && o.is_v6() && o.to_v6().to_bytes() == a.to_v6().to_bytes()) return true;
  }
  return false;
}

struct LeaderNameCheck::Impl {
  Impl(asio::any_io_executor ex, NameCheckOptions o) : options(std::move(o)), timer(ex) {}
  NameCheckOptions options;
  std::unique_ptr<Resolver> resolver;
  asio::steady_timer timer;
  std::function<void(const std::string&)> report;
  Clock::time_point started = Clock::now();
  bool done = false;
};

exitcodes::Result<std::shared_ptr<LeaderNameCheck>> LeaderNameCheck::Start(
    asio::any_io_executor executor, NameCheckOptions options,
    std::function<void(const std::string&)> report) {
  std::shared_ptr<LeaderNameCheck> c(new LeaderNameCheck());
  options.resolver.hosts_file = false;
  ResolverOptions ro = options.resolver;
  c->impl_ = std::make_unique<Impl>(executor, std::move(options));
  c->impl_->report = std::move(report);
  boost::system::error_code literal;
  asio::ip::make_address(c->impl_->options.name, literal);
  if (!literal || c->impl_->options.name.empty()) {
    c->impl_->done = true;  // an IP address (or nothing) to check: nothing DNS can break
    return c;
  }
  auto resolver = Resolver::Create(executor, ro);
  if (!resolver.ok()) return resolver.status();
  c->impl_->resolver = std::move(resolver).value();
  c->Check();
  return c;
}

LeaderNameCheck::~LeaderNameCheck() { Cancel(); }

void LeaderNameCheck::Cancel() {
  if (!impl_ || impl_->done) return;
  impl_->done = true;
  impl_->timer.cancel();
  if (impl_->resolver) impl_->resolver->Cancel();
}

void LeaderNameCheck::Check() {
  Impl& im = *impl_;
  im.resolver->Resolve(im.options.name, [self = shared_from_this()](ResolveOutcome out) {
    Impl& im = *self->impl_;
    if (im.done) return;
    auto ours = im.options.local_addresses ? im.options.local_addresses() : LocalAddresses();
    std::string problem;
    if (out.ok() && im.options.on_resolved) im.options.on_resolved(out.addresses);
    if (im.done) return;
    if (out.ok()) {
      for (const auto& a : out.addresses) {
        if (IsOwnAddress(a, ours)) {
          Logger("rendezvous")->debug("leader: {} resolves to this pod ({})", im.options.name,
                                      AddressForPeers(a));
          im.done = true;
          return;
        }
      }
      std::string got, mine;
      for (const auto& a : out.addresses) got += (got.empty() ? "" : ", ") + AddressForPeers(a);
      for (const auto& a : ours) {
        if (!a.is_loopback()) mine += (mine.empty() ? "" : ", ") + AddressForPeers(a);
      }
      problem = "resolves to " + got + ", none of them this pod's (" +
                (mine.empty() ? "no address" : mine) +
                "): the members will dial another pod. Check that the headless Service selects "
                "only this Job's pods and that no stale pod of an earlier run holds the name";
    } else {
      problem = "does not resolve through the cluster DNS (" +
                std::string(ResolveErrorName(out.error)) +
                "), so no member can reach this leader. Check that the headless Service's "
                "selector matches this pod's labels, that the pod's spec.subdomain names that "
                "Service, and that the Service sets publishNotReadyAddresses: true (this pod is "
                "not Ready until its gang forms, so without it the record never appears)";
    }
    if (Clock::now() - im.started >= im.options.patience) {
      im.done = true;
      if (im.report) im.report("the leader's name " + im.options.name + " " + problem);
      return;
    }
    im.timer.expires_after(im.options.interval);
    im.timer.async_wait([self](boost::system::error_code ec) {
      if (!ec && !self->impl_->done) self->Check();
    });
  });
}

}  // namespace trainlet::rendezvous
