#include "trainlet/rendezvous/auth.h"

#include <gtest/gtest.h>

namespace trainlet::rendezvous {
namespace {

std::string Hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

// RFC 4231 section 4: HMAC-SHA-256 test cases 1, 2, 3, 6 and 7 (keys shorter
// than, equal to a multiple of, and longer than the 64-byte block).
TEST(AuthTest, HmacSha256MatchesRfc4231) {
  struct Case {
    std::string key, data, want;
  } cases[] = {
      {std::string(20, '\x0b'), "Hi There",
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", "what do ya want for nothing?",
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {std::string(20, '\xaa'), std::string(50, '\xdd'),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First",
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {std::string(131, '\xaa'),
       "This is a test using a larger than block-size key and a larger than block-size data. "
       "The key needs to be hashed before being used by the HMAC algorithm.",
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (const auto& c : cases) EXPECT_EQ(Hex(HmacSha256(c.key, c.data)), c.want) << c.data;
}

TEST(AuthTest, NoncesAreFreshAndSized) {
  std::string a = NewNonce(), b = NewNonce();
  EXPECT_EQ(a.size(), kNonceBytes);
  EXPECT_NE(a, b);
}

TEST(AuthTest, ProofsDependOnRoleTokenAndNonces) {
  std::string m = NewNonce(), l = NewNonce();
  std::string leader = LeaderProof("t", "job", m, l);
  EXPECT_EQ(leader.size(), 32u);
  EXPECT_TRUE(ProofsEqual(leader, LeaderProof("t", "job", m, l)));
  EXPECT_FALSE(ProofsEqual(leader, MemberProof("t", "job", l, m)));
  EXPECT_FALSE(ProofsEqual(leader, LeaderProof("u", "job", m, l)));
  EXPECT_FALSE(ProofsEqual(leader, LeaderProof("t", "job", l, m)));
  EXPECT_FALSE(ProofsEqual(leader, leader.substr(1)));
}

}  // namespace
}  // namespace trainlet::rendezvous
