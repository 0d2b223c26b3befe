#include "trainlet/agent/run/launch_check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace trainlet::agent {

using exitcodes::Status;

namespace {

// glibc's _PATH_DEFPATH: execvp's search path when PATH is unset.
constexpr const char* kDefaultPath = "/bin:/usr/bin";

// 0 when `file` would execute, else the errno execve(2) gives for it.
int ExecutableError(const std::string& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) return errno;
  if (!S_ISREG(st.st_mode)) return EACCES;  // execve(2): "not a regular file"
  return ::access(file.c_str(), X_OK) == 0 ? 0 : errno;
}

}  // namespace

namespace {

// A missing script that is a program on PATH ("python3 train.py", "sh -c"):
// how to run it as a program, as torchrun would not either.
std::string ProgramHint(const std::string& script, const std::optional<std::string>& path_var) {
  if (script.find('/') != std::string::npos || FindExecutable(script, path_var).path.empty()) {
    return "";
  }
  return "; '" + script + "' is a program on PATH: a bare first argument is a script for the "
         "interpreter (as in torchrun); run a program after -- (trainlet [options] -- " + script +
         " ...) or with --no-python";
}

}  // namespace

LaunchCheck LaunchCheckFor(const SplitArgs& split, const TrainerMode& mode) {
  LaunchCheck c;
  if (split.trainer.empty()) return c;
  const std::string& first = split.trainer.front();
  const std::string interpreter =
      "; it is the Python interpreter (--python, TRAINLET_PYTHON, PYTHON_EXEC, else the "
      "Python environment trainlet is installed in, else python3 on PATH)";
  // The same order of modes as TrainerArgv.
  if (mode.run_path) {
    c.script = first;
    c.program_hint = interpreter;
  } else if (mode.module) {
    c.program_hint = interpreter;
  } else if (mode.no_python) {
  } else if (split.dash_dash) {
    // torchrun's argparse reads `-- train.py` as the script; trainlet runs a
    // program after "--" (README "Coming from torchrun").
    if (first.size() > 3 && first.ends_with(".py")) {
      c.program_hint = "; to run a script with Python as torchrun does, drop the \"--\": "
                       "trainlet " + first + " ...";
    }
  } else {
    c.script = first;
    c.program_hint = interpreter;
  }
  return c;
}

ExecutableLookup FindExecutable(const std::string& program,
                                const std::optional<std::string>& path_var) {
  if (program.empty()) return {"", ENOENT};
  if (program.find('/') != std::string::npos) {
    const int e = ExecutableError(program);
    return {e == 0 ? program : "", e};
  }
  const std::string path = path_var.value_or(kDefaultPath);
  bool denied = false;
  for (std::size_t begin = 0;;) {
    const std::size_t end = path.find(':', begin);
    std::string dir = path.substr(begin, end == std::string::npos ? end : end - begin);
    const std::string file = dir.empty() ? program : dir + "/" + program;
    const int e = ExecutableError(file);
    if (e == 0) return {file, 0};
    if (e == EACCES) denied = true;
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return {"", denied ? EACCES : ENOENT};
}

std::string CannotExecuteMessage(const std::string& program, int error) {
  return "cannot execute the trainer command '" + program + "': " + std::strerror(error) +
         (error == ENOENT && program.find('/') == std::string::npos ? " (not found in PATH)"
                                                                     : "");
}

std::string WorkingDirectory() {
  std::error_code ec;
  auto cwd = std::filesystem::current_path(ec);
  return ec ? std::string(".") : cwd.string();
}

Status CheckLaunch(const std::vector<std::string>& argv, const LaunchCheck& check,
                   const std::map<std::string, std::string>& env, const WorkerLogOptions& logs,
                   const std::string& cwd) {
  if (argv.empty()) return Status::Config("no trainer command");
  auto path = env.find("PATH");
  const std::optional<std::string> path_var =
      path == env.end() ? std::nullopt : std::optional(path->second);
  const ExecutableLookup found = FindExecutable(argv[0], path_var);
  if (found.error != 0) {
    return Status::Config(CannotExecuteMessage(argv[0], found.error) + check.program_hint);
  }
  if (!check.script.empty()) {
    // Python opens it relative to the working directory the workers inherit.
    const std::string file = check.script.front() == '/' ? check.script : cwd + "/" + check.script;
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) {
      const int e = errno;
      return Status::Config("cannot open the training script '" + check.script + "'" +
                            (check.script.front() == '/' ? std::string()
                                                         : " in " + cwd +
                                                               " (the workers' working directory)") +
                            ": " + std::strerror(e) + ProgramHint(check.script, path_var) +
                            check.script_hint);
    }
  }
  if (!logs.log_dir.empty()) {
    if (Status s = MakeLogDir(logs.log_dir); !s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace trainlet::agent
