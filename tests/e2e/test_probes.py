"""Probes that nobody else on the network can silence (README, "Probes").

A 2-pod gang, each pod with --health-port 8080 and a worker that sleeps; pod 0 (the
leader) is probed as the kubelet does, from the node's side of the bridge (10.213.0.1,
podsim's "network" namespace): a fresh connection per probe, every 100 ms, /livez and
/readyz in turn, 1 s timeout (the kubelet's default timeoutSeconds). Meanwhile a flood
runs from pod 1's address (tests/e2e/probe_load.py flood, reopening every connection the
agent drops), and `trainlet probe live` runs as an exec probe inside pod 0.

  * slowloris: 200 connections sending one byte every 0.8 s for 10 s of probes: at
    least 99 % answered 200 within the timeout (the real distribution is printed), every
    exec probe exits 0, the leader's RSS stays under 16 MiB, the flood was really
    dropped (evictions and the request deadline), and the leader says so in a few
    rate-limited lines (one per source address per 10 s), not one per connection.
  * idle: the same with 1,000 connections that send nothing.
  * out of descriptors: pod 0's RLIMIT_NOFILE is lowered from the host (prlimit(1) on its
    PID 1) to just above its highest open descriptor, the gaps below filled by the
    flood's own connections (50 idle ones): accept(2) fails with EMFILE, yet probes are
    still answered (the reserve descriptor, then evictions) and the log names the
    reason and the limit.
  * every test's gang runs without --token-file with its index from JOB_COMPLETION_INDEX:
    each pod logs exactly one line saying the gang is unauthenticated.
"""

import json
import os
import re
import statistics
import subprocess
import time

from harness import BIN, PYTHON, PodsimTestCase

HEALTH_PORT = 8080
PROBE_LOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe_load.py")
RSS_LIMIT_KIB = 16 * 1024
WORKER = ["sh", "-c", "echo up; exec sleep 600"]


def vm(pid, field):
    """VmRSS/VmHWM of a host pid in KiB (proc(5))."""
    with open(f"/proc/{pid}/status") as f:
        m = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M)
    return int(m.group(1))


class ProbeTest(PodsimTestCase):
    needs_trainlet = True
    standin_skip = "the stand-in has no health server"

    # -- helpers -------------------------------------------------------------------------
    def start_gang(self, c):
        c.publish_all()
        for i in range(2):
            c.start_pod(i, self.trainlet("--health-port", str(HEALTH_PORT), nnodes=2,
                                         rdzv_timeout=60, cmd=WORKER))
        for i in range(2):
            c.pods[i].wait_for_output(r"(?m)^\[rank\d\]: up", 60, "stdout")
        # No --token-file, the index from JOB_COMPLETION_INDEX: each pod says once that the
        # gang is unauthenticated and how to mount a token.
        for i in range(2):
            said = [ln for ln in c.pods[i].stderr().splitlines()
                    if "the gang is unauthenticated (no --token-file)" in ln]
            self.assertEqual(len(said), 1, f"pod {i}\n" + c.pods[i].tail())
            self.assertIn("examples/k8s/", said[0])

    def flood(self, c, mode, conns):
        """probe_load.py flood from pod 1's address at pod 0; returns once every
        connection has been established once."""
        p = subprocess.Popen(["ip", "netns", "exec", c.pod_ns(1), PYTHON, PROBE_LOAD, "flood",
                              c.pod_ip(0), str(HEALTH_PORT), "--conns", str(conns),
                              "--mode", mode, "--interval", "0.8"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
        self.addCleanup(lambda: (p.poll() is None and p.kill(), p.wait()))
        line = p.stdout.readline().strip()
        self.assertEqual(line, "ready", f"the flood did not get its {conns} connections")
        c.event(f"flood: {conns} {mode} connections from {c.pod_ip(1)}")
        return p

    def end_flood(self, c, p):
        p.terminate()
        out, _ = p.communicate(timeout=30)
        counts = json.loads(out.strip().splitlines()[-1])
        c.event(f"flood ended: {counts}")
        return counts

    def kubelet(self, c, seconds):
        """The kubelet's probes (probe_load.py probe) from the node's address."""
        return subprocess.Popen(["ip", "netns", "exec", c.net_ns, PYTHON, PROBE_LOAD, "probe",
                                 c.pod_ip(0), str(HEALTH_PORT), "--every", "0.1",
                                 "--seconds", str(seconds), "--timeout", "1"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)

    def exec_probe(self, c):
        r = subprocess.run(["ip", "netns", "exec", c.pod_ns(0), BIN, "probe", "live",
                            "--health-port", str(HEALTH_PORT)],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=30)
        return r.returncode, r.stdout.strip()

    def probe_under_load(self, c, seconds):
        """The kubelet's probes for `seconds`, exec probes and RSS samples meanwhile.
        Returns (kubelet results, exec results, highest VmRSS in KiB)."""
        kubelet = self.kubelet(c, seconds)
        execs, rss = [], 0
        while kubelet.poll() is None:
            execs.append(self.exec_probe(c))
            rss = max(rss, vm(c.pods[0].pid1, "VmRSS"))
            time.sleep(0.2)
        out, _ = kubelet.communicate()
        return json.loads(out), execs, rss

    def assertAnswered(self, c, results, execs, what):
        ok = [r for r in results if r[1] == 200]
        ms = sorted(r[2] for r in ok)
        p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))] if ms else float("nan")
        print(f"\n    {what}: {len(ok)}/{len(results)} probes 200 (median "
              f"{statistics.median(ms) if ms else float('nan'):.1f} ms, p99 {p99:.1f} ms, max "
              f"{ms[-1] if ms else float('nan'):.1f} ms); exec probes {len(execs)}, "
              f"{sum(1 for code, _ in execs if code == 0)} exit 0", end=" ", flush=True)
        failed = [r for r in results if r[1] != 200]
        self.assertGreaterEqual(len(results), 50, "the prober ran too few probes")
        self.assertGreaterEqual(len(ok), 0.99 * len(results),
                                f"{what}: failed probes {failed[:10]}\n" + c.pods[0].tail())
        self.assertTrue(execs, "no exec probe ran")
        self.assertEqual([e for e in execs if e[0] != 0], [], f"{what}: exec probes failed")
        self.assertTrue(c.pods[0].running(), c.pods[0].tail())

    def assertFloodDroppedQuietly(self, c, counts, conns):
        self.assertGreater(counts["dropped"], 0, f"the agent never dropped a connection {counts}")
        lines = [ln for ln in c.pods[0].stderr().splitlines()
                 if f"health: closing {c.pod_ip(1)}:" in ln]
        self.assertTrue(lines, "no line says flood connections were closed\n" + c.pods[0].tail())
        # One line per source address per 10 s (with a count of the rest), not one per
        # connection: the run is well under a minute.
        self.assertLessEqual(len(lines), 8, "\n".join(lines[:20]))
        self.assertLess(len(lines), counts["dropped"], "not rate-limited")

    def run_flood(self, mode, conns):
        with self.cluster(pods=2) as c:
            self.start_gang(c)
            flood = self.flood(c, mode, conns)
            results, execs, rss = self.probe_under_load(c, 10)
            counts = self.end_flood(c, flood)
            hwm = vm(c.pods[0].pid1, "VmHWM")
            print(f"\n    flood {counts}; leader VmRSS max {rss} KiB, VmHWM {hwm} KiB",
                  end=" ", flush=True)
            self.assertAnswered(c, results, execs, f"{conns} {mode} connections")
            self.assertFloodDroppedQuietly(c, counts, conns)
            self.assertLess(hwm, RSS_LIMIT_KIB, "the leader's memory grew with the flood")
            # Still a working gang: both pods run, the leader still ready.
            for i in range(2):
                self.assertTrue(c.pods[i].running(), c.pods[i].tail())

    # -- tests ---------------------------------------------------------------------------
    def test_probes_answered_through_200_slow_connections(self):
        self.run_flood("slow", 200)

    def test_probes_answered_through_1000_idle_connections(self):
        self.run_flood("idle", 1000)

    def test_probes_answered_out_of_descriptors_and_the_reason_logged(self):
        with self.cluster(pods=2) as c:
            self.start_gang(c)
            pid1 = c.pods[0].pid1
            highest = max(int(fd) for fd in os.listdir(f"/proc/{pid1}/fd"))
            limit = highest + 1
            subprocess.run(["prlimit", "--pid", str(pid1), f"--nofile={limit}:"], check=True)
            c.event(f"RLIMIT_NOFILE of pod 0 lowered to {limit}")
            flood = self.flood(c, "idle", 50)
            results, execs, _ = self.probe_under_load(c, 5)
            counts = self.end_flood(c, flood)
            self.assertAnswered(c, results, execs, f"RLIMIT_NOFILE {limit}, 50 idle connections")
            c.pods[0].wait_for_output(
                rf"health: accept failed: Too many open files \(RLIMIT_NOFILE {limit}\)", 5,
                "stderr")
            lines = [ln for ln in c.pods[0].stderr().splitlines() if "accept failed" in ln]
            self.assertLessEqual(len(lines), 3, "accept failures are rate-limited\n"
                                 + "\n".join(lines[:10]))
            self.assertGreater(counts["dropped"], 0, counts)


if __name__ == "__main__":
    import unittest
    unittest.main()
