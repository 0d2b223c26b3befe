"""Exit-code contract (`trainlet exit-codes`) and the termination message, in simulated pods.

Each pod runs trainlet as PID 1 with `--termination-log` pointing at a file in the test's
work directory (the pod's mount namespace is a private copy of the host's, so the pod sees
that path; podsim bind-mounts only /etc/hosts and /etc/resolv.conf). Every non-zero exit
must leave there a one-line JSON summary of at most 4096 bytes, valid UTF-8, and log the
same JSON as trainlet's last stderr line.

  * a worker exits 42 in a 2-pod gang: its pod exits 42, class "bug", the right ranks;
  * a worker is OOM-killed by its memory cgroup (a child cgroup created here, with the
    pod started inside it): 77, class "oom", and the cgroup's oom_kill counter rose;
  * a process of a worker is OOM-killed (a DataLoader worker) and the trainer then exits 1:
    77 too; when the trainer finishes anyway, 0 and a warning with the count;
  * SIGTERM (and SIGINT) before any failure: 143, class "terminated", even when the
    trainer then exits 42 or 0 while shutting down;
  * command not found / invalid flag: 78 within 1 s, class "config";
  * two workers fail: the first one decides (exit 3), not the one trainlet stopped (42);
  * markers of the failing worker: CUDA ECC -> 74 (on stderr or stdout: both streams are
    scanned), NCCL -> 75, ModuleNotFoundError -> 42, exit 42 after an NCCL error -> 42 (the
    fatal code first); ECC on stdout only is no hardware; not from a worker trainlet stopped;
  * 100 KB of UTF-8 stderr: the summary stays <= 4096 bytes, valid JSON and UTF-8, and its
    stderr_tail ends with the worker's last line.
"""

import errno
import json
import os
import re
import signal
import time
import unittest

from harness import PYTHON, PodsimTestCase

LIMIT = 4096                    # bytes: the kubelet's terminationMessagePath limit
SUMMARY_KEYS = {"class", "code", "reason", "evidence", "pod_index", "attempt", "stderr_tail"}
FIRST_FAILURE_KEYS = {"local_rank", "rank", "exit"}

# `nap TENTHS`: sleeps in 0.1 s steps. Trapping workers wait this way rather than with
# `sleep N & wait $!`: a SIGTERM that reaches the background sleep between fork and exec
# is lost in sh's handler (the child resets its traps before exec), and that sleep would
# then hold the pod for the whole grace period. A 0.1 s sleep ends by itself.
NAP = "nap() { n=0; while [ $n -lt $1 ]; do sleep 0.1; n=$((n + 1)); done; }\n"

# A worker that says it is ready, then waits; on SIGTERM/SIGINT says so and exits $1.
SH_READY_THEN_TRAP = NAP + r"""
code=$1
trap 'echo "rank $RANK got TERM"; exit $code' TERM
trap 'echo "rank $RANK got INT"; exit $code' INT
echo "rank $RANK ready"
nap 300
echo "rank $RANK: sleep ended without a signal"
exit 1
"""


def sh(script, *args):
    """A trainer command: `sh -c script trainer args...`."""
    return ["sh", "-c", script, "trainer", *map(str, args)]


class ExitCodesTest(PodsimTestCase):
    needs_trainlet = True

    standin_skip = ("the stand-in does not implement failure classification "
                    "or --termination-log")

    # -- helpers -----------------------------------------------------------------------
    def start(self, c, cmd, *flags, index=0, nnodes=1, nproc=2, grace=5, wrap=(), log=None):
        """Starts pod `index` with trainlet writing its summary to a fresh file in the
        workdir; returns (pod, termination-log path)."""
        self._runs = getattr(self, "_runs", 0) + 1
        log = log or os.path.join(c.workdir, f"termination-log-{self._runs}-pod{index}")
        argv = self.trainlet("--termination-log", log, *flags, nnodes=nnodes, nproc=nproc,
                             grace=grace, rdzv_timeout=20, cmd=cmd)
        return c.start_pod(index, [*wrap, *argv]), log

    def summary(self, pod, path, stderr_json=True):
        """The termination message at `path`: one line of JSON, <= 4096 bytes, valid UTF-8;
        with stderr_json, also the end of the last line of the pod's stderr."""
        self.assertTrue(os.path.exists(path),
                        f"no termination message at {path} (does the pod see it?)\n" + pod.tail())
        with open(path, "rb") as f:
            raw = f.read()
        self.assertLessEqual(len(raw), LIMIT, f"termination message is {len(raw)} bytes")
        try:
            text = raw.decode("utf-8")  # strict
        except UnicodeDecodeError as e:
            self.fail(f"termination message is not valid UTF-8: {e}: {raw[:200]!r}")
        self.assertEqual(text.rstrip("\n").count("\n"), 0, f"not one line: {text!r}")
        try:
            s = json.loads(text)
        except ValueError as e:
            self.fail(f"termination message is not JSON: {e}: {text!r}")
        self.assertIsInstance(s, dict, text)
        missing = SUMMARY_KEYS - s.keys()
        self.assertFalse(missing, f"summary lacks {sorted(missing)}: {text}")
        if "first_failure" in s:  # workers ran: so did the phases before them
            self.assertIsInstance(s.get("phases_ms"), dict, f"no phases_ms: {text}")
            missing = FIRST_FAILURE_KEYS - s["first_failure"].keys()
            self.assertFalse(missing, f"first_failure lacks {sorted(missing)}: {text}")
        if stderr_json:
            lines = [ln for ln in pod.stderr().splitlines() if ln.strip()]
            self.assertTrue(lines and lines[-1].endswith(text.strip()),
                            f"trainlet's last stderr line is not the summary:\n  last: "
                            f"{lines[-1] if lines else None!r}\n  file: {text.strip()!r}")
        return s

    def assertSummary(self, s, cls, code, **fields):
        self.assertEqual((s["class"], s["code"]), (cls, code), json.dumps(s))
        for k, v in fields.items():
            self.assertEqual(s[k], v, f"{k}: {json.dumps(s)}")

    # -- 1 + 8: a worker exits 42 in a 2-pod gang ----------------------------------------
    def test_bug_exit_42_in_two_pod_gang(self):
        fail_rank, live = 3, 4  # rank 3 = pod 1, local rank 1 (2 workers per pod)
        script = NAP + r"""
fail_rank=$1 live=$2 log_dir=$3
if [ "$RANK" = "$fail_rank" ]; then
    echo "rank $RANK sees $log_dir as $(stat -c %d:%i "$log_dir")"
    echo "rank $RANK failing with 42" >&2
    exit 42
fi
trap 'echo "rank $RANK got TERM"; exit 143' TERM
echo "rank $RANK ready"
nap $((live * 10))
"""
        with self.cluster(pods=2) as c:
            c.publish_all()
            pods, logs = {}, {}
            for i in (0, 1):
                pods[i], logs[i] = self.start(c, sh(script, fail_rank, live, c.workdir),
                                              index=i, nnodes=2, nproc=2, grace=3)
            code = pods[1].wait(live - 2)  # well before its sibling would end by itself
            self.assertEqual(code, 42, pods[1].tail())

            # The pod's mount namespace sees the host's work directory (same inode).
            st = os.stat(c.workdir)
            m = re.search(r"sees \S+ as (\d+):(\d+)", pods[1].stdout())
            self.assertIsNotNone(m, pods[1].tail())
            self.assertEqual((int(m[1]), int(m[2])), (st.st_dev, st.st_ino),
                             "the pod sees another directory at the termination log's path")

            s = self.summary(pods[1], logs[1])
            self.assertSummary(s, "bug", 42, pod_index=1)
            self.assertEqual((s["first_failure"]["rank"], s["first_failure"]["local_rank"]),
                             (fail_rank, 1), json.dumps(s))
            self.assertIn("42", s["first_failure"]["exit"], json.dumps(s))
            self.assertIn(f"rank {fail_rank} failing with 42", s["stderr_tail"], json.dumps(s))

            # The other pod: any code (trainlet's choice for now), in bounded time.
            other = pods[0].wait(live + 10)
            if other != 0:
                self.summary(pods[0], logs[0])  # still a well-formed summary
            self.assertNothingLeft(c)

    # -- 2: the memory cgroup's OOM killer ----------------------------------------------
    def memory_cgroup(self, limit):
        """Creates a child memory cgroup of this process's own with `limit` bytes (swap
        included), removed at cleanup. Returns (host dir, pod wrapper argv, counter reader).
        Skips when neither a writable cgroup v1 memory controller nor a delegated v2 one
        is available."""
        own = {}
        with open("/proc/self/cgroup") as f:
            for line in f:
                hid, ctrls, path = line.rstrip("\n").split(":", 2)
                for ctrl in ctrls.split(","):
                    own[ctrl or ("" if hid == "0" else hid)] = path
        name = f"trainlet-e2e-oom-{os.getpid()}-{time.monotonic_ns()}"
        reasons = []

        if "memory" in own:  # cgroup v1
            parent = "/sys/fs/cgroup/memory" + own["memory"].rstrip("/")
            if not os.path.isfile(os.path.join(parent, "cgroup.procs")):
                reasons.append(f"cgroup v1 memory: {parent} is not mounted")
            else:
                try:
                    os.mkdir(os.path.join(parent, name))
                except OSError as e:
                    reasons.append(f"cgroup v1 memory: cannot create a child of {parent}: {e}")
                else:
                    cg = os.path.join(parent, name)
                    self.addCleanup(self.remove_cgroup, cg, parent)
                    self.write(cg, "memory.limit_in_bytes", limit)
                    if os.path.exists(os.path.join(cg, "memory.memsw.limit_in_bytes")):
                        self.write(cg, "memory.memsw.limit_in_bytes", limit)
                    # The pod's /sys is a fresh sysfs (`ip netns exec` remounts it): mount
                    # the memory controller as a container runtime would, then move the
                    # pod's PID 1 into the child before it execs trainlet.
                    rel = own["memory"].rstrip("/") + "/" + name
                    wrap = ["sh", "-c", 'set -e; mount -t tmpfs cgroup /sys/fs/cgroup; '
                            'mkdir /sys/fs/cgroup/memory; '
                            'mount -t cgroup -o memory cgroup /sys/fs/cgroup/memory; '
                            'echo $$ > "/sys/fs/cgroup/memory$0/cgroup.procs"; exec "$@"', rel]
                    return cg, wrap, lambda: self.keyed(cg, "memory.oom_control", "oom_kill")

        if "" in own:  # cgroup v2: only when memory is already delegated to our subtree
            root = "/sys/fs/cgroup"
            parent = root + own[""].rstrip("/")
            try:
                with open(os.path.join(parent, "cgroup.subtree_control")) as f:
                    delegated = "memory" in f.read().split()
                if not delegated:
                    reasons.append(f"cgroup v2: memory is not enabled in "
                                   f"{parent}/cgroup.subtree_control")
            except OSError as e:
                delegated = False
                reasons.append(f"cgroup v2: {e}")
            if delegated:
                try:
                    os.mkdir(os.path.join(parent, name))
                except OSError as e:
                    reasons.append(f"cgroup v2: cannot create a child of {parent}: {e}")
                else:
                    cg = os.path.join(parent, name)
                    self.addCleanup(self.remove_cgroup, cg, parent)
                    self.write(cg, "memory.max", limit)
                    if os.path.exists(os.path.join(cg, "memory.swap.max")):
                        self.write(cg, "memory.swap.max", 0)
                    rel = own[""].rstrip("/") + "/" + name
                    wrap = ["sh", "-c", 'set -e; mount -t cgroup2 cgroup2 /sys/fs/cgroup; '
                            'echo $$ > "/sys/fs/cgroup$0/cgroup.procs"; exec "$@"', rel]
                    return cg, wrap, lambda: self.keyed(cg, "memory.events", "oom_kill")

        self.skipTest("no memory cgroup to OOM-kill a worker in: "
                      + ("; ".join(reasons) or "no memory controller in /proc/self/cgroup"))

    @staticmethod
    def write(cg, name, value):
        with open(os.path.join(cg, name), "w") as f:
            f.write(str(value))

    @staticmethod
    def keyed(cg, name, key):
        with open(os.path.join(cg, name)) as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k == key:
                    return int(v)
        raise AssertionError(f"no {key} in {cg}/{name}")

    def remove_cgroup(self, cg, parent, timeout=5.0):
        """Waits for the child cgroup to empty (moving leftovers to `parent`), then removes it."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with open(os.path.join(cg, "cgroup.procs")) as f:
                    pids = f.read().split()
            except FileNotFoundError:
                return
            for pid in pids:
                try:
                    self.write(parent, "cgroup.procs", pid)
                except OSError:
                    pass  # exited meanwhile
            try:
                os.rmdir(cg)
                return
            except OSError as e:
                if e.errno == errno.ENOENT:
                    return
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
            time.sleep(0.05)

    def test_oom_killed_worker(self):
        limit = 300 << 20
        cg, wrap, oom_kills = self.memory_cgroup(limit)
        alloc = ("import sys\nheld = []\nwhile True:\n"
                 "    held.append(bytearray(b'x' * (50 << 20)))\n"
                 "    print(f'allocated {len(held) * 50} MB', flush=True)\n")
        script = r"""
if [ "$LOCAL_RANK" = 1 ]; then exec "$1" -c "$2"; fi
exec sleep 30
"""
        with self.cluster(pods=1) as c:
            c.publish(0)
            before = oom_kills()
            pod, log = self.start(c, sh(script, PYTHON, alloc), wrap=wrap)
            self.assertExit(pod, 20, 77)
            # trainlet and an idle python fit below the limit: the allocation got started.
            self.assertIn("[rank1]: allocated 50 MB", pod.stdout(), pod.tail())
            self.assertGreater(oom_kills(), before, f"{cg}: the OOM killer never ran")
            s = self.summary(pod, log)
            self.assertSummary(s, "oom", 77, evidence="oom")
            self.assertEqual(s["first_failure"]["local_rank"], 1, json.dumps(s))
            self.assertIn("SIGKILL", s["first_failure"]["exit"], json.dumps(s))
            self.assertNothingLeft(c)

    def test_oom_beside_a_stalled_console_kills_a_worker_not_trainlet(self):
        """32 chatty workers fill trainlet's read-ahead while nobody reads its stdout (a
        stalled console), and a 33rd allocates until the 128 MiB cgroup is full. With 1 MiB
        read-ahead per stream (and more, as buffers grew) trainlet was the largest process
        and the OOM killer's choice: 137, no summary. Its read-ahead now follows the limit
        and the workers' oom_score_adj is higher: a worker is killed, and the pod exits 77
        with its termination message."""
        limit = 128 << 20
        cg, wrap, oom_kills = self.memory_cgroup(limit)
        alloc = ("import sys, time\nheld = []\ntime.sleep(2)\nwhile True:\n"
                 "    held.append(bytearray(b'x' * (1 << 20)))\n"
                 "    if len(held) % 16 == 0: print(f'allocated {len(held)} MiB', "
                 "file=sys.stderr, flush=True)\n"
                 "    time.sleep(0.01)\n")
        script = r"""
if [ "$LOCAL_RANK" = 0 ]; then exec "$1" -c "$2"; fi
exec yes "a chatty worker line, rank $LOCAL_RANK, printed as fast as the console takes it"
"""
        with self.cluster(pods=1) as c:
            c.publish(0)
            # trainlet's stdout: a FIFO whose reader never reads (a stalled console).
            fifo = os.path.join(c.workdir, "stalled-console")
            os.mkfifo(fifo)
            stall = ["sh", "-c", '{ sleep 3600 <"$0" & } && exec "$@" >"$0"', fifo]
            before = oom_kills()
            pod, log = self.start(c, sh(script, PYTHON, alloc), nproc=33, wrap=list(wrap) + stall)
            self.assertExit(pod, 60, 77)
            self.assertGreater(oom_kills(), before, f"{cg}: the OOM killer never ran")
            self.assertIn("[rank0]: allocated 16 MiB", pod.stderr(), pod.tail())
            s = self.summary(pod, log)
            self.assertSummary(s, "oom", 77, evidence="oom")
            self.assertEqual(s["first_failure"]["local_rank"], 0, json.dumps(s))
            self.assertIn("SIGKILL", s["first_failure"]["exit"], json.dumps(s))
            self.assertNothingLeft(c)

    # A trainer whose child (as PyTorch's DataLoader workers are) is OOM-killed, and that
    # then exits with argv[1], printing what PyTorch prints (torch/utils/data/_utils/signal_handling.py).
    CHILD_OOM = ("import os, signal, sys\n"
                 "pid = os.fork()\n"
                 "if pid == 0:\n"
                 "    held = []\n"
                 "    while True:\n"
                 "        held.append(bytearray(b'x' * (50 << 20)))\n"
                 "        print(f'child allocated {len(held) * 50} MB', flush=True)\n"
                 "_, status = os.waitpid(pid, 0)\n"
                 "if os.WIFSIGNALED(status):\n"
                 "    print(f'RuntimeError: DataLoader worker (pid {pid}) is killed by signal: '\n"
                 "          f'{signal.strsignal(os.WTERMSIG(status))}.', file=sys.stderr, flush=True)\n"
                 "sys.exit(int(sys.argv[1]))\n")

    def run_child_oom(self, trainer_exit, check):
        """Runs CHILD_OOM in a 300 MB memory cgroup; `check(pod, log, code)` runs inside the
        cluster, after the OOM kill is confirmed."""
        cg, wrap, oom_kills = self.memory_cgroup(300 << 20)
        with self.cluster(pods=1) as c:
            c.publish(0)
            before = oom_kills()
            pod, log = self.start(c, [PYTHON, "-c", self.CHILD_OOM, str(trainer_exit)], nproc=1,
                                  wrap=wrap)
            code = pod.wait(30)
            self.assertIn("[rank0]: child allocated 50 MB", pod.stdout(), pod.tail())
            self.assertGreater(oom_kills(), before, f"{cg}: the OOM killer never ran")
            self.assertIn("is killed by signal: Killed.", pod.stderr(), pod.tail())
            check(pod, log, code)
            self.assertNothingLeft(c)

    def test_oom_kill_of_a_workers_child_then_exit_1_is_oom(self):
        def check(pod, log, code):
            self.assertEqual(code, 77, pod.tail())
            s = self.summary(pod, log)
            self.assertSummary(s, "oom", 77, evidence="oom")
            self.assertIn("exit 1", s["first_failure"]["exit"], json.dumps(s))
            self.assertIn("OOM kill", s["reason"], json.dumps(s))
        self.run_child_oom(1, check)

    def test_oom_kill_in_a_run_that_succeeds_is_a_warning(self):
        def check(pod, log, code):
            self.assertEqual(code, 0, pod.tail())
            self.assertRegex(pod.stderr(), r"warn.*counted 1 OOM kill\(s\)")
            self.assertFalse(os.path.exists(log), "a successful run writes no termination message")
        self.run_child_oom(0, check)

    # -- 3: SIGTERM / SIGINT before any failure -----------------------------------------
    def test_terminated_wins_over_shutdown_exit_code(self):
        with self.cluster(pods=1) as c:
            c.publish(0)
            for sig, exit_on_signal in ((signal.SIGTERM, 42), (signal.SIGTERM, 0),
                                        (signal.SIGINT, 42)):
                with self.subTest(signal=sig.name, trainer_exits=exit_on_signal):
                    pod, log = self.start(c, sh(SH_READY_THEN_TRAP, exit_on_signal), grace=10)
                    for rank in (0, 1):
                        pod.wait_for_output(rf"(?m)^\[rank{rank}\]: rank {rank} ready", 10)
                    pod.signal(sig)
                    self.assertExit(pod, 5, 143)
                    word = "TERM" if sig == signal.SIGTERM else "INT"
                    for rank in (0, 1):  # the workers did get it and exited with that code
                        self.assertIn(f"[rank{rank}]: rank {rank} got {word}", pod.stdout(),
                                      pod.tail())
                    s = self.summary(pod, log)
                    self.assertSummary(s, "terminated", 143)
                    self.assertIn(sig.name, s["reason"], json.dumps(s))
            self.assertNothingLeft(c)

    # -- 4: config errors ---------------------------------------------------------------
    def test_config_errors_exit_78_at_once(self):
        with self.cluster(pods=1) as c:
            c.publish(0)
            cases = [("command not found", ["/no/such/trainer"], (), "/no/such/trainer", True),
                     # Flag errors are reported as one human line (README: "Bad input is
                     # reported as one line"), so the stderr JSON is not required here.
                     ("invalid flag value", ["true"], ("--fatal-exit-codes", "x"), "x", False)]
            for what, cmd, flags, mention, stderr_json in cases:
                with self.subTest(what):
                    pod, log = self.start(c, cmd, *flags)
                    self.assertExit(pod, 5, 78)
                    self.assertLess(pod.elapsed(), 1.0, "config errors must be reported at once")
                    s = self.summary(pod, log, stderr_json=stderr_json)
                    self.assertSummary(s, "config", 78)
                    self.assertIn(mention, s["reason"], json.dumps(s))
            self.assertNothingLeft(c)

    # -- 5: the first failure decides ---------------------------------------------------
    def test_first_failure_wins_over_stopped_worker(self):
        script = NAP + r"""
if [ "$LOCAL_RANK" = 1 ]; then
    echo "rank $RANK ready"
    sleep 0.3
    echo "rank $RANK failing with 3" >&2
    exit 3
fi
trap 'echo "rank $RANK got TERM"; sleep 0.5; echo "rank $RANK exiting 42 late" >&2; exit 42' TERM
echo "rank $RANK ready"
nap 15
echo "rank $RANK failing with 42 on its own" >&2
exit 42
"""
        with self.cluster(pods=1) as c:
            c.publish(0)
            pod, log = self.start(c, sh(script))
            self.assertExit(pod, 10, 3)
            self.assertIn("[rank0]: rank 0 got TERM", pod.stdout(), pod.tail())
            self.assertIn("rank 0 exiting 42 late", pod.stderr(), pod.tail())
            self.assertNotIn("failing with 42 on its own", pod.stderr(), pod.tail())
            s = self.summary(pod, log)
            self.assertSummary(s, "worker", 3)
            self.assertEqual((s["first_failure"]["local_rank"], s["first_failure"]["rank"]),
                             (1, 1), json.dumps(s))
            self.assertIn("stopped by trainlet", s["reason"], json.dumps(s))
            self.assertNothingLeft(c)

    # -- 6: stderr markers --------------------------------------------------------------
    def test_stderr_markers_classify_the_failing_worker(self):
        ecc = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
        nccl = "ncclRemoteError: remote process exited or there was a network error"
        # Local rank 1 prints `text` to stderr (or stdout) and exits 1; rank 0 waits.
        script = r"""
if [ "$LOCAL_RANK" = 1 ]; then
    echo "Traceback (most recent call last):" >&$2
    echo "$1" >&$2
    exit 1
fi
exec sleep 30
"""
        cases = [("ECC on stderr", sh(script, ecc, 2), "hardware", 74),
                 ("NCCL on stderr", sh(script, nccl, 2), "infra", 75),
                 # Hardware only from the failure's own text, which is on stderr.
                 ("ECC on stdout only", sh(script, ecc, 1), "worker", 1),
                 # The fatal exit code comes before markers.
                 ("exit 42 after a network error", sh(script.replace("exit 1", "exit 42"),
                                                      nccl, 2), "bug", 42),
                 ("ModuleNotFoundError", [PYTHON, "-c", "import os\nif os.environ['LOCAL_RANK']"
                                          " == '1': import no_such_module_for_trainlet_e2e\n"
                                          "else: import time; time.sleep(30)"], "bug", 42)]
        with self.cluster(pods=1) as c:
            c.publish(0)
            for what, cmd, cls, code in cases:
                with self.subTest(what):
                    pod, log = self.start(c, cmd)
                    self.assertExit(pod, 10, code)
                    s = self.summary(pod, log)
                    self.assertSummary(s, cls, code)
                    self.assertEqual(s["first_failure"]["local_rank"], 1, json.dumps(s))
            self.assertNothingLeft(c)

    def test_marker_from_stopped_worker_does_not_decide(self):
        # Local rank 1 exits 3 first; rank 0, stopped by trainlet, then prints a
        # hardware marker and exits 1: the first failure (3, no marker) decides.
        script = NAP + r"""
if [ "$LOCAL_RANK" = 1 ]; then
    echo "rank $RANK ready"
    sleep 0.3
    exit 3
fi
trap 'echo "RuntimeError: CUDA error: uncorrectable ECC error encountered" >&2; exit 1' TERM
nap 300
"""
        with self.cluster(pods=1) as c:
            c.publish(0)
            pod, log = self.start(c, sh(script))
            self.assertExit(pod, 10, 3)
            self.assertIn("uncorrectable ECC error", pod.stderr(), pod.tail())
            s = self.summary(pod, log)
            self.assertSummary(s, "worker", 3)
            self.assertEqual(s["first_failure"]["local_rank"], 1, json.dumps(s))
            self.assertNothingLeft(c)

    # -- 7: a big, multi-byte stderr ----------------------------------------------------
    def test_summary_size_and_utf8_with_big_stderr(self):
        # ~100 KB of lines with 2- and 3-byte characters, JSON-special characters and, near
        # the end, bytes that are not UTF-8 at all; then THE-LAST-LINE.
        worker = r"""
import os, sys
if os.environ["LOCAL_RANK"] != "1":
    import time; time.sleep(30)
out = sys.stderr.buffer
for i in range(1500):
    out.write(("line %d: été €uro \"quoted\" back\\slash\ttab " % i + "é€" * (i % 7)).encode() + b"\n")
out.write(b"not utf-8: \xff\xfe\xc3 end\n")
out.write("THE-LAST-LINE".encode())
out.write(b"\n")
out.flush()
sys.exit(1)
"""
        with self.cluster(pods=1) as c:
            c.publish(0)
            pod, log = self.start(c, [PYTHON, "-c", worker])
            self.assertExit(pod, 10, 1)
            self.assertGreater(len(pod.stderr().encode()), 100_000, "the worker wrote less")
            s = self.summary(pod, log)  # <= 4096 bytes, JSON, UTF-8, last stderr line
            self.assertSummary(s, "worker", 1)
            self.assertEqual(s["first_failure"]["local_rank"], 1, json.dumps(s))
            self.assertRegex(s["stderr_tail"][-300:], r"THE-LAST-LINE\n?\Z")
            self.assertIn("été €uro", s["stderr_tail"])  # multi-byte text survives
            self.assertNothingLeft(c)


if __name__ == "__main__":
    unittest.main()
