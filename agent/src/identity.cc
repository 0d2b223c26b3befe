#include "trainlet/agent/identity.h"

#include <charconv>
#include <sstream>
#include <vector>

namespace trainlet::agent {
namespace {

using exitcodes::Result;
using exitcodes::Status;

constexpr char kIndexAnnotation[] = "batch.kubernetes.io/job-completion-index";
constexpr std::uint32_t kMaxPods = 1'000'000;
constexpr std::uint32_t kMaxWorkersPerPod = 1024;

std::optional<std::string> Env(const IdentityInputs& in, const std::string& name) {
  auto it = in.env.find(name);
  if (it == in.env.end()) return std::nullopt;
  return it->second;
}

// A named value from the first source that has one.
struct Sourced {
  std::string source;
  std::string value;
};

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string cur;
  std::istringstream is(s);
  while (std::getline(is, cur, sep)) parts.push_back(cur);
  return parts;
}

std::string Quote(const std::string& v) { return "'" + v + "'"; }

// "<prefix>-<digits>" -> prefix, or nullopt.
std::optional<std::string> IndexedPrefix(const std::string& host) {
  auto dash = host.rfind('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == host.size()) return std::nullopt;
  for (std::size_t i = dash + 1; i < host.size(); ++i) {
    if (host[i] < '0' || host[i] > '9') return std::nullopt;
  }
  return host.substr(0, dash);
}

bool IsIpLiteral(const std::string& s) {
  if (s.find(':') != std::string::npos) return true;  // IPv6
  for (char c : s) {
    if (c != '.' && (c < '0' || c > '9')) return false;
  }
  return !s.empty();
}

}  // namespace

Result<std::uint32_t> ParseCount(const std::string& what, const std::string& value,
                                 std::uint32_t max) {
  if (value.find("$(") != std::string::npos) {
    return Status::Config(
        what + "=" + Quote(value) +
        " is an unexpanded Kubernetes $(VAR) reference: the kubelet expands only variables "
        "defined earlier in the env list, and the Job controller appends JOB_COMPLETION_INDEX "
        "after yours (kubernetes/kubernetes#121523); read JOB_COMPLETION_INDEX directly");
  }
  bool canonical = !value.empty() && value.size() <= 10 &&
                   (value == "0" || (value[0] >= '1' && value[0] <= '9'));
  std::uint64_t n = 0;
  if (canonical) {
    auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    canonical = ec == std::errc() && ptr == value.data() + value.size();
  }
  if (!canonical) {
    return Status::Config(what + "=" + Quote(value) +
                          " is not a canonical non-negative decimal integer");
  }
  if (n > max) {
    return Status::Config(what + "=" + Quote(value) + " is larger than " + std::to_string(max));
  }
  return static_cast<std::uint32_t>(n);
}

std::optional<std::string> LookupPodInfo(const std::string& content, const std::string& key) {
  std::istringstream is(content);
  std::string line;
  while (std::getline(is, line)) {
    auto eq = line.find('=');
    if (eq == std::string::npos || line.compare(0, eq, key) != 0 || eq != key.size()) continue;
    std::string raw = line.substr(eq + 1);
    if (raw.size() < 2 || raw.front() != '"' || raw.back() != '"') return raw;
    std::string out;
    for (std::size_t i = 1; i + 1 < raw.size(); ++i) {
      if (raw[i] == '\\' && i + 2 < raw.size()) {
        char c = raw[++i];
        out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
      } else {
        out += raw[i];
      }
    }
    return out;
  }
  return std::nullopt;
}

std::string FqdnFromHosts(const std::string& etc_hosts, const std::string& hostname) {
  std::string best;
  std::istringstream is(etc_hosts);
  std::string line;
  while (std::getline(is, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream fields(line);
    std::vector<std::string> names;
    std::string f;
    fields >> f;  // the address
    bool lists_host = false;
    while (fields >> f) {
      names.push_back(f);
      if (f == hostname) lists_host = true;
    }
    if (!lists_host) continue;
    for (const auto& n : names) {
      if (n.size() > hostname.size() && n.compare(0, hostname.size() + 1, hostname + ".") == 0 &&
          n.size() > best.size()) {
        best = n;
      }
    }
  }
  while (!best.empty() && best.back() == '.') best.pop_back();
  return best;
}

Result<PodIdentity> ResolveIdentity(const IdentityInputs& in) {
  PodIdentity id;

  // Completion index.
  std::optional<Sourced> index;
  if (in.node_rank) {
    index = Sourced{"--node-rank/TRAINLET_NODE_RANK", *in.node_rank};
  } else if (auto v = Env(in, "JOB_COMPLETION_INDEX")) {
    index = Sourced{"JOB_COMPLETION_INDEX", *v};
  } else if (auto v = Env(in, "PET_NODE_RANK")) {
    index = Sourced{"PET_NODE_RANK", *v};
  } else if (in.read_file) {
    if (auto content = in.read_file(in.podinfo_file)) {
      if (auto v = LookupPodInfo(*content, kIndexAnnotation)) {
        index = Sourced{in.podinfo_file + " (" + kIndexAnnotation + ")", *v};
      }
    }
  }

  // Gang size.
  std::optional<Sourced> nnodes;
  if (in.nnodes) {
    nnodes = Sourced{"--nnodes/TRAINLET_NNODES", *in.nnodes};
  } else if (auto v = Env(in, "PET_NNODES")) {
    nnodes = Sourced{"PET_NNODES", *v};
  }
  if (nnodes) {
    if (nnodes->value.find(':') != std::string::npos) {
      return Status::Config(nnodes->source + "=" + Quote(nnodes->value) +
                            ": elastic MIN:MAX ranges are not supported; give the number of pods "
                            "(the Job's completions)");
    }
    auto n = ParseCount(nnodes->source, nnodes->value, kMaxPods);
    if (!n.ok()) return n.status();
    if (*n == 0) return Status::Config(nnodes->source + "='0': a gang needs at least one pod");
    id.nnodes = *n;
  } else if (index) {
    return Status::Config(
        "the number of pods is missing: set --nnodes (or TRAINLET_NNODES / PET_NNODES) to the "
        "Job's completions; this pod has index " + Quote(index->value) + " from " +
        index->source + " and pods cannot read the Job's completions (kubernetes#106009)");
  }

  if (index) {
    auto n = ParseCount(index->source, index->value, kMaxPods);
    if (!n.ok()) return n.status();
    if (*n >= id.nnodes) {
      return Status::Config(index->source + "=" + Quote(index->value) +
                            " is not below the number of pods " + std::to_string(id.nnodes) +
                            " (" + nnodes->source + "); indices run from 0 to " +
                            std::to_string(id.nnodes - 1));
    }
    id.index = *n;
    id.index_source = index->source;
  } else if (id.nnodes > 1) {
    // Without an index every pod would think it is the leader (C33, C08).
    return Status::Config(
        nnodes->source + "=" + Quote(nnodes->value) +
        " but this pod has no index: run it in an Indexed Job (JOB_COMPLETION_INDEX), or set "
        "--node-rank / PET_NODE_RANK, or mount the job-completion-index annotation at " +
        in.podinfo_file);
  } else {
    id.index_source = "default (single pod)";
  }

  // Workers per pod.
  std::optional<Sourced> nproc;
  if (in.nproc_per_node) {
    nproc = Sourced{"--nproc-per-node/TRAINLET_NPROC_PER_NODE", *in.nproc_per_node};
  } else if (auto v = Env(in, "PET_NPROC_PER_NODE")) {
    nproc = Sourced{"PET_NPROC_PER_NODE", *v};
  }
  if (nproc) {
    auto n = ParseCount(nproc->source, nproc->value, kMaxWorkersPerPod);
    if (!n.ok()) return n.status();
    if (*n == 0) return Status::Config(nproc->source + "='0': a pod needs at least one worker");
    id.nproc_per_node = *n;
  }

  // This pod's FQDN, when the kubelet wrote one (pod spec `subdomain`).
  id.own_fqdn = FqdnFromHosts(in.etc_hosts, in.hostname);
  std::optional<std::string> own_prefix = IndexedPrefix(in.hostname);

  // The leader.
  std::optional<Sourced> leader;
  if (in.master_addr) {
    leader = Sourced{"--master-addr/TRAINLET_MASTER_ADDR", *in.master_addr};
  } else if (auto v = Env(in, "PET_MASTER_ADDR")) {
    leader = Sourced{"PET_MASTER_ADDR", *v};
  } else if (auto v = Env(in, "MASTER_ADDR")) {
    leader = Sourced{"MASTER_ADDR", *v};
  }
  if (leader) {
    const std::string& name = leader->value;
    if (name.empty() || name.find("$(") != std::string::npos ||
        name.find_first_of(" \t/") != std::string::npos) {
      return Status::Config(leader->source + "=" + Quote(name) + " is not a host name or address");
    }
    // A leader name in another subdomain than this pod's never resolves to a
    // member of this Job (kubernetes-sigs/jobset#603): fail now, not after the
    // rendezvous timeout.
    if (!IsIpLiteral(name) && !id.own_fqdn.empty()) {
      auto leader_labels = Split(name, '.');
      auto own_labels = Split(id.own_fqdn, '.');
      if (leader_labels.size() >= 2 && own_labels.size() >= 2 &&
          leader_labels[1] != own_labels[1]) {
        std::string suggestion = own_prefix ? *own_prefix + "-0." + own_labels[1] : "";
        return Status::Config(
            leader->source + "=" + Quote(name) + " is in subdomain '" + leader_labels[1] +
            "' but this pod is " + id.own_fqdn + " (subdomain '" + own_labels[1] + "')" +
            (suggestion.empty() ? "" : "; did you mean " + suggestion + "?"));
      }
    }
    id.leader_host = name;
    id.leader_source = leader->source;
  } else if (id.nnodes > 1) {
    if (id.own_fqdn.empty() || !own_prefix) {
      return Status::Config(
          "cannot find the leader: set --master-addr (or MASTER_ADDR) to the name of the pod "
          "with index 0, or give the pods a `subdomain` matching a headless Service so the "
          "leader's name can be derived (hostname " + Quote(in.hostname) +
          (id.own_fqdn.empty() ? " has no FQDN in /etc/hosts)" : " does not end in -<index>)"));
    }
    // Absolute (trailing dot): the resolver asks for exactly this name instead
    // of first trying it under every search domain (ndots:5 in pods), which
    // would cost queries and seed negative caches with names that never exist.
    id.leader_host = *own_prefix + "-0" + id.own_fqdn.substr(in.hostname.size()) + ".";
    id.leader_source = "derived from this pod's FQDN " + id.own_fqdn;
  }

  // The job and attempt, which fence strangers and stale pods at the rendezvous.
  std::optional<std::string> annotations, labels;
  if (in.read_file) {
    annotations = in.read_file(in.podinfo_file);
    std::string dir = in.podinfo_file.substr(0, in.podinfo_file.rfind('/') + 1);
    labels = in.read_file(dir + "labels");
  }
  auto podinfo = [&](const std::string& key) -> std::optional<Sourced> {
    if (annotations) {
      if (auto v = LookupPodInfo(*annotations, key)) return Sourced{"annotation " + key, *v};
    }
    if (labels) {
      if (auto v = LookupPodInfo(*labels, key)) return Sourced{"label " + key, *v};
    }
    return std::nullopt;
  };
  if (in.attempt) {
    auto n = ParseCount("--attempt/TRAINLET_ATTEMPT", *in.attempt, 1'000'000'000);
    if (!n.ok()) return n.status();
    id.attempt = *n;
  } else if (auto a = podinfo("jobset.sigs.k8s.io/restart-attempt")) {
    auto n = ParseCount(a->source, a->value, 1'000'000'000);
    if (!n.ok()) return n.status();
    id.attempt = *n;
  }
  if (in.job_id) {
    id.job_id = *in.job_id;
    id.job_id_source = "--job-id";
  } else if (auto j = podinfo("jobset.sigs.k8s.io/jobset-name")) {
    id.job_id = j->value;
    id.job_id_source = j->source;
  } else if (auto u = podinfo("batch.kubernetes.io/controller-uid")) {
    id.job_id = u->value;
    id.job_id_source = u->source;
  } else if (!id.leader_host.empty()) {
    // Every pod of a gang names the same leader, so its first label (the whole
    // literal for an IP) is a job id they agree on without configuration.
    id.job_id = IsIpLiteral(id.leader_host) ? id.leader_host
                                            : id.leader_host.substr(0, id.leader_host.find('.'));
  } else {
    id.job_id = "trainlet";
  }
  if (id.job_id.empty() || id.job_id.size() > 253) {
    return Status::Config("--job-id=" + Quote(id.job_id) + " must be 1 to 253 characters");
  }
  return id;
}

}  // namespace trainlet::agent
