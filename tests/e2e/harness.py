"""Shared pieces of the e2e test cases: configuration, a TestCase base, output parsing.

Configuration comes from the environment, which run_e2e.py sets from its flags, so a
single module also runs on its own:
    TRAINLET_E2E_BIN=/path/to/trainlet TRAINLET_E2E_REPO=. /usr/bin/python3 -m unittest \
        discover -s tests/e2e -t tests/e2e -k sigterm
  TRAINLET_E2E_BIN      the trainlet binary under test (tests needing it skip without it)
  TRAINLET_E2E_REPO     the source tree (for examples/pytorch/train.py)
  TRAINLET_E2E_WORKDIR  where each test's pods write their logs (default: a temp dir)
  TRAINLET_E2E_KEEP=1   keep logs of passing tests too (failing tests' logs are always kept)
"""

import contextlib
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import podsim

HERE = os.path.dirname(os.path.abspath(__file__))
TRAINERS = os.path.join(HERE, "trainers")
PYTHON = "/usr/bin/python3"  # Debian's, which has torch; the first python3 on PATH may not
BIN = os.environ.get("TRAINLET_E2E_BIN")
REPO = os.environ.get("TRAINLET_E2E_REPO", os.path.dirname(os.path.dirname(HERE)))
KEEP = os.environ.get("TRAINLET_E2E_KEEP") == "1"
TRAIN_PY = os.path.join(REPO, "examples", "pytorch", "train.py")

RANK_LINE = re.compile(r"^\[rank(\d+)\]: (.*)$", re.M)
FINAL_LINE = re.compile(r"final loss (\S+) first loss (\S+) params-equal (True|False) world (\d+)")


def workdir_root():
    root = os.environ.get("TRAINLET_E2E_WORKDIR")
    if not root:
        root = tempfile.mkdtemp(prefix="trainlet-e2e-")
        os.environ["TRAINLET_E2E_WORKDIR"] = root
    os.makedirs(root, exist_ok=True)
    return root


@functools.lru_cache(None)
def torch_missing():
    """A reason string if /usr/bin/python3 cannot import torch, else None."""
    r = subprocess.run([PYTHON, "-c", "import torch.distributed as d; assert d.is_gloo_available()"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    return None if r.returncode == 0 else f"{PYTHON} has no usable torch: {r.stderr.strip()[-200:]}"


def rank_lines(text):
    """{rank: [line, ...]} from trainlet output whose worker lines read `[rank<R>]: ...`."""
    out = {}
    for m in RANK_LINE.finditer(text):
        out.setdefault(int(m.group(1)), []).append(m.group(2))
    return out


def trainer(name):
    return os.path.join(TRAINERS, name)


class PodsimTestCase(unittest.TestCase):
    """Base for tests that need a simulated cluster (root, namespaces, dnsmasq)."""

    needs_trainlet = False
    # Why the class is skipped under tests/e2e/standin_trainlet.py (what it lacks); None:
    # the stand-in runs it too.
    standin_skip = None

    @classmethod
    def setUpClass(cls):
        reason = podsim.requirements_missing()
        if reason:
            raise unittest.SkipTest(reason)
        if cls.needs_trainlet and not (BIN and os.access(BIN, os.X_OK)):
            raise unittest.SkipTest(f"no trainlet binary (TRAINLET_E2E_BIN={BIN!r})")
        if cls.standin_skip and BIN and os.path.basename(BIN) == "standin_trainlet.py":
            raise unittest.SkipTest(cls.standin_skip)


    @classmethod
    def skip_without_torch_trainer(cls):
        """Skips the class unless /usr/bin/python3 has torch and TRAIN_PY exists."""
        reason = torch_missing() or (None if os.path.isfile(TRAIN_PY) else f"no {TRAIN_PY}")
        if reason:
            raise unittest.SkipTest(reason)

    @contextlib.contextmanager
    def cluster(self, pods, svc="trainer", **kwargs):
        """A started podsim.Cluster that is always torn down. On failure the pods' log
        tails, the event timeline and the DNS log go to stderr and the logs are kept."""
        workdir = os.path.join(workdir_root(), self.id())
        shutil.rmtree(workdir, ignore_errors=True)
        c = podsim.Cluster(svc=svc, pods=pods, workdir=workdir, **kwargs)
        ok = False
        try:
            c.start()
            yield c
            ok = True
        except BaseException:
            try:
                sys.stderr.write("\n" + c.diagnostics() + "\n")
            except Exception as e:
                sys.stderr.write(f"(diagnostics failed: {e})\n")
            raise
        finally:
            c.teardown()
            if ok and not KEEP:
                shutil.rmtree(workdir, ignore_errors=True)

    def trainlet(self, *flags, cmd, nnodes=1, nproc=1, grace=5, rdzv_timeout=60):
        """argv for the pod's PID 1: trainlet with test-sized knobs, then `-- cmd`."""
        return [BIN, "--nnodes", str(nnodes), "--nproc-per-node", str(nproc),
                "--grace-period", str(grace), "--rdzv-timeout", str(rdzv_timeout),
                "--log-level", "debug", *flags, "--", *cmd]

    def assertNothingLeft(self, cluster, timeout=5.0):
        """Every pod has exited and no process (zombie or not) remains in its PID namespace.

        Once a PID namespace's init exits the kernel SIGKILLs the rest (pid_namespaces(7)),
        so after exit this mostly guards the harness; tests that care whether trainlet
        stopped leftovers *itself* (TERM first, then KILL) check markers the leftovers
        write when they receive SIGTERM, or look while the pod still runs."""
        deadline = time.monotonic() + timeout
        for i, pod in sorted(cluster.pods.items()):
            self.assertFalse(pod.running(), f"pod {i} still running")
            while True:
                left = cluster.processes_in_pod(i)
                if not left or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            self.assertEqual(left, [], f"pod {i}: processes left behind")

    def assertExit(self, pod, timeout, expected):
        code = pod.wait(timeout)
        self.assertEqual(code, expected, f"pod {pod.name} exited {code}, want {expected}\n"
                         + pod.tail())
        return code
