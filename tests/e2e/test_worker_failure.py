"""Scenario (c): one worker of a 3-pod x 2-worker gang exits 3.

The pod that hosts rank 3 must exit 3 (the first failing worker's code) well before its
other worker would have finished on its own, i.e. trainlet stopped it. The other pods may
do whatever trainlet decides (finish, or stop because a peer failed); they only have to
end within a bound. Nothing may be left in any pod.
"""

import time
import unittest

from harness import PodsimTestCase, rank_lines, trainer

FAIL_RANK, FAIL_CODE, FAIL_AFTER, LIVE = 3, 3, 1, 15


class WorkerFailureTest(PodsimTestCase):
    needs_trainlet = True

    def test_failing_worker_exit_code_reaches_its_pod(self):
        with self.cluster(pods=3) as c:
            c.publish_all()
            argv = self.trainlet(nnodes=3, nproc=2, grace=3, cmd=[
                trainer("fail_rank.sh"), str(FAIL_RANK), str(FAIL_CODE), str(FAIL_AFTER),
                str(LIVE)])
            t0 = time.monotonic()
            for i in range(3):
                c.start_pod(i, argv)

            # Which pod runs rank 3 is trainlet's decision: find it by its output.
            failing = None
            deadline = t0 + 30
            while failing is None:
                for pod in c.pods.values():
                    if FAIL_RANK in rank_lines(pod.output()):
                        failing = pod
                self.assertLess(time.monotonic(), deadline, "no pod ever ran rank 3")
                time.sleep(0.05)

            # Exit 3 well before rank 3's sibling would end by itself (LIVE s).
            code = failing.wait(LIVE - 3)
            self.assertEqual(code, FAIL_CODE, failing.tail())
            self.assertIn(f"rank {FAIL_RANK} failing with {FAIL_CODE}", failing.output())
            self.assertLess(failing.elapsed(), LIVE - 3)

            others = {i: p.wait(LIVE + 15) for i, p in c.pods.items() if p is not failing}
            self.assertEqual(len(others), 2, others)  # any codes: trainlet's choice
            self.assertNothingLeft(c)


if __name__ == "__main__":
    unittest.main()
