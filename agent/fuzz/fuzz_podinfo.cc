// libFuzzer entry for the downward-API files (--podinfo-dir labels and
// annotations, the kubelet's key="%q value" lines) through ResolveIdentity, as
// a JobSet pod reads them with --gang, and as an Indexed Job pod without it.
// The input is the labels file, a NUL byte, then the annotations file. Any
// content gives an identity or a config error, never a crash; an identity has
// its index inside the gang.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "trainlet/agent/spec/identity.h"

using namespace trainlet::agent;

namespace {

void Check(const IdentityInputs& in) {
  auto id = ResolveIdentity(in);
  if (!id.ok()) {
    if (id.status().message().empty()) abort();
    return;
  }
  if (id->nnodes == 0 || id->index >= id->nnodes) abort();
  if (id->nnodes > 1 && !id->is_leader() && id->leader_host.empty()) abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string all(reinterpret_cast<const char*>(data), size);
  auto nul = all.find('\0');
  std::string labels = all.substr(0, nul);
  std::string annotations = nul == std::string::npos ? "" : all.substr(nul + 1);
  for (const char* key : {"batch.kubernetes.io/job-completion-index",
                          "jobset.sigs.k8s.io/jobset-name", "jobset.sigs.k8s.io/restart-attempt"}) {
    (void)LookupPodInfo(labels, key);
    (void)LookupPodInfo(annotations, key);
  }
  IdentityInputs in;
  in.podinfo_dir = "/podinfo";
  in.read_file = [&](const std::string& path) -> std::optional<std::string> {
    if (path == "/podinfo/labels") return labels;
    if (path == "/podinfo/annotations") return annotations;
    return std::nullopt;
  };
  // A JobSet pod: its place in the layout comes from these files.
  in.gang = "leader=1,workers=2x2";
  in.hostname = "ddp-workers-1-0";
  in.etc_hosts = "10.0.0.7\tddp-workers-1-0.ddp.default.svc.cluster.local\tddp-workers-1-0\n";
  Check(in);
  // An Indexed Job pod: the completion index annotation.
  in.gang.reset();
  in.nnodes = "4";
  in.hostname = "trainer-2";
  in.etc_hosts = "10.0.0.8\ttrainer-2.trainer.default.svc.cluster.local\ttrainer-2\n";
  Check(in);
  return 0;
}
