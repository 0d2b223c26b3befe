// trainlet/agent/cli.h — the command line: `trainlet [flags] -- cmd...`,
// `trainlet local ...`, `trainlet exit-codes`, `--help`, `--version`.
//
// Every flag can also be set as TRAINLET_<FLAG> in the environment (dashes as
// underscores, upper case), and where torchrun has the flag, as its PET_<FLAG>;
// a flag on the command line wins over TRAINLET_*, which wins over PET_*.
// Logs go to stderr; the level comes from --log-level, else SPDLOG_LEVEL.
#pragma once

namespace trainlet::agent {

// The whole program. Returns the process exit code. Call from main() after
// BlockHandledSignals().
int Main(int argc, char** argv);

}  // namespace trainlet::agent
