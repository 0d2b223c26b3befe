"""Hot spares (--spares K): a lost or broken pod's node rank goes to a waiting spare.

3 simulated pods (namespaces + dnsmasq, each agent PID 1), `--nnodes 2 --spares 1
--max-restarts 2`: pods 0 and 1 run workers (RANK 0 and 1), pod 2 waits connected, with no
worker. Workers are `sh` scripts that append "start <generation> <RANK> <time>" to their
pod's marks file, then run 3 s (or fail as told) and exit 0.

- test_sigkilled_pod_is_replaced_by_the_spare: pod 1 SIGKILLed (agent and workers): pod 2's
  worker starts with RANK 1 in generation 1 (the time from the kill is printed; the issue's
  goal is 3 s), training finishes, pods 0 and 2 exit 0.
- test_frozen_pod_is_replaced_by_the_spare: pod 1 SIGSTOPped (its connection open, silent):
  after the heartbeat timeout pod 2 runs RANK 1 in generation 1. Resumed (SIGCONT), pod 1 is
  refused by the leader (its place is taken) and exits 75 (infra) naming spare 2 in its
  termination message; index 1 started again joins as a spare; pods 0, 2 and 1 exit 0.
- test_hardware_failure_swaps_in_the_spare: pod 1's worker prints a GPU fault marker and exits
  1: pod 1 exits with class hardware (the Job counts and recreates that index); pod 2 takes
  RANK 1 in generation 1; pods 0 and 2 exit 0. Who replaced whom: pod 1's termination message
  and last log line name spare 2 on node rank 1 in generation 1 (the leader's Stop), the
  leader's /metrics has trainlet_gang_replacement with those labels (scraped while the
  workers are held), and the leader's and the spare's logs say it.
- test_worker_exit_restarts_in_place_without_a_swap: pod 1's worker exits 1 once: the gang
  restarts in place on the same pods (pod 1 keeps RANK 1 in generation 1), the spare stays a
  spare and exits 0 when the gang finishes.
- test_nccl_watchdog_restarts_in_place_without_a_swap: pod 1's worker prints NCCL's watchdog
  timeout and exits 1 (class infra: every surviving rank prints it when one peer fails, so it
  does not point at a node): restart in place, no swap, as for an exit 1.
- test_spare_frozen_or_cut_briefly_stays_a_spare: the waiting spare (pod 2) is frozen
  (SIGSTOP) for 1.5 s, then its link is cut for 1.5 s (carrier kept: podsim.cut_link), both
  less than the heartbeat timeout
  (2.4 s): it stays a spare (no new generation, no worker), and every pod exits 0.
- test_spare_frozen_past_the_timeout_exits_infra: the waiting spare frozen for 5 s is lost:
  resumed, it exits 75 (infra) within a few seconds, as a frozen pod does, without refusing
  the leader in a loop; the leader says once that it was lost, pods 0 and 1 train on and
  exit 0.
- test_sigterm_to_a_member_hands_its_rank_to_the_spare: pod 1 gets SIGTERM (a graceful
  leave): it exits 143, spare 2 takes RANK 1 with TORCHELASTIC_RESTART_COUNT still 0.
- test_survivor_keeps_its_node_rank_when_the_leader_is_replaced: spare 2 takes pod 1's
  RANK 1, pod 1 comes back as a spare; then the leader's pod is SIGKILLed and replaced: the
  new leader's first round keeps pod 2 on RANK 1 (its hello says it held it: membership.h
  M16) and pod 1 waits, instead of numbering the pods by index (pod 1 on RANK 1 again).
"""

import json
import os
import re
import signal
import subprocess
import time

from harness import BIN, PodsimTestCase

GRACE = 5  # s: a slowterm worker (3 s) stops within it
HEALTH_PORT = 8080  # each pod's own network namespace
SWAP_BOUND = 10.0  # s: generous on a loaded 2-core box; the figure is printed

# usage: sh -c WORKER trainer MARKS MODE   (MODE: ok | fail1 | hw | watchdog, the failing modes
# only in generation 0; slowterm: its SIGTERM trap marks "term" and takes 3 s, a checkpoint).
# While MARKS.hold exists a worker keeps running past its 3 s (at most 60 s).
WORKER = r"""
marks=$1 mode=$2
echo "start $TORCHELASTIC_RESTART_COUNT $RANK $(date +%s.%N)" >> "$marks"
echo "rank $RANK started in generation $TORCHELASTIC_RESTART_COUNT"
trap 'exit 143' TERM
[ "$mode" = slowterm ] && trap 'echo "term $TORCHELASTIC_RESTART_COUNT $RANK $(date +%s.%N)" >> "$marks"; sleep 3; exit 143' TERM
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  case $mode in
  fail1) sleep 1; exit 1 ;;
  hw) sleep 1; echo "CUDA error: uncorrectable ECC error encountered" >&2; exit 1 ;;
  watchdog) sleep 1
    echo "[E ProcessGroupNCCL.cpp:1316] [Rank $RANK] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out." >&2
    exit 1 ;;
  esac
fi
n=0; while [ $n -lt 30 ] || { [ -e "$marks.hold" ] && [ $n -lt 600 ]; }; do sleep 0.1; n=$((n + 1)); done
exit 0
"""


class SparesTest(PodsimTestCase):
    needs_trainlet = True
    standin_skip = "the stand-in has no spares"

    def marks(self, c, i):
        return os.path.join(c.workdir, f"pod{i}.marks")

    def starts(self, c, i):
        """[(generation, RANK, wall time)] of pod i's workers."""
        try:
            with open(self.marks(c, i)) as f:
                return [(int(g), int(r), float(t)) for what, g, r, t in
                        (line.split() for line in f) if what == "start"]
        except FileNotFoundError:
            return []

    def tlog(self, c, i):
        return os.path.join(c.workdir, f"termination-{i}")

    def start_pod(self, c, i, mode="ok", nnodes=2, flags=()):
        cmd = ["sh", "-c", WORKER, "trainer", self.marks(c, i), mode]
        c.start_pod(i, self.trainlet("--termination-log", self.tlog(c, i), "--spares", "1",
                                     "--max-restarts", "2", *flags, nnodes=nnodes,
                                     grace=GRACE, rdzv_timeout=30, cmd=cmd),
                    env={"NODE_NAME": f"node-{i}"})  # the downward API's spec.nodeName

    def start_gang(self, c, modes, nnodes=2, flags=()):
        c.publish_all()
        for i in range(nnodes + 1):
            self.start_pod(c, i, modes.get(i, "ok"), nnodes, flags)
        c.pods[nnodes].wait_for_output(r"a hot spare, waiting without workers", 30, "stderr")
        for i in range(nnodes):
            c.pods[i].wait_for_output(r"rank \d started in generation 0", 30)

    def wait_start(self, c, i, generation, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for g, r, t in self.starts(c, i):
                if g == generation:
                    return r, t
            time.sleep(0.02)
        self.fail(f"pod {i} started no worker in generation {generation}\n" + c.pods[i].tail())

    def verdict(self, c, i):
        with open(self.tlog(c, i)) as f:
            return json.loads(f.read())

    def test_sigkilled_pod_is_replaced_by_the_spare(self):
        with self.cluster(pods=3) as c:
            self.start_gang(c, {})
            self.assertEqual(self.starts(c, 2), [], "the spare ran a worker in generation 0")
            t_kill = time.time()
            c.pods[1].signal(signal.SIGKILL)
            rank, t = self.wait_start(c, 2, 1)
            print(f"\n    spare's worker started {t - t_kill:.2f}s after the kill", end=" ",
                  flush=True)
            self.assertEqual(rank, 1, "the spare did not take the lost pod's RANK")
            self.assertLess(t - t_kill, SWAP_BOUND)
            for i in (0, 2):
                self.assertEqual(c.pods[i].wait(40), 0, c.pods[i].tail())
            self.assertRegex(c.pods[0].stderr(), r"spare pod 2 takes node rank 1 of pod 1")
            # The lost pod is gone: the leader's Stop tells the others who takes its place.
            self.assertRegex(c.pods[2].stderr(), r"generation 1: spare pod 2 \(this pod\) is to "
                                                 r"take the node rank of pod 1")
            self.assertEqual([r for g, r, _ in self.starts(c, 0)], [0, 0])
            self.assertNothingLeft(c)

    def test_frozen_pod_is_replaced_by_the_spare(self):
        with self.cluster(pods=3) as c:
            for i in (0, 2):  # held until the recreated pod 1 has joined as a spare
                open(self.marks(c, i) + ".hold", "w").close()
            self.start_gang(c, {})
            t_stop = time.time()
            c.pods[1].signal(signal.SIGSTOP)  # connection open, silent: lost after 2.4 s
            rank, t = self.wait_start(c, 2, 1)
            print(f"\n    spare's worker started {t - t_stop:.2f}s after the freeze", end=" ",
                  flush=True)
            self.assertEqual(rank, 1)
            self.assertLess(t - t_stop, SWAP_BOUND)
            # Resumed, it learns from the leader that its place is taken, and leaves with
            # its own class (infra: the Job counts and recreates index 1), not as a spare.
            c.pods[1].signal(signal.SIGCONT)
            self.assertEqual(c.pods[1].wait(20), 75, c.pods[1].tail())
            verdict = self.verdict(c, 1)
            self.assertEqual(verdict["class"], "infra", verdict)
            self.assertEqual(verdict.get("replaced_by"),
                             {"spare": 2, "node_rank": 1, "generation": 1}, verdict)
            self.assertEqual([g for g, _, _ in self.starts(c, 1)], [0], "pod 1 ran again")
            # The Job's replacement for index 1 joins as a spare while generation 1 runs.
            cmd = ["sh", "-c", WORKER, "trainer", self.marks(c, 1), "ok"]
            c.start_pod(1, self.trainlet("--termination-log", self.tlog(c, 1), "--spares", "1",
                                         "--max-restarts", "2", nnodes=2, grace=GRACE,
                                         rdzv_timeout=30, cmd=cmd))
            c.pods[1].wait_for_output(r"a hot spare, waiting without workers", 30, "stderr")
            for i in (0, 2):
                os.unlink(self.marks(c, i) + ".hold")
            for i in (0, 2, 1):
                self.assertEqual(c.pods[i].wait(40), 0, c.pods[i].tail())
            self.assertEqual([g for g, _, _ in self.starts(c, 1)], [0], "the spare ran a worker")
            self.assertNothingLeft(c)

    def scrape(self, c, i):
        r = subprocess.run(["ip", "netns", "exec", c.pod_ns(i), BIN, "probe", "metrics",
                            "--health-port", str(HEALTH_PORT)],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=15)
        self.assertEqual(r.returncode, 0, f"probe metrics in pod {i}: {r.stderr}")
        return r.stdout

    def test_hardware_failure_swaps_in_the_spare(self):
        with self.cluster(pods=3) as c:
            for i in (0, 2):  # held until the leader's metrics are read
                open(self.marks(c, i) + ".hold", "w").close()
            self.start_gang(c, {1: "hw"}, flags=("--health-port", str(HEALTH_PORT)))
            rank, _ = self.wait_start(c, 2, 1)
            self.assertEqual(rank, 1)
            self.assertNotEqual(c.pods[1].wait(20), 0)
            verdict = self.verdict(c, 1)
            self.assertEqual(verdict["class"], "hardware", c.pods[1].tail())
            handover = {"spare": 2, "node_rank": 1, "generation": 1}
            self.assertEqual(verdict.get("replaced_by"), handover, verdict)
            last = [line for line in c.pods[1].stderr().splitlines() if line.strip()][-1]
            self.assertIn('"replaced_by":{"generation":1,"node_rank":1,"spare":2}', last)
            metrics = self.scrape(c, 0)
            self.assertIn('\ntrainlet_gang_replacement{generation="1",node_rank="1",spare="2",'
                          'replaced="1"} 1\n', metrics)
            self.assertIn("\ntrainlet_gang_replacements_total 1\n", metrics)
            # The node to drain, named after its pod is gone (only pod 1's hello told it);
            # the one spare is used up (TrainletHardwareFailure, TrainletSparesUsedUp).
            self.assertIn('\ntrainlet_gang_last_culprit{member="1",node_name="node-1",'
                          'class="hardware"} 1\n', metrics)
            self.assertIn("\ntrainlet_gang_spares_configured 1\n", metrics)
            self.assertIn("\ntrainlet_gang_spare 0\n", self.scrape(c, 2))
            for i in (0, 2):
                os.unlink(self.marks(c, i) + ".hold")
            for i in (0, 2):
                self.assertEqual(c.pods[i].wait(40), 0, c.pods[i].tail())
            self.assertEqual([g for g, _, _ in self.starts(c, 1)], [0], "pod 1 ran again")
            self.assertRegex(c.pods[0].stderr(),
                             r"generation 1: spare pod 2 is to take the node rank of pod 1")
            self.assertRegex(c.pods[0].stderr(), r"generation 1: spare pod 2 takes node rank 1 "
                                                 r"of pod 1")
            self.assertRegex(c.pods[2].stderr(), r"spare pod 2 \(this pod\) is to take the node "
                                                 r"rank of pod 1")
            self.assertRegex(c.pods[2].stderr(), r"a spare until now: node rank 1")
            self.assertNothingLeft(c)

    def test_worker_exit_restarts_in_place_without_a_swap(self):
        self.check_restart_in_place("fail1")

    def test_nccl_watchdog_restarts_in_place_without_a_swap(self):
        self.check_restart_in_place("watchdog")

    def test_pod_lost_while_the_gang_restarts_is_replaced_after_the_survivors_hold(self):
        """--nnodes 3: pod 1's worker exits 1 (a restart); pod 2's workers take 3 s to stop
        and pod 2 is SIGKILLed meanwhile (its connection had closed to rejoin, so it was
        never declared lost, and the leader cannot tell it from a survivor still stopping):
        the round holds for it past the 2 s last call until the survivors' hold ends
        (--grace-period 5 + 4.4 s from the round's start, formation_policy.h), then forms
        with spare 3 on RANK 2 instead of waiting --rdzv-timeout (30 s) for pod 2."""
        with self.cluster(pods=4) as c:
            self.start_gang(c, {1: "fail1", 2: "slowterm"}, nnodes=3,
                            flags=("--rdzv-conf", "last_call_timeout=2"))
            c.pods[2].wait_for_output(r"stopping the workers", 30, "stderr")
            deadline = time.monotonic() + 20
            while not any(line.startswith("term ") for line in open(self.marks(c, 2))):
                self.assertLess(time.monotonic(), deadline, "pod 2's worker got no SIGTERM")
                time.sleep(0.02)
            t_kill = time.time()
            c.pods[2].signal(signal.SIGKILL)
            rank, t = self.wait_start(c, 3, 1, timeout=25)
            print(f"\n    spare's worker started {t - t_kill:.2f}s after the kill", end=" ",
                  flush=True)
            self.assertEqual(rank, 2, "the spare did not take the lost pod's RANK")
            self.assertLess(t - t_kill, 15, "the round waited for the lost pod")
            for i in (0, 1, 3):
                self.assertEqual(c.pods[i].wait(40), 0, c.pods[i].tail())
            self.assertRegex(c.pods[0].stderr(), r"spare pod 3 takes node rank 2 of pod 2")
            self.assertNothingLeft(c)

    def hold_workers(self, c, indices):
        for i in indices:
            open(self.marks(c, i) + ".hold", "w").close()

    def release_workers(self, c, indices):
        for i in indices:
            os.unlink(self.marks(c, i) + ".hold")

    def test_spare_frozen_or_cut_briefly_stays_a_spare(self):
        with self.cluster(pods=3) as c:
            self.hold_workers(c, (0, 1))
            self.start_gang(c, {})
            time.sleep(1.0)  # a few heartbeats both ways
            c.pods[2].signal(signal.SIGSTOP)
            time.sleep(1.5)
            c.pods[2].signal(signal.SIGCONT)
            time.sleep(3.0)  # past a timeout counted from before the freeze
            c.cut_link(2, carrier=False)  # a blip on the path: the pod's eth0 stays up
            time.sleep(1.5)
            c.restore_link(2)
            time.sleep(3.0)
            self.assertTrue(c.pods[2].running(), c.pods[2].tail())
            self.release_workers(c, (0, 1))
            for i in range(3):
                self.assertEqual(c.pods[i].wait(40), 0, c.pods[i].tail())
            self.assertEqual(self.starts(c, 2), [], "the spare ran a worker")
            self.assertEqual([g for g, _, _ in self.starts(c, 0)], [0], "a new generation")
            self.assertNotRegex(c.pods[0].stderr(), r"pod 2 (was )?lost")
            self.assertNothingLeft(c)

    def test_spare_frozen_past_the_timeout_exits_infra(self):
        with self.cluster(pods=3) as c:
            self.hold_workers(c, (0, 1))
            self.start_gang(c, {})
            time.sleep(1.0)
            c.pods[2].signal(signal.SIGSTOP)
            time.sleep(5.0)  # lost after 2.4 s
            t_cont = time.time()
            c.pods[2].signal(signal.SIGCONT)
            code = c.pods[2].wait(15)
            took = time.time() - t_cont
            print(f"\n    frozen spare: exit {code} {took:.2f}s after it resumed", end=" ",
                  flush=True)
            self.assertEqual(code, 75, c.pods[2].tail(30))
            self.assertEqual(self.verdict(c, 2)["class"], "infra", c.pods[2].tail())
            self.assertLess(took, 10.0, "the resumed spare outlived a few retries")
            self.assertLessEqual(len(re.findall(r"pod 2 joined from", c.pods[0].stderr())), 1,
                                 "the leader and the spare refused each other in a loop:\n"
                                 + c.pods[0].tail(30))
            self.release_workers(c, (0, 1))
            for i in (0, 1):
                self.assertEqual(c.pods[i].wait(40), 0, c.pods[i].tail())
            self.assertEqual(self.starts(c, 2), [], "the spare ran a worker")
            self.assertNothingLeft(c)

    def check_restart_in_place(self, mode):
        with self.cluster(pods=3) as c:
            self.start_gang(c, {1: mode})
            rank, _ = self.wait_start(c, 1, 1)
            self.assertEqual(rank, 1, "pod 1 lost its place")
            for i in range(3):
                self.assertEqual(c.pods[i].wait(40), 0, c.pods[i].tail())
            self.assertEqual(self.starts(c, 2), [], "the spare ran a worker")
            self.assertNotRegex(c.pods[0].stderr(), r"takes node rank")
            self.assertNothingLeft(c)

    def test_sigterm_to_a_member_hands_its_rank_to_the_spare(self):
        """Graceful leave (membership.h M8): pod 1 gets SIGTERM (a drained node, a deleted
        pod): it tells the leader it leaves and exits 143; spare 2 takes RANK 1 in the next
        generation with no restart counted (TORCHELASTIC_RESTART_COUNT stays 0)."""
        with self.cluster(pods=3) as c:
            for i in (0, 2):
                open(self.marks(c, i) + ".hold", "w").close()
            self.start_gang(c, {})
            t_term = time.time()
            c.pods[1].signal(signal.SIGTERM)
            self.assertEqual(c.pods[1].wait(20), 143, c.pods[1].tail())
            deadline = time.monotonic() + 30
            while not self.starts(c, 2):
                self.assertLess(time.monotonic(), deadline, c.pods[2].tail())
                time.sleep(0.02)
            restarts, rank, t = self.starts(c, 2)[0]
            print(f"\n    spare's worker started {t - t_term:.2f}s after the SIGTERM", end=" ",
                  flush=True)
            self.assertEqual((restarts, rank), (0, 1), "the spare: RANK 1, no restart counted")
            # The leader's next worker starts as the gang forms, maybe a moment after the
            # spare's (seen 11 ms later with a TSan build).
            while len(self.starts(c, 0)) < 2:
                self.assertLess(time.monotonic(), deadline, c.pods[0].tail())
                time.sleep(0.02)
            self.assertEqual([(g, r) for g, r, _ in self.starts(c, 0)], [(0, 0), (0, 0)])
            self.assertRegex(c.pods[0].stderr(), r"pod 1 leaves; a spare takes each node rank")
            self.assertRegex(c.pods[0].stderr(), r"spare pod 2 takes node rank 1 of pod 1")
            for i in (0, 2):
                os.unlink(self.marks(c, i) + ".hold")
            for i in (0, 2):
                self.assertEqual(c.pods[i].wait(40), 0, c.pods[i].tail())
            self.assertNothingLeft(c)

    def test_survivor_keeps_its_node_rank_when_the_leader_is_replaced(self):
        with self.cluster(pods=3) as c:
            self.hold_workers(c, (0, 1, 2))
            self.start_gang(c, {})
            c.pods[1].signal(signal.SIGKILL)  # spare 2 takes RANK 1 (a counted restart)
            self.assertEqual(self.wait_start(c, 2, 1)[0], 1, c.pods[2].tail())
            c.pods[1].wait(10)
            self.start_pod(c, 1)  # the Job's replacement for index 1 waits as a spare
            c.pods[1].wait_for_output(r"a hot spare, waiting without workers", 30, "stderr")
            c.pods[0].signal(signal.SIGKILL)  # the leader's pod, and the Job recreates it
            c.pods[0].wait(10)
            c.pods[2].wait_for_output(r"lost the leader", 20, "stderr")
            self.start_pod(c, 0)
            rank, _ = self.wait_start(c, 2, 2)
            self.assertEqual(rank, 1, "the survivor's node rank moved when the leader was "
                             "replaced\n" + c.pods[0].tail(30))
            self.assertEqual(self.wait_start(c, 0, 2)[0], 0, c.pods[0].tail())
            self.release_workers(c, (0, 1, 2))
            for i in (0, 2, 1):
                self.assertEqual(c.pods[i].wait(40), 0, c.pods[i].tail())
            self.assertEqual([g for g, _, _ in self.starts(c, 1)], [0],
                             "the recreated pod 1 ran a worker: it took the survivor's place")
            self.assertNothingLeft(c)
