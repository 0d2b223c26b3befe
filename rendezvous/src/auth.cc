#include "trainlet/rendezvous/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <fstream>
#include <sstream>

namespace trainlet::rendezvous {
namespace {

std::string Hmac(const std::string& token, const std::string& message) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
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

exitcodes::Result<std::string> ReadTokenFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return exitcodes::Status::Config("--token-file '" + path + "' cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string token = ss.str();
  while (!token.empty() && (token.back() == '\n' || token.back() == '\r' ||
                            token.back() == ' ' || token.back() == '\t')) {
    token.pop_back();
  }
  if (token.empty()) return exitcodes::Status::Config("--token-file '" + path + "' is empty");
  return token;
}

std::string NewNonce() {
  std::string n(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(n.data()), static_cast<int>(n.size())) != 1) {
    // The kernel's CSPRNG failing is not something to run on.
    std::abort();
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
