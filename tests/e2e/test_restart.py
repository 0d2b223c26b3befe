"""In-place restarts (--max-restarts) and a Job successPolicy, in 4 simulated pods.

After a retriable failure (a worker's own exit code, a lost pod) every agent stops its
workers and joins the rendezvous again for a new generation; the pods never exit. The
trainers see TORCHELASTIC_RESTART_COUNT = the generation. A replaced pod (same index, new
IP) joins the next generation; when the leader's pod is replaced, the members re-resolve
its name. bug (42) is never restarted; once the restarts are spent the exits follow the
contract (the culprit its own class, the others 76).

Workers are `sh` scripts that append "<event> <wall time> <generation>" to
<workdir>/pod<i>.marks, so a test can tell the generations apart:
  * pod 2's worker exits 3 in generation 0: every pod runs generation 1 and exits 0;
  * pod 1's worker always exits 3 with --max-restarts 1: generations 0 and 1, then
    pod 1 exits 3 and the others 76;
  * pod 3's worker exits 42 with --max-restarts 2: no restart, 42 and 76s;
  * pod 0 (the leader) SIGKILLed and started again with a new IP: the members rejoin it
    by name, generation 1 completes everywhere; the same for a member (pod 2);
  * real DDP (train.py, gloo): rank 2 dies in generation 0, generation 1 trains;
  * successPolicy: the leader and pod 1 finish, then the Job controller stops pods 2, 3
    and 0 with SIGTERM: all three exit 143 (terminated), nobody 76.
"""

import os
import signal
import time
import unittest

from harness import PYTHON, TRAIN_PY, PodsimTestCase, torch_missing
from test_gang import GenerationMarks

PODS = 4
GRACE = 2
RECOVER = 5.0  # s from the failure to every trainer of the next generation running

# usage: sh -c WORKER trainer MARKS FIRST LATER TENTHS CODE
#   generation 0 runs mode FIRST, later generations mode LATER:
#   fail: nap TENTHS, exit CODE;  ok: nap TENTHS, exit 0;  live: nap 600 s (until stopped).
WORKER = r"""
nap() { n=0; while [ $n -lt $1 ]; do sleep 0.1; n=$((n + 1)); done; }
marks=$1 first=$2 later=$3 tenths=$4 code=$5
gen=${TORCHELASTIC_RESTART_COUNT:-unset}
mark() { echo "$1 $(date +%s.%N) $gen" >> "$marks"; }
trap 'mark TERM; echo "rank $RANK got TERM"; exit 143' TERM
mark ready
echo "rank $RANK ready: generation $gen of max $TORCHELASTIC_MAX_RESTARTS"
mode=$first
[ "$gen" != 0 ] && mode=$later
case $mode in
fail) nap "$tenths"; mark fail; echo "rank $RANK failing with $code" >&2; exit "$code" ;;
ok)   nap "$tenths"; mark done; echo "rank $RANK done"; exit 0 ;;
*)    nap 6000; mark nosignal; echo "rank $RANK: never stopped" >&2; exit 1 ;;
esac
"""


class RestartTest(GenerationMarks, PodsimTestCase):
    needs_trainlet = True

    standin_skip = "the stand-in has no in-place restarts"

    def argv(self, c, i, plan, max_restarts, extra=()):
        worker = ["sh", "-c", WORKER, "trainer", self.marks_path(c, i), *map(str, plan)]
        return self.trainlet("--termination-log", self.tlog(c, i), "--max-restarts",
                             str(max_restarts), *extra, nnodes=PODS, nproc=1, grace=GRACE,
                             rdzv_timeout=30, cmd=worker)

    def start(self, c, plans, max_restarts):
        c.publish_all()
        for i in range(PODS):
            c.start_pod(i, self.argv(c, i, plans[i], max_restarts))
        for i in range(PODS):
            c.pods[i].wait_for_output(r"(?m)^\[rank\d+\]: rank \d+ ready: generation 0 ", 30)

    def assertGenerations(self, c, i, want):
        gens = [g for ev, _, g in self.gen_marks(c, i) if ev == "ready"]
        self.assertEqual(gens, want, f"pod {i}: generations its workers started in\n"
                         + c.pods[i].tail())

    def recovery(self, c, t_failure):
        """Seconds from t_failure to the last pod's generation-1 worker starting."""
        starts = []
        for i in range(PODS):
            ready = [t for ev, t, g in self.gen_marks(c, i) if ev == "ready" and g == "1"]
            self.assertTrue(ready, f"pod {i}: no worker in generation 1\n" + c.pods[i].tail())
            starts.append(ready[0])
        return max(starts) - t_failure

    # -- a worker fails once: the gang restarts in place and completes -------------------
    def test_worker_failure_restarts_in_place_and_completes(self):
        with self.cluster(pods=PODS) as c:
            plans = {i: ("live", "ok", 5, 0) for i in range(PODS)}
            plans[2] = ("fail", "ok", 3, 3)
            self.start(c, plans, max_restarts=2)
            exits = self.watch(c, 60)
            self.assertEqual({i: e[0] for i, e in exits.items()}, {i: 0 for i in range(PODS)},
                             "exit codes\n" + c.diagnostics())
            t_fail = [t for ev, t, g in self.gen_marks(c, 2) if ev == "fail"][0]
            took = self.recovery(c, t_fail)
            print(f"\n    failure -> every generation-1 trainer started: {took * 1000:.0f} ms",
                  end=" ", flush=True)
            self.assertLess(took, RECOVER)
            for i in range(PODS):
                self.assertGenerations(c, i, ["0", "1"])
                self.assertIn("generation 1 of max 2", c.pods[i].stdout())
                if i != 2:
                    self.assertIn(("TERM", "0"), [(ev, g) for ev, _, g in self.gen_marks(c, i)],
                                  f"pod {i}'s generation-0 worker was not stopped")
                self.assertFalse(os.path.exists(self.tlog(c, i)),
                                 f"pod {i} wrote a termination message though it exited 0")
            self.assertIn("restarting in place (restart 1 of 2)", c.pods[0].stderr())
            self.assertNothingLeft(c)

    # -- the restarts are spent: exits as the contract says ---------------------------
    def test_restarts_spent_then_exit_per_contract(self):
        with self.cluster(pods=PODS) as c:
            plans = {i: ("live", "live", 0, 0) for i in range(PODS)}
            plans[1] = ("fail", "fail", 3, 3)
            self.start(c, plans, max_restarts=1)
            exits = self.watch(c, 60)
            t_last_fail = [t for ev, t, g in self.gen_marks(c, 1) if ev == "fail"][-1]
            self.assertGangStopped(c, exits, culprit=1, culprit_code=3, culprit_class="worker",
                                   t_event=t_last_fail, name="restarts spent")
            for i in range(PODS):
                self.assertGenerations(c, i, ["0", "1"])

    # -- bug is never restarted --------------------------------------------------------
    def test_bug_is_never_restarted(self):
        with self.cluster(pods=PODS) as c:
            plans = {i: ("live", "ok", 5, 0) for i in range(PODS)}
            plans[3] = ("fail", "ok", 3, 42)
            self.start(c, plans, max_restarts=2)
            exits = self.watch(c, 60)
            t_fail = [t for ev, t, g in self.gen_marks(c, 3) if ev == "fail"][0]
            self.assertGangStopped(c, exits, culprit=3, culprit_code=42, culprit_class="bug",
                                   t_event=t_fail, name="bug")
            for i in range(PODS):
                self.assertGenerations(c, i, ["0"])

    # -- a replaced pod (same index, new IP) joins the next generation ------------------
    def replace_pod(self, victim):
        with self.cluster(pods=PODS) as c:
            plans = {i: ("live", "ok", 5, 0) for i in range(PODS)}
            self.start(c, plans, max_restarts=1)
            c.pods[victim].kill()
            t_kill = time.time()
            new_ip = f"{c.pod_ip(victim).rsplit('.', 1)[0]}.{230 + victim}"
            c.readdress(victim, new_ip)
            c.pods.pop(victim)  # killed and reaped
            c.start_pod(victim, self.argv(c, victim, plans[victim], max_restarts=1))
            exits = self.watch(c, 60)
            self.assertEqual({i: e[0] for i, e in exits.items()}, {i: 0 for i in range(PODS)},
                             "exit codes\n" + c.diagnostics())
            took = self.recovery(c, t_kill)
            print(f"\n    pod {victim} killed -> every generation-1 trainer started: "
                  f"{took * 1000:.0f} ms", end=" ", flush=True)
            for i in range(PODS):
                self.assertGenerations(c, i, ["0", "1"])
            # The new pod's trainers talk to the leader at its new address.
            if victim == 0:
                for i in range(1, PODS):
                    self.assertRegex(c.pods[i].stderr(), r"lost the leader")
                    self.assertIn(f"MASTER_ADDR={new_ip}", c.pods[i].stderr())
            return c

    def test_replaced_leader_gang_reforms(self):
        self.replace_pod(0)

    def test_replaced_member_joins_next_generation(self):
        self.replace_pod(2)

    # -- real DDP: a rank dies before training; generation 1 trains -----------------------
    def test_ddp_restart_trains_to_completion(self):
        missing = torch_missing()
        if missing:
            self.skipTest(missing)
        script = (f'echo "rank $RANK restart count $TORCHELASTIC_RESTART_COUNT"; '
                  f'if [ "$RANK" = 2 ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then '
                  f'sleep 1; echo "rank 2 dies before training" >&2; exit 1; fi; '
                  f'exec {PYTHON} {TRAIN_PY} --steps 5')
        with self.cluster(pods=PODS) as c:
            c.publish_all()
            for i in range(PODS):
                c.start_pod(i, self.trainlet("--termination-log", self.tlog(c, i),
                                             "--max-restarts", "1", nnodes=PODS, nproc=1,
                                             grace=GRACE, rdzv_timeout=60,
                                             cmd=["sh", "-c", script]))
            exits = self.watch(c, 180)
            self.assertEqual({i: e[0] for i, e in exits.items()}, {i: 0 for i in range(PODS)},
                             "exit codes\n" + c.diagnostics())
            for i in range(PODS):
                out = c.pods[i].stdout()
                self.assertIn(f"rank {i} restart count 1", out)
                self.assertRegex(out, r"final loss \S+ first loss \S+ params-equal True world 4")

    # -- successPolicy: the Job is complete, the controller stops the rest -----------------
    def test_success_policy_remaining_pods_exit_terminated_quietly(self):
        with self.cluster(pods=PODS) as c:
            plans = {0: ("ok", "ok", 2, 0), 1: ("ok", "ok", 4, 0),
                     2: ("live", "live", 0, 0), 3: ("live", "live", 0, 0)}
            self.start(c, plans, max_restarts=0)
            self.assertEqual(c.pods[1].wait(30), 0, c.pods[1].tail())
            c.pods[0].wait_for_output(r"waiting for the other pods to finish", 10)
            time.sleep(0.5)  # the leader still waits: it must not have stopped anyone
            for i in (2, 3):
                self.assertNotIn("TERM", [ev for ev, _, _ in self.gen_marks(c, i)])
            # The Job controller deletes the pods still running: SIGTERM to each.
            for i in (2, 3, 0):
                c.pods[i].signal(signal.SIGTERM)
            exits = self.watch(c, 30)
            codes = {i: e[0] for i, e in exits.items()}
            # The leader exits 0 when the members' stops reached it before its own SIGTERM
            # (every pod had settled), else 143: neither fails the Job.
            self.assertIn(codes[0], (0, 143), c.pods[0].tail())
            self.assertEqual({i: codes[i] for i in (1, 2, 3)}, {1: 0, 2: 143, 3: 143},
                             "exit codes\n" + c.diagnostics())
            print(f"\n    leader exit {codes[0]}", end=" ", flush=True)
            for i in (0, 2, 3):
                if codes[i] == 143:
                    self.assertClass(c, i, "terminated", 143)
                self.assertNotIn("failed first", c.pods[i].stderr())
                self.assertNotIn("lost the leader", c.pods[i].stderr())
            for i in (2, 3):
                self.assertIn("TERM", [ev for ev, _, _ in self.gen_marks(c, i)])
            self.assertNothingLeft(c)


if __name__ == "__main__":
    unittest.main()
