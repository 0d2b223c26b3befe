#include "trainlet/gpu/nccl.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <set>

namespace trainlet::gpu {
namespace {

TEST(RootsForTest, OneRootPer256Ranks) {
  const std::vector<std::pair<std::uint32_t, std::uint32_t>> rows = {
      {0, 1}, {1, 1}, {256, 1}, {257, 2}, {1024, 4}, {1025, 5}, {1u << 20, kMaxUniqueIds}};
  for (auto [world, roots] : rows) EXPECT_EQ(RootsFor(world), roots) << world;
}

TEST(HexTest, RoundTripsEveryByte) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  auto back = FromHex(ToHex(all));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, all);
  EXPECT_FALSE(FromHex("abc").ok());
  EXPECT_FALSE(FromHex("zz").ok());
}

TEST(NcclLoadTest, MissingLibraryIsInfraAndNamesIt) {
  auto n = Nccl::Load("/nonexistent/libnccl.so.2");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().failure_class(), exitcodes::FailureClass::kInfra);
  EXPECT_NE(n.status().message().find("NCCL unavailable"), std::string::npos);
  EXPECT_NE(n.status().message().find("/nonexistent/libnccl.so.2"), std::string::npos);
}

TEST(NcclLoadTest, FreshBinaryIdsTaggedWithTheVersion) {
  ::setenv("FAKE_NCCL_VERSION", "22703", 1);
  auto n = Nccl::Load(FAKE_LIBNCCL);
  ::unsetenv("FAKE_NCCL_VERSION");
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ((*n)->version(), 22703u);
  EXPECT_TRUE((*n)->has_scalable());
  auto a = (*n)->MakeUniqueIds(3);
  auto b = (*n)->MakeUniqueIds(1);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->nccl_version, 22703u);
  ASSERT_EQ(a->ids.size(), 3u);
  std::set<std::string> seen;
  for (const auto& id : a->ids) {
    EXPECT_EQ(id.size(), kUniqueIdBytes);
    EXPECT_EQ(id[0], '\0');  // binary: never handled as a C string
    seen.insert(id);
  }
  seen.insert(b->ids.front());
  EXPECT_EQ(seen.size(), 4u) << "an id was made twice";
}

TEST(WorkerEnvTest, RoundTripsOneAndSeveralIds) {
  auto n = Nccl::Load(FAKE_LIBNCCL);
  ASSERT_TRUE(n.ok());
  for (std::uint32_t count : {1u, 3u}) {
    auto ids = (*n)->MakeUniqueIds(count);
    ASSERT_TRUE(ids.ok());
    std::map<std::string, std::string> env;
    for (auto& [k, v] : WorkerNcclEnv(*ids)) env[k] = v;
    EXPECT_EQ(env.at("TRAINLET_NCCL_VERSION"), "22809");
    EXPECT_EQ(env.at("TRAINLET_NCCL_UNIQUE_ID").size(), 2 * kUniqueIdBytes);
    EXPECT_EQ(env.contains("TRAINLET_NCCL_UNIQUE_IDS"), count > 1);
    auto back = ParseWorkerNcclEnv([&env](const char* k) -> const char* {
      auto it = env.find(k);
      return it == env.end() ? nullptr : it->second.c_str();
    });
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(*back, *ids);  // all 128 bytes of every id
  }
  EXPECT_TRUE(WorkerNcclEnv({}).empty());
}

TEST(WorkerEnvTest, MalformedValuesAreConfigErrors) {
  const std::vector<std::map<std::string, std::string>> bad = {
      {{"TRAINLET_NCCL_UNIQUE_ID", "00ff"}, {"TRAINLET_NCCL_VERSION", "22809"}},
      {{"TRAINLET_NCCL_UNIQUE_ID", std::string(256, 'g')}, {"TRAINLET_NCCL_VERSION", "22809"}},
      {{"TRAINLET_NCCL_UNIQUE_ID", std::string(256, 'a')}},
      {{"TRAINLET_NCCL_UNIQUE_ID", std::string(256, 'a')}, {"TRAINLET_NCCL_VERSION", "2.28"}},
  };
  for (const auto& env : bad) {
    auto r = ParseWorkerNcclEnv([&env](const char* k) -> const char* {
      auto it = env.find(k);
      return it == env.end() ? nullptr : it->second.c_str();
    });
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().failure_class(), exitcodes::FailureClass::kConfig);
  }
}

TEST(NcclConfigTest, NonBlockingInitThroughTheTable) {
  auto n = Nccl::Load(FAKE_LIBNCCL);
  ASSERT_TRUE(n.ok());
  auto ids = (*n)->MakeUniqueIds(1);
  ASSERT_TRUE(ids.ok());
  NcclConfig c = MakeConfig(false);
  Nccl::Comm comm = nullptr;
  // The fake checks the magic and reads `blocking`: non-blocking answers ncclInProgress.
  EXPECT_EQ((*n)->CommInitRank(&comm, 2, ids->ids, 1, &c), kNcclInProgress);
  ASSERT_NE(comm, nullptr);
  EXPECT_EQ((*n)->CommAbort(comm), kNcclSuccess);
  EXPECT_EQ(NcclResultName(6), "ncclRemoteError");
}

}  // namespace
}  // namespace trainlet::gpu
