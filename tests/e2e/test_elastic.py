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
- test_below_min_waits_then_exits_infra: pods 0 and 1 train; pod 1 SIGKILLed -> pod 0 is
  below MIN, waits --rdzv-timeout, then exits 75 (infra) saying what was missing.

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
marks=$1 ctl=$2
echo "start $TORCHELASTIC_RESTART_COUNT $RANK $WORLD_SIZE $(date +%s.%N)" >> "$marks"
echo "rank $RANK of $WORLD_SIZE started (restarts $TORCHELASTIC_RESTART_COUNT)"
trap 'exit 143' TERM
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

    def start(self, c, i, rdzv_timeout=30):
        cmd = ["sh", "-c", WORKER, "trainer", self.marks(c, i), self.ctl(c)]
        c.start_pod(i, self.trainlet("--termination-log", os.path.join(c.workdir, f"tlog{i}"),
                                     "--max-restarts", "2", "--rdzv-conf",
                                     "last_call_timeout=1", nnodes="2:3", grace=GRACE,
                                     rdzv_timeout=rdzv_timeout, cmd=cmd))

    def wait_starts(self, c, i, count, timeout=40):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.starts(c, i)
            if len(s) >= count:
                return s[count - 1]
            time.sleep(0.05)
        self.fail(f"pod {i} started {len(self.starts(c, i))} workers, want {count}\n"
                  + c.pods[i].tail())

    def test_join_grows_and_loss_shrinks(self):
        with self.cluster(pods=3) as c:
            c.publish_all()
            for i in (0, 1):
                self.start(c, i)
            self.assertEqual(self.wait_starts(c, 0, 1), (0, 0, 2))
            self.assertEqual(self.wait_starts(c, 1, 1), (0, 1, 2))
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
