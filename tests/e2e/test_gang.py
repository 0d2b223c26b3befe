"""The gang control channel: one pod's failure stops the whole gang, fast.

After the rendezvous every member keeps its connection to the leader (pod 0); heartbeats
go both ways every 0.4 s and 2.4 s of silence mean the peer is lost. The pod whose worker fails
first (or that gets SIGTERM) exits with its own class; the leader broadcasts a stop naming
it, and every other pod SIGTERMs its workers and exits 76 (peer_failed). A member that
loses the leader exits 76; the leader exits last when everyone succeeds.

4 pods x 1 worker unless said, --grace-period 2, a --termination-log per pod. Workers are
`sh` scripts that append "<event> <wall time>" lines to <workdir>/pod<i>.marks (ready,
fail, done, TERM), so the tests measure from the event that set the stop off:
  * pod 2's worker exits 3: pod 2 exits 3 (worker), pods 0, 1, 3 exit 76 naming pod 2,
    all within PROPAGATE s of the failure, their workers got SIGTERM;
  * the leader's worker exits 42: pod 0 exits 42 (bug), the members 76;
  * SIGTERM to pod 1's PID 1: pod 1 exits 143 (terminated), the others 76;
  * pod 3's link is cut (no RST, no ICMP): pods 0-2 exit 76 naming pod 3 and pod 3 exits
    76 (lost the leader), each within HEARTBEAT_LOSS s of the cut;
  * pod 2's link is cut for BLIP s, then restored (a link blip shorter than the heartbeat
    timeout, 2.4 s; three blips at random phases of the heartbeats): no pod is lost, every
    pod still runs 3 s after each heal;
  * TRAINLET_E2E_BLIPS=N (a measurement, skipped otherwise): N cuts each of 1.2, 1.6 and
    2.0 s at random phases; prints how many lost a pod (the README's figure);
  * all succeed, the leader's worker first: every pod exits 0, the leader last;
  * real DDP (train.py, gloo), rank 2 SIGKILLed from the host mid-training: pod 2 exits
    137 (worker, SIGKILL), pods 0 and 1 exit 76 within seconds instead of hanging.
"""

import json
import os
import random
import select
import signal
import time
import unittest

from harness import PYTHON, TRAIN_PY, PodsimTestCase, torch_missing

PODS = 4
GRACE = 2
PROPAGATE = 5.0        # s from a worker's failure (or the SIGTERM) to every pod's exit
HEARTBEAT_LOSS = 6.5   # s from the link cut to the exits: 3 missed 1 s heartbeats + slack
BLIP = 1.6             # s: a link blip the README promises survives (the heartbeat timeout, 2.4 s,
                       # less one heartbeat interval, 0.8 s)
LIMIT = 4096

# `nap TENTHS` sleeps in 0.1 s steps, so a trapped SIGTERM is handled within 0.1 s (see
# test_exit_codes.py for why not `sleep N & wait $!`).
# usage: sh -c WORKER trainer MARKS MODE TENTHS CODE
#   fail: nap TENTHS, exit CODE;  ok: nap TENTHS, exit 0;  live: nap 600 s (until stopped).
WORKER = r"""
nap() { n=0; while [ $n -lt $1 ]; do sleep 0.1; n=$((n + 1)); done; }
marks=$1 mode=$2 tenths=$3 code=$4
mark() { echo "$1 $(date +%s.%N)" >> "$marks"; }
trap 'mark TERM; echo "rank $RANK got TERM"; exit 143' TERM
mark ready
echo "rank $RANK ready ($mode)"
case $mode in
fail) nap "$tenths"; mark fail; echo "rank $RANK failing with $code" >&2; exit "$code" ;;
ok)   nap "$tenths"; mark done; echo "rank $RANK done"; exit 0 ;;
*)    nap 6000; mark nosignal; echo "rank $RANK: never stopped" >&2; exit 1 ;;
esac
"""


class GangHelpers:
    """Helpers for gang tests (mixed into a PodsimTestCase; no tests of its own)."""

    def tlog(self, c, i):
        return os.path.join(c.workdir, f"termination-log-pod{i}")

    def marks_path(self, c, i):
        return os.path.join(c.workdir, f"pod{i}.marks")

    def marks(self, c, i):
        """{event: [wall time, ...]} from pod i's worker."""
        out = {}
        try:
            with open(self.marks_path(c, i)) as f:
                for line in f:
                    ev, _, t = line.strip().partition(" ")
                    out.setdefault(ev, []).append(float(t))
        except FileNotFoundError:
            pass
        return out

    def start_gang(self, c, modes, npods=PODS, cmd=None):
        """Starts pods 0..npods-1; pod i's worker runs WORKER with modes[i] = (mode, tenths,
        code), or `cmd` (the same for all). Returns once each worker said it is ready."""
        c.publish_all()
        for i in range(npods):
            worker = cmd or ["sh", "-c", WORKER, "trainer", self.marks_path(c, i),
                             *map(str, modes[i])]
            c.start_pod(i, self.trainlet("--termination-log", self.tlog(c, i), nnodes=npods,
                                         nproc=1, grace=GRACE, rdzv_timeout=30, cmd=worker))
        if cmd is None:
            for i in range(npods):
                c.pods[i].wait_for_output(r"(?m)^\[rank\d+\]: rank \d+ ready", 30)

    def watch(self, c, timeout):
        """Waits until every pod has exited; returns {i: (exit code, wall time of the exit)}.

        The time is when the pod's PID 1 (trainlet) exited, seen through a pidfd
        (pidfd_open(2): readable once the process terminates), so the order of two exits
        a few ms apart is the real one. Raises PodTimeout (with the log tail) on a pod
        still running after `timeout` s."""
        fds, seen = {}, {}
        poller = select.poll()
        for i, pod in c.pods.items():
            try:
                fd = os.pidfd_open(pod.pid1)
            except (OSError, TypeError):  # already gone: the poll below sees it
                continue
            fds[fd] = i
            poller.register(fd, select.POLLIN)
        try:
            deadline = time.monotonic() + timeout
            while len(seen) < len(c.pods):
                for fd, _ in poller.poll(50):
                    seen.setdefault(fds[fd], time.time())
                    poller.unregister(fd)
                for i, pod in c.pods.items():
                    if i not in seen and i not in fds.values() and not pod.running():
                        seen[i] = time.time()
                if time.monotonic() > deadline:
                    for i, pod in c.pods.items():
                        if i not in seen:
                            pod.wait(0)  # raises PodTimeout with its tail
        finally:
            for fd in fds:
                os.close(fd)
        return {i: (c.pods[i].wait(5), t) for i, t in seen.items()}

    def summary(self, c, i):
        """Pod i's termination message: one line of JSON, <= 4096 bytes, also trainlet's
        last stderr line."""
        pod, path = c.pods[i], self.tlog(c, i)
        self.assertTrue(os.path.exists(path), f"pod {i}: no termination message\n" + pod.tail())
        with open(path, "rb") as f:
            raw = f.read()
        self.assertLessEqual(len(raw), LIMIT)
        text = raw.decode("utf-8").strip()
        self.assertNotIn("\n", text, f"pod {i}: not one line: {text!r}")
        s = json.loads(text)
        lines = [ln for ln in pod.stderr().splitlines() if ln.strip()]
        self.assertTrue(lines and lines[-1].endswith(text),
                        f"pod {i}: last stderr line is not the summary: "
                        f"{lines[-1] if lines else None!r}")
        self.assertEqual(s.get("pod_index"), i, text)
        return s

    def assertClass(self, c, i, cls, code, reason=None):
        s = self.summary(c, i)
        self.assertEqual((s.get("class"), s.get("code")), (cls, code), f"pod {i}: {json.dumps(s)}")
        if reason:
            self.assertRegex(s.get("reason", ""), reason, f"pod {i}: {json.dumps(s)}")
        return s

    def assertGangStopped(self, c, exits, culprit, culprit_code, culprit_class, t_event,
                          bound=PROPAGATE, name=""):
        """The culprit exited with its own class, every other pod with 76 naming the
        culprit, each within `bound` s of t_event (wall time); the stopped pods' workers
        got SIGTERM. Prints the times."""
        codes = {i: code for i, (code, _) in exits.items()}
        want = {i: (culprit_code if i == culprit else 76) for i in exits}
        self.assertEqual(codes, want, "exit codes")
        took = {i: t - t_event for i, (_, t) in exits.items()}
        print(f"\n    {name}: exits after the event: "
              + ", ".join(f"pod {i} {took[i]:.2f}s" for i in sorted(took)), end=" ", flush=True)
        for i, dt in took.items():
            self.assertLess(dt, bound, f"pod {i} exited {dt:.2f}s after the event")
        self.assertClass(c, culprit, culprit_class, culprit_code)
        for i in exits:
            if i == culprit:
                continue
            self.assertClass(c, i, "peer_failed", 76, rf"\bpod {culprit}\b")
            self.assertIn("TERM", self.marks(c, i),
                          f"pod {i}'s worker never got SIGTERM\n" + c.pods[i].tail())
        self.assertNothingLeft(c)

class GenerationMarks(GangHelpers):
    """Marks of workers that also write their generation: "event time generation"."""

    def gen_marks(self, c, i):
        """[(event, wall time, generation)] from pod i's workers, in order."""
        out = []
        try:
            with open(self.marks_path(c, i)) as f:
                for line in f:
                    ev, t, gen = line.split()
                    out.append((ev, float(t), gen))
        except FileNotFoundError:
            pass
        return out

    def marks(self, c, i):
        """{event: [wall time, ...]} over every generation (GangHelpers' format)."""
        out = {}
        for ev, t, _ in self.gen_marks(c, i):
            out.setdefault(ev, []).append(t)
        return out


class GangTest(GangHelpers, PodsimTestCase):
    needs_trainlet = True

    standin_skip = "the stand-in has no gang control channel"

    # -- 1: a member's worker fails ----------------------------------------------------------
    def test_member_worker_failure_stops_the_gang(self):
        with self.cluster(pods=PODS) as c:
            self.start_gang(c, {i: ("fail", 10, 3) if i == 2 else ("live", 0, 0)
                                for i in range(PODS)})
            exits = self.watch(c, 30)
            t_fail = self.marks(c, 2)["fail"][0]
            self.assertGangStopped(c, exits, 2, 3, "worker", t_fail, name="pod 2 exit 3")
            term = {i: self.marks(c, i)["TERM"][0] - t_fail for i in (0, 1, 3)}
            print("SIGTERM to workers after " + ", ".join(f"{v:.2f}s" for v in term.values()),
                  end=" ", flush=True)

    # -- 2: the leader's worker fails --------------------------------------------------------
    def test_leader_worker_bug_stops_the_gang(self):
        with self.cluster(pods=PODS) as c:
            self.start_gang(c, {i: ("fail", 10, 42) if i == 0 else ("live", 0, 0)
                                for i in range(PODS)})
            exits = self.watch(c, 30)
            t_fail = self.marks(c, 0)["fail"][0]
            self.assertGangStopped(c, exits, 0, 42, "bug", t_fail, name="pod 0 exit 42")

    # -- 3: SIGTERM to a member --------------------------------------------------------------
    def test_sigterm_to_member_stops_the_gang(self):
        with self.cluster(pods=PODS) as c:
            self.start_gang(c, {i: ("live", 0, 0) for i in range(PODS)})
            t_term = time.time()
            c.pods[1].signal(signal.SIGTERM)
            exits = self.watch(c, 30)
            self.assertGangStopped(c, exits, 1, 143, "terminated", t_term, name="SIGTERM pod 1")
            self.assertIn("TERM", self.marks(c, 1), "pod 1's own worker got no SIGTERM")

    # -- 4: a member's link is cut -----------------------------------------------------------
    def test_link_cut_detected_by_heartbeats(self):
        with self.cluster(pods=PODS) as c:
            self.start_gang(c, {i: ("live", 0, 0) for i in range(PODS)})
            time.sleep(1.5)  # a few heartbeats have gone both ways
            t_cut = time.time()
            c.cut_link(3)
            exits = self.watch(c, 30)
            codes = {i: code for i, (code, _) in exits.items()}
            self.assertEqual(codes, {0: 76, 1: 76, 2: 76, 3: 76}, "exit codes")
            took = {i: t - t_cut for i, (_, t) in exits.items()}
            print("\n    link cut: exits after the cut: "
                  + ", ".join(f"pod {i} {took[i]:.2f}s" for i in sorted(took)), end=" ",
                  flush=True)
            for i, dt in took.items():
                # Not before 3 heartbeats can have been missed (less 1 s of phase), not
                # much after.
                self.assertGreater(dt, 1.5, f"pod {i} exited {dt:.2f}s after the cut: too "
                                   "soon for a heartbeat timeout")
                self.assertLess(dt, HEARTBEAT_LOSS, f"pod {i} exited {dt:.2f}s after the cut")
            for i in (0, 1, 2):
                self.assertClass(c, i, "peer_failed", 76, r"\bpod 3\b")
                self.assertIn("TERM", self.marks(c, i), f"pod {i}'s worker got no SIGTERM")
            s = self.assertClass(c, 3, "peer_failed", 76, r"(?i)leader|pod 0\b")
            print(f"pod 3: {s['reason']!r}", end=" ", flush=True)
            self.assertIn("TERM", self.marks(c, 3), "pod 3's worker got no SIGTERM")
            self.assertNothingLeft(c)

    # -- 4b: a link blip shorter than the heartbeat timeout -------------------------------
    def blips(self, c, pod, seconds, count, carrier=False):
        """Cuts `pod`'s link for `seconds`, `count` times, each at a random phase of the
        0.8 s heartbeats, and restores it; returns how many cuts ended with a pod exited
        3 s after the heal (the gang is over then: the rest are not tried)."""
        for n in range(count):
            time.sleep(1.0 + random.uniform(0, 0.8))
            c.cut_link(pod, carrier=carrier)
            time.sleep(seconds)
            c.restore_link(pod)
            time.sleep(3.0)  # past a heartbeat timeout counted from the heal
            if any(not p.running() for p in c.pods.values()):
                return n + 1
        return 0

    def test_link_blip_shorter_than_the_timeout_loses_no_pod(self):
        with self.cluster(pods=3) as c:
            self.start_gang(c, {i: ("live", 0, 0) for i in range(3)}, npods=3)
            lost_at = self.blips(c, 2, BLIP, 3)
            self.assertEqual(lost_at, 0, f"cut {lost_at} of {BLIP}s lost a pod:\n"
                             + "\n".join(c.pods[i].tail(8) for i in range(3)))
            for i in range(3):
                self.assertNotIn("TERM", self.marks(c, i), f"pod {i}'s worker was stopped")
            for i in range(3):
                c.pods[i].signal(signal.SIGTERM)
            self.watch(c, 30)
            self.assertNothingLeft(c)

    @unittest.skipUnless(os.environ.get("TRAINLET_E2E_BLIPS"), "a measurement: "
                         "TRAINLET_E2E_BLIPS=N runs N cuts per duration")
    def test_measure_link_blip_tolerance(self):
        runs = int(os.environ["TRAINLET_E2E_BLIPS"])
        carrier = os.environ.get("TRAINLET_E2E_BLIP_CARRIER") == "1"  # the pod's eth0 too
        table = {}
        for seconds in (1.2, 1.6, 2.0):
            lost = 0
            left = runs
            while left > 0:  # a lost pod ends the gang: a fresh one for the remaining cuts
                with self.cluster(pods=3) as c:
                    self.start_gang(c, {i: ("live", 0, 0) for i in range(3)}, npods=3)
                    at = self.blips(c, 2, seconds, left, carrier)
                    left -= at if at else left
                    lost += 1 if at else 0
                    for i in range(3):
                        if c.pods[i].running():
                            c.pods[i].signal(signal.SIGTERM)
                    self.watch(c, 30)
            table[seconds] = lost
        print(f"\n    link blips{' with carrier loss' if carrier else ''} (cuts that lost a pod "
              "/ cuts): "
              + ", ".join(f"{s:.1f}s {n}/{runs}" for s, n in table.items()), end=" ", flush=True)

    # -- 5: everyone succeeds, the leader's worker first -------------------------------------
    def test_all_succeed_leader_exits_last(self):
        step = 6  # tenths: pod i's worker runs 0.6 * (i + 1) s, so the leader's ends first
        with self.cluster(pods=PODS) as c:
            self.start_gang(c, {i: ("ok", step * (i + 1), 0) for i in range(PODS)})
            exits = self.watch(c, 30)
            self.assertEqual({i: code for i, (code, _) in exits.items()},
                             {i: 0 for i in range(PODS)}, "exit codes")
            done = {i: self.marks(c, i)["done"][0] for i in range(PODS)}
            self.assertEqual(min(done, key=done.get), 0, f"the leader's worker was not the "
                             f"first to finish: {done}")
            last_member = max(t for i, (_, t) in exits.items() if i != 0)
            print(f"\n    leader's worker done {done[3] - done[0]:.2f}s before pod 3's; "
                  f"the leader exited {exits[0][1] - last_member:+.3f}s after the last member",
                  end=" ", flush=True)
            self.assertGreater(exits[0][1], max(done.values()),
                               "the leader exited before the last member's worker finished")
            # A member exits right after sending its success report, the leader right after
            # reading the last one: the two exits may come in either order, ms apart.
            self.assertGreater(exits[0][1], last_member - 0.05, "the leader did not exit last")
            for i in range(PODS):
                self.assertNotIn("TERM", self.marks(c, i), f"pod {i}'s worker was stopped")
            self.assertNothingLeft(c)

    # -- 5b: the leader finished, then a member fails: the leader is not "succeeded" -------------
    def test_member_failure_after_the_leader_finished(self):
        # The leader's worker finishes at 0.3 s; pod 2's fails at 1.5 s. Index 0 must not
        # exit 0 (a Job would count it as succeeded, and a retried gang would lack it).
        modes = {i: ("ok", 3, 0) if i == 0 else ("fail", 15, 3) if i == 2 else ("ok", 30, 0)
                 for i in range(PODS)}
        with self.cluster(pods=PODS) as c:
            self.start_gang(c, modes)
            exits = self.watch(c, 30)
            codes = {i: code for i, (code, _) in exits.items()}
            self.assertEqual(codes, {0: 76, 1: 76, 2: 3, 3: 76}, "exit codes")
            self.assertClass(c, 0, "peer_failed", 76, r"\bpod 2\b")
            self.assertNothingLeft(c)

    # -- 6: real DDP, a rank SIGKILLed from the host -----------------------------------------
    def test_ddp_rank_sigkilled_gang_does_not_hang(self):
        reason = torch_missing() or (None if os.path.isfile(TRAIN_PY) else f"no {TRAIN_PY}")
        if reason:
            self.skipTest(reason)
        with self.cluster(pods=3) as c:
            self.start_gang(c, None, npods=3, cmd=[PYTHON, TRAIN_PY, "--steps", "10000"])
            c.pods[2].wait_for_output(r"(?m)^\[rank2\]: step 0 loss", 90)
            c.pods[0].wait_for_output(r"(?m)^\[rank0\]: step 20 loss", 30)
            victims = [p for p in c.pods[2].processes_with_env(RANK="2")
                       if p.comm.startswith("python")]
            self.assertEqual(len(victims), 1, f"rank 2's python in pod 2: {victims}\n"
                             + "\n".join(map(str, c.pods[2].processes())))
            t_kill = time.time()
            self.assertTrue(c.pods[2].signal_process(victims[0], signal.SIGKILL))
            c.event(f"SIGKILLed rank 2 (host pid {victims[0].pid})")
            exits = self.watch(c, 30)
            codes = {i: code for i, (code, _) in exits.items()}
            self.assertEqual(codes, {0: 76, 1: 76, 2: 137}, "exit codes")
            took = {i: t - t_kill for i, (_, t) in exits.items()}
            print("\n    DDP rank 2 SIGKILL: exits after the kill: "
                  + ", ".join(f"pod {i} {took[i]:.2f}s" for i in sorted(took)), end=" ",
                  flush=True)
            for i, dt in took.items():
                self.assertLess(dt, PROPAGATE + 3, f"pod {i} exited {dt:.2f}s after the kill")
            s = self.assertClass(c, 2, "worker", 137)
            self.assertIn("SIGKILL", s["first_failure"]["exit"], json.dumps(s))
            self.assertEqual(s["first_failure"]["rank"], 2, json.dumps(s))
            for i in (0, 1):
                self.assertClass(c, i, "peer_failed", 76, r"\bpod 2\b")
            self.assertNothingLeft(c)


if __name__ == "__main__":
    unittest.main()
