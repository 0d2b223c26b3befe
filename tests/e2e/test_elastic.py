"""Elastic `--nnodes MIN:MAX` with torchrun's meaning (agent/include/trainlet/agent/
formation_policy.h; torch/distributed/elastic/rendezvous/dynamic_rendezvous.py).

Simulated pods (namespaces + dnsmasq, each agent PID 1), `--nnodes 2:3 --max-restarts 2
--rdzv-conf last_call_timeout=1`. Workers are `sh` scripts that append "start
<TORCHELASTIC_RESTART_COUNT> <RANK> <WORLD_SIZE> <wall time>" to their pod's marks file and
run until the test writes CTL/done (then exit 0).

- test_join_grows_and_loss_shrinks: pods 0 and 1 form WORLD_SIZE 2 once the last call ends;
  pod 2 joins -> every pod runs again with WORLD_SIZE 3, ranks in index order, and the join
  is no restart (TORCHELASTIC_RESTART_COUNT stays 0); pod 2 SIGKILLed -> pods 0 and 1 run
  again with WORLD_SIZE 2 and restart count 1 (a loss counts); all exit 0.
- test_a_survivor_slow_to_stop_holds_the_round_past_the_last_call: `--grace-period 5`, pod
  1's worker ignores SIGTERM when pod 2's join grows the gang: the next round waits for pod 1
  past the 1 s last call (it is alive, stopping its workers) and forms WORLD_SIZE 3; all
  exit 0 (before: formed without it, and pod 1 was refused and exited 75).
- test_ranks_follow_indices_not_join_order: pods 0 and 2 form WORLD_SIZE 2 (pod 2 on
  RANK 1); pod 1 joins -> pod 1 takes RANK 1 and pod 2 RANK 2: index order, not join order.
- test_join_at_max_waits_as_a_spare: `--nnodes 2:3 --spares 1`, pods 0-2 form WORLD_SIZE 3
  after the last call; pod 3 joins while the generation runs: at MAX it waits as a spare
  (no worker, no new generation) and exits 0 when the gang finishes.
- test_frozen_pod_left_behind_exits_infra: pods 0-2 train (WORLD_SIZE 3); pod 2 SIGSTOPped:
  pods 0 and 1 go on with WORLD_SIZE 2 (restart count 1); pod 2, resumed, is refused (it was
  declared lost and the gang went on without it: admission rule 8) and exits 75 (infra), the
  one counted culprit, instead of joining again as a new generation (found by the chaos soak,
  elastic_loss_freeze).
- test_by_arrival_join_grows_and_loss_shrinks: torchrun's elastic c10d line without indices
  (`--nnodes 2:3 --rdzv-backend c10d --rdzv-endpoint <pod 0>:29400`, no JOB_COMPLETION_INDEX):
  pod 0 (the endpoint's host) leads, pod 1 gets index 1, WORLD_SIZE 2; pod 2 joins -> index 2,
  generation with WORLD_SIZE 3 (no restart); pod 1 SIGKILLed -> pods 0 and 2 run with
  WORLD_SIZE 2, pod 2 on RANK 1 (dense), restart count 1; a new pod 1 takes the freed index 1
  (WORLD_SIZE 3, pod 2 back on RANK 2); all still running exit 0.
- test_last_call_ending_with_the_deadline_forms: `--rdzv-timeout 4` and
  `last_call_timeout=4` (torch's defaults, 30 s each, end together): pods 0 and 1 form
  WORLD_SIZE 2 a moment before the deadline instead of timing out.
- test_below_min_waits_then_exits_infra: pods 0 and 1 train; pod 1 SIGKILLed -> pod 0 is
  below MIN, waits --rdzv-timeout, then exits 75 (infra) saying what was missing.
- Graceful leaves (agent/include/trainlet/agent/pod/membership.h M7-M11): SIGTERM to pod 2
  of 3 -> it exits 143, pods 0 and 1 go on with WORLD_SIZE 2 and no restart counted; at MIN
  the gang stops (143 and 76); the leader leaving -> the members wait for a new pod 0 and
  keep their restart count; SIGTERM to every pod 0.2 s apart -> every pod exits 143.

Skipped for the python stand-in (it has no elastic sizes).
"""

import json
import os
import signal
import time
import unittest

from harness import BIN, PodsimTestCase

GRACE = 2

WORKER = r"""
marks=$1 ctl=$2 slow=$3
echo "start $TORCHELASTIC_RESTART_COUNT $RANK $WORLD_SIZE $(date +%s.%N)" >> "$marks"
echo "rank $RANK of $WORLD_SIZE started (restarts $TORCHELASTIC_RESTART_COUNT)"
if [ -n "$slow" ] && [ -e "$slow" ]; then
  rm -f "$slow"; trap '' TERM  # this start ignores SIGTERM: the grace period's SIGKILL ends it
else
  trap 'exit 143' TERM
fi
while [ ! -e "$ctl/done" ]; do sleep 0.1; done
exit 0
"""


def elastic_refused():
    """Why the binary cannot run these tests, or None."""
    if not BIN or os.path.basename(BIN) == "standin_trainlet.py":
        return "needs the real trainlet"
    return None


class ElasticTest(PodsimTestCase):
    needs_trainlet = True

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        why = elastic_refused()
        if why:
            raise unittest.SkipTest(why)

    def marks(self, c, i):
        return os.path.join(c.workdir, f"pod{i}.marks")

    def ctl(self, c):
        path = os.path.join(c.workdir, "ctl")
        os.makedirs(path, exist_ok=True)
        return path

    def starts(self, c, i):
        """[(restart count, RANK, WORLD_SIZE)] of pod i's workers, in start order."""
        try:
            with open(self.marks(c, i)) as f:
                return [(int(n), int(r), int(w)) for _, n, r, w, _ in
                        (line.split() for line in f)]
        except FileNotFoundError:
            return []

    def start(self, c, i, rdzv_timeout=30, spares=0, arrival=False, last_call=1, grace=GRACE,
              slow=""):
        """Starts pod i; `arrival`: no index, pod 0's address as the c10d endpoint; `slow`:
        a file whose presence makes the pod's next worker start ignore SIGTERM."""
        cmd = ["sh", "-c", WORKER, "trainer", self.marks(c, i), self.ctl(c), slow]
        flags = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"{c.pod_ip(0)}:29400",
                 "--rdzv-id", "42"] if arrival else []
        c.start_pod(i, self.trainlet("--termination-log", os.path.join(c.workdir, f"tlog{i}"),
                                     "--max-restarts", "2", "--rdzv-conf",
                                     f"last_call_timeout={last_call}", "--spares", str(spares),
                                     *flags,
                                     nnodes="2:3", grace=grace, rdzv_timeout=rdzv_timeout,
                                     cmd=cmd),
                    env={"JOB_COMPLETION_INDEX": None} if arrival else None)

    def wait_starts(self, c, i, count, timeout=40):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.starts(c, i)
            if len(s) >= count:
                return s[count - 1]
            time.sleep(0.05)
        self.fail(f"pod {i} started {len(self.starts(c, i))} workers, want {count}\n"
                  + c.pods[i].tail())

    def form_two(self, c, first):
        """Pods `first` start and form generation 0 with WORLD_SIZE 2 after the last call."""
        c.publish_all()
        for i in first:
            self.start(c, i)
        for rank, i in enumerate(first):
            self.assertEqual(self.wait_starts(c, i, 1), (0, rank, 2), f"pod {i} first")

    def test_join_grows_and_loss_shrinks(self):
        with self.cluster(pods=3) as c:
            self.form_two(c, (0, 1))
            self.start(c, 2)  # a late joiner: admitted at the next generation
            for i in range(3):
                self.assertEqual(self.wait_starts(c, i, 2 if i < 2 else 1), (0, i, 3),
                                 f"pod {i} after the join")
            c.pods[2].signal(signal.SIGKILL)  # a loss: the rest go on with 2, counted
            for i in (0, 1):
                self.assertEqual(self.wait_starts(c, i, 3), (1, i, 2), f"pod {i} after the loss")
            open(os.path.join(self.ctl(c), "done"), "w").close()
            for i in (0, 1):
                self.assertExit(c.pods[i], 40, 0)
            c.pods[2].wait(10)
            self.assertNothingLeft(c)

    def test_a_survivor_slow_to_stop_holds_the_round_past_the_last_call(self):
        """The last call (1 s) is shorter than the grace period (5 s): pod 1's worker
        ignores SIGTERM when pod 2's join grows the gang, and stops only at the grace
        period's SIGKILL. The next round has MIN (pods 0 and 2) after a second, but pod 1,
        still connected and stopping its workers, holds it: it forms with all three
        (WORLD_SIZE 3, no restart counted) and every pod exits 0. (Before: the round formed
        at the last call without pod 1, which came back to a generation that had planned
        it out, was refused and exited 75: a counted exit with no failure.)"""
        grace = 5
        with self.cluster(pods=3) as c:
            c.publish_all()
            slow = os.path.join(self.ctl(c), "slow1")
            open(slow, "w").close()
            for i in (0, 1):
                self.start(c, i, grace=grace, slow=slow if i == 1 else "")
            for i in (0, 1):
                self.assertEqual(self.wait_starts(c, i, 1), (0, i, 2), f"pod {i} first")
            t_join = time.time()
            self.start(c, 2, grace=grace)
            for i in range(3):
                self.assertEqual(self.wait_starts(c, i, 2 if i < 2 else 1, timeout=grace + 20),
                                 (0, i, 3), f"pod {i} after the join")
            took = time.time() - t_join
            print(f"\n    generation 1 with WORLD_SIZE 3 {took:.1f}s after pod 2 started",
                  end=" ", flush=True)
            self.assertTrue(c.pods[1].running(), c.pods[1].tail())
            self.finish(c, range(3))
            self.assertNothingLeft(c)

    def test_ranks_follow_indices_not_join_order(self):
        with self.cluster(pods=3) as c:
            self.form_two(c, (0, 2))  # pod 2 on RANK 1
            self.start(c, 1)  # joins last, yet its index puts it before pod 2
            self.assertEqual(self.wait_starts(c, 1, 1), (0, 1, 3))
            self.assertEqual(self.wait_starts(c, 2, 2), (0, 2, 3))
            self.assertEqual(self.wait_starts(c, 0, 2), (0, 0, 3))
            open(os.path.join(self.ctl(c), "done"), "w").close()
            for i in range(3):
                self.assertExit(c.pods[i], 40, 0)
            self.assertNothingLeft(c)

    def test_join_at_max_waits_as_a_spare(self):
        with self.cluster(pods=4) as c:
            c.publish_all()
            for i in range(3):
                self.start(c, i, spares=1)
            for i in range(3):
                self.assertEqual(self.wait_starts(c, i, 1), (0, i, 3))
            self.start(c, 3, spares=1)
            c.pods[3].wait_for_output(r"a hot spare, waiting without workers", 30, "stderr")
            self.assertRegex(c.pods[0].stderr(), r"pod 3 joined while generation 0 runs")
            open(os.path.join(self.ctl(c), "done"), "w").close()
            for i in range(4):
                self.assertExit(c.pods[i], 40, 0)
            self.assertEqual(self.starts(c, 3), [], "the spare ran a worker")
            for i in range(3):
                self.assertEqual(len(self.starts(c, i)), 1, f"pod {i} restarted for a spare")
            self.assertNothingLeft(c)

    def test_frozen_pod_left_behind_exits_infra(self):
        with self.cluster(pods=3) as c:
            c.publish_all()
            for i in range(3):
                self.start(c, i)
            for i in range(3):
                self.assertEqual(self.wait_starts(c, i, 1), (0, i, 3), f"pod {i} first")
            c.pods[2].signal(signal.SIGSTOP)  # connection open, silent: lost after 2.4 s
            for i in (0, 1):
                self.assertEqual(self.wait_starts(c, i, 2), (1, i, 2), f"pod {i} after the loss")
            c.pods[2].signal(signal.SIGCONT)
            self.assertExit(c.pods[2], 30, 75)
            with open(os.path.join(c.workdir, "tlog2")) as f:
                verdict = json.loads(f.read())
            self.assertEqual(verdict["class"], "infra")
            self.assertIn("went on without it", c.pods[2].stderr())
            time.sleep(1)
            for i in (0, 1):
                self.assertEqual(len(self.starts(c, i)), 2, f"pod {i} started again")
            open(os.path.join(self.ctl(c), "done"), "w").close()
            for i in (0, 1):
                self.assertExit(c.pods[i], 40, 0)
            self.assertNothingLeft(c)

    def test_by_arrival_join_grows_and_loss_shrinks(self):
        with self.cluster(pods=3) as c:
            c.publish_all()
            self.start(c, 0, arrival=True)
            c.pods[0].wait_for_output(r"ranks by arrival: this agent leads", 10, "stderr")
            self.start(c, 1, arrival=True)
            self.assertEqual(self.wait_starts(c, 0, 1), (0, 0, 2), "pod 0 first")
            self.assertEqual(self.wait_starts(c, 1, 1), (0, 1, 2), "pod 1 first")
            self.start(c, 2, arrival=True)  # joins while generation 0 runs: grows the gang
            for i in range(3):
                self.assertEqual(self.wait_starts(c, i, 2 if i < 2 else 1), (0, i, 3),
                                 f"pod {i} after the join")
            self.assertRegex(c.pods[2].stderr(), r"index 2 for its next generation")
            c.pods[1].signal(signal.SIGKILL)  # a loss: pods 0 and 2 go on, ranks dense
            self.assertEqual(self.wait_starts(c, 0, 3), (1, 0, 2), "pod 0 after the loss")
            self.assertEqual(self.wait_starts(c, 2, 2), (1, 1, 2), "pod 2 after the loss")
            c.pods[1].wait(10)
            self.start(c, 1, arrival=True)  # a new pod: takes the lost pod's index 1
            self.assertEqual(self.wait_starts(c, 1, 3), (1, 1, 3), "the new pod 1")
            self.assertEqual(self.wait_starts(c, 2, 3), (1, 2, 3), "pod 2 after the rejoin")
            self.assertEqual(self.wait_starts(c, 0, 4), (1, 0, 3), "pod 0 after the rejoin")
            open(os.path.join(self.ctl(c), "done"), "w").close()
            for i in range(3):
                self.assertExit(c.pods[i], 40, 0)
            self.assertNothingLeft(c)

    def test_last_call_ending_with_the_deadline_forms(self):
        # torch's defaults end the last call with the deadline (30 s each); here 4 s each.
        # The round forms a moment before it (formation_policy.h), not "2 pod(s) joined, at
        # least 2 needed" from a member whose own deadline came first.
        with self.cluster(pods=2) as c:
            c.publish_all()
            for i in (0, 1):
                self.start(c, i, rdzv_timeout=4, last_call=4)
            for i in (0, 1):
                self.assertEqual(self.wait_starts(c, i, 1, timeout=20), (0, i, 2), f"pod {i}")
            open(os.path.join(self.ctl(c), "done"), "w").close()
            for i in (0, 1):
                self.assertExit(c.pods[i], 30, 0)
            self.assertNothingLeft(c)

    def test_below_min_waits_then_exits_infra(self):
        with self.cluster(pods=2) as c:
            c.publish_all()
            for i in (0, 1):
                self.start(c, i, rdzv_timeout=5)
            self.wait_starts(c, 0, 1)
            c.pods[1].signal(signal.SIGKILL)
            self.assertExit(c.pods[0], 40, 75)
            with open(os.path.join(c.workdir, "tlog0")) as f:
                verdict = json.loads(f.read())
            self.assertEqual(verdict["class"], "infra")
            self.assertIn("at least 2", verdict.get("reason", ""))
            c.pods[1].wait(10)
            self.assertNothingLeft(c)

    def start_all(self, c, n):
        """Pods 0..n-1 start and form generation 0 with WORLD_SIZE n."""
        c.publish_all()
        for i in range(n):
            self.start(c, i)
        for i in range(n):
            self.assertEqual(self.wait_starts(c, i, 1), (0, i, n), f"pod {i} first")

    def finish(self, c, pods):
        """The workers finish: pods `pods` exit 0."""
        open(os.path.join(self.ctl(c), "done"), "w").close()
        for i in pods:
            self.assertExit(c.pods[i], 40, 0)

    def test_sigterm_above_min_leaves_without_a_restart(self):
        """A graceful leave (membership.h M9): pod 2 of 3 gets SIGTERM (a scale-down, a
        deleted pod, a drained node): it exits 143, and pods 0 and 1 go on with WORLD_SIZE 2
        and TORCHELASTIC_RESTART_COUNT still 0 (a leave is no restart); all others exit 0."""
        with self.cluster(pods=3) as c:
            self.start_all(c, 3)
            c.pods[2].signal(signal.SIGTERM)
            self.assertExit(c.pods[2], 20, 143)
            for i in (0, 1):
                self.assertEqual(self.wait_starts(c, i, 2), (0, i, 2), f"pod {i} after the leave")
            self.assertRegex(c.pods[0].stderr(), r"pod 2 leaves the gang")
            self.assertRegex(c.pods[0].stderr(), r"the gang goes on with 2 pods")
            self.finish(c, (0, 1))
            self.assertNothingLeft(c)

    def test_sigterm_at_min_stops_the_gang(self):
        """At MIN with no spare (membership.h M10) a leave stops the gang as before: the
        leaver exits 143, the other pod 76 (peer_failed)."""
        with self.cluster(pods=2) as c:
            self.start_all(c, 2)
            c.pods[1].signal(signal.SIGTERM)
            self.assertExit(c.pods[1], 20, 143)
            self.assertExit(c.pods[0], 20, 76)
            self.assertNothingLeft(c)

    def test_leader_sigterm_members_wait_for_its_replacement(self):
        """The leader leaving (membership.h M11, M15): pod 2 is lost first (a counted
        restart: pods 0 and 1 run with count 1); then pod 0 gets SIGTERM and exits 143; pod 1
        rejoins and waits; a new pod 0 (the Job's replacement, generation 0) leads, and both
        run with WORLD_SIZE 2 and the count still 1: neither the leave nor the new leader
        starts it over."""
        with self.cluster(pods=3) as c:
            self.start_all(c, 3)
            c.pods[2].signal(signal.SIGKILL)
            for i in (0, 1):
                self.assertEqual(self.wait_starts(c, i, 2), (1, i, 2), f"pod {i} after the loss")
            c.pods[0].signal(signal.SIGTERM)
            self.assertExit(c.pods[0], 20, 143)
            c.pods[1].wait_for_output(r"the leader \(pod 0\) leaves", 20, "stderr")
            os.unlink(self.marks(c, 0))
            self.start(c, 0)
            self.assertEqual(self.wait_starts(c, 0, 1), (1, 0, 2), "the new leader")
            self.assertEqual(self.wait_starts(c, 1, 3), (1, 1, 2), "pod 1 after the new leader")
            self.finish(c, (0, 1))
            c.pods[2].wait(10)
            self.assertNothingLeft(c)

    def test_sigterm_to_every_pod_ends_every_pod_with_143(self):
        """A preempted workload: the kubelet's SIGTERMs reach the pods milliseconds apart.
        Leaves close together are decided once (the settle window), and a pod that gets its
        own stop signal before it concludes exits 143: every pod exits 143, none 75 or 76."""
        with self.cluster(pods=3) as c:
            self.start_all(c, 3)
            for i in (2, 1, 0):
                c.pods[i].signal(signal.SIGTERM)
                time.sleep(0.2)
            for i in range(3):
                self.assertExit(c.pods[i], 20, 143)
            self.assertNothingLeft(c)
