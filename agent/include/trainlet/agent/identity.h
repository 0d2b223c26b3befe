// trainlet/agent/identity.h — who this pod is: completion index, gang size,
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

#include "trainlet/exitcodes/status.h"

namespace trainlet::agent {

// The raw inputs. Values are as the user gave them; std::nullopt = not given.
struct IdentityInputs {
  // From the command line or TRAINLET_<FLAG> (flags win).
  std::optional<std::string> node_rank;       // --node-rank
  std::optional<std::string> nnodes;          // --nnodes
  std::optional<std::string> nproc_per_node;  // --nproc-per-node
  std::optional<std::string> master_addr;     // --master-addr
  std::optional<std::string> job_id;          // --job-id
  std::optional<std::string> attempt;         // --attempt
  std::string podinfo_file = "/etc/podinfo/annotations";  // --podinfo-file
  // The process environment (JOB_COMPLETION_INDEX, PET_*, MASTER_ADDR, ...).
  std::map<std::string, std::string> env;
  // The pod's hostname (uname) and the content of /etc/hosts, which the kubelet
  // writes with the pod's FQDN when the pod spec sets `subdomain`.
  std::string hostname;
  std::string etc_hosts;
  // Reads a file; nullopt when it does not exist. Injected for tests.
  std::function<std::optional<std::string>(const std::string&)> read_file;
};

// Where the completion index came from, for the start-up log line.
struct PodIdentity {
  std::uint32_t index = 0;           // completion index; 0 is the leader
  std::string index_source;          // "--node-rank", "JOB_COMPLETION_INDEX", ...
  std::uint32_t nnodes = 1;          // pods in the gang
  std::uint32_t nproc_per_node = 1;  // workers per pod
  std::string leader_host;           // empty when this pod is the only one
  std::string leader_source;         // "--master-addr", "MASTER_ADDR", "derived from FQDN ..."
  std::string own_fqdn;              // from /etc/hosts, empty if unknown
  std::string job_id;                // fences strangers at the rendezvous
  std::string job_id_source;
  std::uint32_t attempt = 0;         // restart attempt: pods of other attempts are refused

  bool is_leader() const { return index == 0; }
};

// Builds the identity. Precedence (first found wins):
//   index:  --node-rank, JOB_COMPLETION_INDEX, PET_NODE_RANK, the
//           `batch.kubernetes.io/job-completion-index` key of the downward-API
//           annotations file (--podinfo-file);
//   nnodes: --nnodes, PET_NNODES; required whenever an index was given (an
//           Indexed Job's completions are not visible to its pods, see
//           kubernetes/kubernetes#106009), else 1;
//   nproc_per_node: --nproc-per-node, PET_NPROC_PER_NODE, else 1;
//   leader: --master-addr, PET_MASTER_ADDR, MASTER_ADDR, else derived from this
//           pod's FQDN: hostname "<prefix>-<index>" in a subdomain gives
//           "<prefix>-0.<same domain>." (absolute, so no search domains are tried; the
//           name the headless Service publishes,
//           https://kubernetes.io/docs/concepts/services-networking/dns-pod-service/).
//   job id: --job-id; else the `jobset.sigs.k8s.io/jobset-name` label or
//           annotation (JobSet), else the `batch.kubernetes.io/controller-uid`
//           label (the Job's UID), from the downward-API files (`labels` beside
//           --podinfo-file); else the first label of the leader's name (the same on
//           every pod of the gang); else "trainlet";
//   attempt: --attempt, else JobSet's `jobset.sigs.k8s.io/restart-attempt`
//           annotation or label, else 0.
// Errors (class config): a value that is not a canonical non-negative decimal
// ("03", " 3", "-1", "3x", overflow), an unexpanded "$(VAR)" reference, an index
// not below nnodes, a missing nnodes, no way to find the leader, a leader name
// whose subdomain differs from this pod's own.
[[nodiscard]] exitcodes::Result<PodIdentity> ResolveIdentity(const IdentityInputs& in);

// Parses a canonical non-negative decimal ("0", "17"; not "07", "+1", " 1")
// no larger than `max`. `what` names the source in the error ("JOB_COMPLETION_INDEX").
[[nodiscard]] exitcodes::Result<std::uint32_t> ParseCount(const std::string& what,
                                                          const std::string& value,
                                                          std::uint32_t max);

// Reads one key from a downward-API annotations/labels file, whose lines are
// `key="value"` with Go string escapes. nullopt when the key is absent.
std::optional<std::string> LookupPodInfo(const std::string& content, const std::string& key);

// This pod's FQDN from /etc/hosts content: the longest name on a line that also
// lists `hostname`, starting with "<hostname>.". Empty when none.
std::string FqdnFromHosts(const std::string& etc_hosts, const std::string& hostname);

}  // namespace trainlet::agent
