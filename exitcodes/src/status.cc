#include "trainlet/exitcodes/status.h"

namespace trainlet::exitcodes {

std::string_view ClassName(FailureClass c) {
  switch (c) {
    case FailureClass::kOk: return "ok";
    case FailureClass::kBug: return "bug";
    case FailureClass::kConfig: return "config";
    case FailureClass::kInfra: return "infra";
    case FailureClass::kHardware: return "hardware";
    case FailureClass::kPeerFailed: return "peer_failed";
    case FailureClass::kOom: return "oom";
    case FailureClass::kTerminated: return "terminated";
    case FailureClass::kWorker: return "worker";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string s(ClassName(class_));
  s += ": ";
  s += message_;
  return s;
}

}  // namespace trainlet::exitcodes
