"""The worker's error file (TORCHELASTIC_ERROR_FILE, what torch's @record writes).

With --log-dir it is where torchrun puts it, `<log-dir>/<run>_<sfx>/attempt_<n>/
<local-rank>/error.json`, and it is kept with the logs (checked side by side with
Debian's torchrun when torch is there); without --log-dir it is in trainlet's own
temporary folder, removed at exit. A message no marker maps to a class still shows in
the summary's reason; one that does (an ECC error) still decides the class.
"""

import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from harness import BIN, PYTHON, torch_missing

# Writes a torch-style error file (torch/distributed/elastic/multiprocessing/errors)
# with the message in $EF_MESSAGE, records where it was told to, and exits 1 once every
# local rank of the attempt has (the first to fail would have the others stopped).
TRAINER = r'''
import json, os, sys, time
p = os.environ["TORCHELASTIC_ERROR_FILE"]
with open(p, "w") as f:
    json.dump({"message": {"message": os.environ["EF_MESSAGE"],
                           "extraInfo": {"py_callstack": "Traceback ...", "timestamp": "0"}}}, f)
seen = os.path.join(os.environ["EF_OUT"], "rank%s-attempt%s")
attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
with open(seen % (os.environ["RANK"], attempt), "w") as f:
    f.write(p)
deadline = time.monotonic() + 60
while time.monotonic() < deadline and not all(
        os.path.exists(seen % (r, attempt)) for r in range(int(os.environ["WORLD_SIZE"]))):
    time.sleep(0.05)
sys.exit(1)
'''
SUMMARY = re.compile(r"exit \d+ \(\w+\): (\{.*\})$", re.M)


@unittest.skipUnless(BIN and os.access(BIN, os.X_OK), "no trainlet binary")
class ErrorFileTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="error-file-")
        with open(os.path.join(self.dir, "ef.py"), "w") as f:
            f.write(TRAINER)

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def launch(self, launcher, *args, message="RuntimeError: boom"):
        out = os.path.join(self.dir, launcher)
        os.makedirs(os.path.join(out, "seen"))
        env = {"PATH": "/usr/bin:/bin", "HOSTNAME": "x", "EF_MESSAGE": message,
               "EF_OUT": os.path.join(out, "seen"), "TMPDIR": self.dir,
               "TRAINLET_LIBNCCL": "/nonexistent/libnccl.so.2"}
        args = [a.replace("@LOGS", os.path.join(out, "logs")) for a in args]
        argv = ([PYTHON, "-m", "torch.distributed.run", "--standalone", *args] if launcher == "torchrun"
                else [BIN, "--python", PYTHON, *args])
        p = subprocess.run(argv + ["ef.py"], cwd=self.dir, env=env, capture_output=True,
                           text=True, timeout=400)
        seen = {}
        for name in os.listdir(os.path.join(out, "seen")):
            with open(os.path.join(out, "seen", name)) as f:
                seen[name] = f.read()
        m = SUMMARY.findall(p.stderr)
        return p.returncode, seen, json.loads(m[-1]) if m else None, p.stderr

    def test_in_the_log_dir_kept_and_quoted(self):
        code, seen, summary, err = self.launch("trainlet", "--log-dir", "@LOGS", "-t", "3",
                                               "--nproc-per-node", "2")
        self.assertEqual(code, 1, err)
        logs = os.path.join(self.dir, "trainlet", "logs")
        for rank in range(2):
            path = seen[f"rank{rank}-attempt0"]
            self.assertRegex(os.path.relpath(path, logs), rf"^[^/]+_[^/]+/attempt_0/{rank}/error\.json$")
            self.assertTrue(os.path.isfile(path), "kept after exit: " + path)
        self.assertEqual(summary["class"], "worker", err)
        self.assertIn("its error file says: RuntimeError: boom", summary["reason"])

    def test_each_attempt_has_its_own(self):
        code, seen, _, err = self.launch("trainlet", "--log-dir", "@LOGS", "--max-restarts", "1")
        self.assertEqual(code, 1, err)
        self.assertRegex(seen["rank0-attempt0"], r"/attempt_0/0/error\.json$")
        self.assertRegex(seen["rank0-attempt1"], r"/attempt_1/0/error\.json$")
        for path in seen.values():
            self.assertTrue(os.path.isfile(path), path)

    def test_a_marker_in_it_still_decides(self):
        code, _, summary, err = self.launch("trainlet", "--log-dir", "@LOGS",
                                            message="CUDA error: uncorrectable ECC error encountered")
        self.assertEqual(code, 74, err)
        self.assertEqual(summary["evidence"], "error-file")

    def test_without_log_dir_it_is_trainlets_own_and_removed(self):
        code, seen, summary, err = self.launch("trainlet", "-t", "3")
        self.assertEqual(code, 1, err)
        path = seen["rank0-attempt0"]
        self.assertNotIn("/attempt_", path)
        self.assertFalse(os.path.exists(os.path.dirname(path)), path)
        self.assertIn("its error file says: RuntimeError: boom", summary["reason"])

    def test_same_place_as_torchrun(self):
        reason = torch_missing()
        if reason:
            self.skipTest(reason)
        # Debian's torchrun on Python 3.11 needs -r and -t each 1 or 2 (test_torchrun_compat).
        args = ["--log_dir", "@LOGS", "-r", "2", "-t", "1", "--nproc_per_node", "2"]
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            runs = {n: pool.submit(self.launch, n, *args) for n in ("torchrun", "trainlet")}
            runs = {n: r.result() for n, r in runs.items()}
        layout = {}
        for name, (code, seen, _, err) in runs.items():
            self.assertNotEqual(code, 0, err)
            logs = os.path.join(self.dir, name, "logs")
            # Under the run folder (<run-id>_<suffix>, which differs): the same path.
            layout[name] = {k: os.path.relpath(v, logs).split("/", 1)[1] for k, v in seen.items()}
        self.assertEqual(layout["trainlet"], layout["torchrun"])
        self.assertEqual(layout["trainlet"]["rank1-attempt0"], "attempt_0/1/error.json")


if __name__ == "__main__":
    unittest.main()
