"""JAX on a trainlet gang: examples/jax/train.py in 2 pods, with JAX's real CPU wheels
from PyPI (jax, jaxlib), does a cross-process psum through jax.distributed, its
coordinator at the JAX_COORDINATOR_ADDRESS trainlet gives every worker.

The wheels are ~100 MB, so they are not in scripts/install-deps: `scripts/install-jax`
puts them in /opt/trainlet-jax (TRAINLET_JAX_PYTHON names another interpreter); without
them the test is skipped and says so.
"""

import os
import subprocess
import unittest

from harness import REPO, PodsimTestCase

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


if __name__ == "__main__":
    unittest.main()
