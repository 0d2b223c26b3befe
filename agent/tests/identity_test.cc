#include "trainlet/agent/identity.h"

#include <gtest/gtest.h>

namespace trainlet::agent {
namespace {

const char kHosts[] =
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost\n"
    "# Entries added by HostAliases.\n"
    "10.0.0.11\ttrainer-1.trainer.default.svc.cluster.local\ttrainer-1\n";

IdentityInputs Pod(int index, const std::string& nnodes) {
  IdentityInputs in;
  in.env["JOB_COMPLETION_INDEX"] = std::to_string(index);
  in.nnodes = nnodes;
  in.hostname = "trainer-" + std::to_string(index);
  in.etc_hosts = std::string(kHosts);
  if (index != 1) {
    std::string h = "trainer-" + std::to_string(index);
    in.etc_hosts = "10.0.0.1" + std::to_string(index) + " " + h + ".trainer.default.svc.cluster.local " + h + "\n";
  }
  return in;
}

TEST(ParseCountTest, OnlyCanonicalDecimalsInRange) {
  struct Row {
    std::string value;
    bool ok;
    std::uint32_t want;
    std::string error;
  };
  const std::vector<Row> rows = {
      {"0", true, 0, ""},
      {"3", true, 3, ""},
      {"4096", true, 4096, ""},
      {" 3", false, 0, "not a canonical"},
      {"3 ", false, 0, "not a canonical"},
      {"03", false, 0, "not a canonical"},
      {"-1", false, 0, "not a canonical"},
      {"+1", false, 0, "not a canonical"},
      {"3x", false, 0, "not a canonical"},
      {"", false, 0, "not a canonical"},
      {"0x10", false, 0, "not a canonical"},
      {"99999999999999999999", false, 0, "not a canonical"},
      {"5000", false, 0, "larger than 4096"},
      {"$(JOB_COMPLETION_INDEX)", false, 0, "unexpanded Kubernetes $(VAR) reference"},
  };
  for (const Row& r : rows) {
    auto got = ParseCount("NODE_RANK", r.value, 4096);
    ASSERT_EQ(got.ok(), r.ok) << "'" << r.value << "'";
    if (r.ok) {
      EXPECT_EQ(*got, r.want);
    } else {
      EXPECT_EQ(got.status().failure_class(), exitcodes::FailureClass::kConfig);
      EXPECT_NE(got.status().message().find("NODE_RANK='" + r.value + "'"), std::string::npos)
          << got.status().message();
      EXPECT_NE(got.status().message().find(r.error), std::string::npos)
          << got.status().message();
    }
  }
}

TEST(IdentityTest, IndexPrecedence) {
  IdentityInputs in = Pod(1, "4");
  in.env["PET_NODE_RANK"] = "2";
  in.read_file = [](const std::string&) -> std::optional<std::string> {
    return "batch.kubernetes.io/job-completion-index=\"3\"\n";
  };
  auto id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->index, 1u);
  EXPECT_EQ(id->index_source, "JOB_COMPLETION_INDEX");

  in.node_rank = "0";
  id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->index, 0u) << "--node-rank wins";

  in.node_rank.reset();
  in.env.erase("JOB_COMPLETION_INDEX");
  id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->index, 2u) << "then PET_NODE_RANK";

  in.env.erase("PET_NODE_RANK");
  id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->index, 3u) << "then the downward-API annotation";
  EXPECT_NE(id->index_source.find("batch.kubernetes.io/job-completion-index"), std::string::npos);
}

TEST(IdentityTest, BadInputsNameTheVariable) {
  struct Row {
    const char* name;
    std::function<void(IdentityInputs&)> change;
    std::string expected;
  };
  const std::vector<Row> rows = {
      {"unexpanded reference (C33)",
       [](IdentityInputs& in) { in.env["JOB_COMPLETION_INDEX"] = "$(JOB_COMPLETION_INDEX)"; },
       "JOB_COMPLETION_INDEX='$(JOB_COMPLETION_INDEX)' is an unexpanded"},
      {"index not below nnodes",
       [](IdentityInputs& in) { in.nnodes = "1"; },
       "JOB_COMPLETION_INDEX='1' is not below the number of pods 1"},
      {"nnodes missing in an Indexed Job (C33)",
       [](IdentityInputs& in) { in.nnodes.reset(); },
       "the number of pods is missing"},
      {"nnodes zero", [](IdentityInputs& in) { in.nnodes = "0"; }, "at least one pod"},
      {"elastic nnodes", [](IdentityInputs& in) { in.nnodes = "1:4"; }, "MIN:MAX"},
      {"bad nproc", [](IdentityInputs& in) { in.nproc_per_node = "auto"; },
       "--nproc-per-node/TRAINLET_NPROC_PER_NODE='auto'"},
      {"bad PET_NNODES",
       [](IdentityInputs& in) {
         in.nnodes.reset();
         in.env["PET_NNODES"] = "four";
       },
       "PET_NNODES='four'"},
      {"leader in another subdomain (C06)",
       [](IdentityInputs& in) { in.env["MASTER_ADDR"] = "trainer-0.trainer-workers"; },
       "did you mean trainer-0.trainer?"},
      {"no FQDN, no leader",
       [](IdentityInputs& in) { in.etc_hosts = "127.0.0.1 localhost\n"; },
       "cannot find the leader"},
      {"several pods but no index",
       [](IdentityInputs& in) { in.env.erase("JOB_COMPLETION_INDEX"); },
       "this pod has no index"},
      {"leader unexpanded",
       [](IdentityInputs& in) { in.master_addr = "$(LEADER)"; }, "is not a host name"},
  };
  for (const Row& r : rows) {
    IdentityInputs in = Pod(1, "4");
    r.change(in);
    auto id = ResolveIdentity(in);
    ASSERT_FALSE(id.ok()) << r.name;
    EXPECT_EQ(id.status().failure_class(), exitcodes::FailureClass::kConfig) << r.name;
    EXPECT_NE(id.status().message().find(r.expected), std::string::npos)
        << r.name << ": " << id.status().message();
  }
}

TEST(IdentityTest, LeaderDerivedFromOwnFqdn) {
  auto id = ResolveIdentity(Pod(1, "4"));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->own_fqdn, "trainer-1.trainer.default.svc.cluster.local");
  EXPECT_EQ(id->leader_host, "trainer-0.trainer.default.svc.cluster.local.");
  EXPECT_EQ(id->job_id, "trainer-0");
  EXPECT_FALSE(id->is_leader());
}

TEST(IdentityTest, LeaderIsDecidedByIndexNotHostname) {
  // C08: index 0 with an FQDN leader address and a short hostname is the leader.
  IdentityInputs in = Pod(0, "2");
  in.master_addr = "trainer-0.trainer.ns.svc.cluster.local";
  auto id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_TRUE(id->is_leader());
  // And index 1 naming itself as leader is still a member.
  in = Pod(1, "2");
  in.master_addr = "trainer-1.trainer";
  id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok());
  EXPECT_FALSE(id->is_leader());
}

TEST(IdentityTest, ExplicitLeaderAndSeedManifest) {
  // The seed's Job: MASTER_ADDR=trainer-0.trainer and the index from the Job.
  IdentityInputs in = Pod(2, "4");
  in.env["MASTER_ADDR"] = "trainer-0.trainer";
  auto id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->leader_host, "trainer-0.trainer");
  EXPECT_EQ(id->leader_source, "MASTER_ADDR");
  EXPECT_EQ(id->job_id, "trainer-0");
  // PET_MASTER_ADDR wins over MASTER_ADDR, the flag over both.
  in.env["PET_MASTER_ADDR"] = "10.0.0.10";
  id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->leader_host, "10.0.0.10");
  in.master_addr = "10.0.0.9";
  id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->leader_host, "10.0.0.9");
}

TEST(IdentityTest, SinglePodNeedsNothing) {
  IdentityInputs in;
  in.hostname = "laptop";
  auto id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->index, 0u);
  EXPECT_EQ(id->nnodes, 1u);
  EXPECT_EQ(id->nproc_per_node, 1u);
  EXPECT_TRUE(id->leader_host.empty());
}

TEST(IdentityTest, JobAndAttemptFromDownwardApiFiles) {
  IdentityInputs in = Pod(1, "4");
  in.podinfo_file = "/etc/podinfo/annotations";
  std::map<std::string, std::string> files = {
      {"/etc/podinfo/annotations",
       "jobset.sigs.k8s.io/restart-attempt=\"2\"\njobset.sigs.k8s.io/jobset-name=\"pytorch-ddp\"\n"},
      {"/etc/podinfo/labels", "batch.kubernetes.io/controller-uid=\"abc-123\"\n"}};
  in.read_file = [&files](const std::string& p) -> std::optional<std::string> {
    auto it = files.find(p);
    return it == files.end() ? std::nullopt : std::optional(it->second);
  };
  auto id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->attempt, 2u);
  EXPECT_EQ(id->job_id, "pytorch-ddp") << "JobSet name before the Job's UID";
  files.erase("/etc/podinfo/annotations");
  id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->job_id, "abc-123") << "a plain Job: its controller-uid";
  EXPECT_EQ(id->attempt, 0u);
  in.attempt = "7";
  in.job_id = "mine";
  id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->attempt, 7u);
  EXPECT_EQ(id->job_id, "mine");
  in.attempt = "x";
  EXPECT_FALSE(ResolveIdentity(in).ok());
}

TEST(PodInfoTest, ParsesDownwardApiFormat) {
  const std::string content =
      "batch.kubernetes.io/job-completion-index=\"3\"\n"
      "kubectl.kubernetes.io/default-container=\"main\"\n"
      "quoted=\"a \\\"b\\\" c\"\n";
  EXPECT_EQ(LookupPodInfo(content, "batch.kubernetes.io/job-completion-index"), "3");
  EXPECT_EQ(LookupPodInfo(content, "quoted"), "a \"b\" c");
  EXPECT_EQ(LookupPodInfo(content, "missing"), std::nullopt);
  EXPECT_EQ(LookupPodInfo(content, "batch.kubernetes.io/job-completion"), std::nullopt);
}

TEST(FqdnTest, FromKubeletHostsFile) {
  EXPECT_EQ(FqdnFromHosts(kHosts, "trainer-1"), "trainer-1.trainer.default.svc.cluster.local");
  EXPECT_EQ(FqdnFromHosts(kHosts, "trainer-2"), "");
  EXPECT_EQ(FqdnFromHosts("10.0.0.5 other.example.com trainer-1\n", "trainer-1"), "");
}

}  // namespace
}  // namespace trainlet::agent
