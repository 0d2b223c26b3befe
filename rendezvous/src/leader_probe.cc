#include "trainlet/rendezvous/leader_probe.h"

#include <array>
#include <optional>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "logging.h"
#include "net_util.h"
#include "trainlet/rendezvous/auth.h"
#include "trainlet/rendezvous/name_check.h"

namespace trainlet::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;

struct LeaderProbe::Impl {
  Impl(asio::any_io_executor ex, LeaderProbeOptions o)
      : executor(ex), options(std::move(o)), timer(ex), deadline(ex), socket(ex) {}
  asio::any_io_executor executor;
  LeaderProbeOptions options;
  std::optional<asio::ip::address> literal;  // the name is an IP address: probed on a timer
  asio::steady_timer timer;            // between rounds (literal)
  asio::steady_timer deadline;         // one address's connect and reply
  tcp::socket socket;
  std::function<void(const std::string&)> clash;
  std::vector<asio::ip::address> todo;  // this round's foreign addresses
  bool busy = false;                    // a round is under way
  std::string peer;                     // "10.0.0.7:29400"
  wire::Decoder decoder;
  std::array<std::uint8_t, 4096> rx{};
  std::vector<std::uint8_t> frame;
  std::uint64_t attempt = 0;  // bumped per address: stale completions are ignored
  bool done = false;
};

std::shared_ptr<LeaderProbe> LeaderProbe::Start(asio::any_io_executor executor,
                                                LeaderProbeOptions options,
                                                std::function<void(const std::string&)> clash) {
  std::shared_ptr<LeaderProbe> p(new LeaderProbe());
  p->impl_ = std::make_unique<Impl>(executor, std::move(options));
  p->impl_->clash = std::move(clash);
  boost::system::error_code ec;
  auto literal = asio::ip::make_address(p->impl_->options.name, ec);
  if (!ec) {
    p->impl_->literal = literal;
    p->Round();
  }
  return p;
}

LeaderProbe::~LeaderProbe() { Cancel(); }

void LeaderProbe::Cancel() {
  if (!impl_ || impl_->done) return;
  impl_->done = true;
  impl_->timer.cancel();
  impl_->deadline.cancel();
  boost::system::error_code ec;
  impl_->socket.close(ec);
}

void LeaderProbe::Probe(const std::vector<asio::ip::address>& addresses) {
  Impl& im = *impl_;
  if (im.done || im.busy) return;
  auto ours = im.options.local_addresses ? im.options.local_addresses() : LocalAddresses();
  im.todo.clear();
  for (const auto& a : addresses) {
    if (!IsOwnAddress(a, ours)) im.todo.push_back(a);
  }
  im.busy = true;
  Next();
}

void LeaderProbe::Round() { Probe({*impl_->literal}); }

void LeaderProbe::Later() {
  Impl& im = *impl_;
  im.busy = false;
  if (im.done || !im.literal) return;
  im.timer.expires_after(im.options.interval);
  im.timer.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    if (!ec && !self->impl_->done) self->Round();
  });
}

void LeaderProbe::Next() {
  Impl& im = *impl_;
  if (im.done) return;
  if (im.todo.empty()) {
    Later();
    return;
  }
  auto a = im.todo.back();
  im.todo.pop_back();
  Ask(a);
}

// Connects to `address`, says hello as index 0, and reads the answer within
// options.timeout.
void LeaderProbe::Ask(const asio::ip::address& address) {
  Impl& im = *impl_;
  const std::uint64_t attempt = ++im.attempt;
  boost::system::error_code ec;
  im.socket.close(ec);
  im.socket = tcp::socket(im.executor);
  im.decoder = wire::Decoder();
  im.peer = AddressForPeers(address) + ":" + std::to_string(im.options.port);
  im.options.hello.nonce = im.options.token.empty() ? "" : NewNonce();
  im.options.hello.instance_id.clear();  // a pod's instance id goes to its leader alone
  im.frame = wire::Encode(im.options.hello);
  im.deadline.expires_after(im.options.timeout);
  im.deadline.async_wait([self = shared_from_this(), attempt](boost::system::error_code ec) {
    Impl& im = *self->impl_;
    if (ec || im.done || im.attempt != attempt) return;
    ++im.attempt;  // the connect or read in flight is abandoned
    boost::system::error_code ignored;
    im.socket.close(ignored);
    self->Next();
  });
  im.socket.async_connect(
      tcp::endpoint(address, im.options.port),
      [self = shared_from_this(), attempt](boost::system::error_code ec) {
        Impl& im = *self->impl_;
        if (im.done || im.attempt != attempt) return;
        if (ec) {
          ++im.attempt;
          im.deadline.cancel();
          self->Next();
          return;
        }
        asio::async_write(im.socket, asio::buffer(im.frame),
                          [self, attempt](boost::system::error_code, std::size_t) {
                            if (self->impl_->attempt == attempt) self->Read();
                          });
      });
}

// Reads the answer: a final refusal is the clash; a challenge (a shared token)
// is answered; anything else (a retriable refusal: a stale pod; a closed
// connection; a heartbeat) ends this address.
void LeaderProbe::Read() {
  Impl& im = *impl_;
  const std::uint64_t attempt = im.attempt;
  im.socket.async_read_some(asio::buffer(im.rx), [self = shared_from_this(), attempt](
                                                     boost::system::error_code ec, std::size_t n) {
    Impl& im = *self->impl_;
    if (im.done || im.attempt != attempt) return;
    auto give_up = [&] {
      ++im.attempt;
      im.deadline.cancel();
      self->Next();
    };
    if (ec || !im.decoder.Feed(std::span(im.rx.data(), n)).ok()) return give_up();
    for (;;) {
      auto next = im.decoder.Next();
      if (!next.ok()) return give_up();
      if (!next->has_value()) break;
      if (const auto* r = std::get_if<wire::Reject>(&**next)) {
        if (r->retriable || r->field == "token") return give_up();
        im.done = true;
        im.deadline.cancel();
        boost::system::error_code ignored;
        im.socket.close(ignored);
        auto clash = std::move(im.clash);
        if (clash) {
          clash("another trainlet leader of job '" + im.options.hello.job_id + "' attempt " +
                std::to_string(im.options.hello.attempt) + " answers at " + im.peer + " (" +
                im.options.name + "): " + r->reason);
        }
        return;
      }
      const auto* c = std::get_if<wire::Challenge>(&**next);
      const wire::Hello& h = im.options.hello;
      if (c == nullptr || im.options.token.empty() ||
          !ProofsEqual(c->proof, LeaderProof(im.options.token, h.job_id, h.nonce, c->nonce))) {
        return give_up();
      }
      im.frame = wire::Encode(
          wire::Proof{.proof = MemberProof(im.options.token, h.job_id, c->nonce, h.nonce)});
      asio::async_write(im.socket, asio::buffer(im.frame),
                        [](boost::system::error_code, std::size_t) {});
    }
    self->Read();
  });
}

}  // namespace trainlet::rendezvous
