#!/usr/bin/python3
"""Failure propagation across a gang: one worker fails -> every other worker has
received SIGTERM from its own agent. trainlet local, N pods x 1 worker, loopback.

  bench/gang.py --trainlet build/agent/trainlet [--pods 16] [--runs 10]

Each trainer prints CLOCK_REALTIME (ns) when its SIGTERM trap runs; the failing
one (rank 1) prints it right before exiting 3. The figure is the last trap time
minus the failure time: what the gang's control channel adds on top of process
start-up, which it excludes.
"""
import argparse
import os
import re
import statistics
import subprocess

TRAINER = r'''
if [ "$RANK" = 1 ]; then sleep 1; echo "FAIL $(date +%s%N)"; exit 3; fi
trap 'echo "TERM $(date +%s%N)"; exit 0' TERM
while :; do sleep 1 & wait $!; done
'''


def run(binary, pods):
    p = subprocess.run([binary, "local", "--nnodes", str(pods), "--nproc-per-node", "1",
                        "--grace-period", "5", "--log-level", "warn", "--", "sh", "-c", TRAINER],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=60)
    fail = [int(x) for x in re.findall(r"FAIL (\d+)", p.stdout)]
    term = [int(x) for x in re.findall(r"TERM (\d+)", p.stdout)]
    if len(fail) != 1 or len(term) != pods - 1:
        raise RuntimeError(f"unexpected output: {len(fail)} failures, {len(term)} TERMs, "
                           f"exit {p.returncode}")
    return (max(term) - fail[0]) / 1e6, p.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainlet", required=True)
    ap.add_argument("--pods", type=int, default=16)
    ap.add_argument("--runs", type=int, default=10)
    a = ap.parse_args()
    binary = os.path.abspath(a.trainlet)
    xs, codes = [], set()
    for _ in range(a.runs):
        ms, code = run(binary, a.pods)
        xs.append(ms)
        codes.add(code)
    xs.sort()
    print(f"failure -> every other worker SIGTERMed, {a.pods} pods x 1 worker, {a.runs} runs")
    print(f"  trainlet  median {statistics.median(xs):6.1f} ms  range {xs[0]:.1f}..{xs[-1]:.1f} ms"
          f"  (trainlet local exit codes: {sorted(codes)})")


if __name__ == "__main__":
    main()
