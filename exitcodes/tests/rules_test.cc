// Every rule of WorkerFailureRules(), as a table: the row's name says what
// the rule does, the verdict must name the rule and give its class.
#include <gtest/gtest.h>

#include <csignal>

#include "trainlet/exitcodes/classify.h"
#include "trainlet/exitcodes/marker_scanner.h"

namespace trainlet::exitcodes {
namespace {

WorkerExit Exited(int code) { return WorkerExit{.signaled = false, .exit_status = code}; }
WorkerExit Killed(int sig) { return WorkerExit{.signaled = true, .signal = sig}; }

// A Python traceback ending in `exception` (CPython's format, Lib/traceback.py).
std::string Traceback(const std::string& exception) {
  return "Traceback (most recent call last):\n"
         "  File \"/app/train.py\", line 40, in <module>\n"
         "    main()\n" + exception + "\n";
}

// A healthy preamble of the kind real logs have: a warning that names an
// exception, a retried connection, a DataLoader that once found /dev/shm full.
const std::string kNoise =
    "/usr/lib/python3/dist-packages/transformers/utils/import_utils.py:500: UserWarning: "
    "ImportError: apex not found, falling back to native fused ops\n"
    "[W1207 10:00:00.000 socket.cpp:663] [c10d] The client socket has failed to connect to "
    "[trainer-0]:29500 (errno: 111 - Connection refused).\n"
    "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient "
    "shared memory (shm).\n"
    "Xid (PCI:0000:3b:00): 79 seen on another node's log line copied in\n"
    "epoch 0 step 100 loss 2.31\n";

WorkerFailure Failure(WorkerExit exit, std::string stderr_text, std::string error_file = "") {
  return WorkerFailure{.local_rank = 1, .rank = 3, .exit = exit,
                       .error_file_message = std::move(error_file),
                       .stderr_tail = std::move(stderr_text)};
}

// `noise` as the whole stream held it (a marker of the whole-stream scan).
std::optional<MarkerHit> StreamHit(const std::string& stream) {
  const MarkerTable table = MarkerTable::Defaults();  // the scanner keeps a reference
  MarkerScanner s(table, MarkerScanner::Search::kBest,
                  MarkerScanner::Which::kWholeStream);
  s.Feed(stream);
  s.Finish();
  auto h = s.best();
  if (h) {
    h->stream = "stderr";
    h->bytes_after = stream.size() - h->offset;
  }
  return h;
}

struct Row {
  const char* says;
  Evidence evidence;
  int rule;
  FailureClass want;
  int code;
};

TEST(WorkerFailureRulesTest, EachRuleDecidesWhatItSays) {
  const std::uint64_t shm = 64ULL << 20;
  const std::vector<Row> rows = {
      {"an OOM kill counted before the failure is oom, whatever the output says",
       {.first_failure = Failure(Exited(42), Traceback("ModuleNotFoundError: x")), .oom_kills = 1},
       1, FailureClass::kOom, 77},
      {"NVML's GPU fault is hardware, whatever the error file says",
       {.first_failure = Failure(Exited(1), "", "ValueError: x"), .gpu_fault = "GPU 0: Xid 79"},
       2, FailureClass::kHardware, 74},
      {"an ECC error in the exception that ended the worker is hardware, even with exit 42",
       {.first_failure = Failure(Exited(42), Traceback("RuntimeError: CUDA error: uncorrectable "
                                                       "ECC error encountered"))},
       3, FailureClass::kHardware, 74},
      {"an ECC error in the exception beats the error file's exception",
       {.first_failure = Failure(Exited(1), Traceback("RuntimeError: CUDA error: uncorrectable "
                                                      "ECC error encountered"),
                                 "RuntimeError: CUDA error")},
       3, FailureClass::kHardware, 74},
      {"an Xid 79 line only in the noise long before is not hardware",
       {.first_failure = Failure(Exited(1), kNoise + std::string(2000, '.') + "\n" +
                                                Traceback("TimeoutError: x"))},
       12, FailureClass::kWorker, 1},
      {"a fatal exit code is a bug, before any marker",
       {.first_failure = Failure(Exited(42), "Connection refused\n")}, 4, FailureClass::kBug, 42},
      {"a fatal exit code is no bug when the worker died of a signal",
       {.first_failure = Failure(Killed(SIGSEGV), "")}, 12, FailureClass::kWorker, 139},
      {"a marker in the error file decides its class",
       {.first_failure = Failure(Exited(1), "", "torch.distributed.DistNetworkError: Connection "
                                                "reset by peer")},
       5, FailureClass::kInfra, 75},
      {"an error file naming an exception decides: no bug from a traceback it contradicts",
       {.first_failure = Failure(Exited(1), Traceback("ImportError: cannot import name 'x'"),
                                 "TimeoutError: the store timed out")},
       6, FailureClass::kWorker, 1},
      {"a worker killed by SIGBUS while /dev/shm is full is config",
       {.first_failure = Failure(Killed(SIGBUS), "Fatal Python error: Bus error\n"),
        .shm_bytes = shm, .shm_free_bytes = 0},
       7, FailureClass::kConfig, 78},
      {"a worker killed by SIGBUS with room in /dev/shm passes through",
       {.first_failure = Failure(Killed(SIGBUS), "Fatal Python error: Bus error\n"),
        .shm_bytes = shm, .shm_free_bytes = shm / 2},
       12, FailureClass::kWorker, 135},
      {"shared memory running out in the exception that ended the worker is config",
       {.first_failure = Failure(Exited(1), Traceback(
            "RuntimeError: DataLoader worker (pid 77) is killed by signal: Bus error. It is "
            "possible that dataloader's workers are out of shared memory.")),
        .shm_bytes = shm},
       8, FailureClass::kConfig, 78},
      {"shared memory that ran out long ago while /dev/shm is full now is config",
       [&] {
         WorkerFailure f = Failure(Exited(1), Traceback("RuntimeError: DataLoader worker exited "
                                                        "unexpectedly"));
         f.stream_marker = StreamHit(kNoise + std::string(3000, '.') + "\n");
         return Evidence{.first_failure = f, .shm_bytes = shm, .shm_free_bytes = 1024};
       }(),
       8, FailureClass::kConfig, 78},
      {"shared memory that ran out long ago with room in /dev/shm now decides nothing",
       [&] {
         WorkerFailure f = Failure(Exited(1), Traceback("RuntimeError: exited unexpectedly"));
         f.stream_marker = StreamHit(kNoise + std::string(3000, '.') + "\n");
         return Evidence{.first_failure = f, .shm_bytes = shm, .shm_free_bytes = shm / 2};
       }(),
       12, FailureClass::kWorker, 1},
      {"a ModuleNotFoundError that ended the worker is a bug",
       {.first_failure = Failure(Exited(1), Traceback("ModuleNotFoundError: No module named "
                                                      "'x'"))},
       9, FailureClass::kBug, 42},
      {"a ModuleNotFoundError line that is no exception is no bug",
       {.first_failure = Failure(Exited(1), "ModuleNotFoundError: No module named 'x'\n")}, 12,
       FailureClass::kWorker, 1},
      {"an old traceback the worker survived is not the failure's (older than 30 s)",
       [] {
         WorkerFailure f = Failure(Exited(1), "training goes on\n");
         f.last_exception = LastException{.text = "ImportError: optional", .age_ms = 120'000};
         return Evidence{.first_failure = f};
       }(),
       12, FailureClass::kWorker, 1},
      {"a traceback followed by more than 64 KiB of stderr is not the failure's",
       [] {
         WorkerFailure f = Failure(Exited(1), "training goes on\n");
         f.last_exception = LastException{.text = "SyntaxError: x", .bytes_after = 100'000,
                                          .age_ms = 1'000};
         return Evidence{.first_failure = f};
       }(),
       12, FailureClass::kWorker, 1},
      {"a network fault in the exception that ended the worker is infra",
       {.first_failure = Failure(Exited(1), Traceback("torch.distributed.DistStoreError: "
                                                      "Socket Timeout"))},
       10, FailureClass::kInfra, 75},
      {"the trainer's own [trainlet:bug] at the end of its stderr is a bug",
       {.first_failure = Failure(Exited(1), "[trainlet:bug] the config names no dataset\n")}, 10,
       FailureClass::kBug, 42},
      {"a connection refused long ago decides nothing",
       [&] {
         WorkerFailure f = Failure(Exited(1), kNoise + std::string(2000, '.') + "\n" +
                                                  Traceback("ValueError: x"));
         return Evidence{.first_failure = f};
       }(),
       12, FailureClass::kWorker, 1},
      {"an NCCL watchdog timeout before a thread dump is infra, saying where",
       [] {
         std::string text = "[E ProcessGroupNCCL.cpp:1316] [Rank 1] Watchdog caught collective "
                            "operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE)\n";
         for (int t = 0; t < 40; ++t) text += "Thread 0x7f (most recent call first):\n" +
                                              std::string(300, ' ') + "\n";
         WorkerFailure f = Failure(Killed(SIGABRT), text.substr(text.size() - 8192));
         f.stream_marker = StreamHit(text);
         return Evidence{.first_failure = f};
       }(),
       11, FailureClass::kInfra, 75},
      {"otherwise the worker's own code passes through",
       {.first_failure = Failure(Exited(3), kNoise + "step 101\nstep 102\nstep 103\nexiting\n")},
       12, FailureClass::kWorker, 3},
      {"the last lines of stderr are the failure's own text when no exception is",
       {.first_failure = Failure(Exited(1), kNoise + "step 1\nstep 2\nstep 3\nNCCL error: "
                                                         "Connection reset by peer\n")},
       10, FailureClass::kInfra, 75},
      {"with an exception, a network error line before it decides nothing",
       {.first_failure = Failure(Exited(1), "W socket: Connection refused, retrying\n" +
                                                Traceback("torch.OutOfMemoryError: CUDA out of "
                                                          "memory."))},
       12, FailureClass::kWorker, 1},
      {"an error file's callstack that handled an ImportError first is no bug",
       {.first_failure = Failure(Exited(1), "", "TimeoutError: x\n" +
                                                    Traceback("ImportError: optional") +
                                                    "\nDuring handling of the above exception, "
                                                    "another exception occurred:\n\n" +
                                                    Traceback("TimeoutError: x"))},
       6, FailureClass::kWorker, 1},
  };
  const ExitCodeTable codes;
  const MarkerTable markers = MarkerTable::Defaults();
  for (const Row& r : rows) {
    const Verdict v = Classify(r.evidence, codes, markers);
    EXPECT_EQ(v.rule, r.rule) << r.says << ": " << v.reason;
    EXPECT_EQ(v.failure_class, r.want) << r.says << ": " << v.reason;
    EXPECT_EQ(v.code, r.code) << r.says;
  }
}

TEST(WorkerFailureRulesTest, EveryRuleHasARowAndASentence) {
  const auto& rules = WorkerFailureRules();
  ASSERT_EQ(rules.size(), 12U);
  for (std::size_t i = 0; i < rules.size(); ++i) {
    EXPECT_EQ(rules[i].number, static_cast<int>(i) + 1);
    EXPECT_FALSE(rules[i].says.empty());
  }
}

// The fault this table was written for: a rank printed a harmless exception
// name long ago (a warning about an optional import), later failed for a
// transient reason, and exited 42, "bug", even with its @record error file
// naming another exception.
TEST(WorkerFailureRulesTest, AHarmlessExceptionNameLongAgoIsNoBug) {
  const std::string stream = kNoise + std::string(5000, '.') + "\n" +
                             Traceback("TimeoutError: [Errno 110] Connection timed out");
  WorkerFailure f = Failure(Exited(1), stream);
  f.stream_marker = StreamHit(stream);
  Verdict v = Classify({.first_failure = f}, ExitCodeTable(), MarkerTable::Defaults());
  EXPECT_EQ(v.failure_class, FailureClass::kWorker) << v.reason;
  EXPECT_EQ(v.code, 1);
  EXPECT_NE(v.reason.find("its last exception: TimeoutError"), std::string::npos) << v.reason;
  f.error_file_message = "TimeoutError: [Errno 110] Connection timed out";
  v = Classify({.first_failure = f}, ExitCodeTable(), MarkerTable::Defaults());
  EXPECT_EQ(v.failure_class, FailureClass::kWorker) << v.reason;
  EXPECT_EQ(v.rule, 6);
}

TEST(WorkerFailureRulesTest, AWholeStreamVerdictSaysWhereItsLineWas) {
  MarkerHit hit{.index = 0, .failure_class = FailureClass::kInfra, .note = "",
                .line = "NCCL WARN NET/IB : Got completion with error 12", .stream = "stdout",
                .offset = 10, .bytes_after = 20480, .age_ms = 2500};
  MarkerTable markers = MarkerTable::Defaults();
  ASSERT_TRUE(markers.Add({"infra=NCCL WARN NET/IB"}).ok());
  WorkerFailure f = Failure(Exited(1), "");
  f.stream_marker = hit;
  Verdict v = Classify({.first_failure = f}, ExitCodeTable(), markers);
  EXPECT_EQ(v.rule, 11);
  EXPECT_NE(v.reason.find("(20.0 KiB before the end of its stdout, 2.5 s before it ended)"),
            std::string::npos)
      << v.reason;
}

}  // namespace
}  // namespace trainlet::exitcodes
