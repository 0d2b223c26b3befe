"""The rendezvous under network faults, in simulated pods (real sockets, dnsmasq, namespaces).

  * A leader address that accepts TCP but never answers (a frozen or terminating old
    leader still listed in DNS during a restart) comes first for the leader's name: the
    member leaves it after its reply deadline (3 s) and joins the live leader at the
    next address; before, it sat there until --rdzv-timeout with an empty "last error".
  * The same frozen address as the only one: the member's timeout names it as the last
    error.
  * MASTER_PORT held on the leader's pod by another process: the pod exits 75 (infra)
    naming MASTER_PORT, instead of rank 0's trainer failing to bind it (exit 1, worker).
  * The leader's own name missing from DNS: the leader says what to fix (Service
    selector, subdomain, publishNotReadyAddresses) and the member's timeout names the
    name that never resolved.
"""

import json
import os
import re
import time
import unittest

from harness import BIN, PYTHON, PodsimTestCase

RDZV_PORT = 29400
# A process that accepts TCP connections (the kernel completes them on a listening
# socket) and never reads or writes: a frozen leader.
FROZEN = ["python3", "-c",
          "import socket, time\n"
          "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          f"s.bind(('0.0.0.0', {RDZV_PORT})); s.listen(64)\n"
          "time.sleep(600)\n"]
# A trainer that binds MASTER_PORT as rank 0's TCPStore does, and fails if it cannot.
BIND_MASTER = ["python3", "-c",
               "import os, socket\n"
               "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
               "s.bind(('0.0.0.0', int(os.environ['MASTER_PORT']))); s.listen(1)\n"]


class WireFaultsTest(PodsimTestCase):
    needs_trainlet = True

    def tlog(self, c, i):
        return os.path.join(c.workdir, f"termination-{i}.log")

    def argv(self, c, i, cmd, **kw):
        return self.trainlet("--termination-log", self.tlog(c, i), cmd=cmd, **kw)

    def summary(self, c, i):
        with open(self.tlog(c, i)) as f:
            return json.loads(f.read())

    def test_silent_leader_address_is_left_for_the_next(self):
        with self.cluster(pods=3) as c:
            # Pod 2's address plays the frozen old leader; the live leader (pod 0) has a
            # new address. The leader's name lists the frozen one first.
            live = f"{c.pod_ip(0).rsplit('.', 1)[0]}.230"
            c.readdress(0, live)
            frozen = c.start_pod(2, FROZEN)
            time.sleep(0.5)
            # dnsmasq answers a hosts file's addresses last line first: the frozen
            # address comes first in the answer (and c-ares keeps that order for two
            # IPv4 addresses of one subnet).
            with open(os.path.join(c.hostsdir, c.hostname(0)), "w") as f:
                f.write(f"{live} {c.fqdn(0)}\n{c.pod_ip(2)} {c.fqdn(0)}\n")
            c.publish(1)
            time.sleep(0.5)  # dnsmasq reads the directory (inotify)
            t0 = time.time()
            leader = c.start_pod(0, self.argv(c, 0, ["true"], nnodes=2))
            member = c.start_pod(1, self.argv(c, 1, ["true"], nnodes=2))
            self.assertExit(member, 30, 0)
            self.assertExit(leader, 30, 0)
            took = time.time() - t0
            err = member.stderr()
            self.assertIn(f"{c.pod_ip(2)}: accepted the connection but sent nothing", err,
                          "the frozen address was tried first")
            self.assertLess(took, 15, "the member left the silent address after its reply "
                            "deadline, not at --rdzv-timeout")
            frozen.kill()

    def test_silent_only_address_is_the_last_error(self):
        with self.cluster(pods=3) as c:
            frozen = c.start_pod(2, FROZEN)
            time.sleep(0.5)
            c.publish(0, ip=c.pod_ip(2))
            c.publish(1)
            member = c.start_pod(1, self.argv(c, 1, ["true"], nnodes=2, rdzv_timeout=8))
            self.assertExit(member, 30, 75)
            s = self.summary(c, 1)
            self.assertRegex(s["reason"], rf"last error: {c.pod_ip(2)}: accepted the "
                             r"connection but sent nothing for \d+ ms")
            frozen.kill()

    def test_busy_master_port_is_infra_naming_it(self):
        with self.cluster(pods=1) as c:
            holder = "python3 -c 'import socket,time; s=socket.socket(); " \
                     "s.bind((\"0.0.0.0\", 29500)); s.listen(1); time.sleep(600)' & sleep 0.5; exec \"$@\""
            # Given explicitly: without --master-port the leader picks a free one
            # (test_a_busy_29500_and_a_rendezvous_on_29500_need_no_master_port).
            argv = ["sh", "-c", holder, "pod"] + self.trainlet(
                "--termination-log", self.tlog(c, 0), "--master-port", "29500",
                cmd=BIND_MASTER, nnodes=1, rdzv_timeout=3)
            pod = c.start_pod(0, argv)
            self.assertExit(pod, 30, 75)
            s = self.summary(c, 0)
            self.assertEqual(s["class"], "infra", str(s))
            self.assertIn("MASTER_PORT 29500", s["reason"])
            self.assertNotRegex(pod.stderr(), r"\[rank0\]", "no trainer was started")

    def test_a_busy_29500_and_a_rendezvous_on_29500_need_no_master_port(self):
        # The Slurm DDP example and torchtitan's multi-node script: --rdzv_endpoint HOST:29500,
        # which was 78 ("the rendezvous port and MASTER_PORT are both 29500"); and 29500 held
        # by another process on the leader's pod, which was 75 at the rendezvous deadline.
        with self.cluster(pods=2) as c:
            leader_host = c.pod_ip(0)
            holder = "python3 -c 'import socket,time; s=socket.socket(); " \
                     "s.bind((\"0.0.0.0\", 29501)); s.listen(1); time.sleep(600)' & sleep 0.5; exec \"$@\""
            pods = []
            for i in range(2):
                argv = self.trainlet("--termination-log", self.tlog(c, i), "--rdzv-backend",
                                     "c10d", "--rdzv-endpoint", f"{leader_host}:29500",
                                     "--node-rank", str(i), cmd=BIND_MASTER, nnodes=2,
                                     rdzv_timeout=60)
                pods.append(c.start_pod(i, ["sh", "-c", holder, "pod"] + argv))
            for pod in pods:
                self.assertExit(pod, 60, 0)
            # Rank 0's store got a port the leader found free: neither 29500 (the
            # rendezvous) nor the held 29501 (where MASTER_PORT + 1 used to go).
            ports = re.findall(r"MASTER_PORT=(\d+)", pods[1].stderr())
            self.assertTrue(ports, pods[1].stderr())
            self.assertNotIn(ports[0], ("29500", "29501"))

    def test_port_0_that_other_pods_would_need_is_refused(self):
        with self.cluster(pods=1) as c:
            argv = self.trainlet("--termination-log", self.tlog(c, 0), "--rdzv-endpoint",
                                 f"{c.pod_ip(0)}:0", "--node-rank", "0", cmd=["true"], nnodes=2)
            pod = c.start_pod(0, argv)
            self.assertExit(pod, 30, 78)
            self.assertIn("only a gang of one pod can use", self.summary(c, 0)["reason"])

    def test_missing_leader_name_says_what_to_fix(self):
        with self.cluster(pods=2) as c:
            c.publish(1)  # the leader's record is never published
            leader = c.start_pod(0, self.argv(c, 0, ["true"], nnodes=2, rdzv_timeout=25))
            member = c.start_pod(1, self.argv(c, 1, ["true"], nnodes=2, rdzv_timeout=20))
            self.assertExit(member, 40, 75)
            s = self.summary(c, 1)
            self.assertIn(f"the leader's name {c.fqdn(0)}", s["reason"])
            self.assertIn("never resolved", s["reason"])
            deadline = time.time() + 15
            while "publishNotReadyAddresses" not in leader.stderr() and time.time() < deadline:
                time.sleep(0.2)
            self.assertRegex(leader.stderr(), r"the leader's name \S+ does not resolve through "
                             r"the cluster DNS.*publishNotReadyAddresses: true")
            leader.kill()


if __name__ == "__main__":
    unittest.main()
