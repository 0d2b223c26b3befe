"""Scenario (e): a worker leaves orphans behind; trainlet, as PID 1, adopts and handles them.

Each of 2 workers forks 50 short-lived grandchildren that are re-parented to PID 1 and a
daemon (setsid, double fork) that holds the worker's stdout and ignores SIGTERM. While the
workers still run, the grandchildren must be reaped (no zombies). When the workers exit 0
the pod exits 0: the daemons get SIGTERM (they note it in a marker file), then SIGKILL at
the end of the grace period; nothing is left.
"""

import os
import time
import unittest

from harness import PodsimTestCase, trainer

LINGER = 3  # seconds each worker lives after spawning its orphans
GRACE = 2


class OrphansTest(PodsimTestCase):
    needs_trainlet = True

    def test_orphans_reaped_and_daemons_stopped(self):
        with self.cluster(pods=1) as c:
            c.publish(0)
            marker = os.path.join(c.workdir, "daemon-sigterm.marker")
            pod = c.start_pod(0, self.trainlet(nnodes=1, nproc=2, grace=GRACE, cmd=[
                trainer("orphans.sh"), marker, str(LINGER)]))
            for rank in (0, 1):
                pod.wait_for_output(rf"(?m)^\[rank{rank}\]: rank {rank} spawned orphans", 30)
            t_spawned = time.monotonic()

            # The `sleep 0.2` orphans end ~0.2 s after spawning; PID 1 must reap them
            # while the workers are still running (they linger LINGER s).
            deadline = t_spawned + LINGER - 0.5
            while True:
                procs = pod.processes()
                zombies = [p for p in procs if p.state == "Z"]
                sleepers = [p for p in procs if p.cmdline == "sleep 0.2" and p.ppid == pod.pid1]
                if not zombies and not sleepers:
                    break
                self.assertLess(time.monotonic(), deadline,
                                f"orphans not reaped: {len(zombies)} zombies "
                                f"{[(p.pid, p.ppid, p.comm) for p in zombies][:5]}, "
                                f"{len(sleepers)} live adopted sleeps")
                time.sleep(0.05)
            self.assertTrue(pod.running(), "pod ended before its workers' linger time")
            daemons = [p for p in pod.processes() if p.ppid == pod.pid1 and
                       p.cmdline.startswith("sh -c trap")]
            self.assertEqual(len(daemons), 2, pod.processes())

            code = pod.wait(LINGER + GRACE + 10)
            self.assertEqual(code, 0, pod.tail())
            notes = open(marker).read() if os.path.exists(marker) else ""
            self.assertEqual(notes.count("daemon got SIGTERM"), 2,
                             "each daemon must get SIGTERM before the SIGKILL")
            self.assertLess(pod.elapsed(), LINGER + GRACE + 6)
            self.assertNothingLeft(c)


if __name__ == "__main__":
    unittest.main()
