"""JAX on a trainlet gang: examples/jax/train.py in 2 pods, with JAX's real CPU wheels
from PyPI (jax, jaxlib), does a cross-process psum through jax.distributed, its
coordinator at the JAX_COORDINATOR_ADDRESS trainlet gives every worker.

The wheels are ~100 MB, so they are not in scripts/install-deps: `scripts/install-jax`
puts them in /opt/trainlet-jax (TRAINLET_JAX_PYTHON names another interpreter); without
them the test is skipped and says so.

Two `--standalone` runs on one machine each get a JAX coordinator port of their own, as
they get MASTER_PORT: first with a trainer that holds its coordinator port (no JAX
needed), then with two real JAX gangs side by side.
"""

import concurrent.futures
import os
import subprocess
import sys
import tempfile
import unittest

from harness import BIN, REPO, PodsimTestCase

JAX_PYTHON = os.environ.get("TRAINLET_JAX_PYTHON", "/opt/trainlet-jax/bin/python")
TRAIN_JAX = os.path.join(REPO, "examples", "jax", "train.py")


def jax_missing():
    if not os.access(JAX_PYTHON, os.X_OK):
        return f"no {JAX_PYTHON} (run scripts/install-jax)"
    r = subprocess.run([JAX_PYTHON, "-c", "import jax"], capture_output=True, text=True)
    return None if r.returncode == 0 else f"{JAX_PYTHON} cannot import jax: {r.stderr[-200:]}"


class JaxTest(PodsimTestCase):
    needs_trainlet = True

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        reason = jax_missing()
        if reason:
            raise unittest.SkipTest(reason)

    def test_psum_across_two_pods(self):
        with self.cluster(pods=2) as c:
            c.publish_all()
            argv = self.trainlet(nnodes=2, nproc=1, cmd=[JAX_PYTHON, TRAIN_JAX])
            for i in range(2):
                c.start_pod(i, argv, env={"JAX_PLATFORMS": "cpu"})
            codes = c.wait_all(180)
            outputs = "\n".join(p.output() for p in c.pods.values())
            self.assertEqual(codes, {0: 0, 1: 0}, outputs)
            for rank in range(2):
                self.assertIn(f"process {rank} of 2: psum=3 expected=3 devices=2", outputs)
            self.assertNothingLeft(c)


# Binds the coordinator's port as JAX's coordinator (rank 0) would, and keeps it until
# the other run has bound its own: a port the two runs share cannot be bound twice.
HOLD_PORT = r"""
import os, socket, sys, time
host, port = os.environ["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)
s = socket.socket()
s.bind((host, int(port)))
s.listen()
mine, other = sys.argv[1], sys.argv[2]
open(mine, "w").write(port)
deadline = time.monotonic() + 30
while not os.path.exists(other) and time.monotonic() < deadline:
    time.sleep(0.05)
print("coordinator port", port, "master port", os.environ["MASTER_PORT"], flush=True)
"""


def standalone_pair(argv_of):
    """Runs two `trainlet --standalone` at once; argv_of(i) is run i's trainer argv."""
    env = {"PATH": "/usr/bin:/bin", "HOSTNAME": "x", "JAX_PLATFORMS": "cpu",
           "TRAINLET_LIBNCCL": "/nonexistent/libnccl.so.2"}

    def one(i):
        return subprocess.run([BIN, "--standalone", "--rdzv-timeout", "60", *argv_of(i)],
                              env=env, capture_output=True, text=True, timeout=300)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return list(pool.map(one, range(2)))


@unittest.skipUnless(BIN and os.access(BIN, os.X_OK), "no trainlet binary")
class StandaloneJaxPortTest(unittest.TestCase):
    def test_two_standalone_runs_get_different_coordinator_ports(self):
        with tempfile.TemporaryDirectory() as d:
            marks = [os.path.join(d, f"bound-{i}") for i in range(2)]
            runs = standalone_pair(lambda i: ["--", sys.executable, "-c", HOLD_PORT,
                                              marks[i], marks[1 - i]])
            out = "\n".join(r.stderr + r.stdout for r in runs)
            self.assertEqual([r.returncode for r in runs], [0, 0], out)
            ports = []
            for m in marks:
                with open(m) as f:
                    ports.append(f.read())
            self.assertNotEqual(ports[0], ports[1], out)
            self.assertNotIn("29600", ports, "the fixed default, not a free port")

    def test_given_jax_port_is_kept(self):
        r = subprocess.run([BIN, "--standalone", "--jax-port", "29611", "--no-python", "sh", "-c",
                            "echo coordinator $JAX_COORDINATOR_ADDRESS"],
                           env={"PATH": "/usr/bin:/bin", "HOSTNAME": "x"},
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("coordinator 127.0.0.1:29611", r.stdout + r.stderr)

    def test_two_standalone_jax_gangs_side_by_side(self):
        reason = jax_missing()
        if reason:
            self.skipTest(reason)
        runs = standalone_pair(lambda i: ["--nproc-per-node", "2", "--", JAX_PYTHON, TRAIN_JAX])
        out = "\n".join(r.stderr + r.stdout for r in runs)
        self.assertEqual([r.returncode for r in runs], [0, 0], out)
        for r in runs:
            for rank in range(2):
                self.assertIn(f"process {rank} of 2: psum=3 expected=3", r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
