"""Faults at the gang's seams, in simulated pods: each ends with exactly one counted exit.

  * SIGTERM to a pod while its workers stop for an in-place restart (--max-restarts): the
    pod exits 143 (terminated) as soon as its workers are gone, and never joins the next
    generation (before, it rejoined and only the kubelet's SIGKILL ended it: 137);
  * a member frozen (SIGSTOP on its PID 1, the TCP connection alive) for longer than the
    heartbeat timeout: the others stop within seconds and exit 76 naming it; when it
    resumes it exits infra (75) itself, saying its own event loop stalled;
  * the leader frozen the same way: the members exit 76 (lost the leader); the resumed
    leader exits 75 and blames no member;
  * a pod frozen for a little less than the timeout (2.15 s of 2.4 s): whether its peers give it up
    depends on when its last heartbeat went out; whenever they do, it is the culprit (75)
    and they exit 76; otherwise the gang runs on (before, it exited 76 too: no culprit);
  * a member frozen while it waits in the first round, across the round's formation: the
    others exit 76 naming it, and resumed it exits 75 without starting its workers;
  * two members' workers fail at the same instant: exactly one of them exits with its
    own code (the one the leader heard first), every other pod 76.

Workers are `sh` scripts as in test_gang.py ("<event> <wall time> <generation>" marks);
in mode "slow" the TERM trap takes SLOW_STOP s (a checkpoint being written).
"""

import signal
import time
import unittest

from harness import PodsimTestCase
from test_gang import GenerationMarks

GRACE = 5
SLOW_STOP = 2.0    # s the "slow" worker's TERM trap takes
FREEZE = 6.0       # s a pod is stopped: past the 3 s heartbeat timeout
STOP_BOUND = 6.5   # s from a freeze to the other pods' exits: 3 missed heartbeats + slack
SHORT_FREEZE = 2.15  # s: the loop's gap stays under the 2.4 s limit (6 x 0.4 s), the silence often not

# usage: sh -c WORKER trainer MARKS MODE TENTHS CODE [AT]
#   fail: nap TENTHS, exit CODE;  failat: sleep until wall time AT (ms), exit CODE;
#   slow: live until TERM, whose trap takes SLOW_STOP s;  live: until stopped.
WORKER = r"""
nap() { n=0; while [ $n -lt $1 ]; do sleep 0.1; n=$((n + 1)); done; }
marks=$1 mode=$2 tenths=$3 code=$4 at=$5
gen=${TORCHELASTIC_RESTART_COUNT:-unset}
mark() { echo "$1 $(date +%s.%N) $gen" >> "$marks"; }
if [ "$mode" = slow ] && [ "$gen" = 0 ]; then
  trap 'mark TERM; sleep __SLOW__; mark stopped; exit 143' TERM
else
  trap 'mark TERM; exit 143' TERM
fi
mark ready
echo "rank $RANK ready: generation $gen"
case $mode in
fail) [ "$gen" = 0 ] && { nap "$tenths"; mark fail; echo "rank $RANK failing" >&2; exit "$code"; } ;;
failat)
  while [ "$(date +%s%3N)" -lt "$at" ]; do sleep 0.01; done
  mark fail; echo "rank $RANK failing with $code" >&2; exit "$code" ;;
esac
nap 6000; mark nosignal; exit 1
""".replace("__SLOW__", str(SLOW_STOP))


class GangFaultsTest(GenerationMarks, PodsimTestCase):
    needs_trainlet = True

    standin_skip = "the stand-in has no gang control channel"

    def start(self, c, modes, npods, max_restarts=0):
        c.publish_all()
        for i in range(npods):
            worker = ["sh", "-c", WORKER, "trainer", self.marks_path(c, i), *map(str, modes[i])]
            c.start_pod(i, self.trainlet("--termination-log", self.tlog(c, i), "--max-restarts",
                                         str(max_restarts), nnodes=npods, nproc=1, grace=GRACE,
                                         rdzv_timeout=60, cmd=worker))
        for i in range(npods):
            c.pods[i].wait_for_output(r"(?m)^\[rank\d+\]: rank \d+ ready: generation 0", 30)

    def start_waiting(self, c, npods, mode):
        """Pods 0 and 2 of `npods` start with worker `mode` and pod 2 waits in the first
        round (it answered the leader's waiting heartbeats); returns start(i) for pod 1."""
        c.publish_all()

        def start(i):
            worker = ["sh", "-c", WORKER, "trainer", self.marks_path(c, i), *map(str, mode)]
            c.start_pod(i, self.trainlet("--termination-log", self.tlog(c, i), "--max-restarts",
                                         "0", nnodes=npods, nproc=1, grace=GRACE,
                                         rdzv_timeout=60, cmd=worker))
        start(0)
        start(2)
        c.pods[0].wait_for_output(r"leader: pod 2 joined", 30)
        time.sleep(1.0)
        return start

    def wait_mark(self, c, i, event, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if event in self.marks(c, i):
                return self.marks(c, i)[event][0]
            time.sleep(0.01)
        self.fail(f"pod {i}'s worker never marked {event}\n" + c.pods[i].tail())

    # -- SIGTERM while the workers stop for a restart ------------------------------------
    def sigterm_mid_restart(self, victim):
        npods = 3
        with self.cluster(pods=npods) as c:
            modes = {i: ("slow", 0, 0) for i in range(npods)}
            modes[2] = ("fail", 5, 3)  # pod 2's worker exits 3: a restartable failure
            self.start(c, modes, npods, max_restarts=2)
            # The restart's stop reached the victim's worker, whose trap is still running.
            self.wait_mark(c, victim, "TERM", 15)
            t_term = time.time()
            c.pods[victim].signal(signal.SIGTERM)
            code = c.pods[victim].wait(SLOW_STOP + GRACE + 5)
            took = time.time() - t_term
            print(f"\n    SIGTERM to pod {victim} mid-restart: exit {code} after {took:.2f}s",
                  end=" ", flush=True)
            self.assertEqual(code, 143, c.pods[victim].tail())
            self.assertClass(c, victim, "terminated", 143)
            gens = [g for ev, _, g in self.gen_marks(c, victim) if ev == "ready"]
            self.assertEqual(gens, ["0"], f"pod {victim} started workers again after SIGTERM")
            self.assertIn("stopped", self.marks(c, victim), "its worker's trap was cut short")
            # The rest of the gang is being deleted too (the victim's pod would be
            # replaced otherwise): every other pod ends as terminated, none counted.
            for i in range(npods):
                if i != victim:
                    c.pods[i].signal(signal.SIGTERM)
            exits = self.watch(c, 30)
            for i, (code, _) in exits.items():
                self.assertIn(code, (0, 76, 143), f"pod {i}\n" + c.pods[i].tail())
            self.assertNothingLeft(c)

    def test_sigterm_to_a_member_while_it_stops_for_a_restart(self):
        self.sigterm_mid_restart(victim=1)

    def test_sigterm_to_the_leader_while_it_stops_for_a_restart(self):
        self.sigterm_mid_restart(victim=0)

    # -- a frozen pod is the culprit -----------------------------------------------------
    def freeze(self, victim, npods=3):
        with self.cluster(pods=npods) as c:
            self.start(c, {i: ("live", 0, 0) for i in range(npods)}, npods)
            time.sleep(1.5)  # heartbeats have gone both ways
            t_freeze = time.time()
            c.pods[victim].signal(signal.SIGSTOP)
            try:
                others = {}
                for i in range(npods):
                    if i != victim:
                        others[i] = c.pods[i].wait(STOP_BOUND + GRACE)
                        others[i] = (others[i], time.time() - t_freeze)
                time.sleep(max(0.0, FREEZE - (time.time() - t_freeze)))
            finally:
                c.pods[victim].signal(signal.SIGCONT)
            self.assertFrozenPodIsTheCulprit(c, victim, t_freeze, others)
            self.assertIn("TERM", self.marks(c, victim), "its own worker got no SIGTERM")
            self.assertNothingLeft(c)

    def assertFrozenPodIsTheCulprit(self, c, victim, t_freeze, others, what=""):
        """`victim`, stopped at t_freeze and just resumed: the others ({i: (exit code, s
        from the freeze)}) exit 76 naming it within STOP_BOUND, their workers stopped; it
        exits 75 (infra) for its own stall, blaming nobody. Prints the times."""
        t_resume = time.time()
        code = c.pods[victim].wait(GRACE + 10)
        print(f"\n    pod {victim} frozen {t_resume - t_freeze:.1f}s{what}: others exit "
              + ", ".join(f"pod {i} {v[0]} after {v[1]:.2f}s" for i, v in others.items())
              + f"; it exits {code} {time.time() - t_resume:.2f}s after resuming",
              end=" ", flush=True)
        for i, (oc, dt) in others.items():
            self.assertEqual(oc, 76, c.pods[i].tail())
            self.assertLess(dt, STOP_BOUND, f"pod {i} exited {dt:.2f}s after the freeze")
            self.assertIn("TERM", self.marks(c, i), f"pod {i}'s worker got no SIGTERM")
            who = r"\bpod %d\b" % victim if victim != 0 else r"(?i)leader"
            self.assertClass(c, i, "peer_failed", 76, who)
        self.assertEqual(code, 75, c.pods[victim].tail())
        s = self.assertClass(c, victim, "infra", 75, r"event loop did not run")
        self.assertNotRegex(s["reason"], r"\bpod [1-9]", "the resumed pod blames a peer")
        self.assertNotIn("was lost", c.pods[victim].stderr().split("event loop did not run")[0],
                         "the resumed pod blamed a member before seeing its own stall")

    def short_freeze(self, victim, npods=3, trials=4):
        """Up to `trials` gangs, until one in which the peers gave the victim up."""
        for trial in range(trials):
            with self.cluster(pods=npods) as c:
                self.start(c, {i: ("live", 0, 0) for i in range(npods)}, npods)
                time.sleep(1.5)  # heartbeats have gone both ways
                c.pods[victim].signal(signal.SIGSTOP)
                time.sleep(SHORT_FREEZE)
                c.pods[victim].signal(signal.SIGCONT)
                time.sleep(2.0)  # past the peers' check and the victim's own
                if all(c.pods[i].running() for i in range(npods)):
                    print(f"\n    trial {trial}: not given up; the gang runs on", end=" ", flush=True)
                    for i in range(npods):
                        c.pods[i].signal(signal.SIGTERM)
                    codes = c.wait_all(GRACE + 10)
                    self.assertEqual(set(codes.values()), {143}, codes)
                    continue
                codes = c.wait_all(STOP_BOUND + GRACE)
                print(f"\n    trial {trial}: given up; exits {codes}", end=" ", flush=True)
                want = {i: 75 if i == victim else 76 for i in range(npods)}
                self.assertEqual(codes, want, c.pods[victim].tail())
                self.assertClass(c, victim, "infra", 75, r"without a heartbeat sent")
                self.assertNothingLeft(c)
                return
        self.skipTest(f"the peers never gave the victim up in {trials} trials (timing)")

    def test_member_frozen_shorter_than_the_limit_is_the_culprit_when_given_up(self):
        self.short_freeze(victim=2)

    def test_leader_frozen_shorter_than_the_limit_is_the_culprit_when_given_up(self):
        self.short_freeze(victim=0)

    def test_frozen_member_is_the_culprit(self):
        self.freeze(victim=2)

    def test_frozen_leader_is_the_culprit_and_blames_no_member(self):
        self.freeze(victim=0)

    def test_member_frozen_while_the_gang_forms_is_the_culprit(self):
        """Pod 2 waits in the first round and is frozen; pod 1 arrives, the round forms
        with pod 2 (its hello is in), the leader hears nothing from it on the control
        channel and stops the gang (--max-restarts 0): pods 0 and 1 exit 76 naming pod 2.
        Resumed, pod 2 finds its assignment waiting; it is the culprit of the silence
        (its loop stalled past the heartbeat timeout while it waited in the round), so it
        exits 75 without starting its workers. (Before: its stall watch started only at
        the assignment, the policy dropped a stall before it, pod 2 started its workers,
        read the closed connection as the leader's loss and exited 76: no counted exit.)"""
        npods = 3
        with self.cluster(pods=npods) as c:
            start = self.start_waiting(c, npods, ("live", 0, 0))
            t_freeze = time.time()
            c.pods[2].signal(signal.SIGSTOP)
            try:
                start(1)
                others = {}
                for i in (0, 1):
                    code = c.pods[i].wait(STOP_BOUND + GRACE + 10)
                    others[i] = (code, time.time() - t_freeze)
                time.sleep(max(0.0, FREEZE - (time.time() - t_freeze)))
            finally:
                c.pods[2].signal(signal.SIGCONT)
            self.assertFrozenPodIsTheCulprit(c, 2, t_freeze, others, " across the formation")
            self.assertNotIn("ready", self.marks(c, 2),
                             "pod 2 started the workers of a generation it was given up in")
            self.assertNothingLeft(c)

    def test_member_frozen_while_its_round_waits_keeps_its_place(self):
        """Pod 2 waits in the first round and is frozen for FREEZE s while the round still
        waits for pod 1 (no peer counts its silence yet); resumed, it goes on waiting, pod 1
        arrives and the gang forms with it: every pod runs generation 0 and exits 0. A stall
        no peer could have judged is no failure (gang_policy.h G3: only a member whose
        assignment waited for it while it was stopped is the culprit)."""
        npods = 3
        with self.cluster(pods=npods) as c:
            start = self.start_waiting(c, npods, ("fail", 20, 0))
            c.pods[2].signal(signal.SIGSTOP)
            try:
                time.sleep(FREEZE)
            finally:
                c.pods[2].signal(signal.SIGCONT)
            c.pods[2].wait_for_output(r"did not run for \d+\.\d s while it waited", 10)
            time.sleep(1.0)
            start(1)
            codes = {i: c.pods[i].wait(60) for i in range(npods)}
            self.assertEqual(codes, {0: 0, 1: 0, 2: 0}, c.diagnostics())
            for i in range(npods):
                self.assertIn("ready", self.marks(c, i), f"pod {i} ran no worker")
            self.assertNothingLeft(c)

    # -- simultaneous failures: one counted exit -----------------------------------------
    def test_two_failures_at_once_count_once(self):
        npods = 4
        with self.cluster(pods=npods) as c:
            at = str(int((time.time() + 4) * 1000))
            modes = {i: ("live", 0, 0, at) for i in range(npods)}
            modes[1] = ("failat", 0, 3, at)
            modes[3] = ("failat", 0, 5, at)
            self.start(c, modes, npods)
            exits = self.watch(c, 30)
            codes = {i: code for i, (code, _) in exits.items()}
            counted = {i: code for i, code in codes.items() if code != 76}
            print(f"\n    exits {codes}", end=" ", flush=True)
            self.assertEqual(len(counted), 1, f"exit codes {codes}\n" + c.diagnostics())
            (culprit, code), = counted.items()
            self.assertIn((culprit, code), ((1, 3), (3, 5)), f"exit codes {codes}")
            for i in codes:
                if i != culprit:
                    self.assertClass(c, i, "peer_failed", 76, rf"\bpod {culprit}\b")
            self.assertNothingLeft(c)


if __name__ == "__main__":
    unittest.main()
