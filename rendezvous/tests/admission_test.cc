// Admit (admission.h): every rule, one row each, in the order they apply.
#include "trainlet/rendezvous/admission.h"

#include <gtest/gtest.h>

namespace trainlet::rendezvous {
namespace {

using Verdict = Admission::Verdict;

wire::Hello HelloFor(std::uint32_t index, std::string job = "job-uid") {
  wire::Hello h;
  h.job_id = std::move(job);
  h.attempt = 1;
  h.index = index;
  h.nproc_per_node = 2;
  h.config = {{"nnodes", "4"}, {"nproc_per_node", "2"}};
  h.fingerprint = wire::Fingerprint(h.config);
  return h;
}

class AdmissionTest : public ::testing::Test {
 protected:
  Admission Decide(const wire::Hello& hello, std::optional<IndexHolder> holder = std::nullopt,
                   std::optional<std::uint32_t> free_index = 1) {
    return Admit(AdmissionState{.own = own_,
                                .nnodes = 4,
                                .max_generation = 2,
                                .leader_id = leader_id_,
                                .job_attempts = job_attempts_,
                                .holder = std::move(holder),
                                .replaced = replaced_,
                                .left = left_,
                                .lost_spare = lost_spare_,
                                .free_index = free_index,
                                .token = token_,
                                .kept_id = kept_id_,
                                .peer = "10.0.0.12:41234",
                                .address = "10.0.0.12",
                                .local = "10.0.0.10:29400"},
                 hello);
  }
  wire::Hello own_ = HelloFor(0);
  std::string leader_id_ = "leader-id";
  std::map<std::string, std::uint32_t> job_attempts_;
  std::optional<wire::Replaced> replaced_;
  std::optional<std::uint32_t> left_;
  std::optional<std::uint32_t> lost_spare_;
  bool token_ = false;
  std::string kept_id_;
};

// Instance ids (wire::Hello::instance_id): pod A's, pod B's.
const std::string kIdA(wire::kInstanceIdBytes, 'a');
const std::string kIdB(wire::kInstanceIdBytes, 'b');

wire::Hello WithId(wire::Hello h, std::string id, std::uint32_t generation = 0) {
  h.instance_id = std::move(id);
  h.generation = generation;
  return h;
}

IndexHolder LiveHolder(std::string id) {
  return IndexHolder{"10.0.0.13:1", true, "", std::nullopt, std::move(id)};
}

TEST_F(AdmissionTest, AMatchingMemberIsAdmitted) {
  Admission a = Decide(HelloFor(2));
  EXPECT_EQ(a.verdict, Verdict::kAdmit);
  EXPECT_EQ(a.index, 2u) << "its own index, not the free one";
  EXPECT_FALSE(a.replace_holder);
  EXPECT_FALSE(a.record_job_attempt);
  EXPECT_FALSE(a.drop_older_of_job);
}

TEST_F(AdmissionTest, AnotherJobIsRefusedForNow) {
  Admission a = Decide(HelloFor(2, "other-uid"));
  EXPECT_EQ(a.verdict, Verdict::kRefuse);
  EXPECT_EQ(a.reject.field, "job_id");
  EXPECT_TRUE(a.reject.retriable);
  EXPECT_EQ(a.reject.reason,
            "pod 2 (10.0.0.12:41234) belongs to job 'other-uid', this leader to 'job-uid'");
}

TEST_F(AdmissionTest, AnotherAttemptIsRefusedForNow) {
  wire::Hello h = HelloFor(2);
  h.attempt = 0;
  Admission a = Decide(h);
  EXPECT_EQ(a.verdict, Verdict::kRefuse);
  EXPECT_EQ(a.reject.field, "attempt");
  EXPECT_TRUE(a.reject.retriable);
  EXPECT_NE(a.reject.reason.find("attempt 0, this leader runs attempt 1"), std::string::npos);
}

TEST_F(AdmissionTest, AnotherJobIsCheckedBeforeTheIndex) {
  wire::Hello h = HelloFor(0, "other-uid");
  EXPECT_EQ(Decide(h).reject.field, "job_id") << "a stranger at index 0 is no rival";
}

TEST_F(AdmissionTest, IndexZeroFromAnotherPodIsARivalLeader) {
  wire::Hello h = HelloFor(0);
  h.leader_id = "another-leader";
  Admission a = Decide(h);
  EXPECT_EQ(a.verdict, Verdict::kRivalLeader);
  EXPECT_EQ(a.reject.field, "leader");
  EXPECT_FALSE(a.reject.retriable);
  EXPECT_NE(a.reject.reason.find("two pods act as leader (index 0) of job 'job-uid' attempt 1: "
                                 "10.0.0.10:29400 and 10.0.0.12."),
            std::string::npos)
      << a.reject.reason;
}

TEST_F(AdmissionTest, TheLeadersOwnProbeIsRefusedQuietly) {
  wire::Hello h = HelloFor(0);
  h.leader_id = "leader-id";
  Admission a = Decide(h);
  EXPECT_EQ(a.verdict, Verdict::kRefuse);
  EXPECT_TRUE(a.reject.retriable);
  EXPECT_EQ(a.reject.reason, "this is the probing leader itself");
  leader_id_.clear();  // a leader without an id cannot recognise itself
  h.leader_id.clear();
  EXPECT_EQ(Decide(h).verdict, Verdict::kRivalLeader);
}

TEST_F(AdmissionTest, TheFirstPodOfAJobRecordsItsJobRestartAttempt) {
  wire::Hello h = HelloFor(2);
  h.job_name = "workers";
  h.job_restart_attempt = 3;
  Admission a = Decide(h);
  EXPECT_EQ(a.verdict, Verdict::kAdmit);
  EXPECT_EQ(a.record_job_attempt, 3u);
  EXPECT_FALSE(a.drop_older_of_job);
}

TEST_F(AdmissionTest, AStalePodOfARecreatedJobIsRefusedForNow) {
  job_attempts_["workers"] = 3;
  wire::Hello h = HelloFor(2);
  h.job_name = "workers";
  h.job_restart_attempt = 2;
  Admission a = Decide(h);
  EXPECT_EQ(a.verdict, Verdict::kRefuse);
  EXPECT_EQ(a.reject.field, "job_restart_attempt");
  EXPECT_TRUE(a.reject.retriable);
  EXPECT_FALSE(a.record_job_attempt);
}

TEST_F(AdmissionTest, APodOfARecreatedJobDropsTheOldJobsPodsAndTakesTheirIndex) {
  job_attempts_["workers"] = 1;
  wire::Hello h = HelloFor(2);
  h.job_name = "workers";
  h.job_restart_attempt = 2;
  Admission a = Decide(h, IndexHolder{"10.0.0.13:1", true, "workers", 1});
  EXPECT_EQ(a.verdict, Verdict::kAdmit) << a.reject.reason;
  EXPECT_EQ(a.record_job_attempt, 2u);
  EXPECT_TRUE(a.drop_older_of_job);
  EXPECT_FALSE(a.replace_holder) << "the fence drops the holder already";
}

TEST_F(AdmissionTest, TheFenceStandsWhenALaterRuleRefuses) {
  job_attempts_["workers"] = 1;
  wire::Hello h = HelloFor(2);
  h.job_name = "workers";
  h.job_restart_attempt = 2;
  h.config.back().second = "8";
  Admission a = Decide(h);
  EXPECT_EQ(a.verdict, Verdict::kRefuse);
  EXPECT_EQ(a.record_job_attempt, 2u);
  EXPECT_TRUE(a.drop_older_of_job);
}

TEST_F(AdmissionTest, ADifferentLaunchIsRefusedForGoodNamingTheFieldAndBothValues) {
  wire::Hello h = HelloFor(2);
  h.config.back().second = "8";
  h.fingerprint = wire::Fingerprint(h.config);
  Admission a = Decide(h);
  EXPECT_EQ(a.verdict, Verdict::kRefuse);
  EXPECT_EQ(a.reject.field, "nproc_per_node");
  EXPECT_FALSE(a.reject.retriable);
  EXPECT_EQ(a.reject.reason,
            "launch configuration differs: nproc_per_node=8 on pod 2 (10.0.0.12:41234), "
            "nproc_per_node=2 on pod 0 (the leader)");
}

TEST_F(AdmissionTest, AFieldOnlyOneSideHasIsNamedAsAbsent) {
  wire::Hello h = HelloFor(2);
  h.config.emplace_back("rdzv_conf", "x=1");
  Admission a = Decide(h);
  EXPECT_EQ(a.reject.field, "rdzv_conf");
  EXPECT_NE(a.reject.reason.find("rdzv_conf=(absent) on pod 0"), std::string::npos);
  std::string lv, mv;
  EXPECT_EQ(FirstDifference(h.config, HelloFor(2).config, &lv, &mv), "rdzv_conf");
  EXPECT_EQ(lv, "x=1");
  EXPECT_EQ(mv, "(absent)");
  EXPECT_EQ(FirstDifference(h.config, h.config, &lv, &mv), "");
}

TEST_F(AdmissionTest, AGenerationBeyondMaxRestartsIsRefusedForGood) {
  wire::Hello h = HelloFor(2);
  h.generation = 2;
  EXPECT_EQ(Decide(h).verdict, Verdict::kAdmit);
  h.generation = 3;
  Admission a = Decide(h);
  EXPECT_EQ(a.reject.field, "generation");
  EXPECT_FALSE(a.reject.retriable);
}

TEST_F(AdmissionTest, ElasticGenerationsAreNotBoundedByMaxRestarts) {
  // --nnodes MIN:MAX: joins start generations that are no restarts, so the
  // leader passes no bound and a member far past --max-restarts is admitted.
  wire::Hello h = HelloFor(2);
  h.generation = 40;
  AdmissionState state{.own = own_, .nnodes = 4, .max_generation = std::nullopt,
                       .leader_id = leader_id_, .job_attempts = job_attempts_,
                       .holder = std::nullopt, .replaced = std::nullopt, .left = std::nullopt,
                       .lost_spare = std::nullopt,
                       .free_index = 1,
                       .peer = "10.0.0.12:41234", .address = "10.0.0.12",
                       .local = "10.0.0.10:29400"};
  EXPECT_EQ(Admit(state, h).verdict, Verdict::kAdmit);
}

TEST_F(AdmissionTest, AnotherElasticRangeIsRefusedForGood) {
  own_.config = {{"nnodes", "2:4"}, {"nproc_per_node", "2"}};
  own_.fingerprint = wire::Fingerprint(own_.config);
  wire::Hello h = HelloFor(2);
  h.config = {{"nnodes", "3:4"}, {"nproc_per_node", "2"}};
  h.fingerprint = wire::Fingerprint(h.config);
  Admission a = Decide(h);
  EXPECT_EQ(a.verdict, Verdict::kRefuse);
  EXPECT_EQ(a.reject.field, "nnodes");
  EXPECT_FALSE(a.reject.retriable);
  EXPECT_EQ(a.reject.reason, "launch configuration differs: nnodes=3:4 on pod 2 "
                             "(10.0.0.12:41234), nnodes=2:4 on pod 0 (the leader)");
}

TEST_F(AdmissionTest, AnIndexOutsideTheGangIsRefusedForGood) {
  Admission a = Decide(HelloFor(4));
  EXPECT_EQ(a.verdict, Verdict::kRefuse);
  EXPECT_EQ(a.reject.field, "index");
  EXPECT_FALSE(a.reject.retriable);
  EXPECT_NE(a.reject.reason.find("outside 1..3"), std::string::npos);
}

TEST_F(AdmissionTest, ASilentHoldersIndexIsTakenOver) {
  Admission a = Decide(HelloFor(2), IndexHolder{"10.0.0.13:1", false, "", std::nullopt});
  EXPECT_EQ(a.verdict, Verdict::kAdmit);
  EXPECT_TRUE(a.replace_holder);
}

TEST_F(AdmissionTest, ALiveHolderOfAnotherJobAttemptMakesTheClaimWait) {
  wire::Hello h = HelloFor(2);
  Admission a = Decide(h, IndexHolder{"10.0.0.13:1", true, "workers", 5});
  EXPECT_EQ(a.verdict, Verdict::kRefuse);
  EXPECT_TRUE(a.reject.retriable);
  EXPECT_EQ(a.reject.reason, "index 2 is held by 10.0.0.13:1 of another Job attempt");
}

// A live holder and a claimant of another identity: with a token both hold
// the secret (two pods given one index: config); without one the claimant
// may be a stranger (it retries, then exits infra at its deadline).
TEST_F(AdmissionTest, TwoLivePodsWithOneIndexClashForGoodOnlyWithAToken) {
  const std::string reason =
      "two live pods claim index 2 of job 'job-uid' attempt 1: 10.0.0.13:1 joined first and "
      "answers heartbeats; refusing 10.0.0.12:41234. Each pod needs its own index "
      "(--node-rank, JOB_COMPLETION_INDEX)";
  for (bool token : {true, false}) {
    token_ = token;
    Admission a = Decide(HelloFor(2), IndexHolder{"10.0.0.13:1", true, "", std::nullopt});
    EXPECT_EQ(a.verdict, Verdict::kRefuse);
    EXPECT_EQ(a.reject.field, "index");
    EXPECT_EQ(a.reject.retriable, !token);
    EXPECT_EQ(a.reject.reason,
              token ? reason
                    : reason + "; it retries until --rdzv-timeout (no --token-file: a pod "
                               "cannot be told from a stranger)");
    a = Decide(WithId(HelloFor(2), kIdB), LiveHolder(kIdA));
    EXPECT_EQ(a.verdict, Verdict::kRefuse);
    EXPECT_EQ(a.reject.retriable, !token) << "ids differ: the same clash";
  }
}

// Identity beyond the index (MatchIdentity): a table, one row per case.
TEST(MatchIdentityTest, IndexAndInstanceIdTogetherAreAPodsIdentity) {
  struct Row {
    std::string known, claimed;
    Identity want;
    const char* why;
  };
  const Row rows[] = {
      {kIdA, kIdA, Identity::kSame, "the same pod (a survivor rejoining, a reconnect)"},
      {kIdA, kIdB, Identity::kOther, "another pod"},
      {kIdA, "", Identity::kOther, "no id where the pod known sends one: another pod"},
      {"", kIdB, Identity::kUnknown, "an older holder: matched by index alone"},
      {"", "", Identity::kUnknown, "two older peers: matched by index alone"},
  };
  for (const Row& r : rows) EXPECT_EQ(MatchIdentity(r.known, r.claimed), r.want) << r.why;
}

TEST_F(AdmissionTest, TheSamePodOnANewConnectionReplacesItsOwnLiveHolder) {
  token_ = true;  // even with a token: it is no second pod
  Admission a = Decide(WithId(HelloFor(2), kIdA), LiveHolder(kIdA));
  EXPECT_EQ(a.verdict, Verdict::kAdmit);
  EXPECT_TRUE(a.replace_holder);
}

// A restart's round of generation 2 keeps index 2 for pod A, which ran it in
// generation 1 and is still stopping its workers.
TEST_F(AdmissionTest, AnIndexKeptForItsSurvivorRefusesAnotherPodForNow) {
  own_.generation = 2;
  kept_id_ = kIdA;
  for (const wire::Hello& h : {WithId(HelloFor(2), kIdB, 2), WithId(HelloFor(2), kIdB, 0),
                               WithId(HelloFor(2), "", 2), WithId(HelloFor(2), "", 0)}) {
    Admission a = Decide(h);
    EXPECT_EQ(a.verdict, Verdict::kRefuse) << h.generation;
    EXPECT_EQ(a.reject.field, "index");
    EXPECT_TRUE(a.reject.retriable);
    EXPECT_EQ(a.reject.reason, "pod 2 (10.0.0.12:41234) is not the pod that ran index 2 in the "
                               "last generation; the round keeps that index for it");
  }
  EXPECT_EQ(Decide(WithId(HelloFor(2), kIdA, 2)).verdict, Verdict::kAdmit) << "the survivor";
  kept_id_.clear();  // the round no longer keeps it (or the survivor had no id)
  EXPECT_EQ(Decide(WithId(HelloFor(2), kIdB, 0)).verdict, Verdict::kAdmit) << "a recreated pod";
}

TEST_F(AdmissionTest, ASurvivorFindingAnotherPodInItsKeptIndexReplacesIt) {
  own_.generation = 2;
  kept_id_ = kIdA;
  Admission a = Decide(WithId(HelloFor(2), kIdA, 2), LiveHolder(kIdB));
  EXPECT_EQ(a.verdict, Verdict::kAdmit);
  EXPECT_TRUE(a.replace_holder);
  a = Decide(WithId(HelloFor(2), kIdA, 2), LiveHolder(""));
  EXPECT_TRUE(a.replace_holder) << "a holder without an id is not the survivor either";
  a = Decide(WithId(HelloFor(2), kIdB, 0), LiveHolder(kIdA));
  EXPECT_EQ(a.verdict, Verdict::kRefuse) << "the survivor holds it: a clash";
  EXPECT_TRUE(a.reject.retriable);
}

TEST_F(AdmissionTest, ARoundOfAKnownGenerationAdmitsItsOwnAndZeroOnly) {
  own_.generation = 2;
  struct Row {
    std::uint32_t generation;
    bool admitted;
    const char* why;
  };
  const Row rows[] = {
      {2, true, "a survivor of generation 1, or a pod admitted for generation 2"},
      {0, true, "a pod new to the gang: recreated, or a first join"},
      {1, false, "stale or replayed: a generation the gang has left behind"},
  };
  for (const Row& r : rows) {
    Admission a = Decide(WithId(HelloFor(2), kIdA, r.generation));
    EXPECT_EQ(a.verdict == Verdict::kAdmit, r.admitted) << r.why;
    if (r.admitted) continue;
    EXPECT_EQ(a.reject.field, "generation");
    EXPECT_TRUE(a.reject.retriable);
    EXPECT_EQ(a.reject.reason, "pod 2 (10.0.0.12:41234) asks for generation 1; this round runs "
                               "generation 2 (a stale or replayed hello: pods new to the gang "
                               "ask for 0)");
  }
  // A replayed hello cannot push the survivor out: holding its index, or kept for it.
  kept_id_ = kIdA;
  EXPECT_EQ(Decide(WithId(HelloFor(2), kIdB, 1), LiveHolder(kIdA)).reject.field, "generation");
  EXPECT_FALSE(Decide(WithId(HelloFor(2), kIdB, 2), LiveHolder(kIdA)).replace_holder);
}

TEST_F(AdmissionTest, AFreshLeadersFirstRoundAdoptsAnyGeneration) {
  // A replaced leader (a fresh pod at generation 0) knows neither the gang's
  // generation nor anyone's id: it takes the largest it hears (leader.h).
  for (std::uint32_t g : {0u, 1u, 2u}) {
    EXPECT_EQ(Decide(WithId(HelloFor(2), kIdB, g)).verdict, Verdict::kAdmit) << g;
  }
}

// Ranks by arrival (launch.h): every pod's config says "ranks=arrival".
wire::Hello ByArrival(wire::Hello h) {
  h.config.emplace_back("ranks", "arrival");
  h.fingerprint = wire::Fingerprint(h.config);
  return h;
}

// Hot spares: spare pod 4 took pod 3's node rank 3 in generation 1.
TEST_F(AdmissionTest, AReplacedPodComingBackIsRefusedForGoodNamingTheSpare) {
  replaced_ = wire::Replaced{.spare = 4, .node_rank = 3, .generation = 1};
  wire::Hello back = HelloFor(3);
  back.generation = 1;  // it restarted from generation 0 after its freeze
  Admission a = Decide(back);
  EXPECT_EQ(a.verdict, Verdict::kRefuse);
  EXPECT_EQ(a.reject.field, wire::kReplacedField);
  EXPECT_FALSE(a.reject.retriable);
  EXPECT_EQ(a.reject.replaced, replaced_);
  EXPECT_EQ(a.reject.reason,
            "pod 3 (10.0.0.12:41234) was declared lost; spare pod 4 took its node rank 3 in "
            "generation 1: it leaves with its own failure (the Job recreates its index, which "
            "joins as a spare)");
  replaced_->generation = 2;  // it stayed frozen through one more generation
  EXPECT_EQ(Decide(back).reject.field, wire::kReplacedField);
}

// Elastic: the gang went on without pod 3 (declared lost) in generation 1.
TEST_F(AdmissionTest, APodTheElasticGangWentOnWithoutIsRefusedForGood) {
  left_ = 1;
  wire::Hello back = HelloFor(3);
  back.generation = 1;  // it rejoins after its freeze, for the generation it missed
  Admission a = Decide(back);
  EXPECT_EQ(a.verdict, Verdict::kRefuse);
  EXPECT_EQ(a.reject.field, wire::kLeftField);
  EXPECT_FALSE(a.reject.retriable);
  EXPECT_EQ(a.reject.replaced, std::nullopt);
  EXPECT_EQ(a.reject.reason,
            "pod 3 (10.0.0.12:41234) was declared lost; the gang went on without it in "
            "generation 1: it leaves with its own failure (the Job recreates its index, which "
            "joins as a new pod)");
  EXPECT_EQ(Decide(HelloFor(3)).verdict, Verdict::kAdmit) << "recreated: generation 0";
  back.generation = 2;  // asks for one after: not the pod the gang left behind
  EXPECT_EQ(Decide(back).verdict, Verdict::kAdmit);
}

// Hot spares: spare pod 3, waiting, was declared lost while generation 0 ran
// (cut off or frozen past the heartbeat timeout); it lost the leader too and
// rejoins for generation 1.
TEST_F(AdmissionTest, ASpareDeclaredLostComingBackIsRefusedForGood) {
  lost_spare_ = 0;
  wire::Hello back = HelloFor(3);
  for (std::uint32_t g : {1u}) {
    back.generation = g;
    Admission a = Decide(back);
    EXPECT_EQ(a.verdict, Verdict::kRefuse) << g;
    EXPECT_EQ(a.reject.field, wire::kLeftField) << "it exits infra, as a lost pod";
    EXPECT_FALSE(a.reject.retriable);
    EXPECT_EQ(a.reject.reason,
              "spare pod 3 (10.0.0.12:41234) was declared lost while it waited (generation 0): "
              "it leaves with its own failure (the Job recreates its index, which joins as a "
              "spare)");
  }
  EXPECT_EQ(Decide(HelloFor(3)).verdict, Verdict::kAdmit) << "recreated: generation 0";
  back.generation = 2;  // asks for one after: not the spare that was lost
  EXPECT_EQ(Decide(back).verdict, Verdict::kAdmit);
}

TEST_F(AdmissionTest, ARecreatedPodOfAReplacedIndexIsAdmitted) {
  replaced_ = wire::Replaced{.spare = 4, .node_rank = 3, .generation = 1};
  Admission fresh = Decide(HelloFor(3));  // a new pod starts at generation 0
  EXPECT_EQ(fresh.verdict, Verdict::kAdmit);
  wire::Hello later = HelloFor(3);
  later.generation = 2;  // the recreated pod, a spare in generation 1, rejoins
  EXPECT_EQ(Decide(later).verdict, Verdict::kAdmit);
  wire::Hello other = HelloFor(2);
  other.generation = 1;
  replaced_.reset();  // index 2 was never replaced
  EXPECT_EQ(Decide(other).verdict, Verdict::kAdmit);
}

TEST_F(AdmissionTest, APodWithoutAnIndexTakesTheLowestFreeOne) {
  own_ = ByArrival(HelloFor(0));
  Admission a = Decide(ByArrival(HelloFor(wire::kNoIndex)), std::nullopt, 3);
  EXPECT_EQ(a.verdict, Verdict::kAdmit) << a.reject.reason;
  EXPECT_EQ(a.index, 3u);
  EXPECT_FALSE(a.replace_holder);
}

TEST_F(AdmissionTest, APodWithoutAnIndexWaitsWhenEveryNodeRankIsTaken) {
  own_ = ByArrival(HelloFor(0));
  Admission a = Decide(ByArrival(HelloFor(wire::kNoIndex)), std::nullopt, std::nullopt);
  EXPECT_EQ(a.verdict, Verdict::kRefuse);
  EXPECT_EQ(a.reject.field, "index");
  EXPECT_TRUE(a.reject.retriable);
  EXPECT_EQ(a.reject.reason,
            "a pod without an index (10.0.0.12:41234) finds every node rank 1..3 taken "
            "(--nnodes 4)");
}

TEST_F(AdmissionTest, APodNumberedByArrivalRejoinsWithItsIndex) {
  own_ = ByArrival(HelloFor(0));
  Admission a = Decide(ByArrival(HelloFor(2)), IndexHolder{"10.0.0.13:1", false, "", std::nullopt});
  EXPECT_EQ(a.verdict, Verdict::kAdmit);
  EXPECT_EQ(a.index, 2u);
  EXPECT_TRUE(a.replace_holder);
}

// Ranks by arrival: a live pod holds index 2, given to it after the pod that
// had it was declared lost; that pod, come back (resumed), is no clash of two
// launches (config) but a lost pod: field replaced, which its member exits infra.
TEST_F(AdmissionTest, APodNumberedByArrivalWhoseIndexWasGivenAwayLeavesAsLost) {
  own_ = ByArrival(HelloFor(0));
  Admission a = Decide(ByArrival(HelloFor(2)), IndexHolder{"10.0.0.13:1", true, "", std::nullopt});
  EXPECT_EQ(a.verdict, Verdict::kRefuse);
  EXPECT_EQ(a.reject.field, wire::kReplacedField);
  EXPECT_FALSE(a.reject.retriable);
  EXPECT_FALSE(a.reject.replaced) << "no spare took it";
  EXPECT_EQ(a.reject.reason,
            "pod 2 (10.0.0.12:41234) was declared lost; its index, numbered by arrival, is "
            "10.0.0.13:1's now: it leaves with its own failure");
}

// LowestFreeIndex: what a pod without an index gets. Elastic sizes keep the
// indices of the pods expected back (the generation that ended, and pods
// admitted for the next one); a lost pod's index is free again.
TEST(LowestFreeIndexTest, SkipsHeldAndReservedIndicesAndNeverGivesZero) {
  std::set<std::uint32_t> held{0, 1};
  auto holds = [&held](std::uint32_t i) { return held.contains(i); };
  EXPECT_EQ(LowestFreeIndex(4, holds, {}), 2u);
  EXPECT_EQ(LowestFreeIndex(4, holds, {0, 2}), 3u) << "2 is kept for a pod expected back";
  EXPECT_EQ(LowestFreeIndex(4, holds, {2, 3}), std::nullopt);
  held.erase(1);  // pod 1 lost: neither held nor expected back
  EXPECT_EQ(LowestFreeIndex(4, holds, {0, 2, 3}), 1u);
  EXPECT_EQ(LowestFreeIndex(1, [](std::uint32_t) { return false; }, {}), std::nullopt)
      << "index 0 is the leader's";
  EXPECT_EQ(LowestFreeIndex(3, [](std::uint32_t) { return false; }, {}), 1u);
}

TEST_F(AdmissionTest, PodsWithAndWithoutAnIndexNeverShareAGang) {
  Admission a = Decide(ByArrival(HelloFor(wire::kNoIndex)));  // the leader has indices
  EXPECT_EQ(a.verdict, Verdict::kRefuse);
  EXPECT_EQ(a.reject.field, "ranks");
  EXPECT_FALSE(a.reject.retriable);
  EXPECT_EQ(a.reject.reason,
            "a pod without an index (10.0.0.12:41234) and pod 0 (the leader) with one cannot "
            "share a gang: either every pod has an index (--node-rank, JOB_COMPLETION_INDEX) or "
            "none has, and the leader numbers them as they join");
  own_ = ByArrival(HelloFor(0));  // the leader numbers by arrival; the member has index 2
  a = Decide(HelloFor(2));
  EXPECT_EQ(a.reject.field, "ranks");
  EXPECT_FALSE(a.reject.retriable);
  EXPECT_NE(a.reject.reason.find("pod 2 (10.0.0.12:41234) and pod 0 (the leader) without one"),
            std::string::npos);
}

}  // namespace
}  // namespace trainlet::rendezvous
