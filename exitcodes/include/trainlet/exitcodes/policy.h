// trainlet/exitcodes/policy.h — failure policies derived from the contract.
//
// `trainlet policy` prints the Job `podFailurePolicy` (and, with --jobset, a
// JobSet `failurePolicy`) that acts on trainlet's exit codes as intended:
//   DisruptionTarget condition -> Ignore (first: a preempted pod exits 143);
//   bug, config                -> FailJob (FailIndex with --per-index);
//   peer_failed                -> Ignore (the failing pod's own code decides);
//   every other non-zero code  -> Count.
// Field names and semantics: https://kubernetes.io/docs/concepts/workloads/controllers/job/#pod-failure-policy
// and JobSet's failurePolicy (jobset.x-k8s.io/v1alpha2). Pure text generation.
#pragma once

#include <string>

#include "trainlet/exitcodes/contract.h"

namespace trainlet::exitcodes {

struct PolicyOptions {
  std::string container = "trainer";  // containerName the exit-code rules are scoped to
  bool per_index = false;             // FailIndex instead of FailJob (backoffLimitPerIndex)
  bool jobset = false;                // also print a JobSet failurePolicy
  int max_restarts = 3;               // JobSet failurePolicy.maxRestarts
  int backoff_limit_per_index = 2;    // with per_index: the Job's backoffLimitPerIndex
};

// YAML for the Job spec (the `podFailurePolicy:` key and its rules, plus
// `restartPolicy: Never` reminder and, per index, backoffLimitPerIndex) and, with
// `jobset`, a second document for the JobSet spec's `failurePolicy:`.
std::string GeneratePolicy(const ExitCodeTable& codes, const PolicyOptions& options);

}  // namespace trainlet::exitcodes
