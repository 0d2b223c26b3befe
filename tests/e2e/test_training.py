"""Scenarios (a) and (b): real DDP training (examples/pytorch/train.py) across pods.

(a) 3 pods x 2 workers train to completion: every pod exits 0, every rank 0..5 reports
    a falling loss and parameters equal to every other rank's.
(b) a worker pod starts first and the leader's DNS record appears only 5 s after the
    leader pod starts (as an Indexed Job's records do, kubernetes/kubernetes#117819, pytorch/pytorch#80772): all still exit 0.
"""

import os
import time
import unittest

from harness import FINAL_LINE, PYTHON, TRAIN_PY, PodsimTestCase, rank_lines, torch_missing


class TrainingTest(PodsimTestCase):
    needs_trainlet = True

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        reason = torch_missing() or (None if os.path.isfile(TRAIN_PY) else f"no {TRAIN_PY}")
        if reason:
            raise unittest.SkipTest(reason)

    def assertTrained(self, cluster, world):
        """Parses every rank's final line; checks ranks, world size, loss and parameters."""
        finals = {}
        for pod in cluster.pods.values():
            for rank, lines in rank_lines(pod.output()).items():
                for line in lines:
                    m = FINAL_LINE.search(line)
                    if m:
                        self.assertNotIn(rank, finals, f"rank {rank} reported twice")
                        finals[rank] = m
        self.assertEqual(sorted(finals), list(range(world)),
                         "ranks with a final line (trainlet must assign 0..world-1 once each)")
        for rank, m in sorted(finals.items()):
            final, first = float(m.group(1)), float(m.group(2))
            self.assertEqual(m.group(3), "True", f"rank {rank}: parameters differ")
            self.assertEqual(int(m.group(4)), world, f"rank {rank}: WORLD_SIZE")
            self.assertLess(final, first * 0.5, f"rank {rank}: loss did not fall enough")
        # The printed losses are all-reduced, hence identical on every rank.
        self.assertEqual(len({m.group(1) for m in finals.values()}), 1, finals)

    def test_ddp_three_pods_two_workers(self):
        with self.cluster(pods=3) as c:
            c.publish_all()
            argv = self.trainlet(nnodes=3, nproc=2, cmd=[PYTHON, TRAIN_PY, "--steps", "30"])
            for i in range(3):
                c.start_pod(i, argv)
            codes = c.wait_all(150)
            self.assertEqual(codes, {0: 0, 1: 0, 2: 0})
            self.assertTrained(c, world=6)
            self.assertNothingLeft(c)

    def test_leader_dns_published_late_worker_first(self):
        with self.cluster(pods=3) as c:
            argv = self.trainlet(nnodes=3, nproc=1, cmd=[PYTHON, TRAIN_PY, "--steps", "10"])
            c.publish(1)
            c.publish(2)
            c.start_pod(1, argv)
            c.start_pod(2, argv)
            # Pod 1 must have asked for the leader and been told it does not exist yet.
            nx = f"config {c.fqdn(0)} is NXDOMAIN"
            deadline = time.monotonic() + 30
            while nx not in open(c.dns_log).read():
                self.assertLess(time.monotonic(), deadline, "no pod looked up the leader")
                self.assertTrue(c.pods[1].running() and c.pods[2].running(),
                                "a worker pod gave up before the leader existed")
                time.sleep(0.05)
            c.start_pod(0, argv)
            c.publish(0, delay=5)
            t_leader = time.monotonic()
            codes = c.wait_all(150)
            self.assertEqual(codes, {0: 0, 1: 0, 2: 0})
            self.assertGreater(time.monotonic() - t_leader, 5)
            self.assertTrained(c, world=3)
            self.assertNothingLeft(c)


if __name__ == "__main__":
    unittest.main()
