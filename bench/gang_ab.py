#!/usr/bin/python3
"""Failure propagation, two trainlet binaries side by side: one worker exits 3 -> every
other worker of the gang has received SIGTERM from its own agent (bench/gang.py's
measurement, `trainlet local`, N pods x 1 worker on loopback). Runs alternate A, B, A, B...
so both see the same machine load.

  bench/gang_ab.py --a OLD_BIN --b NEW_BIN [--pods 16] [--runs 10]

Prints one JSON object: per binary the stats of the failure -> last SIGTERM time (ms) and
the exit codes `trainlet local` returned.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import gang  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="the binary to compare against (before)")
    ap.add_argument("--b", required=True, help="the binary under test (after)")
    ap.add_argument("--pods", type=int, default=16)
    ap.add_argument("--runs", type=int, default=10)
    a = ap.parse_args()
    bins = {"a": os.path.abspath(a.a), "b": os.path.abspath(a.b)}
    xs = {k: [] for k in bins}
    codes = {k: set() for k in bins}
    for _ in range(a.runs):
        for k, binary in bins.items():
            ms, code = gang.trainlet_once(binary, a.pods)
            xs[k].append(ms)
            codes[k].add(code)
    out = {"pods": a.pods, "load": os.getloadavg()}
    for k, binary in bins.items():
        out[k] = {"binary": binary, "ms": common.stats(xs[k]), "exit_codes": sorted(codes[k])}
        print(f"{k} {binary}: {common.fmt_ms(out[k]['ms'])}", file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
