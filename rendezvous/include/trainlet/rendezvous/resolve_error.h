// trainlet/rendezvous/resolve_error.h — how a name resolution failed, without the resolver.
//
// Split from resolver.h so that code which only receives a resolution's result
// (the member's sans-IO core, member_core.h, and whatever drives it: the Asio
// shell, a simulator) does not pull in Asio or c-ares. Header and names are
// thread-safe (constants).
#pragma once

#include <string_view>

namespace trainlet::rendezvous {

enum class ResolveError {
  kNone,           // Success: at least one address.
  kNotFound,       // NXDOMAIN, or the name exists without A/AAAA data, for every candidate.
  kServerFailure,  // The server answered SERVFAIL/FORMERR/NOTIMP, or an unparsable reply.
  kRefused,        // The server answered REFUSED, or refused the connection (ICMP/RST).
  kTimeout,        // No answer within the configured timeouts and tries.
  kBadName,        // Not a valid DNS name (empty, label > 63 bytes, ...).
  kCancelled,      // Cancel() or ~Resolver() ended the query.
  kOther,          // Anything else (out of memory, unreadable config, ...).
};

// Stable lower-case name ("not_found", "timeout", ...), for logs and messages.
std::string_view ResolveErrorName(ResolveError e);

}  // namespace trainlet::rendezvous
