#include "trainlet/exitcodes/contract.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <sstream>

#include "trainlet/exitcodes/exit_code.h"

namespace trainlet::exitcodes {
namespace {

Result<int> ParseCode(std::string_view what, std::string_view v) {
  int n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size() || n < 1 || n > 255) {
    return Status::Config(std::string(what) + ": '" + std::string(v) +
                          "' is not an exit code in 1..255");
  }
  return n;
}

}  // namespace

ExitCodeTable::ExitCodeTable() : fatal_{kExitBug} {
  for (FailureClass c : Classes()) codes_[c] = DefaultExitCode(c);
}

const std::vector<FailureClass>& ExitCodeTable::Classes() {
  static const std::vector<FailureClass> classes = {
      FailureClass::kBug,        FailureClass::kConfig, FailureClass::kInfra,
      FailureClass::kHardware,   FailureClass::kPeerFailed, FailureClass::kOom,
      FailureClass::kTerminated,
  };
  return classes;
}

Result<FailureClass> ExitCodeTable::ParseClass(std::string_view name) {
  std::string norm;
  for (char c : name) norm += c == '-' ? '_' : static_cast<char>(std::tolower(c));
  for (FailureClass c : {FailureClass::kOk, FailureClass::kBug, FailureClass::kConfig,
                         FailureClass::kInfra, FailureClass::kHardware, FailureClass::kPeerFailed,
                         FailureClass::kOom, FailureClass::kTerminated, FailureClass::kWorker}) {
    if (ClassName(c) == norm) return c;
  }
  return Status::Config("unknown failure class '" + std::string(name) +
                        "' (bug, config, infra, hardware, peer_failed, oom, terminated)");
}

Result<ExitCodeTable> ExitCodeTable::FromFlags(const std::vector<std::string>& overrides,
                                               const std::string& fatal_exit_codes) {
  ExitCodeTable t;
  for (const std::string& o : overrides) {
    auto eq = o.find('=');
    if (eq == std::string::npos) {
      return Status::Config("--exit-code '" + o + "' is not CLASS=CODE (e.g. bug=42)");
    }
    auto cls = ParseClass(o.substr(0, eq));
    if (!cls.ok()) return Status::Config("--exit-code '" + o + "': " + cls.status().message());
    if (*cls == FailureClass::kOk || *cls == FailureClass::kWorker) {
      return Status::Config("--exit-code '" + o + "': the code of '" +
                            std::string(ClassName(*cls)) + "' is not configurable");
    }
    auto code = ParseCode("--exit-code " + o, std::string_view(o).substr(eq + 1));
    if (!code.ok()) return code.status();
    t.codes_[*cls] = *code;
  }
  for (auto a = t.codes_.begin(); a != t.codes_.end(); ++a) {
    for (auto b = std::next(a); b != t.codes_.end(); ++b) {
      if (a->second == b->second) {
        return Status::Config("--exit-code: classes '" + std::string(ClassName(a->first)) +
                              "' and '" + std::string(ClassName(b->first)) + "' would both exit " +
                              std::to_string(a->second) + "; a podFailurePolicy could not tell "
                              "them apart");
      }
    }
  }
  if (!fatal_exit_codes.empty()) {
    t.fatal_.clear();
    std::stringstream ss(fatal_exit_codes);
    std::string item;
    while (std::getline(ss, item, ',')) {
      auto code = ParseCode("--fatal-exit-codes", item);
      if (!code.ok()) return code.status();
      t.fatal_.insert(*code);
    }
  }
  return t;
}

int ExitCodeTable::CodeFor(FailureClass c) const {
  if (c == FailureClass::kOk) return 0;
  auto it = codes_.find(c);
  return it == codes_.end() ? -1 : it->second;
}

}  // namespace trainlet::exitcodes
