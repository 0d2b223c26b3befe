"""Ranks by arrival (issue 25): torchrun's c10d line without --node-rank, as the PyTorch DDP
tutorial's Slurm script writes it, where nothing gives the pods an index.

torchrun's c10d backend lets the process on the endpoint's host serve the rendezvous (torch/
distributed/elastic/rendezvous/c10d_rendezvous_backend.py _create_tcp_store, is_host from
utils.py _matches_machine_hostname; a failed bind falls back to a client) and numbers the nodes
itself. trainlet: the agent whose own address is the endpoint's host and that binds the port
first leads (node rank 0); the others get node ranks as they join.

- test_two_pods_slurm_line: 2 pods (network namespaces, no JOB_COMPLETION_INDEX, no
  KUBERNETES_SERVICE_HOST) run `trainlet --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d
  --rdzv-endpoint <pod 1's IP>:29400 --rdzv-id 42 train.py`: both train (torch 1.13 DDP, gloo),
  ranks 0 and 1 distinct, and the endpoint's pod (started second) is node rank 0.
- test_two_agents_on_one_host: 2 agents on this host (no namespaces), endpoint 127.0.0.1: both
  are the endpoint's host; the one that binds first leads, the other joins; both train.
- test_neither_index_nor_endpoint_is_78: --nnodes 2 with no index and no endpoint stays 78.
"""

import os
import re
import socket
import subprocess
import tempfile
import time
import unittest

from harness import BIN, FINAL_LINE, PodsimTestCase, TRAIN_PY, rank_lines
from podsim import POD_PATH

SLURM_LINE = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
              "--rdzv-id", "42"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def final_ranks(text):
    """{global rank: world size} of every rank's final line in trainlet's output."""
    out = {}
    for rank, lines in rank_lines(text).items():
        for line in lines:
            m = FINAL_LINE.search(line)
            if m:
                out[rank] = int(m.group(4))
    return out


class ArrivalTest(PodsimTestCase):
    needs_trainlet = True

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.skip_without_torch_trainer()

    def test_two_pods_slurm_line(self):
        with self.cluster(pods=2) as c:
            c.publish_all()
            endpoint = f"{c.pod_ip(1)}:29400"
            argv = [BIN, *SLURM_LINE, "--rdzv-endpoint", endpoint, "--rdzv-timeout", "60",
                    "--grace-period", "5", TRAIN_PY, "--steps", "10"]
            no_index = {"JOB_COMPLETION_INDEX": None}
            c.start_pod(0, argv, env=no_index)  # not the endpoint's host: joins
            c.pods[0].wait_for_output(r"ranks by arrival: this agent joins", 10, "stderr")
            c.start_pod(1, argv, env=no_index)
            codes = c.wait_all(150)
            self.assertEqual(codes, {0: 0, 1: 0}, c.pods[0].tail() + c.pods[1].tail())
            self.assertIn("ranks by arrival: this agent leads", c.pods[1].stderr())
            self.assertEqual(final_ranks(c.pods[1].output()), {0: 2},
                             "the endpoint's pod is node rank 0")
            self.assertEqual(final_ranks(c.pods[0].output()), {1: 2})
            self.assertIn("node rank 1 by arrival", c.pods[0].stderr())
            self.assertNothingLeft(c)

    def test_two_agents_on_one_host(self):
        port = free_port()
        env = {"PATH": POD_PATH, "HOME": "/root", "LANG": "C.UTF-8"}
        argv = [BIN, *SLURM_LINE, "--rdzv-endpoint", f"127.0.0.1:{port}",
                "--rdzv-timeout", "60", "--grace-period", "5", TRAIN_PY, "--steps", "10"]
        with tempfile.TemporaryDirectory() as tmp:
            procs = []
            for i in range(2):
                out = open(os.path.join(tmp, f"agent-{i}.out"), "w+")
                procs.append((subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                               env=env, cwd=tmp), out))
            try:
                codes = [p.wait(150) for p, _ in procs]
            finally:
                for p, _ in procs:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
            texts = []
            for _, out in procs:
                out.seek(0)
                texts.append(out.read())
                out.close()
        detail = "\n----\n".join(t[-3000:] for t in texts)
        self.assertEqual(codes, [0, 0], detail)
        leads = [bool(re.search(r"ranks by arrival: this agent leads", t)) for t in texts]
        self.assertEqual(sorted(leads), [False, True], detail)
        leader, member = (0, 1) if leads[0] else (1, 0)
        self.assertRegex(texts[member], r"joins: .*port \d+ is taken")
        self.assertEqual(final_ranks(texts[leader]), {0: 2}, detail)
        self.assertEqual(final_ranks(texts[member]), {1: 2}, detail)

    def test_neither_index_nor_endpoint_is_78(self):
        env = {"PATH": POD_PATH, "HOME": "/root", "LANG": "C.UTF-8"}
        r = subprocess.run([BIN, "--nnodes", "2", "--nproc-per-node", "1", "--", "true"],
                           env=env, capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 78, r.stderr)
        self.assertIn("this pod has no index", r.stderr)


if __name__ == "__main__":
    unittest.main()
