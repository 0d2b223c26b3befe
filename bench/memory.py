#!/usr/bin/python3
"""Steady-state memory of the agent as leader and as member, with 2, 64 and 1024 pods.

  bench/memory.py --trainlet build/agent/trainlet --loadgen build/bench/trainlet-loadgen \
      [--sizes 2,64,1024] [--real 64]

Up to --real pods are real agents (the leader and members, 1 worker each running
`sleep`); the rest are trainlet-loadgen connections that stay in the control
channel answering heartbeats. Once every pod has its assignment and heartbeats
have flowed for 4 s (SETTLE_S), VmRSS and PSS (proc(5) smaps_rollup) of the leader and the
median over the real members are read. RSS counts every page the process maps,
shared libraries included; PSS divides shared pages among the processes sharing them.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TRAINER = ["sh", "-c", "echo started; exec sleep 120"]
# The agents drop their start-up code 2 s after their workers start (pod.cc,
# kReleaseStartupCodeAfter) and the loop faults back what it runs; read at
# 2 s, as before 2026-12-02, the figures fell inside that transient (before or
# after the drop, by the machine's load: +-0.5 MiB between runs of one binary).
SETTLE_S = 4.0


def once(binary, loadgen, n, real):
    rdzv, master = common.free_ports(2)
    real = min(n, real)
    procs, lg = [], None
    try:
        leader = subprocess.Popen(common.agent_argv(binary, 0, n, rdzv, master, TRAINER),
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=common.ENV)
        procs.append(leader)
        common.wait_listening(rdzv, leader)
        for i in range(1, real):
            procs.append(subprocess.Popen(common.agent_argv(binary, i, n, rdzv, master, TRAINER),
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                          env=common.ENV))
        if n > real:
            lg = subprocess.Popen(common.loadgen_argv(loadgen, rdzv, n, real, n - real,
                                                      report_after_ms=-1, master_port=master),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for p in procs:
            if b"started" not in p.stdout.readline():
                raise RuntimeError("an agent's trainer did not start")
        time.sleep(SETTLE_S)
        lead = common.memory(leader.pid)
        members = [common.memory(p.pid) for p in procs[1:]]
        return {"pods": n, "real_agents": real,
                "leader_rss_kib": lead[0], "leader_pss_kib": lead[2],
                "member_rss_kib": statistics.median(m[0] for m in members),
                "member_pss_kib": statistics.median(m[2] for m in members),
                "leader_anon_kib": common.rss_anon(leader.pid),
                "member_anon_kib": statistics.median(common.rss_anon(p.pid) for p in procs[1:])}
    finally:
        common.kill_all(procs, 15)
        common.reap(procs, 15)
        if lg is not None:
            common.kill_all([lg], 15)
            common.reap([lg], 15)


def run(binary, loadgen, sizes, real, log=print):
    rows = []
    for n in sizes:
        r = once(binary, loadgen, n, real)
        log(f"memory {n} pods: leader RSS {r['leader_rss_kib'] / 1024:.2f} MiB PSS "
            f"{r['leader_pss_kib'] / 1024:.2f} MiB; member RSS {r['member_rss_kib'] / 1024:.2f} "
            f"MiB PSS {r['member_pss_kib'] / 1024:.2f} MiB")
        rows.append(r)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainlet", required=True)
    ap.add_argument("--loadgen", required=True)
    ap.add_argument("--sizes", default="2,64,1024")
    ap.add_argument("--real", type=int, default=64)
    a = ap.parse_args()
    print(json.dumps(run(os.path.abspath(a.trainlet), os.path.abspath(a.loadgen),
                         [int(x) for x in a.sizes.split(",")], a.real)))


if __name__ == "__main__":
    main()
