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

FieldLinesTest runs the launch lines popular projects publish (nanoGPT, the DDP tutorial
and its Slurm script, torchtitan's run_train.sh, Hugging Face's run_clm, Megatron-LM,
Lightning, a Kubeflow TrainJob's PET_* variables) side by side with the torchrun that README
tracks (torch 2.x from scripts/install-torch, skipped saying why when absent), both started
from one venv as pip lays it out: trainlet without --python must pick the venv's interpreter,
as torchrun's sys.executable does.

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

# torch 2.x's interpreter (scripts/install-torch); TRAINLET_TORCH_PYTHON names another.
TORCH2_PYTHON = os.environ.get("TRAINLET_TORCH_PYTHON", "/opt/trainlet-torch/bin/python")


def torch2_missing():
    """A reason string when torch 2.x with gloo cannot be imported, else None."""
    if not os.access(TORCH2_PYTHON, os.X_OK):
        return f"no torch 2.x interpreter at {TORCH2_PYTHON} (scripts/install-torch)"
    r = subprocess.run([TORCH2_PYTHON, "-c", "import torch.distributed as d; "
                        "assert d.is_gloo_available()"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
    return None if r.returncode == 0 else f"{TORCH2_PYTHON}: no usable torch: {r.stderr[-200:]}"

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
# Equal only for the static rendezvous (--standalone picks free ports and a run id in both),
# but MASTER_PORT: without --master-port trainlet's leader picks a free one where torch 1.13's
# static rendezvous gives 29500 (README "What differs, and why"). Always set by both.
PORTS = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"}


def underscored(args):
    """torch 1.13 spells its flags with underscores only (2.x takes both)."""
    return ["--" + a[2:].replace("-", "_") if a.startswith("--") else a for a in args]


@unittest.skipUnless(BIN and os.access(BIN, os.X_OK), "no trainlet binary")
class SideBySide(unittest.TestCase):
    """Runs launchers side by side and compares what their workers saw (no tests here)."""

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
        venv = os.path.join(self.root, "venv", "bin")
        if launcher == "torchrun":
            argv = [PYTHON, "-m", "torch.distributed.run", *args]
        elif launcher == "torchrun2":  # torch 2.x, from the venv
            argv = [os.path.join(venv, "python3"), "-m", "torch.distributed.run", *args]
        elif launcher == "trainlet2":  # the binary pip put in the venv: no --python
            argv = [os.path.join(venv, "trainlet"), *args]
        else:
            argv = [BIN, "--python", PYTHON, *args]
        # Each launcher in a network namespace of its own: both run at once, and both
        # bind MASTER_PORT 29500 (torchrun's store, trainlet's leader checks it is free).
        # HOLD_29500: a process holding 29500 in the launcher's namespace while it runs
        # (it leaves when the launcher, its parent after the exec, is gone).
        hold = f'{PYTHON} -c "$HOLD_29500" >/dev/null 2>&1 & sleep 1; ' if "HOLD_29500" in env else ""
        argv = ["unshare", "--net", "sh", "-c", 'ip link set lo up && { ' + hold + 'exec "$@"; }',
                "sh", *argv]
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

    def side_by_side(self, name, args, env=None, torchrun_args=None, launchers=("torchrun", "trainlet")):
        """Runs both; torchrun gets torchrun_args (default: args)."""
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            t = pool.submit(self.run_one, launchers[0], name, torchrun_args or args, env or {})
            l = pool.submit(self.run_one, launchers[1], name, args, env or {})
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
                if k in DIFFERENT or (k in PORTS and (not static or k == "MASTER_PORT")):
                    continue
                self.assertEqual(lw["env"].get(k), v, f"{rank}: {k}")
            # torch 2.x's name (torch >= 2.2), which 1.13 does not set.
            self.assertEqual(lw["env"].get("TORCH_NCCL_ASYNC_ERROR_HANDLING"), "1")
            # The same names; MASTER_PORT is a port the leader found free unless given.
            for k in PORTS:
                self.assertIn(k, lw["env"], f"{rank}: {k}")
            self.assertNotIn("NCCL_ASYNC_ERROR_HANDLING", lw["env"])

class TorchrunCompatTest(SideBySide):
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


class FieldLinesTest(SideBySide):
    """The field's launch lines, with torchrun 2.x (and 1.13 where it runs them)."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        reason = torch2_missing()
        if reason:
            shutil.rmtree(cls.root, ignore_errors=True)
            raise unittest.SkipTest(reason)
        # A venv as pip lays one out, holding torch 2.x and the trainlet binary.
        venv = os.path.join(cls.root, "venv")
        os.makedirs(os.path.join(venv, "bin"))
        real = os.path.realpath(TORCH2_PYTHON)
        os.symlink(real, os.path.join(venv, "bin", "python3"))
        base = os.path.dirname(os.path.dirname(TORCH2_PYTHON))
        shutil.copy(os.path.join(base, "pyvenv.cfg"), venv)
        os.symlink(os.path.join(base, "lib"), os.path.join(venv, "lib"))
        try:
            os.link(BIN, os.path.join(venv, "bin", "trainlet"))
        except OSError:
            shutil.copy(BIN, os.path.join(venv, "bin", "trainlet"))
        # A script without .py (torchrun runs it with python too).
        shutil.copy(os.path.join(cls.root, "probe.py"), os.path.join(cls.root, "probe"))

    def run_lines(self, lines):
        """{name: (torchrun2, trainlet2)} for [(name, args, env)], all at once."""
        with concurrent.futures.ThreadPoolExecutor(2 * len(lines)) as pool:
            futures = {name: (pool.submit(self.run_one, "torchrun2", name, args, env),
                              pool.submit(self.run_one, "trainlet2", name, args, env))
                       for name, args, env in lines}
            return {name: (t.result(), l.result()) for name, (t, l) in futures.items()}

    def assertSameRun(self, name, t, l, static=True):
        with self.subTest(line=name):
            self.assertEqual((t["code"], l["code"]), (0, 0), name + "\n" + t["out"] + l["out"])
            self.assertSameWorkers(t, l, static=static)
            self.assertEqual(sorted(t["logs"]), sorted(l["logs"]), name)
            self.assertEqual(t["logs"], l["logs"], name)
            # The venv's interpreter, as torchrun's sys.executable, without activating it.
            rank0 = l["workers"]["rank0.json"]["orig_argv"]
            self.assertEqual(rank0[0], os.path.join(self.root, "venv", "bin", "python3"), name)
            self.assertIn("(the Python environment of ", l["out"])

    def test_the_fields_single_node_lines(self):
        trainjob = {"PET_NNODES": "1", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "0",
                    "PET_MASTER_ADDR": "localhost", "PET_MASTER_PORT": "29400"}
        hold = "import os, socket, time; s = socket.socket(); s.bind(('0.0.0.0', 29500)); " \
               "s.listen(1); p = os.getppid()\nwhile os.getppid() == p: time.sleep(0.2)"
        lines = [
            # nanoGPT README
            ("nanogpt", ["--standalone", "--nproc_per_node=2", "probe.py",
                         "config/train_shakespeare_char.py"], {}),
            # PyTorch DDP tutorial series (multigpu_torchrun.py 50 10)
            ("ddp_tutorial", ["--standalone", "--nproc_per_node=2", "probe.py", "50", "10"], {}),
            # torchtitan run_train.sh, verbatim but for the GPU count and the module
            ("torchtitan", ["--nproc_per_node=2", "--rdzv_backend", "c10d",
                            "--rdzv_endpoint=localhost:0", "--local-ranks-filter", "0",
                            "--role", "rank", "--tee", "3", "--log-dir", "@LOGS", "-m",
                            "probemod", "--job.config_file", "llama3_8b.toml"], {}),
            # Hugging Face examples (run_clm.py)
            ("hf_run_clm", ["--nproc_per_node", "2", "probe.py", "--model_name_or_path",
                            "gpt2", "--do_train"], {}),
            # Megatron-LM's examples (DISTRIBUTED_ARGS)
            ("megatron", ["--nproc_per_node", "2", "--nnodes", "1", "--node_rank", "0",
                          "--master_addr", "localhost", "--master_port", "6000", "probe.py",
                          "--tensor-model-parallel-size", "1"], {}),
            # Lightning's torchrun docs
            ("lightning", ["--nproc_per_node=2", "--nnodes=1", "probe.py", "fit"], {}),
            # Kubeflow Trainer v2 TrainJob: PET_* only (PET_MASTER_PORT=29400)
            ("trainjob", ["probe.py"], trainjob),
            # A script not named *.py (was 78)
            ("no_py_suffix", ["--nproc_per_node", "2", "probe", "x"], {}),
            # c10d on 29500 (the Slurm example, one node), and torch's other rendezvous keys
            ("c10d_29500", ["--nproc_per_node", "2", "--rdzv_backend", "c10d",
                            "--rdzv_endpoint", "localhost:29500", "--rdzv_conf",
                            "is_host=1,last_call_timeout=5,join_timeout=60", "probe.py"], {}),
            # 29500 held by another process, no --master-port (torch 2.x: a free port)
            ("busy_29500", ["--nproc_per_node", "2", "probe.py"], {"HOLD_29500": hold}),
            # torch 2.x's newer flags
            ("new_flags", ["--nproc-per-node", "2", "--log-line-prefix-template",
                           "${hostname}:${rank}: ", "--virtual-local-rank", "--tee", "3",
                           "--log-dir", "@LOGS", "probe.py"], {}),
        ]
        results = self.run_lines(lines)
        for name, _, _ in lines:
            t, l = results[name]
            # torch 2.x turns a one-node line without --master-port into c10d on
            # localhost:0 (run.py): ports and run ids differ on purpose (README "What
            # differs, and why"); their names are the same.
            self.assertSameRun(name, t, l, static=False)
        t, l = results["torchtitan"]
        self.assertIn("out 0", l["out"])
        self.assertNotIn("out 1", l["out"])  # --local-ranks-filter 0
        self.assertIn("last_call_timeout=5 has no effect", results["c10d_29500"][1]["out"])
        for name in ("c10d_29500", "busy_29500", "lightning"):
            port = results[name][1]["workers"]["rank0.json"]["env"]["MASTER_PORT"]
            self.assertNotEqual(port, "29500", name)
        self.assertEqual(results["megatron"][1]["workers"]["rank1.json"]["env"]["MASTER_PORT"],
                         "6000")
        env = results["new_flags"][1]["workers"]["rank1.json"]["env"]
        self.assertEqual((env["LOCAL_RANK"], env["CUDA_VISIBLE_DEVICES"]), ("0", "1"))

    def test_refused_lines_that_now_run_with_torch_1_13(self):
        # Side by side with Debian's torchrun 1.13 (--redirects/--tee 1 or 2 on Python 3.11).
        lines = {
            "c10d_29500_113": ["--nproc_per_node", "2", "--rdzv_backend", "c10d",
                               "--rdzv_endpoint", "localhost:29500", "--rdzv_conf",
                               "is_host=1,last_call_timeout=5", "--redirects", "1", "--tee",
                               "2", "probe.py"],
            "no_py_suffix_113": ["--nproc_per_node", "2", "--redirects", "1", "--tee", "2",
                                 "probe", "x"],
        }
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futures = {n: (pool.submit(self.run_one, "torchrun", n, a, {}),
                           pool.submit(self.run_one, "trainlet", n, a, {}))
                       for n, a in lines.items()}
            for name, (t, l) in futures.items():
                t, l = t.result(), l.result()
                with self.subTest(line=name):
                    self.assertEqual((t["code"], l["code"]), (0, 0), t["out"] + l["out"])
                    # No --rdzv_id: torch 1.13's run id is 'none', trainlet's its job id.
                    self.assertSameWorkers(t, l, static=False)
                    self.assertNotEqual(l["workers"]["rank0.json"]["env"]["MASTER_PORT"], "29500")


class TrackedFlagListTest(unittest.TestCase):
    """agent/tests/data/torchrun-flags.txt (the unit tests' list of every torchrun flag and
    rendezvous key) is what scripts/torchrun-flags reads from the installed torch 2.x."""

    def test_the_checked_in_list_is_the_installed_torchs(self):
        site = glob.glob(os.path.join(os.path.dirname(os.path.dirname(TORCH2_PYTHON)), "lib",
                                      "python3*", "site-packages", "torch"))
        if not site:
            self.skipTest(f"no torch 2.x beside {TORCH2_PYTHON} (scripts/install-torch)")
        repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        now = subprocess.run([PYTHON, os.path.join(repo, "scripts", "torchrun-flags"), site[0]],
                             capture_output=True, text=True, check=True).stdout
        with open(os.path.join(repo, "agent", "tests", "data", "torchrun-flags.txt")) as f:
            listed = f.read()
        self.assertEqual(now.splitlines()[0], listed.splitlines()[0],
                         "the installed torch is not the tracked one: update README and the list")
        self.assertEqual(now, listed)


if __name__ == "__main__":
    unittest.main()
