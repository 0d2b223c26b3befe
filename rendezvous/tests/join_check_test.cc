// CheckAssignment (member_core.h): what a member does with the leader's assignment.
#include <gtest/gtest.h>

#include "trainlet/rendezvous/member.h"

namespace trainlet::rendezvous {
namespace {

using V = JoinCheck::Verdict;

wire::Hello Hello2() {
  wire::Hello h;
  h.job_id = "job";
  h.attempt = 1;
  h.index = 2;
  h.nproc_per_node = 4;
  h.generation = 1;
  return h;
}

wire::Assignment For2() {
  wire::Assignment a;
  a.generation = 1;
  a.nnodes = 3;
  a.world_size = 12;
  a.rank_base = 8;
  a.master_addr = "10.0.0.10";
  a.master_port = 29500;
  a.job_id = "job";
  a.attempt = 1;
  return a;
}

TEST(JoinCheckTest, AMatchingAssignmentIsTaken) {
  EXPECT_EQ(CheckAssignment(Hello2(), false, false, For2()).verdict, V::kAccept);
  EXPECT_EQ(CheckAssignment(Hello2(), true, true, For2()).verdict, V::kAccept);
}

TEST(JoinCheckTest, ALeaderThatDidNotAuthenticateIsRefused) {
  JoinCheck c = CheckAssignment(Hello2(), true, false, For2());
  EXPECT_EQ(c.verdict, V::kFail);
  EXPECT_NE(c.detail.find("did not authenticate"), std::string::npos);
}

TEST(JoinCheckTest, ALeaderOfAnotherJobOrAttemptIsNeverFollowed) {
  wire::Assignment a = For2();
  a.job_id = "old";
  JoinCheck c = CheckAssignment(Hello2(), false, false, a);
  EXPECT_EQ(c.verdict, V::kRetry);
  EXPECT_EQ(c.detail, "leader belongs to job 'old' attempt 1, this pod to 'job' attempt 1");
  a = For2();
  a.attempt = 0;
  EXPECT_EQ(CheckAssignment(Hello2(), false, false, a).verdict, V::kRetry);
}

TEST(JoinCheckTest, ALeaderOfAnEarlierGenerationIsNeverFollowed) {
  wire::Assignment a = For2();
  a.generation = 0;
  JoinCheck c = CheckAssignment(Hello2(), false, false, a);
  EXPECT_EQ(c.verdict, V::kRetry);
  EXPECT_EQ(c.state, "rendezvous: refused a leader of an earlier generation");
  a.generation = 2;
  a.rank_base = 8;
  EXPECT_EQ(CheckAssignment(Hello2(), false, false, a).verdict, V::kAccept) << "a later one is";
}

TEST(JoinCheckTest, AnAssignmentThatContradictsTheLaunchFails) {
  for (auto broken : std::vector<void (*)(wire::Assignment&)>{
           [](wire::Assignment& a) { a.rank_base = 4; },
           [](wire::Assignment& a) { a.nnodes = 0; },
           [](wire::Assignment& a) { a.world_size = 9; },
           [](wire::Assignment& a) { a.master_addr.clear(); },
           [](wire::Assignment& a) { a.master_port = 0; }}) {
    wire::Assignment a = For2();
    broken(a);
    JoinCheck c = CheckAssignment(Hello2(), false, false, a);
    EXPECT_EQ(c.verdict, V::kFail);
    EXPECT_NE(c.detail.find("contradicts this pod's launch"), std::string::npos);
  }
}

TEST(JoinCheckTest, TheLeadersNodeRankOrSpareOverridesTheIndex) {
  wire::Assignment a = For2();
  a.node_rank = 1;
  a.rank_base = 4;
  EXPECT_EQ(CheckAssignment(Hello2(), false, false, a).verdict, V::kAccept);
  a.rank_base = 8;
  EXPECT_EQ(CheckAssignment(Hello2(), false, false, a).verdict, V::kFail);
  a.spare = true;
  a.node_rank.reset();
  a.rank_base = 0;
  EXPECT_EQ(CheckAssignment(Hello2(), false, false, a).verdict, V::kAccept);
}

}  // namespace
}  // namespace trainlet::rendezvous
