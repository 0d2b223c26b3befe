// trainlet/agent/run/launch_check.h — input that retrying cannot fix, found before
// the rendezvous: a trainer program or interpreter that cannot be executed, a
// training script that does not exist, a --log-dir that cannot be made. The
// README's contract: config errors (78) "within a second and before any
// network traffic". The same checks happen again when the workers start (a
// file can vanish in between); the message is the same line.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainlet/agent/spec/torchrun.h"
#include "trainlet/agent/run/worker_logs.h"
#include "trainlet/exitcodes/status.h"

namespace trainlet::agent {

// What to check of the trainer besides its argv[0], from the command line.
struct LaunchCheck {
  // The file python opens: S of `S.py` and `--run-path S`; "" for -m (a missing
  // module is ModuleNotFoundError, class bug) and for programs.
  std::string script;
  // Appended to the "cannot execute" line of argv[0]: how to fix it (the
  // interpreter's flags; `-- train.py` without an executable train.py).
  std::string program_hint;
  // Appended to the "cannot open the training script" line (the caller's:
  // a subcommand's name given where a script goes).
  std::string script_hint;
};

// The check for the trainer that TrainerArgv(split, mode) makes. Pure.
LaunchCheck LaunchCheckFor(const SplitArgs& split, const TrainerMode& mode);

// execvp(3)'s search, as posix_spawnp(3) makes it: a name with a '/' is the
// file itself (relative to the working directory); otherwise each entry of
// `path_var` (an empty entry is the working directory), or glibc's default
// "/bin:/usr/bin" when PATH is unset. The file must be a regular file with an
// execute bit the caller may use (access(2) X_OK). Returns the path found, or
// the errno execvp would end with: EACCES when some candidate exists but cannot
// be executed, else ENOENT. Reads the file system; never throws.
struct ExecutableLookup {
  std::string path;
  int error = 0;
};
ExecutableLookup FindExecutable(const std::string& program,
                                const std::optional<std::string>& path_var);

// "cannot execute the trainer command 'P': <strerror>", with " (not found in
// PATH)" for ENOENT when P has no '/' (only then is PATH searched, execvp(3)):
// the line of the check before the start and of a failed spawn (supervisor.cc).
std::string CannotExecuteMessage(const std::string& program, int error);

// The working directory the workers inherit, for CheckLaunch's `cwd` ("." if
// it cannot be read: getcwd(3) fails when it was removed).
std::string WorkingDirectory();

// The checks, in this order: argv[0] in the workers' PATH (env's PATH), the
// script (relative to `cwd`, the workers' working directory; the message
// names both), and the log dir (made, as WorkerLogDirs makes it, when given).
// Errors: class config, one line. Blocking: a few stat(2)/mkdir(2) calls.
[[nodiscard]] exitcodes::Status CheckLaunch(const std::vector<std::string>& argv,
                                            const LaunchCheck& check,
                                            const std::map<std::string, std::string>& env,
                                            const WorkerLogOptions& logs, const std::string& cwd);

}  // namespace trainlet::agent
