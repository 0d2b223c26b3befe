// libFuzzer entry for the whole front door: a command line, an environment and
// the downward-API files together, through the parse (CLI11 and the flag
// table), Validate, the plans and ResolveIdentity, as `trainlet ARGS` would
// take them in a pod (or `trainlet local`), with the node's answers given
// instead of probed (no GPU discovery, no port binds, no file reads).
//
// The input, in sections split by a 0x01 byte: the arguments (one a line), the
// environment (NAME=VALUE a line), the annotations file, the labels file,
// /etc/hosts. Whatever it holds, the front end ends, plans a run or refuses
// with one non-empty line; it never throws or crashes, and a planned pod's
// index is inside its gang.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "trainlet/agent/front/cli.h"

using namespace trainlet::agent;

namespace {

std::vector<std::string> Sections(const std::string& all) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t at = all.find('\x01'); out.size() < 4 && at != std::string::npos;
       at = all.find('\x01', start)) {
    out.push_back(all.substr(start, at - start));
    start = at + 1;
  }
  out.push_back(all.substr(start));
  out.resize(5);
  return out;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::string> part =
      Sections(std::string(reinterpret_cast<const char*>(data), size));
  std::vector<std::string> argv = {"trainlet"};
  for (std::string& a : Lines(part[0])) argv.push_back(std::move(a));
  // `probe` asks a local agent over HTTP: a syscall, not the front door's.
  if (argv.size() > 1 && argv[1] == "probe") return 0;
  std::map<std::string, std::string> env;
  ::clearenv();  // CLI11 reads TRAINLET_* from the process's environment
  for (const std::string& kv : Lines(part[1])) {
    const auto eq = kv.find('=');
    if (eq == 0 || eq == std::string::npos || kv.find('\0') != std::string::npos) continue;
    env[kv.substr(0, eq)] = kv.substr(eq + 1);
    ::setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
  }
  const std::string annotations = part[2], labels = part[3], hosts = part[4];
  FrontEnd front = PlanCommandLine(argv, env, [&](const FlagValues&, const Settings&) {
    NodeFacts node;
    node.self_exe = "/usr/local/bin/trainlet";
    node.python = {"/usr/bin/python3", "on PATH"};
    node.hostname = "trainer-1";
    node.etc_hosts = hosts;
    node.read_file = [&](const std::string& path)
        -> trainlet::exitcodes::Result<std::optional<std::string>> {
      if (path.ends_with("/labels")) return std::optional(labels);
      if (path.ends_with("annotations") || path.find("podinfo") != std::string::npos) {
        return std::optional(annotations);
      }
      return std::optional<std::string>();
    };
    node.token = trainlet::exitcodes::Result<std::string>(std::string(32, 't'));
    node.free_ports = {29400, 29401};
    node.working_directory = "/";
    return node;
  });
  if (front.exit) return 0;
  if (!front.status.ok()) {
    const std::string& m = front.status.message();
    if (m.empty()) abort();
    return 0;
  }
  if (const auto* pod = std::get_if<PodOptions>(&front.plan)) {
    const auto& id = pod->identity;
    if (!id.by_arrival && (id.nnodes == 0 || id.index >= id.nnodes + pod->identity.spares)) {
      abort();
    }
  }
  return 0;
}
