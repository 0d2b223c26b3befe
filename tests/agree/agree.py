#!/usr/bin/python3
"""Simulator and real pods, one scenario each: do they agree? See tests/agree/README.md.

    /usr/bin/python3 tests/agree/agree.py --trainlet build/agent/trainlet \
        --sim build/tests/sim/trainlet-sim tests/agree/scenarios/*.sched

Each scenario is one schedule file (tests/sim/README.md "Schedules": a `config` line, faults)
that both sides run: the deterministic simulator (`trainlet-sim --replay FILE --trace`) and the
real trainlet in simulated pods (tests/e2e/podsim.py: network, PID, UTS and mount namespaces,
dnsmasq; the chaos soak's worker, tests/soak/soak.py). Their outcomes are compared per pod
index and per incarnation of it (a pod recreated at its index is the next one): the
generations its workers ran (generation, node rank, world size in nodes, restart count) and its
exit code. A waiting spare runs no workers, so the simulator's spare records are left out.
Needs root. Exit 0: every scenario agrees; 1: a disagreement (both outcomes printed); 2: a
harness error; 77: skipped (no root or namespaces).
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "soak"))
import soak  # noqa: E402  (its worker, and podsim through it)

podsim = soak.podsim

KUBELET_EXTRA = 5.0  # the sim's kKubeletExtra: SIGKILL this long after a SIGTERM's grace period
END_DELAY = 5.0      # the sim: every pod still running is SIGTERMed this long after the gang ended
RECREATE = 5.0       # the sim: a pod's counted exit, recreated by the Job after 5-10 s
POLL = 0.05
SKIPPED = 77


def parse_schedule(path):
    """The schedule's config (dict of ints), faults [(t_ms, kind, pod, arg)] and the real
    side's options ("# agree: slow_stop" lines; the simulator reads them as comments)."""
    cfg, faults, opts = {}, [], set()
    with open(path) as f:
        for line in f:
            words = line.split()
            if words[:2] == ["#", "agree:"]:
                opts.update(words[2:])
            if not words or words[0].startswith("#"):
                continue
            if words[0] == "config":
                cfg.update((k, int(v)) for k, v in (w.split("=", 1) for w in words[1:]))
            elif words[0] == "fault":
                faults.append((int(words[1]), words[2], int(words[3]), int(words[4])))
    unknown = opts - {"slow_stop"}
    if unknown:
        raise ValueError(f"{path}: unknown agree option {sorted(unknown)[0]}")
    return cfg, sorted(faults), opts


# ---- the simulator's side ----------------------------------------------------------------
RECORD = re.compile(r"^\s+t=(-?\d+) (\w+) (.*)$")


def sim_outcome(sim, path):
    """{pod: [{"gens": [(generation, rank, world, restarts)], "exit": code}]} from the
    simulator's trace (invariants.h Describe lines), and its own verdict line."""
    out = subprocess.run([sim, "--replay", path, "--trace", "--no-shrink"], capture_output=True,
                         text=True, timeout=120)
    pods, inst_of = {}, {}
    for line in out.stdout.splitlines():
        m = RECORD.match(line)
        if not m:
            continue
        kind, kv = m.group(2), dict(w.split("=", 1) for w in m.group(3).split() if "=" in w)
        if kind == "start" and kv.get("stranger") != "1":
            pod = int(kv["pod"])
            pods.setdefault(pod, []).append({"gens": [], "exit": None})
            inst_of[kv["inst"]] = pods[pod][-1]
        elif kind == "gen" and kv["inst"] in inst_of and kv["rank"] != "spare":
            inst_of[kv["inst"]]["gens"].append((int(kv["generation"]), int(kv["rank"]),
                                                int(kv["world"]), int(kv["restarts"])))
        elif kind == "exit" and kv["inst"] in inst_of:
            inst_of[kv["inst"]]["exit"] = int(kv["code"])
    verdict = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr.strip()
    return pods, out.returncode, verdict


# ---- the real pods' side -----------------------------------------------------------------
class RealRun:
    """One scenario on real pods: the simulator's control plane mirrored (world.cc): pods
    0..pods-1 start at once; a worker generation succeeds 3/4 of `train` after it started
    (the simulator draws it in [train/2, train]); faults at their times; a pod with a counted
    exit (not 0, 76, 143; not the leader) recreated after RECREATE s while the leader runs;
    once the gang ended (a 76, or the leader's exit other than 0 or 137) every pod still
    running SIGTERMed END_DELAY s later; at `limit` every pod SIGTERMed (the Job's deadline)."""

    def __init__(self, args, cfg, faults, opts, workdir):
        self.args, self.cfg, self.faults = args, cfg, list(faults)
        self.slow_stop = args.slow_stop or "slow_stop" in opts
        self.npods = cfg["max"] + cfg.get("spares", 0)
        self.nproc = cfg.get("workers", 1)
        self.c = podsim.Cluster(pods=self.npods, workdir=workdir, keep=True)
        self.inc = {}          # pod -> incarnation
        self.insts = {}        # pod -> [{"gens", "exit"}]
        self.exited = set()    # (pod, inc)
        self.completed = set()
        self.timers = []       # (monotonic time, what, pod)
        self.succeed = {}      # (pod, inc, gen) -> monotonic time its workers exit 0
        self.ended = False
        self.formed = False
        self.recreations = 3
        self.records = []      # the checker's records (tests/invariants/check_trace.cc), wall time

    def argv(self, i):
        c, inc = self.cfg, self.inc[i]
        nnodes = str(c["min"]) if c["min"] == c["max"] else f"{c['min']}:{c['max']}"
        extra = []
        if c.get("spares", 0):
            extra += ["--spares", str(c["spares"])]
        if c["min"] != c["max"] or c.get("spares", 0):
            extra += ["--rdzv-conf", f"last_call_timeout={c.get('last_call', 30000) // 1000}"]
        return [self.args.trainlet, "--nnodes", nnodes, *extra,
                "--log-dir", os.path.join(self.c.workdir, f"logs{i}.{inc}"),
                "--nproc-per-node", str(self.nproc),
                "--grace-period", str(c.get("grace", 25000) // 1000),
                "--rdzv-timeout", str(c.get("rdzv_timeout", 600000) // 1000),
                "--max-restarts", str(c.get("max_restarts", 0)),
                "--", "sh", "-c", soak.WORKER, "trainer", self.ctl(i, inc), self.marks(i),
                str(inc)]

    def ctl(self, i, inc):
        return os.path.join(self.c.workdir, f"ctl{i}.{inc}")

    def marks(self, i):
        return os.path.join(self.c.workdir, f"pod{i}.marks")

    def start(self, i):
        self.inc[i] = self.inc.get(i, 0) + 1
        os.makedirs(self.ctl(i, self.inc[i]), exist_ok=True)
        if self.slow_stop:  # the worker's TERM trap takes soak.SLOW_STOP s (soak.WORKER)
            for gen in range(self.cfg.get("max_restarts", 0) + 8):
                open(os.path.join(self.ctl(i, self.inc[i]), f"g{gen}.slow"), "w").close()
        self.insts.setdefault(i, []).append({"gens": [], "exit": None})
        self.c.start_pod(i, self.argv(i))
        self.record("start", i)
        self.c.event(f"agree: pod {i}.{self.inc[i]} started")

    def record(self, ev, i, **kv):
        self.records.append({"t": time.time(), "ev": ev, "pod": i,
                             "inst": i * 1000 + self.inc[i], **kv})

    def trace(self):
        """This run as the contract checker's JSON lines: the contract, each incarnation's
        start, the generations its workers ran, the faults that can count, SIGTERMs, exits.
        A waiting spare runs no workers, so it has no record here and would look like a pod
        waiting in a round: as in the soak (soak.py Run.trace), the deadlines (I12) are left to
        the simulator's checker."""
        c = self.cfg
        lines = [{"contract": {"min_nodes": c["min"], "max_nodes": c["max"],
                               "spares": c.get("spares", 0),
                               "max_restarts": c.get("max_restarts", 0),
                               "rdzv_timeout_ms": 10**9, "grace_ms": 10**9}}]
        recs = list(self.records)
        for i, n, gen, rank, world, restarts, wall in self.ready():
            recs.append({"t": wall, "ev": "gen", "pod": i, "inst": i * 1000 + n,
                         "generation": gen, "rank": rank, "world": world, "restarts": restarts})
        t0 = min(r["t"] for r in recs)
        for r in sorted(recs, key=lambda r: r["t"]):
            lines.append({**r, "t": int((r["t"] - t0) * 1000)})
        return "".join(json.dumps(r) + "\n" for r in lines)

    def ready(self):
        """[(pod, inc, generation, node rank, world, restarts, wall time)]: local rank 0's
        ready marks."""
        out = []
        for i in self.inc:
            try:
                with open(self.marks(i)) as f:
                    rows = [line.split() for line in f]
            except FileNotFoundError:
                continue
            for p in rows:
                if len(p) == 8 and p[0] == "ready" and p[3] == "0":
                    out.append((i, int(p[4]), int(p[2]), int(p[5]) // self.nproc,
                                int(p[7]) // self.nproc, int(p[6]), float(p[1])))
        return out

    def current_gen(self, i):
        gens = [g for p, n, g, *_ in self.ready() if p == i and n == self.inc.get(i)]
        return max(gens, default=None)

    def control(self, i, gen, what):
        for lr in range(self.nproc):
            with open(os.path.join(self.ctl(i, self.inc[i]), f"g{gen}.l{lr}"), "w") as f:
                f.write(what + "\n")

    def running(self, i):
        pod = self.c.pods.get(i)
        return pod is not None and (i, self.inc[i]) not in self.exited and pod.running()

    def apply(self, kind, i, arg, now):
        pod = self.c.pods.get(i)
        self.c.event(f"agree: fault {kind} pod {i} arg {arg}")
        if not self.running(i):
            return
        counted = {"worker_fail": "fail", "kill": "kill", "freeze": "freeze", "partition": "cut"}
        if kind in counted:
            self.record("fault", i, what=counted[kind])
        elif kind == "evict":
            self.record("signal", i, what="term")
        if kind == "worker_fail":
            gen = self.current_gen(i)
            if gen is not None:  # local rank 0; class bug (1) exits 42 as in the simulator
                with open(os.path.join(self.ctl(i, self.inc[i]), f"g{gen}.l0"), "w") as f:
                    f.write("exit42\n" if arg == 1 else "exit1\n")
        elif kind in ("kill", "evict"):
            pod.signal(signal.SIGKILL if kind == "kill" else signal.SIGTERM)
            if kind == "evict":
                self.timers.append((now + self.cfg.get("grace", 25000) / 1000 + KUBELET_EXTRA,
                                    "kubelet_kill", i))
            if arg > 0:
                self.timers.append((now + arg / 1000, "recreate", i))
        elif kind == "freeze":
            pod.signal(signal.SIGSTOP)
            self.timers.append((now + arg / 1000, "cont", i))
        elif kind == "partition" and i != 0:  # the pod's link down: no FIN, no RST
            self.c.cut_link(i)
            self.timers.append((now + arg / 1000, "heal", i))
        else:
            raise RuntimeError(f"fault kind {kind}: not run on real pods by this harness")

    def on_exit(self, i, code, now):
        self.insts[i][-1]["exit"] = code
        self.record("exit", i, code=code)
        self.c.event(f"agree: pod {i}.{self.inc[i]} exited {code}")
        if code == 0:
            self.completed.add(i)
        if not self.ended and (code == 76 or (i == 0 and code not in (0, 137))):
            self.ended = True
            self.timers.append((now + END_DELAY, "end", None))
        if code not in (0, 76, 143) and i != 0 and self.running(0) and not self.ended and \
                self.recreations > 0:
            self.recreations -= 1
            self.timers.append((now + RECREATE, "recreate", i))

    def fire(self, what, i, now):
        if what == "cont":
            self.c.pods[i].signal(signal.SIGCONT)
        elif what == "heal":
            self.c.restore_link(i)
        elif what == "kubelet_kill" and self.running(i):
            self.c.pods[i].signal(signal.SIGKILL)
        elif what == "recreate":
            if not self.running(i) and not self.ended and i not in self.completed:
                self.start(i)
        elif what in ("end", "deadline"):
            for j in list(self.inc):
                if self.running(j):
                    self.record("signal", j, what="term")
                    self.c.pods[j].signal(signal.SIGTERM)
                    self.timers.append((now + self.cfg.get("grace", 25000) / 1000 +
                                        KUBELET_EXTRA, "kubelet_kill", j))

    def step(self, t0, now):
        """One poll: due faults and timers, successes, exits. False once everything ended."""
        if self.faults and t0 + self.faults[0][0] / 1000 <= now and not self.formed:
            # Generation 0 must run everywhere before the first fault, as in the simulator
            # (it forms within about 2 s): else the scenario says nothing (a loaded machine).
            want = min(self.cfg["pods"], self.cfg["max"])
            if len({i for i, _, g, *_ in self.ready() if g == 0}) < want:
                raise RuntimeError("generation 0 not running on every pod before the first "
                                   "fault (a loaded machine?)")
            self.formed = True
        while self.faults and t0 + self.faults[0][0] / 1000 <= now:
            _, kind, i, arg = self.faults.pop(0)
            self.apply(kind, i, arg, now)
        due = sorted(t for t in self.timers if t[0] <= now)
        self.timers = [t for t in self.timers if t[0] > now]
        for _, what, i in due:
            self.fire(what, i, now)
        train = self.cfg.get("train", 120000) / 1000 * 0.75
        for i, n, gen, rank, world, restarts, wall in self.ready():
            key = (i, n, gen)
            if key not in self.succeed:
                self.succeed[key] = now + train - max(0.0, time.time() - wall)
                self.insts[i][n - 1]["gens"].append((gen, rank, world, restarts))
            elif self.succeed[key] <= now and n == self.inc[i] and self.running(i):
                self.succeed[key] = float("inf")
                self.control(i, gen, "exit0")
        for i, pod in list(self.c.pods.items()):
            if (i, self.inc[i]) not in self.exited and not pod.running():
                self.exited.add((i, self.inc[i]))
                self.on_exit(i, pod.wait(5), now)
        return bool(self.faults or any(w in ("recreate", "cont", "heal") for _, w, _ in self.timers) or
                    any(self.running(i) for i in self.inc))

    def run(self):
        try:
            self.c.start()
            self.c.publish_all()
            for i in range(self.cfg["pods"]):
                self.start(i)
            t0 = time.monotonic()
            self.timers.append((t0 + self.cfg.get("limit", 600000) / 1000, "deadline", None))
            hard = t0 + self.cfg.get("limit", 600000) / 1000 + 2 * KUBELET_EXTRA + 30
            while time.monotonic() < hard:
                if not self.step(t0, time.monotonic()):
                    break
                time.sleep(POLL)
            else:
                raise RuntimeError("pods still running past the scenario's limit")
            self.timers = [t for t in self.timers if t[1] in ("cont", "heal")]
            self.step(t0, float("inf"))  # the last SIGCONT, so that nothing stays stopped
        finally:
            self.c.teardown()
        for inst in self.insts.values():
            for rec in inst:
                rec["gens"].sort()
        return self.insts


def show(outcome):
    return "\n".join(f"    pod {i}.{n + 1}: exit {rec['exit']}, generations "
                     + (", ".join(f"g{g} rank {r} of {w} restarts {x}" for g, r, w, x in rec["gens"])
                        or "none")
                     for i in sorted(outcome) for n, rec in enumerate(outcome[i]))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trainlet", required=True)
    p.add_argument("--sim", required=True, help="trainlet-sim")
    p.add_argument("--keep", action="store_true", help="keep every run's pod logs (else only a "
                   "disagreeing one's)")
    p.add_argument("--check-trace", metavar="BIN", help="the real run's trace through this "
                   "trainlet-check-trace too (the simulator checks its own)")
    p.add_argument("--slow-stop", action="store_true", help="every worker takes 1.5 s to stop "
                   "(the simulator draws each pod's stop time, up to 3 s)")
    p.add_argument("--verbose", action="store_true", help="print both outcomes of every scenario")
    p.add_argument("scenarios", nargs="+", help=".sched files")
    args = p.parse_args()
    args.trainlet = os.path.abspath(args.trainlet)
    missing = podsim.requirements_missing()
    if missing:
        print(f"agree: skipped: {missing}")
        return SKIPPED
    podsim.cleanup_stale()
    failed = 0
    for path in args.scenarios:
        name = os.path.splitext(os.path.basename(path))[0]
        cfg, faults, opts = parse_schedule(path)
        sim, rc, verdict = sim_outcome(args.sim, path)
        workdir = tempfile.mkdtemp(prefix=f"agree-{name}-")
        t = time.monotonic()
        try:
            run = RealRun(args, cfg, faults, opts, workdir)
            real = run.run()
            with open(os.path.join(workdir, "trace.jsonl"), "w") as f:
                f.write(run.trace())
        except Exception as e:  # noqa: BLE001  (a harness error: say which scenario)
            print(f"agree: {name}: harness error: {e}; pods in {workdir}")
            return 2
        agree = sim == real and rc == 0
        if args.check_trace:
            out = subprocess.run([args.check_trace, os.path.join(workdir, "trace.jsonl")],
                                 capture_output=True, text=True)
            for line in (out.stdout + out.stderr).splitlines():
                print(f"  real pods' trace: {line}")
            agree = agree and out.returncode == 0
        print(f"{name}: {'agree' if agree else 'DISAGREE'} ({time.monotonic() - t:.1f} s real; "
              f"simulator: {verdict})")
        if args.verbose and agree:
            print(show(sim))
        if not agree:
            failed += 1
            print(f"  simulator:\n{show(sim)}\n  real pods (kept in {workdir}):\n{show(real)}")
        elif not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"agree: {len(args.scenarios)} scenarios, {failed} disagree")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
