#include "trainlet/agent/run/signals.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read.hpp>

namespace trainlet::agent {

namespace asio = boost::asio;

namespace {
sigset_t HandledSet() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCHLD}) {
    sigaddset(&set, s);
  }
  return set;
}
}  // namespace

void BlockHandledSignals() {
  sigset_t set = HandledSet();
  ::sigprocmask(SIG_BLOCK, &set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

struct SignalSource::Impl : std::enable_shared_from_this<Impl> {
  Impl(asio::any_io_executor ex, int fd) : stream(ex, fd) {}
  asio::posix::stream_descriptor stream;
  std::function<void(int)> on_signal;
  signalfd_siginfo info{};

  void Read() {
    asio::async_read(stream, asio::buffer(&info, sizeof(info)),
                     [self = shared_from_this()](boost::system::error_code ec, std::size_t) {
                       if (ec) return;
                       int signo = static_cast<int>(self->info.ssi_signo);
                       if (self->on_signal) self->on_signal(signo);
                       self->Read();
                     });
  }
};

exitcodes::Result<std::unique_ptr<SignalSource>> SignalSource::Create(
    asio::any_io_executor executor, std::function<void(int)> on_signal) {
  sigset_t set = HandledSet();
  int fd = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0) {
    return exitcodes::Status::Infra(std::string("signalfd: ") + std::strerror(errno));
  }
  auto impl = std::make_shared<Impl>(executor, fd);
  impl->on_signal = std::move(on_signal);
  impl->Read();
  return std::unique_ptr<SignalSource>(new SignalSource(impl));
}

SignalSource::~SignalSource() { Close(); }

void SignalSource::Close() {
  impl_->on_signal = nullptr;
  boost::system::error_code ignored;
  impl_->stream.close(ignored);
}

}  // namespace trainlet::agent
