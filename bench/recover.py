#!/usr/bin/python3
"""Time to recover: with --max-restarts, one worker killed -> every trainer running
again in a new generation. 8 pods x 1 worker, trainer start-up excluded.

  bench/recover.py --trainlet build/agent/trainlet [--pods 8] [--runs 5] [--torchrun-runs 1]

Every trainer is a `sh` script that first prints "START <generation: 0, or 1 when a
marker file says this rank ran before> <RANK> <ns>" (`date +%s%N`, right after exec: start-up excluded). In the first
generation rank 1 prints "KILL <ns>" and SIGKILLs itself; every other trainer
sleeps until stopped. In the next generation (restart count 1) every trainer
exits 0 at once. The figure is the last START with restart count 1 minus the
KILL: stop the gang, a new rendezvous generation, start again. torchrun
(--max_restarts 1, c10d, the same trainer) is measured the same way.
Prints "skipped: --max-restarts not supported" when trainlet refuses the flag.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TRAINER = r'''
# The generation from a marker file, not TORCHELASTIC_RESTART_COUNT: torchrun counts
# restarts per agent, so the survivors of another node's failure restart with 0.
m=$BENCH_STATE/started-$RANK
if [ -e "$m" ]; then gen=1; else gen=0; : > "$m"; fi
echo "START $gen $RANK $(date +%s%N)"
if [ "$gen" != 0 ]; then exit 0; fi
if [ "$RANK" = 1 ]; then sleep 1; echo "KILL $(date +%s%N)"; kill -9 $$; fi
trap 'exit 143' TERM
while :; do sleep 0.1; done
'''


def supported(binary):
    p = subprocess.run([binary, "--max-restarts", "1", "--nnodes", "1", "--log-level", "error",
                        "--", "true"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, timeout=30)
    return p.returncode == 0


def figure(out, pods):
    kill = [int(x) for x in re.findall(r"KILL (\d+)", out)]
    again = [int(t) for c, _, t in re.findall(r"START (\d+) (\d+) (\d+)", out) if c == "1"]
    if len(kill) != 1 or len(again) != pods:
        raise RuntimeError(f"{len(kill)} kills, {len(again)} of {pods} trainers restarted")
    return (max(again) - kill[0]) / 1e6


def state_env():
    """The environment for one run: BENCH_STATE is a fresh folder for the markers, and
    holds the trainer as a file (torchrun 1.13 never finished here with `sh -c`)."""
    state = tempfile.mkdtemp(prefix="trainlet-recover-")
    with open(os.path.join(state, "trainer.sh"), "w") as f:
        f.write(TRAINER)
    return dict(common.ENV, BENCH_STATE=state)


def trainer(env):
    return ["sh", os.path.join(env["BENCH_STATE"], "trainer.sh")]


def trainlet_once(binary, pods):
    env = state_env()
    p = subprocess.run([binary, "local", "--nnodes", str(pods), "--nproc-per-node", "1",
                        "--max-restarts", "1", "--grace-period", "5", "--log-level", "warn",
                        "--", *trainer(env)], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, text=True, timeout=120, env=env)
    return figure(p.stdout, pods)


def torchrun_once(pods):
    port = common.free_port()
    env = state_env()
    # Output to files, not pipes: a pipe whose reader waits for one agent at a time
    # stalled the others here.
    outs = [tempfile.TemporaryFile(mode="w+") for _ in range(pods)]
    procs = [subprocess.Popen(common.torchrun_argv(pods, port, trainer(env),
                                                   ["--max_restarts", "1"]),
                              stdout=outs[i], stderr=subprocess.DEVNULL, text=True, env=env)
             for i in range(pods)]
    try:
        deadline = time.monotonic() + 120
        for p in procs:
            p.wait(timeout=max(1, deadline - time.monotonic()))
        text = ""
        for f in outs:
            f.seek(0)
            text += f.read()
        return figure(text, pods)
    finally:
        common.kill_all(procs, 9)
        common.reap(procs, 5)
        for f in outs:
            f.close()


def run(binary, pods, runs, torchrun_runs, log=print):
    if not supported(binary):
        log("recover: skipped: --max-restarts not supported")
        return {"skipped": "--max-restarts not supported"}
    out = {"pods": pods, "trainlet": common.stats([trainlet_once(binary, pods) for _ in range(runs)]),
           "torchrun": None}
    try:
        if torchrun_runs:
            out["torchrun"] = common.stats([torchrun_once(pods) for _ in range(torchrun_runs)])
    except Exception as e:  # noqa: BLE001
        out["torchrun_error"] = str(e)[:200]
    log(f"recover {pods} pods: trainlet {common.fmt_ms(out['trainlet'])}, torchrun "
        f"{common.fmt_ms(out['torchrun'])}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainlet", required=True)
    ap.add_argument("--pods", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--torchrun-runs", type=int, default=1)
    a = ap.parse_args()
    print(json.dumps(run(os.path.abspath(a.trainlet), a.pods, a.runs, a.torchrun_runs)))


if __name__ == "__main__":
    main()
