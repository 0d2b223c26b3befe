#!/usr/bin/python3
"""Start-up time and agent memory, trainlet vs torchrun, side by side in one run.

  bench/startup.py --trainlet build/agent/trainlet [--runs 20] [--pods 3]

Start-up: wall time from starting the launcher(s) to the moment the LAST
trainer process of the gang runs (each trainer is `date +%s%N`, which prints
CLOCK_REALTIME in ns as soon as it is exec'ed). Both launchers run a gang of
--pods pods x 1 worker on this machine: `trainlet local --nnodes P` vs P
`torchrun --nnodes P --rdzv-backend c10d` processes on localhost.
Memory: VmRSS and PSS of each trainlet agent (leader and members) while the
trainers sleep.
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def last_exec_ms(cmds, env=None):
    t0 = time.time_ns()
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
             for c in cmds]
    out = b"".join(p.communicate()[0] for p in procs)
    if any(p.returncode != 0 for p in procs):
        raise RuntimeError(f"{cmds[0][:3]} failed")
    stamps = [int(m) for m in re.findall(rb"(\d{19})", out)]
    return (max(stamps) - t0) / 1e6, len(stamps)


def trainlet_cmd(binary, pods):
    return [[binary, "local", "--nnodes", str(pods), "--nproc-per-node", "1",
             "--log-level", "warn", "--", "date", "+%s%N"]]


def torchrun_cmds(pods):
    port = free_port()
    # torch 1.13 spells its flags with underscores, and on Python 3.11 crashes
    # unless both --redirects and --tee are given (an upstream bug); "3" (ALL) is
    # itself lost by the same bug, so stdout is tee'd (1) and stderr redirected (2).
    return [["torchrun", "--nnodes", str(pods), "--nproc_per_node", "1",
             "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}",
             "--rdzv_id", "bench", "--redirects", "2", "--tee", "1", "--no_python", "date", "+%s%N"]
            for _ in range(pods)]


def summary(xs):
    xs = sorted(xs)
    return f"median {statistics.median(xs):8.1f} ms  range {xs[0]:.1f}..{xs[-1]:.1f} ms"


def memory(binary, pods):
    p = subprocess.Popen([binary, "local", "--nnodes", str(pods), "--nproc-per-node", "1",
                          "--log-level", "warn", "--", "sleep", "3"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.5)
    rows = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            if cmd[0] != binary.encode() or b"--node-rank" not in cmd:
                continue
            index = cmd[cmd.index(b"--node-rank") + 1].decode()
            status = open(f"/proc/{pid}/status").read()
            rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
            pss = int(re.search(r"^Pss:\s+(\d+)", open(f"/proc/{pid}/smaps_rollup").read(),
                                re.M).group(1))
            rows.append((index, rss, pss))
        except (OSError, ValueError, AttributeError):
            continue
    p.wait()
    return sorted(rows)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainlet", required=True)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--pods", type=int, default=3)
    ap.add_argument("--no-torchrun", action="store_true")
    a = ap.parse_args()
    binary = os.path.abspath(a.trainlet)
    env = dict(os.environ, PATH="/usr/bin:/bin")  # Debian's torchrun and python3-torch

    results = {"trainlet": [], "torchrun": []}
    for _ in range(a.runs):  # interleaved, so both see the same machine noise
        results["trainlet"].append(last_exec_ms(trainlet_cmd(binary, a.pods), env)[0])
        if not a.no_torchrun:
            results["torchrun"].append(last_exec_ms(torchrun_cmds(a.pods), env)[0])
    print(f"start -> last trainer exec, {a.pods} pods x 1 worker, {a.runs} runs each")
    for name, xs in results.items():
        if xs:
            print(f"  {name:9s} {summary(xs)}")
    if results["torchrun"]:
        ratio = statistics.median(results["torchrun"]) / statistics.median(results["trainlet"])
        print(f"  torchrun / trainlet (medians): {ratio:.0f}x")
    print(f"agent memory while the trainers run ({a.pods} pods)")
    for index, rss, pss in memory(binary, a.pods):
        role = "leader" if index == "0" else "member"
        print(f"  pod {index} ({role}): VmRSS {rss / 1024:.1f} MiB  PSS {pss / 1024:.1f} MiB")


if __name__ == "__main__":
    sys.exit(main())
