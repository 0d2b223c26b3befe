// tests/sim/world.h — the simulated world: clock and event queue, network,
// pods (agent processes), workers, control plane. One thread; deterministic
// for a schedule (sim.h). The ends (ends.h) and the pure machines run inside.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ends.h"
#include "invariants.h"
#include "sim.h"
#include "trainlet/agent/pod/gang_policy.h"
#include "trainlet/agent/run/supervision_policy.h"
#include "trainlet/rendezvous/wire.h"

namespace trainlet::sim {

using Ms = std::int64_t;
using InstId = std::uint32_t;

// The reason's start of a rendezvous that ran out of time (--rdzv-timeout), in exit records.
inline constexpr const char* kRdzvTimeout = "rdzv_timeout";

enum class Ev : std::uint8_t {
  kFault, kDeliver, kConnect, kWorkerExit, kGrace, kVerdict, kSettle, kRound, kDetect,
  kRecreate, kDeadline, kListen, kResume, kReportSent, kKubeletKill, kCoreTimer, kEnd,
};

struct Event {
  Ms t = 0;
  std::uint64_t seq = 0;
  Ev kind = Ev::kEnd;
  std::uint32_t a = 0;  // an instance, a connection, a fault's position
  std::uint32_t b = 0;  // an epoch (timers of an old generation are dropped), a direction
  std::int64_t c = 0;   // a worker's rank and code, a delay
};
struct Later {
  bool operator()(const Event& x, const Event& y) const {
    return x.t != y.t ? x.t > y.t : x.seq > y.seq;
  }
};

// One TCP connection between a member and the leader. Frames (and the FIN,
// an empty frame) travel in order per direction; dir 0: to the leader.
struct Conn {
  InstId member = 0, leader = 0;
  bool open[2] = {true, true};  // each side's view: [0] the leader's, [1] the member's
  std::deque<std::vector<std::uint8_t>> queue[2];
  Ms last[2] = {0, 0};
  rendezvous::wire::Decoder decoder[2];
  std::uint32_t silence = 0;  // epoch of the silence being detected (0: none)
  std::uint64_t tag = 0;      // the member's Tag and its connection's number: keys its draws
  std::uint64_t sent[2] = {0, 0};
  std::uint32_t silences = 0;
};

struct Inst {
  InstId id = 0;
  std::uint32_t key = 0;
  std::uint32_t nth = 0;  // processes its index had before it
  std::uint32_t conns = 0;  // connections it opened
  bool alive = true, exited = false, frozen = false, stranger = false, hang = false;
  bool term = false;  // got SIGTERM
  Ms frozen_at = 0, frozen_until = 0;
  std::unique_ptr<agent::GangPolicy> gang;
  std::unique_ptr<agent::SupervisionPolicy> sup;
  std::vector<bool> rank_alive;
  std::uint32_t wepoch = 0;       // workers' generation
  Ms stop_ms = 100;               // how long its workers take to stop
  std::uint32_t timer_epoch = 0;  // verdict/settle/deadline timers of a generation
  std::vector<std::pair<ConnId, int>> deferred;  // frames that arrived while frozen
  bool deferred_term = false;
  std::unique_ptr<SimMemberEnd> member;
  std::unique_ptr<SimLeaderEnd> leader;
};

class World {
 public:
  explicit World(const Schedule& s, bool trace);
  RunResult Run();

  // Services for the ends.
  Ms now() const { return now_; }
  const SimConfig& config() const { return cfg_; }
  // A draw keyed by what it is for, not by how many draws came before: dropping a
  // fault from a schedule leaves the other timings as they were (shrinking).
  std::uint64_t Draw(std::uint64_t purpose, std::uint64_t a, std::uint64_t b = 0) const;
  // Names an agent process by its index and how many processes that index had before.
  std::uint64_t Tag(InstId i) const { return (std::uint64_t{insts_[i]->key} << 20) | insts_[i]->nth; }
  Inst& inst(InstId i) { return *insts_[i]; }
  Conn& conn(ConnId c) { return conns_[c]; }
  void At(Ms delay, Ev kind, std::uint32_t a, std::uint32_t b = 0, std::int64_t c = 0);
  void Send(ConnId c, int dir, const rendezvous::wire::Message& m);
  // An encoded frame (a real core's Send), after the frames sent before it.
  void SendBytes(ConnId c, int dir, std::vector<std::uint8_t> bytes);
  void Close(ConnId c, int side);  // `side` closes (0 leader, 1 member): FIN to the other
  void Connect(InstId member);     // a connect attempt to the current leader
  std::optional<InstId> Leader() const;  // the live instance at index 0
  // Feeds pod `i`'s GangPolicy; its end carries the actions out. Returns them.
  agent::GangActions Feed(InstId i, const agent::GangEvent& e);
  void StartWorkers(InstId i);
  void StopWorkers(InstId i);
  void Exit(InstId i, int code, const std::string& why = "");
  void Record(invariants::Record r);
  void Note(const std::string& line);
  bool tracing() const { return trace_; }
  bool LinkCut(std::uint32_t key) const { return cut_until_.count(key) && cut_until_.at(key) > now_; }
  std::string JobId() const { return "job"; }

 private:
  void Dispatch(const Event& e);
  void QueueFin(ConnId c, int dir);
  bool Postpone(const Event& e);
  void Deliver(ConnId c, int dir);
  void ApplyFault(std::size_t k);
  void CutLink(std::uint32_t pod, Ms ms);
  void TermWorkload();
  std::vector<ConnId> OpenLinksOf(InstId i) const;
  void OnWorkerExit(InstId i, std::uint32_t wepoch, int rank, int code,
                    exitcodes::FailureClass cls = exitcodes::FailureClass::kWorker);
  void ApplySup(InstId i, const agent::Actions& a);
  void Term(InstId i, const char* why);
  void Kill(InstId i, bool fin);
  void Freeze(InstId i, Ms ms);
  bool AssignmentWaits(InstId i) const;
  void Resume(InstId i);
  void Silence(ConnId c);
  void Detect(ConnId c, std::uint32_t epoch);
  void UserTimeout(Conn& k, ConnId c);
  InstId Spawn(std::uint32_t key, bool stranger);
  std::optional<InstId> Current(std::uint32_t key) const;
  void EndOfRun();

  SimConfig cfg_;
  std::vector<Fault> faults_;
  bool trace_;
  Ms now_ = 0;
  std::uint64_t seq_ = 0;
  std::priority_queue<Event, std::vector<Event>, Later> queue_;
  std::uint64_t world_seed_;
  std::map<std::uint32_t, std::uint32_t> spawned_;  // index -> processes so far
  std::vector<std::unique_ptr<Inst>> insts_;
  std::deque<Conn> conns_;  // stable references; ConnId 0 unused
  std::map<std::uint32_t, InstId> current_;  // key -> its latest instance
  std::map<std::uint32_t, Ms> cut_until_;    // key -> its link to the leader cut until
  Ms late_listener_ = 0;
  int recreations_left_ = 6;
  bool ended_ = false;       // no pod is created any more
  bool stopped_all_ = false;  // every pod was SIGTERMed
  std::vector<int> codes_;  // exit codes of the gang's pods
  std::set<std::uint32_t> completed_;  // indices whose pod exited 0
  bool JobRuns() const { return !ended_; }
  invariants::Checker checker_;
  RunResult result_;

  friend class StandInMemberEnd;
  friend class StandInLeaderEnd;
};

}  // namespace trainlet::sim
