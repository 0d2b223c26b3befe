// trainlet/agent/spec/run_dir.h — where trainlet puts the files it makes for the
// workers (TORCHELASTIC_ERROR_FILE error files, TRAINLET_HEARTBEAT_FILE
// heartbeat files), on images whose root is read-only
// (securityContext.readOnlyRootFilesystem) or whose user cannot write /tmp.
//
// The order (README, "Read-only images"): --run-dir, $TMPDIR, /dev/shm,
// /tmp, --log-dir; the first where a directory can be made is used. Callable
// from any thread; ChooseRunDir touches the file system, the rest is pure.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "trainlet/exitcodes/status.h"

namespace trainlet::agent {

// The candidates in order, empty ones left out: `flag` (--run-dir), $TMPDIR
// from `env`, /dev/shm, /tmp, `log_dir` (--log-dir).
std::vector<std::string> RunDirCandidates(const std::string& flag,
                                          const std::map<std::string, std::string>& env,
                                          const std::string& log_dir);

struct RunDirChoice {
  std::string base;                  // the first writable candidate; "" when none
  std::vector<std::string> refused;  // "PATH (why)" for each candidate tried before it
};

// Tries each candidate: makes and removes a directory in it (mkdtemp(3),
// rmdir(2)). Blocking file system calls, no deadline.
RunDirChoice ChooseRunDir(const std::vector<std::string>& candidates);

// What the choice means for a run. OK, with `*warning` set when there is no
// run directory: one line naming each feature that is off (error files, so a
// trainer's @record class is lost, and heartbeat files). Config when a
// feature the user asked for cannot work: --run-dir not writable
// (`flag_given`), or --hang-timeout (`hang_timeout`) without a run
// directory. Pure.
[[nodiscard]] exitcodes::Status JudgeRunDir(const RunDirChoice& choice, bool flag_given,
                                            bool hang_timeout, std::string* warning);

}  // namespace trainlet::agent
