"""Every address and host name a cluster gives a pod (agent/include/trainlet/agent/base/
address.h; identity.h): IPv6-only and dual-stack pod networks, host names that are the
pod's FQDN (pod spec setHostnameAsFQDN: true), leader addresses in each written form, and
the forms trainlet refuses at once.

Simulated pods (podsim: namespaces, dnsmasq serving A and/or AAAA records, ULA fd00:213::/64
inside the test's own namespaces), each agent PID 1. No test waits out --rdzv-timeout: a
form either forms the gang within seconds or is refused with exit 78 at once.

- test_ipv6_only_torch_gang: no IPv4 on eth0, the leader's name derived from the pod's FQDN
  (AAAA only): examples/pytorch/train.py (DDP, gloo over IPv6) all-reduces to the end; the
  trainers' store (MASTER_ADDR:MASTER_PORT) is an IPv6 address.
- test_dual_stack_fqdn_hostname_torch_gang: A and AAAA records, two /etc/hosts lines, the
  host name is the FQDN: the gang forms and train.py all-reduces.
- test_fqdn_hostname_ipv4_gang: setHostnameAsFQDN on an IPv4 cluster (the case that exited
  78 "has no FQDN in /etc/hosts"): the leader's name is derived, the gang forms.
- test_ipv6_leader_address_forms: --master-addr bare and in brackets, MASTER_ADDR in
  brackets, --rdzv-endpoint [v6]:port: each forms at once; workers get MASTER_ADDR bare and
  JAX_COORDINATOR_ADDRESS bracketed with its port; the job id is the same for each form.
- test_health_and_metrics_dual_stack: the health port answers /readyz and /metrics on the
  pod's IPv6 address in an IPv6-only pod, and on both addresses in a dual-stack pod.
- test_jobset_gang_ipv6_fqdn_hostnames: a JobSet gang (--gang) with JobSet host names set as
  FQDNs, IPv6 only: the leader's name is derived and the gang forms.
- test_refused_forms_exit_78_at_once: a zone id, a port where none may follow, and
  hostNetwork's node /etc/hosts (no pod FQDN): each exits 78 within seconds, naming the form
  and the fix.
"""

import os
import re
import subprocess
import unittest

from harness import BIN, FINAL_LINE, PYTHON, TRAIN_PY, PodsimTestCase, rank_lines, torch_missing

HEALTH_PORT = 18089
JAX_PORT = 18476

ENV_WORKER = r"""
echo "env MASTER_ADDR=$MASTER_ADDR JAX=$JAX_COORDINATOR_ADDRESS RUN=$TORCHELASTIC_RUN_ID RANK=$RANK WORLD=$WORLD_SIZE"
"""

SLEEP_WORKER = r"""
echo "rank $RANK up"
trap 'exit 0' TERM
while :; do sleep 0.1; done
"""


class AddressTest(PodsimTestCase):
    needs_trainlet = True
    standin_skip = "the stand-in has no IPv6 or host-name handling"

    def torch_or_skip(self):
        reason = torch_missing() or (None if os.path.isfile(TRAIN_PY) else f"no {TRAIN_PY}")
        if reason:
            self.skipTest(reason)

    def start_all(self, c, *flags, cmd, npods=2, env=None, rdzv_timeout=60):
        c.publish_all()
        for i in range(npods):
            c.start_pod(i, self.trainlet(*flags, cmd=cmd, nnodes=npods,
                                         rdzv_timeout=rdzv_timeout), env=env)

    def assert_torch_gang(self, c, npods=2, timeout=150):
        codes = c.wait_all(timeout)
        self.assertEqual(codes, {i: 0 for i in range(npods)}, c.diagnostics())
        for i in range(npods):
            out = c.pods[i].output()
            finals = [FINAL_LINE.search(line) for lines in rank_lines(out).values()
                      for line in lines]
            finals = [m for m in finals if m]
            self.assertEqual(len(finals), 1, f"pod {i}: one final line\n" + c.pods[i].tail())
            self.assertEqual(finals[0].group(3), "True", f"pod {i}: params differ")
            self.assertEqual(int(finals[0].group(4)), npods)

    def env_lines(self, c, i):
        return [ln for lines in rank_lines(c.pods[i].output()).values() for ln in lines
                if ln.startswith("env ")]

    # -- IPv6 only --------------------------------------------------------------------
    def test_ipv6_only_torch_gang(self):
        self.torch_or_skip()
        with self.cluster(pods=2, family="ipv6") as c:
            self.start_all(c, cmd=[PYTHON, TRAIN_PY, "--steps", "20", "--backend", "gloo"])
            self.assert_torch_gang(c)
            # The trainers' store: MASTER_ADDR is pod 0's IPv6 address, reached over IPv6.
            err = c.pods[1].stderr()
            self.assertRegex(err, rf"MASTER_ADDR={re.escape(c.pod_ip(0))} MASTER_PORT=\d+",
                             c.pods[1].tail())

    def test_dual_stack_fqdn_hostname_torch_gang(self):
        self.torch_or_skip()
        with self.cluster(pods=2, family="dual", fqdn_hostname=True) as c:
            self.start_all(c, cmd=[PYTHON, TRAIN_PY, "--steps", "20", "--backend", "gloo"])
            self.assert_torch_gang(c)

    def test_fqdn_hostname_ipv4_gang(self):
        with self.cluster(pods=3, fqdn_hostname=True) as c:
            self.start_all(c, cmd=["sh", "-c", ENV_WORKER], npods=3)
            self.assertEqual(c.wait_all(30), {0: 0, 1: 0, 2: 0}, c.diagnostics())
            err = c.pods[2].stderr()
            self.assertIn(f"trainer-0.{c.domain}.", err, "the derived leader's name")
            for i in range(3):
                self.assertEqual(len(self.env_lines(c, i)), 1, c.pods[i].tail())

    # -- leader address forms --------------------------------------------------------
    def test_ipv6_leader_address_forms(self):
        forms = [
            ("--master-addr bare", lambda c: ["--master-addr", c.pod_ip(0)], None),
            ("--master-addr bracketed", lambda c: ["--master-addr", f"[{c.pod_ip(0)}]"], None),
            ("MASTER_ADDR bracketed", lambda c: [], lambda c: {"MASTER_ADDR": f"[{c.pod_ip(0)}]"}),
            ("--rdzv-endpoint [v6]:port",
             lambda c: ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"[{c.pod_ip(0)}]:29400"],
             None),
        ]
        run_ids = set()
        for name, flags, env in forms:
            with self.subTest(form=name), self.cluster(pods=2, family="ipv6") as c:
                self.start_all(c, "--jax-port", str(JAX_PORT), *flags(c), cmd=["sh", "-c", ENV_WORKER],
                               env=env(c) if env else None)
                self.assertEqual(c.wait_all(20), {0: 0, 1: 0}, f"{name}\n" + c.diagnostics())
                for i in range(2):
                    lines = self.env_lines(c, i)
                    self.assertEqual(len(lines), 1, c.pods[i].tail())
                    self.assertIn(f"MASTER_ADDR={c.pod_ip(0)} ", lines[0])
                    self.assertIn(f"JAX=[{c.pod_ip(0)}]:{JAX_PORT} ", lines[0])
                    run_ids.add(re.search(r"RUN=(\S+)", lines[0]).group(1))
        # The job id derived from the address is the same whichever form gave it.
        self.assertEqual(run_ids, {"fd00:213::10"})

    # -- probes and metrics --------------------------------------------------------------
    def probe(self, c, from_pod, address, path):
        url = f"http://[{address}]:{HEALTH_PORT}{path}" if ":" in address else \
            f"http://{address}:{HEALTH_PORT}{path}"
        code = ("import sys, urllib.request\n"
                f"r = urllib.request.urlopen({url!r}, timeout=5)\n"
                "sys.stdout.write(str(r.status) + ' ' + r.read().decode()[:4000])\n")
        r = subprocess.run(["ip", "netns", "exec", c.pod_ns(from_pod), PYTHON, "-c", code],
                           capture_output=True, text=True, timeout=20)
        self.assertEqual(r.returncode, 0, f"{url}: {r.stderr[-500:]}")
        return r.stdout

    def test_health_and_metrics_dual_stack(self):
        for family in ("ipv6", "dual"):
            with self.subTest(family=family), self.cluster(pods=2, family=family) as c:
                self.start_all(c, "--health-port", str(HEALTH_PORT),
                               cmd=["sh", "-c", SLEEP_WORKER])
                for i in range(2):
                    c.pods[i].wait_for_output(r"(?m)^\[rank\d+\]: rank \d+ up", 30)
                for address in c.pod_ips(0):
                    self.assertTrue(self.probe(c, 1, address, "/readyz").startswith("200"))
                    metrics = self.probe(c, 1, address, "/metrics")
                    self.assertTrue(metrics.startswith("200"), metrics[:200])
                    self.assertIn("trainlet_", metrics)
                for i in range(2):
                    c.pods[i].signal(15)
                codes = c.wait_all(30)  # 76: stopped by the other pod's stop first
                self.assertTrue(set(codes.values()) <= {143, 76}, f"{codes}\n" + c.diagnostics())

    # -- JobSet ----------------------------------------------------------------------------
    def test_jobset_gang_ipv6_fqdn_hostnames(self):
        names = ["pytorch-ddp-leader-0-0", "pytorch-ddp-workers-0-0", "pytorch-ddp-workers-0-1"]
        with self.cluster(pods=3, svc="pytorch-ddp", hostnames=names, family="ipv6",
                          fqdn_hostname=True) as c:
            c.publish_all()
            for i, completion in enumerate([0, 0, 1]):
                # --gang implies --nnodes: no --nnodes, as JobSet pods run it.
                c.start_pod(i, [BIN, "--gang", "leader=1,workers=2", "--grace-period", "5",
                                "--rdzv-timeout", "60", "--log-level", "debug", "--",
                                "sh", "-c", ENV_WORKER],
                            env={"JOB_COMPLETION_INDEX": str(completion)})
            self.assertEqual(c.wait_all(30), {0: 0, 1: 0, 2: 0}, c.diagnostics())
            for i in range(3):
                lines = self.env_lines(c, i)
                self.assertEqual(len(lines), 1, c.pods[i].tail())
                self.assertIn(f"RANK={i} WORLD=3", lines[0])
            self.assertIn(f"pytorch-ddp-leader-0-0.{c.domain}.", c.pods[2].stderr())

    # -- refused at once ---------------------------------------------------------------
    def test_refused_forms_exit_78_at_once(self):
        rows = [
            ("zone id", {"MASTER_ADDR": "fe80::1%eth0"}, None, "the zone id '%eth0'"),
            ("a port where none may follow", {"MASTER_ADDR": "[fd00:213::10]:29500"}, None,
             "no port may follow the host here"),
            ("hostNetwork", None,
             "# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n"
             "fd00:213::99\tgpu-node-7.dc.example\tgpu-node-7\n",
             "hostNetwork: true"),
        ]
        for name, env, hosts, message in rows:
            with self.subTest(form=name), self.cluster(pods=2, family="ipv6") as c:
                if hosts:  # the kubelet copies the node's hosts file under its header
                    with open(os.path.join(c.workdir, "pod-1.hosts"), "w") as f:
                        f.write(hosts)
                c.publish_all()
                pod = c.start_pod(1, self.trainlet(cmd=["true"], nnodes=2), env=env)
                self.assertExit(pod, 10, 78)
                self.assertLess(pod.elapsed(), 10)
                self.assertIn(message, pod.stderr(), pod.tail())


if __name__ == "__main__":
    unittest.main()
