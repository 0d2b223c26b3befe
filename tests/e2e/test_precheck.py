"""Input that retrying cannot fix is exit 78 before any network traffic (README "Exit
codes": config "within a second and before any network traffic").

A 2-pod gang where one pod's trainer command is missing: that pod exits 78 at once,
without listening or dialing (not 75 at the rendezvous deadline, as when the check
came only after the gang formed and its peer never joined). The other kinds of bad
trainer input are checked on the binary alone: a missing script, interpreter or
--log-dir, and `-- train.py` (a program after "--") with its hint.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import unittest

from harness import BIN, PodsimTestCase

RDZV_TIMEOUT = 20
SUMMARY = re.compile(r"(?:^|exit \d+ \(\w+\): )(\{.*\})$")
# What a pod logs once it talks to the network for the rendezvous.
NETWORK = ("listening on port", "joining leader", "rendezvous timed out", '"rendezvous":')


class GangPrecheckTest(PodsimTestCase):
    needs_trainlet = True
    standin_skip = "the stand-in has no start-up checks"

    def test_missing_command_is_78_at_once_not_75_at_the_deadline(self):
        for bad in (0, 1):  # the leader (which would listen) and a member (which would dial)
            with self.subTest(bad_pod=bad), self.cluster(pods=2) as c:
                c.publish_all()
                for i in range(2):
                    cmd = ["/nonexistent/prog"] if i == bad else ["sleep", "30"]
                    c.start_pod(i, self.trainlet(nnodes=2, rdzv_timeout=RDZV_TIMEOUT, cmd=cmd))
                pod = c.pods[bad]
                self.assertExit(pod, RDZV_TIMEOUT / 2, 78)
                out = pod.output()
                self.assertLess(pod.elapsed(), 1.0, out)
                self.assertIn("cannot execute the trainer command '/nonexistent/prog'", out)
                for network in NETWORK:
                    self.assertNotIn(network, out)
                # The healthy pod is still waiting for its peer: only it meets the deadline.
                self.assertTrue(c.pods[1 - bad].running(), c.pods[1 - bad].tail())
                c.pods[1 - bad].kill()


@unittest.skipUnless(BIN and os.access(BIN, os.X_OK), "no trainlet binary")
class SinglePodPrecheckTest(unittest.TestCase):
    """The binary alone (one pod, which would still have a rendezvous phase first)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="precheck-")
        with open(os.path.join(self.dir, "there.py"), "w") as f:
            f.write("print('ran')\n")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def run_trainlet(self, *args, env=None):
        t0 = time.monotonic()
        # A subcommand is one only as the first argument (`trainlet local ...`).
        argv = [BIN, *args] if args[:1] == ("local",) else [BIN, "--rdzv-timeout", "20", *args]
        p = subprocess.run(argv,
                           cwd=self.dir, capture_output=True, text=True, timeout=60,
                           env={"PATH": "/usr/bin:/bin", "HOSTNAME": "x",
                                "TRAINLET_LIBNCCL": "/nonexistent/libnccl.so.2", **(env or {})})
        summary = None
        for line in p.stderr.splitlines():  # the summary: last, alone or after "exit N (class): "
            m = SUMMARY.search(line)
            if m:
                summary = json.loads(m.group(1))
        return p.returncode, summary, p.stderr, time.monotonic() - t0

    def assertConfigBeforeRendezvous(self, args, reason, env=None):
        code, summary, err, took = self.run_trainlet(*args, env=env)
        self.assertEqual(code, 78, err)
        self.assertIsNotNone(summary, err)
        self.assertEqual(summary["class"], "config")
        self.assertEqual(summary["evidence"], "phase")
        self.assertIn(reason, summary["reason"])
        self.assertNotIn("phases_ms", summary)  # no rendezvous phase came first
        for network in NETWORK:
            self.assertNotIn(network, err)
        self.assertLess(took, 10)  # at once, not at --rdzv-timeout
        return summary["reason"]

    def test_missing_script_is_config_and_names_it_where_the_workers_look(self):
        for args in (["nonexist.py"], ["--max-restarts", "2", "nonexist.py"],
                     ["--run-path", "nonexist.py"]):
            with self.subTest(args=args):
                self.assertConfigBeforeRendezvous(
                    args, f"cannot open the training script 'nonexist.py' in {self.dir} (the "
                          "workers' working directory): No such file or directory")

    def test_missing_module_stays_the_trainers_own_error(self):
        # -m: python's ModuleNotFoundError, a marker of class bug (42), not checked before.
        code, summary, err, _ = self.run_trainlet("-m", "no.such.mod")
        self.assertEqual(code, 42, err)
        self.assertIn("ModuleNotFoundError", summary["reason"])

    def test_missing_interpreter(self):
        for args, env in ((["--python", "/nonexistent/python", "there.py"], {}),
                          (["there.py"], {"PYTHON_EXEC": "/nonexistent/python"})):
            with self.subTest(args=args, env=env):
                reason = self.assertConfigBeforeRendezvous(
                    args, "cannot execute the trainer command '/nonexistent/python'", env=env)
                self.assertIn("--python, TRAINLET_PYTHON, PYTHON_EXEC, else the Python environment "
                              "trainlet is installed in", reason)

    def test_log_dir_that_cannot_be_made(self):
        self.assertConfigBeforeRendezvous(
            ["--log-dir", "/proc/nope", "-r", "3", "--", "/bin/true"],
            "--log-dir '/proc/nope' is not a folder that can be made")

    def test_script_after_dash_dash_is_a_program_with_a_hint(self):
        reason = self.assertConfigBeforeRendezvous(
            ["--", "there.py", "--x"],
            "cannot execute the trainer command 'there.py': No such file or directory")
        self.assertIn('to run a script with Python as torchrun does, drop the "--": '
                      "trainlet there.py ...", reason)
        code, _, err, _ = self.run_trainlet("there.py")  # as the hint says
        self.assertEqual(code, 0, err)

    def test_local_checks_the_script_too(self):
        self.assertConfigBeforeRendezvous(["local", "--nnodes", "2", "nonexist.py"],
                                          "cannot open the training script 'nonexist.py'")


if __name__ == "__main__":
    unittest.main()
