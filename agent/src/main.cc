// The trainlet binary: block the signals we consume before anything else can
// start a thread, then hand over to the CLI.
#include "trainlet/agent/cli.h"
#include "trainlet/agent/signals.h"

int main(int argc, char** argv) {
  trainlet::agent::BlockHandledSignals();
  return trainlet::agent::Main(argc, argv);
}
