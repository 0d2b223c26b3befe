// trainlet/rendezvous/auth.h — optional mutual authentication of the gang.
//
// With a shared token (e.g. a mounted Kubernetes Secret, --token-file), leader
// and member prove to each other that they hold it, by HMAC-SHA256 (RFC 2104)
// over fresh 32-byte nonces from both sides: the token itself never crosses
// the wire and is never logged. Replaying an old proof does not help: each
// proof covers the other side's fresh nonce. Thread-safe (no shared state:
// OpenSSL's SHA-256, getrandom(2)).
#pragma once

#include <cstddef>
#include <string>

#include "trainlet/exitcodes/status.h"

namespace trainlet::rendezvous {

inline constexpr std::size_t kNonceBytes = 32;

// A token shorter than this is warned about (ShortTokenWarning): HMAC-SHA256's
// key should be at least its output's length (RFC 2104 section 3).
inline constexpr std::size_t kMinTokenBytes = 32;

// The token in `path` without trailing whitespace, read with
// exitcodes::ReadUserFile (never blocks on a FIFO, never reads past 1 MiB, the
// most a Kubernetes Secret holds). Errors (class config), each naming the
// file: it does not exist, cannot be read, is not a regular file (a FIFO, a
// device, a directory: what it is), is larger than 1 MiB, or is empty. The
// message never contains the token; it names the file as `what` (the flag or
// variable the user set, "--token-file", "TRAINLET_TOKEN_FILE").
[[nodiscard]] exitcodes::Result<std::string> ReadTokenFile(const std::string& path,
                                                           const std::string& what = "--token-file");

// "" for a token of kMinTokenBytes or more; otherwise the one-line warning
// that names the file and the token's size (never the token).
std::string ShortTokenWarning(const std::string& path, const std::string& what,
                              std::size_t token_bytes);

// kNonceBytes of cryptographically random bytes (getrandom(2), the kernel's CSPRNG).
std::string NewNonce();
// `count` cryptographically random bytes, as NewNonce (a pod's instance id:
// wire::Hello::instance_id).
std::string RandomBytes(std::size_t count);

// HMAC-SHA256 (RFC 2104, test vectors in RFC 4231) of `message` under `key`:
// 32 raw bytes. Built on OpenSSL's SHA-256.
std::string HmacSha256(const std::string& key, const std::string& message);

// The leader's and the member's proofs: HMAC-SHA256(token, role | job_id |
// first nonce | second nonce), 32 raw bytes. The leader proves over
// (member nonce, leader nonce), the member over (leader nonce, member nonce).
std::string LeaderProof(const std::string& token, const std::string& job_id,
                        const std::string& member_nonce, const std::string& leader_nonce);
std::string MemberProof(const std::string& token, const std::string& job_id,
                        const std::string& leader_nonce, const std::string& member_nonce);

// Constant-time comparison (CRYPTO_memcmp), false for different lengths.
bool ProofsEqual(const std::string& a, const std::string& b);

}  // namespace trainlet::rendezvous
