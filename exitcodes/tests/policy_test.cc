// Parses the generated policy and evaluates it the way the Job controller does
// (https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-failure-policy):
// rules in order, first match wins; onExitCodes looks at non-zero exit codes of
// the named container (any container when unnamed); onPodConditions at
// conditions whose status is True; no match means Count.
#include "trainlet/exitcodes/policy.h"

#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "trainlet/exitcodes/exit_code.h"

namespace trainlet::exitcodes {
namespace {

struct FailedPod {
  std::string container = "trainer";
  int exit_code;
  bool disruption_target = false;
};

std::string Evaluate(const YAML::Node& policy, const FailedPod& pod) {
  for (const YAML::Node& rule : policy["rules"]) {
    bool match = false;
    if (rule["onExitCodes"]) {
      const YAML::Node& r = rule["onExitCodes"];
      bool container_ok = !r["containerName"] || r["containerName"].as<std::string>() == pod.container;
      bool in = false;
      for (const auto& v : r["values"]) in |= v.as<int>() == pod.exit_code;
      std::string op = r["operator"].as<std::string>();
      match = container_ok && pod.exit_code != 0 && (op == "In" ? in : !in);
    }
    if (rule["onPodConditions"]) {
      for (const auto& c : rule["onPodConditions"]) {
        std::string status = c["status"] ? c["status"].as<std::string>() : "True";
        if (c["type"].as<std::string>() == "DisruptionTarget" && status == "True" &&
            pod.disruption_target) {
          match = true;
        }
      }
    }
    if (match) return rule["action"].as<std::string>();
  }
  return "Count";
}

std::string ActionFor(const std::string& yaml, FailureClass c, const ExitCodeTable& codes,
                      bool disruption = false, std::string container = "trainer") {
  YAML::Node doc = YAML::Load(yaml);
  return Evaluate(doc["podFailurePolicy"],
                  {std::move(container), codes.CodeFor(c), disruption});
}

TEST(PolicyTest, EveryClassGetsItsIntendedAction) {
  ExitCodeTable codes;
  std::string y = GeneratePolicy(codes, {});
  EXPECT_EQ(ActionFor(y, FailureClass::kBug, codes), "FailJob");
  EXPECT_EQ(ActionFor(y, FailureClass::kConfig, codes), "FailJob");
  EXPECT_EQ(ActionFor(y, FailureClass::kPeerFailed, codes), "Ignore");
  EXPECT_EQ(ActionFor(y, FailureClass::kInfra, codes), "Count");
  EXPECT_EQ(ActionFor(y, FailureClass::kHardware, codes), "Count");
  EXPECT_EQ(ActionFor(y, FailureClass::kOom, codes), "Count");
  EXPECT_EQ(ActionFor(y, FailureClass::kTerminated, codes), "Count");
  // Preemption: whatever the code, DisruptionTarget wins — never FailJob (Kubernetes docs, "Pod disruption conditions").
  for (FailureClass c : ExitCodeTable::Classes()) {
    EXPECT_EQ(ActionFor(y, c, codes, /*disruption=*/true), "Ignore") << ClassName(c);
  }
  // A worker's own code (e.g. 1, 139) is counted.
  YAML::Node doc = YAML::Load(y);
  EXPECT_EQ(Evaluate(doc["podFailurePolicy"], {"trainer", 1}), "Count");
  EXPECT_EQ(Evaluate(doc["podFailurePolicy"], {"trainer", 139}), "Count");
  // A sidecar exiting 42 is not the trainer's bug.
  EXPECT_EQ(ActionFor(y, FailureClass::kBug, codes, false, "sidecar"), "Count");
}

TEST(PolicyTest, FollowsConfiguredCodesContainerAndPerIndex) {
  auto codes = ExitCodeTable::FromFlags({"bug=40", "peer_failed=90"}, "");
  ASSERT_TRUE(codes.ok());
  std::string y = GeneratePolicy(*codes, {.container = "main", .per_index = true});
  EXPECT_EQ(ActionFor(y, FailureClass::kBug, *codes, false, "main"), "FailIndex");
  EXPECT_EQ(ActionFor(y, FailureClass::kConfig, *codes, false, "main"), "FailIndex");
  EXPECT_EQ(ActionFor(y, FailureClass::kPeerFailed, *codes, false, "main"), "Ignore");
  YAML::Node doc = YAML::Load(y);
  EXPECT_EQ(doc["backoffLimitPerIndex"].as<int>(), 2);
  // The first rule must be the DisruptionTarget one.
  EXPECT_TRUE(doc["podFailurePolicy"]["rules"][0]["onPodConditions"]);
}

TEST(PolicyTest, JobSetDocument) {
  std::string y = GeneratePolicy(ExitCodeTable(), {.jobset = true, .max_restarts = 5});
  std::vector<YAML::Node> docs = YAML::LoadAll(y);
  ASSERT_EQ(docs.size(), 2u);
  const YAML::Node& fp = docs[1]["failurePolicy"];
  EXPECT_EQ(fp["maxRestarts"].as<int>(), 5);
  EXPECT_EQ(fp["rules"][0]["action"].as<std::string>(), "FailJobSet");
  EXPECT_EQ(fp["rules"][0]["onJobFailureReasons"][0].as<std::string>(), "PodFailurePolicy");
  EXPECT_TRUE(fp["rules"][0]["name"]) << "JobSet's API requires rule names";
  // Per index, a FailIndex rule ends the Job with FailedIndexes: that must fail the JobSet too.
  docs = YAML::LoadAll(GeneratePolicy(ExitCodeTable(), {.per_index = true, .jobset = true}));
  bool failed_indexes_fatal = false;
  for (const auto& r : docs[1]["failurePolicy"]["rules"]) {
    for (const auto& reason : r["onJobFailureReasons"]) {
      if (reason.as<std::string>() == "FailedIndexes") {
        failed_indexes_fatal = r["action"].as<std::string>() == "FailJobSet";
      }
    }
  }
  EXPECT_TRUE(failed_indexes_fatal);
}

// JobSet's rule-name pattern ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$, by hand
// (<regex> trips GCC 12's -Wmaybe-uninitialized under the sanitizers).
bool IsJobSetRuleName(const std::string& n) {
  auto alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); };
  auto word = [&](char c) { return alpha(c) || (c >= '0' && c <= '9') || c == '_'; };
  if (n.empty() || !alpha(n.front()) || (n.size() > 1 && !word(n.back()))) return false;
  for (char c : n) {
    if (!word(c) && c != ',' && c != ':') return false;
  }
  return true;
}

// Evaluates a JobSet failurePolicy as the JobSet controller does (KEP-262,
// jobset.x-k8s.io/v1alpha2): rules in order, the first whose onJobFailureReasons
// holds the failed Job's reason (an empty list matches any) acts; no match means
// RestartJobSet.
std::string JobSetAction(const YAML::Node& fp, const std::string& job_failure_reason) {
  for (const auto& r : fp["rules"]) {
    const YAML::Node& reasons = r["onJobFailureReasons"];
    bool match = !reasons || reasons.size() == 0;
    for (const auto& reason : reasons) match = match || reason.as<std::string>() == job_failure_reason;
    if (match) return r["action"].as<std::string>();
  }
  return "RestartJobSet";
}

TEST(PolicyTest, JobSetRulesPassJobSetValidationAndAct) {
  for (bool per_index : {false, true}) {
    auto docs = YAML::LoadAll(
        GeneratePolicy(ExitCodeTable(), {.per_index = per_index, .jobset = true}));
    const YAML::Node& fp = docs[1]["failurePolicy"];
    // JobSet's webhook: rule names match this pattern (no '-'), actions are an enum.
    EXPECT_FALSE(IsJobSetRuleName("fail-on-defect"));
    EXPECT_FALSE(IsJobSetRuleName("Rule:"));
    for (const auto& r : fp["rules"]) {
      EXPECT_TRUE(IsJobSetRuleName(r["name"].as<std::string>())) << r["name"];
      const std::string action = r["action"].as<std::string>();
      EXPECT_TRUE(action == "FailJobSet" || action == "RestartJobSet") << action;
    }
    // A Job failed by a FailJob rule (bug 42, config 78) fails the JobSet; any other
    // Job failure restarts it (counted against maxRestarts).
    EXPECT_EQ(JobSetAction(fp, "PodFailurePolicy"), "FailJobSet");
    EXPECT_EQ(JobSetAction(fp, "BackoffLimitExceeded"), "RestartJobSet");
    EXPECT_EQ(JobSetAction(fp, "DeadlineExceeded"), "RestartJobSet");
    EXPECT_EQ(JobSetAction(fp, "FailedIndexes"), per_index ? "FailJobSet" : "RestartJobSet");
  }
}

}  // namespace
}  // namespace trainlet::exitcodes
