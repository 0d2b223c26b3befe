"""Rendezvous authentication: --token-file (a mounted Secret in Kubernetes).

Leader and members prove to each other that they hold the same token (HMAC-SHA256 over
fresh nonces from both sides); the token never crosses the wire or reaches a log. Setup
as test_gang_features.py (whose helpers these tests borrow): pods x 1 worker,
--grace-period 2, a --termination-log per pod, workers that leave marks in
<workdir>/pod<i>.marks. Token files live in the test's work directory (pods run as root
and see the host's file system).

  * 3 pods with the same token (a trailing newline, as `echo` writes it, is not part of
    it): the gang forms and every pod exits 0; the token appears in no file of the work
    directory (pods' stdout/stderr at --log-level debug, termination logs, events).
  * a 2-pod gang with token A, leader started alone: a stray (slot 2, index 1, the
    gang's job id and attempt) with token B exits 78 (config) within 3 s although its
    --rdzv-timeout is 10 s, its reason mentions authentication and the token, its
    worker never runs; then the real pod 1 with token A joins and both exit 0.
  * the same with a stray that has no --token-file: the leader refuses it (78, naming
    the token), the gang still forms and exits 0.
  * a bad --token-file (missing; only whitespace) is a config error at once (78), before
    the leader listens or the member joins.
"""

import json
import os
import re
import secrets
import time
import unittest

import test_gang_features
from harness import PodsimTestCase
from test_gang_features import gang_worker

QUICK = 3.0        # s: a refused stray exits within this of its start
STRAY_RDZV = 10    # the strays' --rdzv-timeout: "quick" is well before it


class AuthTest(PodsimTestCase):
    needs_trainlet = True

    # test_gang_features.GangFeatureTest's helpers (not the class itself, nor bound at
    # module level, so that its tests don't run twice).
    tlog = test_gang_features.GangFeatureTest.tlog
    marks_path = test_gang_features.GangFeatureTest.marks_path
    marks = test_gang_features.GangFeatureTest.marks
    watch = test_gang_features.GangFeatureTest.watch
    start = test_gang_features.GangFeatureTest.start
    codes = test_gang_features.GangFeatureTest.codes
    wait_ready = test_gang_features.GangFeatureTest.wait_ready
    summary = test_gang_features.GangFeatureTest.summary
    assertClass = test_gang_features.GangFeatureTest.assertClass
    assertNoRank = test_gang_features.GangFeatureTest.assertNoRank
    job_of = test_gang_features.GangFeatureTest.job_of
    start_leader = test_gang_features.GangFeatureTest.start_leader

    standin_skip = "the stand-in has no rendezvous authentication"

    # -- helpers -------------------------------------------------------------------------
    def token_file(self, c, name, content):
        path = os.path.join(c.workdir, f"token-{name}")
        with open(path, "w") as f:
            f.write(content)
        os.chmod(path, 0o600)
        return path

    def new_token(self, c, name):
        """A fresh random token in <workdir>/token-<name>, written with a trailing newline.
        Returns (path, token)."""
        token = f"tok{name}-{secrets.token_hex(16)}"
        return self.token_file(c, name, token + "\n"), token

    def start_stray(self, c, slot, job, attempt, *flags):
        """As GangFeatureTest.start_stray (slot's own IP and name, claims index 1 of the
        2-pod gang led by trainer-0), with extra flags. Its worker must never run."""
        worker = gang_worker(self.marks_path(c, slot), "ok", 1)
        return self.start(c, slot, worker, "--node-rank", "1", "--attempt", str(attempt),
                          "--job-id", job, "--master-addr", c.fqdn(0), *flags, nnodes=2,
                          rdzv_timeout=STRAY_RDZV)

    def assertTokenNowhere(self, c, tokens, token_files):
        """No file under the work directory (pod logs, termination logs, events, DNS log,
        marks) but the token files holds any of `tokens`; every pod's logs were read."""
        checked = set()
        for name in sorted(os.listdir(c.workdir)):
            path = os.path.join(c.workdir, name)
            if path in token_files or not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                data = f.read()
            for t in tokens:
                self.assertNotIn(t.encode(), data, f"{name} contains a token")
            checked.add(name)
        for i, pod in c.pods.items():
            # trainlet writes a termination message only when the pod fails.
            tlog = [os.path.basename(self.tlog(c, i))] if pod.wait(0) else []
            for name in [f"pod-{i}.out", f"pod-{i}.err"] + tlog:
                self.assertIn(name, checked, f"{name} missing: the leak check saw nothing")
        self.assertTrue(c.pods[0].stderr().strip(), "the leader logged nothing")

    def refused_stray(self, c, slot, flags, reason):
        """Starts a stray in `slot` against the waiting leader: it must exit 78 (config)
        quickly with `reason` in its termination message and never get a rank."""
        job, attempt = self.job_of(c, 0)
        t0 = time.time()
        self.start_stray(c, slot, job, attempt, *flags)
        code = c.pods[slot].wait(STRAY_RDZV + 5)
        took = time.time() - t0
        s = self.summary(c, slot, index=1)
        print(f"\n    stray: exit {code} ({s.get('class')}) {took:.2f}s after its start: "
              f"{s.get('reason')!r}", end=" ", flush=True)
        self.assertEqual(code, 78, "the stray\n" + c.pods[slot].tail())
        self.assertClass(c, slot, "config", 78, reason, index=1)
        self.assertLess(took, QUICK, f"the stray took {took:.2f}s (--rdzv-timeout "
                        f"{STRAY_RDZV}): refused as retriable?")
        self.assertNoRank(c, slot)
        self.assertNotRegex(c.pods[0].stderr(), rf"joined from {re.escape(c.pod_ip(slot))}:",
                            "the leader admitted the stray")
        self.assertTrue(c.pods[0].running(), "the leader exited\n" + c.pods[0].tail())
        return s

    def finish_gang(self, c, slot, *flags):
        """The real pod 1 joins the waiting leader; both exit 0, the stray in `slot` 78."""
        self.start(c, 1, gang_worker(self.marks_path(c, 1), "ok", 10), *flags, nnodes=2)
        exits = self.watch(c, 30)
        self.assertEqual(self.codes(exits), {0: 0, 1: 0, slot: 78}, "exit codes")
        self.assertRegex(c.pods[1].output(), r"(?m)^\[rank1\]: rank 1 ready")
        for i in (0, 1):
            self.assertIn("done", self.marks(c, i), f"pod {i}'s worker did not finish")
        self.assertNothingLeft(c)

    # -- tests -----------------------------------------------------------------------------
    def test_same_token_forms_the_gang_and_never_logs_it(self):
        with self.cluster(pods=3) as c:
            path, token = self.new_token(c, "A")
            c.publish_all()
            for i in range(3):
                self.start(c, i, gang_worker(self.marks_path(c, i), "ok", 5),
                           "--token-file", path, nnodes=3)
            exits = self.watch(c, 30)
            self.assertEqual(self.codes(exits), {0: 0, 1: 0, 2: 0}, "exit codes")
            for i in range(3):
                self.assertRegex(c.pods[i].output(), rf"(?m)^\[rank{i}\]: rank {i} ready")
            self.assertRegex(c.pods[0].stderr(), r"leader: all 3 pod\(s\) joined")
            self.assertTokenNowhere(c, [token], {path})
            self.assertNothingLeft(c)

    def test_wrong_token_is_refused_and_the_gang_forms(self):
        with self.cluster(pods=3) as c:
            path_a, token_a = self.new_token(c, "A")
            path_b, token_b = self.new_token(c, "B")
            self.start_leader(c, "--token-file", path_a, tenths=10)
            s = self.refused_stray(c, 2, ("--token-file", path_b), r"(?i)authenticat")
            self.assertRegex(s["reason"], r"(?i)\btoken\b", "reason does not name the token")
            self.finish_gang(c, 2, "--token-file", path_a)
            self.assertTokenNowhere(c, [token_a, token_b], {path_a, path_b})

    def test_no_token_against_a_token_leader_is_refused(self):
        with self.cluster(pods=3) as c:
            path, token = self.new_token(c, "A")
            self.start_leader(c, "--token-file", path, tenths=10)
            self.refused_stray(c, 2, (), r"(?i)\btoken\b")
            self.assertRegex(c.pods[0].stderr(), rf"leader: refused {re.escape(c.pod_ip(2))}:"
                             r"\d+: pod 1 \(.*(?i:token)", "the leader's refusal")
            self.finish_gang(c, 2, "--token-file", path)
            self.assertTokenNowhere(c, [token], {path})

    def test_bad_token_file_is_a_config_error_at_once(self):
        with self.cluster(pods=2) as c:
            c.publish_all()
            bad = {0: (os.path.join(c.workdir, "token-missing"), r"cannot be read"),
                   1: (self.token_file(c, "blank", " \n\t\n"), r"is empty")}
            t0 = time.time()
            for i, (path, _) in bad.items():
                self.start(c, i, gang_worker(self.marks_path(c, i), "ok", 1),
                           "--token-file", path, nnodes=2)
            exits = self.watch(c, 10)
            self.assertEqual(self.codes(exits), {0: 78, 1: 78}, "exit codes")
            for i, (path, why) in bad.items():
                took = exits[i][1] - t0
                self.assertLess(took, QUICK, f"pod {i} took {took:.2f}s")
                # Not self.summary(): a flag error's message says pod_index 0 on every pod
                # (the index is not known yet).
                with open(self.tlog(c, i)) as f:
                    s = json.loads(f.read())
                self.assertEqual((s.get("class"), s.get("code")), ("config", 78), str(s))
                self.assertRegex(s.get("reason", ""), rf"--token-file '{re.escape(path)}' {why}")
                self.assertTrue(c.pods[i].stderr().rstrip().endswith(json.dumps(
                    s, separators=(",", ":"))), f"pod {i}: last stderr line is not the summary")
                self.assertNotRegex(c.pods[i].stderr(), r"leader: listening|joining leader",
                                    f"pod {i} went on to the rendezvous")
                self.assertNoRank(c, i)
            print(f"\n    bad token files: exits {exits[0][1] - t0:.2f}s, "
                  f"{exits[1][1] - t0:.2f}s after the starts", end=" ", flush=True)
            self.assertNothingLeft(c)


if __name__ == "__main__":
    unittest.main()
