"""Self-tests of the simulated cluster (podsim), with shell/python stand-ins as PID 1.

They prove what the trainlet tests rely on: PID 1, hostname, kubelet-style /etc/hosts and
resolv.conf, DNS records that appear, change and vanish while pods run, pod-to-pod TCP,
signals to PID 1, process/zombie accounting, teardown/cleanup of namespaces, and two runs at
once that cannot touch each other's pods or namespaces.
"""

import json
import os
import signal
import subprocess
import time
import unittest

import podsim
from harness import PYTHON, PodsimTestCase


def getent(name):
    return f"getent hosts {name} || echo 'NX {name}'"


class PodsimTest(PodsimTestCase):

    def test_pod_is_pid1_with_hostname_hosts_and_resolv(self):
        with self.cluster(pods=3) as c:
            pod = c.start_pod(2, ["sh", "-c",
                                  'echo "pid=$$ host=$(hostname) index=$JOB_COMPLETION_INDEX"; '
                                  'cat /etc/hosts /etc/resolv.conf; ls /proc | grep -c "^[0-9]"'])
            self.assertEqual(pod.wait(10), 0, pod.tail())
            out = pod.stdout()
            self.assertIn("pid=1 host=trainer-2 index=2", out)
            self.assertRegex(out, r"(?m)^10\.213\.0\.12\s+trainer-2\.trainer\.default\.svc"
                                  r"\.cluster\.local\s+trainer-2$")
            self.assertIn("search default.svc.cluster.local svc.cluster.local cluster.local", out)
            self.assertIn(f"nameserver {podsim.DNS_IP}", out)
            self.assertIn("options ndots:5", out)
            # /proc is the pod's own: sh, ls, grep (and maybe nothing else).
            self.assertLessEqual(int(out.split()[-1]), 3, out)
            self.assertIsNotNone(pod.pid1)
            self.assertNotEqual(pod.pid1, 1)

    def test_jobset_hostnames(self):
        names = ["pytorch-ddp-leader-0-0", "pytorch-ddp-workers-0-0"]
        with self.cluster(pods=2, svc="pytorch-ddp", hostnames=names) as c:
            c.publish_all()
            pod = c.start_pod(1, ["sh", "-c", "hostname; cat /etc/hosts; "
                                  + getent("pytorch-ddp-leader-0-0.pytorch-ddp.default.svc."
                                           "cluster.local")])
            self.assertEqual(pod.wait(10), 0, pod.tail())
            out = pod.stdout()
            self.assertEqual(out.splitlines()[0], "pytorch-ddp-workers-0-0")
            self.assertRegex(out, r"(?m)^10\.213\.0\.11\s+pytorch-ddp-workers-0-0\.pytorch-ddp"
                                  r"\.default\.svc\.cluster\.local\s+pytorch-ddp-workers-0-0$")
            self.assertRegex(out, r"(?m)^10\.213\.0\.10\s+pytorch-ddp-leader-0-0\.pytorch-ddp")
        with self.assertRaises(ValueError):
            podsim.Cluster(pods=2, hostnames=["a", "a"])

    def test_dns_publish_change_unpublish(self):
        with self.cluster(pods=2) as c:
            def lookup(*names):
                pod = c.start_pod(1, ["sh", "-c", "; ".join(getent(n) for n in names)])
                self.assertEqual(pod.wait(10), 0, pod.tail())
                return pod.stdout()

            out = lookup("trainer-0.trainer")
            self.assertIn("NX trainer-0.trainer", out)
            c.publish(0)
            c.publish(1)
            out = lookup("trainer-0.trainer", "trainer-0.trainer.default.svc.cluster.local",
                         "trainer-1.trainer", "trainer", "example.com")
            self.assertRegex(out, r"(?m)^10\.213\.0\.10\s+trainer-0\.trainer\.default")
            self.assertNotIn("NX trainer-0", out)
            self.assertRegex(out, r"(?m)^10\.213\.0\.11\s+trainer-1\.trainer\.default")
            self.assertRegex(out, r"(?m)^10\.213\.0\.1[01]\s+trainer\.default\.svc")
            self.assertIn("NX example.com", out)  # not REFUSED or a hang: NXDOMAIN
            c.publish(0, ip="10.213.0.99")  # e.g. a stale record
            self.assertRegex(lookup("trainer-0.trainer"), r"(?m)^10\.213\.0\.99\s")
            c.unpublish(0)
            self.assertIn("NX trainer-0.trainer", lookup("trainer-0.trainer"))

    def test_delayed_publish(self):
        with self.cluster(pods=2) as c:
            c.publish(0, delay=1.5)
            t0 = time.monotonic()
            pod = c.start_pod(1, ["sh", "-c",
                                  "until getent hosts trainer-0.trainer; do sleep 0.1; done"])
            self.assertEqual(pod.wait(10), 0, pod.tail())
            self.assertGreater(time.monotonic() - t0, 1.3)
            self.assertIn("trainer-0.trainer.default.svc.cluster.local is NXDOMAIN",
                          open(c.dns_log).read())

    def test_pod_to_pod_tcp_and_signals_to_pid1(self):
        with self.cluster(pods=2) as c:
            c.publish_all()
            server = c.start_pod(0, [PYTHON, "-m", "http.server", "8080", "--bind", "0.0.0.0",
                                     "--directory", "/etc"])
            client = c.start_pod(1, [PYTHON, "-c", """
import time, urllib.request
for attempt in range(100):
    try:
        body = urllib.request.urlopen("http://trainer-0.trainer:8080/hosts", timeout=2).read()
        print("fetched after", attempt, "retries:", body.decode().splitlines()[-1]); break
    except OSError as e:
        time.sleep(0.1)
else:
    raise SystemExit("never connected: %s" % e)
"""])
            self.assertEqual(client.wait(20), 0, client.tail() + server.tail())
            # Pod 0's own /etc/hosts, served by pod 0, fetched by pod 1 over the bridge.
            self.assertRegex(client.stdout(), r"fetched after \d+ retries: 10\.213\.0\.10\s+"
                                              r"trainer-0\.trainer\.default")
            self.assertRegex(server.stderr(), r'10\.213\.0\.11 .*"GET /hosts')

            # PID 1 without a SIGTERM handler ignores SIGTERM (pid_namespaces(7)) ...
            server.signal(signal.SIGTERM)
            time.sleep(0.3)
            self.assertTrue(server.running(), "python as PID 1 should ignore SIGTERM")
            # ... but SIGKILL from the parent namespace is forced.
            server.signal(signal.SIGKILL)
            self.assertEqual(server.wait(5), 128 + signal.SIGKILL)

    def test_processes_zombies_and_trapped_signal(self):
        with self.cluster(pods=1) as c:
            # PID 1 forks a child that exits and is never reaped: a zombie.
            pod = c.start_pod(0, [PYTHON, "-c", """
import os, signal, sys, time
signal.signal(signal.SIGTERM, lambda *a: (print("got SIGTERM", flush=True), os._exit(7)))
if os.fork() == 0:
    os._exit(0)
print("forked", flush=True)
time.sleep(60)
"""])
            pod.wait_for_output("forked", 10)
            deadline = time.monotonic() + 5
            while not pod.zombies() and time.monotonic() < deadline:
                time.sleep(0.02)
            zombies = pod.zombies()
            self.assertEqual(len(zombies), 1, pod.processes())
            self.assertEqual(zombies[0].ppid, pod.pid1)
            self.assertEqual(len(c.processes_in_pod(0)), 2)
            pod.signal(signal.SIGTERM)
            self.assertEqual(pod.wait(5), 7)
            self.assertIn("got SIGTERM", pod.stdout())
            # The kernel reaps a dead init's namespace.
            self.assertNothingLeft(c)

    def test_teardown_removes_namespaces_and_processes(self):
        with self.cluster(pods=2) as c:
            c.publish_all()
            pods = [c.start_pod(i, ["sh", "-c", "sleep 300 & sleep 300"]) for i in range(2)]
            names = [c.net_ns, c.pod_ns(0), c.pod_ns(1)]
            dnsmasq_pid = c._dnsmasq.pid
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for n in names:
            self.assertNotIn(n, listed.split())
        for p in pods:
            self.assertFalse(p.running())
            self.assertEqual(p.processes(), [])
        self.assertIsNone(podsim.proc_info(dnsmasq_pid))

    def test_cleanup_stale_removes_dead_runs(self):
        # A run killed outright (no teardown, no atexit): pdeathsig takes its pods down,
        # its namespaces and owner file stay until a later run's sweep.
        with OtherRun(self, own_pid_namespace=False) as other:
            up = other.call("up 2")
            other.call("start 1")
            self.assertTrue(os.path.exists(podsim._owner_path(up["run"])))
            other.proc.kill()
            other.proc.wait(5)
        podsim.cleanup_stale(log=lambda m: None)  # (a suite beside this one may sweep first)
        for name in up["names"]:
            self.assertFalse(os.path.exists(f"/run/netns/{name}"))
        self.assertFalse(os.path.exists(podsim._owner_path(up["run"])))

    def test_reused_pid_namespace_of_a_dead_pod_is_not_its_own(self):
        # Two runs at once: the kernel gives the next PID namespace created the inode
        # number of one just freed, so once this run's pod exits, another run's pod can
        # sit in a namespace with "our" pod's inode. Neither killing nor tearing down our
        # pod, nor the leftover check, nor the stale sweep may touch that pod.
        with OtherRun(self, own_pid_namespace=False) as other:
            up = other.call("up 1")
            with self.cluster(pods=1) as c:
                # Each try: a pod of ours ends, then theirs starts; the kernel hands out the
                # lowest free inode, so theirs usually gets one of our dead pods' (namespaces
                # that other suites create meanwhile can take it first: then try again).
                dead, deadline = {}, time.monotonic() + 30
                while time.monotonic() < deadline:
                    mine = c.start_pod(0, ["sleep", "0.2"])
                    self.assertEqual(mine.wait(10), 0, mine.tail())
                    dead[mine.pidns] = mine
                    theirs = other.call("start 0")
                    if theirs["pidns"] in dead:
                        break
                    other.call("stop 0")
                else:
                    self.skipTest(f"the kernel reused none of {len(dead)} PID namespace inodes")
                mine = dead[theirs["pidns"]]
                self.assertEqual(mine.processes(), [])
                mine.kill()
                self.assertNothingLeft(c, timeout=0.5)
                self.assertEqual(podsim.cleanup_stale(log=lambda m: None), [])
            # c torn down: every pod killed again, its namespaces destroyed.
            state = other.call("check")
            self.assertEqual(state["running"], {"0": True}, "the other run's pod was killed")
            self.assertEqual(set(state["usable"]), set(up["names"]))
            self.assertTrue(all(state["usable"].values()), state)

    def test_stale_sweep_leaves_runs_it_cannot_see_alone(self):
        # A run in another PID namespace (a container, another clone's suite under
        # `unshare --pid`): its pid means another process here, or none.
        with OtherRun(self, own_pid_namespace=True) as other:
            up = other.call("up 2")
            other.call("start 0")
            listed = subprocess.run(["ip", "netns", "list"], capture_output=True,
                                    text=True).stdout.split()
            self.assertTrue(set(up["names"]) <= set(listed), listed)
            removed = podsim.cleanup_stale(log=lambda m: None)
            self.assertEqual(set(removed) & set(up["names"]), set())
            state = other.call("check")
            self.assertEqual(state["running"], {"0": True}, "the other run's pod was killed")
            self.assertTrue(all(state["usable"].values()), state)
            self.assertEqual(other.call("down"), {})


class OtherRun:
    """Another run of the harness beside this test's: podsim_driver.py in its own process,
    in this PID namespace or a fresh one. Torn down (or killed) on exit."""

    def __init__(self, test, own_pid_namespace):
        self.test = test
        prefix = (["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"]
                  if own_pid_namespace else [])
        self.proc = subprocess.Popen(
            ["setpriv", "--pdeathsig", "KILL"] + prefix +
            [PYTHON, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                  "podsim_driver.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def call(self, command):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        self.test.assertTrue(line, f"the other run died at {command!r} ({self.proc.poll()})")
        return json.loads(line)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("down\n")
                self.proc.stdin.flush()
                self.proc.wait(20)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()
        return False


if __name__ == "__main__":
    unittest.main()
