#include "trainlet/exitcodes/classify.h"

#include <array>
#include <bitset>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "trainlet/exitcodes/marker_scanner.h"
#include "trainlet/exitcodes/xid.h"

#include "trainlet/exitcodes/termination.h"
#include "trainlet/exitcodes/user_file.h"

namespace trainlet::exitcodes {

namespace {

// The default markers, strongest first (MarkerTable::Defaults).
std::vector<Marker> DefaultMarkers() {
  std::vector<Marker> t;
  const FailureClass hw = FailureClass::kHardware, infra = FailureClass::kInfra,
                     bug = FailureClass::kBug, config = FailureClass::kConfig;
  auto add = [&t](FailureClass c, std::initializer_list<const char*> texts,
                  MarkerMeaning meaning = MarkerMeaning::kPlain, const char* context = "") {
    for (const char* s : texts) t.push_back({c, s, meaning, context});
  };
  // What trainlet::Session::ReportError writes (session/include/trainlet/session.h):
  // the trainer said which class its failure is.
  add(hw, {"[trainlet:hardware]"});
  add(infra, {"[trainlet:infra]"});
  add(bug, {"[trainlet:bug]"});
  add(FailureClass::kOom, {"[trainlet:oom]"});
  // GPU and driver faults (CUDA runtime error strings, NVRM Xid reports).
  add(hw, {"uncorrectable ECC error", "CUDA_ERROR_ECC_UNCORRECTABLE", "fallen off the bus",
           "fell off the bus"});
  // An Xid by its number (xid.h): Xid 31, an MMU fault, is the program's.
  add(hw, {"Xid"}, MarkerMeaning::kXid);
  add(hw, {"CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure",
           "device(s) is/are busy or unavailable", "CUDA driver version is insufficient",
           "NVML_ERROR_GPU_IS_LOST"});
  // A kernel's bad pointer: the worker's own failure (its code passes through,
  // Count), unless an Xid or NVML says the GPU failed.
  add(FailureClass::kWorker, {"an illegal memory access was encountered"});
  // Shared memory ran out: /dev/shm is sized by the pod spec, so a retry fails
  // the same way. torch's DataLoader (torch/utils/data/_utils/signal_handling.py;
  // torch 2.x's "unable to allocate shared memory(shm) for file </torch_...>",
  // 1.13's libshm "unable to write to file </torch_...>"), NCCL's
  // src/misc/shmutils.cc ("Error while creating shared memory segment ...").
  add(config, {"insufficient shared memory (shm)", "out of shared memory",
               "unable to allocate shared memory(shm)", "unable to write to file </torch_",
               "Couldn't allocate shared memory segment", "shared memory segment /dev/shm/",
               "failed to create shared memory file /dev/shm/"},
      MarkerMeaning::kSharedMemory);
  // Collective and network faults: retriable.
  add(infra, {"ncclRemoteError", "ncclSystemError", "NCCL WARN NET/",
              "remote process exited or there was a network error", "Connection reset by peer",
              "Connection refused", "No route to host", "Socket Timeout",
              "Watchdog caught collective operation timeout", "DistNetworkError",
              "DistStoreError"});
  // Deterministic Python errors: the same code fails the same way again.
  add(bug, {"ModuleNotFoundError", "ImportError", "SyntaxError", "IndentationError",
            "NameError: name"});
  // A full /dev/shm named by path; last, as "No space left on device" elsewhere
  // (a full disk) says nothing.
  add(config, {"No space left on device"}, MarkerMeaning::kSharedMemory, "/dev/shm");
  return t;
}

}  // namespace

MarkerTable MarkerTable::Defaults() {
  // Compiled once; each copy shares it (a static: nothing here ever changes it).
  static const MarkerTable defaults = [] {
    MarkerTable t;
    t.c_ = Compile(DefaultMarkers());
    return t;
  }();
  return defaults;
}

Status MarkerTable::Add(const std::vector<std::string>& specs) {
  if (specs.empty()) return Status::Ok();  // the same table: no second Compile at start
  std::vector<Marker> added;
  for (const std::string& s : specs) {
    auto eq = s.find('=');
    if (eq == std::string::npos || eq + 1 == s.size()) {
      return Status::Config("--marker '" + s + "' is not CLASS=TEXT (e.g. hardware=Xid 79)");
    }
    auto cls = ExitCodeTable::ParseClass(s.substr(0, eq));
    if (!cls.ok()) return Status::Config("--marker '" + s + "': " + cls.status().message());
    if (*cls != FailureClass::kBug && *cls != FailureClass::kInfra &&
        *cls != FailureClass::kHardware && *cls != FailureClass::kOom) {
      return Status::Config("--marker '" + s + "': markers can only say bug, infra, hardware "
                            "or oom");
    }
    if (s.size() - eq - 1 > kMaxMarkerText) {
      return Status::Config("--marker '" + s.substr(0, 40) + "...': longer than " +
                            std::to_string(kMaxMarkerText) + " bytes");
    }
    added.push_back({*cls, s.substr(eq + 1)});
  }
  added.insert(added.end(), c_->markers.begin(), c_->markers.end());
  c_ = Compile(std::move(added));
  return Status::Ok();
}

namespace {

// An estimate of how often byte `b` occurs in training logs, per 1000 bytes
// (English text, numbers, Python tracebacks): the anchors are the rare ones.
double Frequency(unsigned char b) {
  auto in = [b](const char* set) { return b != 0 && std::strchr(set, b) != nullptr; };
  if (b == ' ') return 150;
  if (in("etaoinsr")) return 60;
  if (in("hldcum")) return 30;
  if (b >= '0' && b <= '9') return 25;
  if (in("fpgwybv.,:=_-/\n")) return 12;
  if (in("kxqjz")) return 3;
  if (b >= 'A' && b <= 'Z') return in("XQJZKVWY") ? 0.5 : 3;
  if (in("[]()'\"<>")) return 3;
  if (b < 0x20 || b >= 0x7f) return 0.5;
  return 2;
}

}  // namespace

std::shared_ptr<const MarkerTable::Compiled> MarkerTable::Compile(std::vector<Marker> markers) {
  // Weighted set cover, greedily: the byte that anchors the most markers not
  // yet anchored per unit of cost (its frequency, plus one vector compare per
  // distinct anchor in the scanner's loop), until every marker has one; the
  // lowest byte among equal costs. Each round counts the markers left that
  // hold each byte from their lists of distinct bytes, not by searching every
  // text for each of the 256 bytes (0.9 ms at every start: bench/RESULTS.md).
  constexpr double kPerAnchor = 4;
  auto c = std::make_shared<Compiled>();
  c->markers = std::move(markers);
  c->markers.shrink_to_fit();  // kept for the whole run
  const std::vector<Marker>& m = c->markers;
  std::vector<std::vector<Anchor>> by_byte(256);
  // Each marker's distinct bytes; emptied once it has its anchor.
  std::vector<std::vector<unsigned char>> bytes(m.size());
  std::array<double, 256> weight{};  // each byte's cost as an anchor
  for (int b = 0; b < 256; ++b) weight[b] = Frequency(static_cast<unsigned char>(b)) + kPerAnchor;
  std::size_t left = 0;
  for (std::size_t i = 0; i < m.size(); ++i) {
    c->longest = std::max(c->longest, m[i].text.size());
    std::bitset<256> seen;
    for (char ch : m[i].text) {
      const auto b = static_cast<unsigned char>(ch);
      if (!seen[b]) bytes[i].push_back(b);
      seen.set(b);
    }
    if (!bytes[i].empty()) ++left;
  }
  while (left > 0) {
    std::array<std::size_t, 256> gain{};
    for (const auto& held : bytes) {
      for (unsigned char b : held) ++gain[b];
    }
    int best = -1;
    double best_cost = 0;
    for (int b = 0; b < 256; ++b) {
      if (gain[b] == 0) continue;
      const double cost = weight[b] / static_cast<double>(gain[b]);
      if (best < 0 || cost < best_cost) {
        best = b;
        best_cost = cost;
      }
    }
    c->anchor_bytes.push_back(static_cast<unsigned char>(best));
    for (std::size_t i = 0; i < m.size(); ++i) {
      if (bytes[i].empty()) continue;
      const std::size_t at = m[i].text.find(static_cast<char>(best));
      if (at == std::string::npos) continue;
      by_byte[best].push_back({static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(at)});
      bytes[i].clear();
      --left;
    }
  }
  for (int b = 0; b < 256; ++b) {
    c->first[b] = static_cast<std::uint32_t>(c->anchors.size());
    c->anchors.insert(c->anchors.end(), by_byte[b].begin(), by_byte[b].end());
  }
  c->first[256] = static_cast<std::uint32_t>(c->anchors.size());
  return c;
}

std::optional<MarkerHit> MarkerTable::Match(std::string_view text) const {
  MarkerScanner scanner(*this);
  scanner.Feed(text);
  scanner.Finish();
  return scanner.best();
}

bool Stronger(const MarkerHit& a, const MarkerHit& b) {
  if (a.index != b.index) return a.index < b.index;
  return a.failure_class != FailureClass::kWorker && b.failure_class == FailureClass::kWorker;
}

std::optional<std::pair<FailureClass, std::string>> Interpret(const Marker& m,
                                                              std::string_view line) {
  if (!m.context.empty() && line.find(m.context) == std::string_view::npos) return std::nullopt;
  switch (m.meaning) {
    case MarkerMeaning::kPlain:
      return std::pair{m.failure_class, std::string()};
    case MarkerMeaning::kSharedMemory:
      return std::pair{m.failure_class, std::string("shared memory ran out")};
    case MarkerMeaning::kXid:
      break;
  }
  const std::optional<std::uint64_t> xid = ParseXid(line);
  if (!xid) return std::pair{m.failure_class, std::string("an Xid report without its number")};
  const XidInfo info = LookUpXid(*xid);
  const std::string n = "Xid " + std::to_string(*xid);
  // NVIDIA's Xid catalogue: https://docs.nvidia.com/deploy/xid-errors/
  switch (info.cause) {
    case XidCause::kApplication:
      return std::pair{FailureClass::kWorker,
                       n + ", " + std::string(info.meaning) +
                           ": an application fault (NVIDIA Xid catalogue), not the GPU's"};
    case XidCause::kHardware:
      return std::pair{FailureClass::kHardware,
                       n + ", " + std::string(info.meaning) +
                           ": the GPU or its board (NVIDIA Xid catalogue)"};
    case XidCause::kUnknown:
      break;
  }
  return std::pair{FailureClass::kHardware,
                   n + ": not in trainlet's Xid table, taken as a GPU fault"};
}

bool IsResourceErrno(int err) {
  return err == EAGAIN || err == ENOMEM || err == EMFILE || err == ENFILE;
}

Status ErrnoStatus(int err, const std::string& what, FailureClass otherwise) {
  const std::string text = what + ": " + std::strerror(err);
  switch (err) {
    case EAGAIN:
      return Status::Infra(text + " (the pod's process limit is reached: pids.max, the "
                                  "kubelet's podPidsLimit, or RLIMIT_NPROC; a retry can succeed)");
    case EMFILE:
      return Status::Infra(text + " (RLIMIT_NOFILE, the process's open-files limit, is reached)");
    case ENFILE:
      return Status::Infra(text + " (the node's open-files limit, fs.file-max, is reached)");
    case ENOMEM:
      return Status::Infra(text + " (out of memory: the pod's memory limit or the node's)");
    default:
      return Status(otherwise, text);
  }
}

namespace {

Verdict Make(FailureClass c, int code, std::string reason, std::string evidence) {
  return Verdict{c, code, std::move(reason), std::move(evidence)};
}

// The first non-blank line of an error file's message, at most kErrorFileExcerpt
// bytes (cut before a UTF-8 continuation byte, with "..." where it was cut).
std::string Excerpt(const std::string& message) {
  std::size_t begin = message.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  std::size_t end = message.find_first_of("\r\n", begin);
  std::string line = message.substr(begin, end == std::string::npos ? end : end - begin);
  while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.pop_back();
  if (line.size() <= kErrorFileExcerpt) return line;
  return Utf8Head(line, kErrorFileExcerpt) + "...";
}

// "; its stderr says 'TEXT' (NOTE): LINE".
std::string Says(const MarkerHit& h, const MarkerTable& markers) {
  std::string s = "; its " + (h.stream.empty() ? std::string("output") : h.stream) + " says '" +
                  markers.markers()[h.index].text + "'";
  if (!h.note.empty()) s += " (" + h.note + ")";
  if (std::string line = Excerpt(h.line); !line.empty()) s += ": " + line;
  return s;
}

// The verdict a decisive marker gives.
Verdict FromHit(const MarkerHit& h, const MarkerTable& markers, const std::string& who,
                const Evidence& e, const ExitCodeTable& codes, const char* evidence) {
  std::string reason = who + Says(h, markers);
  if (markers.markers()[h.index].meaning == MarkerMeaning::kSharedMemory) {
    // The pod spec sizes /dev/shm (a container's default is 64 MiB): a retry
    // fails the same way, so the Job should not retry (config, FailJob).
    reason += "; /dev/shm" + (e.shm_bytes ? " (" + FormatBytes(*e.shm_bytes) + ")" : std::string()) +
              " is too small: mount an emptyDir with medium: Memory at /dev/shm";
  }
  return Make(h.failure_class, codes.CodeFor(h.failure_class), std::move(reason), evidence);
}

// The verdict on the first worker failure `e.first_failure`.
Verdict ClassifyWorkerFailure(const Evidence& e, const ExitCodeTable& codes,
                              const MarkerTable& markers) {
  const WorkerFailure& f = e.first_failure.value();
  std::string who = "local rank " + std::to_string(f.local_rank) + " (rank " +
                    std::to_string(f.rank) + ") " +
                    (f.exit.signaled ? "died of " + f.exit.Describe()
                                     : "exited with code " + std::to_string(f.exit.exit_status));
  if (e.collateral > 0) {
    who += "; " + std::to_string(e.collateral) + " worker(s) stopped by trainlet afterwards";
  }
  // The kernel's OOM killer sends SIGKILL; a rising counter says it was it
  // (and not, say, the kubelet or a user) — kubernetes/kubernetes#78973. Its
  // victim need not be the worker itself: when it is one of the worker's
  // processes (a DataLoader worker: "DataLoader worker (pid N) is killed by
  // signal: Killed.", pytorch/pytorch#8976), the trainer then exits 1.
  if (e.oom_kills > 0) {
    return Make(FailureClass::kOom, codes.CodeFor(FailureClass::kOom),
                who + (f.exit.signaled && f.exit.signal == SIGKILL
                           ? " and the memory cgroup counted "
                           : " after the memory cgroup counted ") +
                    std::to_string(e.oom_kills) + " OOM kill(s)",
                "oom");
  }
  // NVML saw the GPU fail (ECC, Xid, a recovery action): the crash is the
  // hardware's, however the trainer reported it (microsoft/pai#4314).
  if (e.gpu_fault) {
    return Make(FailureClass::kHardware, codes.CodeFor(FailureClass::kHardware),
                who + "; GPU fault: " + *e.gpu_fault, "gpu-health");
  }
  // The error file, then the output: the strongest marker each holds. One
  // that means the worker's own failure (Xid 31, an illegal memory access)
  // decides nothing, but is said in the reason.
  std::optional<MarkerHit> file_hit;
  if (!f.error_file_message.empty()) {
    file_hit = markers.Match(f.error_file_message);
    if (file_hit) file_hit->stream = "error file";
  }
  if (file_hit && file_hit->failure_class != FailureClass::kWorker) {
    return FromHit(*file_hit, markers, who, e, codes, "error-file");
  }
  if (!file_hit) {
    // No class in it, but what the trainer said it died of belongs in the summary.
    if (std::string line = Excerpt(f.error_file_message); !line.empty()) {
      who += "; its error file says: " + line;
    }
  }
  std::optional<MarkerHit> hit = f.stream_marker;
  if (!hit) {
    hit = markers.Match(f.stderr_tail);
    if (hit) hit->stream = "stderr";
  }
  if (hit && hit->failure_class != FailureClass::kWorker) {
    return FromHit(*hit, markers, who, e, codes, "marker");
  }
  for (const auto* h : {&file_hit, &hit}) {
    if (*h) who += Says(**h, markers);
  }
  if (!f.exit.signaled && codes.IsFatalWorkerCode(f.exit.exit_status)) {
    return Make(FailureClass::kBug, codes.CodeFor(FailureClass::kBug),
                who + " (a --fatal-exit-codes code: software defect)", "exit-code");
  }
  return Make(FailureClass::kWorker, f.exit.code(), who, "exit-code");
}

}  // namespace

Verdict Classify(const Evidence& e, const ExitCodeTable& codes, const MarkerTable& markers) {
  if (e.agent_failure && !e.agent_failure->ok()) {
    FailureClass c = e.agent_failure->failure_class();
    return Make(c, codes.CodeFor(c), e.agent_failure->message(), "phase");
  }
  if (e.peer_failure) {
    return Make(FailureClass::kPeerFailed, codes.CodeFor(FailureClass::kPeerFailed),
                *e.peer_failure, "gang");
  }
  if (e.hang) {
    return Make(FailureClass::kInfra, codes.CodeFor(FailureClass::kInfra), "hang: " + *e.hang,
                "hang");
  }
  if (e.first_failure) return ClassifyWorkerFailure(e, codes, markers);
  if (e.stop_signal) {
    return Make(FailureClass::kTerminated, codes.CodeFor(FailureClass::kTerminated),
                "stopped by " + SignalName(*e.stop_signal) + " (preemption, eviction or deletion)",
                "phase");
  }
  return Make(FailureClass::kOk, 0, "every worker finished", "exit-code");
}

std::string VerdictWarning(const Evidence& e, const Verdict& v) {
  if (v.failure_class != FailureClass::kOk || e.oom_kills == 0) return "";
  return "every worker finished, but the memory cgroup counted " + std::to_string(e.oom_kills) +
         " OOM kill(s) while they ran (a process of theirs was killed for memory)";
}

}  // namespace trainlet::exitcodes
