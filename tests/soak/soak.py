#!/usr/bin/python3
"""Chaos soak: gangs of simulated pods driven through random faults, checked against the
exit-code contract. See tests/soak/README.md for the fault table and the rules checked.

    /usr/bin/python3 tests/soak/soak.py --trainlet build/agent/trainlet --seed 1 --faults 500
    /usr/bin/python3 tests/soak/soak.py --trainlet build/agent/trainlet --seed 7 --faults 10 --ci

Needs root (tests/e2e/podsim.py: network, PID, UTS and mount namespaces, dnsmasq).
Deterministic by seed: the seed fixes every run's gang size, --max-restarts, worker count,
fault kinds, victims and delays (not the kernel's timing). Exit status: 0 when no contract
violation was found, 1 otherwise (each one is printed with its run's seed and a command that
replays that run alone), 2 on a harness error.
"""

import argparse
import collections
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "e2e"))
import podsim  # noqa: E402

# ---- tunables of the harness (seconds unless said) -------------------------------------
GRACE = 2              # --grace-period of every pod
RDZV_TIMEOUT = 20      # --rdzv-timeout: bounds any rendezvous the soak leaves waiting
FORM_TIMEOUT = 40      # the gang's workers all started (a loaded machine, 8 pods)
PHASE_TIMEOUT = 45     # a fault to its outcome (restart formed, or every pod exited)
SLOW_STOP = 1.5        # the TERM trap of a worker marked "slow" (a checkpoint being written)
SAVE = 0.8             # a worker's writer saving its checkpoint (preempt_save): inside the
                       # grace period less trainlet's reserve (min(5 s, GRACE / 5) = 0.4 s)
FREEZE = (5.0, 10.0)   # SIGSTOP of an agent for this long, then SIGCONT
LINK_CUT = 6.0         # a cut link comes back after this long (past the 3 s heartbeat timeout)
SETTLE = (0.3, 1.5)    # the gang runs this long before a fault
REPLACE_DELAY = 0.3    # the Job controller's replacement of a pod that exited mid-restart
LEFTOVER_WAIT = 1.0    # after a pod's exit, its PID namespace must be empty within this

# The worker: `sh -c WORKER trainer CTL MARKS INC`. It appends "<event> <wall time> <generation>
# <local rank> <incarnation> <RANK>" to MARKS (ready, fail, done, TERM, saved) and polls
# CTL/g<gen>.l<local rank> for what to do: "exitN" exits N, "kill" SIGKILLs itself, "hw" prints
# a GPU fault marker (class hardware) and exits 1.
# CTL/g<gen>.slow makes its TERM trap take SLOW_STOP s. Its writer (a subshell in its process
# group, like a checkpoint writer process, with SIGTERM's default action) saves when the TERM
# trap asks, if CTL/g<gen>.save exists: SAVE s, then the mark "saved"; the trap waits for it.
# Started by trainlet, so RANK/LOCAL_RANK/TORCHELASTIC_RESTART_COUNT are set. The generation
# comes from TORCHELASTIC_ERROR_FILE (--log-dir: <dir>/<run>_<suffix>/attempt_<generation>/
# <local rank>/error.json): with elastic sizes TORCHELASTIC_RESTART_COUNT counts restarts, not
# generations (a join's generation is no restart). Each mark ends with the restart count and
# WORLD_SIZE.
WORKER = r"""
ctl=$1 marks=$2 inc=$3
gen=${TORCHELASTIC_ERROR_FILE%/*/*}; gen=${gen##*/attempt_}
mark() {
  echo "$1 $(date +%s.%N) $gen $LOCAL_RANK $inc $RANK $TORCHELASTIC_RESTART_COUNT $WORLD_SIZE" \
    >> "$marks"
}
ask=$ctl/g$gen.l$LOCAL_RANK.$inc.save
(while [ ! -e "$ask" ]; do sleep 0.1; done; sleep __SAVE__; mark saved) &
writer=$!
term() {
  mark TERM; [ -e "$ctl/g$gen.slow" ] && sleep __SLOW__
  [ -e "$ctl/g$gen.save" ] && : > "$ask" && wait $writer
  exit 143
}
trap term TERM
mark ready
f=$ctl/g$gen.l$LOCAL_RANK
while :; do
  if [ -e "$f" ]; then
    read -r what < "$f"
    case $what in
      kill) mark fail; kill -KILL $$ ;;
      hw) mark fail; echo "CUDA error: uncorrectable ECC error encountered" >&2; exit 1 ;;
      exit0) mark done; exit 0 ;;
      exit*) mark fail; exit "${what#exit}" ;;
    esac
  fi
  sleep 0.1
done
""".replace("__SLOW__", str(SLOW_STOP)).replace("__SAVE__", str(SAVE))


# ---- the fault table ---------------------------------------------------------------------
# retriable: an in-place restart follows while restarts remain (README, "In-place restarts").
# code: what the culprit pod exits with when the gang stops for good; None = no counted exit
#   (documented for a link cut: both sides only see silence, every pod exits 76).
# in_place: with a restart, the culprit pod itself stays up and rejoins; otherwise it may exit
#   (with a code in `restart_exits`) and is replaced, as the Job controller replaces a pod.
Fault = collections.namedtuple("Fault", "name weight retriable code cls in_place restart_exits")
FAULTS = [
    Fault("worker_sigkill", 3, True, 137, "worker", True, ()),
    Fault("worker_exit_1", 3, True, 1, "worker", True, ()),
    Fault("worker_exit_137", 2, True, 137, "worker", True, ()),
    Fault("worker_exit_42", 2, False, 42, "bug", True, ()),
    Fault("agent_sigkill", 3, True, 137, None, False, (137,)),
    Fault("agent_sigterm", 3, False, 143, "terminated", True, ()),
    Fault("agent_freeze", 1, True, 75, "infra", False, (75,)),
    Fault("link_cut", 1, True, None, None, False, (75, 76)),
    Fault("sigterm_mid_restart", 2, True, 143, "terminated", False, (143,)),
    Fault("preempt_save", 2, False, 143, "terminated", True, ()),
    # Hot spares (--spares 1; README "Hot spares"): an active member lost (SIGKILL, frozen) or
    # failing with class hardware leaves, and the waiting spare takes its node rank (RANKs) in
    # the next generation; without restarts left the gang stops as for agent_sigkill /
    # agent_freeze / a non-retriable class. spare_lost: the waiting spare SIGKILLed: nothing else
    # happens (no generation, no exit).
    Fault("spare_swap_kill", 3, True, 137, None, False, (137,)),
    Fault("spare_swap_freeze", 1, True, 75, "infra", False, (75,)),
    Fault("spare_swap_hardware", 2, True, 74, "hardware", False, (74,)),
    Fault("spare_lost", 1, False, None, None, False, (137,)),
    # Elastic --nnodes MIN:MAX (README "Elastic"; pods have indices): elastic_join: a pod not
    # yet in the gang starts while a generation runs below MAX: every pod moves to the next
    # generation with WORLD_SIZE grown, ranks in index order, the restart count unchanged, no
    # exit. elastic_join_at_max: the same at MAX (--spares 1): it waits as a spare, nothing
    # else happens. elastic_loss_kill / _freeze: an active member (not the leader) SIGKILLed /
    # SIGSTOPped with more than MIN active: it exits (137; 75 once it resumes: its own loop
    # stalled), the one counted culprit, and the rest go on in the next generation with
    # WORLD_SIZE shrunk, the restart counted; without restarts left the gang stops as for
    # agent_sigkill / agent_freeze.
    Fault("elastic_join", 3, False, None, None, False, ()),
    Fault("elastic_join_at_max", 1, False, None, None, False, ()),
    Fault("elastic_loss_kill", 3, True, 137, None, False, (137,)),
    Fault("elastic_loss_freeze", 1, True, 75, "infra", False, (75,)),
    # join_mid_restart: a worker exits 1 (a restart) while every active pod's workers take
    # SLOW_STOP s to stop, and a pod starts as soon as the stop reached a worker: elastic below
    # MAX, a pod not yet in the gang, which the restart's generation takes in (WORLD_SIZE grown,
    # one restart counted, no generation after it); with spares, a swapped-out pod the Job
    # recreated, which waits as a spare while the restart runs on the same pods.
    Fault("join_mid_restart", 2, True, 1, "worker", True, ()),
    # Graceful leaves (agent/include/trainlet/agent/pod/membership.h M7-M9): elastic_leave:
    # SIGTERM to an active member (not the leader) with more than MIN active: it exits 143,
    # the rest go on in the next generation with WORLD_SIZE shrunk, ranks dense, and the
    # restart count unchanged (a leave is no restart), whatever restarts are left.
    # leave_mid_restart: a worker exits 1 (a restart, slow stops everywhere) and another
    # active member (not the leader) gets SIGTERM while its workers stop: it exits 143 and
    # the restart's generation goes on without it (WORLD_SIZE shrunk, one restart counted).
    Fault("elastic_leave", 2, False, 143, "terminated", False, (143,)),
    Fault("leave_mid_restart", 2, True, 143, "terminated", False, (143,)),
]
# Kinds of a run with spares only, and kinds such a run does not draw (its own swap kinds cover
# losses of active members; a lost leader waits for index 0's replacement, outside the model).
# Nor does such a run, or an elastic one, draw a SIGTERM (agent_sigterm, preempt_save,
# sigterm_mid_restart): there it is a graceful leave (agent/include/trainlet/agent/pod/
# membership.h M7-M11: a spare takes the leaver's node rank, an elastic gang shrinks, the
# members wait for a leaving leader's replacement), which elastic_leave and leave_mid_restart
# cover; the leader's leave is tests/e2e/test_elastic.py's.
SPARE_KINDS = {"spare_swap_kill", "spare_swap_freeze", "spare_swap_hardware", "spare_lost"}
NOT_WITH_SPARES = {"agent_sigkill", "agent_freeze", "link_cut", "sigterm_mid_restart",
                   "agent_sigterm", "preempt_save"}
ELASTIC_KINDS = {"elastic_join", "elastic_join_at_max", "elastic_loss_kill",
                 "elastic_loss_freeze", "join_mid_restart", "elastic_leave",
                 "leave_mid_restart"}
ELASTIC_ORDER = ["elastic_join", "elastic_loss_kill", "elastic_join_at_max",
                 "elastic_loss_freeze", "join_mid_restart", "agent_sigkill", "link_cut",
                 "agent_freeze", "elastic_leave", "leave_mid_restart"]
# Losses an elastic run also draws (no spare waiting): a member's with more than MIN active
# shrinks the gang as elastic_loss_*; the leader's, or one at MIN, waits for the Job's
# replacement of the index and restarts with the same pods.
ELASTIC_LOSSES = {"agent_sigkill", "agent_freeze", "link_cut"}
LAST_CALL = 2          # --rdzv-conf last_call_timeout of an elastic run
BY_NAME = {f.name: f for f in FAULTS}
PEER_FAILED = 76
SKIPPED = 77  # ctest's SKIP_RETURN_CODE


class Violation(Exception):
    pass


class Run:
    """One gang: N pods, one cluster, a few faults in a row. Records results into `stats`."""

    def __init__(self, args, seed, stats, log, first=None):
        self.args, self.seed, self.stats, self.log = args, seed, stats, log
        self.rng = random.Random(seed)
        self.npods = self.rng.randint(4, 8)
        self.nproc = self.rng.choice([1, 1, 2])
        self.max_restarts = self.rng.choice([0, 0, 1, 2])
        self.nfaults = 1 if self.max_restarts == 0 else self.rng.randint(1, self.max_restarts + 1)
        self.first = first  # the first fault's kind (--cover), else drawn
        if first == "sigterm_mid_restart" or (first in SPARE_KINDS and first != "spare_lost"):
            self.max_restarts = max(self.max_restarts, 1)
        self.gen = 0
        self.inc = collections.Counter()   # pod index -> incarnation (replacements)
        self.exits = {}                    # (index, incarnation) -> (code, wall time)
        self.sigtermed = set()             # (index, incarnation) that got SIGTERM
        self.violations = []
        self.leftovers = 0
        self.unstopped = 0
        # Workers the soak itself killed (a worker SIGKILL; every worker of a SIGKILLed
        # agent): (index, generation, local rank or None for all, incarnation).
        self.exempt = set()
        # Hot spares: a third of the runs (drawn apart from `rng`, so a run without spares
        # draws as before) get --spares 1; pod indices nnodes.. wait as spares. The model:
        # node rank of each active pod, the waiting spares (lowest first), pods gone for good.
        if first in SPARE_KINDS:
            self.spares = 1
        elif first in NOT_WITH_SPARES and not (args.elastic and first in ELASTIC_LOSSES):
            self.spares = 0
        else:
            self.spares = random.Random(seed ^ 0x5BA4E).choice([0, 0, 1])
        self.nnodes = self.npods - self.spares
        self.rank_of = {i: i for i in range(self.nnodes)}
        self.waiting = list(range(self.nnodes, self.npods))
        self.gone = set()
        self.pending = []  # elastic: pod indices not started yet (or lost: the Job recreates)
        self.restarts = 0  # TORCHELASTIC_RESTART_COUNT: the generation unless elastic
        self.elastic = None
        if first in ELASTIC_KINDS or (args.elastic and first in ELASTIC_LOSSES) or (
                first not in SPARE_KINDS | NOT_WITH_SPARES and
                random.Random(seed ^ 0xE1A5).random() < 0.25):
            self.draw_elastic(first)

    def draw_elastic(self, first):
        """An elastic run (drawn apart from `rng`): --nnodes MIN:MAX, MIN 2..3, MAX MIN+1..
        MIN+2, --spares 0 or 1; pod 0 and others up to MIN..MAX start, the rest join later."""
        er = random.Random(self.seed ^ 0xE1A5)
        lo = er.randint(2, 3)
        hi = lo + er.randint(1, 2)
        self.elastic = (lo, hi)
        self.spares = 1 if first == "elastic_join_at_max" else er.choice([0, 0, 1])
        self.npods = hi + self.spares
        k = er.randint(lo, hi)
        if first in ("elastic_join", "join_mid_restart"):
            k = er.randint(lo, hi - 1)
            self.max_restarts = max(self.max_restarts, 1 if first == "join_mid_restart" else 0)
        elif first == "elastic_join_at_max":
            k = hi
        elif first in ("elastic_loss_kill", "elastic_loss_freeze", "leave_mid_restart"):
            k = er.randint(lo + 1, hi)
            self.max_restarts = max(self.max_restarts, 1)
            if first == "leave_mid_restart":
                self.spares = 0  # a waiting spare would take the leaver's node rank
                self.npods = hi
        elif first == "elastic_leave":
            k = er.randint(lo + 1, hi)
            self.spares = 0
            self.npods = hi
        elif first in ELASTIC_LOSSES:
            self.spares = 0  # a waiting spare would make the loss a swap
            self.npods = hi
            self.max_restarts = max(self.max_restarts, 1)
        initial = [0] + sorted(er.sample(range(1, hi), k - 1))
        self.rank_of = {i: r for r, i in enumerate(initial)}
        self.pending = sorted(set(range(self.npods)) - set(initial))
        self.waiting = []
        self.nnodes = f"{lo}:{hi}"

    # -- pods ------------------------------------------------------------------------------
    def ctl(self, i):
        return os.path.join(self.c.workdir, f"ctl{i}")

    def marks_path(self, i):
        return os.path.join(self.c.workdir, f"pod{i}.marks")

    def start_pod(self, i):
        self.inc[i] += 1
        os.makedirs(self.ctl(i), exist_ok=True)
        self.gone.discard(i)
        argv = [self.args.trainlet, "--nnodes", str(self.nnodes),
                *(["--spares", str(self.spares)] if self.spares else []),
                *(["--rdzv-conf", f"last_call_timeout={LAST_CALL}"] if self.elastic else []),
                "--log-dir", os.path.join(self.c.workdir, f"logs{i}.{self.inc[i]}"),
                "--nproc-per-node", str(self.nproc), "--grace-period", str(GRACE),
                "--rdzv-timeout", str(RDZV_TIMEOUT), "--max-restarts", str(self.max_restarts),
                "--termination-log", os.path.join(self.c.workdir, f"tlog{i}.{self.inc[i]}"),
                "--", "sh", "-c", WORKER, "trainer", self.ctl(i), self.marks_path(i),
                str(self.inc[i])]
        self.c.start_pod(i, argv)

    def marks(self, i):
        """[(event, time, generation, local rank, incarnation)] of pod i's workers."""
        out = []
        try:
            with open(self.marks_path(i)) as f:
                for line in f:
                    p = line.split()
                    if len(p) >= 5:
                        out.append((p[0], float(p[1]), p[2], p[3], int(p[4])))
        except FileNotFoundError:
            pass
        return out

    def ready(self, i, gen, inc=None):
        """Local ranks of pod i (incarnation `inc`, default any) whose worker started in gen."""
        return {lr for ev, _, g, lr, n in self.marks(i)
                if ev == "ready" and g == str(gen) and (inc is None or n == inc)}

    def all_ready(self, gen):
        return all(len(self.ready(i, gen, self.inc[i])) == self.nproc for i in self.rank_of)

    def starts(self, i, gen):
        """[(RANK, restart count, WORLD_SIZE)] of pod i's workers (current incarnation) that
        started in gen."""
        out = []
        try:
            with open(self.marks_path(i)) as f:
                for line in f:
                    p = line.split()
                    if len(p) == 8 and p[0] == "ready" and p[2] == str(gen) and \
                            int(p[4]) == self.inc[i]:
                        out.append((int(p[5]), p[6], p[7]))
        except FileNotFoundError:
            pass
        return out

    def check_ranks(self, gen):
        """Generation gen: every active pod runs the RANKs of its node rank, none held twice,
        no other pod runs a worker in it; each worker sees the model's restart count and
        WORLD_SIZE. Elastic: node ranks are dense and in the order of the pods' indices."""
        held = collections.Counter()
        want_rc, want_ws = str(self.restarts), str(len(self.rank_of) * self.nproc)
        for i in range(self.npods):
            started = self.starts(i, gen)
            got = sorted(r for r, _, _ in started)
            held.update(got)
            want = ([self.rank_of[i] * self.nproc + lr for lr in range(self.nproc)]
                    if i in self.rank_of else [])
            if got != want:
                self.violate(f"generation {gen}: pod {i} runs RANKs {got}, want {want}")
            for _, rc, ws in started:
                if (rc, ws) != (want_rc, want_ws):
                    self.violate(f"generation {gen}: pod {i}'s worker sees restart count {rc} "
                                 f"and WORLD_SIZE {ws}, want {want_rc} and {want_ws}")
                    break
        twice = sorted(r for r, n in held.items() if n > 1)
        if twice:
            self.violate(f"generation {gen}: RANKs {twice} held twice")
        if self.elastic and sorted(self.rank_of.values()) != list(range(len(self.rank_of))):
            self.violate(f"generation {gen}: node ranks {self.rank_of} not dense")

    def poll_exits(self):
        """Records pods that exited since the last call; returns [(index, incarnation, code)]."""
        new = []
        for i, pod in self.c.pods.items():
            key = (i, self.inc[i])
            if key not in self.exits and not pod.running():
                code = pod.wait(5)
                self.exits[key] = (code, time.time())
                new.append((i, self.inc[i], code))
                self.c.event(f"soak: pod {i}.{self.inc[i]} exited {code}")
        return new

    def check_leftovers(self, i):
        deadline = time.monotonic() + LEFTOVER_WAIT
        left = self.c.processes_in_pod(i)
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = self.c.processes_in_pod(i)
        if left:
            self.leftovers += len(left)
            self.violate(f"pod {i}: {len(left)} processes left after its exit: "
                         + "; ".join(p.cmdline or p.comm for p in left))

    def violate(self, msg):
        self.violations.append(msg)
        self.log(f"  VIOLATION seed {self.seed}: {msg}")

    def wait_until(self, predicate, timeout, what, on_tick=None):
        deadline = time.monotonic() + timeout
        while True:
            if on_tick:
                on_tick()
            if predicate():
                return
            if time.monotonic() > deadline:
                raise Violation(f"{what}: not within {timeout} s")
            time.sleep(0.05)

    # -- one run ---------------------------------------------------------------------------
    def execute(self):
        workdir = tempfile.mkdtemp(prefix=f"soak-{self.seed}-", dir=self.args.workdir)
        self.c = podsim.Cluster(pods=self.npods, workdir=workdir, keep=True)
        kinds = []
        try:
            self.c.start()
            self.c.publish_all()
            for i in range(self.npods):
                if i not in self.pending:
                    self.start_pod(i)
            self.wait_until(self.formed, FORM_TIMEOUT, "gang formation", self.fail_on_exit)
            self.check_ranks(self.gen)
            ended = False
            for n in range(self.nfaults):
                fault = BY_NAME[self.first] if self.first and n == 0 else self.draw()
                kinds.append(fault.name)
                ended = self.fault(fault)
                if ended or self.violations:
                    break
            if not ended and not self.violations:
                self.finish()
            if not self.violations:
                self.check_workers_stopped()
        except Violation as v:
            self.violate(str(v))
        finally:
            self.check_trace(kinds)
            for link in range(self.npods):
                podsim._run("ip", "-n", self.c.net_ns, "link", "set", f"vp{link}", "up",
                            check=False)
            self.c.teardown()
        if self.violations:
            self.log(f"  run seed {self.seed} ({self.describe()}) kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        return kinds

    # Counting faults of the contract checker's trace (tests/invariants/invariants.h, I9/I10):
    # a failure, a kill, a freeze, a cut link; SIGTERMs, leaves and joins are none.
    TRACE_FAULTS = {"link_cut": "cut", "agent_sigkill": "kill", "spare_swap_kill": "kill",
                    "elastic_loss_kill": "kill", "spare_lost": "kill", "agent_freeze": "freeze",
                    "spare_swap_freeze": "freeze", "elastic_loss_freeze": "freeze"}
    NO_TRACE_FAULT = {"agent_sigterm", "preempt_save", "elastic_join", "elastic_join_at_max",
                      "elastic_leave"}

    def trace(self, kinds):
        """This run as the contract checker's JSON lines (tests/invariants/check_trace.cc): the
        contract, each pod incarnation's start, the generations its workers ran (local rank
        0's marks: node rank, WORLD_SIZE and restart count per pod), the faults, the SIGTERMs,
        the exits. Times in ms from the first mark; the soak checks its own deadlines."""
        lo, hi = self.elastic or (self.nnodes, self.nnodes)
        lines = [{"contract": {"min_nodes": lo, "max_nodes": hi, "spares": self.spares,
                               "max_restarts": self.max_restarts,
                               "rdzv_timeout_ms": 10**9, "grace_ms": 10**9}}]
        marks = {i: self.marks(i) for i in range(self.npods)}
        t0 = min([t for ms in marks.values() for _, t, _, _, _ in ms] +
                 [t for _, t in self.exits.values()] or [0.0])
        ms = lambda t: int((t - t0) * 1000)  # noqa: E731
        inst = lambda i, n: i * 1000 + n  # noqa: E731
        lines += [{"t": 0, "ev": "start", "pod": i, "inst": inst(i, n)}
                  for i in range(self.npods) for n in range(1, self.inc[i] + 1)]
        lines += [{"t": 0, "ev": "fault", "pod": 0, "what": self.TRACE_FAULTS.get(k, "fail")}
                  for k in kinds if k not in self.NO_TRACE_FAULT]
        for i in range(self.npods):
            try:
                with open(self.marks_path(i)) as f:
                    rows = [line.split() for line in f]
            except FileNotFoundError:
                rows = []
            for p in rows:
                if len(p) == 8 and p[0] == "ready" and p[3] == "0":
                    lines.append({"t": ms(float(p[1])), "ev": "gen", "pod": i,
                                  "inst": inst(i, int(p[4])), "generation": int(p[2]),
                                  "rank": int(p[5]) // self.nproc,
                                  "world": int(p[7]) // self.nproc, "restarts": int(p[6])})
        for (i, n), (code, t) in self.exits.items():
            if (i, n) in self.sigtermed:
                lines.append({"t": ms(t) - 1, "ev": "signal", "pod": i, "inst": inst(i, n),
                              "what": "term"})
            lines.append({"t": ms(t), "ev": "exit", "pod": i, "inst": inst(i, n), "code": code})
        head, rest = lines[:1], sorted(lines[1:], key=lambda r: r["t"])
        return head + rest

    def check_trace(self, kinds):
        """--check-trace: the run's trace through the contract checker; its violations are the
        run's. --trace-dir: the trace is kept there (run<seed>.jsonl)."""
        if not self.args.check_trace and not self.args.trace_dir:
            return
        text = "".join(json.dumps(r) + "\n" for r in self.trace(kinds))
        if self.args.trace_dir:
            os.makedirs(self.args.trace_dir, exist_ok=True)
            with open(os.path.join(self.args.trace_dir, f"run{self.seed}.jsonl"), "w") as f:
                f.write(text)
        if self.args.check_trace:
            out = subprocess.run([self.args.check_trace], input=text, capture_output=True,
                                 text=True)
            if out.returncode not in (0, 1):
                self.violate(f"trainlet-check-trace: {out.stderr.strip()}")
            for line in out.stdout.splitlines():
                self.violate(f"contract checker: {line}")

    def formed(self):
        """Every active pod runs generation 0. Elastic: the latest generation any worker
        started in (a pod that came in after the last call made a join's generation)."""
        if self.elastic:
            gens = [int(g) for i in self.rank_of for ev, _, g, _, _ in self.marks(i)
                    if ev == "ready" and g.isdigit()]
            self.gen = max(gens, default=0)
        return self.all_ready(self.gen)

    def check_workers_stopped(self):
        """Once every pod has exited: each worker that started ended on its own (fail,
        done) or by trainlet's SIGTERM (its trap marked TERM), not by a SIGKILL at the end
        of the grace period or by the kernel when its PID 1 went away."""
        for i in range(self.npods):
            ended = set()
            started = []
            for ev, _, g, lr, n in self.marks(i):
                if ev == "ready":
                    started.append((g, lr, n))
                else:
                    ended.add((g, lr, n))
            for g, lr, n in started:
                if (g, lr, n) in ended or (i, g, lr, n) in self.exempt or (i, g, None, n) in self.exempt:
                    continue
                self.unstopped += 1
                self.violate(f"pod {i}.{n}: the worker of local rank {lr} in generation {g} "
                             "never got SIGTERM (nor ended on its own)")

    def check_saved(self, i, inc):
        """preempt_save: every worker of pod i that got SIGTERM had its writer save before
        the pod exited; a writer SIGTERMed with its worker (a group-wide stop) never does."""
        gen = str(self.gen)
        marks = [(ev, lr) for ev, _, g, lr, n in self.marks(i) if g == gen and n == inc]
        for lr in sorted({lr for ev, lr in marks if ev == "TERM"}):
            if ("saved", lr) not in marks:
                self.violate(f"preempt_save: pod {i}'s local rank {lr} got SIGTERM but its "
                             "writer never saved (killed before the grace period allowed)")

    def describe(self):
        return (f"{self.npods} pods x {self.nproc}, --nnodes {self.nnodes}, "
                f"--spares {self.spares}, --max-restarts {self.max_restarts}, "
                f"generation {self.gen}, restarts {self.restarts}")

    def fail_on_exit(self):
        for i, n, code in self.poll_exits():
            raise Violation(f"pod {i}.{n} exited {code} while the gang should run")

    def draw(self):
        restarts_left = self.max_restarts - self.restarts
        table = [f for f in FAULTS if f.name != "sigterm_mid_restart" or restarts_left >= 1]
        if not self.spares:
            table = [f for f in table if f.name not in SPARE_KINDS]
        else:
            table = [f for f in table if f.name not in NOT_WITH_SPARES and
                     (f.name not in SPARE_KINDS or self.waiting)]
        if not self.elastic:
            table = [f for f in table if f.name not in ELASTIC_KINDS or
                     (f.name == "join_mid_restart" and self.gone and restarts_left >= 1)]
        else:
            table = [f for f in table if self.elastic_ok(f, restarts_left)]
        return self.rng.choices(table, weights=[f.weight for f in table])[0]

    def elastic_ok(self, fault, restarts_left):
        """Whether an elastic run can have `fault` now: a join needs a pod not yet in the
        gang (below MAX: it grows; at MAX: a spare), during a restart a restart left too;
        elastic_loss_* more than MIN active pods and no waiting spare (with one, that is a
        swap); the other losses no waiting spare; sigterm_mid_restart never."""
        active, (lo, hi) = len(self.rank_of), self.elastic
        if fault.name == "elastic_join":
            return bool(self.pending) and active < hi
        if fault.name == "join_mid_restart":
            return bool(self.pending) and active < hi and restarts_left >= 1
        if fault.name in ELASTIC_LOSSES:
            return not self.waiting
        if fault.name in NOT_WITH_SPARES:
            return False
        if fault.name == "elastic_join_at_max":
            return bool(self.pending) and active == hi and self.spares > len(self.waiting)
        if fault.name in ("elastic_loss_kill", "elastic_loss_freeze", "elastic_leave"):
            return active > lo and not self.waiting
        if fault.name == "leave_mid_restart":
            return active > lo and not self.waiting and restarts_left >= 1 and active > 2
        return True

    def pick_victim(self, fault):
        """The fault's pod: any pod without spares (as before); with spares, the waiting
        spare for spare_lost, an active member (not the leader) for a swap, else an active pod.
        Elastic: a join's pod is one not yet in the gang; a loss's an active member."""
        if fault.name in ("elastic_join", "elastic_join_at_max"):
            return self.rng.choice(self.pending)
        if fault.name == "join_mid_restart":
            return self.rng.choice(self.pending if self.elastic else sorted(self.gone))
        if not self.spares and not self.elastic:
            return self.rng.randrange(self.npods)
        if fault.name == "spare_lost":
            return self.rng.choice(self.waiting)
        if fault.name in SPARE_KINDS | ELASTIC_KINDS:
            return self.rng.choice(sorted(i for i in self.rank_of if i != 0))
        return self.rng.choice(sorted(self.rank_of))

    def worker(self, i, local_rank):
        """The ProcInfo of pod i's worker `local_rank` in the current generation."""
        pod = self.c.pods[i]
        for p in pod.processes_with_env(LOCAL_RANK=str(local_rank),
                                        TORCHELASTIC_RESTART_COUNT=str(self.restarts)):
            # trainlet's child, not its writer (a subshell: the same command line)
            if p.comm == "sh" and p.state != "Z" and p.ppid == pod.pid1:
                return p
        return None

    def control(self, i, gen, local_rank, what):
        path = os.path.join(self.ctl(i), f"g{gen}.l{local_rank}")
        with open(path + ".tmp", "w") as f:
            f.write(what + "\n")
        os.rename(path + ".tmp", path)

    def fault(self, fault):
        """Applies `fault` to a random pod of the running gang and checks the outcome.
        Returns True when the gang has stopped for good."""
        rng = self.rng
        victim = self.pick_victim(fault)
        local_rank = rng.randrange(self.nproc)
        time.sleep(rng.uniform(*SETTLE))
        self.fail_on_exit()
        if fault.name in ("elastic_join", "elastic_join_at_max"):
            return self.join(fault, victim)
        if fault.name == "join_mid_restart":
            return self.join_mid_restart(fault, victim, local_rank)
        if fault.name in ("elastic_leave", "leave_mid_restart"):
            return self.leave(fault, victim, local_rank)
        restart = fault.retriable and self.restarts < self.max_restarts
        pod = self.c.pods[victim]
        key = (victim, self.inc[victim])
        freeze = rng.uniform(*FREEZE)
        other = (victim + rng.randrange(1, self.npods)) % self.npods  # sigterm_mid_restart
        self.c.event(f"soak: fault {fault.name} on pod {victim} (local rank {local_rank}), "
                     f"generation {self.gen}, {'restart' if restart else 'final'} expected")
        t0 = time.time()
        timers = []  # (wall time, action)
        if fault.name == "worker_sigkill":
            worker = self.worker(victim, local_rank)
            if worker is None:
                raise Violation(f"pod {victim}: no worker of local rank {local_rank} found")
            self.exempt.add((victim, str(self.gen), str(local_rank), key[1]))
            pod.signal_process(worker, signal.SIGKILL)
        elif fault.name.startswith("worker_exit_"):
            self.control(victim, self.gen, local_rank, "exit" + fault.name.rsplit("_", 1)[1])
        elif fault.name in ("agent_sigkill", "spare_swap_kill", "spare_lost",
                            "elastic_loss_kill"):
            self.exempt.add((victim, str(self.gen), None, key[1]))
            pod.signal(signal.SIGKILL)
        elif fault.name in ("agent_sigterm", "preempt_save"):
            if fault.name == "preempt_save":
                # Each worker's TERM trap has its writer save (SAVE s) and waits for it.
                with open(os.path.join(self.ctl(victim), f"g{self.gen}.save"), "w"):
                    pass
            self.sigtermed.add(key)
            pod.signal(signal.SIGTERM)
        elif fault.name in ("agent_freeze", "spare_swap_freeze", "elastic_loss_freeze"):
            pod.signal(signal.SIGSTOP)
            timers.append((t0 + freeze, lambda: pod.signal(signal.SIGCONT)))
        elif fault.name == "spare_swap_hardware":
            self.control(victim, self.gen, local_rank, "hw")
        elif fault.name == "link_cut":
            self.c.cut_link(victim)
            timers.append((t0 + LINK_CUT, lambda: self.c.restore_link(victim)))
        elif fault.name == "sigterm_mid_restart":
            # Pod `other`'s worker fails (exit 1): a restart. The victim's workers take
            # SLOW_STOP s to stop; it gets SIGTERM while they do.
            with open(os.path.join(self.ctl(victim), f"g{self.gen}.slow"), "w"):
                pass
            self.control(other, self.gen, rng.randrange(self.nproc), "exit1")
            gen = str(self.gen)
            self.wait_until(lambda: any(ev == "TERM" and g == gen and n == self.inc[victim]
                                        for ev, _, g, _, n in self.marks(victim)),
                            PHASE_TIMEOUT, f"the restart's stop reaching pod {victim}")
            t0 = time.time()
            self.sigtermed.add(key)
            pod.signal(signal.SIGTERM)
        return self.outcome(fault, victim, key, restart, t0, timers)

    def outcome(self, fault, victim, key, restart, t0, timers):
        pending = list(timers)

        def tick():
            now = time.time()
            for t, action in list(pending):
                if now >= t:
                    pending.remove((t, action))
                    try:
                        action()
                    except (podsim.PodsimError, OSError) as e:
                        self.log(f"  (timer action failed: {e})")

        def flush_timers():
            for t, action in list(pending):
                pending.remove((t, action))
                try:
                    action()
                except (podsim.PodsimError, OSError):
                    pass

        if fault.name == "spare_lost":
            return self.expect_nothing(fault, victim, key, t0, tick)
        if restart and fault.name in SPARE_KINDS:
            return self.expect_swap(fault, victim, key, t0, tick, flush_timers)
        if restart and (fault.name in ELASTIC_KINDS or self.shrinks(fault, victim)):
            return self.expect_shrink(fault, victim, key, t0, tick, flush_timers)
        if restart:
            return self.expect_restart(fault, victim, key, t0, tick, flush_timers)
        return self.expect_final(fault, victim, key, t0, tick, flush_timers)

    def shrinks(self, fault, victim):
        """Elastic: a member's loss (not the leader's) with more than MIN active pods leaves
        a smaller gang; the leader's, or one at MIN, waits for the index's replacement."""
        return (self.elastic is not None and fault.name in ELASTIC_LOSSES and victim != 0 and
                len(self.rank_of) > self.elastic[0])

    def expect_swap(self, fault, victim, key, t0, tick, flush_timers):
        """The lowest waiting spare takes the victim's node rank in the next generation; the
        other active pods restart in place; the victim exits with its kind's code (one
        counted culprit) and is not replaced (the Job controller is slower than the spare)."""
        nxt, spare = self.gen + 1, self.waiting[0]
        after = dict(self.rank_of)
        after[spare] = after.pop(victim)
        self.wait_culprit_and(fault, victim, key, after, tick, flush_timers,
                              f"spare pod {spare} and the others")
        if fault.cls and self.summary_of(victim, key[1]).get("class") != fault.cls:
            self.violate(f"{fault.name}: pod {victim}'s termination message has class "
                         f"{self.summary_of(victim, key[1]).get('class')!r}, want {fault.cls!r}")
        # A victim still alive (hardware) hears from the leader's Stop who takes its place;
        # a frozen one when it comes back and the leader refuses it.
        handover = {"spare": spare, "node_rank": self.rank_of[victim], "generation": nxt}
        got = self.summary_of(victim, key[1]).get("replaced_by")
        if fault.name in ("spare_swap_hardware", "spare_swap_freeze") and got != handover:
            self.violate(f"{fault.name}: pod {victim}'s termination message names "
                         f"replaced_by {got!r}, want {handover!r}")
        self.rank_of, self.gen = after, nxt
        self.restarts += 1
        self.waiting.pop(0)
        self.gone.add(victim)
        self.check_ranks(nxt)
        for i in self.rank_of:
            self.record_code(fault.name, "spare" if i == spare else "restarted", "in place")
        return self.restarted(fault, victim, t0)

    def wait_culprit_and(self, fault, victim, key, after, tick, flush_timers, who):
        """Waits for the victim's exit with one of its kind's codes (no other pod exits) and
        every pod of `after` running the next generation's workers. No pod starts the
        generation after that meanwhile (a lost pod joining again instead of exiting)."""
        nxt = self.gen + 1

        def step():
            tick()
            for i, n, code in self.poll_exits():
                self.check_leftovers(i)
                if (i, n) != key:
                    raise Violation(f"{fault.name} on pod {victim}: pod {i} exited {code} "
                                    f"instead of restarting (generation {self.gen} -> {nxt})")
                if code not in fault.restart_exits:
                    raise Violation(f"{fault.name}: pod {i} exited {code}, want one of "
                                    f"{fault.restart_exits}")
                self.record_code(fault.name, "culprit", code)
            for i in self.c.pods:
                if self.ready(i, nxt + 1, self.inc[i]):
                    raise Violation(f"{fault.name} on pod {victim}: pod {i} started generation "
                                    f"{nxt + 1} before pod {victim} exited")

        def done():
            return key in self.exits and all(
                len(self.ready(i, nxt, self.inc[i])) == self.nproc for i in after)

        try:
            self.wait_until(done, PHASE_TIMEOUT,
                            f"{fault.name} on pod {victim}: {who} running generation {nxt}",
                            step)
        finally:
            flush_timers()

    def expect_shrink(self, fault, victim, key, t0, tick, flush_timers):
        """Elastic: an active member lost with more than MIN active: it exits with its
        kind's code (the one counted culprit; a frozen one once it resumes: it must not join
        again by itself); the rest run the next generation with WORLD_SIZE shrunk, ranks
        dense in index order, the restart counted. The Job may recreate its index later (an
        elastic_join)."""
        nxt = self.gen + 1
        after = {i: r for r, i in enumerate(sorted(i for i in self.rank_of if i != victim))}
        self.wait_culprit_and(fault, victim, key, after, tick, flush_timers, "the others")
        got = self.summary_of(victim, key[1]).get("class")
        if fault.cls and got != fault.cls:
            self.violate(f"{fault.name}: pod {victim}'s termination message has class "
                         f"{got!r}, want {fault.cls!r}")
        self.rank_of, self.gen = after, nxt
        self.restarts += 1
        self.gone.add(victim)
        self.pending = sorted([*self.pending, victim])
        self.check_ranks(nxt)
        for _ in self.rank_of:
            self.record_code(fault.name, "restarted", "in place")
        return self.restarted(fault, victim, t0)

    def leave(self, fault, victim, local_rank):
        """Elastic: active member `victim` gets SIGTERM (elastic_leave), or gets it while its
        workers stop for a restart another pod's worker caused (leave_mid_restart). It exits
        143, no other pod exits, and the rest run the next generation without it, ranks dense;
        the restart count rises only for the restart."""
        key = (victim, self.inc[victim])
        pod = self.c.pods[victim]
        mid = fault.name == "leave_mid_restart"
        gen = str(self.gen)
        self.c.event(f"soak: fault {fault.name} on pod {victim}, generation {self.gen}")
        t0 = time.time()
        if mid:
            failing = self.rng.choice(sorted(i for i in self.rank_of if i != victim))
            for i in self.rank_of:
                with open(os.path.join(self.ctl(i), f"g{self.gen}.slow"), "w"):
                    pass
            self.control(failing, self.gen, local_rank, "exit1")
            self.wait_until(lambda: any(ev == "TERM" and g == gen and n == key[1]
                                        for ev, _, g, _, n in self.marks(victim)),
                            PHASE_TIMEOUT, f"the restart's stop reaching pod {victim}",
                            lambda: self.no_exit(fault, victim, self.gen + 1))
            t0 = time.time()
        self.sigtermed.add(key)
        pod.signal(signal.SIGTERM)
        nxt = self.gen + 1
        after = {i: r for r, i in enumerate(sorted(i for i in self.rank_of if i != victim))}
        self.wait_culprit_and(fault, victim, key, after, lambda: None, lambda: None,
                              "the others")
        got = self.summary_of(victim, key[1]).get("class")
        if got != "terminated":
            self.violate(f"{fault.name}: pod {victim}'s termination message has class {got!r}, "
                         "want 'terminated'")
        self.rank_of, self.gen = after, nxt
        if mid:
            self.restarts += 1
        self.gone.add(victim)
        self.pending = sorted([*self.pending, victim])
        self.check_ranks(nxt)  # the restart count: unchanged by the leave
        for _ in self.rank_of:
            self.record_code(fault.name, "restarted", "in place")
        return self.restarted(fault, victim, t0)

    def join(self, fault, joiner):
        """Elastic: pod `joiner` (never started, or lost and now recreated by the Job)
        starts while a generation runs."""
        self.pending.remove(joiner)
        self.c.event(f"soak: fault {fault.name}: pod {joiner} starts, generation {self.gen}")
        t0 = time.time()
        self.start_pod(joiner)
        if fault.name == "elastic_join_at_max":
            return self.expect_spare_join(fault, joiner, t0)
        nxt = self.gen + 1
        after = {i: r for r, i in enumerate(sorted([*self.rank_of, joiner]))}
        self.wait_until(lambda: all(len(self.ready(i, nxt, self.inc[i])) == self.nproc
                                    for i in after), PHASE_TIMEOUT,
                        f"{fault.name}: pod {joiner} and the others running generation {nxt}",
                        lambda: self.no_exit(fault, joiner, nxt))
        self.rank_of, self.gen = after, nxt
        self.check_ranks(nxt)  # the restart count unchanged: a join is no restart
        for i in after:
            self.record_code(fault.name, "joined" if i == joiner else "restarted", "in place")
        return self.restarted(fault, joiner, t0)

    def join_mid_restart(self, fault, joiner, local_rank):
        """Pod `joiner` starts while the gang restarts (see the fault table): the restart's
        generation takes it in (elastic below MAX) or it waits as a spare (a swapped-out pod
        recreated); either way no pod exits and one restart is counted. Elastic, when the
        joiner's hello is read only after the restart's round formed, a join's generation
        (no restart) follows at once and takes it in; no other generation follows."""
        failing = self.rng.choice(sorted(self.rank_of))
        gen, nxt = str(self.gen), self.gen + 1
        for i in self.rank_of:
            with open(os.path.join(self.ctl(i), f"g{self.gen}.slow"), "w"):
                pass
        self.c.event(f"soak: fault {fault.name}: pod {failing}'s worker exits 1, pod {joiner} "
                     f"starts during the stop, generation {self.gen}")
        t0 = time.time()
        self.control(failing, self.gen, local_rank, "exit1")
        self.wait_until(lambda: any(ev == "TERM" and g == gen and n == self.inc[i]
                                    for i in self.rank_of
                                    for ev, _, g, _, n in self.marks(i)),
                        PHASE_TIMEOUT, "the restart's stop reaching a worker",
                        lambda: self.no_exit(fault, joiner, nxt))
        if joiner in self.pending:
            self.pending.remove(joiner)
        self.start_pod(joiner)
        after = dict(self.rank_of)
        if self.elastic:
            after = {i: r for r, i in enumerate(sorted([*self.rank_of, joiner]))}

        def placed(g):
            return all(len(self.ready(i, g, self.inc[i])) == self.nproc for i in after)

        # A joiner whose hello the leader reads only after the restart's round formed
        # (it waited in the listen backlog) comes in with a join's generation right after.
        self.wait_until(lambda: placed(nxt) or placed(nxt + 1), PHASE_TIMEOUT,
                        f"{fault.name}: pod {joiner} and the others running generation {nxt}",
                        lambda: self.no_exit(fault, joiner, nxt + 1))
        if not self.elastic:
            self.wait_until(lambda: "a hot spare, waiting without workers" in
                            self.c.pods[joiner].stderr(), PHASE_TIMEOUT,
                            f"{fault.name}: pod {joiner} waiting as a spare",
                            lambda: self.no_exit(fault, joiner, nxt))
            self.waiting = sorted([*self.waiting, joiner])
        self.restarts += 1
        if not placed(nxt):  # the restart without the joiner, then the join: no restart
            self.gen = nxt
            self.check_ranks(nxt)
            nxt += 1
            self.record_code(fault.name, "joined", "next generation")
        self.rank_of, self.gen = after, nxt
        self.check_ranks(nxt)
        for i in after:
            self.record_code(fault.name, "joined" if i == joiner else "restarted", "in place")
        return self.restarted(fault, joiner, t0)

    def no_exit(self, fault, joiner, nxt):
        for i, n, code in self.poll_exits():
            raise Violation(f"{fault.name} (pod {joiner}): pod {i} exited {code}")
        for i in self.c.pods:
            if self.ready(i, nxt + 1, self.inc[i]):
                raise Violation(f"{fault.name} (pod {joiner}): pod {i} started generation "
                                f"{nxt + 1}")

    def expect_spare_join(self, fault, joiner, t0):
        """Elastic at MAX: the joiner waits as a spare; no generation, no exit."""
        nxt = self.gen + 1
        self.wait_until(lambda: "a hot spare, waiting without workers" in
                        self.c.pods[joiner].stderr(), PHASE_TIMEOUT,
                        f"{fault.name}: pod {joiner} waiting as a spare",
                        lambda: self.no_exit(fault, joiner, self.gen))
        quiet = time.monotonic() + 1.0
        self.wait_until(lambda: time.monotonic() > quiet, 5, "a quiet second",
                        lambda: self.no_exit(fault, joiner, self.gen))
        for i in self.c.pods:
            if self.ready(i, nxt):
                self.violate(f"{fault.name}: pod {i} started generation {nxt}")
        self.waiting = sorted([*self.waiting, joiner])
        self.record_code(fault.name, "joined", "spare")
        self.stats.times[(fault.name, "final")].append(time.time() - t0)
        self.stats.faults[fault.name] += 1
        return False

    def expect_nothing(self, fault, victim, key, t0, tick):
        """A waiting spare lost: it exits (SIGKILLed), the gang runs on untouched."""
        def step():
            tick()
            for i, n, code in self.poll_exits():
                if (i, n) != key:
                    raise Violation(f"{fault.name} on pod {victim}: pod {i} exited {code}")
                self.record_code(fault.name, "culprit", code)

        self.wait_until(lambda: key in self.exits, PHASE_TIMEOUT, f"spare pod {victim}'s exit",
                        step)
        quiet = time.monotonic() + 1.0
        self.wait_until(lambda: time.monotonic() > quiet, 5, "a quiet second", step)
        for i in range(self.npods):
            if self.ready(i, self.gen + 1):
                self.violate(f"{fault.name}: pod {i} started generation {self.gen + 1}")
        self.waiting.remove(victim)
        self.gone.add(victim)
        self.stats.times[(fault.name, "final")].append(time.time() - t0)
        self.stats.faults[fault.name] += 1
        return False

    def expect_restart(self, fault, victim, key, t0, tick, flush_timers):
        nxt = self.gen + 1
        replaced = {}

        def step():
            tick()
            for i, n, code in self.poll_exits():
                self.check_leftovers(i)
                if i == victim and n == key[1] and not fault.in_place:
                    if code not in fault.restart_exits:
                        raise Violation(f"{fault.name}: pod {i} exited {code} before the "
                                        f"restart, want one of {fault.restart_exits}")
                    self.record_code(fault.name, "culprit", code)
                    replaced[i] = time.time() + REPLACE_DELAY
                else:
                    raise Violation(f"{fault.name} on pod {victim}: pod {i} exited {code} "
                                    f"instead of restarting (generation {self.gen} -> {nxt})")
            for i, t in list(replaced.items()):
                if time.time() >= t:
                    del replaced[i]
                    self.c.event(f"soak: replacing pod {i} (the Job controller)")
                    self.start_pod(i)

        try:
            self.wait_until(lambda: self.all_ready(nxt) and not replaced, PHASE_TIMEOUT,
                            f"{fault.name} on pod {victim}: generation {nxt} on every pod",
                            step)
        finally:
            flush_timers()
        if fault.name == "sigterm_mid_restart" and self.ready(victim, nxt, key[1]):
            self.violate(f"{fault.name}: pod {victim} got SIGTERM while stopping for the "
                         f"restart and started workers in generation {nxt}")
        if key[0] == victim and fault.in_place and key[1] != self.inc[victim]:
            self.violate(f"{fault.name}: pod {victim} was replaced")
        if fault.name == "sigterm_mid_restart" and key not in self.exits:
            self.violate(f"{fault.name}: pod {victim} did not exit after its SIGTERM")
        self.gen = nxt
        self.restarts += 1
        self.check_ranks(nxt)
        for i in sorted(self.c.pods):
            if i != victim or key not in self.exits:
                self.record_code(fault.name, "restarted", "in place")
        return self.restarted(fault, victim, t0)

    def restarted(self, fault, victim, t0):
        """A fault's restart is complete: its times, and no generation beyond --max-restarts."""
        self.stats.times[(fault.name, "restart")].append(time.time() - t0)
        self.record_term_times(fault.name, "restart", victim, t0, self.gen - 1)
        # Generations beyond --max-restarts never start.
        if self.restarts > self.max_restarts:
            self.violate(f"generation {self.gen} (restart {self.restarts}) started with "
                         f"--max-restarts {self.max_restarts}")
        self.stats.faults[fault.name] += 1
        return False

    def expect_final(self, fault, victim, key, t0, tick, flush_timers):
        def step():
            tick()
            for i, _, _ in self.poll_exits():
                self.check_leftovers(i)
            for i in range(self.npods):
                if self.ready(i, self.gen + 1, self.inc[i]):
                    raise Violation(f"{fault.name} on pod {victim}: pod {i} started generation "
                                    f"{self.gen + 1} (--max-restarts {self.max_restarts})")

        try:
            self.wait_until(lambda: all(not p.running() for p in self.c.pods.values()),
                            PHASE_TIMEOUT, f"{fault.name} on pod {victim}: every pod's exit", step)
        finally:
            flush_timers()
        step()
        pods = self.in_gang()
        codes = {i: self.exits[(i, self.inc[i])][0] for i in pods}
        last = max(self.exits[(i, self.inc[i])][1] for i in pods)
        self.stats.times[(fault.name, "final")].append(last - t0)
        self.stats.faults[fault.name] += 1
        want = {i: PEER_FAILED for i in pods}
        if fault.code is not None:
            want[victim] = fault.code
        for i in pods:
            self.record_code(fault.name, "culprit" if i == victim else "others", codes[i])
        if codes != want:
            self.violate(f"{fault.name} on pod {victim} ({self.describe()}): exit codes {codes}, "
                         f"want {want}")
        # Every other pod's termination message names the culprit (members name the
        # leader as "the leader" when they lost it).
        names = re.compile(rf"\bpod {victim}\b" + (r"|(?i:leader)" if victim == 0 else ""))
        for i in pods:
            cls = fault.cls if i == victim else "peer_failed"
            if codes[i] != want[i] or cls is None:
                continue
            summary = self.summary(i)
            if summary.get("class") != cls:
                self.violate(f"{fault.name}: pod {i} exited {codes[i]} with class "
                             f"{summary.get('class')!r} in its termination message, want {cls!r}")
            if i != victim and not names.search(summary.get("reason", "")):
                self.violate(f"{fault.name}: pod {i}'s reason does not name pod {victim}: "
                             f"{summary.get('reason')!r}")
        self.record_term_times(fault.name, "final", victim, t0)
        if fault.name == "preempt_save":
            self.check_saved(victim, key[1])
        counted = [i for i, code in codes.items() if code not in (0, PEER_FAILED)]
        if fault.code is not None and len(counted) != 1:
            self.violate(f"{fault.name}: {len(counted)} pods with a counted exit: {counted}")
        for (i, n) in self.sigtermed:
            if n == self.inc[i] and self.ready(i, self.gen + 1, n):
                self.violate(f"pod {i} started a generation after its SIGTERM")
        return True

    def in_gang(self):
        """Pods still in the gang (not gone for good: a swapped-out or lost spare pod)."""
        return [i for i in sorted(self.c.pods) if i not in self.gone]

    def finish(self):
        """Every worker of the current generation exits 0: every pod must exit 0 (the spares
        still waiting too)."""
        for i in self.rank_of:
            for lr in range(self.nproc):
                self.control(i, self.gen, lr, "exit0")
        t0 = time.time()

        def step():
            for i, _, _ in self.poll_exits():
                self.check_leftovers(i)

        self.wait_until(lambda: all(not p.running() for p in self.c.pods.values()),
                        PHASE_TIMEOUT, "every pod's exit after the workers succeeded", step)
        step()
        codes = {i: self.exits[(i, self.inc[i])][0] for i in self.in_gang()}
        self.stats.times[("success", "final")].append(
            max(self.exits[(i, self.inc[i])][1] for i in self.in_gang()) - t0)
        for code in codes.values():
            self.record_code("success", "all", code)
        if any(codes.values()):
            self.violate(f"after {self.gen} restarts every worker exited 0: exit codes {codes}")

    def summary(self, i):
        """Pod i's termination message (its current incarnation) as a dict, {} if none."""
        return self.summary_of(i, self.inc[i])

    def summary_of(self, i, inc):
        try:
            with open(os.path.join(self.c.workdir, f"tlog{i}.{inc}")) as f:
                return json.loads(f.read())
        except (OSError, ValueError):
            return {}

    def record_term_times(self, kind, outcome, victim, t0, gen=None):
        """Seconds from the fault to the last SIGTERM that reached a worker of another pod."""
        gen = str(self.gen if gen is None else gen)
        last = [t for i in range(self.npods) if i != victim
                for ev, t, g, _, _ in self.marks(i) if ev == "TERM" and g == gen]
        if last and kind != "sigterm_mid_restart":  # there the SIGTERM comes after the stop
            self.stats.times[(kind, outcome + "-term")].append(max(last) - t0)

    def record_code(self, kind, who, code):
        self.stats.codes[kind][f"{who}:{code}"] += 1


class Stats:
    def __init__(self):
        self.faults = collections.Counter()
        self.codes = collections.defaultdict(collections.Counter)
        self.times = collections.defaultdict(list)
        self.violations = collections.Counter()
        self.leftovers = collections.Counter()
        self.unstopped = collections.Counter()
        self.failed_runs = []

    def table(self):
        kinds = [f.name for f in FAULTS] + ["success"]
        rows = ["| fault kind | faults | exit codes (pods) | other pods' workers SIGTERMed: "
                "median / max s | to the last exit: median / max s | to the next generation "
                "running: median / max s | leftover processes / unstopped workers | "
                "violations |", "|---|---|---|---|---|---|---|---|"]

        def fmt(ts):
            return f"{statistics.median(ts):.2f} / {max(ts):.2f}" if ts else "-"

        for k in kinds:
            codes = ", ".join(f"{key} x{n}" for key, n in sorted(self.codes[k].items()))
            n = self.faults[k] if k != "success" else len(self.times[("success", "final")])
            term = self.times[(k, "final-term")] + self.times[(k, "restart-term")]
            rows.append(f"| {k} | {n} | {codes or '-'} | {fmt(term)} | "
                        f"{fmt(self.times[(k, 'final')])} | "
                        f"{fmt(self.times[(k, 'restart')])} | {self.leftovers[k]} / "
                        f"{self.unstopped[k]} | {self.violations[k]} |")
        return "\n".join(rows)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trainlet", required=True)
    p.add_argument("--seed", type=int, default=1, help="the soak's seed (run r uses seed*100003+r)")
    p.add_argument("--faults", type=int, default=500, help="stop once this many faults ran")
    p.add_argument("--run", type=int, help="replay only this run seed")
    p.add_argument("--first", choices=sorted(BY_NAME), help="with --run: its first fault's kind")
    p.add_argument("--workdir", default=None, help="where kept runs go (default /tmp)")
    p.add_argument("--cover", action="store_true",
                   help="run r's first fault is kind r of the table (every kind in a short run)")
    p.add_argument("--ci", action="store_true", help="short: print only failing runs")
    p.add_argument("--elastic", action="store_true",
                   help="every run elastic, its first fault the elastic kinds in turn")
    p.add_argument("--check-trace", metavar="BIN",
                   help="check each run's trace with this trainlet-check-trace (the contract "
                        "checker the gang simulator uses: tests/invariants)")
    p.add_argument("--trace-dir", help="keep each run's trace (JSON lines) here")
    args = p.parse_args()
    args.trainlet = os.path.abspath(args.trainlet)
    if args.check_trace and not os.access(args.check_trace, os.X_OK):
        p.error(f"--check-trace {args.check_trace}: not executable")
    missing = podsim.requirements_missing()
    if missing:
        print(f"soak: skipped: {missing}")
        return SKIPPED
    if not os.access(args.trainlet, os.X_OK):
        p.error(f"--trainlet {args.trainlet}: not executable")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    podsim.cleanup_stale()
    stats = Stats()
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    print(f"soak: seed {args.seed}, {args.faults} faults, trainlet {args.trainlet}", flush=True)
    t_start = time.monotonic()
    total, r = 0, 0
    seeds = [args.run] if args.run is not None else None
    while (seeds and r < len(seeds)) or (not seeds and (total < args.faults or
                                                       (args.cover and r < len(FAULTS)))):
        run_seed = seeds[r] if seeds else args.seed * 100003 + r
        r += 1
        first = FAULTS[(r - 1) % len(FAULTS)].name if args.cover and not seeds else args.first
        if args.elastic and not seeds:
            first = ELASTIC_ORDER[(r - 1) % len(ELASTIC_ORDER)]
        run = Run(args, run_seed, stats, log, first)
        t = time.monotonic()
        try:
            kinds = run.execute()
        except KeyboardInterrupt:
            print("soak: interrupted", flush=True)
            break
        except Exception:
            traceback.print_exc()
            return 2
        total += len(kinds)
        for k in kinds:
            stats.violations[k] += 0
        if run.violations:
            stats.violations[kinds[-1] if kinds else "formation"] += len(run.violations)
            stats.failed_runs.append((run_seed, first, kinds, run.violations))
        last = kinds[-1] if kinds else "formation"
        stats.leftovers[last] += run.leftovers
        stats.unstopped[last] += run.unstopped
        if not args.ci or run.violations:
            log(f"run {r} seed {run_seed}: {run.describe()}: {' -> '.join(kinds) or '-'}: "
                f"{'ok' if not run.violations else f'{len(run.violations)} violations'} "
                f"({time.monotonic() - t:.1f} s; {total} faults so far)")
    took = time.monotonic() - t_start
    print(f"\nsoak: seed {args.seed}: {total} faults in {r} runs, {took / 60:.1f} min, "
          f"{sum(stats.violations.values())} contract violations")
    print(stats.table())
    for seed, first, kinds, vs in stats.failed_runs:
        print(f"\nrun seed {seed} ({' -> '.join(kinds)}):")
        for v in vs:
            print(f"  {v}")
        print(f"  replay: /usr/bin/python3 tests/soak/soak.py --trainlet {args.trainlet} "
              f"--run {seed}" + (f" --first {first}" if first else "") +
              (" --elastic" if args.elastic else ""))
    return 1 if stats.failed_runs else 0


if __name__ == "__main__":
    sys.exit(main())
