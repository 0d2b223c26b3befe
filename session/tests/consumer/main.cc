// A consumer of the installed library: a one-rank session, a store round trip.
#include <trainlet/session.h>

#include <cstdio>

int main() {
  auto s = trainlet::Session::Create();
  if (!s) {
    std::fprintf(stderr, "%s\n", s.error.c_str());
    return 1;
  }
  auto& session = **s.value;
  if (!session.store().Set("k", "v", std::chrono::seconds(5))) return 1;
  auto v = session.store().Get("k", std::chrono::seconds(5));
  std::printf("rank %d of %d: %s\n", session.rank(), session.world_size(), v ? v->c_str() : "?");
  return v && *v == "v" ? 0 : 1;
}
