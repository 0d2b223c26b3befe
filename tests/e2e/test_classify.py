"""Failure classes from what the evidence means, in simulated pods (issues 21 and 24).

  * a marker anywhere in the stream decides, not only in the last 8 KiB: NCCL's watchdog
    line, then a ~15 KB faulthandler dump, then abort -> infra (75); NCCL's WARN line on
    stdout -> infra;
  * Xid by number (NVIDIA's Xid catalogue): Xid 31 -> the worker's own code (class worker),
    Xid 79 -> hardware (74);
  * shared memory running out -> config (78), naming /dev/shm and its size; a small
    /dev/shm with two workers is a warning at start; a worker killed by SIGBUS while
    /dev/shm is full -> config (78), with room in it -> 135;
  * a harmless line naming an exception long before a transient failure is no bug (exit 1,
    not 42), with or without an error file naming the failure's exception; an exception
    that ends the rank is;
  * the pod's pids.max reached at start, and at an in-place restart (--max-restarts):
    75 naming pids.max, every time (10 runs each), never 78;
  * a read-only root and a non-root user: error and heartbeat files from /dev/shm; with
    nothing writable, a warning naming what is off, and --hang-timeout is config (78);
  * with a current torch 2.x from PyPI (/opt/trainlet-torch, scripts/install-torch; skipped,
    saying why, when absent): a real faulthandler dump after a watchdog line, a DataLoader on
    a 2 MiB /dev/shm, an @record error file.
"""

import functools
import json
import os
import subprocess
import unittest

import test_exit_codes
from harness import PYTHON
from test_exit_codes import sh

TORCH2_PYTHON = os.environ.get("TRAINLET_TORCH_PYTHON", "/opt/trainlet-torch/bin/python")

# A pod with a 2 MiB /dev/shm (a tmpfs mounted in the pod's own mount namespace).
SMALL_SHM = ["sh", "-c", 'set -e; mount -t tmpfs -o size=2m tmpfs /dev/shm; exec "$@"', "shm"]


@functools.lru_cache(None)
def torch2_missing():
    """A reason string when TORCH2_PYTHON cannot import a torch 2.x, else None."""
    if not os.access(TORCH2_PYTHON, os.X_OK):
        return f"no {TORCH2_PYTHON} (scripts/install-torch installs a current torch there)"
    r = subprocess.run([TORCH2_PYTHON, "-c", "import torch; print(torch.__version__)"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    if r.returncode != 0:
        return f"{TORCH2_PYTHON} cannot import torch: {r.stderr.strip()[-200:]}"
    if not r.stdout.strip().startswith("2."):
        return f"{TORCH2_PYTHON} has torch {r.stdout.strip()}, not 2.x"
    return None


# Rank 1 writes $1 to fd $2 after a line of noise and exits $3; rank 0 waits to be stopped.
SAY_AND_EXIT = r"""
if [ "$LOCAL_RANK" = 1 ]; then
    echo "step 1 loss 0.25"
    echo "$1" >&$2
    exit $3
fi
exec sleep 30
"""

# A ~15 KB faulthandler-like dump of 40 threads after NCCL's watchdog line, then abort.
WATCHDOG_THEN_DUMP = r"""
import os, sys
if os.environ["LOCAL_RANK"] != "1":
    import time; time.sleep(300)
print("[E ProcessGroupNCCL.cpp:1316] [Rank 1] Watchdog caught collective operation timeout: "
      "WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for 600000 milliseconds", file=sys.stderr)
print("Fatal Python error: Aborted\n", file=sys.stderr)
for t in range(40):
    print(f"Thread 0x00007f{t:010x} (most recent call first):", file=sys.stderr)
    for d in range(8):
        print(f'  File "/usr/lib/python3/dist-packages/torch/utils/module{d}.py", line {d * 37}'
              f" in frame_{d}", file=sys.stderr)
    print("", file=sys.stderr)
sys.stderr.flush()
os.abort()
"""


# Rank 1 fills a 2 MiB /dev/shm through a mapping longer than it: SIGBUS; rank 0 waits.
FILL_SHM_THEN_SIGBUS = r"""
import mmap, os, time
if os.environ["LOCAL_RANK"] != "1":
    time.sleep(30)
fd = os.open("/dev/shm/torch_1_batch", os.O_RDWR | os.O_CREAT, 0o600)
os.ftruncate(fd, 8 << 20)
m = mmap.mmap(fd, 8 << 20)
for off in range(0, 8 << 20, 4096):
    m[off] = 1
"""

# Rank 1: a warning naming ImportError, 3000 healthy lines, then (by argv[1]) a TimeoutError
# that ends it ("" or "record": with a torchelastic-style error file naming it first) or a
# ModuleNotFoundError ("import"). Rank 0 waits.
HARMLESS_THEN_TRANSIENT = r"""
import json, os, sys, time
if os.environ["LOCAL_RANK"] != "1":
    time.sleep(30)
print("/usr/lib/python3/dist-packages/apex_compat.py:12: UserWarning: ImportError: apex not "
      "found, using native fused ops", file=sys.stderr)
for step in range(3000):
    print(f"step {step} loss {1 / (step + 1):.4f}", file=sys.stderr)
mode = sys.argv[1] if len(sys.argv) > 1 else ""
if mode == "import":
    import no_such_module_for_trainlet_e2e
if mode == "record":
    with open(os.environ["TORCHELASTIC_ERROR_FILE"], "w") as f:
        json.dump({"message": {"message": "TimeoutError: [Errno 110] Connection timed out",
                               "extraInfo": {"py_callstack": "", "timestamp": "0"}}}, f)
raise TimeoutError(110, "Connection timed out")
"""


class _Base(test_exit_codes.ExitCodesTest):
    """ExitCodesTest's helpers (start, summary, assertSummary, write, remove_cgroup), not
    its tests (they run in test_exit_codes.py)."""

    def run_case(self, cmd, code, cls, *flags, nproc=2, wrap=(), timeout=20):
        with self.cluster(pods=1) as c:
            c.publish(0)
            pod, log = self.start(c, cmd, *flags, nproc=nproc, wrap=wrap)
            self.assertExit(pod, timeout, code)
            s = self.summary(pod, log)
            self.assertSummary(s, cls, code)
            self.assertNothingLeft(c)
            return s, pod.stderr()  # read before the cluster's work directory goes


for _name in [n for n in vars(test_exit_codes.ExitCodesTest) if n.startswith("test_")]:
    setattr(_Base, _name, None)
del _name


class ClassifyTest(_Base):
    def test_a_marker_before_a_long_dump_still_decides(self):
        s, err = self.run_case([PYTHON, "-c", WATCHDOG_THEN_DUMP], 75, "infra")
        self.assertGreater(len(err), 12_000, "the dump is shorter than intended")
        self.assertIn("Watchdog caught collective operation timeout", s["reason"],
                      json.dumps(s))
        self.assertEqual(s["evidence"], "marker", json.dumps(s))

    def test_nccl_warn_on_stdout_decides(self):
        warn = "node-3:77:91 [1] NCCL WARN NET/IB : Got completion from peer with error 12"
        s, _ = self.run_case(sh(SAY_AND_EXIT, warn, 1, 1), 75, "infra")
        self.assertIn("its stdout says 'NCCL WARN NET/'", s["reason"], json.dumps(s))

    def test_xid_by_number(self):
        xid31 = "NVRM: Xid (PCI:0000:3b:00): 31, pid=77, name=python, Ch 00000008, MMU Fault"
        xid79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=77, name=python, GPU has fallen off the bu"
        s, _ = self.run_case(sh(SAY_AND_EXIT, xid31, 2, 3), 3, "worker")
        self.assertIn("Xid 31", s["reason"], json.dumps(s))
        self.assertIn("application fault", s["reason"], json.dumps(s))
        s, _ = self.run_case(sh(SAY_AND_EXIT, xid79, 2, 1), 74, "hardware")
        self.assertIn("Xid 79", s["reason"], json.dumps(s))

    def test_shared_memory_running_out_is_config(self):
        nccl = ("node-3:77:91 [1] misc/shmutils.cc:87 NCCL WARN Error while creating shared "
                "memory segment /dev/shm/nccl-AbCdEf (size 9637888), error: No space left on "
                "device (28)")
        s, err = self.run_case(sh(SAY_AND_EXIT, nccl, 2, 1), 78, "config", wrap=SMALL_SHM)
        self.assertIn("/dev/shm (2 MiB) is too small", s["reason"], json.dumps(s))
        self.assertIn("emptyDir with medium: Memory", s["reason"], json.dumps(s))
        # Two workers and a 2 MiB /dev/shm: said at start.
        self.assertIn("/dev/shm is only 2 MiB", err)

    def test_sigbus_while_dev_shm_is_full_is_config(self):
        # A file in a 2 MiB /dev/shm, mapped 8 MiB long: the first page tmpfs has no room for
        # is SIGBUS (mmap(2)), the way a DataLoader dies of a full /dev/shm. The file stays.
        s, _ = self.run_case([PYTHON, "-c", FILL_SHM_THEN_SIGBUS], 78, "config", wrap=SMALL_SHM)
        self.assertIn("died of signal SIGBUS", s["reason"], json.dumps(s))
        self.assertIn("while /dev/shm was full", s["reason"], json.dumps(s))
        self.assertEqual(s["rule"], 7, json.dumps(s))
        # SIGBUS with room in /dev/shm is the worker's own: 135.
        self.run_case(["sh", "-c", 'if [ "$LOCAL_RANK" = 1 ]; then kill -BUS $$; fi; '
                       "exec sleep 30"], 135, "worker", wrap=SMALL_SHM)

    def test_a_harmless_exception_name_long_ago_is_no_bug(self):
        # A warning that names ImportError, thousands of healthy lines, then a transient
        # failure (a TimeoutError traceback): exit 1, class worker, never 42. Then the same
        # with an @record-style error file naming the TimeoutError.
        s, _ = self.run_case([PYTHON, "-c", HARMLESS_THEN_TRANSIENT], 1, "worker")
        self.assertIn("its last exception: TimeoutError", s["reason"], json.dumps(s))
        s, _ = self.run_case([PYTHON, "-c", HARMLESS_THEN_TRANSIENT, "record"], 1, "worker")
        self.assertEqual((s["evidence"], s["rule"]), ("error-file", 6), json.dumps(s))
        self.assertIn("its error file says: TimeoutError", s["reason"], json.dumps(s))

    def test_a_bug_is_the_exception_that_ended_the_rank(self):
        # The same preamble, then an ImportError that ends the rank: 42, from its traceback.
        s, _ = self.run_case([PYTHON, "-c", HARMLESS_THEN_TRANSIENT, "import"], 42, "bug")
        self.assertEqual(s["rule"], 9, json.dumps(s))
        self.assertIn("its last exception says 'ModuleNotFoundError'", s["reason"],
                      json.dumps(s))

    # -- pids.max (issue 24) -------------------------------------------------------------
    def pids_cgroup(self):
        """A child of this process's pids cgroup (v1 or v2), emptied and removed at cleanup;
        returns (its path, a wrap that moves the pod's PID 1 into it, its path as the pod
        sees it, under /sys/fs/cgroup/pids)."""
        own = {}
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for ctl in controllers.split(","):
                    own[ctl] = path
        name = f"trainlet-e2e-pids-{os.getpid()}-{self._testMethodName[-20:]}"
        if "pids" in own and os.path.isdir("/sys/fs/cgroup/pids"):
            parent = "/sys/fs/cgroup/pids" + own["pids"].rstrip("/")
            rel = own["pids"].rstrip("/") + "/" + name
            mount = ("mount -t tmpfs cgroup /sys/fs/cgroup; mkdir /sys/fs/cgroup/pids; "
                     "mount -t cgroup -o pids cgroup /sys/fs/cgroup/pids; ")
        else:
            self.skipTest("no cgroup v1 pids controller (this test puts the pod in a pids "
                          "cgroup v1 child)")
        cg = os.path.join(parent, name)
        try:
            os.mkdir(cg)
        except OSError as e:
            self.skipTest(f"cannot create a pids cgroup under {parent}: {e}")
        self.addCleanup(self.remove_cgroup, cg, parent)
        wrap = ["sh", "-c", "set -e; " + mount +
                'echo $$ > "/sys/fs/cgroup/pids$0/cgroup.procs"; exec "$@"', rel]
        return cg, wrap, "/sys/fs/cgroup/pids" + rel

    def test_pids_max_at_start_is_infra_naming_it_every_time(self):
        cg, wrap, _ = self.pids_cgroup()
        # The agent alone (one task) fits; no worker, no thread can start.
        self.write(cg, "pids.max", 1)
        with self.cluster(pods=1) as c:
            c.publish(0)
            for run in range(10):
                with self.subTest(run=run):
                    pod, log = self.start(c, ["sleep", "5"], nproc=2, wrap=wrap)
                    self.assertExit(pod, 20, 75)
                    s = self.summary(pod, log)
                    self.assertSummary(s, "infra", 75)
                    self.assertIn("pids.max", s["reason"], json.dumps(s))
            self.assertNothingLeft(c)

    def test_pids_max_at_an_in_place_restart_is_infra_naming_it_every_time(self):
        cg, wrap, inside = self.pids_cgroup()
        # Generation 0: rank 1 caps pids.max at the agent's own thread count, then exits 1;
        # the restart's spawn then finds no room (the pods' podPidsLimit reached meanwhile).
        worker = r"""
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$LOCAL_RANK" = 1 ]; then
    sleep 0.2
    ls /proc/1/task | wc -l > "$1/pids.max"
    exit 1
fi
exec sleep 30
"""
        with self.cluster(pods=1) as c:
            c.publish(0)
            for run in range(10):
                with self.subTest(run=run):
                    self.write(cg, "pids.max", "max")
                    pod, log = self.start(c, sh(worker, inside), "--max-restarts", "2",
                                          nproc=2, wrap=wrap)
                    self.assertExit(pod, 30, 75)
                    self.assertIn("restart 1 of 2", pod.stderr(), pod.tail())
                    s = self.summary(pod, log)
                    self.assertSummary(s, "infra", 75)
                    self.assertIn("pids.max", s["reason"], json.dumps(s))
            self.assertNothingLeft(c)


class ReadOnlyRootTest(_Base):
    """readOnlyRootFilesystem: true and a non-root user: the pod's root mount is read-only in
    its own mount namespace (a bind remount: the file system itself is untouched), and
    trainlet runs as nobody (65534)."""

    # Read-only root (and /tmp with it); $1 = "shm-ro" makes /dev/shm read-only too.
    WRAP = ["sh", "-c", 'set -e; mount -o remount,bind,ro /; '
            'if [ "$0" = shm-ro ]; then mount -o remount,bind,ro /dev/shm; fi; '
            'exec setpriv --reuid 65534 --regid 65534 --clear-groups "$@"']

    def run_ro(self, worker, shm, *flags, code):
        """Runs `worker` (sh script, 2 workers); returns (the summary from trainlet's last
        stderr line: the termination log cannot be written either, stderr)."""
        with self.cluster(pods=1) as c:
            c.publish(0)
            argv = self.trainlet(*flags, nproc=2, cmd=sh(worker))
            pod = c.start_pod(0, [*self.WRAP[:3], shm, *argv])
            self.assertExit(pod, 20, code)
            err = pod.stderr()
            self.assertNothingLeft(c)
        last = [ln for ln in err.splitlines() if ln.strip()][-1]
        return json.loads(last[last.index("{"):]), err

    def test_features_work_from_dev_shm(self):
        worker = r"""
if [ "$LOCAL_RANK" = 1 ]; then
    case "$TORCHELASTIC_ERROR_FILE" in /dev/shm/*) ;; *) echo "error file: $TORCHELASTIC_ERROR_FILE"; exit 9;; esac
    [ -w "$TRAINLET_HEARTBEAT_FILE" ] || { echo "no heartbeat file"; exit 8; }
    printf '{"message": "CUDA error: uncorrectable ECC error encountered"}' > "$TORCHELASTIC_ERROR_FILE"
    exit 1
fi
exec sleep 30
"""
        s, err = self.run_ro(worker, "shm-rw", "--hang-timeout", "20", code=74)
        self.assertEqual((s["class"], s["evidence"]), ("hardware", "error-file"), json.dumps(s))
        self.assertNotIn("no writable directory", err)

    def test_nothing_writable_is_a_warning_or_config(self):
        worker = r"""
if [ "$LOCAL_RANK" = 1 ]; then
    [ -z "$TORCHELASTIC_ERROR_FILE" ] || { echo "error file: $TORCHELASTIC_ERROR_FILE"; exit 9; }
    exit 3
fi
exec sleep 30
"""
        s, err = self.run_ro(worker, "shm-ro", code=3)
        self.assertEqual(s["class"], "worker", json.dumps(s))
        self.assertIn("no writable directory for the workers' files", err)
        self.assertIn("error files (TORCHELASTIC_ERROR_FILE", err)
        self.assertIn("heartbeat files", err)
        s, err = self.run_ro(worker, "shm-ro", "--hang-timeout", "3", code=78)
        self.assertEqual(s["class"], "config", json.dumps(s))
        self.assertIn("--hang-timeout needs a writable directory", s["reason"], json.dumps(s))


class Torch2ClassifyTest(_Base):
    """Real failures from a current torch 2.x (CPU; the CUDA build runs without a GPU)."""

    def run_case(self, *args, **kwargs):
        # Importing torch 2.x's CUDA build takes seconds, more on a busy machine.
        return super().run_case(*args, timeout=180, **kwargs)

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        reason = torch2_missing()
        if reason:
            raise unittest.SkipTest(reason)

    def test_real_faulthandler_dump_after_a_watchdog_line(self):
        trainer = r"""
import faulthandler, os, sys, threading, time
import torch
if os.environ["LOCAL_RANK"] != "1":
    time.sleep(300)
def deep(n, ev):
    return deep(n - 1, ev) if n else ev.wait()
ev = threading.Event()
for _ in range(24):
    threading.Thread(target=deep, args=(20, ev), daemon=True).start()
time.sleep(0.5)
print("[E ProcessGroupNCCL.cpp:1316] [Rank 1] Watchdog caught collective operation timeout: "
      "WorkNCCL(SeqNum=7, OpType=ALLREDUCE) ran for 600000 milliseconds", file=sys.stderr,
      flush=True)
faulthandler.dump_traceback(all_threads=True)
os.abort()
"""
        s, err = self.run_case([TORCH2_PYTHON, "-c", trainer], 75, "infra")
        self.assertGreater(len(err), 12_000, "faulthandler's dump is short")
        self.assertIn("Watchdog caught collective operation timeout", s["reason"],
                      json.dumps(s))

    def test_real_dataloader_on_a_2_mib_dev_shm_is_config(self):
        trainer = r"""
import torch
from torch.utils.data import DataLoader, Dataset
class Big(Dataset):
    def __len__(self): return 64
    def __getitem__(self, i): return torch.ones(1 << 20)  # 4 MiB per sample
for batch in DataLoader(Big(), batch_size=2, num_workers=2):
    pass
print("every batch fit")
"""
        s, _ = self.run_case([TORCH2_PYTHON, "-c", trainer], 78, "config", nproc=1,
                             wrap=SMALL_SHM)
        self.assertIn("/dev/shm (2 MiB) is too small", s["reason"], json.dumps(s))

    def test_real_record_error_file_decides(self):
        trainer = r"""
import os, time
from torch.distributed.elastic.multiprocessing.errors import record
@record
def main():
    if os.environ["LOCAL_RANK"] != "1":
        time.sleep(300)
    raise RuntimeError("CUDA error: uncorrectable ECC error encountered")
main()
"""
        s, _ = self.run_case([TORCH2_PYTHON, "-c", trainer], 74, "hardware")
        # The traceback on stderr says it too, and a hardware marker in the failure's own
        # text comes first (rule 3); the error file would say the same (rule 5).
        self.assertIn(s["evidence"], ("marker", "error-file"), json.dumps(s))
        self.assertIn("says 'uncorrectable ECC error'", s["reason"], json.dumps(s))


if __name__ == "__main__":
    unittest.main()
