// trainlet/agent/run/signals.h — asynchronous signals consumed as events.
//
// main() blocks the signals trainlet handles (BlockHandledSignals) before any
// thread exists; a SignalSource then reads them from a signalfd(2) inside the
// event loop, so no code ever runs in a signal-handler context. Children get a
// clean mask back from posix_spawn (see supervisor.h). As PID 1, a signal with
// no handler is ignored by the kernel; blocking + signalfd makes every signal
// we care about explicit. Single-threaded, like the loop that owns it.
#pragma once

#include <functional>
#include <memory>

#include <boost/asio/any_io_executor.hpp>

#include "trainlet/exitcodes/status.h"

namespace trainlet::agent {

// Blocks SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH and SIGCHLD
// in the calling thread (call first thing in main) and ignores SIGPIPE, so a
// closed stdout is an EPIPE, not a death.
void BlockHandledSignals();

class SignalSource {
 public:
  // Errors (class infra): signalfd(2) failed.
  [[nodiscard]] static exitcodes::Result<std::unique_ptr<SignalSource>> Create(
      boost::asio::any_io_executor executor, std::function<void(int signo)> on_signal);
  ~SignalSource();
  // Stops delivering; pending signals stay pending.
  void Close();

 private:
  struct Impl;
  explicit SignalSource(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<Impl> impl_;
};

}  // namespace trainlet::agent
