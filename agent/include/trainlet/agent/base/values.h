// trainlet/agent/base/values.h — the front end's value parsers: counts, seconds,
// rates, ports, signals and DNS names (endpoints: address.h), as the user writes them in a
// flag, TRAINLET_<FLAG>, PET_<FLAG> or a Kubernetes variable. Pure functions:
// no I/O. Every error is class config and names `what`, the source as the user
// wrote it ("--grace-period", "PET_NNODES", "JOB_COMPLETION_INDEX"), and the
// value, in one line.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "trainlet/exitcodes/status.h"

namespace trainlet::agent {

// `s` split at every `sep` ("a,,b" -> "a", "", "b"; "" -> one empty piece).
std::vector<std::string> SplitOn(const std::string& s, char sep);

// Plain decimal ("25", "0.5"): digits with at most one inner '.', no sign,
// exponent, hex or space.
bool IsPlainDecimal(const std::string& v);

// Parses a canonical non-negative decimal ("0", "17"; not "07", "+1", " 1")
// no larger than `max` (a larger one, however many digits, is "too large"). An
// unexpanded Kubernetes "$(VAR)" reference is named as such.
[[nodiscard]] exitcodes::Result<std::uint32_t> ParseCount(const std::string& what,
                                                          const std::string& value,
                                                          std::uint32_t max);

// `--nnodes N`, `N:N`, or torchrun's elastic `MIN:MAX` (1 <= MIN <= MAX <=
// kMaxPods). Returns "N" for a fixed gang (N or N:N), "MIN:MAX" for MIN < MAX,
// in canonical decimal. Errors: config, one line naming `what` and the value.
[[nodiscard]] exitcodes::Result<std::string> ParseNnodes(const std::string& what,
                                                        const std::string& value);

// A TCP port peers dial: 1-65535 (0, a free port, is refused).
[[nodiscard]] exitcodes::Result<std::uint16_t> ParsePort(const std::string& what,
                                                         const std::string& value);

// A signal that can be sent for diagnostics: "SIGUSR1", "USR1" or "10"
// (1-31, not SIGKILL or SIGSTOP).
[[nodiscard]] exitcodes::Result<int> ParseSignal(const std::string& what,
                                                 const std::string& value);

// Plain decimal seconds between 0.001 and 10000000, to the millisecond.
[[nodiscard]] exitcodes::Result<std::chrono::milliseconds> ParseSeconds(const std::string& what,
                                                                        const std::string& value);

// As ParseSeconds, and "0" (a feature switched off).
[[nodiscard]] exitcodes::Result<std::chrono::milliseconds> ParseSecondsOrZero(
    const std::string& what, const std::string& value);

// "0", "12.5": a non-negative plain decimal.
[[nodiscard]] exitcodes::Result<double> ParseRate(const std::string& what,
                                                  const std::string& value);

// Checks a DNS name the way resolvers and Kubernetes do (RFC 1035 2.3.4,
// RFC 1123 2.1): at most 253 characters without the trailing dot, labels of
// 1 to 63 letters, digits and '-', not starting or ending with '-'. IP
// literals are not checked here. Errors name the name and the offending label.
[[nodiscard]] exitcodes::Status ValidateDnsName(const std::string& what, const std::string& name);

}  // namespace trainlet::agent
