#include "trainlet/agent/spec/identity.h"

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
      {"99999999999999999999", false, 0, "is too large"},
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
      {"unexpanded reference (kubernetes/kubernetes#121523)",
       [](IdentityInputs& in) { in.env["JOB_COMPLETION_INDEX"] = "$(JOB_COMPLETION_INDEX)"; },
       "JOB_COMPLETION_INDEX='$(JOB_COMPLETION_INDEX)' is an unexpanded"},
      {"index not below nnodes",
       [](IdentityInputs& in) { in.nnodes = "1"; },
       "JOB_COMPLETION_INDEX='1' is not below the number of pods 1"},
      {"nnodes missing in an Indexed Job (kubernetes/kubernetes#121523)",
       [](IdentityInputs& in) { in.nnodes.reset(); },
       "the number of pods is missing"},
      {"nnodes zero", [](IdentityInputs& in) { in.nnodes = "0"; }, "at least one pod"},
      {"elastic MIN above MAX", [](IdentityInputs& in) { in.nnodes = "4:1"; },
       "MIN is larger than MAX"},
      {"bad nproc", [](IdentityInputs& in) { in.nproc_per_node = "auto"; },
       "--nproc-per-node/TRAINLET_NPROC_PER_NODE='auto'"},
      {"bad PET_NNODES",
       [](IdentityInputs& in) {
         in.nnodes.reset();
         in.env["PET_NNODES"] = "four";
       },
       "PET_NNODES='four'"},
      {"leader in another subdomain (kubernetes-sigs/jobset#603)",
       [](IdentityInputs& in) { in.env["MASTER_ADDR"] = "trainer-0.trainer-workers"; },
       "did you mean trainer-0.trainer?"},
      {"no FQDN, no leader",
       [](IdentityInputs& in) { in.etc_hosts = "127.0.0.1 localhost\n"; },
       "cannot find the leader"},
      {"several pods but no index",
       [](IdentityInputs& in) { in.env.erase("JOB_COMPLETION_INDEX"); },
       "this pod has no index"},
      {"no index, a leader address that is no rendezvous endpoint",
       [](IdentityInputs& in) {
         in.env.erase("JOB_COMPLETION_INDEX");
         in.master_addr = "10.0.0.10";
       },
       "this pod has no index"},
      {"no index, an endpoint, but hot spares (they need indices)",
       [](IdentityInputs& in) {
         in.env.erase("JOB_COMPLETION_INDEX");
         in.master_addr = "10.0.0.10";
         in.leader_from_endpoint = true;
         in.spares = 1;
       },
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
  // pytorch/pytorch#73656: index 0 with an FQDN leader address and a short hostname is the leader.
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

TEST(PodInfoTest, GoQuotedEscapes) {
  // The kubelet writes values with Go's %q.
  const std::string content =
      "a=\"x\\\\y\\tz\\r\"\n"
      "b=\"caf\\u00e9 \\U0001f600 \\x41\"\n"
      "c=\"{\\\"kind\\\":\\\"JobSet\\\"}\\n\"\n"
      "d=\"bad \\x4\"\n";
  EXPECT_EQ(LookupPodInfo(content, "a"), "x\\y\tz\r");
  EXPECT_EQ(LookupPodInfo(content, "b"), "caf\xc3\xa9 \xf0\x9f\x98\x80 A");
  EXPECT_EQ(LookupPodInfo(content, "c"), "{\"kind\":\"JobSet\"}\n");
  EXPECT_EQ(LookupPodInfo(content, "d"), "bad x4") << "a cut escape stays text";
}

TEST(FqdnTest, FromKubeletHostsFile) {
  EXPECT_EQ(FqdnFromHosts(kHosts, "trainer-1"), "trainer-1.trainer.default.svc.cluster.local");
  EXPECT_EQ(FqdnFromHosts(kHosts, "trainer-2"), "");
  EXPECT_EQ(FqdnFromHosts("10.0.0.5 other.example.com trainer-1\n", "trainer-1"), "");
}

}  // namespace
}  // namespace trainlet::agent

namespace trainlet::agent {
namespace {

// A pod of the seed's JobSet pytorch-ddp (leader: 1 pod, workers: 4 pods) as
// JobSet creates it: hostname, /etc/hosts, JOB_COMPLETION_INDEX and the
// downward-API files.
struct JobSetPod {
  IdentityInputs in;
  std::map<std::string, std::string> files;

  JobSetPod(const std::string& role, int job_index, int completion_index,
            const std::string& replicas = "1") {
    std::string host = "pytorch-ddp-" + role + "-" + std::to_string(job_index) + "-" +
                       std::to_string(completion_index);
    in.hostname = host;
    in.etc_hosts = "10.0.0.7\t" + host + ".pytorch-ddp.default.svc.cluster.local\t" + host + "\n";
    in.env["JOB_COMPLETION_INDEX"] = std::to_string(completion_index);
    in.gang = "leader=1,workers=4";
    files["/etc/podinfo/labels"] =
        "batch.kubernetes.io/job-completion-index=\"" + std::to_string(completion_index) +
        "\"\njobset.sigs.k8s.io/jobset-name=\"pytorch-ddp\"\n"
        "jobset.sigs.k8s.io/replicatedjob-name=\"" + role + "\"\n"
        "jobset.sigs.k8s.io/job-index=\"" + std::to_string(job_index) + "\"\n"
        "jobset.sigs.k8s.io/replicatedjob-replicas=\"" + replicas + "\"\n"
        "jobset.sigs.k8s.io/restart-attempt=\"0\"\n";
    files["/etc/podinfo/annotations"] = "";
    in.read_file = [this](const std::string& p) -> std::optional<std::string> {
      auto it = files.find(p);
      return it == files.end() ? std::nullopt : std::optional(it->second);
    };
  }
  JobSetPod(const JobSetPod&) = delete;
};

TEST(GangTest, ParsesLayouts) {
  auto g = ParseGang("--gang", "leader=1,workers=4");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g->roles.size(), 2u);
  EXPECT_EQ(g->total_pods(), 5u);
  EXPECT_EQ(g->pods_before(1), 1u);
  EXPECT_EQ(g->ToString(), "leader=1,workers=4");
  g = ParseGang("--gang", "driver=1,workers=2x4");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->roles[1].replicas, 2u);
  EXPECT_EQ(g->roles[1].pods_per_job, 4u);
  EXPECT_EQ(g->total_pods(), 9u);
  EXPECT_EQ(g->ToString(), "driver=1,workers=2x4");
  EXPECT_EQ(ParseGang("--gang", "w=1x3")->ToString(), "w=3") << "canonical text";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "is empty"},
      {"leader", "has no '='"},
      {"leader=1,,workers=4", "has no '='"},
      {"Leader=1", "not a replicatedJob name"},
      {"-x=1", "not a replicatedJob name"},
      {"a=1,a=2", "appears twice"},
      {"a=0", "has no pods"},
      {"a=0x3", "has no pods"},
      {"a=04", "not a canonical"},
      {"a=2y3", "not a canonical"},
      {"a=1000x1001", "more than 1000000 pods"},
  };
  for (const auto& [value, error] : bad) {
    auto r = ParseGang("--gang", value);
    ASSERT_FALSE(r.ok()) << value;
    EXPECT_EQ(r.status().failure_class(), exitcodes::FailureClass::kConfig);
    EXPECT_NE(r.status().message().find(error), std::string::npos)
        << value << ": " << r.status().message();
  }
}

TEST(GangTest, SeedJobSetPodsGetGangIndicesAndRoles) {
  struct Row {
    std::string role;
    int completion;
    std::uint32_t index, role_rank_base, role_world_size;
  };
  for (const Row& r : std::vector<Row>{{"leader", 0, 0, 0, 2},
                                       {"workers", 0, 1, 2, 8},
                                       {"workers", 3, 4, 2, 8}}) {
    JobSetPod pod(r.role, 0, r.completion);
    pod.in.nproc_per_node = std::string("2");  // = "2": GCC 12 -O3 -Wrestrict, GCC bug 105329
    auto id = ResolveIdentity(pod.in);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    EXPECT_EQ(id->index, r.index) << r.role << r.completion;
    EXPECT_EQ(id->nnodes, 5u) << "--gang implies --nnodes";
    EXPECT_EQ(id->role_name, r.role);
    EXPECT_EQ(id->role_rank_base, r.role_rank_base);
    EXPECT_EQ(id->role_world_size, r.role_world_size);
    EXPECT_EQ(id->gang, "leader=1,workers=4");
    EXPECT_EQ(id->job_id, "pytorch-ddp");
    if (r.index != 0) {
      EXPECT_EQ(id->leader_host, "pytorch-ddp-leader-0-0.pytorch-ddp.default.svc.cluster.local.");
    }
  }
}

TEST(GangTest, ReplicatedJobsAndHostnameFallback) {
  // workers=2x4: the second Job's pod 1 is 1 + 1*4 + 1 = 6.
  JobSetPod pod("workers", 1, 1, "2");
  pod.in.gang = "leader=1,workers=2x4";
  auto id = ResolveIdentity(pod.in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->index, 6u);
  EXPECT_EQ(id->role_world_size, 8u);
  // No downward-API files: the role and job index come from JobSet's hostname.
  pod.files.clear();
  id = ResolveIdentity(pod.in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->index, 6u);
  EXPECT_EQ(id->leader_host, "pytorch-ddp-leader-0-0.pytorch-ddp.default.svc.cluster.local.");
  // --node-rank is the gang index itself; the role follows from the layout.
  pod.in.node_rank = "5";
  id = ResolveIdentity(pod.in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->index, 5u);
  EXPECT_EQ(id->role_name, "workers");
  EXPECT_EQ(id->role_rank_base, 1u);
}

TEST(GangTest, CoordinatorAnnotation) {
  JobSetPod pod("workers", 0, 2);
  pod.files["/etc/podinfo/annotations"] =
      "jobset.sigs.k8s.io/coordinator=\"pytorch-ddp-leader-0-0.pytorch-ddp\"\n";
  auto id = ResolveIdentity(pod.in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->leader_host, "pytorch-ddp-leader-0-0.pytorch-ddp.default.svc.cluster.local.");
  EXPECT_EQ(id->leader_source, "annotation jobset.sigs.k8s.io/coordinator");
  pod.files["/etc/podinfo/annotations"] =
      "jobset.sigs.k8s.io/coordinator=\"pytorch-ddp-workers-0-0.pytorch-ddp\"\n";
  id = ResolveIdentity(pod.in);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("is not gang index 0"), std::string::npos)
      << id.status().message();
}

TEST(GangTest, BadInputsNameTheField) {
  struct Row {
    const char* name;
    std::function<void(JobSetPod&)> change;
    std::string expected;
  };
  const std::vector<Row> rows = {
      {"unknown role", [](JobSetPod& p) { p.in.gang = "driver=1,workers=4"; },
       "label jobset.sigs.k8s.io/replicatedjob-name='leader' is not a role of --gang"},
      {"replicas disagree", [](JobSetPod& p) { p.in.gang = "leader=2x1,workers=4"; },
       "label jobset.sigs.k8s.io/replicatedjob-replicas='1' but --gang"},
      {"completion index outside the role",
       [](JobSetPod& p) { p.in.env["JOB_COMPLETION_INDEX"] = "1"; },
       "JOB_COMPLETION_INDEX='1' is not below role leader's 1 pods per Job"},
      {"nnodes disagrees", [](JobSetPod& p) { p.in.nnodes = "4"; },
       "--nnodes/TRAINLET_NNODES='4' but --gang 'leader=1,workers=4' has 5 pods"},
      {"no role anywhere",
       [](JobSetPod& p) {
         p.files.clear();
         p.in.hostname = "trainer-1";
       },
       "this pod's replicated Job is unknown"},
      {"bad layout", [](JobSetPod& p) { p.in.gang = "leader"; }, "--gang/TRAINLET_GANG='leader'"},
      {"leader name too long",
       [](JobSetPod& p) {
         p.files["/etc/podinfo/labels"] +=
             "jobset.sigs.k8s.io/jobset-name=\"" + std::string(60, 'j') + "\"\n";
         p.files["/etc/podinfo/annotations"] =
             "jobset.sigs.k8s.io/jobset-name=\"" + std::string(60, 'j') + "\"\n";
       },
       "is 71 characters; a DNS label has at most 63"},
  };
  for (const Row& r : rows) {
    JobSetPod pod("leader", 0, 0);
    pod.in.hostname = "pytorch-ddp-workers-0-1";  // so the leader is derived
    pod.in.etc_hosts =
        "10.0.0.7 pytorch-ddp-workers-0-1.pytorch-ddp.default.svc.cluster.local "
        "pytorch-ddp-workers-0-1\n";
    r.change(pod);
    auto id = ResolveIdentity(pod.in);
    ASSERT_FALSE(id.ok()) << r.name;
    EXPECT_EQ(id.status().failure_class(), exitcodes::FailureClass::kConfig) << r.name;
    EXPECT_NE(id.status().message().find(r.expected), std::string::npos)
        << r.name << ": " << id.status().message();
  }
}

TEST(NamesTest, DnsLengthsAndCharacters) {
  EXPECT_TRUE(ValidateDnsName("x", "trainer-0.trainer.default.svc.cluster.local.").ok());
  EXPECT_TRUE(ValidateDnsName("x", std::string(63, 'a') + ".b").ok());
  auto s = ValidateDnsName("MASTER_ADDR", std::string(64, 'a') + ".b");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("MASTER_ADDR='aaaa"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("64 characters"), std::string::npos) << s.message();
  std::string long_name;
  for (int i = 0; i < 5; ++i) long_name += std::string(50, 'a' + i) + ".";
  long_name += "x";  // 257 characters
  s = ValidateDnsName("x", long_name);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("at most 253"), std::string::npos) << s.message();
  EXPECT_FALSE(ValidateDnsName("x", "a..b").ok());
  EXPECT_FALSE(ValidateDnsName("x", "-a.b").ok());
  EXPECT_FALSE(ValidateDnsName("x", "a_b.c").ok());
  // Through ResolveIdentity: a given leader name too long is refused, naming the source.
  IdentityInputs in = Pod(1, "4");
  in.master_addr = std::string(70, 'l') + ".trainer";
  auto id = ResolveIdentity(in);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("--master-addr/TRAINLET_MASTER_ADDR='llll"),
            std::string::npos)
      << id.status().message();
}

// JobSet's two counters are separate fields (kubernetes-sigs/jobset
// pkg/constants/constants.go): restart-attempt fences the whole JobSet,
// job-restart-attempt counts RestartJob of this pod's Job and is compared per
// Job by the leader. A stale (0, 1) and a current (1, 0) must not look alike.
TEST(AttemptTest, RestartAttemptFencesJobRestartAttemptIsItsOwnField) {
  JobSetPod pod("workers", 0, 1);
  auto id = ResolveIdentity(pod.in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const std::uint32_t first = id->attempt;
  EXPECT_EQ(first, 0u);
  EXPECT_FALSE(id->job_restart_attempt.has_value());
  // A JobSet restart (RestartJobSet) bumps restart-attempt: a new fence.
  pod.files["/etc/podinfo/labels"] += "jobset.sigs.k8s.io/restart-attempt=\"1\"\n";
  pod.files["/etc/podinfo/annotations"] = "jobset.sigs.k8s.io/restart-attempt=\"1\"\n";
  id = ResolveIdentity(pod.in);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->restart_attempt, 1u);
  EXPECT_EQ(id->attempt, 1u);
  // Recreating only this pod's Job (RestartJob) bumps job-restart-attempt:
  // the fence stays, the per-Job count is read apart, with the Job's name.
  pod.files["/etc/podinfo/annotations"] +=
      "jobset.sigs.k8s.io/job-restart-attempt=\"2\"\n";
  pod.files["/etc/podinfo/labels"] += "batch.kubernetes.io/job-name=\"js-workers-0\"\n";
  id = ResolveIdentity(pod.in);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->job_restart_attempt, 2u);
  EXPECT_EQ(id->attempt, 1u);
  EXPECT_EQ(id->job_name, "js-workers-0");
  EXPECT_NE(id->job_restart_attempt_source.find("job-restart-attempt"), std::string::npos);
  pod.files["/etc/podinfo/annotations"] =
      "jobset.sigs.k8s.io/restart-attempt=\"1\"\njobset.sigs.k8s.io/job-restart-attempt=\"x\"\n";
  id = ResolveIdentity(pod.in);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("annotation jobset.sigs.k8s.io/job-restart-attempt='x'"),
            std::string::npos)
      << id.status().message();
}

TEST(LoopbackLeaderTest, LoopbackNames) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "::1", "[::1]", "::ffff:127.0.0.1", "localhost",
                        "LOCALHOST.", "a.localhost", "ip6-localhost", "ip6-loopback"}) {
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
  }
  for (const char* h : {"10.0.0.1", "::2", "localhost.example", "trainer-0.trainer", ""}) {
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
  }
}

// A member dialing loopback in a gang that spans pods waits on itself until
// --rdzv-timeout: refused at once (config). Not for trainlet local's agents,
// the leader, a single pod, or a gang on one host.
TEST(LoopbackLeaderTest, RefusedOnlyWhereTheGangSpansPods) {
  PodIdentity id;
  id.index = 1;
  id.nnodes = 2;
  id.leader_host = "localhost";
  id.leader_source = "--master-addr";
  id.index_source = "--node-rank";
  std::map<std::string, std::string> host_env;
  EXPECT_TRUE(CheckLeaderNotLoopback(id, host_env).ok());  // one host
  std::map<std::string, std::string> pod_env = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}};
  auto s = CheckLeaderNotLoopback(id, pod_env);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.failure_class(), exitcodes::FailureClass::kConfig);
  EXPECT_NE(s.message().find("'localhost'"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("KUBERNETES_SERVICE_HOST"), std::string::npos) << s.message();
  id.index_from_job = true;
  id.index_source = "JOB_COMPLETION_INDEX";
  s = CheckLeaderNotLoopback(id, host_env);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("JOB_COMPLETION_INDEX"), std::string::npos) << s.message();
  pod_env[kLocalGangVariable] = "local-1";
  EXPECT_TRUE(CheckLeaderNotLoopback(id, pod_env).ok());  // trainlet local inside a pod
  PodIdentity leader = id;
  leader.index = 0;
  EXPECT_TRUE(CheckLeaderNotLoopback(leader, {{"KUBERNETES_SERVICE_HOST", "x"}}).ok());
  id.leader_host = "trainer-0.trainer";
  EXPECT_TRUE(CheckLeaderNotLoopback(id, {{"KUBERNETES_SERVICE_HOST", "x"}}).ok());
}

TEST(LoopbackLeaderTest, IndexFromTheJobIsMarked) {
  IdentityInputs in = Pod(1, "4");
  in.node_rank.reset();
  in.env["JOB_COMPLETION_INDEX"] = "1";
  auto id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_TRUE(id->index_from_job);
  in.env.erase("JOB_COMPLETION_INDEX");
  in.node_rank = "1";
  id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_FALSE(id->index_from_job);
}

TEST(PodInfoTest, PodInfoDirAndFile) {
  IdentityInputs in = Pod(1, "4");
  std::map<std::string, std::string> files = {
      {"/podinfo/annotations", "jobset.sigs.k8s.io/restart-attempt=\"3\"\n"},
      {"/podinfo/labels", "batch.kubernetes.io/controller-uid=\"uid-1\"\n"},
      {"/other/ann", "jobset.sigs.k8s.io/restart-attempt=\"4\"\n"}};
  in.read_file = [&files](const std::string& p) -> std::optional<std::string> {
    auto it = files.find(p);
    return it == files.end() ? std::nullopt : std::optional(it->second);
  };
  in.podinfo_dir = "/podinfo";
  auto id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->attempt, 3u);
  EXPECT_EQ(id->job_id, "uid-1");
  in.podinfo_file = "/other/ann";  // the annotations file alone; labels still from the dir
  id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(id->attempt, 4u);
  EXPECT_EQ(id->job_id, "uid-1");
}

// A gang without a token says so once at start in a pod (Kubernetes sets
// KUBERNETES_SERVICE_HOST in every container; an index from the Job means a
// pod too), never for one pod, with a token, or outside a pod.
TEST(IdentityTest, AnUnauthenticatedGangInAPodSaysSo) {
  IdentityInputs in = Pod(1, "4");  // index from JOB_COMPLETION_INDEX
  auto id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  auto notice = UnauthenticatedGangNotice(*id, false, in.env);
  ASSERT_TRUE(notice);
  EXPECT_NE(notice->find("unauthenticated"), std::string::npos) << *notice;
  EXPECT_NE(notice->find("--token-file"), std::string::npos) << *notice;
  EXPECT_NE(notice->find("examples/k8s/"), std::string::npos) << *notice;
  EXPECT_FALSE(UnauthenticatedGangNotice(*id, true, in.env)) << "with a token";
  PodIdentity single = *id;
  single.nnodes = 1;
  EXPECT_FALSE(UnauthenticatedGangNotice(single, false, in.env)) << "one pod: no gang port";
  PodIdentity by_flag = *id;
  by_flag.index_source = "--node-rank";
  EXPECT_FALSE(UnauthenticatedGangNotice(by_flag, false, {})) << "not in a pod";
  EXPECT_TRUE(UnauthenticatedGangNotice(by_flag, false, {{"KUBERNETES_SERVICE_HOST", "10.0.0.1"}}));
  PodIdentity by_annotation = by_flag;
  by_annotation.index_source = "/etc/podinfo/annotations (batch.kubernetes.io/job-completion-index)";
  EXPECT_TRUE(UnauthenticatedGangNotice(by_annotation, false, {}));
}

// torchrun's c10d without --node-rank (the Slurm script's line): no index from
// the Job, JobSet or flags, but an endpoint: numbered by arrival (issue 25).
TEST(IdentityTest, AnEndpointWithoutAnyIndexNumbersThePodsByArrival) {
  IdentityInputs in;
  in.nnodes = "2";
  in.master_addr = "10.0.0.10";
  in.master_addr_source = "--rdzv-endpoint";
  in.leader_from_endpoint = true;
  in.hostname = "node7";
  in.etc_hosts = "127.0.0.1 localhost\n";
  in.read_file = [](const std::string&) { return std::optional<std::string>(); };
  auto id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_TRUE(id->by_arrival);
  EXPECT_EQ(id->index, 0xFFFFFFFFu) << "decided at the rendezvous";
  EXPECT_FALSE(id->is_leader());
  EXPECT_EQ(id->leader_host, "10.0.0.10");
  EXPECT_EQ(id->nnodes, 2u);
  in.node_rank = "1";  // an index decides, as before
  id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_FALSE(id->by_arrival);
  EXPECT_EQ(id->index, 1u);
  in.node_rank.reset();
  in.env["JOB_COMPLETION_INDEX"] = "0";
  id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_FALSE(id->by_arrival);
  EXPECT_TRUE(id->is_leader());
}

// Elastic --nnodes MIN:MAX with no index but an endpoint (torchrun's elastic
// c10d line) is numbered by arrival too; with --gang it stays refused (a
// JobSet's roles have fixed places).
TEST(IdentityTest, ElasticWithoutAnIndexIsNumberedByArrivalButNeverWithAGang) {
  IdentityInputs in;
  in.nnodes = "2:3";
  in.nnodes_source = "--nnodes";
  in.master_addr = "10.0.0.10";
  in.master_addr_source = "--rdzv-endpoint";
  in.leader_from_endpoint = true;
  in.hostname = "node7";
  in.etc_hosts = "127.0.0.1 localhost\n";
  in.read_file = [](const std::string&) { return std::optional<std::string>(); };
  auto id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_TRUE(id->by_arrival);
  EXPECT_TRUE(id->elastic());
  EXPECT_EQ(id->min_pods(), 2u);
  EXPECT_EQ(id->nnodes, 3u);
  in.leader_from_endpoint = false;  // no endpoint: nothing numbers the pods
  id = ResolveIdentity(in);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("--nnodes='2:3' but this pod has no index"),
            std::string::npos)
      << id.status().message();

  JobSetPod pod("workers", 0, 1);
  pod.in.nnodes = "2:5";  // MAX: the layout's 5 pods
  pod.in.nnodes_source = "--nnodes";
  auto gang = ResolveIdentity(pod.in);
  ASSERT_FALSE(gang.ok());
  EXPECT_EQ(gang.status().failure_class(), exitcodes::FailureClass::kConfig);
  EXPECT_NE(gang.status().message().find("an elastic MIN:MAX gang cannot have a --gang layout"),
            std::string::npos)
      << gang.status().message();
}

}  // namespace
}  // namespace trainlet::agent

namespace trainlet::agent {
namespace {

// The /etc/hosts the kubelet writes for a pod with `subdomain`
// (pkg/kubelet/kubelet_pods.go managedHostsFileContent): its header, the
// loopback lines, then "<pod IP>\t<hostname>.<subdomain>.<ns>.svc.<domain>\t<hostname>"
// for each pod IP (two in a dual-stack pod).
std::string KubeletHosts(const std::string& host, const std::string& domain,
                         const std::vector<std::string>& ips) {
  std::string out =
      "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"
      "::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n"
      "fe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n";
  for (const auto& ip : ips) out += ip + "\t" + host + "." + domain + "\t" + host + "\n";
  return out;
}

IdentityInputs KubeletPod(const std::string& uname, const std::string& hosts) {
  IdentityInputs in;
  in.env["JOB_COMPLETION_INDEX"] = "2";
  in.nnodes = "4";
  in.hostname = uname;
  in.etc_hosts = hosts;
  return in;
}

// Every host-name form the kubelet writes: the leader's name derived from each
// is the one the headless Service publishes for index 0.
TEST(HostNameForms, LeaderDerivedFromEach) {
  const std::string svc = "trainer.default.svc.cluster.local";
  struct Row {
    const char* name;
    IdentityInputs in;
    std::string fqdn, leader;
  };
  const std::string long_job(57, 'j');  // "<57>-2": a 59-character label
  const Row rows[] = {
      {"short host name and subdomain",
       KubeletPod("trainer-2", KubeletHosts("trainer-2", svc, {"10.0.0.12"})),
       "trainer-2." + svc, "trainer-0." + svc + "."},
      {"setHostnameAsFQDN: the host name is the FQDN",
       KubeletPod("trainer-2." + svc, KubeletHosts("trainer-2", svc, {"10.0.0.12"})),
       "trainer-2." + svc, "trainer-0." + svc + "."},
      {"dual stack: one line per pod IP",
       KubeletPod("trainer-2", KubeletHosts("trainer-2", svc, {"10.0.0.12", "fd00::12"})),
       "trainer-2." + svc, "trainer-0." + svc + "."},
      {"IPv6 only, setHostnameAsFQDN",
       KubeletPod("trainer-2." + svc, KubeletHosts("trainer-2", svc, {"fd00::12"})),
       "trainer-2." + svc, "trainer-0." + svc + "."},
      {"a cluster domain other than cluster.local",
       KubeletPod("trainer-2", KubeletHosts("trainer-2", "trainer.ml.svc.gpu.example", {"10.0.0.12"})),
       "trainer-2.trainer.ml.svc.gpu.example", "trainer-0.trainer.ml.svc.gpu.example."},
      // An Indexed Job's pod is named <job>-<index>-<random> but its hostname
      // field <job>-<index>: the host name decides, never the pod's name.
      {"a hostname field other than the pod's name",
       [] {
         IdentityInputs in = KubeletPod("train-2", KubeletHosts("train-2", "ddp.default.svc.cluster.local", {"10.0.0.12"}));
         in.env["HOSTNAME"] = "train-2";
         in.env["POD_NAME"] = "train-2-x7k2q";
         return in;
       }(),
       "train-2.ddp.default.svc.cluster.local", "train-0.ddp.default.svc.cluster.local."},
      {"a 59-character host name",
       KubeletPod(long_job + "-2", KubeletHosts(long_job + "-2", "s.default.svc.cluster.local", {"10.0.0.12"})),
       long_job + "-2.s.default.svc.cluster.local", long_job + "-0.s.default.svc.cluster.local."},
  };
  for (const Row& r : rows) {
    auto id = ResolveIdentity(r.in);
    ASSERT_TRUE(id.ok()) << r.name << ": " << id.status().message();
    EXPECT_EQ(id->own_fqdn, r.fqdn) << r.name;
    EXPECT_EQ(id->leader_host, r.leader) << r.name;
    EXPECT_EQ(id->job_id, r.leader.substr(0, r.leader.find('.'))) << r.name;
  }
}

TEST(HostNameForms, FqdnFromHostsWithEitherHostName) {
  const std::string hosts =
      KubeletHosts("web-0", "web.ns.svc.cluster.local", {"10.0.0.5", "fd00::5"});
  EXPECT_EQ(FqdnFromHosts(hosts, "web-0"), "web-0.web.ns.svc.cluster.local");
  EXPECT_EQ(FqdnFromHosts(hosts, "web-0.web.ns.svc.cluster.local"),
            "web-0.web.ns.svc.cluster.local");
  EXPECT_EQ(FqdnFromHosts(hosts, "web-1"), "");
  EXPECT_EQ(FqdnFromHosts(KubeletHosts("web-0", "", {}), "web-0"), "");
}

// JobSet at the 63-character label limit: <jobset>-<role>-<j>-<i> as long as
// a label may be; the leader's name (role 0, 0-0) is derived in the same domain.
TEST(HostNameForms, JobSetLongNamesAtTheLabelLimit) {
  const std::string jobset(63 - std::string("-workers-0-1").size(), 'a');
  const std::string host = jobset + "-workers-0-1";
  ASSERT_EQ(host.size(), 63u);
  const std::string domain = jobset + ".default.svc.cluster.local";
  for (bool as_fqdn : {false, true}) {
    IdentityInputs in;
    in.env["JOB_COMPLETION_INDEX"] = "1";
    in.gang = "leader=1,workers=2";
    in.hostname = as_fqdn ? host + "." + domain : host;
    in.etc_hosts = KubeletHosts(host, domain, {"fd00::7"});
    auto id = ResolveIdentity(in);
    ASSERT_TRUE(id.ok()) << id.status().message();
    EXPECT_EQ(id->index, 2u);
    EXPECT_EQ(id->leader_host, jobset + "-leader-0-0." + domain + ".");
  }
}

TEST(HostNameForms, HostNetworkIsRefusedWithTheFix) {
  // The node's own hosts file under the kubelet's host-network header: its
  // FQDN is the node's, never to be turned into a leader's name.
  IdentityInputs in = KubeletPod(
      "gpu-node-2", "# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n"
                    "10.1.0.2\tgpu-node-2.dc.example\tgpu-node-2\n");
  auto id = ResolveIdentity(in);
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().failure_class(), exitcodes::FailureClass::kConfig);
  EXPECT_NE(id.status().message().find("hostNetwork: true"), std::string::npos)
      << id.status().message();
  EXPECT_NE(id.status().message().find("set --master-addr"), std::string::npos);
  // With the leader given, the node's names stay out of it (no subdomain check
  // against the node's FQDN).
  in.master_addr = "trainer-0.trainer";
  id = ResolveIdentity(in);
  ASSERT_TRUE(id.ok()) << id.status().message();
  EXPECT_EQ(id->leader_host, "trainer-0.trainer");
  EXPECT_EQ(id->own_fqdn, "");
  // JobSet under hostNetwork, too.
  in.master_addr.reset();
  in.gang = "leader=1,workers=4";
  in.env["JOB_COMPLETION_INDEX"] = "0";
  in.hostname = "pytorch-ddp-workers-0-0";
  in.nnodes.reset();
  id = ResolveIdentity(in);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("hostNetwork: true"), std::string::npos)
      << id.status().message();
}

// One address, whichever form: the same leader and the same job id.
TEST(LeaderAddressForms, IPv6BareOrBracketedIsOneAddress) {
  const char* forms[] = {"fd00::10", "[fd00::10]", "FD00:0::10", "[fd00:0:0:0:0:0:0:10]"};
  for (const char* source : {"flag", "MASTER_ADDR", "PET_MASTER_ADDR"}) {
    for (const char* form : forms) {
      IdentityInputs in = Pod(1, "2");
      if (std::string(source) == "flag") {
        in.master_addr = form;
      } else {
        in.env[source] = form;
      }
      auto id = ResolveIdentity(in);
      ASSERT_TRUE(id.ok()) << source << "=" << form << ": " << id.status().message();
      EXPECT_EQ(id->leader_host, "fd00::10") << source << "=" << form;
      EXPECT_EQ(id->job_id, "fd00::10") << source << "=" << form;
    }
  }
}

TEST(LeaderAddressForms, RefusedAtOnceNamingTheForm) {
  struct Row {
    const char* value;
    const char* message;
  };
  for (const Row& r : {Row{"[fd00::10]:29500", "no port may follow the host here"},
                       Row{"10.0.0.10:29500", "no port may follow the host here"},
                       Row{"fe80::1%eth0", "the zone id '%eth0'"},
                       Row{"10.0.0", "looks like an IPv4 address"}}) {
    IdentityInputs in = Pod(1, "2");
    in.env["MASTER_ADDR"] = r.value;
    auto id = ResolveIdentity(in);
    ASSERT_FALSE(id.ok()) << r.value;
    EXPECT_EQ(id.status().failure_class(), exitcodes::FailureClass::kConfig);
    EXPECT_NE(id.status().message().find(std::string("MASTER_ADDR='") + r.value + "'"),
              std::string::npos) << id.status().message();
    EXPECT_NE(id.status().message().find(r.message), std::string::npos) << id.status().message();
  }
}

TEST(LeaderAddressForms, CoordinatorGoesThroughTheSameParser) {
  JobSetPod pod("workers", 0, 2);
  pod.files["/etc/podinfo/annotations"] =
      "jobset.sigs.k8s.io/coordinator=\"pytorch-ddp-leader-0-0.pytorch-ddp:29500\"\n";
  auto id = ResolveIdentity(pod.in);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("no port may follow"), std::string::npos)
      << id.status().message();
}

}  // namespace
}  // namespace trainlet::agent
