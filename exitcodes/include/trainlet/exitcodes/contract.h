// trainlet/exitcodes/contract.h — the configurable exit-code contract.
//
// Which number each failure class exits with (`--exit-code CLASS=N`) and which
// worker exit codes mean "software defect" (`--fatal-exit-codes`). The defaults
// are those of exit_code.h. Value type, no I/O, safe to share read-only.
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "trainlet/exitcodes/status.h"

namespace trainlet::exitcodes {

class ExitCodeTable {
 public:
  // The defaults: bug 42, config 78, infra 75, hardware 74, peer_failed 76,
  // oom 77, terminated 143; fatal worker codes {42}.
  ExitCodeTable();

  // Applies overrides such as "bug=40" or "INFRA=75" (class names as
  // ClassName() spells them, any case) and a comma list of fatal worker codes
  // ("42,43"; empty string = keep the default).
  // Errors (class config): an unknown class, a code outside 1..255, "ok" or
  // "worker" overridden, two classes sharing one code, a bad fatal-code list.
  [[nodiscard]] static Result<ExitCodeTable> FromFlags(const std::vector<std::string>& overrides,
                                                       const std::string& fatal_exit_codes);

  // The exit code of a class; kWorker returns -1 (the worker's own code is used).
  int CodeFor(FailureClass c) const;
  bool IsFatalWorkerCode(int code) const { return fatal_.contains(code); }
  const std::set<int>& fatal_codes() const { return fatal_; }

  // Every class with a fixed code, in contract order.
  static const std::vector<FailureClass>& Classes();
  // Parses "bug" / "BUG" / "peer_failed" / "PEER-FAILED".
  static Result<FailureClass> ParseClass(std::string_view name);

 private:
  std::map<FailureClass, int> codes_;
  std::set<int> fatal_;
};

}  // namespace trainlet::exitcodes
