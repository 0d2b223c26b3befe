#!/usr/bin/python3
"""Hot spares: a lost pod -> the spare's worker running with the lost pod's RANK, against
today's fixed gang: a lost pod -> every survivor's worker stopped. N pods x 1 worker on
loopback, each pod an agent process of its own (`--node-rank`, as `trainlet local` starts
them), trainer start-up excluded.

  bench/spares.py --trainlet build/agent/trainlet [--pods 8] [--runs 5] [--fault freeze|kill]

The fault hits pod 1 (agent and worker at once): `freeze` SIGSTOPs both (the connection stays
open and goes silent: the leader declares the pod lost after the heartbeat timeout, 6 x 0.4 s),
`kill` SIGKILLs both (the connection closes). Every trainer is a `sh` script that prints
"START <restart count> <RANK> <pid> <ns>" (`date +%s%N`, right after exec) and, on SIGTERM,
"TERM <RANK> <ns>".

- spare: N + 1 agents, `--nnodes N --spares 1 --max-restarts 1`. The figure is the spare's
  START in restart count 1 minus the fault's time: detect the loss, stop the gang's workers,
  a new generation, the spare's worker started (goal: heartbeat timeout + 100 ms for a freeze).
- survivors: N agents, `--nnodes N`, no restarts. The figure is the last survivor's TERM minus
  the fault's time: detect the loss and stop the others (what a fixed gang does before
  Kubernetes replaces the pod).
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TRAINER = r'''
echo "START $TORCHELASTIC_RESTART_COUNT $RANK $$ $(date +%s%N)"
trap 'echo "TERM $RANK $(date +%s%N)"; exit 0' TERM
while :; do sleep 1 & wait $!; done
'''
HEARTBEAT_INTERVAL_MS = 400  # rendezvous/include/trainlet/rendezvous/tunables.h kHeartbeatInterval
HEARTBEAT_TIMEOUT_MS = 2400  # rendezvous/include/trainlet/rendezvous/tunables.h: 6 x 0.4 s
START = re.compile(r"START (\d+) (\d+) (\d+) (\d+)")
TERM = re.compile(r"TERM (\d+) (\d+)")


def env():
    e = dict(common.ENV)
    e.pop("KUBERNETES_SERVICE_HOST", None)  # one host: a loopback leader is right here
    return e


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def wait_for(predicate, path, procs, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        out = read(path)
        got = predicate(out)
        if got is not None:
            return got
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout} s")
        dead = [p for p in procs if p.poll() is not None]
        if dead and what.startswith("gang"):
            raise RuntimeError(f"{what}: an agent exited {dead[0].returncode}")
        time.sleep(0.005)


def once(binary, pods, spare, fault, logs=None, detail=None):
    """ms from the fault to the figure (see the module doc). `logs`: a folder for the
    agents' stderr (log level info), to read a run's timeline. `detail` (a dict), in a
    spare run: gets "first_term" and "last_term", ms from the fault to the first and the
    last worker's SIGTERM trap (the leader's Stop arriving; its detection varies with
    where the fault fell between the lost pod's heartbeats), so the restart alone is the
    figure minus "first_term"; and "started_before": how many other workers of the next
    generation had started before the spare's."""
    agents = pods + (1 if spare else 0)
    rdzv, master = common.free_ports(2)
    extra = ["--spares", "1", "--max-restarts", "1"] if spare else []
    fd, out = tempfile.mkstemp(prefix="trainlet-spares-")
    os.close(fd)
    procs = []
    try:
        with open(out, "ab") as sink:
            for i in range(agents):
                err = open(os.path.join(logs, f"pod{i}.log"), "w") if logs else subprocess.DEVNULL
                procs.append(subprocess.Popen(
                    common.agent_argv(binary, i, pods, rdzv, master, ["sh", "-c", TRAINER],
                                      extra=extra, log_level=os.environ.get("SPARES_LOG_LEVEL", "info") if logs else "warn"),
                    stdout=sink, stderr=err, env=env()))

        def gang(o):
            s = {int(r): int(pid) for c, r, pid, _ in START.findall(o) if c == "0"}
            return s if len(s) == pods else None

        pids = wait_for(gang, out, procs, 120, f"gang of {pods} formed")
        sig = signal.SIGSTOP if fault == "freeze" else signal.SIGKILL
        t0 = time.time_ns()
        for pid in (procs[1].pid, pids[1]):
            os.kill(pid, sig)
        if spare:
            def swapped(o):
                s = [int(t) for c, r, _, t in START.findall(o) if c == "1" and r == "1"]
                return s[0] if s else None
            t = wait_for(swapped, out, procs, 60, "the spare's worker")
            if detail is not None:
                o = read(out)
                detail["started_before"] = sum(
                    1 for c, r, _, x in START.findall(o) if c == "1" and r != "1" and int(x) < t)
                # The frozen pod's own worker START: its control channel opens right
                # after (pod_workers.cc), with a heartbeat at once; frozen before its next
                # one (kHeartbeatInterval later), that is its last frame, so the spare's
                # START minus it is detection + restart without the harness's own lag
                # between the gang's START lines and the fault (poll, load).
                own = [int(x) for c, r, _, x in START.findall(o) if c == "0" and r == "1"]
                if own and t0 - own[0] < HEARTBEAT_INTERVAL_MS * 1e6:
                    detail["since_last_frame"] = (t - own[0]) / 1e6
                terms = [int(x) for r, x in TERM.findall(o) if r != "1"]
                if terms:
                    detail["first_term"] = (min(terms) - t0) / 1e6
                    detail["last_term"] = (max(terms) - t0) / 1e6
        else:
            def stopped(o):
                s = [int(t) for r, t in TERM.findall(o) if r != "1"]
                return max(s) if len(s) == pods - 1 else None
            t = wait_for(stopped, out, procs, 60, "the survivors' workers stopped")
        return (t - t0) / 1e6
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
        common.kill_all(procs, 9)
        common.reap(procs, 10)
        # Workers are in process groups of their own: a SIGKILLed agent leaves them behind.
        for line in START.findall(read(out)):
            try:
                os.kill(int(line[2]), signal.SIGKILL)
            except ProcessLookupError:
                pass
        if logs:
            os.replace(out, os.path.join(logs, "workers.out"))
        else:
            os.unlink(out)


def run(binary, pods, runs, fault, log=print, logs=None):
    res = {"pods": pods, "fault": fault, "heartbeat_timeout_ms": HEARTBEAT_TIMEOUT_MS}
    for name, spare in (("spare", True), ("survivors", False)):
        where = None
        if logs:
            where = os.path.join(logs, name)
            os.makedirs(where, exist_ok=True)
        res[name] = common.stats([once(binary, pods, spare, fault, where) for _ in range(runs)])
    log(f"spares {pods} pods, {fault}: lost pod -> spare's worker running "
        f"{common.fmt_ms(res['spare'])}; lost pod -> survivors stopped "
        f"{common.fmt_ms(res['survivors'])}")
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainlet", required=True)
    ap.add_argument("--pods", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--fault", choices=("freeze", "kill"), default="freeze")
    ap.add_argument("--logs", help="keep the last run's agent logs (level info) in this folder")
    a = ap.parse_args()
    print(json.dumps(run(os.path.abspath(a.trainlet), a.pods, a.runs, a.fault, logs=a.logs)))


if __name__ == "__main__":
    main()
