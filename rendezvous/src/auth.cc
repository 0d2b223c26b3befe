#include "trainlet/rendezvous/auth.h"

#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>

#include "trainlet/exitcodes/user_file.h"

// OpenSSL's low-level SHA-256 (deprecated since 3.0 in favour of EVP, but
// present and maintained): EVP_sha256() would link the whole provider and
// EVP machinery, ~1 MB of code resident in every agent (bench/HISTORY.md).
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/crypto.h>
#include <openssl/sha.h>

namespace trainlet::rendezvous {
namespace {

using Digest = std::array<unsigned char, SHA256_DIGEST_LENGTH>;

Digest Sha256(std::initializer_list<std::pair<const void*, std::size_t>> parts) {
  SHA256_CTX ctx;
  SHA256_Init(&ctx);
  for (const auto& [data, size] : parts) SHA256_Update(&ctx, data, size);
  Digest out;
  SHA256_Final(out.data(), &ctx);
  OPENSSL_cleanse(&ctx, sizeof(ctx));
  return out;
}

}  // namespace

std::string HmacSha256(const std::string& key, const std::string& message) {
  // RFC 2104 section 2, with B = 64 (SHA-256's block) and L = 32.
  constexpr std::size_t kBlock = SHA256_CBLOCK;
  std::array<unsigned char, kBlock> k{};
  if (key.size() > kBlock) {
    Digest d = Sha256({{key.data(), key.size()}});
    std::copy(d.begin(), d.end(), k.begin());
  } else {
    std::copy(key.begin(), key.end(), k.begin());
  }
  std::array<unsigned char, kBlock> ipad, opad;
  for (std::size_t i = 0; i < kBlock; ++i) {
    ipad[i] = k[i] ^ 0x36;
    opad[i] = k[i] ^ 0x5c;
  }
  Digest inner = Sha256({{ipad.data(), kBlock}, {message.data(), message.size()}});
  Digest outer = Sha256({{opad.data(), kBlock}, {inner.data(), inner.size()}});
  OPENSSL_cleanse(k.data(), k.size());
  OPENSSL_cleanse(ipad.data(), ipad.size());
  OPENSSL_cleanse(opad.data(), opad.size());
  return std::string(reinterpret_cast<const char*>(outer.data()), outer.size());
}

namespace {

std::string Hmac(const std::string& token, const std::string& message) {
  return HmacSha256(token, message);
}

// Length-prefixed fields, so no two different field lists give one message.
std::string Message(std::initializer_list<const std::string*> fields) {
  std::string m;
  for (const std::string* f : fields) {
    std::uint32_t n = static_cast<std::uint32_t>(f->size());
    m.append(reinterpret_cast<const char*>(&n), sizeof(n));
    m.append(*f);
  }
  return m;
}

}  // namespace

exitcodes::Result<std::string> ReadTokenFile(const std::string& path, const std::string& what) {
  // A mounted Secret: at most 1 MiB (exitcodes::kSecretMaxBytes).
  auto content = exitcodes::ReadUserFile(path, what, exitcodes::kSecretMaxBytes);
  if (!content.ok()) return content.status();
  if (!*content) {
    return exitcodes::Status::Config(what + " '" + path +
                                     "' cannot be read: No such file or directory");
  }
  std::string token = std::move(**content);
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' ||
                            token.back() == ' ' || token.back() == '\t')) {
    token.pop_back();
  }
  if (token.empty()) return exitcodes::Status::Config(what + " '" + path + "' is empty");
  return token;
}

std::string ShortTokenWarning(const std::string& path, const std::string& what,
                              std::size_t token_bytes) {
  if (token_bytes >= kMinTokenBytes) return "";
  return what + " '" + path + "' holds " + exitcodes::FormatBytes(token_bytes) +
         ": a token shorter than " + std::to_string(kMinTokenBytes) +
         " bytes can be guessed; use 32 random bytes or more (e.g. openssl rand -base64 32)";
}

std::string NewNonce() { return RandomBytes(kNonceBytes); }

std::string RandomBytes(std::size_t count) {
  // getrandom(2) without flags: the kernel's CSPRNG (urandom pool), blocking
  // only until it is first seeded at boot.
  std::string n(count, '\0');
  std::size_t got = 0;
  while (got < n.size()) {
#if __GLIBC_PREREQ(2, 25)
    ssize_t r = ::getrandom(n.data() + got, n.size() - got, 0);
#else  // the portable release build's older glibc: the same system call
    ssize_t r = ::syscall(SYS_getrandom, n.data() + got, n.size() - got, 0);
#endif
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) std::abort();  // the kernel's CSPRNG failing is not something to run on
    got += static_cast<std::size_t>(r);
  }
  return n;
}

std::string LeaderProof(const std::string& token, const std::string& job_id,
                        const std::string& member_nonce, const std::string& leader_nonce) {
  static const std::string role = "trainlet leader";
  return Hmac(token, Message({&role, &job_id, &member_nonce, &leader_nonce}));
}

std::string MemberProof(const std::string& token, const std::string& job_id,
                        const std::string& leader_nonce, const std::string& member_nonce) {
  static const std::string role = "trainlet member";
  return Hmac(token, Message({&role, &job_id, &leader_nonce, &member_nonce}));
}

bool ProofsEqual(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace trainlet::rendezvous
