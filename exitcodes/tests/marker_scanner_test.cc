#include "trainlet/exitcodes/marker_scanner.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <random>

#include "trainlet/exitcodes/xid.h"

namespace trainlet::exitcodes {
namespace {

// The reference: the lowest-index marker whose text occurs anywhere (plain
// markers only), by std::string::find.
std::optional<std::size_t> Naive(const MarkerTable& t, const std::string& text) {
  for (std::size_t i = 0; i < t.markers().size(); ++i) {
    if (text.find(t.markers()[i].text) != std::string::npos) return i;
  }
  return std::nullopt;
}

std::optional<MarkerHit> ScanInPieces(const MarkerTable& t, const std::string& text,
                                      std::mt19937& rng, std::size_t max_piece,
                                      MarkerScanner::Search search = MarkerScanner::Search::kBest) {
  MarkerScanner s(t, search);
  std::uniform_int_distribution<std::size_t> len(1, max_piece);
  for (std::size_t i = 0; i < text.size();) {
    std::size_t n = std::min(len(rng), text.size() - i);
    s.Feed(std::string_view(text).substr(i, n));
    i += n;
  }
  s.Finish();
  return s.best();
}

constexpr MarkerScanner::Search kSearches[] = {
    MarkerScanner::Search::kPortable, MarkerScanner::Search::kSsse3,
    MarkerScanner::Search::kAvx2};

std::string Filler(std::size_t bytes) {
  std::string s;
  for (int i = 0; s.size() < bytes; ++i) {
    s += "  File \"/usr/lib/python3/dist-packages/torch/nn/modules/module.py\", line " +
         std::to_string(1500 + i % 97) + " in _call_impl\n";
  }
  return s;
}

TEST(MarkerScannerTest, TheStrongestMarkerAnywhereWinsNotTheLast) {
  const MarkerTable t = MarkerTable::Defaults();
  // NCCL's watchdog line, then a ~15 KB faulthandler dump, then a weaker marker.
  const std::string text = "[E ProcessGroupNCCL.cpp:475] Watchdog caught collective operation "
                           "timeout: WorkNCCL(SeqNum=9)\nFatal Python error: Aborted\n\n" +
                           Filler(15'000) + "ImportError: late\n";
  auto hit = t.Match(text);
  ASSERT_TRUE(hit);
  EXPECT_EQ(t.markers()[hit->index].text, "Watchdog caught collective operation timeout");
  EXPECT_EQ(hit->failure_class, FailureClass::kInfra);
  EXPECT_EQ(hit->line, "[E ProcessGroupNCCL.cpp:475] Watchdog caught collective operation "
                       "timeout: WorkNCCL(SeqNum=9)");
}

TEST(MarkerScannerTest, MarkersSpanningPiecesAreFoundAtEverySplit) {
  const MarkerTable t = MarkerTable::Defaults();
  const std::string text = "x = 1\nRuntimeError: NCCL error: ncclRemoteError: remote process "
                           "exited or there was a network error\nbye\n";
  for (std::size_t cut = 1; cut < text.size(); ++cut) {
    for (std::size_t cut2 = cut; cut2 <= text.size(); cut2 += 7) {
      MarkerScanner s(t);
      s.Feed(std::string_view(text).substr(0, cut));
      s.Feed(std::string_view(text).substr(cut, cut2 - cut));
      s.Feed(std::string_view(text).substr(cut2));
      s.Finish();
      ASSERT_TRUE(s.best()) << cut << "," << cut2;
      EXPECT_EQ(t.markers()[s.best()->index].text, "ncclRemoteError") << cut << "," << cut2;
      EXPECT_EQ(s.best()->line, "RuntimeError: NCCL error: ncclRemoteError: remote process "
                                "exited or there was a network error")
          << cut << "," << cut2;
    }
  }
}

TEST(MarkerScannerTest, AgreesWithPlainFindOnRandomTextAndPieces) {
  MarkerTable t = MarkerTable::Defaults();
  ASSERT_TRUE(t.Add({"infra=EFA link down", "bug=AssertionError"}).ok());
  std::mt19937 rng(7);
  std::vector<std::string> plain;  // markers whose class the line does not change
  for (const Marker& m : t.markers()) {
    if (m.meaning == MarkerMeaning::kPlain && m.context.empty()) plain.push_back(m.text);
  }
  for (int round = 0; round < 300; ++round) {
    std::string text = Filler(std::uniform_int_distribution<std::size_t>(0, 3000)(rng));
    std::uniform_int_distribution<std::size_t> pick(0, plain.size() - 1);
    for (int k = std::uniform_int_distribution<int>(0, 3)(rng); k > 0; --k) {
      std::size_t at = std::uniform_int_distribution<std::size_t>(0, text.size())(rng);
      text.insert(at, plain[pick(rng)]);
    }
    // Bytes that are an anchor byte with the top bit set (UTF-8 and the
    // like): a nibble table must tell them apart.
    for (int k = std::uniform_int_distribution<int>(0, 20)(rng); k > 0; --k) {
      const unsigned char b = t.anchor_bytes()[std::uniform_int_distribution<std::size_t>(
          0, t.anchor_bytes().size() - 1)(rng)];
      text.insert(std::uniform_int_distribution<std::size_t>(0, text.size())(rng), 1,
                  static_cast<char>(b | 0x80));
    }
    auto want = Naive(t, text);
    for (MarkerScanner::Search search : kSearches) {
      for (std::size_t max_piece : {1UL, 5UL, 64UL, 4096UL}) {
        auto got = ScanInPieces(t, text, rng, max_piece, search);
        ASSERT_EQ(got.has_value(), want.has_value()) << round << " " << max_piece;
        if (want) {
          EXPECT_EQ(got->index, *want) << round << " " << max_piece << " "
                                       << static_cast<int>(search);
        }
      }
    }
  }
}

TEST(MarkerScannerTest, EachSearchIsTheOneAskedForWhereTheCpuRunsIt) {
  const MarkerTable t = MarkerTable::Defaults();
  const MarkerScanner::Search best = MarkerScanner(t).search();
  EXPECT_NE(best, MarkerScanner::Search::kBest);
  EXPECT_TRUE(MarkerScanner::Runs(MarkerScanner::Search::kPortable));
  for (MarkerScanner::Search search : kSearches) {
    EXPECT_EQ(MarkerScanner(t, search).search(), MarkerScanner::Runs(search) ? search : best);
  }
}

#if defined(__x86_64__)
TEST(MarkerScannerTest, TheCpuChecksAgreeWithTheCompilers) {
  // The scanner asks cpuid itself, lazily; GCC's builtins read it at load.
  __builtin_cpu_init();
  EXPECT_EQ(MarkerScanner::Runs(MarkerScanner::Search::kSsse3),
            __builtin_cpu_supports("ssse3") != 0);
  EXPECT_EQ(MarkerScanner::Runs(MarkerScanner::Search::kAvx2),
            __builtin_cpu_supports("avx2") != 0);
}
#endif

TEST(MarkerScannerTest, ManyUserMarkersTakeTheByteTablePathWithTheSameResult) {
  MarkerTable t = MarkerTable::Defaults();
  std::vector<std::string> specs;
  // No byte in common: every one needs an anchor of its own.
  for (char c = 'a'; c <= 'z'; ++c) specs.push_back("bug=" + std::string(3, c));
  ASSERT_TRUE(t.Add(specs).ok());
  EXPECT_GT(t.anchor_bytes().size(), 16U);
  std::mt19937 rng(3);
  const std::string text = Filler(2000) + "zqqq then Xid 79\n" + Filler(100);
  for (MarkerScanner::Search search : kSearches) {
    auto hit = ScanInPieces(t, text, rng, 100, search);
    ASSERT_TRUE(hit);
    EXPECT_EQ(t.markers()[hit->index].text, "qqq");
    EXPECT_EQ(hit->line, "zqqq then Xid 79");
  }
}

TEST(MarkerScannerTest, TheDefaultsNeedFewAnchors) {
  // Each distinct anchor byte is one vector compare per 16 bytes forwarded.
  EXPECT_LE(MarkerTable::Defaults().anchor_bytes().size(), 16U);
}

TEST(MarkerScannerTest, AnEvidenceLineIsBoundedAndStartsNearTheMarker) {
  const MarkerTable t = MarkerTable::Defaults();
  std::string longline(5000, 'a');
  longline += " ncclSystemError ";
  longline += std::string(5000, 'b');
  auto hit = t.Match(longline + "\n");
  ASSERT_TRUE(hit);
  EXPECT_LE(hit->line.size(), kEvidenceLine);
  EXPECT_NE(hit->line.find("ncclSystemError"), std::string::npos);
}

TEST(MarkerScannerTest, AHardwareXidBeatsAnApplicationXidSeenFirst) {
  const MarkerTable t = MarkerTable::Defaults();
  auto hit = t.Match("NVRM: Xid (PCI:0000:3b:00): 31, pid=77, name=python, Ch 00000008, "
                     "MMU Fault\nNVRM: Xid (PCI:0000:3b:00): 79, pid=77, GPU has fallen off "
                     "the bus.\n");
  ASSERT_TRUE(hit);
  // "fallen off the bus" is a stronger (earlier) marker than "Xid".
  EXPECT_EQ(hit->failure_class, FailureClass::kHardware);
  auto x31 = t.Match("NVRM: Xid (PCI:0000:3b:00): 31, pid=77, MMU Fault\n");
  ASSERT_TRUE(x31);
  EXPECT_EQ(x31->failure_class, FailureClass::kWorker);
  auto both = t.Match("Xid 31 here\nlater Xid 94 here\n");
  ASSERT_TRUE(both);
  EXPECT_EQ(both->failure_class, FailureClass::kHardware);
  EXPECT_EQ(both->line, "later Xid 94 here");
}

TEST(MarkerScannerTest, AContextMarkerCountsOnlyOnALineWithItsContext) {
  const MarkerTable t = MarkerTable::Defaults();
  EXPECT_FALSE(t.Match("OSError: [Errno 28] No space left on device: '/ckpt/step9.pt'\n"));
  auto hit = t.Match("OSError: [Errno 28] No space left on device: '/dev/shm/x'\n");
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->failure_class, FailureClass::kConfig);
}

TEST(XidTest, TheCatalogueByNumber) {
  struct Row {
    std::uint64_t xid;
    XidCause cause;
  };
  for (Row r : {Row{13, XidCause::kApplication}, {31, XidCause::kApplication},
                {43, XidCause::kApplication}, {48, XidCause::kHardware}, {63, XidCause::kHardware},
                {64, XidCause::kHardware}, {74, XidCause::kHardware}, {79, XidCause::kHardware},
                {92, XidCause::kHardware}, {94, XidCause::kHardware}, {95, XidCause::kHardware},
                {119, XidCause::kHardware}, {120, XidCause::kHardware},
                {999, XidCause::kUnknown}}) {
    EXPECT_EQ(LookUpXid(r.xid).cause, r.cause) << r.xid;
  }
}

TEST(XidTest, ParsesKernelAndShortForms) {
  EXPECT_EQ(ParseXid("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."), 79U);
  EXPECT_EQ(ParseXid("Xid 31"), 31U);
  EXPECT_EQ(ParseXid("nvml: Xid: 48"), 48U);
  EXPECT_EQ(ParseXid("Xidian University"), std::nullopt);
  EXPECT_EQ(ParseXid("no x-i-d"), std::nullopt);
  EXPECT_EQ(ParseXid("Xid (PCI:0000"), std::nullopt);
}

TEST(ErrnoStatusTest, ResourceShortagesAreInfraNamingTheLimit) {
  struct Row {
    int err;
    const char* names;
  };
  for (Row r : {Row{EAGAIN, "pids.max"}, {EMFILE, "RLIMIT_NOFILE"}, {ENFILE, "fs.file-max"},
                {ENOMEM, "memory"}}) {
    Status s = ErrnoStatus(r.err, "cannot start local rank 0", FailureClass::kConfig);
    EXPECT_EQ(s.failure_class(), FailureClass::kInfra) << r.err;
    EXPECT_NE(s.message().find(r.names), std::string::npos) << s.message();
    EXPECT_TRUE(IsResourceErrno(r.err));
  }
  Status s = ErrnoStatus(ENOENT, "cannot start local rank 0", FailureClass::kConfig);
  EXPECT_EQ(s.failure_class(), FailureClass::kConfig);
  EXPECT_FALSE(IsResourceErrno(ENOENT));
}

}  // namespace
}  // namespace trainlet::exitcodes
