// The trainlet binary: block the signals we consume before anything else can
// start a thread, then hand over to the CLI. An exception reaching here is a
// bug in trainlet: report it as one line and exit with the retriable infra code
// rather than abort (which would look like a trainer crash to the Job). Bad
// input never gets here: the front end's checks (and the error_code overloads
// of std::filesystem for paths from the spec) make it a config error first;
// fuzz_front drives the whole front door to keep it so.
#include <fcntl.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <string>

#include "trainlet/agent/front/cli.h"
#include "trainlet/agent/base/log_format.h"
#include "trainlet/agent/run/signals.h"
#include "trainlet/exitcodes/exit_code.h"

namespace {
// One line, in the log format (log_format.h).
void Internal(const std::string& what) {
  const int code = trainlet::exitcodes::kExitInfra;
  trainlet::agent::LogFields lf;
  lf.failure_class = "infra";
  lf.code = code;
  std::fputs(trainlet::agent::FormatLogLine(spdlog::level::critical,
                                            what + " (exit " + std::to_string(code) + ")", lf)
                 .c_str(),
             stderr);
}
}  // namespace

int main(int argc, char** argv) {
  trainlet::agent::BlockHandledSignals();
  // Started with stdin, stdout or stderr closed: /dev/null takes the slot, so
  // the first pipe or socket the agent makes is never mistaken for fd 0-2
  // (a worker's pipe read end would become "the agent's stderr").
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) ::open("/dev/null", O_RDWR);
  }
  try {
    return trainlet::agent::Main(argc, argv);
  } catch (const std::exception& e) {
    Internal(std::string("internal error (a fault in trainlet itself, not in its input: please "
                         "report it): ") + e.what());
  } catch (...) {
    Internal("internal error (a fault in trainlet itself, not in its input: please report it)");
  }
  return trainlet::exitcodes::kExitInfra;
}
