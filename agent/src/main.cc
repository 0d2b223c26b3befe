// The trainlet binary: block the signals we consume before anything else can
// start a thread, then hand over to the CLI. An exception reaching here is a
// bug in trainlet: report it as one line and exit with the retriable infra code
// rather than abort (which would look like a trainer crash to the Job).
#include <cstdio>
#include <exception>

#include "trainlet/agent/cli.h"
#include "trainlet/agent/signals.h"
#include "trainlet/exitcodes/exit_code.h"

int main(int argc, char** argv) {
  trainlet::agent::BlockHandledSignals();
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
