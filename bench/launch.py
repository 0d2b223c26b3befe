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
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def once(cmd):
    env = dict(os.environ, PATH="/usr/bin:/bin")
    t0 = time.time_ns()
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                         check=True).stdout
    return (int(re.search(rb"(\d{19})", out).group(1)) - t0) / 1e6


def run(binary, runs, torchrun_runs, log=print):
    trainer = ["date", "+%s%N"]
    launchers = {"trainlet": [binary, "--log-level", "warn", "--"]}
    if shutil.which("tini", path="/usr/bin:/bin"):
        launchers["tini"] = ["tini", "-s", "--"]
    if shutil.which("dumb-init", path="/usr/bin:/bin"):
        launchers["dumb-init"] = ["dumb-init", "--"]
    results = {k: [] for k in launchers}
    for _ in range(3):  # warm the page cache for every binary
        for cmd in launchers.values():
            once(cmd + trainer)
    for _ in range(runs):  # interleaved: every launcher sees the same noise
        for name, cmd in launchers.items():
            results[name].append(once(cmd + trainer))
    if torchrun_runs and shutil.which("torchrun", path="/usr/bin:/bin"):
        # torch 1.13 on Python 3.11 needs both --redirects and --tee (an upstream bug).
        cmd = ["torchrun", "--nnodes", "1", "--nproc_per_node", "1", "--redirects", "2",
               "--tee", "1", "--no_python"]
        results["torchrun"] = [once(cmd + trainer) for _ in range(torchrun_runs)]
    out = {k: common.stats(v) for k, v in results.items()}
    # `--version`: process start alone (dynamic loading, initialisers), no trainer.
    ver = {"trainlet": [binary, "--version"], "tini": ["tini", "--version"]}
    vt = {k: [] for k in ver}
    for _ in range(runs):
        for k, cmd in ver.items():
            t0 = time.monotonic_ns()
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            vt[k].append((time.monotonic_ns() - t0) / 1e6)
    out["version"] = {k: common.stats(v) for k, v in vt.items()}
    log(f"launch: " + ", ".join(f"{k} {v['median']:.2f} ms" for k, v in out.items()
                                if k != "version"))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainlet", required=True)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--torchrun-runs", type=int, default=5)
    a = ap.parse_args()
    out = run(os.path.abspath(a.trainlet), a.runs, a.torchrun_runs, log=lambda m: None)
    print(f"launcher exec -> trainer exec, one pod, one worker ({a.runs} runs; torchrun "
          f"{a.torchrun_runs})")
    for name, st in out.items():
        if name == "version":
            continue
        print(f"  {name:9s} median {st['median']:8.2f} ms  range {st['min']:.2f}..{st['max']:.2f} ms")
    for other in ("tini", "dumb-init", "torchrun"):
        if other in out:
            print(f"  trainlet / {other}: {out['trainlet']['median'] / out[other]['median']:.2f}x")


if __name__ == "__main__":
    main()
