// trainlet/agent/spec/identity.h — who this pod is: completion index, gang size,
// workers per pod, the leader's address and the job it belongs to.
//
// Everything is derived here, from flags, environment and downward-API files,
// before any network traffic; a bad or missing input is a class-config Status
// whose message names the variable and its value. Pure functions over the
// inputs below (no hidden reads of the process environment), callable from any
// thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainlet/agent/base/values.h"
#include "trainlet/exitcodes/status.h"

namespace trainlet::agent {

// One replicated Job of a JobSet gang (`--gang leader=1,workers=2x4`): its name
// (JobSet's replicatedJobs[].name), how many Jobs it stamps out (replicas) and
// the pods of each Job (the Job's completions = parallelism).
struct GangRole {
  std::string name;
  std::uint32_t replicas = 1;
  std::uint32_t pods_per_job = 1;

  std::uint32_t pods() const { return replicas * pods_per_job; }
};

// The gang's layout: its replicated Jobs in order. Every pod of the gang must
// be given the same layout (it is part of the launch configuration the leader
// compares). Pods are numbered role by role, Job by Job, completion index by
// completion index; that number is the pod's gang index (its rendezvous index,
// 0 = leader), so RANKs follow the roles' order.
struct GangLayout {
  std::vector<GangRole> roles;

  std::uint32_t total_pods() const;
  // Pods of the roles before roles[role].
  std::uint32_t pods_before(std::size_t role) const;
  // The canonical text: "name=P" for one replica, "name=RxP" otherwise, joined by ",".
  std::string ToString() const;
};

// Parses `--gang`: comma-separated NAME=PODS or NAME=REPLICASxPODS, in the
// order of the JobSet's replicatedJobs; NAME is a DNS label (1 to 63 of a-z,
// 0-9, '-'; JobSet's rule for replicatedJob names), counts are canonical
// decimals >= 1, names are unique, at most 1,000,000 pods in all. `what` names
// the source in errors ("--gang/TRAINLET_GANG"). Errors: class config.
[[nodiscard]] exitcodes::Result<GangLayout> ParseGang(const std::string& what,
                                                      const std::string& value);

// The raw inputs. Values are as the user gave them; std::nullopt = not given.
struct IdentityInputs {
  // From the command line or TRAINLET_<FLAG> (flags win).
  std::optional<std::string> node_rank;       // --node-rank
  std::optional<std::string> nnodes;          // --nnodes
  std::optional<std::string> nproc_per_node;  // --nproc-per-node
  std::optional<std::string> master_addr;     // --master-addr
  std::optional<std::string> job_id;          // --job-id
  std::optional<std::string> attempt;         // --attempt
  std::optional<std::string> gang;            // --gang
  std::uint32_t spares = 0;                   // --spares (parsed): the Job runs nnodes + spares pods
  // Where the values above came from, for messages (the caller knows which of
  // flag, TRAINLET_* or another option, e.g. --rdzv-endpoint, gave them).
  std::string node_rank_source = "--node-rank/TRAINLET_NODE_RANK";
  std::string nnodes_source = "--nnodes/TRAINLET_NNODES";
  std::string nproc_per_node_source = "--nproc-per-node/TRAINLET_NPROC_PER_NODE";
  std::string master_addr_source = "--master-addr/TRAINLET_MASTER_ADDR";
  std::string job_id_source = "--job-id";
  // master_addr is --rdzv-endpoint's host (torchrun's c10d rendezvous): a gang
  // with no index anywhere is then numbered by arrival (PodIdentity::by_arrival).
  bool leader_from_endpoint = false;
  // Downward-API volume folder with the files `labels` and `annotations`
  // (--podinfo-dir, default /etc/podinfo). --podinfo-file names the annotations
  // file alone (older flag); its folder then also holds `labels` unless
  // --podinfo-dir is given.
  std::optional<std::string> podinfo_dir;     // --podinfo-dir
  std::optional<std::string> podinfo_file;    // --podinfo-file
  // The process environment (JOB_COMPLETION_INDEX, PET_*, MASTER_ADDR, ...).
  std::map<std::string, std::string> env;
  // The pod's hostname (uname) and the content of /etc/hosts, which the kubelet
  // writes with the pod's FQDN when the pod spec sets `subdomain`.
  std::string hostname;
  std::string etc_hosts;
  // Reads a downward-API file; ok(nullopt) when it does not exist, an error
  // (config, naming the file) when it is there but unusable: a FIFO, a device,
  // a directory, too large (exitcodes::ReadUserFile). Injected for tests.
  std::function<exitcodes::Result<std::optional<std::string>>(const std::string&)> read_file;
};

// Where the completion index came from, for the start-up log line.
struct PodIdentity {
  std::uint32_t index = 0;           // index in the gang (completion index without --gang); 0 is the leader
  std::string index_source;          // "--node-rank", "JOB_COMPLETION_INDEX", ...
  std::uint32_t nnodes = 1;          // pods in the gang (active; without the spares); elastic: MAX
  // Elastic --nnodes MIN:MAX (torchrun's): the fewest active pods a generation
  // may run with; nnodes (MAX) for a fixed gang. 0 until resolved.
  std::uint32_t min_nodes = 0;
  bool elastic() const { return min_nodes != 0 && min_nodes < nnodes; }
  std::uint32_t min_pods() const { return min_nodes != 0 ? min_nodes : nnodes; }
  std::uint32_t spares = 0;          // hot spares (--spares): indices nnodes.. wait at first
  std::uint32_t nproc_per_node = 1;  // workers per pod
  std::string leader_host;           // empty when this pod is the only one
  std::string leader_source;         // "--master-addr", "MASTER_ADDR", "derived from FQDN ..."
  std::string own_fqdn;              // from /etc/hosts, empty if unknown
  std::string job_id;                // fences strangers at the rendezvous
  std::string job_id_source;
  // The fence the rendezvous compares (pods of other attempts are refused):
  // --attempt, else JobSet's restart-attempt (whole-JobSet restarts).
  std::uint32_t attempt = 0;
  std::string attempt_source;           // "--attempt", "label jobset.sigs.k8s.io/restart-attempt", ...
  std::uint32_t restart_attempt = 0;    // JobSet's restart-attempt (whole-JobSet restarts)
  // JobSet's job-restart-attempt (RestartJob of this pod's Job), when present:
  // compared per Job by the leader (a higher one replaces, a lower one is stale).
  std::optional<std::uint32_t> job_restart_attempt;
  std::string job_restart_attempt_source;
  std::string job_name;  // this pod's Job (label batch.kubernetes.io/job-name), empty if unknown
  // Roles (torchrun's ROLE_NAME / ROLE_RANK / ROLE_WORLD_SIZE): with --gang, the
  // pod's replicated Job; else one role "default" holding the whole gang.
  std::string gang;                     // GangLayout::ToString(), empty without --gang
  std::string role_name = "default";
  std::uint32_t role_rank_base = 0;     // global rank of the role's first worker
  std::uint32_t role_world_size = 1;    // workers in the role (its pods x nproc_per_node)
  // The index came from the Job controller (JOB_COMPLETION_INDEX or the
  // completion-index annotation), not a flag: the gang spans pods.
  bool index_from_job = false;
  // No index from the Job, JobSet or flags, but a rendezvous endpoint
  // (torchrun's c10d without --node-rank): the agent on the endpoint's host
  // leads (rendezvous/arrival.h) and the leader numbers the others as they
  // join. `index` is then wire::kNoIndex (0xFFFFFFFF) until that is decided.
  bool by_arrival = false;

  bool is_leader() const { return index == 0; }
};

// Builds the identity. Precedence (first found wins):
//   index:  --node-rank, JOB_COMPLETION_INDEX, PET_NODE_RANK, the
//           `batch.kubernetes.io/job-completion-index` key of the downward-API
//           annotations file (--podinfo-dir/annotations or --podinfo-file);
//   gang (--gang given): --node-rank and PET_NODE_RANK are the gang index
//           itself (torchrun's node rank); otherwise the completion index above
//           is placed in the layout: gang index = pods of the roles before this
//           pod's + job index x pods per Job + completion index, where the role
//           and the job index come from JobSet's `jobset.sigs.k8s.io/
//           replicatedjob-name` and `job-index` labels/annotations, else from the
//           hostname JobSet gives pods (<jobset>-<role>-<jobIndex>-<podIndex>).
//           `replicatedjob-replicas`, when present, must equal the layout's
//           replicas; nnodes, when given, must equal the layout's pods. The
//           leader is gang index 0: JobSet's `jobset.sigs.k8s.io/coordinator`
//           annotation when set (it must name that pod), else
//           <jobset>-<first role>-0-0 in this pod's own domain (JobSet
//           network.enableDNSHostnames, https://jobset.sigs.k8s.io/docs/);
//   nnodes: --nnodes, PET_NNODES; required whenever an index was given (an
//           Indexed Job's completions are not visible to its pods, see
//           kubernetes/kubernetes#106009), else 1;
//   nproc_per_node: --nproc-per-node, PET_NPROC_PER_NODE, else 1;
//   leader: --master-addr, PET_MASTER_ADDR, MASTER_ADDR (ParseHostAddress,
//           address.h, PortRule::kNone: IPv6 bare or bracketed, kept canonical),
//           else derived from this pod's FQDN: hostname "<prefix>-<index>" (or
//           the FQDN whose first label it is: setHostnameAsFQDN) in a subdomain
//           gives "<prefix>-0.<same domain>." (absolute, so no search domains are
//           tried; the name the headless Service publishes,
//           https://kubernetes.io/docs/concepts/services-networking/dns-pod-service/).
//           With hostNetwork (/etc/hosts under the kubelet's "host network"
//           header) there is no pod FQDN: nothing is derived (config error);
//   job id: --job-id; else the `jobset.sigs.k8s.io/jobset-name` label or
//           annotation (JobSet), else the `batch.kubernetes.io/controller-uid`
//           label (the Job's UID), from the downward-API files (`labels` beside
//           --podinfo-file); else the first label of the leader's name (the same on
//           every pod of the gang); else "trainlet";
//   attempt: --attempt, else JobSet's `jobset.sigs.k8s.io/restart-attempt`
//           (annotation or label), else 0;
//   job_restart_attempt: `jobset.sigs.k8s.io/job-restart-attempt` when present
//           (JobSet counts a RestartJob of this pod's Job there), a separate
//           field; job_name: the `batch.kubernetes.io/job-name` (or `job-name`)
//           label.
// Every leader name used (given or derived) passes ValidateDnsName.
// Errors (class config): a value that is not a canonical non-negative decimal
// ("03", " 3", "-1", "3x", overflow), an unexpanded "$(VAR)" reference, an index
// not below nnodes, a missing nnodes, no way to find the leader, a leader name
// whose subdomain differs from this pod's own or that is not a valid DNS name;
// with --gang: an unknown role, a job or completion index outside the role, a
// replica count or nnodes that disagrees with the layout, a coordinator that is
// not gang index 0.
[[nodiscard]] exitcodes::Result<PodIdentity> ResolveIdentity(const IdentityInputs& in);

// Set by `trainlet local` in its agents' environment: every pod of that gang
// runs in this one pod or host, so a loopback leader is right there.
inline constexpr const char* kLocalGangVariable = "TRAINLET_LOCAL_GANG";

// True for a loopback leader address: 127.0.0.0/8, ::1 (also v4-mapped or in
// brackets), "localhost" and names below it (RFC 6761 6.3), ip6-localhost,
// ip6-loopback (Debian's /etc/hosts). Names are not resolved.
bool IsLoopbackHost(const std::string& host);

// A member whose leader address is loopback while the gang spans pods (it runs
// in a pod: KUBERNETES_SERVICE_HOST set, or its index came from the Job) would
// dial itself until --rdzv-timeout: class config at once, naming the address,
// where it came from and why the gang spans pods. Agents of `trainlet local`
// (kLocalGangVariable set) and gangs on one host (neither sign) pass.
[[nodiscard]] exitcodes::Status CheckLeaderNotLoopback(
    const PodIdentity& id, const std::map<std::string, std::string>& env);

// Reads one key from a downward-API annotations/labels file, whose lines are
// `key="value"` with Go string escapes. nullopt when the key is absent.
std::optional<std::string> LookupPodInfo(const std::string& content, const std::string& key);

// This pod's FQDN from /etc/hosts content: the longest name on a line that also
// lists `hostname` or its first label, starting with "<first label>." (the
// kubelet's "<IP>\t<host>.<subdomain>.<ns>.svc.<domain>\t<host>", one line per pod
// IP; with setHostnameAsFQDN `hostname` is that FQDN). Empty when none.
std::string FqdnFromHosts(const std::string& etc_hosts, const std::string& hostname);

// The line a gang without --token-file logs once at start when it runs in a
// pod (`env` has KUBERNETES_SERVICE_HOST, which the kubelet sets in every
// container, or the index came from the Job: JOB_COMPLETION_INDEX or the
// completion-index annotation): there anyone who can reach the leader's port
// can take a free index (README, "Strangers on the port"). nullopt for a
// single pod, with a token, or outside a pod.
std::optional<std::string> UnauthenticatedGangNotice(const PodIdentity& id, bool has_token,
                                                     const std::map<std::string, std::string>& env);

}  // namespace trainlet::agent
