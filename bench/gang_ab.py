#!/usr/bin/python3
"""Failure propagation, two trainlet binaries side by side: one worker exits 3 -> every
other worker of the gang has received SIGTERM from its own agent (bench/gang.py's
measurement, `trainlet local`, N pods x 1 worker on loopback). Runs alternate A, B, A, B...
so both see the same machine load.

  bench/gang_ab.py --a OLD_BIN --b NEW_BIN [--pods 16] [--runs 10] [--stamp date|bash]

--stamp date (default) is bench/gang.py's trainer: dash, whose TERM trap forks `date +%s%N`.
--stamp bash takes the time in the trap from bash's $EPOCHREALTIME, without a fork: with 15
trainers stopped at once on 2 cores, the 15 fork+exec of `date` queue behind one another and
delay the last stamp (the observer's cost, not trainlet's; bench/RESULTS.md, "Chaos soak").

Prints one JSON object: per binary the stats of the failure -> last SIGTERM time (ms) and
the exit codes `trainlet local` returned.
"""
import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import gang  # noqa: E402


# bench/gang.py's trainer with fork-free time stamps (microseconds, printed as ns).
BASH_TRAINER = r'''
if [ "$RANK" = 1 ]; then sleep 1; echo "FAIL ${EPOCHREALTIME/./}000"; exit 3; fi
trap 'echo "TERM ${EPOCHREALTIME/./}000"; exit 0' TERM
while :; do sleep 1 & wait $!; done
'''


def bash_once(binary, pods):
    p = subprocess.run([binary, "local", "--nnodes", str(pods), "--nproc-per-node", "1",
                        "--grace-period", "5", "--log-level", "warn", "--", "bash", "-c",
                        BASH_TRAINER],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=60,
                       env=common.ENV)
    fail = [int(x) for x in re.findall(r"FAIL (\d+)", p.stdout)]
    term = [int(x) for x in re.findall(r"TERM (\d+)", p.stdout)]
    if len(fail) != 1 or len(term) != pods - 1:
        raise RuntimeError(f"unexpected output: {len(fail)} failures, {len(term)} TERMs, "
                           f"exit {p.returncode}")
    return (max(term) - fail[0]) / 1e6, p.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="the binary to compare against (before)")
    ap.add_argument("--b", required=True, help="the binary under test (after)")
    ap.add_argument("--pods", type=int, default=16)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--stamp", choices=["date", "bash"], default="date")
    a = ap.parse_args()
    once = gang.trainlet_once if a.stamp == "date" else bash_once
    bins = {"a": os.path.abspath(a.a), "b": os.path.abspath(a.b)}
    xs = {k: [] for k in bins}
    codes = {k: set() for k in bins}
    for _ in range(a.runs):
        for k, binary in bins.items():
            ms, code = once(binary, a.pods)
            xs[k].append(ms)
            codes[k].add(code)
    out = {"pods": a.pods, "stamp": a.stamp, "load": os.getloadavg()}
    for k, binary in bins.items():
        out[k] = {"binary": binary, "ms": common.stats(xs[k]), "exit_codes": sorted(codes[k])}
        print(f"{k} {binary}: {common.fmt_ms(out[k]['ms'])}", file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
