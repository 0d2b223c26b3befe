#!/usr/bin/python3
"""CPU cost of scraping /metrics every second on a 64-pod leader.

  bench/metrics.py --trainlet build/agent/trainlet --loadgen build/bench/trainlet-loadgen \
      [--pods 64] [--window 20] [--rounds 2]

The leader is a real agent (--health-port, 1 worker running `sleep`); the other pods
are trainlet-loadgen connections that stay in the control channel answering
heartbeats. Once the gang has formed, the leader's CPU time (utime + stime,
proc(5) /proc/PID/stat) is read over alternating windows of --window s: without
scrapes, then with a GET /metrics every second (the client's own CPU is not the
leader's). The figure is (CPU with - CPU without) / window, as a share of one core;
the goal is <= 1 %.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TRAINER = ["sh", "-c", "echo started; exec sleep 600"]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def window(pid, seconds, port=None):
    """Leader CPU seconds over `seconds`, scraping every second if port; scrape count
    and bytes of the last body."""
    c0, t0, n, size = cpu_seconds(pid), time.monotonic(), 0, 0
    while time.monotonic() - t0 < seconds:
        if port is not None:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                size = len(r.read())
            n += 1
        time.sleep(max(0.0, t0 + n - time.monotonic()) if port is not None else 0.1)
    return cpu_seconds(pid) - c0, time.monotonic() - t0, n, size


def run(binary, loadgen, pods, seconds, rounds, log=print):
    rdzv, master, health = common.free_ports(3)
    procs, lg = [], None
    try:
        leader = subprocess.Popen(
            common.agent_argv(binary, 0, pods, rdzv, master, TRAINER,
                              extra=("--health-port", str(health))),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=common.ENV)
        procs.append(leader)
        common.wait_listening(rdzv, leader)
        lg = subprocess.Popen(common.loadgen_argv(loadgen, rdzv, pods, 1, pods - 1,
                                                  report_after_ms=-1, master_port=master),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if b"started" not in leader.stdout.readline():
            raise RuntimeError("the leader's trainer did not start")
        time.sleep(2.0)
        idle, scraped = [], []
        for _ in range(rounds):
            cpu, wall, _, _ = window(leader.pid, seconds)
            idle.append(cpu / wall)
            cpu, wall, n, size = window(leader.pid, seconds, health)
            scraped.append(cpu / wall)
        row = {"pods": pods, "window_s": seconds, "rounds": rounds, "scrapes_per_window": n,
               "body_bytes": size, "idle_cpu_pct": 100 * statistics.median(idle),
               "scraped_cpu_pct": 100 * statistics.median(scraped),
               "overhead_pct": 100 * (statistics.median(scraped) - statistics.median(idle))}
        log(f"metrics {pods} pods: leader CPU {row['idle_cpu_pct']:.3f} % idle, "
            f"{row['scraped_cpu_pct']:.3f} % scraped every 1 s ({size} B body): "
            f"+{row['overhead_pct']:.3f} % of a core")
        return row
    finally:
        common.kill_all(procs, 15)
        common.reap(procs, 15)
        if lg is not None:
            common.kill_all([lg], 15)
            common.reap([lg], 15)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainlet", required=True)
    ap.add_argument("--loadgen", required=True)
    ap.add_argument("--pods", type=int, default=64)
    ap.add_argument("--window", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    print(json.dumps(run(os.path.abspath(a.trainlet), os.path.abspath(a.loadgen), a.pods,
                         a.window, a.rounds)))


if __name__ == "__main__":
    main()
