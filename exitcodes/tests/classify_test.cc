#include "trainlet/exitcodes/classify.h"

#include <gtest/gtest.h>

#include <csignal>

namespace trainlet::exitcodes {
namespace {

WorkerExit Exited(int code) { return WorkerExit{.signaled = false, .exit_status = code}; }
WorkerExit Killed(int sig) { return WorkerExit{.signaled = true, .signal = sig}; }

WorkerFailure Failure(WorkerExit exit, std::string tail = "", std::string error_file = "") {
  return WorkerFailure{.local_rank = 1, .rank = 3, .exit = exit,
                       .error_file_message = std::move(error_file),
                       .stderr_tail = std::move(tail)};
}

TEST(ClassifyTest, EvidenceTable) {
  struct Row {
    const char* name;
    Evidence evidence;
    FailureClass want;
    int code;
    const char* decided_by;
  };
  const std::vector<Row> rows = {
      {"all finished", {}, FailureClass::kOk, 0, "exit-code"},
      {"config phase", {.agent_failure = Status::Config("bad index")}, FailureClass::kConfig, 78,
       "phase"},
      {"rendezvous timeout", {.agent_failure = Status::Infra("leader unreachable")},
       FailureClass::kInfra, 75, "phase"},
      {"worker 42 is a bug", {.first_failure = Failure(Exited(42))}, FailureClass::kBug, 42,
       "exit-code"},
      {"worker 3 passes through", {.first_failure = Failure(Exited(3))}, FailureClass::kWorker, 3,
       "exit-code"},
      {"SIGSEGV is 139 (pytorch/pytorch#160908)", {.first_failure = Failure(Killed(SIGSEGV))}, FailureClass::kWorker,
       139, "exit-code"},
      {"SIGKILL + oom counter is OOM (kubernetes/kubernetes#78973)",
       {.first_failure = Failure(Killed(SIGKILL)), .oom_kills = 1}, FailureClass::kOom, 77, "oom"},
      {"SIGKILL without oom counter is not OOM", {.first_failure = Failure(Killed(SIGKILL))},
       FailureClass::kWorker, 137, "exit-code"},
      {"exit 1 after an OOM kill of one of its processes is OOM (DataLoader worker)",
       {.first_failure = Failure(Exited(1), "RuntimeError: DataLoader worker (pid 4242) is "
                                            "killed by signal: Killed.\n"),
        .oom_kills = 1},
       FailureClass::kOom, 77, "oom"},
      {"exit 1 with that message but no OOM kill counted is the worker's own",
       {.first_failure = Failure(Exited(1), "RuntimeError: DataLoader worker (pid 4242) is "
                                            "killed by signal: Killed.\n")},
       FailureClass::kWorker, 1, "exit-code"},
      {"a fatal exit code after an OOM kill is OOM", {.first_failure = Failure(Exited(42)),
                                                      .oom_kills = 3},
       FailureClass::kOom, 77, "oom"},
      {"ECC in stderr beats exit 42 (microsoft/pai#4314)",
       {.first_failure = Failure(Exited(42), "RuntimeError: CUDA error: uncorrectable ECC error "
                                             "encountered\n")},
       FailureClass::kHardware, 74, "marker"},
      {"fell off the bus on a signal death",
       {.first_failure = Failure(Killed(SIGABRT), "GPU has fallen off the bus")},
       FailureClass::kHardware, 74, "marker"},
      {"NCCL remote error is infra",
       {.first_failure = Failure(Exited(1), "ncclRemoteError: remote process exited or there was "
                                            "a network error")},
       FailureClass::kInfra, 75, "marker"},
      {"ModuleNotFoundError that ended the worker is a bug",
       {.first_failure = Failure(Exited(1), "Traceback (most recent call last):\n  File \"t.py\", "
                                            "line 1, in <module>\nModuleNotFoundError: No "
                                            "module named 'x'\n")},
       FailureClass::kBug, 42, "marker"},
      {"error file beats stderr",
       {.first_failure = Failure(Exited(1), "ImportError: y", "CUDA_ERROR_ECC_UNCORRECTABLE")},
       FailureClass::kHardware, 74, "error-file"},
      {"an error file without a marker still decides: its exception, not stderr's",
       {.first_failure = Failure(Exited(1), "SyntaxError: bad", "ValueError: x")},
       FailureClass::kWorker, 1, "error-file"},
      {"SIGTERM before any failure (Kubernetes docs, Pod disruption conditions)", {.stop_signal = SIGTERM}, FailureClass::kTerminated,
       143, "phase"},
      {"SIGINT is terminated too", {.stop_signal = SIGINT}, FailureClass::kTerminated, 143,
       "phase"},
      {"failure first, stop later: the failure decides",
       {.first_failure = Failure(Exited(42)), .stop_signal = SIGTERM}, FailureClass::kBug, 42,
       "exit-code"},
      {"a peer failed first: peer_failed, even with NCCL errors here (NVIDIA/nccl#795)",
       {.first_failure = Failure(Exited(1), "ncclRemoteError"),
        .peer_failure = "pod 1 failed first"},
       FailureClass::kPeerFailed, 76, "gang"},
      {"stopped because a peer failed", {.peer_failure = "pod 3 failed first"},
       FailureClass::kPeerFailed, 76, "gang"},
      {"hang detected by trainlet is infra (pytorch/pytorch#97191)",
       {.first_failure = Failure(Killed(SIGTERM)), .hang = "local rank 0 silent for 5 s"},
       FailureClass::kInfra, 75, "hang"},
      {"NVML GPU fault beats a segfault and exit 42 (microsoft/pai#4314)",
       {.first_failure = Failure(Killed(SIGSEGV), "ImportError"),
        .gpu_fault = "GPU 1 (GPU-x): 3 uncorrected ECC errors"},
       FailureClass::kHardware, 74, "gpu-health"},
      {"NVML GPU fault beats the error file",
       {.first_failure = Failure(Exited(42), "", "ValueError"), .gpu_fault = "GPU 0: Xid 79"},
       FailureClass::kHardware, 74, "gpu-health"},
      {"a peer failing first beats a GPU fault here",
       {.first_failure = Failure(Exited(1)), .peer_failure = "pod 1 failed first",
        .gpu_fault = "GPU 0: Xid 79"},
       FailureClass::kPeerFailed, 76, "gang"},
      {"GPU fault without a worker failure decides nothing",
       {.gpu_fault = "GPU 0: Xid 79"}, FailureClass::kOk, 0, "exit-code"},
      {"oom beats markers",
       {.first_failure = Failure(Killed(SIGKILL), "ImportError"), .oom_kills = 2},
       FailureClass::kOom, 77, "oom"},
  };
  const ExitCodeTable codes;
  const MarkerTable markers = MarkerTable::Defaults();
  for (const Row& r : rows) {
    Verdict v = Classify(r.evidence, codes, markers);
    EXPECT_EQ(v.failure_class, r.want) << r.name << ": " << v.reason;
    EXPECT_EQ(v.code, r.code) << r.name;
    EXPECT_EQ(v.evidence, r.decided_by) << r.name;
    EXPECT_FALSE(v.reason.empty()) << r.name;
  }
}

TEST(ClassifyTest, OomKillsInASuccessfulRunAreAWarningNotAFailure) {
  const Evidence oom{.oom_kills = 2};
  Verdict v = Classify(oom, ExitCodeTable(), MarkerTable::Defaults());
  EXPECT_EQ(v.failure_class, FailureClass::kOk);
  EXPECT_EQ(v.code, 0);
  std::string w = VerdictWarning(oom, v);
  EXPECT_NE(w.find("counted 2 OOM kill(s)"), std::string::npos) << w;
  EXPECT_EQ(VerdictWarning({}, Classify({}, ExitCodeTable(), MarkerTable::Defaults())), "");
  const Evidence failure{.first_failure = Failure(Exited(1)), .oom_kills = 1};
  Verdict failed = Classify(failure, ExitCodeTable(), MarkerTable::Defaults());
  EXPECT_NE(failed.reason.find("exited with code 1 after the memory cgroup counted 1 OOM kill"),
            std::string::npos)
      << failed.reason;
  EXPECT_EQ(VerdictWarning(failure, failed), "") << "the failure's class says it already";
}

TEST(ClassifyTest, ReasonNamesTheFirstFailureAndCollateral) {
  Evidence e{.first_failure = Failure(Killed(SIGSEGV)), .collateral = 3};
  Verdict v = Classify(e, ExitCodeTable(), MarkerTable::Defaults());
  EXPECT_NE(v.reason.find("local rank 1 (rank 3) died of signal SIGSEGV (11)"), std::string::npos)
      << v.reason;
  EXPECT_NE(v.reason.find("3 worker(s) stopped by trainlet"), std::string::npos) << v.reason;
}

// torch's @record writes {"message": {"message": "RuntimeError: boom", "extraInfo":
// {"py_callstack": ...}}}: with no marker in it, its first line is still the reason's.
TEST(ClassifyTest, ErrorFileWithoutAMarkerIsQuotedInTheReason) {
  Evidence e{.first_failure = Failure(Exited(1), "", "RuntimeError: boom\nTraceback (most...")};
  Verdict v = Classify(e, ExitCodeTable(), MarkerTable::Defaults());
  EXPECT_EQ(v.failure_class, FailureClass::kWorker);
  EXPECT_EQ(v.code, 1);
  EXPECT_EQ(v.evidence, "error-file");
  EXPECT_EQ(v.reason, "local rank 1 (rank 3) exited with code 1; its error file says: "
                      "RuntimeError: boom");
  // The error file's exception decides: a marker in stderr does not.
  e.first_failure = Failure(Exited(1), "Connection reset by peer", "\n  OSError: x  \n");
  v = Classify(e, ExitCodeTable(), MarkerTable::Defaults());
  EXPECT_EQ(v.failure_class, FailureClass::kWorker);
  EXPECT_NE(v.reason.find("its error file says: OSError: x"), std::string::npos) << v.reason;
  // Bounded, and never cut inside a UTF-8 character.
  const std::string long_line = std::string("E").append(kErrorFileExcerpt, 'x') + "\n";
  e.first_failure = Failure(Exited(1), "", long_line);
  v = Classify(e, ExitCodeTable(), MarkerTable::Defaults());
  EXPECT_NE(v.reason.find(std::string("E").append(kErrorFileExcerpt - 1, 'x') + "..."),
            std::string::npos);
  EXPECT_EQ(v.reason.find(std::string(kErrorFileExcerpt, 'x')), std::string::npos);
  e.first_failure = Failure(Exited(1), "", std::string(kErrorFileExcerpt - 1, 'y') + "\u00e9z");
  v = Classify(e, ExitCodeTable(), MarkerTable::Defaults());
  EXPECT_NE(v.reason.find(std::string(kErrorFileExcerpt - 1, 'y') + "..."), std::string::npos)
      << v.reason;
  // A blank message adds nothing.
  e.first_failure = Failure(Exited(1), "", " \n\t");
  EXPECT_EQ(Classify(e, ExitCodeTable(), MarkerTable::Defaults()).reason,
            "local rank 1 (rank 3) exited with code 1");
}

TEST(ClassifyTest, ConfiguredCodesAndMarkers) {
  auto codes = ExitCodeTable::FromFlags({"bug=40", "INFRA=70"}, "40,41");
  ASSERT_TRUE(codes.ok()) << codes.status().ToString();
  MarkerTable markers = MarkerTable::Defaults();
  ASSERT_TRUE(markers.Add({"hardware=Xid 79", "bug=AssertionError"}).ok());
  auto v = Classify({.first_failure = Failure(Exited(41))}, *codes, markers);
  EXPECT_EQ(v.failure_class, FailureClass::kBug);
  EXPECT_EQ(v.code, 40);
  v = Classify({.first_failure = Failure(Exited(42))}, *codes, markers);
  EXPECT_EQ(v.failure_class, FailureClass::kWorker) << "42 is no longer fatal";
  EXPECT_EQ(v.code, 42);
  v = Classify({.first_failure = Failure(Exited(1), "Traceback (most recent call last):\n  File "
                                                   "\"t.py\", line 1, in <module>\n"
                                                   "AssertionError: loss is nan\n")},
               *codes, markers);
  EXPECT_EQ(v.code, 40);
  v = Classify({.agent_failure = Status::Infra("dns")}, *codes, markers);
  EXPECT_EQ(v.code, 70);
}

TEST(ExitCodeTableTest, RefusesCollisionsAndNonsense) {
  struct Row {
    std::vector<std::string> overrides;
    std::string fatal;
    const char* error;
  };
  const std::vector<Row> rows = {
      {{"bug=78"}, "", "'bug' and 'config' would both exit 78"},
      {{"infra=76"}, "", "would both exit 76"},
      {{"nonsense=3"}, "", "unknown failure class 'nonsense'"},
      {{"ok=3"}, "", "not configurable"},
      {{"bug"}, "", "not CLASS=CODE"},
      {{"bug=0"}, "", "not an exit code in 1..255"},
      {{"bug=256"}, "", "not an exit code in 1..255"},
      {{}, "42,x", "'x' is not an exit code"},
  };
  for (const Row& r : rows) {
    auto t = ExitCodeTable::FromFlags(r.overrides, r.fatal);
    ASSERT_FALSE(t.ok()) << r.error;
    EXPECT_EQ(t.status().failure_class(), FailureClass::kConfig);
    EXPECT_NE(t.status().message().find(r.error), std::string::npos) << t.status().message();
  }
  auto swapped = ExitCodeTable::FromFlags({"bug=78", "config=42"}, "");
  ASSERT_TRUE(swapped.ok()) << "a swap is not a collision";
  EXPECT_EQ(swapped->CodeFor(FailureClass::kConfig), 42);
}

TEST(MarkerTableTest, RefusesBadSpecs) {
  MarkerTable m;
  EXPECT_FALSE(m.Add({"hardware"}).ok());
  EXPECT_FALSE(m.Add({"hardware="}).ok());
  EXPECT_FALSE(m.Add({"terminated=x"}).ok());
  EXPECT_FALSE(m.Add({"gpu=x"}).ok());
  EXPECT_TRUE(m.Add({"infra=EFA"}).ok());
  ASSERT_TRUE(m.Match("libfabric EFA link down").has_value());
}

TEST(ClassifyTest, GpuEvidenceByWhatItMeans) {
  struct Row {
    const char* name;
    std::string text;
    WorkerExit exit;
    FailureClass want;
    int code;
    const char* in_reason;
  };
  const std::vector<Row> rows = {
      {"Xid 31 is the application's: the worker's code passes through",
       "NVRM: Xid (PCI:0000:3b:00): 31, pid=9, name=python, MMU Fault\n", Exited(1),
       FailureClass::kWorker, 1, "Xid 31, GPU memory page fault: an application fault"},
      {"Xid 13 on a signal death", "Xid 13 graphics engine exception\n", Killed(SIGABRT),
       FailureClass::kWorker, 134, "Xid 13"},
      {"Xid 43", "NVRM: Xid (PCI:0000:3b:00): 43, pid=9\n", Exited(3), FailureClass::kWorker, 3,
       "Xid 43"},
      {"Xid 79 is hardware", "NVRM: Xid (PCI:0000:3b:00): 79, pid=9, GPU has fallen off\n",
       Exited(1), FailureClass::kHardware, 74, "Xid 79"},
      {"Xid 48 is hardware", "Xid 48: DBE\n", Exited(1), FailureClass::kHardware, 74, "Xid 48"},
      {"Xid 94 is hardware", "Xid 94\n", Exited(1), FailureClass::kHardware, 74, "Xid 94"},
      {"an unknown Xid stays hardware", "Xid 1234\n", Exited(1), FailureClass::kHardware, 74,
       "not in trainlet's Xid table"},
      {"an illegal memory access alone is the worker's",
       "RuntimeError: CUDA error: an illegal memory access was encountered\n", Exited(1),
       FailureClass::kWorker, 1, "illegal memory access"},
      {"an illegal memory access after Xid 79 is hardware",
       "Xid 79\nRuntimeError: CUDA error: an illegal memory access was encountered\n",
       Exited(1), FailureClass::kHardware, 74, "Xid 79"},
      {"an illegal memory access and exit 42 is still a bug",
       "CUDA error: an illegal memory access was encountered\n", Exited(42), FailureClass::kBug,
       42, "--fatal-exit-codes"},
      {"ECC uncorrectable stays hardware", "CUDA error: uncorrectable ECC error encountered\n",
       Exited(1), FailureClass::kHardware, 74, "uncorrectable ECC error"},
  };
  for (const Row& r : rows) {
    Verdict v = Classify({.first_failure = Failure(r.exit, r.text)}, ExitCodeTable(),
                         MarkerTable::Defaults());
    EXPECT_EQ(v.failure_class, r.want) << r.name << ": " << v.reason;
    EXPECT_EQ(v.code, r.code) << r.name;
    EXPECT_NE(v.reason.find(r.in_reason), std::string::npos) << r.name << ": " << v.reason;
  }
  // With NVML's evidence an illegal memory access is the GPU's.
  Verdict v = Classify({.first_failure = Failure(Exited(1), "an illegal memory access was "
                                                            "encountered"),
                        .gpu_fault = "GPU 0: 2 uncorrected ECC errors"},
                       ExitCodeTable(), MarkerTable::Defaults());
  EXPECT_EQ(v.failure_class, FailureClass::kHardware);
}

TEST(ClassifyTest, SharedMemoryRunningOutIsConfigNamingDevShmAndTheFix) {
  const std::vector<std::string> texts = {
      "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
      "shared memory (shm).\n",
      "RuntimeError: DataLoader worker (pid 77) is killed by signal: Bus error. It is possible "
      "that dataloader's workers are out of shared memory. Please try to raise your shared "
      "memory limit.\n",
      "RuntimeError: unable to write to file </torch_77_1234_0>: No space left on device (28)\n",
      // torch 2.15's DataLoader on a 2 MiB /dev/shm (tests/e2e/test_classify.py).
      "RuntimeError: unable to allocate shared memory(shm) for file </torch_11_2391983_0>: No "
      "space left on device (28)\n",
      "misc/shmutils.cc:87 NCCL WARN Error while creating shared memory segment "
      "/dev/shm/nccl-AbCdEf (size 9637888), error: No space left on device (28)\n"
      "NCCL error: unhandled system error (run with NCCL_DEBUG=INFO), ncclSystemError\n",
      "OSError: [Errno 28] No space left on device: '/dev/shm/batch-7'\n",
  };
  for (const std::string& t : texts) {
    Verdict v = Classify({.first_failure = Failure(Exited(1), t), .shm_bytes = 64ULL << 20},
                         ExitCodeTable(), MarkerTable::Defaults());
    EXPECT_EQ(v.failure_class, FailureClass::kConfig) << t << v.reason;
    EXPECT_EQ(v.code, 78);
    EXPECT_NE(v.reason.find("/dev/shm (64 MiB) is too small"), std::string::npos) << v.reason;
    EXPECT_NE(v.reason.find("emptyDir with medium: Memory"), std::string::npos) << v.reason;
  }
  // A full disk elsewhere is not shared memory.
  Verdict v = Classify({.first_failure = Failure(Exited(1), "OSError: [Errno 28] No space left "
                                                            "on device: '/ckpt/a.pt'\n")},
                       ExitCodeTable(), MarkerTable::Defaults());
  EXPECT_EQ(v.failure_class, FailureClass::kWorker) << v.reason;
}

TEST(ClassifyTest, TheStreamsMarkerBeatsTheTailAndNamesItsStream) {
  MarkerHit hit{.index = 0, .failure_class = FailureClass::kInfra, .note = "",
                .line = "NCCL WARN NET/IB : Got completion with error 12", .stream = "stdout"};
  MarkerTable markers = MarkerTable::Defaults();
  ASSERT_TRUE(markers.Add({"infra=NCCL WARN NET/IB"}).ok());
  WorkerFailure f = Failure(Exited(134), "Fatal Python error: Aborted\n");
  f.stream_marker = hit;
  Verdict v = Classify({.first_failure = f}, ExitCodeTable(), markers);
  EXPECT_EQ(v.failure_class, FailureClass::kInfra);
  EXPECT_EQ(v.evidence, "marker");
  EXPECT_NE(v.reason.find("its stdout says 'NCCL WARN NET/IB': NCCL WARN NET/IB : Got"),
            std::string::npos)
      << v.reason;
}

}  // namespace
}  // namespace trainlet::exitcodes
