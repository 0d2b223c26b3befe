#!/usr/bin/python3
"""Failure propagation across a gang: one worker fails -> every other worker has
received SIGTERM from its own agent. N pods x 1 worker on loopback.

  bench/gang.py --trainlet build/agent/trainlet [--pods 16] [--runs 10] [--torchrun-runs 1]

Each trainer prints CLOCK_REALTIME (ns) when its SIGTERM trap runs; the failing
one (rank 1) prints it right before exiting 3. The figure is the last trap time
minus the failure time: what the gang's control channel adds on top of process
start-up, which it excludes. trainlet: `trainlet local`. torchrun: N
`torchrun --rdzv_backend c10d` processes (max_restarts 0, its defaults otherwise)
with the same trainer; survivors not stopped within --torchrun-timeout s are
reported as such.
"""
import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TRAINER = r'''
if [ "$RANK" = 1 ]; then sleep 1; echo "FAIL $(date +%s%N)"; exit 3; fi
trap 'echo "TERM $(date +%s%N)"; exit 0' TERM
while :; do sleep 1 & wait $!; done
'''


def parse(out):
    return ([int(x) for x in re.findall(r"FAIL (\d+)", out)],
            [int(x) for x in re.findall(r"TERM (\d+)", out)])


def trainlet_once(binary, pods):
    p = subprocess.run([binary, "local", "--nnodes", str(pods), "--nproc-per-node", "1",
                        "--grace-period", "5", "--log-level", "warn", "--", "sh", "-c", TRAINER],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=60,
                       env=common.ENV)
    fail, term = parse(p.stdout)
    if len(fail) != 1 or len(term) != pods - 1:
        raise RuntimeError(f"unexpected output: {len(fail)} failures, {len(term)} TERMs, "
                           f"exit {p.returncode}")
    return (max(term) - fail[0]) / 1e6, p.returncode


def torchrun_once(pods, timeout):
    """(ms until the last survivor got SIGTERM or None, survivors signalled)."""
    port = common.free_port()
    procs = [subprocess.Popen(common.torchrun_argv(pods, port, ["sh", "-c", TRAINER]),
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              env=common.ENV) for _ in range(pods)]
    outs = []
    try:
        # The whole gang must start first (pods Python interpreters), then 1 s, then the failure.
        for p in procs:
            try:
                outs.append(p.communicate(timeout=timeout)[0])
            except subprocess.TimeoutExpired:
                common.kill_all(procs, 9)
                outs.append(p.communicate()[0])
    finally:
        common.kill_all(procs, 9)
        common.reap(procs, 5)
    fail, term = parse("".join(outs))
    if len(fail) != 1:
        raise RuntimeError(f"torchrun: {len(fail)} failures seen")
    if len(term) < pods - 1:
        return None, len(term)
    return (max(term) - fail[0]) / 1e6, len(term)


def run(binary, pods, runs, torchrun_runs, torchrun_timeout, log=print):
    xs, codes = [], set()
    for _ in range(runs):
        ms, code = trainlet_once(binary, pods)
        xs.append(ms)
        codes.add(code)
    out = {"pods": pods, "trainlet": common.stats(xs), "trainlet_exit_codes": sorted(codes),
           "torchrun": None, "torchrun_note": ""}
    ts, notes = [], []
    for _ in range(torchrun_runs):
        ms, n = torchrun_once(pods, torchrun_timeout)
        if ms is None:
            notes.append(f"{n} of {pods - 1} survivors signalled within {torchrun_timeout} s")
        else:
            ts.append(ms)
    if ts:
        out["torchrun"] = common.stats(ts)
    out["torchrun_note"] = "; ".join(notes)
    log(f"gang {pods} pods: trainlet {common.fmt_ms(out['trainlet'])}; torchrun "
        f"{common.fmt_ms(out['torchrun'])} {out['torchrun_note']}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainlet", required=True)
    ap.add_argument("--pods", type=int, default=16)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--torchrun-runs", type=int, default=1)
    ap.add_argument("--torchrun-timeout", type=float, default=90)
    a = ap.parse_args()
    print(json.dumps(run(os.path.abspath(a.trainlet), a.pods, a.runs, a.torchrun_runs,
                         a.torchrun_timeout)))


if __name__ == "__main__":
    main()
