#include "trainlet/exitcodes/classify.h"

#include <algorithm>
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
                  MarkerMeaning meaning = MarkerMeaning::kPlain, const char* context = "",
                  MarkerScope scope = MarkerScope::kOwnText) {
    for (const char* s : texts) t.push_back({c, s, meaning, context, scope});
  };
  // What trainlet::Session::ReportError writes (session/include/trainlet/session.h):
  // the trainer said which class its failure is.
  add(hw, {"[trainlet:hardware]"}, MarkerMeaning::kStatement);
  add(infra, {"[trainlet:infra]"}, MarkerMeaning::kStatement);
  add(bug, {"[trainlet:bug]"}, MarkerMeaning::kStatement);
  add(FailureClass::kOom, {"[trainlet:oom]"}, MarkerMeaning::kStatement);
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
  // 1.13's libshm "unable to write to file </torch_...>"; the main process's
  // "DataLoader worker (pid N) is killed by signal: Bus error. It is possible
  // that dataloader's workers are out of shared memory", torch/utils/data/
  // dataloader.py), NCCL's src/misc/shmutils.cc ("Error while creating shared
  // memory segment ...").
  add(config, {"insufficient shared memory (shm)", "out of shared memory",
               "unable to allocate shared memory(shm)", "unable to write to file </torch_",
               "Couldn't allocate shared memory segment", "shared memory segment /dev/shm/",
               "failed to create shared memory file /dev/shm/"},
      MarkerMeaning::kSharedMemory);
  // Collective faults whose cause lasts until the worker fails (a collective
  // that timed out is not retried; a communicator with a remote or system
  // error is aborted): they decide from anywhere in the stream.
  add(infra, {"Watchdog caught collective operation timeout", "ncclRemoteError", "ncclSystemError",
              "NCCL WARN NET/", "remote process exited or there was a network error"},
      MarkerMeaning::kPlain, "", MarkerScope::kAnywhere);
  // Network faults: retriable, but printed by retries that then succeed
  // (rendezvous, stores), so only in the failure's own text.
  add(infra, {"Connection reset by peer", "Connection refused", "No route to host",
              "Socket Timeout", "DistNetworkError", "DistStoreError",
              "Connection closed by remote peer"});
  // Deterministic Python errors: the same code fails the same way again, if
  // they ended the worker (WorkerFailureRules).
  // Transformers' (and trl's, diffusers') lazy modules re-raise an import
  // that failed as "RuntimeError: Failed to import X because of the following
  // error (look up to see its traceback)" (transformers/utils/import_utils.py).
  add(bug, {"ModuleNotFoundError", "ImportError", "SyntaxError", "IndentationError",
            "NameError: name", "because of the following error (look up to see its traceback)"});
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
    // An infra entry names a cause the user knows to be specific: anywhere.
    added.push_back({*cls, s.substr(eq + 1), MarkerMeaning::kPlain, "",
                     *cls == FailureClass::kInfra ? MarkerScope::kAnywhere
                                                  : MarkerScope::kOwnText});
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

std::vector<MarkerHit> MarkerTable::MatchEach(std::string_view text) const {
  std::vector<MarkerHit> hits;
  const std::vector<Marker>& m = markers();
  for (std::size_t i = 0; i < m.size(); ++i) {
    for (std::size_t at = text.find(m[i].text); at != std::string_view::npos;
         at = text.find(m[i].text, at + 1)) {
      const std::size_t begin = text.rfind('\n', at) == std::string_view::npos
                                    ? 0 : text.rfind('\n', at) + 1;
      const std::size_t end = std::min(text.find('\n', at), text.size());
      std::string_view line = text.substr(begin, end - begin);
      if (line.size() > kEvidenceLine) line = line.substr(0, kEvidenceLine);
      auto meaning = Interpret(m[i], line);
      if (!meaning) continue;
      MarkerHit hit{i, meaning->first, std::move(meaning->second), std::string(line), "", begin};
      const bool first = hits.empty() || hits.back().index != i;
      if (first || Stronger(hit, hits.back())) {
        if (!first) hits.pop_back();
        hits.push_back(std::move(hit));
      }
      // An Xid that is the program's goes on looking for one that is the GPU's.
      if (hits.back().failure_class != FailureClass::kWorker) break;
    }
  }
  return hits;
}

bool ScannedInWholeStream(const Marker& m) {
  return m.scope == MarkerScope::kAnywhere || m.meaning == MarkerMeaning::kSharedMemory;
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
    case MarkerMeaning::kStatement:
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

// "15.3 KiB before the end of its stderr, 2.5 s before it ended": where a
// whole-stream hit was.
std::string Where(const MarkerHit& h) {
  char buf[96];
  const double kib = static_cast<double>(h.bytes_after) / 1024;
  std::string s = h.bytes_after < 1024 ? std::to_string(h.bytes_after) + " bytes"
                                       : (std::snprintf(buf, sizeof buf, "%.1f KiB", kib), buf);
  s += " before the end of its " + (h.stream.empty() ? std::string("output") : h.stream);
  if (h.age_ms >= 0) {
    std::snprintf(buf, sizeof buf, ", %.1f s before it ended", static_cast<double>(h.age_ms) / 1000);
    s += buf;
  }
  return s;
}

// What the rules read: the evidence, and what was found in it.
struct Facts {
  const Evidence& e;
  const WorkerFailure& f;
  const ExitCodeTable& codes;
  const MarkerTable& markers;
  std::string who;                  // "local rank 1 (rank 3) exited with code 1"
  std::vector<MarkerHit> file;      // markers in the error file's message
  // Markers in the failure's own text: its last exception, when it is the
  // failure's (stream "last exception"), and the end of its stderr ("stderr").
  std::vector<MarkerHit> own;
  std::optional<MarkerHit> stream;  // the whole-stream scan's strongest
  std::string exception;            // the failure's exception's first line, or ""

  // The first hit of `hits` that `pred` accepts.
  template <typename Pred>
  static const MarkerHit* First(const std::vector<MarkerHit>& hits, Pred pred) {
    for (const MarkerHit& h : hits) {
      if (pred(h)) return &h;
    }
    return nullptr;
  }
  const Marker& marker(const MarkerHit& h) const { return markers.markers()[h.index]; }
  bool ShmFull() const {
    return e.shm_free_bytes && e.shm_bytes && *e.shm_bytes > 0 &&
           *e.shm_free_bytes * 100 <= *e.shm_bytes * kShmFullPercent;
  }
  // The verdict a decisive marker gives.
  Verdict FromHit(const MarkerHit& h, const char* evidence, bool where = false) const {
    std::string reason = who + Says(h, markers);
    if (where) reason += " (" + Where(h) + ")";
    if (marker(h).meaning == MarkerMeaning::kSharedMemory) reason += ShmAdvice();
    return Make(h.failure_class, codes.CodeFor(h.failure_class), std::move(reason), evidence);
  }
  // The pod spec sizes /dev/shm (a container's default is 64 MiB): a retry
  // fails the same way, so the Job should not retry (config, FailJob).
  std::string ShmAdvice() const {
    return "; /dev/shm" + (e.shm_bytes ? " (" + FormatBytes(*e.shm_bytes) + ")" : std::string()) +
           " is too small: mount an emptyDir with medium: Memory at /dev/shm";
  }
};

// What of an error file's message may decide: the message, and of the
// py_callstack torch's @record appends to it (traceback.format_exc(), chained
// exceptions included), only the exception that ended the worker.
std::string ErrorFileOwnText(const std::string& message) {
  const std::size_t tb = message.find("\nTraceback (most recent call last):");
  if (tb == std::string::npos) return message;
  ExceptionKeeper keeper;
  keeper.Feed(std::string_view(message).substr(tb + 1));
  keeper.Finish();
  return message.substr(0, tb) + (keeper.last() ? "\n" + keeper.last()->text : "");
}

bool Fresh(const LastException& x) {
  return x.age_ms <= kOwnExceptionAgeMs && x.bytes_after <= kOwnExceptionTrail;
}

// The last kOwnStderrLines lines of `tail`, at most kOwnStderrEnd bytes (from
// a line's start when cut).
std::string_view StderrEnd(std::string_view tail) {
  std::size_t begin = tail.size();
  if (begin > 0 && tail[begin - 1] == '\n') --begin;  // the last line's own end
  for (std::size_t lines = 0; lines < kOwnStderrLines && begin > 0; ++lines) {
    const std::size_t nl = tail.rfind('\n', begin - 1);
    begin = nl == std::string_view::npos ? 0 : nl;  // at the '\n' before the line
  }
  std::string_view end = tail.substr(begin);
  if (end.starts_with('\n')) end.remove_prefix(1);
  if (end.size() <= kOwnStderrEnd) return end;
  end.remove_prefix(end.size() - kOwnStderrEnd);
  const std::size_t nl = end.find('\n');
  return nl == std::string_view::npos ? end : end.substr(nl + 1);
}

Facts Gather(const Evidence& e, const ExitCodeTable& codes, const MarkerTable& markers) {
  const WorkerFailure& f = e.first_failure.value();
  Facts x{e, f, codes, markers, {}, {}, {}, {}, {}};
  x.who = "local rank " + std::to_string(f.local_rank) + " (rank " + std::to_string(f.rank) +
          ") " +
          (f.exit.signaled ? "died of " + f.exit.Describe()
                           : "exited with code " + std::to_string(f.exit.exit_status));
  if (e.collateral > 0) {
    x.who += "; " + std::to_string(e.collateral) + " worker(s) stopped by trainlet afterwards";
  }
  if (!f.error_file_message.empty()) {
    x.file = markers.MatchEach(ErrorFileOwnText(f.error_file_message));
    for (MarkerHit& h : x.file) h.stream = "error file";
  }
  std::optional<LastException> last = f.last_exception;
  if (!last) {
    // Not kept as it was read: the stderr tail's, if it holds one.
    ExceptionKeeper keeper;
    keeper.Feed(f.stderr_tail);
    keeper.Finish();
    last = keeper.last();
    if (last) last->bytes_after = keeper.fed() - last->end_offset;
  }
  const bool fresh = last && Fresh(*last);
  if (fresh) {
    x.exception = std::string(last->first_line());
    x.own = markers.MatchEach(last->text);
    for (MarkerHit& h : x.own) h.stream = "last exception";
  }
  // Without such an exception, the end of stderr is the failure's own text;
  // with one, only the trainer's own [trainlet:CLASS] statement there.
  for (MarkerHit& h : markers.MatchEach(StderrEnd(f.stderr_tail))) {
    if (fresh && markers.markers()[h.index].meaning != MarkerMeaning::kStatement) continue;
    if (Facts::First(x.own, [&](const MarkerHit& o) { return o.index == h.index; })) continue;
    h.stream = "stderr";
    x.own.push_back(std::move(h));
  }
  std::stable_sort(x.own.begin(), x.own.end(),
                   [](const MarkerHit& a, const MarkerHit& b) { return Stronger(a, b); });
  x.stream = f.stream_marker;
  if (!x.stream) {
    // Not scanned: the stderr tail, for the markers a whole-stream scan looks for.
    MarkerScanner scanner(markers, MarkerScanner::Search::kBest,
                          MarkerScanner::Which::kWholeStream);
    scanner.Feed(f.stderr_tail);
    scanner.Finish();
    x.stream = scanner.best();
    if (x.stream) {
      x.stream->stream = "stderr";
      x.stream->bytes_after = f.stderr_tail.size() - x.stream->offset;
    }
  }
  return x;
}

using RuleFn = std::optional<Verdict> (*)(const Facts&);
struct Rule {
  WorkerFailureRule rule;
  RuleFn decide;
};

// The kernel's OOM killer sends SIGKILL; a rising counter says it was it
// (and not, say, the kubelet or a user) — kubernetes/kubernetes#78973. Its
// victim need not be the worker itself: when it is one of the worker's
// processes (a DataLoader worker: "DataLoader worker (pid N) is killed by
// signal: Killed.", pytorch/pytorch#8976), the trainer then exits 1.
std::optional<Verdict> OomCounter(const Facts& x) {
  if (x.e.oom_kills == 0) return std::nullopt;
  return Make(FailureClass::kOom, x.codes.CodeFor(FailureClass::kOom),
              x.who + (x.f.exit.signaled && x.f.exit.signal == SIGKILL
                           ? " and the memory cgroup counted "
                           : " after the memory cgroup counted ") +
                  std::to_string(x.e.oom_kills) + " OOM kill(s)",
              "oom");
}

// NVML saw the GPU fail (ECC, Xid, a recovery action): the crash is the
// hardware's, however the trainer reported it (microsoft/pai#4314).
std::optional<Verdict> Nvml(const Facts& x) {
  if (!x.e.gpu_fault) return std::nullopt;
  return Make(FailureClass::kHardware, x.codes.CodeFor(FailureClass::kHardware),
              x.who + "; GPU fault: " + *x.e.gpu_fault, "gpu-health");
}

std::optional<Verdict> FatalCode(const Facts& x) {
  if (x.f.exit.signaled || !x.codes.IsFatalWorkerCode(x.f.exit.exit_status)) return std::nullopt;
  return Make(FailureClass::kBug, x.codes.CodeFor(FailureClass::kBug),
              x.who + " (a --fatal-exit-codes code: software defect)", "exit-code");
}

std::optional<Verdict> OwnHardware(const Facts& x) {
  const MarkerHit* h = Facts::First(
      x.own, [](const MarkerHit& h) { return h.failure_class == FailureClass::kHardware; });
  if (h == nullptr) return std::nullopt;
  return x.FromHit(*h, "marker");
}

std::optional<Verdict> FileMarker(const Facts& x) {
  const MarkerHit* h = Facts::First(
      x.file, [](const MarkerHit& h) { return h.failure_class != FailureClass::kWorker; });
  if (h == nullptr) return std::nullopt;
  return x.FromHit(*h, "error-file");
}

std::optional<Verdict> FileException(const Facts& x) {
  const std::string line = Excerpt(x.f.error_file_message);
  if (line.empty()) return std::nullopt;
  std::string reason = x.who + "; its error file says: " + line;
  for (const MarkerHit& h : x.file) reason += Says(h, x.markers);
  return Make(FailureClass::kWorker, x.f.exit.code(), std::move(reason), "error-file");
}

// A process that touches a page of a file /dev/shm has no room for gets
// SIGBUS (tmpfs, mmap(2)): how a DataLoader or NCCL dies of a full /dev/shm.
std::optional<Verdict> SigbusShmFull(const Facts& x) {
  if (!x.f.exit.signaled || x.f.exit.signal != SIGBUS || !x.ShmFull()) return std::nullopt;
  return Make(FailureClass::kConfig, x.codes.CodeFor(FailureClass::kConfig),
              x.who + " while /dev/shm was full (" + FormatBytes(*x.e.shm_free_bytes) + " free)" +
                  x.ShmAdvice(),
              "shm");
}

std::optional<Verdict> SharedMemory(const Facts& x) {
  auto shm = [&x](const MarkerHit& h) {
    return x.marker(h).meaning == MarkerMeaning::kSharedMemory &&
           h.failure_class != FailureClass::kWorker;
  };
  if (const MarkerHit* h = Facts::First(x.own, shm)) return x.FromHit(*h, "marker");
  if (x.stream && shm(*x.stream) && x.ShmFull()) {
    Verdict v = x.FromHit(*x.stream, "marker", /*where=*/true);
    v.reason += " (" + FormatBytes(*x.e.shm_free_bytes) + " free at the failure)";
    return v;
  }
  return std::nullopt;
}

std::optional<Verdict> ExceptionBug(const Facts& x) {
  const MarkerHit* h = Facts::First(x.own, [](const MarkerHit& h) {
    return h.failure_class == FailureClass::kBug && h.stream == "last exception";
  });
  if (h == nullptr) return std::nullopt;
  return x.FromHit(*h, "marker");
}

std::optional<Verdict> OwnOther(const Facts& x) {
  const MarkerHit* h = Facts::First(x.own, [&x](const MarkerHit& h) {
    return h.failure_class != FailureClass::kWorker &&
           (h.failure_class != FailureClass::kBug ||
            x.marker(h).meaning == MarkerMeaning::kStatement);
  });
  if (h == nullptr) return std::nullopt;
  return x.FromHit(*h, "marker");
}

std::optional<Verdict> Persistent(const Facts& x) {
  if (!x.stream || x.marker(*x.stream).scope != MarkerScope::kAnywhere ||
      x.stream->failure_class == FailureClass::kWorker) {
    return std::nullopt;
  }
  return x.FromHit(*x.stream, "marker", /*where=*/true);
}

// Nothing decided: the worker's own code passes through (Count); what its
// exception said, and markers that decide nothing (an illegal memory access,
// Xid 31, a bug marker outside the exception that ended it), are said.
std::optional<Verdict> PassThrough(const Facts& x) {
  std::string reason = x.who;
  if (!x.exception.empty()) reason += "; its last exception: " + Excerpt(x.exception);
  for (const MarkerHit& h : x.own) reason += Says(h, x.markers);
  if (x.stream) reason += Says(*x.stream, x.markers) + " (" + Where(*x.stream) + ")";
  return Make(FailureClass::kWorker, x.f.exit.code(), std::move(reason), "exit-code");
}

const std::vector<Rule>& Rules() {
  static const std::vector<Rule> rules = {
      {{1, "the memory cgroup counted an OOM kill before the failure: oom"}, OomCounter},
      {{2, "NVML saw the GPU fail (uncorrected ECC, an Xid, a recovery action): hardware"}, Nvml},
      {{3, "a hardware marker (ECC, fallen off the bus, an Xid the catalogue puts on the GPU) "
           "in the failure's own text (its last exception, the end of its stderr): hardware"},
       OwnHardware},
      {{4, "the worker exited with a --fatal-exit-codes code: bug"}, FatalCode},
      {{5, "a marker in the worker's error file (TORCHELASTIC_ERROR_FILE): its class"},
       FileMarker},
      {{6, "an error file naming an exception, no marker in it: the worker's own code passes "
           "through; nothing in its output decides"},
       FileException},
      {{7, "killed by SIGBUS while /dev/shm is full (at most 5 % free): config"}, SigbusShmFull},
      {{8, "shared memory running out in the failure's own text, or anywhere in the output "
           "while /dev/shm is full: config"},
       SharedMemory},
      {{9, "a bug marker (ModuleNotFoundError, ImportError, SyntaxError, ...) in the exception "
           "that ended the worker: bug"},
       ExceptionBug},
      {{10, "another marker in the failure's own text (network faults, the trainer's own "
            "[trainlet:CLASS]): its class"},
       OwnOther},
      {{11, "a marker whose cause persists (an NCCL watchdog timeout, ncclRemoteError, "
            "ncclSystemError, NCCL WARN NET/) anywhere in the output: infra, saying where"},
       Persistent},
      {{12, "otherwise the worker's own exit code (or 128+signal) passes through"}, PassThrough},
  };
  return rules;
}

// The verdict on the first worker failure `e.first_failure`.
Verdict ClassifyWorkerFailure(const Evidence& e, const ExitCodeTable& codes,
                              const MarkerTable& markers) {
  const Facts x = Gather(e, codes, markers);
  for (const Rule& r : Rules()) {
    if (std::optional<Verdict> v = r.decide(x)) {
      v->rule = r.rule.number;
      return *std::move(v);
    }
  }
  return {};  // not reached: the last rule always decides
}

}  // namespace

const std::vector<WorkerFailureRule>& WorkerFailureRules() {
  static const std::vector<WorkerFailureRule> rules = [] {
    std::vector<WorkerFailureRule> out;
    for (const Rule& r : Rules()) out.push_back(r.rule);
    return out;
  }();
  return rules;
}

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
