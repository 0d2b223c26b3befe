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

// The token in `path` without trailing whitespace. Errors (class config): the
// file cannot be read, or is empty. The message never contains the token.
[[nodiscard]] exitcodes::Result<std::string> ReadTokenFile(const std::string& path);

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
