"""Side by side with Debian's torchrun: the same command lines under
`/usr/bin/python3 -m torch.distributed.run` and under trainlet, comparing what the
workers see (sys.orig_argv, so `python -u script args` itself, and the environment)
and the log files (paths under the run folder, and contents).

Debian ships torch 1.13; the issue asks for torch 2.x's meaning. Where they differ
the test follows 2.x and says so (TORCH_NCCL_ASYNC_ERROR_HANDLING, set by 2.x only;
--local-ranks-filter, 2.2+; the dash spellings, which 1.13 lacks: torchrun gets the
underscore ones there). Debian's torchrun on Python 3.11 crashes unless --redirects and
--tee are each 1 or 2 (Std.from_str of "0" or "3" is None there: IntFlag membership),
so every torchrun run below passes such values. The two launchers run at the same time, each case
in its own thread: one torchrun start costs tens of seconds on a loaded machine.

Differences kept on purpose (README "Coming from torchrun"): TORCHELASTIC_USE_AGENT_STORE
(trainlet's workers host their own store: False), TORCHELASTIC_ERROR_FILE (a path of
its own), TORCHELASTIC_RUN_ID when no --rdzv-id is given, and trainlet's own
variables (TRAINLET_*, JAX_* and TORCH_NCCL_ASYNC_ERROR_HANDLING).
"""

import concurrent.futures
import glob
import json
import os
import shutil
import subprocess
import tempfile
import unittest

from harness import BIN, PYTHON, torch_missing

PROBE = r'''
import json, os, sys
if os.environ.get("PROBE_FAIL_FIRST") and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    print("failing attempt", os.environ["TORCHELASTIC_RESTART_COUNT"], file=sys.stderr)
    sys.exit(3)
json.dump({"orig_argv": sys.orig_argv, "argv": sys.argv, "env": dict(os.environ)},
          open(os.path.join(os.environ["PROBE_OUT"], "rank%s.json" % os.environ["RANK"]), "w"))
print("out", os.environ["LOCAL_RANK"], sys.argv[1:])
print("err", os.environ["LOCAL_RANK"], file=sys.stderr)
'''

# Set by one launcher and not the other, on purpose (see the docstring).
DIFFERENT = {"TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE",
             "TORCH_NCCL_ASYNC_ERROR_HANDLING",
             # torch 1.13's agent sets the old name; trainlet, as torch >= 2.2's, does not
             # (torch >= 2.2 warns in every rank when it is set; README).
             "NCCL_ASYNC_ERROR_HANDLING",
             # torch 1.13's agent: its own store and timer; no equivalent needed.
             "TORCHELASTIC_ENABLE_FILE_TIMER", "TORCHELASTIC_TIMER_FILE"}
# Equal only for the static rendezvous (--standalone picks free ports and a run id in both).
PORTS = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"}


def underscored(args):
    """torch 1.13 spells its flags with underscores only (2.x takes both)."""
    return ["--" + a[2:].replace("-", "_") if a.startswith("--") else a for a in args]


@unittest.skipUnless(BIN and os.access(BIN, os.X_OK), "no trainlet binary")
class TorchrunCompatTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        reason = torch_missing()
        if reason:
            raise unittest.SkipTest(reason)
        cls.root = tempfile.mkdtemp(prefix="torchrun-compat-")
        with open(os.path.join(cls.root, "probe.py"), "w") as f:
            f.write("#!/usr/bin/python3\n" + PROBE)
        os.chmod(os.path.join(cls.root, "probe.py"), 0o755)
        os.mkdir(os.path.join(cls.root, "probemod"))
        shutil.copy(os.path.join(cls.root, "probe.py"), os.path.join(cls.root, "probemod", "__main__.py"))
        open(os.path.join(cls.root, "probemod", "__init__.py"), "w").close()
        # A package named like a trainlet subcommand (RL code has `policy` packages).
        shutil.copytree(os.path.join(cls.root, "probemod"), os.path.join(cls.root, "policy"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def run_one(self, launcher, name, args, env):
        out = os.path.join(self.root, name, launcher)
        os.makedirs(os.path.join(out, "workers"))
        base = {"PATH": "/usr/bin:/bin", "PROBE_OUT": os.path.join(out, "workers"),
                "PYTHONPATH": self.root, "HOSTNAME": "x",
                "TRAINLET_LIBNCCL": "/nonexistent/libnccl.so.2", **env}
        args = [a.replace("@LOGS", os.path.join(out, "logs")) for a in args]
        if launcher == "torchrun":
            argv = [PYTHON, "-m", "torch.distributed.run", *args]
        else:
            argv = [BIN, "--python", PYTHON, *args]
        # Each launcher in a network namespace of its own: both run at once, and both
        # bind MASTER_PORT 29500 (torchrun's store, trainlet's leader checks it is free).
        argv = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv]
        p = subprocess.run(argv, env=base, cwd=self.root, capture_output=True, text=True,
                           timeout=400)
        workers = {}
        for path in glob.glob(os.path.join(out, "workers", "rank*.json")):
            with open(path) as f:
                workers[os.path.basename(path)] = json.load(f)
        logs = {}
        for run_dir in glob.glob(os.path.join(out, "logs", "*_*")):
            for path in glob.glob(os.path.join(run_dir, "attempt_*", "*", "*.log")):
                with open(path) as f:
                    logs[os.path.relpath(path, run_dir)] = f.read()
        return {"code": p.returncode, "out": p.stdout + p.stderr, "workers": workers,
                "logs": logs, "input_env": base}

    def side_by_side(self, name, args, env=None, torchrun_args=None):
        """Runs both; torchrun gets torchrun_args (default: args)."""
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            t = pool.submit(self.run_one, "torchrun", name, torchrun_args or args, env or {})
            l = pool.submit(self.run_one, "trainlet", name, args, env or {})
            return t.result(), l.result()

    def assertSameWorkers(self, t, l, static=True):
        self.assertEqual(sorted(t["workers"]), sorted(l["workers"]), t["out"] + l["out"])
        self.assertTrue(t["workers"], t["out"])
        for rank in t["workers"]:
            tw, lw = t["workers"][rank], l["workers"][rank]
            self.assertEqual(tw["orig_argv"], lw["orig_argv"], rank)
            self.assertEqual(tw["argv"], lw["argv"], rank)
            # Every variable torchrun adds or changes, trainlet sets the same way.
            added = {k: v for k, v in tw["env"].items() if t["input_env"].get(k) != v}
            for k, v in sorted(added.items()):
                if k in DIFFERENT or (not static and k in PORTS):
                    continue
                self.assertEqual(lw["env"].get(k), v, f"{rank}: {k}")
            # torch 2.x's name (torch >= 2.2), which 1.13 does not set.
            self.assertEqual(lw["env"].get("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1")
            self.assertNotIn("NCCL_ASYNC_ERROR_HANDLING", lw["env"])

    def test_script_underscore_flags_and_log_files(self):
        args = ["--nproc_per_node", "2", "--rdzv_id", "cmp", "--max_restarts", "0",
                "--log_dir", "@LOGS", "--redirects", "1", "--tee", "2",
                "probe.py", "--epochs", "3", "--log-level", "debug"]
        t, l = self.side_by_side("script", args)
        self.assertEqual((t["code"], l["code"]), (0, 0), t["out"] + l["out"])
        self.assertSameWorkers(t, l)
        self.assertEqual(t["workers"]["rank0.json"]["orig_argv"][1:3], ["-u", "probe.py"])
        self.assertEqual(sorted(t["logs"]), ["attempt_0/0/stderr.log", "attempt_0/0/stdout.log",
                                             "attempt_0/1/stderr.log", "attempt_0/1/stdout.log"])
        self.assertEqual(t["logs"], l["logs"])
        # stdout redirected: only stderr (teed) reaches the console, in both.
        self.assertNotIn("out 0", l["out"])
        self.assertIn("err 1", l["out"])

    def test_module_dash_flags_and_pet_only(self):
        env = {"PET_NPROC_PER_NODE": "2", "PET_NNODES": "1", "PET_RDZV_ID": "pet",
               "PET_MAX_RESTARTS": "0"}
        t, l = self.side_by_side("module", ["--redirects", "2", "--tee", "1", "-m", "probemod",
                                            "a", "--nnodes", "7"], env)
        self.assertEqual((t["code"], l["code"]), (0, 0), t["out"] + l["out"])
        self.assertSameWorkers(t, l)
        self.assertEqual(l["workers"]["rank1.json"]["orig_argv"][1:4], ["-u", "-m", "probemod"])
        self.assertEqual(l["workers"]["rank1.json"]["env"]["TORCHELASTIC_RUN_ID"], "pet")

    def test_no_python_and_standalone(self):
        args = ["--standalone", "--nproc-per-node", "2", "--redirects", "1", "--tee", "2",
                "--no-python", "./probe.py", "x"]
        t, l = self.side_by_side("nopython", args, torchrun_args=underscored(args))
        self.assertEqual((t["code"], l["code"]), (0, 0), t["out"] + l["out"])
        self.assertSameWorkers(t, l, static=False)
        self.assertEqual(l["workers"]["rank0.json"]["orig_argv"][1:], ["./probe.py", "x"])

    def test_max_restarts_after_a_failing_attempt(self):
        args = ["--nproc-per-node", "2", "--max-restarts", "1", "--rdzv-id", "rs",
                "--log-dir", "@LOGS", "--redirects", "1", "--tee", "2", "probe.py"]
        t, l = self.side_by_side("restarts", args, {"PROBE_FAIL_FIRST": "1"},
                                 torchrun_args=underscored(args))
        self.assertEqual((t["code"], l["code"]), (0, 0), t["out"] + l["out"])
        self.assertSameWorkers(t, l)
        self.assertEqual(l["workers"]["rank0.json"]["env"]["TORCHELASTIC_RESTART_COUNT"], "1")
        self.assertEqual(sorted(t["logs"]), sorted(l["logs"]))
        self.assertIn("attempt_1/1/stdout.log", l["logs"])
        # The rank that failed first wrote why (the other may have been stopped before).
        self.assertTrue(any("failing attempt 0" in v for k, v in l["logs"].items()
                            if k.startswith("attempt_0/") and k.endswith("stderr.log")), l["logs"])
        # Attempt 0's files depend on which rank failed first (both launchers then
        # stop the other); attempt 1 ran to the end in both.
        second = lambda logs: {k: v for k, v in logs.items() if k.startswith("attempt_1/")}
        self.assertEqual(second(t["logs"]), second(l["logs"]))

    def test_abbreviated_flags(self):
        # argparse's allow_abbrev: any unambiguous prefix of a long option is that option.
        args = ["--nproc", "2", "--rdzv_i", "abbr", "--max_rest", "0", "--log_d", "@LOGS",
                "--redir", "1", "--te", "2", "probe.py", "--nproc", "5"]
        t, l = self.side_by_side("abbrev", args)
        self.assertEqual((t["code"], l["code"]), (0, 0), t["out"] + l["out"])
        self.assertSameWorkers(t, l)
        self.assertEqual(l["workers"]["rank1.json"]["argv"][1:], ["--nproc", "5"])
        self.assertEqual(l["workers"]["rank1.json"]["env"]["TORCHELASTIC_RUN_ID"], "abbr")
        self.assertEqual(sorted(t["logs"]), sorted(l["logs"]))
        self.assertEqual(t["logs"], l["logs"])
        # An ambiguous one is refused by both, in argparse's words, naming the candidates
        # (torch 1.13's underscore spellings; trainlet names torch 2.x's dash ones).
        t, l = self.side_by_side("ambiguous", ["--n", "2", "--redirects", "1", "--tee", "2",
                                               "probe.py"])
        self.assertEqual((t["code"], l["code"]), (2, 78), t["out"] + l["out"])
        self.assertIn("ambiguous option: --n could match --nnodes, --n", t["out"])
        self.assertIn("ambiguous option: --n could match --nnodes, --no-python, --node-rank, "
                      "--nproc-per-node", l["out"])
        self.assertFalse(l["workers"], l["out"])

    def test_repeated_flags_equals_short_options_and_a_subcommand_named_module(self):
        # argparse: the last of a repeated flag wins, "-r=1" is "-r 1"; `-m policy` is the
        # module (torchrun has no subcommands).
        args = ["--standalone", "--nproc_per_node", "1", "--nproc_per_node", "2", "--log_dir",
                "@LOGS", "-r=1", "-t=2", "-m", "policy", "--epochs", "3"]
        t, l = self.side_by_side("repeated", args)
        self.assertEqual((t["code"], l["code"]), (0, 0), t["out"] + l["out"])
        self.assertSameWorkers(t, l, static=False)
        self.assertEqual(l["workers"]["rank1.json"]["orig_argv"][1:],
                         ["-u", "-m", "policy", "--epochs", "3"])
        self.assertEqual(sorted(l["logs"]), ["attempt_0/0/stderr.log", "attempt_0/0/stdout.log",
                                             "attempt_0/1/stderr.log", "attempt_0/1/stdout.log"])
        self.assertEqual(t["logs"], l["logs"])

    def test_local_ranks_filter_torch2_only(self):
        # torch 2.2+: only local rank 1 on the console; files keep both (1.13 has no flag).
        r = self.run_one("trainlet", "filter", ["--nproc-per-node", "2", "--log-dir", "@LOGS",
                                                 "--tee", "3", "--local-ranks-filter", "1",
                                                 "probe.py"], {})
        self.assertEqual(r["code"], 0, r["out"])
        self.assertIn("out 1", r["out"])
        self.assertNotIn("out 0", r["out"])
        self.assertEqual(r["logs"]["attempt_0/0/stdout.log"], "out 0 []\n")


if __name__ == "__main__":
    unittest.main()
