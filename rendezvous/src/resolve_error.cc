#include "trainlet/rendezvous/resolve_error.h"

namespace trainlet::rendezvous {

std::string_view ResolveErrorName(ResolveError e) {
  switch (e) {
    case ResolveError::kNone: return "none";
    case ResolveError::kNotFound: return "not_found";
    case ResolveError::kServerFailure: return "server_failure";
    case ResolveError::kRefused: return "refused";
    case ResolveError::kTimeout: return "timeout";
    case ResolveError::kBadName: return "bad_name";
    case ResolveError::kCancelled: return "cancelled";
    case ResolveError::kOther: return "other";
  }
  return "unknown";
}

}  // namespace trainlet::rendezvous
