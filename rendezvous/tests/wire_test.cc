#include "trainlet/rendezvous/wire.h"
#include "trainlet/rendezvous/launch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace trainlet::rendezvous::wire {
namespace {
using exitcodes::Result;

Hello SampleHello() {
  Hello h;
  h.job_id = "trainer";
  h.attempt = 2;
  h.index = 7;
  h.nproc_per_node = 8;
  h.config = {{"nnodes", "16"}, {"nproc_per_node", "8"}, {"master_port", "29500"}};
  h.fingerprint = Fingerprint(h.config);
  h.generation = 3;
  return h;
}

Assignment SampleAssignment() {
  return Assignment{.generation = 1, .nnodes = 16, .world_size = 128, .rank_base = 56,
                    .master_addr = "10.0.0.10", .master_port = 29500, .run_id = "trainer",
                    .job_id = "trainer-0", .attempt = 2, .nccl_version = 0, .nccl_ids = {},
                    .jax_port = 29600};
}

// A 128-byte NCCL id with NUL and 0xff bytes (NVIDIA/nccl#1038: binary, never a C string).
std::string NcclId(char fill) {
  std::string id(kNcclIdBytes, fill);
  id[0] = '\0';
  id[1] = '\xff';
  id[127] = '\0';
  return id;
}

Assignment WithNcclIds(std::size_t n) {
  Assignment a = SampleAssignment();
  a.nccl_version = 22809;
  for (std::size_t i = 0; i < n; ++i) a.nccl_ids.push_back(NcclId(static_cast<char>('a' + i)));
  return a;
}

std::vector<Message> Samples() {
  Hello jobset = SampleHello();
  jobset.job_name = "pytorch-ddp-workers-0";
  jobset.job_restart_attempt = 0;  // present and 0 differs from absent
  Hello probe = SampleHello();
  probe.job_restart_attempt = 4;
  probe.leader_id = "0123456789abcdef";
  Assignment spare = SampleAssignment();
  spare.node_rank = 0;
  spare.spare = true;
  Assignment moved = SampleAssignment();
  moved.node_rank = 5;
  Assignment grown = SampleAssignment();  // elastic: generation 3 after a join, 2 restarts
  grown.generation = 3;
  grown.node_rank = 2;
  grown.restarts = 2;
  Assignment arrived = grown;  // ranks by arrival: index 3 on node rank 2
  arrived.index = 3;
  Hello elastic = SampleHello();
  elastic.config = {{"nnodes", "2:3"}, {"nproc_per_node", "2"}, {"spares", "1"}};
  elastic.fingerprint = Fingerprint(elastic.config);
  elastic.generation = 4;
  elastic.restarts = 2;  // a join's generation is no restart
  Hello elastic_first = elastic;
  elastic_first.restarts = 0;  // present and 0 differs from absent
  elastic_first.job_restart_attempt = 1;
  Hello identified = elastic;  // who the pod is beyond its index: binary bytes
  identified.instance_id = std::string("\0\xff\x01\x7f" "0123456789ab", kInstanceIdBytes);
  Hello on_node = SampleHello();
  on_node.node_name = "gke-a3-pool-7f2c";  // NODE_NAME (wire.h): flag bit 8
  Hello identified_on_node = identified;  // both appended fields, in their order
  identified_on_node.node_name = on_node.node_name;
  Hello survivor = identified_on_node;  // every appended field: the node rank held (flag 16)
  survivor.node_rank = 1;
  return {SampleHello(), jobset, probe, elastic, elastic_first, SampleAssignment(), spare,
          moved, grown,
          arrived, WithNcclIds(1), WithNcclIds(3),
          Reject{.field = "nnodes", .reason = "pod 3 says nnodes=4, leader says 16"},
          Reject{.field = "index", .reason = "index 3 already joined", .retriable = true},
          Reject{.field = kReplacedField, .reason = "pod 3 was replaced",
                 .replaced = Replaced{.spare = 4, .node_rank = 3, .generation = 1}},
          Reject{.field = kNextGenerationField, .reason = "joins the next generation",
                 .retriable = true, .index = 2},
          Heartbeat{},
          Heartbeat{.sent_us = 1ULL << 40 | 7, .echo_us = 123456789, .echo_held_us = 250,
                    .step_rate_milli = 4500, .slowest_rank = 17},
          Report{.index = 3, .ok = false, .failure_class = 1, .reason = "rank 7 exited 42"},
          Report{.index = 2, .ok = true, .failure_class = 0, .reason = ""},
          Report{.index = 4, .ok = false, .failure_class = 3, .reason = "hang: rank 9",
                 .hang = true},
          Stop{.failed_index = 3, .reason = "pod 3 failed"},
          Stop{.failed_index = 1, .reason = "hang", .diagnostics_signal = 10},
          Stop{.failed_index = 2, .reason = "rank 5 exited 1", .restart = true,
               .next_generation = 4},
          Stop{.failed_index = 5, .reason = "stopped by SIGTERM", .failure_class = 7},
          Stop{.failed_index = 1, .reason = "pod 1: CUDA error", .restart = true,
               .next_generation = 1, .failure_class = 4, .replacement = 2},
          Challenge{.nonce = std::string(32, '\x01'), .proof = std::string(32, '\0')},
          Proof{.proof = std::string("\0\xff\x10", 3)},
          identified, on_node, identified_on_node,
          Report{.index = 2, .ok = false, .failure_class = 7, .reason = "stopped by SIGTERM",
                 .leaving = true},
          survivor};
}

// Decodes everything in `bytes`, feeding `chunk` bytes at a time.
Result<std::vector<Message>> DecodeAll(const std::vector<std::uint8_t>& bytes, std::size_t chunk) {
  Decoder d;
  std::vector<Message> out;
  for (std::size_t i = 0; i < bytes.size(); i += chunk) {
    std::size_t n = std::min(chunk, bytes.size() - i);
    exitcodes::Status s = d.Feed(std::span(bytes).subspan(i, n));
    if (!s.ok()) return s;
    for (;;) {
      auto m = d.Next();
      if (!m.ok()) return m.status();
      if (!m->has_value()) break;
      out.push_back(std::move(**m));
    }
  }
  return out;
}



// Version 2's heartbeat had no payload: it still decodes, with every field 0.
TEST(WireTest, AnEmptyHeartbeatFromAnOlderPeerDecodesAsZeros) {
  const std::vector<std::uint8_t> frame = {0x54, 0x4C, 0x4E, 0x54, 0, 2, 0, 4, 0, 0, 0, 0};
  auto got = DecodeAll(frame, 1);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ(std::get<Heartbeat>((*got)[0]), Heartbeat{});
}

// A hello that ends after `generation` (before job_name, job_restart_attempt
// and leader_id were appended) still decodes, with those empty.
TEST(WireTest, AHelloFromAnOlderPeerDecodesWithoutTheJobFields) {
  std::vector<std::uint8_t> frame = Encode(SampleHello());
  // Cut the appended fields (empty job_name, u32, u16, empty leader_id) off and fix the payload length (header bytes 8..11).
  frame.resize(frame.size() - (2 + 4 + 2 + 2));
  const std::uint32_t len = static_cast<std::uint32_t>(frame.size() - kHeaderSize);
  frame[8] = static_cast<std::uint8_t>(len >> 24);
  frame[9] = static_cast<std::uint8_t>(len >> 16);
  frame[10] = static_cast<std::uint8_t>(len >> 8);
  frame[11] = static_cast<std::uint8_t>(len);
  auto got = DecodeAll(frame, 1);
  ASSERT_TRUE(got.ok()) << got.status().message();
  ASSERT_EQ(got->size(), 1u);
  EXPECT_EQ(std::get<Hello>((*got)[0]), SampleHello());
}

TEST(WireTest, RoundTripsEveryMessageByteByByte) {
  for (const Message& m : Samples()) {
    auto decoded = DecodeAll(Encode(m), 1);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    ASSERT_EQ(decoded->size(), 1u);
    EXPECT_EQ((*decoded)[0], m);
  }
}

TEST(WireTest, SeveralFramesInOneChunk) {
  std::vector<std::uint8_t> all;
  for (const Message& m : Samples()) {
    auto f = Encode(m);
    all.insert(all.end(), f.begin(), f.end());
  }
  for (std::size_t chunk : {1u, 3u, 13u, 4096u}) {
    auto decoded = DecodeAll(all, chunk);
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    EXPECT_EQ(*decoded, Samples()) << "chunk " << chunk;
  }
}

TEST(WireTest, TruncatedFrameWaitsForMoreBytes) {
  auto frame = Encode(SampleHello());
  for (std::size_t cut = 0; cut < frame.size(); ++cut) {
    Decoder d;
    ASSERT_TRUE(d.Feed(std::span(frame).first(cut)).ok());
    auto m = d.Next();
    ASSERT_TRUE(m.ok()) << "cut " << cut << ": " << m.status().ToString();
    EXPECT_FALSE(m->has_value()) << "cut " << cut;
  }
}

struct BadFrame {
  const char* name;
  std::function<void(std::vector<std::uint8_t>&)> corrupt;
  const char* expected;
};

TEST(WireTest, MalformedFramesAreRefusedWithAReason) {
  const std::vector<BadFrame> cases = {
      {"magic", [](auto& f) { f[0] = 'X'; }, "bad magic"},
      {"version", [](auto& f) { f[5] = 9; }, "protocol version 9"},
      {"type", [](auto& f) { f[7] = 77; }, "unknown message type 77"},
      {"oversize", [](auto& f) { f[8] = 0x7f; }, "exceeds the limit"},
      {"payload-short",
       [](auto& f) {
         f.pop_back();
         f[11] -= 1;  // length agrees with the shorter payload
       },
       "truncated"},
      {"trailing",
       [](auto& f) {
         f.push_back(0);
         f[11] += 1;
       },
       "trailing bytes"},
      {"string-over-limit",
       [](auto& f) {
         f[12] = 0xff;  // job_id length 0xff07 > kMaxString
       },
       "limit"},
  };
  for (const BadFrame& c : cases) {
    auto frame = Encode(SampleHello());
    c.corrupt(frame);
    auto decoded = DecodeAll(frame, 1);
    ASSERT_FALSE(decoded.ok()) << c.name;
    EXPECT_NE(decoded.status().message().find(c.expected), std::string::npos)
        << c.name << ": " << decoded.status().message();
  }
}

TEST(WireTest, NcclIdsRoundTripByteExactlyUpToTheLimit) {
  Assignment a = WithNcclIds(kMaxNcclIds);
  auto frame = Encode(a);
  EXPECT_LE(frame.size(), kHeaderSize + kMaxPayload);
  auto decoded = DecodeAll(frame, 7);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  const auto& got = std::get<Assignment>(decoded->at(0));
  ASSERT_EQ(got.nccl_ids.size(), kMaxNcclIds);
  for (std::size_t i = 0; i < kMaxNcclIds; ++i) EXPECT_EQ(got.nccl_ids[i], a.nccl_ids[i]) << i;
  EXPECT_EQ(got.nccl_version, 22809u);
}

TEST(WireTest, MalformedNcclIdsAreRefused) {
  // An id of the wrong size: the last id's length field (u16) just before its bytes.
  Assignment a = WithNcclIds(1);
  a.nccl_ids[0].pop_back();
  auto decoded = DecodeAll(Encode(a), 3);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("nccl_id is 127 bytes, expected 128"),
            std::string::npos)
      << decoded.status().message();
  // Too many ids: patch the count (u16 before the first id's length).
  auto frame = Encode(WithNcclIds(1));
  std::size_t count_at =
      frame.size() - 6 /* node_rank, flags */ - 2 /* jax_port */ - kNcclIdBytes - 2 - 2;
  frame[count_at] = 0x01;  // 256 + 1 ids
  decoded = DecodeAll(frame, 1);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("nccl_ids has 257 ids, limit 64"), std::string::npos)
      << decoded.status().message();
}

// Elastic sizes: the restart count travels only when set, after the membership
// flags; a frame whose flags announce it without its 4 bytes is refused.
TEST(WireTest, RestartsFollowTheMembershipFlags) {
  Assignment a = SampleAssignment();
  a.node_rank = 1;
  const auto without = Encode(a);
  a.restarts = 0;  // present and 0 differs from absent
  auto with = Encode(a);
  EXPECT_EQ(with.size(), without.size() + 4);
  auto decoded = DecodeAll(with, 5);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  ASSERT_EQ(decoded->size(), 1u);
  EXPECT_EQ(std::get<Assignment>((*decoded)[0]).restarts, std::optional<std::uint32_t>(0));
  auto truncated = without;
  truncated[truncated.size() - 1] |= 4;  // flags (u16, big-endian) say "restarts follow"
  EXPECT_FALSE(DecodeAll(truncated, 1).ok());
}

// Ranks by arrival: the index the leader gave travels only when set, after the
// restarts in an assignment and after `replaced` in a reject; flags that
// announce it without its 4 bytes are refused.
TEST(WireTest, AnArrivalIndexFollowsItsFlag) {
  Assignment a = SampleAssignment();
  a.node_rank = 1;
  a.restarts = 0;
  const auto without = Encode(a);
  a.index = 2;
  const auto with = Encode(a);
  EXPECT_EQ(with.size(), without.size() + 4);
  auto decoded = DecodeAll(with, 1);
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(std::get<Assignment>((*decoded)[0]).index, std::optional<std::uint32_t>(2));
  auto truncated = without;
  truncated[truncated.size() - 5] |= 8;  // the flags' low byte, before the restarts
  EXPECT_FALSE(DecodeAll(truncated, 1).ok());

  Reject r{.field = kNextGenerationField, .reason = "next", .retriable = true};
  const auto plain = Encode(r);
  r.index = 0;  // present and 0 differs from absent
  const auto given = Encode(r);
  EXPECT_EQ(given.size(), plain.size() + 4);
  auto got = DecodeAll(given, 1);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(std::get<Reject>((*got)[0]).index, std::optional<std::uint32_t>(0));
  auto short_reject = plain;
  short_reject[short_reject.size() - 1] |= 4;  // flags (last) say "an index follows"
  EXPECT_FALSE(DecodeAll(short_reject, 1).ok());
}

// A stop without a replacement is encoded as before `replacement` was
// appended (an older member refuses trailing bytes); one with it adds flags
// and the index, and flags that announce an index without it are refused.
TEST(WireTest, AStopNamesItsReplacementOnlyWhenItHasOne) {
  const Stop old{.failed_index = 1, .reason = "pod 1 was lost", .restart = true,
                 .next_generation = 1, .failure_class = 3};
  Stop swap = old;
  swap.replacement = 2;
  const std::vector<std::uint8_t> before = Encode(old);
  std::vector<std::uint8_t> after = Encode(swap);
  ASSERT_EQ(after.size(), before.size() + 6);
  EXPECT_TRUE(std::equal(before.begin() + kHeaderSize, before.end(), after.begin() + kHeaderSize));
  auto got = DecodeAll(before, 1);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_FALSE(std::get<Stop>((*got)[0]).replacement.has_value());
  after.resize(after.size() - 4);  // "a replacement follows", and nothing does
  const auto len = static_cast<std::uint32_t>(after.size() - kHeaderSize);
  for (int b = 0; b < 4; ++b) after[8 + b] = static_cast<std::uint8_t>(len >> (24 - 8 * b));
  EXPECT_FALSE(DecodeAll(after, 1).ok());
}

// A hello without an instance id is encoded as before the field was appended
// (an older leader refuses trailing bytes); one with it adds the string after
// the flags' other fields, and flags that announce it without it (or with an
// empty one) are refused.
TEST(WireTest, AHelloCarriesItsInstanceIdOnlyWhenItHasOne) {
  Hello plain = SampleHello();
  plain.job_name = "workers-0";
  plain.restarts = 1;
  Hello identified = plain;
  identified.instance_id = std::string(kInstanceIdBytes, '\x5a');
  const std::vector<std::uint8_t> before = Encode(plain);
  const std::vector<std::uint8_t> after = Encode(identified);
  ASSERT_EQ(after.size(), before.size() + 2 + kInstanceIdBytes);
  auto got = DecodeAll(after, 1);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(std::get<Hello>((*got)[0]), identified);
  auto old = DecodeAll(before, 1);
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_TRUE(std::get<Hello>((*old)[0]).instance_id.empty());
  // The flags are the u16 before leader_id (empty: 2 bytes) and restarts (4 bytes).
  auto announced = before;
  announced[announced.size() - 7] |= 4;
  EXPECT_FALSE(DecodeAll(announced, 1).ok()) << "flag 4 without the string";
  auto empty = announced;
  empty.push_back(0);
  empty.push_back(0);
  const auto len = static_cast<std::uint32_t>(empty.size() - kHeaderSize);
  for (int b = 0; b < 4; ++b) empty[8 + b] = static_cast<std::uint8_t>(len >> (24 - 8 * b));
  auto refused = DecodeAll(empty, 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("instance_id"), std::string::npos)
      << refused.status().message();
}

// A hello without the node rank a survivor held is encoded as before the
// field was appended; one with it adds 4 bytes after node_name, and flags that
// announce it without them are refused.
TEST(WireTest, AHelloCarriesTheNodeRankItHeldOnlyWhenItHeldOne) {
  Hello plain = SampleHello();
  plain.node_name = "node-1";
  Hello survivor = plain;
  survivor.node_rank = 0;  // present and 0 differs from absent
  const std::vector<std::uint8_t> before = Encode(plain);
  const std::vector<std::uint8_t> after = Encode(survivor);
  ASSERT_EQ(after.size(), before.size() + 4);
  auto got = DecodeAll(after, 1);
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_EQ(std::get<Hello>((*got)[0]).node_rank, std::optional<std::uint32_t>(0));
  auto old = DecodeAll(before, 1);
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_FALSE(std::get<Hello>((*old)[0]).node_rank.has_value());
  // The flags are the u16 before leader_id (empty: 2 bytes) and node_name (2 + 6 bytes).
  auto announced = before;
  announced[announced.size() - 11] |= 16;
  EXPECT_FALSE(DecodeAll(announced, 1).ok()) << "flag 16 without the node rank";
}

// Writes each sample frame as a seed for the fuzzer (scripts/test passes the
// directory in TRAINLET_FUZZ_SEEDS; rendezvous/fuzz/corpus holds a copy).
TEST(WireTest, WritesFuzzSeeds) {
  const char* dir = std::getenv("TRAINLET_FUZZ_SEEDS");
  if (dir == nullptr) GTEST_SKIP() << "TRAINLET_FUZZ_SEEDS not set";
  int i = 0;
  for (const Message& m : Samples()) {
    auto frame = Encode(m);
    std::string path = std::string(dir) + "/seed-" + std::to_string(i++);
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    std::fputc(0, f);  // the fuzz target's first byte picks the split point
    std::fwrite(frame.data(), 1, frame.size(), f);
    std::fclose(f);
  }
}

TEST(WireTest, OversizedLengthIsRefusedBeforeThePayloadArrives) {
  auto frame = Encode(SampleHello());
  frame[8] = 0x10;  // 256 MiB claimed
  Decoder d;
  ASSERT_TRUE(d.Feed(std::span(frame).first(kHeaderSize)).ok());
  auto m = d.Next();
  ASSERT_FALSE(m.ok());
  EXPECT_LT(d.buffered(), 64u) << "nothing beyond the header was kept";
}

TEST(WireTest, FailedDecoderStaysFailed) {
  Decoder d;
  std::vector<std::uint8_t> junk(kHeaderSize, 'G');  // e.g. an HTTP probe "GGGG..."
  ASSERT_TRUE(d.Feed(junk).ok());
  ASSERT_FALSE(d.Next().ok());
  auto good = Encode(SampleAssignment());
  EXPECT_FALSE(d.Feed(good).ok());
  EXPECT_FALSE(d.Next().ok());
}

TEST(WireTest, FloodingWithoutDrainingIsRefused) {
  Decoder d;
  auto frame = Encode(SampleHello());
  exitcodes::Status s;
  int fed = 0;
  while ((s = d.Feed(frame)).ok() && fed < 100000) ++fed;
  EXPECT_FALSE(s.ok());
  EXPECT_LE(d.held(), Decoder::kMaxBuffered);
}

// Heartbeats read one byte out of step with the frames (every read ends one
// byte into the next frame) must not grow the buffer: a drained decoder keeps
// at most a partial frame, however long the stream. Before compaction on every
// Feed this stream grew the buffer by the whole stream (the leader by ~17 MB/s).
TEST(WireTest, MisalignedStreamStaysBounded) {
  const auto hb = Encode(Heartbeat{});
  std::vector<std::uint8_t> stream;
  for (int i = 0; i < 20000; ++i) stream.insert(stream.end(), hb.begin(), hb.end());
  for (std::size_t chunk : {hb.size() + 1, std::size_t{4097}, std::size_t{16 * 1024}}) {
    Decoder d;
    std::size_t decoded = 0, max_held = 0;
    for (std::size_t pos = 0; pos < stream.size(); pos += chunk) {
      auto part = std::span(stream).subspan(pos, std::min(chunk, stream.size() - pos));
      ASSERT_TRUE(d.Feed(part).ok()) << "chunk " << chunk << " at " << pos;
      for (;;) {
        auto m = d.Next();
        ASSERT_TRUE(m.ok()) << m.status().message();
        if (!m->has_value()) break;
        ++decoded;
      }
      EXPECT_LT(d.buffered(), hb.size());
      max_held = std::max(max_held, d.held());
    }
    EXPECT_EQ(decoded, 20000u) << "chunk " << chunk;
    EXPECT_LE(max_held, Decoder::kMaxBuffered) << "chunk " << chunk;
    EXPECT_LE(max_held, 2 * chunk + hb.size()) << "chunk " << chunk;
  }
}

TEST(WireTest, FingerprintSeparatesFieldBoundariesAndValues) {
  LaunchConfig a = {{"ab", "c"}};
  LaunchConfig b = {{"a", "bc"}};
  EXPECT_NE(Fingerprint(a), Fingerprint(b));
  LaunchConfig c = {{"nnodes", "3"}};
  LaunchConfig d = {{"nnodes", "4"}};
  EXPECT_NE(Fingerprint(c), Fingerprint(d));
  EXPECT_EQ(Fingerprint(c), Fingerprint(LaunchConfig{{"nnodes", "3"}}));
}

}  // namespace
}  // namespace trainlet::rendezvous::wire

// The Hello every pod (and the benchmarks' load generator) sends: the launch
// configuration the leader compares, in a fixed order, and its fingerprint.
TEST(LaunchTest, MakeHelloCarriesIdentityAndLaunchConfig) {
  auto h = trainlet::rendezvous::MakeHello({.job_id = "job", .attempt = 2, .index = 7, .nnodes = 16,
                                            .nproc_per_node = 8, .master_port = 29511});
  EXPECT_EQ(h.job_id, "job");
  EXPECT_EQ(h.attempt, 2u);
  EXPECT_EQ(h.index, 7u);
  EXPECT_EQ(h.nproc_per_node, 8u);
  trainlet::rendezvous::wire::LaunchConfig want = {{"nnodes", "16"},
                                                   {"nproc_per_node", "8"},
                                                   {"master_port", "29511"},
                                                   {"max_restarts", "0"},
                                                   {"gang", ""}};
  EXPECT_EQ(h.config, want);
  EXPECT_EQ(h.fingerprint, trainlet::rendezvous::wire::Fingerprint(want));
  EXPECT_TRUE(h.nonce.empty());
  // Pods differing only in their index present the same configuration.
  auto other = trainlet::rendezvous::MakeHello({.job_id = "job", .attempt = 2, .index = 3,
                                                .nnodes = 16, .nproc_per_node = 8,
                                                .master_port = 29511});
  EXPECT_EQ(other.fingerprint, h.fingerprint);
  auto differs = trainlet::rendezvous::MakeHello({.job_id = "job", .attempt = 2, .index = 3,
                                                  .nnodes = 17, .nproc_per_node = 8,
                                                  .master_port = 29511});
  EXPECT_NE(differs.fingerprint, h.fingerprint);
  // --max-restarts, --gang and --preflight must agree too; the generation need not.
  auto restarts = trainlet::rendezvous::MakeHello(
      {.job_id = "job", .index = 3, .nnodes = 16, .nproc_per_node = 8, .master_port = 29511,
       .max_restarts = 2});
  EXPECT_NE(restarts.fingerprint, h.fingerprint);
  auto gang = trainlet::rendezvous::MakeHello(
      {.job_id = "job", .index = 3, .nnodes = 16, .nproc_per_node = 8, .master_port = 29511,
       .gang = "leader=1,workers=15"});
  EXPECT_NE(gang.fingerprint, h.fingerprint);
  auto preflight = trainlet::rendezvous::MakeHello(
      {.job_id = "job", .index = 3, .nnodes = 16, .nproc_per_node = 8, .master_port = 29511,
       .preflight = true});
  EXPECT_EQ(preflight.config.back(), (std::pair<std::string, std::string>("preflight", "1")));
  auto later = trainlet::rendezvous::MakeHello(
      {.job_id = "job", .attempt = 2, .index = 3, .nnodes = 16, .nproc_per_node = 8,
       .master_port = 29511, .generation = 4});
  EXPECT_EQ(later.fingerprint, h.fingerprint);
  EXPECT_EQ(later.generation, 4u);
}
