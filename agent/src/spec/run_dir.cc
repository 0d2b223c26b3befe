#include "trainlet/agent/spec/run_dir.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace trainlet::agent {

std::vector<std::string> RunDirCandidates(const std::string& flag,
                                          const std::map<std::string, std::string>& env,
                                          const std::string& log_dir) {
  std::vector<std::string> out;
  auto tmpdir = env.find("TMPDIR");
  for (const std::string& c : {flag, tmpdir == env.end() ? std::string() : tmpdir->second,
                               std::string("/dev/shm"), std::string("/tmp"), log_dir}) {
    if (!c.empty()) out.push_back(c);
  }
  return out;
}

RunDirChoice ChooseRunDir(const std::vector<std::string>& candidates) {
  RunDirChoice choice;
  for (const std::string& c : candidates) {
    std::string probe = c + "/trainlet-probe-XXXXXX";
    if (::mkdtemp(probe.data()) != nullptr) {
      ::rmdir(probe.c_str());
      choice.base = c;
      return choice;
    }
    choice.refused.push_back(c + " (" + std::strerror(errno) + ")");
  }
  return choice;
}

exitcodes::Status JudgeRunDir(const RunDirChoice& choice, bool flag_given, bool hang_timeout,
                              std::string* warning) {
  warning->clear();
  std::string tried;
  for (const std::string& r : choice.refused) tried += (tried.empty() ? "" : ", ") + r;
  if (flag_given && !choice.refused.empty()) {
    return exitcodes::Status::Config("--run-dir " + choice.refused.front() +
                                     ": cannot make a directory in it");
  }
  if (!choice.base.empty()) return exitcodes::Status::Ok();
  if (hang_timeout) {
    return exitcodes::Status::Config(
        "--hang-timeout needs a writable directory for the workers' heartbeat files, and none "
        "is (tried " + tried + "): mount an emptyDir and pass --run-dir or set TMPDIR to it");
  }
  *warning = "no writable directory for the workers' files (tried " + tried +
             "): off are error files (TORCHELASTIC_ERROR_FILE: a trainer's @record message "
             "and class are lost) and heartbeat files; mount an emptyDir and pass --run-dir "
             "or set TMPDIR to it";
  return exitcodes::Status::Ok();
}

}  // namespace trainlet::agent
