#!/usr/bin/python3
"""SIGTERM to exit: how long trainlet takes to stop a trainer that exits at once on SIGTERM,
with the stop's order of issue 21 (--signal-scope main: the main processes first, the rest
of the pod once they exited) and the former one (--signal-scope group: every process at
once). The order must cost nothing measurable when the trainer exits promptly.

  bench/stop.py --trainlet build/agent/trainlet [--runs 20]

Each run: `trainlet --standalone --nproc-per-node 2` with an `sh` trainer that has a child
in its process group (`sleep 0.1 & wait`) and exits 0 in its TERM trap; once both ranks
print "ready", SIGTERM to trainlet, and the time until trainlet has exited (143). The two
scopes alternate, run by run.
"""
import argparse
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TRAINER = "trap 'exit 0' TERM; echo ready; while :; do sleep 0.1 & wait $!; done"


def one(binary, scope):
    p = subprocess.Popen([binary, "--standalone", "--nproc-per-node", "2", "--signal-scope",
                          scope, "--grace-period", "10", "--", "sh", "-c", TRAINER],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ready = 0
    while ready < 2:
        line = p.stdout.readline()
        if not line:
            raise RuntimeError(f"trainlet exited {p.wait()} before its workers were ready")
        ready += line.rstrip().endswith("ready")
    t0 = time.monotonic()
    p.send_signal(signal.SIGTERM)
    p.stdout.read()
    code = p.wait(30)
    took = time.monotonic() - t0
    if code != 143:
        raise RuntimeError(f"trainlet exited {code}, want 143")
    return took


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trainlet", required=True)
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    times = {"main": [], "group": []}
    for _ in range(args.runs):
        for scope in times:
            times[scope].append(one(args.trainlet, scope))
    print("| --signal-scope | SIGTERM → exit, median (range, n) |\n|---|---|")
    for scope, xs in times.items():
        print(f"| {scope} | {common.fmt_ms(common.stats([x * 1000 for x in xs]))} |")


if __name__ == "__main__":
    main()
