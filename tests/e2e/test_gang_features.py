"""Gang features beyond the control channel: hang detection, attempt fencing, probes.

Same setup as test_gang.py (whose helpers these tests borrow): pods × 1 worker,
--grace-period 2, a --termination-log per pod, exit times from pidfds, worker events
from marker files (<workdir>/pod<i>.marks, "<event> <wall time>" lines).

  * hang: --hang-timeout 1 --hang-start-timeout 3, every worker touches
    $TRAINLET_HEARTBEAT_FILE every 0.1 s. Pod 2's stops after 1 s (but keeps running and
    traps SIGUSR1): it gets SIGUSR1 1-1.25 s after its last touch, SIGTERM 2 s later
    (the diagnostics window), and pod 2 exits 75 (infra, "hang ... local rank 0"). Every
    other pod's worker gets SIGUSR1 too (stack dumps from every rank), SIGTERM 2 s later,
    and pods 0, 1, 3 exit 76 naming pod 2 and the hang. The same with the leader hung,
    whose /livez fails (probe live exits 1) during the window. A worker that never
    touches is hung at the start timeout (3 s), not at 1 s. A gang that keeps touching
    (one worker first touches only after 2 s, inside the start timeout) and then
    finishes exits 0 everywhere: no false hang.
  * fencing: a 2-pod gang with --attempt 2 (slots 0, 1). A stale pod of attempt 1 with
    the gang's job id claims index 1 from its own IP (slot 2) while the gang forms: it
    is refused, retries, and exits 75 at its --rdzv-timeout with a reason naming the
    attempt, its worker never started; then the real pod 1 joins as rank 1. A second
    one (slot 3) arriving while the gang trains exits 75 at its deadline, no worker.
    The gang exits 0. A pod of another --job-id is refused at once (78, config: the
    README's "refuses instead of hanging"), naming both job ids, and never gets a rank.
  * probes: --health-port 8080; `trainlet probe ready|live` run in a pod's network
    namespace: live 0 and ready 1 while 3 of 4 pods wait for the gang, ready 0 on every
    pod once it formed.
"""

import json
import os
import re
import subprocess
import time
import unittest

import test_gang
from harness import BIN, PodsimTestCase

PODS = 4
GRACE = 2
HANG = 1          # --hang-timeout, s
HANG_START = 3    # --hang-start-timeout, s
HEALTH_PORT = 8080
SLACK = 1.5       # s of scheduling slack on a loaded 2-core box

# usage: sh -c HB_WORKER trainer MARKS MODE BEATS TENTHS
# Appends "<event> <wall time>" to MARKS: ready, beat0 (first touch), last (last touch),
# diag (SIGUSR1), TERM, done. A beat touches $TRAINLET_HEARTBEAT_FILE, then naps 0.1 s.
#   stall: BEATS beats, then naps (600 s) without touching; SIGUSR1 only leaves a mark.
#   ok:    naps TENTHS before the first beat, BEATS beats, exit 0.
#   never: never touches; naps until stopped.
HB_WORKER = r"""
nap() { n=0; while [ $n -lt $1 ]; do sleep 0.1; n=$((n + 1)); done; }
marks=$1 mode=$2 beats=$3 tenths=$4
mark() { echo "$1 $(date +%s.%N)" >> "$marks"; }
beat() {
  n=0
  while [ $n -lt $1 ]; do
    touch "$TRAINLET_HEARTBEAT_FILE"
    [ $n -eq 0 ] && mark beat0
    n=$((n + 1))
    [ $n -eq $1 ] && mark last
    sleep 0.1
  done
}
trap 'mark diag; echo "rank $RANK got USR1"' USR1
trap 'mark TERM; echo "rank $RANK got TERM"; exit 143' TERM
[ -n "$TRAINLET_HEARTBEAT_FILE" ] || { echo "no TRAINLET_HEARTBEAT_FILE" >&2; exit 9; }
mark ready
echo "rank $RANK ready ($mode)"
case $mode in
stall) beat "$beats"; echo "rank $RANK stalls"; nap 6000; mark nosignal; exit 1 ;;
ok)    nap "$tenths"; beat "$beats"; mark done; echo "rank $RANK done"; exit 0 ;;
*)     nap 6000; mark nosignal; exit 1 ;;
esac
"""


def gang_worker(marks, mode, tenths, code=0):
    """test_gang.WORKER: marks ready, then `ok` (nap TENTHS, exit 0), `fail` or `live`."""
    return ["sh", "-c", test_gang.WORKER, "trainer", marks, mode, str(tenths), str(code)]


def probe(cluster, i, what):
    """`trainlet probe WHAT` as an exec probe in pod i's network namespace (the kubelet
    runs exec probes inside the container): its exit code."""
    r = subprocess.run(["ip", "netns", "exec", cluster.pod_ns(i), BIN, "probe", what,
                        "--health-port", str(HEALTH_PORT)],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=15)
    cluster.event(f"probe {what} in {cluster.hostname(i)}: exit {r.returncode} {r.stdout.strip()}")
    return r.returncode


class GangFeatureTest(test_gang.GangHelpers, PodsimTestCase):
    needs_trainlet = True

    standin_skip = "the stand-in has no gang features"

    # -- helpers -------------------------------------------------------------------------
    def start(self, c, i, worker, *flags, nnodes=PODS, rdzv_timeout=30):
        return c.start_pod(i, self.trainlet("--termination-log", self.tlog(c, i), *flags,
                                            nnodes=nnodes, nproc=1, grace=GRACE,
                                            rdzv_timeout=rdzv_timeout, cmd=worker))

    def hb_worker(self, c, i, mode, beats=0, tenths=0):
        return ["sh", "-c", HB_WORKER, "trainer", self.marks_path(c, i), mode, str(beats),
                str(tenths)]

    def wait_ready(self, c, indices, timeout=30):
        for i in indices:
            c.pods[i].wait_for_output(r"(?m)^\[rank\d+\]: rank \d+ ready", timeout)

    def codes(self, exits):
        return {i: code for i, (code, _) in exits.items()}

    def between(self, what, dt, lo, hi):
        self.assertGreaterEqual(dt, lo, f"{what}: {dt:.2f}s, want >= {lo}s")
        self.assertLess(dt, hi, f"{what}: {dt:.2f}s, want < {hi}s")

    def summary(self, c, slot, index=None):
        """The termination message of the pod in `slot`, as test_gang.GangTest.summary; a
        stray claims another index than its slot's (`index`)."""
        pod, path = c.pods[slot], self.tlog(c, slot)
        self.assertTrue(os.path.exists(path), f"pod {slot}: no termination message\n"
                        + pod.tail())
        with open(path, "rb") as f:
            raw = f.read()
        self.assertLessEqual(len(raw), test_gang.LIMIT)
        text = raw.decode("utf-8").strip()
        self.assertNotIn("\n", text, f"pod {slot}: not one line: {text!r}")
        s = json.loads(text)
        lines = [ln for ln in pod.stderr().splitlines() if ln.strip()]
        self.assertTrue(lines and lines[-1].endswith(text),
                        f"pod {slot}: last stderr line is not the summary")
        self.assertEqual(s.get("pod_index"), slot if index is None else index, text)
        return s

    def assertClass(self, c, slot, cls, code, reason=None, index=None):
        s = self.summary(c, slot, index)
        self.assertEqual((s.get("class"), s.get("code")), (cls, code),
                         f"pod {slot}: {json.dumps(s)}")
        if reason:
            self.assertRegex(s.get("reason", ""), reason, f"pod {slot}: {json.dumps(s)}")
        return s

    # -- hang detection -------------------------------------------------------------------
    def start_hang_gang(self, c, workers, *flags):
        c.publish_all()
        for i in range(PODS):
            self.start(c, i, workers[i], "--hang-timeout", str(HANG),
                       "--hang-start-timeout", str(HANG_START), *flags)
        self.wait_ready(c, range(PODS))

    def check_stalled_heartbeat(self, culprit, during_window=None, flags=()):
        """Pod `culprit`'s worker stops beating after 1 s; the others beat on. Calls
        during_window(c) once the culprit logged the hang."""
        with self.cluster(pods=PODS) as c:
            self.start_hang_gang(c, {i: self.hb_worker(c, i, "stall", beats=10) if i == culprit
                                     else self.hb_worker(c, i, "ok", beats=600)
                                     for i in range(PODS)}, *flags)
            if during_window:
                c.pods[culprit].wait_for_output(r"\bhang: local rank 0\b", 10, "stderr")
                during_window(c)
            exits = self.watch(c, 40)
            others = [i for i in range(PODS) if i != culprit]
            self.assertEqual(self.codes(exits), {i: 75 if i == culprit else 76
                                                 for i in range(PODS)}, "exit codes")
            m = self.marks(c, culprit)
            self.assertIn("last", m, f"pod {culprit}'s worker never stalled")
            self.assertIn("diag", m, f"pod {culprit}'s worker never got SIGUSR1\n"
                          + c.pods[culprit].tail())
            self.assertIn("TERM", m, f"pod {culprit}'s worker never got SIGTERM\n"
                          + c.pods[culprit].tail())
            last, diag, term = m["last"][0], m["diag"][0], m["TERM"][0]
            t_exit = exits[culprit][1]
            print(f"\n    hang of pod {culprit}: after its last touch: SIGUSR1 {diag - last:.2f}s, "
                  f"SIGTERM {term - last:.2f}s, exit {t_exit - last:.2f}s; others exit "
                  + ", ".join(f"pod {i} {exits[i][1] - last:.2f}s" for i in others),
                  end=" ", flush=True)
            s = self.assertClass(c, culprit, "infra", 75, r"(?i)\bhang\b")
            self.assertRegex(s["reason"], r"\blocal rank 0\b", json.dumps(s))
            print(f"reason {s['reason']!r}", end=" ", flush=True)
            for i in others:
                # Every rank of the gang dumps its stacks (a hung collective is often
                # waiting on another rank), then the whole gang stops.
                self.assertClass(c, i, "peer_failed", 76, rf"\bpod {culprit}\b.*(?i:hang)")
                mi = self.marks(c, i)
                self.assertEqual(len(mi.get("diag", [])), 1,
                                 f"pod {i}'s worker got SIGUSR1 {len(mi.get('diag', []))} "
                                 "times, want once\n" + c.pods[i].tail())
                self.assertIn("TERM", mi, f"pod {i}'s worker got no SIGTERM")
                self.between(f"pod {i}'s SIGUSR1 after pod {culprit}'s", mi["diag"][0] - diag,
                             -0.5, SLACK)
                self.between(f"pod {i}'s SIGTERM after its SIGUSR1", mi["TERM"][0] - mi["diag"][0],
                             2 - 0.25, 2 + SLACK)
                self.between(f"pod {i}'s exit after pod {culprit}'s SIGUSR1",
                             exits[i][1] - diag, 2 - 0.25, 2 + GRACE + SLACK)
            # Found HANG s (polled every HANG/4 s) after the last touch; SIGUSR1 first, then
            # 2 s for the stack dumps ("stopping in 2 s"), then SIGTERM and the grace period.
            # Lower bounds allow for the marks' own latency (a `date` fork under load).
            self.between("SIGUSR1 after the last touch", diag - last, HANG - 0.25,
                         HANG + 0.25 + SLACK)
            self.assertEqual(len(m["diag"]), 1, "SIGUSR1 sent more than once")
            self.between("SIGTERM after SIGUSR1 (the diagnostics window)", term - diag,
                         2 - 0.25, 2 + SLACK)
            self.between(f"pod {culprit}'s exit after its last touch", t_exit - last,
                         HANG + 2 - 0.3, HANG + 0.25 + 2 + GRACE + SLACK)
            self.assertLess(t_exit - term, 1.0, f"pod {culprit} did not exit once its worker "
                            "ended")
            self.assertNothingLeft(c)

    def test_hang_of_a_member_stops_the_gang(self):
        self.check_stalled_heartbeat(2)

    def test_hang_of_the_leader_stops_the_gang_and_fails_livez(self):
        live = {}

        def probe_live(c):
            live["hung"] = probe(c, 0, "live")
            live["peer"] = probe(c, 1, "live")
        self.check_stalled_heartbeat(0, probe_live, ("--health-port", str(HEALTH_PORT)))
        print(f"probe live during the window: leader {live['hung']}, pod 1 {live['peer']}",
              end=" ", flush=True)
        self.assertEqual(live["hung"], 1, "probe live passed on the hung leader")

    def test_hang_start_timeout_for_a_worker_that_never_beats(self):
        with self.cluster(pods=PODS) as c:
            self.start_hang_gang(c, {i: self.hb_worker(c, i, "never") if i == 3
                                     else self.hb_worker(c, i, "ok", beats=600)
                                     for i in range(PODS)})
            exits = self.watch(c, 40)
            self.assertEqual(self.codes(exits), {0: 76, 1: 76, 2: 76, 3: 75}, "exit codes")
            m3 = self.marks(c, 3)
            ready, diag = m3["ready"][0], m3.get("diag", [None])[0]
            self.assertIsNotNone(diag, "pod 3's worker never got SIGUSR1\n" + c.pods[3].tail())
            print(f"\n    never beats: SIGUSR1 {diag - ready:.2f}s after the worker started, "
                  f"pod 3 exit {exits[3][1] - ready:.2f}s", end=" ", flush=True)
            # --hang-start-timeout (3 s) applies before the first touch, not --hang-timeout.
            self.between("SIGUSR1 after the worker started", diag - ready, HANG_START - 0.75,
                         HANG_START + 0.25 + SLACK)
            s = self.assertClass(c, 3, "infra", 75, r"(?i)\bhang\b.*\blocal rank 0\b")
            self.assertRegex(s["reason"], r"never", json.dumps(s))
            for i in (0, 1, 2):
                self.assertClass(c, i, "peer_failed", 76, r"\bpod 3\b")
            self.assertNothingLeft(c)

    def test_hang_none_when_workers_beat(self):
        # Every worker beats for 3 s and exits 0; pod 1's first beat comes only after 2 s
        # (> --hang-timeout, < --hang-start-timeout: a slow start is not a hang).
        with self.cluster(pods=PODS) as c:
            self.start_hang_gang(c, {i: self.hb_worker(c, i, "ok", beats=30,
                                                       tenths=20 if i == 1 else 0)
                                     for i in range(PODS)})
            exits = self.watch(c, 40)
            self.assertEqual(self.codes(exits), {i: 0 for i in range(PODS)}, "exit codes\n"
                             + "\n".join(c.pods[i].tail(8) for i in range(PODS)))
            m1 = self.marks(c, 1)
            print(f"\n    no hang: pod 1's first beat {m1['beat0'][0] - m1['ready'][0]:.2f}s "
                  "after its start", end=" ", flush=True)
            self.assertGreater(m1["beat0"][0] - m1["ready"][0], HANG + 0.5,
                               "pod 1's first beat came too early to test the start timeout")
            for i in range(PODS):
                mi = self.marks(c, i)
                self.assertIn("done", mi, f"pod {i}'s worker did not finish")
                for ev in ("diag", "TERM"):
                    self.assertNotIn(ev, mi, f"pod {i}'s worker got {ev}")
                self.assertNotIn("hang", c.pods[i].stderr(), f"pod {i} logged a hang")
            self.assertNothingLeft(c)

    # -- attempt and job fencing ------------------------------------------------------------
    def job_of(self, c, i):
        """(job id, attempt) from pod i's first log line: "job '<id>' attempt <n>"."""
        m = c.pods[i].wait_for_output(r"job '([^']*)' attempt (\d+)", 10, "stderr")
        return m.group(1), int(m.group(2))

    def start_stray(self, c, slot, job_id, attempt, rdzv_timeout):
        """A pod in its own slot (own IP and host name) that claims index 1 of the 2-pod
        gang led by trainer-0. Its worker would leave marks: it must never run."""
        worker = gang_worker(self.marks_path(c, slot), "ok", 1)
        return self.start(c, slot, worker, "--node-rank", "1", "--attempt", str(attempt),
                          "--job-id", job_id, "--master-addr", c.fqdn(0), nnodes=2,
                          rdzv_timeout=rdzv_timeout)

    def assertNoRank(self, c, slot):
        self.assertFalse(os.path.exists(self.marks_path(c, slot)),
                         f"pod {slot}'s worker ran\n" + c.pods[slot].tail())
        self.assertNotRegex(c.pods[slot].output(), r"(?m)rendezvous [\d.]+ ms|^\[rank",
                            f"pod {slot} got a rank\n" + c.pods[slot].tail())

    def start_leader(self, c, *flags, tenths=30):
        c.publish_all()
        self.start(c, 0, gang_worker(self.marks_path(c, 0), "ok", tenths), *flags, nnodes=2)
        c.pods[0].wait_for_output(r"leader: listening on port", 10, "stderr")
        return self.job_of(c, 0)

    def test_attempt_fencing_refuses_stale_pods(self):
        with self.cluster(pods=4) as c:
            job, attempt = self.start_leader(c, "--attempt", "2")
            self.assertEqual(attempt, 2)
            # Slot 2: a stale pod of attempt 1 claims index 1 while the gang forms.
            t_stale = time.time()
            self.start_stray(c, 2, job, attempt=1, rdzv_timeout=2)
            code = c.pods[2].wait(10)
            took = time.time() - t_stale
            self.assertEqual(code, 75, "the stale pod\n" + c.pods[2].tail())
            s2 = self.assertClass(c, 2, "infra", 75, r"\battempt 1\b.*\battempt 2\b", index=1)
            print(f"\n    stale pod during the rendezvous: exit 75 {took:.2f}s after its start "
                  f"(--rdzv-timeout 2): {s2['reason']!r}", end=" ", flush=True)
            # Refused as retriable: it kept trying until its own deadline.
            self.between("the stale pod's exit after its start", took, 2 - 0.2, 2 + SLACK)
            self.assertRegex(c.pods[0].stderr(), rf"refused [\d.:]+: pod 1 \("
                             rf"{re.escape(c.pod_ip(2))}:\d+\) is from attempt 1, this leader "
                             r"runs attempt 2", "the leader's refusal")
            # The leader logs one refusal per peer address per 10 s (rate-limited), so
            # the retries show in the stale pod's own count of attempts.
            attempts = re.search(r"\((\d+) attempts;", s2["reason"])
            self.assertTrue(attempts, s2["reason"])
            self.assertGreaterEqual(int(attempts.group(1)), 2, "the stale pod did not retry")
            # The real pod 1 joins as rank 1; the gang trains for 3 s.
            self.start(c, 1, gang_worker(self.marks_path(c, 1), "ok", 30), "--attempt", "2",
                       nnodes=2)
            self.wait_ready(c, (0, 1))
            # Slot 3: another stale pod arrives while the gang trains.
            t_late = time.time()
            self.start_stray(c, 3, job, attempt=1, rdzv_timeout=1)
            exits = self.watch(c, 30)
            self.assertEqual(self.codes(exits), {0: 0, 1: 0, 2: 75, 3: 75}, "exit codes")
            s3 = self.assertClass(c, 3, "infra", 75, index=1)
            print(f"while training: exit 75 {exits[3][1] - t_late:.2f}s after its start "
                  f"(--rdzv-timeout 1): {s3['reason']!r}", end=" ", flush=True)
            self.between("the late stale pod's exit after its start", exits[3][1] - t_late,
                         1 - 0.2, 1 + SLACK)
            self.assertLess(exits[3][1], exits[0][1], "the late pod outlived the gang")
            for slot in (2, 3):
                self.assertNoRank(c, slot)
            self.assertRegex(c.pods[1].output(), r"(?m)^\[rank1\]: rank 1 ready")
            for i in (0, 1):
                self.assertIn("done", self.marks(c, i), f"pod {i}'s worker did not finish")
                self.assertNotIn("TERM", self.marks(c, i), f"pod {i}'s worker was stopped")
            self.assertNothingLeft(c)

    def test_job_id_fencing_refuses_a_stranger(self):
        # A pod of another job (same leader address, index 1, same attempt) asks to join.
        with self.cluster(pods=3) as c:
            job, attempt = self.start_leader(c, tenths=10)
            t_stranger = time.time()
            self.start_stray(c, 2, job + "-other", attempt=attempt, rdzv_timeout=2)
            code = c.pods[2].wait(10)
            took = time.time() - t_stranger
            s = self.summary(c, 2, index=1)
            print(f"\n    stranger: exit {code} ({s.get('class')}) {took:.2f}s after its "
                  f"start: {s.get('reason')!r}", end=" ", flush=True)
            # Refused on every try (a recreated Job's new UID may meet the old pods, so
            # this is retriable), never admitted; at its deadline: infra, naming both jobs.
            self.assertEqual(code, 75, "the stranger")
            self.assertClass(c, 2, "infra", 75,
                             rf"job '{re.escape(job)}-other'.*'{re.escape(job)}'", index=1)
            self.assertLess(took, 2 + SLACK, "the stranger outlived its deadline")
            self.assertNoRank(c, 2)
            self.start(c, 1, gang_worker(self.marks_path(c, 1), "ok", 10), nnodes=2)
            exits = self.watch(c, 30)
            self.assertEqual(self.codes(exits), {0: 0, 1: 0, 2: 75}, "exit codes")
            self.assertRegex(c.pods[1].output(), r"(?m)^\[rank1\]: rank 1 ready")
            self.assertNothingLeft(c)

    # -- probes -----------------------------------------------------------------------------
    def test_probes_ready_once_the_gang_formed(self):
        with self.cluster(pods=PODS) as c:
            c.publish_all()
            workers = {i: gang_worker(self.marks_path(c, i), "ok", 30) for i in range(PODS)}
            for i in range(PODS - 1):
                self.start(c, i, workers[i], "--health-port", str(HEALTH_PORT))
            # The health server listens before the rendezvous starts.
            c.pods[0].wait_for_output(r"leader: listening on port", 10, "stderr")
            for i in (1, 2):
                c.pods[0].wait_for_output(rf"pod {i} joined", 10, "stderr")
            before = {i: (probe(c, i, "live"), probe(c, i, "ready")) for i in range(PODS - 1)}
            for i in range(PODS - 1):
                self.assertTrue(c.pods[i].running(), f"pod {i} exited\n" + c.pods[i].tail())
            self.assertEqual(before, {i: (0, 1) for i in range(PODS - 1)},
                             "(live, ready) before the gang formed")
            self.start(c, PODS - 1, workers[PODS - 1], "--health-port", str(HEALTH_PORT))
            self.wait_ready(c, range(PODS))
            t_ready = time.time()
            after = {i: (probe(c, i, "live"), probe(c, i, "ready")) for i in range(PODS)}
            took = time.time() - t_ready
            print(f"\n    probes (live, ready): before {before}, after {after} ({took:.2f}s "
                  "for 8 probes)", end=" ", flush=True)
            for i in range(PODS):
                self.assertTrue(c.pods[i].running(), f"pod {i} exited before the probes ran")
            self.assertEqual(after, {i: (0, 0) for i in range(PODS)},
                             "(live, ready) once the gang formed")
            exits = self.watch(c, 30)
            self.assertEqual(self.codes(exits), {i: 0 for i in range(PODS)}, "exit codes")
            self.assertNothingLeft(c)


if __name__ == "__main__":
    unittest.main()
