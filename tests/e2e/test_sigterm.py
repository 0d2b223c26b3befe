"""Scenario (d): SIGTERM to a pod's PID 1 (what the kubelet sends on deletion/preemption).

One pod (nnodes 1) with 2 workers. A trainer that handles SIGTERM gets it and the pod exits
143 well within the grace period; a trainer that ignores SIGTERM is SIGKILLed when the
grace period ends and the pod exits 143 then, not much later.
"""

import signal
import time
import unittest

from harness import PodsimTestCase, rank_lines, trainer


class SigtermTest(PodsimTestCase):
    needs_trainlet = True

    def start_ready(self, c, script, grace):
        c.publish(0)
        pod = c.start_pod(0, self.trainlet(nnodes=1, nproc=2, grace=grace,
                                           cmd=[trainer(script)]))
        for rank in (0, 1):
            pod.wait_for_output(rf"(?m)^\[rank{rank}\]: rank {rank} ready", 30)
        return pod

    def test_sigterm_forwarded_to_workers(self):
        grace = 10
        with self.cluster(pods=1) as c:
            pod = self.start_ready(c, "trap_term.sh", grace)
            t0 = time.monotonic()
            pod.signal(signal.SIGTERM)
            self.assertEqual(pod.wait(grace + 5), 143, pod.tail())
            took = time.monotonic() - t0
            self.assertLess(took, grace / 2, "workers exit at once on SIGTERM; so should the pod")
            lines = rank_lines(pod.output())
            for rank in (0, 1):
                self.assertIn(f"rank {rank} got SIGTERM", lines.get(rank, []), pod.tail())
            self.assertNothingLeft(c)

    def test_sigterm_ignored_then_sigkill_after_grace(self):
        grace = 2
        with self.cluster(pods=1) as c:
            pod = self.start_ready(c, "ignore_term.sh", grace)
            t0 = time.monotonic()
            pod.signal(signal.SIGTERM)
            self.assertEqual(pod.wait(grace + 10), 143, pod.tail())
            took = time.monotonic() - t0
            self.assertGreater(took, grace - 0.5, "SIGKILL came before the grace period ended")
            self.assertLess(took, grace + 2.5, "pod lingered after the grace period")
            self.assertNothingLeft(c)


if __name__ == "__main__":
    unittest.main()
