// The trainlet binary: block the signals we consume before anything else can
// start a thread, then hand over to the CLI. An exception reaching here is a
// bug in trainlet: report it as one line and exit with the retriable infra code
// rather than abort (which would look like a trainer crash to the Job).
#include <fcntl.h>

#include <cerrno>
#include <cstdio>
#include <exception>

#include "trainlet/agent/cli.h"
#include "trainlet/agent/signals.h"
#include "trainlet/exitcodes/exit_code.h"

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
    std::fprintf(stderr, "trainlet: internal error: %s (exit %d)\n", e.what(),
                 trainlet::exitcodes::kExitInfra);
  } catch (...) {
    std::fprintf(stderr, "trainlet: internal error (exit %d)\n", trainlet::exitcodes::kExitInfra);
  }
  return trainlet::exitcodes::kExitInfra;
}
