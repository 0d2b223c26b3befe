#!/usr/bin/python3
"""Launch overhead, one pod: exec of the launcher -> exec of a trivial trainer.

  bench/launch.py --trainlet build/agent/trainlet [--runs 50]

Each launcher starts `date +%s%N` (it prints CLOCK_REALTIME in ns right after
exec); the figure is that stamp minus the time just before the launcher was
started, so both sides include one fork+exec of the launcher. Interleaved runs:
trainlet (one pod, no index: no rendezvous traffic) vs tini, dumb-init (Debian
packages `tini`, `dumb-init`) and torchrun (Debian's python3-torch) when present.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import time


def once(cmd):
    env = dict(os.environ, PATH="/usr/bin:/bin")
    t0 = time.time_ns()
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                         check=True).stdout
    return (int(re.search(rb"(\d{19})", out).group(1)) - t0) / 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainlet", required=True)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--torchrun-runs", type=int, default=5)
    a = ap.parse_args()
    trainer = ["date", "+%s%N"]
    launchers = {"trainlet": [os.path.abspath(a.trainlet), "--log-level", "warn", "--"]}
    if shutil.which("tini"):
        launchers["tini"] = ["tini", "-s", "--"]
    if shutil.which("dumb-init"):
        launchers["dumb-init"] = ["dumb-init", "--"]
    results = {k: [] for k in launchers}
    for _ in range(a.runs):
        for name, cmd in launchers.items():
            results[name].append(once(cmd + trainer))
    if shutil.which("torchrun"):
        # torch 1.13 on Python 3.11 needs both --redirects and --tee (an upstream bug).
        cmd = ["torchrun", "--nnodes", "1", "--nproc_per_node", "1", "--redirects", "2",
               "--tee", "1", "--no_python"]
        results["torchrun"] = [once(cmd + trainer) for _ in range(a.torchrun_runs)]
    print(f"launcher exec -> trainer exec, one pod, one worker ({a.runs} runs; torchrun "
          f"{a.torchrun_runs})")
    med = {k: statistics.median(v) for k, v in results.items()}
    for name, xs in results.items():
        xs = sorted(xs)
        print(f"  {name:9s} median {med[name]:8.2f} ms  range {xs[0]:.2f}..{xs[-1]:.2f} ms")
    for other in ("tini", "dumb-init", "torchrun"):
        if other in med:
            print(f"  trainlet / {other}: {med['trainlet'] / med[other]:.2f}x")


if __name__ == "__main__":
    main()
