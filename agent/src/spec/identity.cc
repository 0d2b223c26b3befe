#include "trainlet/agent/spec/identity.h"

#include <cctype>
#include <charconv>
#include <sstream>
#include <vector>

#include <boost/asio/ip/address.hpp>

#include "trainlet/agent/base/address.h"
#include "trainlet/agent/base/tunables.h"

namespace trainlet::agent {
namespace {

using exitcodes::Result;
using exitcodes::Status;

constexpr char kIndexAnnotation[] = "batch.kubernetes.io/job-completion-index";

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

// The first label of a host name: the pod's short host name when the kubelet
// set its FQDN as the host name (pod spec setHostnameAsFQDN: true).
std::string FirstLabel(const std::string& host) { return host.substr(0, host.find('.')); }

// The kubelet writes this first line in the /etc/hosts of a pod with
// hostNetwork: true, followed by the node's own hosts file
// (pkg/kubelet/kubelet_pods.go, managedHostsHeaderWithHostNetwork): the host
// name and any FQDN there are the node's, not the pod's.
bool HostNetworkHosts(const std::string& etc_hosts) {
  return etc_hosts.starts_with("# Kubernetes-managed hosts file (host network).");
}

bool AllDigits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// JobSet's pod hostname <jobset>-<role>-<jobIndex>-<podIndex> for a known role
// (role names may hold '-', so the layout's names anchor the split).
struct JobSetHost {
  std::string jobset;
  std::size_t role = 0;
  std::string job_index, pod_index;
};
std::optional<JobSetHost> ParseJobSetHost(const std::string& host, const GangLayout& layout) {
  auto last = host.rfind('-');
  if (last == std::string::npos || last == 0) return std::nullopt;
  auto mid = host.rfind('-', last - 1);
  if (mid == std::string::npos || mid == 0) return std::nullopt;
  std::string job = host.substr(mid + 1, last - mid - 1), pod = host.substr(last + 1);
  if (!AllDigits(job) || !AllDigits(pod)) return std::nullopt;
  std::string head = host.substr(0, mid);  // <jobset>-<role>
  for (std::size_t r = 0; r < layout.roles.size(); ++r) {
    const std::string suffix = "-" + layout.roles[r].name;
    if (head.size() > suffix.size() && head.ends_with(suffix)) {
      return JobSetHost{head.substr(0, head.size() - suffix.size()), r, job, pod};
    }
  }
  return std::nullopt;
}

}  // namespace

std::uint32_t GangLayout::total_pods() const { return pods_before(roles.size()); }

std::uint32_t GangLayout::pods_before(std::size_t role) const {
  std::uint32_t n = 0;
  for (std::size_t r = 0; r < role && r < roles.size(); ++r) n += roles[r].pods();
  return n;
}

std::string GangLayout::ToString() const {
  std::string out;
  for (const auto& r : roles) {
    if (!out.empty()) out += ",";
    out += r.name + "=";
    if (r.replicas != 1) out += std::to_string(r.replicas) + "x";
    out += std::to_string(r.pods_per_job);
  }
  return out;
}

Result<GangLayout> ParseGang(const std::string& what, const std::string& value) {
  GangLayout layout;
  const std::string form = " (expected NAME=PODS or NAME=REPLICASxPODS, comma-separated, in the "
                           "order of the JobSet's replicatedJobs, e.g. leader=1,workers=4)";
  if (value.empty()) return Status::Config(what + "='' is empty" + form);
  std::uint64_t total = 0;
  for (const std::string& part : Split(value + ",", ',')) {
    auto eq = part.find('=');
    if (eq == std::string::npos) {
      return Status::Config(what + "=" + Quote(value) + ": " + Quote(part) + " has no '='" + form);
    }
    GangRole role;
    role.name = part.substr(0, eq);
    bool label = !role.name.empty() && role.name.size() <= 63 &&
                 role.name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") ==
                     std::string::npos &&
                 role.name.front() != '-' && role.name.back() != '-';
    if (!label) {
      return Status::Config(what + "=" + Quote(value) + ": role " + Quote(role.name) +
                            " is not a replicatedJob name (a DNS label: 1 to 63 of a-z, 0-9, "
                            "'-', not starting or ending with '-')");
    }
    for (const auto& r : layout.roles) {
      if (r.name == role.name) {
        return Status::Config(what + "=" + Quote(value) + ": role " + Quote(role.name) +
                              " appears twice");
      }
    }
    std::string count = part.substr(eq + 1);
    auto x = count.find('x');
    std::string replicas = x == std::string::npos ? "1" : count.substr(0, x);
    std::string pods = x == std::string::npos ? count : count.substr(x + 1);
    auto r = ParseCount(what + " replicas of " + role.name, replicas, kMaxPods);
    if (!r.ok()) return r.status();
    auto p = ParseCount(what + " pods of " + role.name, pods, kMaxPods);
    if (!p.ok()) return p.status();
    if (*r == 0 || *p == 0) {
      return Status::Config(what + "=" + Quote(value) + ": role " + Quote(role.name) +
                            " has no pods; every role needs at least one");
    }
    role.replicas = *r;
    role.pods_per_job = *p;
    total += static_cast<std::uint64_t>(*r) * *p;
    if (total > kMaxPods) {
      return Status::Config(what + "=" + Quote(value) + " has more than " +
                            std::to_string(kMaxPods) + " pods");
    }
    layout.roles.push_back(role);
  }
  return layout;
}

std::optional<std::string> LookupPodInfo(const std::string& content, const std::string& key) {
  std::istringstream is(content);
  std::string line;
  while (std::getline(is, line)) {
    auto eq = line.find('=');
    if (eq == std::string::npos || line.compare(0, eq, key) != 0 || eq != key.size()) continue;
    std::string raw = line.substr(eq + 1);
    if (raw.size() < 2 || raw.front() != '"' || raw.back() != '"') return raw;
    // The kubelet writes each value with Go's %q (strconv.Quote): \a \b \f \n
    // \r \t \v \\ \" and \xNN, \uNNNN, \UNNNNNNNN for the rest.
    std::string out;
    const std::size_t end = raw.size() - 1;  // the closing quote
    for (std::size_t i = 1; i < end; ++i) {
      if (raw[i] != '\\' || i + 1 >= end) {
        out += raw[i];
        continue;
      }
      char c = raw[++i];
      std::size_t hex = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
      if (hex == 0) {
        const std::string from = "abfnrtv", to = "\a\b\f\n\r\t\v";
        auto k = from.find(c);
        out += k == std::string::npos ? c : to[k];
        continue;
      }
      std::uint32_t cp = 0;
      if (i + hex >= end) {  // the digits must end before the closing quote
        out += c;
        continue;
      }
      auto [ptr, ec] = std::from_chars(raw.data() + i + 1, raw.data() + i + 1 + hex, cp, 16);
      if (ec != std::errc() || ptr != raw.data() + i + 1 + hex) {
        out += c;
        continue;
      }
      i += hex;
      if (c == 'x' || cp < 0x80) {
        out += static_cast<char>(cp);  // \xNN is a raw byte
      } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
      }
    }
    return out;
  }
  return std::nullopt;
}

std::string FqdnFromHosts(const std::string& etc_hosts, const std::string& hostname) {
  // The kubelet's line is "<pod IP>\t<host>.<subdomain>.<ns>.svc.<domain>\t<host>"
  // (one per pod IP: two in a dual-stack pod), <host> the pod spec's hostname.
  // With setHostnameAsFQDN the host name is that FQDN, the line the same.
  const std::string short_host = FirstLabel(hostname);
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
      if (f == hostname || f == short_host) lists_host = true;
    }
    if (!lists_host) continue;
    for (const auto& n : names) {
      if (n.size() > short_host.size() + 1 && n.starts_with(short_host + ".") &&
          n.size() > best.size()) {
        best = n;
      }
    }
  }
  while (!best.empty() && best.back() == '.') best.pop_back();
  return best;
}

namespace {

// The downward-API files (a volume with `labels` and `annotations`): JobSet
// puts its keys in both, the Job controller its completion index in the
// annotations and its UID in the labels.
struct PodInfo {
  std::string dir;
  std::string annotations_path;
  std::optional<std::string> annotations, labels;
  Status error = Status::Ok();  // a file that is there but unusable (read_file's error)

  std::string InDir(const std::string& file) const {
    return dir.empty() || dir.back() == '/' ? dir + file : dir + "/" + file;
  }
  std::optional<Sourced> Lookup(const std::string& key) const {
    if (annotations) {
      if (auto v = LookupPodInfo(*annotations, key)) return Sourced{"annotation " + key, *v};
    }
    if (labels) {
      if (auto v = LookupPodInfo(*labels, key)) return Sourced{"label " + key, *v};
    }
    return std::nullopt;
  }
};

PodInfo ReadPodInfo(const IdentityInputs& in) {
  PodInfo p;
  p.dir = in.podinfo_dir.value_or(
      in.podinfo_file ? in.podinfo_file->substr(0, in.podinfo_file->rfind('/') + 1)
                      : std::string("/etc/podinfo"));
  p.annotations_path = in.podinfo_file.value_or(p.InDir("annotations"));
  if (!in.read_file) return p;
  for (auto [path, out] : {std::pair{p.annotations_path, &p.annotations},
                           std::pair{p.InDir("labels"), &p.labels}}) {
    auto content = in.read_file(path);
    if (!content.ok()) {
      if (p.error.ok()) p.error = content.status();
      continue;
    }
    *out = std::move(content).value();
  }
  return p;
}

// What ResolveIdentity's steps share: the inputs, what earlier steps found,
// and the identity being built. Each step is one section of the precedence
// documented at ResolveIdentity (identity.h), in that order.
// Several pods and no index from the Job, JobSet or flags. With a rendezvous
// endpoint (torchrun's c10d without --node-rank) the pods are numbered as
// they join: the endpoint's host leads (rendezvous/arrival.h). Otherwise every
// pod would think it is the leader (kubernetes/kubernetes#121523,
// pytorch/pytorch#73656): config, naming `nnodes` ("--nnodes='2'").
Status WithoutIndex(const IdentityInputs& in, const std::string& nnodes,
                    const std::string& annotations_path, PodIdentity* id) {
  if (in.leader_from_endpoint && in.spares == 0) {
    id->index = 0xFFFFFFFF;  // rendezvous::wire::kNoIndex: decided at the rendezvous
    id->index_source = "arrival (no index; the endpoint's host leads)";
    id->by_arrival = true;
    return Status::Ok();
  }
  return Status::Config(
      nnodes + " but this pod has no index: run it in an Indexed Job (JOB_COMPLETION_INDEX), set "
      "--node-rank / PET_NODE_RANK, mount the job-completion-index annotation at " +
      annotations_path + ", or give --rdzv-endpoint (its host leads, the others are numbered as "
      "they join)");
}

struct Resolution {
  const IdentityInputs& in;
  PodInfo files;
  std::optional<GangLayout> layout;
  std::optional<Sourced> index;  // the completion index (or gang index) as given
  bool index_is_gang_index = false;
  std::optional<Sourced> nnodes;
  std::size_t role = 0;  // this pod's role in `layout`
  std::optional<JobSetHost> host_parts;
  std::optional<std::string> own_prefix;  // "<prefix>" of this pod's "<prefix>-<index>"
  std::string short_host;  // the host name's first label (all of it without setHostnameAsFQDN)
  bool host_network = false;  // hostNetwork: true (HostNetworkHosts): no pod FQDN
  PodIdentity id;

  explicit Resolution(const IdentityInputs& inputs) : in(inputs), files(ReadPodInfo(inputs)) {}

  std::optional<Sourced> podinfo(const std::string& key) const { return files.Lookup(key); }
  std::string in_dir(const std::string& file) const { return files.InDir(file); }
  // The steps, in ResolveIdentity's order.
  void FindIndex();
  Status ResolveGangSize();
  Status PlaceByJobSetRole();
  Status PlaceInGang();
  Status ResolveWorkers();
  Status LeaderFromCoordinator(const Sourced& coordinator);
  Status LeaderGiven(const Sourced& leader);
  Status UseDerivedLeader(const std::string& host, const std::string& derived_from,
                          std::string source);
  Status LeaderFromJobSetName();
  Status LeaderFromFqdn();
  Status RefuseHostNetwork() const;
  Status ResolveLeader();
  Status ResolveAttempt();
  Status ResolveJobId();
};

// Completion index (with --gang, --node-rank and PET_NODE_RANK are the gang
// index itself: torchrun's node rank).
void Resolution::FindIndex() {
  if (in.node_rank) {
    index = Sourced{in.node_rank_source, *in.node_rank};
    index_is_gang_index = layout.has_value();
  } else if (auto v = Env(in, "JOB_COMPLETION_INDEX")) {
    index = Sourced{"JOB_COMPLETION_INDEX", *v};
  } else if (auto v = Env(in, "PET_NODE_RANK"); v && !layout) {
    index = Sourced{"PET_NODE_RANK", *v};
  } else if (auto a = files.annotations ? LookupPodInfo(*files.annotations, kIndexAnnotation)
                                        : std::nullopt) {
    index = Sourced{files.annotations_path + " (" + kIndexAnnotation + ")", *a};
  } else if (auto v = Env(in, "PET_NODE_RANK")) {
    index = Sourced{"PET_NODE_RANK", *v};
    index_is_gang_index = true;
  }
}

// Gang size.
Status Resolution::ResolveGangSize() {
  if (in.nnodes) {
    nnodes = Sourced{in.nnodes_source, *in.nnodes};
  } else if (auto v = Env(in, "PET_NNODES")) {
    nnodes = Sourced{"PET_NNODES", *v};
  }
  if (nnodes) {
    std::string max_text = nnodes->value;
    if (nnodes->value.find(':') != std::string::npos) {
      auto n = ParseNnodes(nnodes->source, nnodes->value);  // torchrun's N:N or MIN:MAX
      if (!n.ok()) return n.status();
      const std::size_t colon = n->find(':');
      max_text = colon == std::string::npos ? *n : n->substr(colon + 1);
      if (colon != std::string::npos) id.min_nodes = *ParseCount("", n->substr(0, colon), kMaxPods);
    }
    auto n = ParseCount(nnodes->source, max_text, kMaxPods);
    if (!n.ok()) return n.status();
    if (*n == 0) return Status::Config(nnodes->source + "='0': a gang needs at least one pod");
    if (layout && *n != layout->total_pods()) {
      return Status::Config(nnodes->source + "=" + Quote(nnodes->value) + " but --gang " +
                            Quote(id.gang) + " has " + std::to_string(layout->total_pods()) +
                            " pods; leave --nnodes out with --gang");
    }
    id.nnodes = *n;
    if (id.min_nodes == 0) id.min_nodes = *n;  // a fixed gang: MIN = MAX
  } else if (layout) {
    id.nnodes = layout->total_pods();
    nnodes = Sourced{"--gang/TRAINLET_GANG", id.gang};
  } else if (index) {
    return Status::Config(
        "the number of pods is missing: set --nnodes (or TRAINLET_NNODES / PET_NNODES) to the "
        "Job's completions; this pod has index " + Quote(index->value) + " from " +
        index->source + " and pods cannot read the Job's completions (kubernetes#106009)");
  }
  return Status::Ok();
}

// With --gang and a completion index: the role and job index from JobSet's
// labels or hostname, the gang index from the layout.
Status Resolution::PlaceByJobSetRole() {
  if (!index) {
    return Status::Config("--gang " + Quote(id.gang) +
                          " but this pod has no completion index: run it in a JobSet (Indexed "
                          "Jobs set JOB_COMPLETION_INDEX), or set --node-rank to its gang index");
  }
  std::optional<Sourced> role_name = podinfo("jobset.sigs.k8s.io/replicatedjob-name");
  if (!role_name && host_parts) {
    role_name = Sourced{"hostname " + Quote(in.hostname), layout->roles[host_parts->role].name};
  }
  if (!role_name) {
    return Status::Config(
        "--gang " + Quote(id.gang) + " but this pod's replicated Job is unknown: mount the "
        "pod's labels (downward API) at " + in_dir("labels") + " or give it a JobSet hostname "
        "<jobset>-<role>-<jobIndex>-<podIndex> (hostname is " + Quote(in.hostname) + ")");
  }
  bool found = false;
  for (role = 0; role < layout->roles.size(); ++role) {
    if (layout->roles[role].name == role_name->value) {
      found = true;
      break;
    }
  }
  if (!found) {
    return Status::Config(role_name->source + "=" + Quote(role_name->value) +
                          " is not a role of --gang " + Quote(id.gang));
  }
  const GangRole& r = layout->roles[role];
  if (auto reps = podinfo("jobset.sigs.k8s.io/replicatedjob-replicas")) {
    auto n = ParseCount(reps->source, reps->value, kMaxPods);
    if (!n.ok()) return n.status();
    if (*n != r.replicas) {
      return Status::Config(reps->source + "=" + Quote(reps->value) + " but --gang " +
                            Quote(id.gang) + " gives role " + r.name + " " +
                            std::to_string(r.replicas) + " replica(s)");
    }
  }
  std::optional<Sourced> job_index = podinfo("jobset.sigs.k8s.io/job-index");
  if (!job_index && host_parts && host_parts->role == role) {
    job_index = Sourced{"hostname " + Quote(in.hostname), host_parts->job_index};
  }
  if (!job_index && r.replicas == 1) job_index = Sourced{"default (one replica)", "0"};
  if (!job_index) {
    return Status::Config("role " + r.name + " has " + std::to_string(r.replicas) +
                          " replicas but this pod's job index is unknown: mount the pod's "
                          "labels (jobset.sigs.k8s.io/job-index) at " + in_dir("labels"));
  }
  auto j = ParseCount(job_index->source, job_index->value, kMaxPods);
  if (!j.ok()) return j.status();
  if (*j >= r.replicas) {
    return Status::Config(job_index->source + "=" + Quote(job_index->value) +
                          " is not below role " + r.name + "'s " + std::to_string(r.replicas) +
                          " replica(s) in --gang " + Quote(id.gang));
  }
  auto c = ParseCount(index->source, index->value, kMaxPods);
  if (!c.ok()) return c.status();
  if (*c >= r.pods_per_job) {
    return Status::Config(index->source + "=" + Quote(index->value) +
                          " is not below role " + r.name + "'s " +
                          std::to_string(r.pods_per_job) + " pods per Job in --gang " +
                          Quote(id.gang));
  }
  id.index = layout->pods_before(role) + *j * r.pods_per_job + *c;
  id.index_source = "--gang: role " + r.name + " (" + role_name->source + "), job " +
                    std::to_string(*j) + ", completion index " + std::to_string(*c) + " (" +
                    index->source + ")";
  return Status::Ok();
}

// The role of this pod in the gang's layout.
Status Resolution::PlaceInGang() {
  if (layout && index && index_is_gang_index) {
    auto n = ParseCount(index->source, index->value, kMaxPods);
    if (!n.ok()) return n.status();
    if (*n >= id.nnodes) {
      return Status::Config(index->source + "=" + Quote(index->value) +
                            " is not below the gang's " + std::to_string(id.nnodes) +
                            " pods (--gang " + Quote(id.gang) + ")");
    }
    while (*n >= layout->pods_before(role + 1)) ++role;
    id.index = *n;
    id.index_source = index->source;
  } else if (layout && !index && id.nnodes == 1) {
    id.index_source = "default (single pod)";
  } else if (layout) {
    if (auto st = PlaceByJobSetRole(); !st.ok()) return st;
  } else if (index) {
    auto n = ParseCount(index->source, index->value, kMaxPods);
    if (!n.ok()) return n.status();
    const std::uint32_t pods = id.nnodes + in.spares;  // the Job runs N + K pods
    if (*n >= pods) {
      return Status::Config(index->source + "=" + Quote(index->value) +
                            " is not below the number of pods " + std::to_string(pods) +
                            " (" + nnodes->source +
                            (in.spares > 0 ? " plus --spares " + std::to_string(in.spares)
                                           : std::string()) +
                            "); indices run from 0 to " + std::to_string(pods - 1));
    }
    id.index = *n;
    id.index_source = index->source;
  } else if (id.nnodes > 1) {  // elastic MIN:MAX too: MAX > 1
    Status s = WithoutIndex(in, nnodes->source + "=" + Quote(nnodes->value),
                            files.annotations_path, &id);
    if (!s.ok()) return s;
  } else {
    id.index_source = "default (single pod)";
  }
  if (in.spares > 0 && layout) {
    return Status::Config("--spares with --gang: hot spares take node ranks of a plain Indexed "
                          "Job; a JobSet's roles have fixed places");
  }
  if (id.elastic() && layout) {
    return Status::Config(nnodes->source + "=" + Quote(nnodes->value) +
                          ": an elastic MIN:MAX gang cannot have a --gang layout (a JobSet's "
                          "roles have fixed places): give each pod an index (an Indexed Job's "
                          "completion index, or --node-rank), or none and --rdzv-endpoint "
                          "(numbered by arrival)");
  }
  id.spares = in.spares;
  // An index the Job controller gave (not a flag): the gang spans pods.
  id.index_from_job = index && (index->source == "JOB_COMPLETION_INDEX" ||
                                index->source.find(kIndexAnnotation) != std::string::npos);
  return Status::Ok();
}

// Workers per pod.
Status Resolution::ResolveWorkers() {
  std::optional<Sourced> nproc;
  if (in.nproc_per_node) {
    nproc = Sourced{in.nproc_per_node_source, *in.nproc_per_node};
  } else if (auto v = Env(in, "PET_NPROC_PER_NODE")) {
    nproc = Sourced{"PET_NPROC_PER_NODE", *v};
  }
  if (nproc) {
    auto n = ParseCount(nproc->source, nproc->value, kMaxWorkersPerPod);
    if (!n.ok()) return n.status();
    if (*n == 0) return Status::Config(nproc->source + "='0': a pod needs at least one worker");
    id.nproc_per_node = *n;
  }

  // Roles: every pod runs nproc_per_node workers, so a role's ranks are its
  // pods' ranks, contiguous because pods are numbered role by role.
  if (layout) {
    id.role_name = layout->roles[role].name;
    id.role_rank_base = layout->pods_before(role) * id.nproc_per_node;
    id.role_world_size = layout->roles[role].pods() * id.nproc_per_node;
  } else {
    id.role_world_size = id.nnodes * id.nproc_per_node;
  }
  return Status::Ok();
}

// JobSet's coordinator names gang index 0.
Status Resolution::LeaderFromCoordinator(const Sourced& coordinator) {
  auto parsed = ParseHostAddress(coordinator.source, coordinator.value, PortRule::kNone);
  if (!parsed.ok()) return parsed.status();
  const std::string& name = parsed->host;
  std::string first = name.substr(0, name.find('.'));
  auto parts = ParseJobSetHost(first, *layout);
  bool is_zero = parts && parts->role == 0 && parts->job_index == "0" && parts->pod_index == "0";
  if (!is_zero) {
    return Status::Config(
        coordinator.source + "=" + Quote(name) + " is not gang index 0, trainlet's leader: "
        "set the JobSet's spec.coordinator to replicatedJob " + layout->roles[0].name +
        ", jobIndex 0, podIndex 0 (the first role of --gang " + Quote(id.gang) + ")");
  }
  // "<host>.<subdomain>": complete it with this pod's own domain so the
  // resolver asks for exactly that name (see the derived case below).
  auto own_labels = Split(id.own_fqdn, '.');
  auto labels_of = Split(name, '.');
  if (labels_of.size() == 2 && own_labels.size() > 2 && labels_of[1] == own_labels[1] &&
      name.back() != '.') {
    id.leader_host = name + id.own_fqdn.substr(id.own_fqdn.find('.', short_host.size() + 1)) +
                     ".";
  } else {
    id.leader_host = name;
  }
  id.leader_source = coordinator.source;
  return Status::Ok();
}

// A leader name or address given (address.h: bare or bracketed IPv6, no port):
// a name is checked against this pod's own domain.
Status Resolution::LeaderGiven(const Sourced& leader) {
  auto parsed = ParseHostAddress(leader.source, leader.value, PortRule::kNone);
  if (!parsed.ok()) return parsed.status();
  const std::string& name = parsed->host;
  // A leader name in another subdomain than this pod's never resolves to a
  // member of this Job (kubernetes-sigs/jobset#603): fail now, not after the
  // rendezvous timeout.
  if (!parsed->is_ip() && !id.own_fqdn.empty()) {
    auto leader_labels = Split(name, '.');
    auto own_labels = Split(id.own_fqdn, '.');
    if (leader_labels.size() >= 2 && own_labels.size() >= 2 &&
        leader_labels[1] != own_labels[1]) {
      std::string suggestion = own_prefix ? *own_prefix + "-0." + own_labels[1] : "";
      return Status::Config(
          leader.source + "=" + Quote(leader.value) + " is in subdomain '" + leader_labels[1] +
          "' but this pod is " + id.own_fqdn + " (subdomain '" + own_labels[1] + "')" +
          (suggestion.empty() ? "" : "; did you mean " + suggestion + "?"));
    }
  }
  id.leader_host = name;
  id.leader_source = leader.source;
  return Status::Ok();
}

// The leader's first label `host` in this pod's own domain, absolute (trailing
// dot): the resolver asks for exactly this name instead of first trying it
// under every search domain (ndots:5 in pods), which would cost queries and
// seed negative caches with names that never exist.
Status Resolution::UseDerivedLeader(const std::string& host, const std::string& derived_from,
                                    std::string source) {
  id.leader_host = host + id.own_fqdn.substr(short_host.size()) + ".";
  if (auto s = ValidateDnsName("the leader's name derived from " + derived_from, id.leader_host);
      !s.ok()) {
    return s;
  }
  id.leader_source = std::move(source);
  return Status::Ok();
}

// JobSet names pods <jobset>-<replicatedJob>-<jobIndex>-<podIndex> in the
// subdomain of its headless Service (network.enableDNSHostnames); gang
// index 0 is the first pod of the first Job of the first role.
Status Resolution::LeaderFromJobSetName() {
  std::optional<std::string> jobset;
  std::string jobset_source;
  if (auto j = podinfo("jobset.sigs.k8s.io/jobset-name")) {
    jobset = j->value;
    jobset_source = j->source;
  } else if (host_parts) {
    jobset = host_parts->jobset;
    jobset_source = "hostname " + Quote(in.hostname);
  }
  if (host_network) return RefuseHostNetwork();
  if (id.own_fqdn.empty() || !jobset) {
    return Status::Config(
        "cannot find the gang's leader: set --master-addr to the name of the first pod of "
        "role " + layout->roles[0].name + ", or run the pods in a JobSet with "
        "network.enableDNSHostnames so the leader's name can be derived (hostname " +
        Quote(in.hostname) +
        (id.own_fqdn.empty() ? " has no FQDN in /etc/hosts)" : " is not <jobset>-<role>-<j>-<i>)"));
  }
  return UseDerivedLeader(*jobset + "-" + layout->roles[0].name + "-0-0",
                          jobset_source + " and --gang",
                          "JobSet name of gang index 0 in this pod's domain " + id.own_fqdn);
}

// hostNetwork: true: the pod has the node's host name and /etc/hosts, no FQDN
// of its own, so the leader's name cannot be derived; the headless Service
// still publishes <hostname>.<subdomain> for the pod spec's hostname.
Status Resolution::RefuseHostNetwork() const {
  return Status::Config(
      "cannot derive the leader's name: this pod runs with hostNetwork: true (its /etc/hosts "
      "is the node's and its host name " + Quote(in.hostname) + " the node's, so it has no "
      "pod FQDN): set --master-addr (or MASTER_ADDR) to the leader pod's name in its headless "
      "Service (<job>-0.<subdomain>, or for JobSet <jobset>-<role>-0-0.<subdomain>), or run "
      "the pods without hostNetwork");
}

// The leader's name derived from this pod's FQDN: "<prefix>-0.<same domain>.".
Status Resolution::LeaderFromFqdn() {
  if (host_network) return RefuseHostNetwork();
  if (id.own_fqdn.empty() || !own_prefix) {
    return Status::Config(
        "cannot find the leader: set --master-addr (or MASTER_ADDR) to the name of the pod "
        "with index 0, or give the pods a `subdomain` matching a headless Service so the "
        "leader's name can be derived (hostname " + Quote(in.hostname) +
        (id.own_fqdn.empty() ? " has no FQDN in /etc/hosts)" : " does not end in -<index>)"));
  }
  return UseDerivedLeader(*own_prefix + "-0", "this pod's FQDN",
                          "derived from this pod's FQDN " + id.own_fqdn);
}

// The leader.
Status Resolution::ResolveLeader() {
  std::optional<Sourced> leader;
  if (in.master_addr) {
    leader = Sourced{in.master_addr_source, *in.master_addr};
  } else if (auto v = Env(in, "PET_MASTER_ADDR")) {
    leader = Sourced{"PET_MASTER_ADDR", *v};
  } else if (auto v = Env(in, "MASTER_ADDR")) {
    leader = Sourced{"MASTER_ADDR", *v};
  }
  std::optional<Sourced> coordinator;
  if (layout && !leader && id.nnodes > 1) {
    // JobSet's coordinator: the pod whose name it publishes to every pod
    // (spec.coordinator -> annotation jobset.sigs.k8s.io/coordinator,
    // "<jobset>-<rjob>-<jobIndex>-<podIndex>.<subdomain>").
    coordinator = podinfo("jobset.sigs.k8s.io/coordinator");
  }
  if (coordinator) return LeaderFromCoordinator(*coordinator);
  if (leader) return LeaderGiven(*leader);
  if (id.nnodes > 1 && layout) return LeaderFromJobSetName();
  if (id.nnodes > 1) return LeaderFromFqdn();
  return Status::Ok();
}

// The job and attempt, which fence strangers and stale pods at the rendezvous.
Status Resolution::ResolveAttempt() {
  if (in.attempt) {
    auto n = ParseCount("--attempt/TRAINLET_ATTEMPT", *in.attempt, 1'000'000'000);
    if (!n.ok()) return n.status();
    id.attempt = *n;
    id.attempt_source = "--attempt";
  } else {
    if (auto a = podinfo("jobset.sigs.k8s.io/restart-attempt")) {
      auto n = ParseCount(a->source, a->value, 1'000'000'000);
      if (!n.ok()) return n.status();
      id.restart_attempt = *n;
      id.attempt_source = a->source;
    }
    id.attempt = id.restart_attempt;
    if (id.attempt_source.empty()) id.attempt_source = "default";
  }
  // JobSet's per-Job restart count, its own field (kubernetes-sigs/jobset
  // pkg/constants/constants.go JobRestartAttemptKey: "the individual restart
  // attempt number the Job is currently on", jobRestarts[jobIndex] of its
  // replicatedJob): RestartJob raises it for the one recreated Job, the
  // JobSet-wide restart-attempt stays. Kept apart from the attempt so a stale
  // pod (0, 1) and a current one (1, 0) never look alike. (JobSet has no
  // execution-attempt key; its in-place-restart-attempt is written by its
  // in-place restart agent on the Pod, not on the Job: not read.)
  if (auto a = podinfo("jobset.sigs.k8s.io/job-restart-attempt")) {
    auto n = ParseCount(a->source, a->value, 1'000'000'000);
    if (!n.ok()) return n.status();
    id.job_restart_attempt = *n;
    id.job_restart_attempt_source = a->source;
  }
  return Status::Ok();
}

// The Job this pod belongs to (Kubernetes labels a Job's pods with its name).
Status Resolution::ResolveJobId() {
  if (auto j = podinfo("batch.kubernetes.io/job-name")) {
    id.job_name = j->value;
  } else if (auto j2 = podinfo("job-name")) {
    id.job_name = j2->value;
  } else if (id.job_restart_attempt) {
    id.job_name = id.role_name;  // one Job per role: the best key left
  }
  if (in.job_id) {
    id.job_id = *in.job_id;
    id.job_id_source = in.job_id_source;
  } else if (auto j = podinfo("jobset.sigs.k8s.io/jobset-name")) {
    id.job_id = j->value;
    id.job_id_source = j->source;
  } else if (auto u = podinfo("batch.kubernetes.io/controller-uid")) {
    id.job_id = u->value;
    id.job_id_source = u->source;
  } else if (!id.leader_host.empty()) {
    // Every pod of a gang names the same leader, so its first label (the whole
    // literal for an IP) is a job id they agree on without configuration.
    id.job_id = IsIpAddress(id.leader_host) ? id.leader_host
                                            : id.leader_host.substr(0, id.leader_host.find('.'));
  } else {
    id.job_id = "trainlet";
  }
  if (id.job_id.empty() || id.job_id.size() > 253) {
    return Status::Config((in.job_id ? in.job_id_source : id.job_id_source) + "=" +
                          Quote(id.job_id) + " must be 1 to 253 characters");
  }
  return Status::Ok();
}
}  // namespace

Result<PodIdentity> ResolveIdentity(const IdentityInputs& in) {
  Resolution r(in);
  if (!r.files.error.ok()) return r.files.error;
  if (in.gang) {
    auto g = ParseGang("--gang/TRAINLET_GANG", *in.gang);
    if (!g.ok()) return g.status();
    r.layout = std::move(g).value();
    r.id.gang = r.layout->ToString();
  }
  r.FindIndex();
  if (auto st = r.ResolveGangSize(); !st.ok()) return st;
  r.short_host = FirstLabel(in.hostname);
  r.host_network = HostNetworkHosts(in.etc_hosts);
  if (r.layout) r.host_parts = ParseJobSetHost(r.short_host, *r.layout);
  for (auto step : {&Resolution::PlaceInGang, &Resolution::ResolveWorkers}) {
    if (auto st = (r.*step)(); !st.ok()) return st;
  }
  // This pod's FQDN, when the kubelet wrote one (pod spec `subdomain`); none
  // with hostNetwork (the node's names are no pod's).
  if (!r.host_network) r.id.own_fqdn = FqdnFromHosts(in.etc_hosts, in.hostname);
  r.own_prefix = IndexedPrefix(r.short_host);
  for (auto step : {&Resolution::ResolveLeader, &Resolution::ResolveAttempt,
                    &Resolution::ResolveJobId}) {
    if (auto st = (r.*step)(); !st.ok()) return st;
  }
  return r.id;
}

std::optional<std::string> UnauthenticatedGangNotice(const PodIdentity& id, bool has_token,
                                                     const std::map<std::string, std::string>& env) {
  const bool in_pod = env.contains("KUBERNETES_SERVICE_HOST") ||
                      id.index_source == "JOB_COMPLETION_INDEX" ||
                      id.index_source.find(kIndexAnnotation) != std::string::npos;
  if (id.nnodes < 2 || has_token || !in_pod) return std::nullopt;
  return "the gang is unauthenticated (no --token-file): anyone who can reach the leader's port "
         "can take a free index and stall the gang (README, \"Strangers on the port\"); mount a "
         "Secret and pass --token-file, as examples/k8s/indexed-job.yaml does";
}

bool IsLoopbackHost(const std::string& host) {
  std::string h = host;
  if (!h.empty() && h.back() == '.') h.pop_back();
  for (char& c : h) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  boost::system::error_code ec;
  auto a = boost::asio::ip::make_address(h, ec);
  if (!ec) {
    return a.is_loopback() || (a.is_v6() && a.to_v6().is_v4_mapped() &&
                               boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped,
                                                                a.to_v6()).is_loopback());
  }
  // RFC 6761 6.3: "localhost." and names below it are loopback; Debian's
  // /etc/hosts adds ip6-localhost and ip6-loopback.
  return h == "localhost" || h.ends_with(".localhost") || h == "ip6-localhost" ||
         h == "ip6-loopback";
}

exitcodes::Status CheckLeaderNotLoopback(const PodIdentity& id,
                                         const std::map<std::string, std::string>& env) {
  if (id.is_leader() || id.nnodes <= 1 || !IsLoopbackHost(id.leader_host)) return Status::Ok();
  if (env.contains(kLocalGangVariable)) return Status::Ok();  // trainlet local: one pod
  auto k8s = env.find("KUBERNETES_SERVICE_HOST");
  const bool in_pod = k8s != env.end() && !k8s->second.empty();
  if (!in_pod && !id.index_from_job) return Status::Ok();  // one host: loopback reaches it
  return Status::Config(
      "the leader's address " + Quote(id.leader_host) + " (" + id.leader_source +
      ") is loopback, but this gang of " + std::to_string(id.nnodes) + " pods spans pods (" +
      (id.index_from_job ? "index " + std::to_string(id.index) + " from " + id.index_source
                         : std::string("KUBERNETES_SERVICE_HOST is set: this runs in a pod")) +
      "): each pod would dial itself and wait until --rdzv-timeout. Set --master-addr or "
      "--rdzv-endpoint to the leader pod's name (<job>-0.<service>), or leave both out to "
      "derive it from this pod's FQDN");
}

}  // namespace trainlet::agent
