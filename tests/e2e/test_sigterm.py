"""Scenario (d): SIGTERM to a pod's PID 1 (what the kubelet sends on deletion/preemption).

One pod (nnodes 1) with 2 workers. A trainer that handles SIGTERM gets it and the pod exits
143 well within the grace period; a trainer that ignores SIGTERM is SIGKILLed when the
grace period ends and the pod exits 143 then, not much later. The stop's SIGTERM goes to
each worker's main process first (as the kubelet's to a container's first process); a helper
a worker started in its own session (setsid: outside the worker's process group) gets SIGTERM
once the main processes have exited, still has time to act, and the pod exits within a second
of its last process, not at the end of the grace period.
"""

import os
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

    def test_sigterm_reaches_helpers_in_other_sessions(self):
        grace = 20
        # Each line: "<what> <wall time>". The helper takes a second to act on its SIGTERM
        # (flush, upload); the main process a second to save.
        script = r"""
marker=$1
now() { date +%s.%N; }
setsid sh -c 'trap "echo helper-term \$(date +%s.%N) >> \"\$0\"; sleep 1;
                    echo helper-done \$(date +%s.%N) >> \"\$0\"; exit 0" TERM
              while :; do sleep 0.1; done' "$marker" &
trap 'sleep 1; echo "main-done $(now)" >> "$marker"; exit 0' TERM
echo "rank $RANK ready"
while :; do sleep 0.1; done
"""
        with self.cluster(pods=1) as c:
            c.publish(0)
            marker = os.path.join(c.workdir, "helper-sigterm.marker")
            pod = c.start_pod(0, self.trainlet(nnodes=1, nproc=2, grace=grace,
                                               cmd=["sh", "-c", script, "trainer", marker]))
            for rank in (0, 1):
                pod.wait_for_output(rf"(?m)^\[rank{rank}\]: rank {rank} ready", 30)
            # A rank prints "ready" right after it forks its helper, which may not have
            # exec'd setsid's `sh -c trap` yet on a loaded machine: wait for both.
            deadline = time.monotonic() + 10
            while True:
                helpers = [p for p in pod.processes() if p.cmdline.startswith("sh -c trap")]
                if len(helpers) == 2 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            self.assertEqual(len(helpers), 2, pod.processes())
            pod.signal(signal.SIGTERM)
            self.assertEqual(pod.wait(grace + 10), 143, pod.tail())
            exited = time.time()
            notes = {}
            for line in open(marker).read().split("\n") if os.path.exists(marker) else []:
                if line:
                    what, when = line.split()
                    notes.setdefault(what, []).append(float(when))
            self.assertEqual(len(notes.get("main-done", [])), 2, notes)
            self.assertEqual(len(notes.get("helper-term", [])), 2,
                             "each helper in its own session must get SIGTERM\n" + pod.tail())
            self.assertEqual(len(notes.get("helper-done", [])), 2,
                             "each helper must have time to act on it\n" + pod.tail())
            self.assertGreaterEqual(min(notes["helper-term"]), max(notes["main-done"]),
                                    "a helper got SIGTERM while a main process still saved")
            self.assertLess(exited - max(notes["helper-done"]), 1.0,
                            "the pod lingered after its last process")
            self.assertNothingLeft(c)


if __name__ == "__main__":
    unittest.main()
