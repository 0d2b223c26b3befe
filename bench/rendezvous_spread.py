#!/usr/bin/python3
"""Where the time of one rendezvous goes: every agent's join and assignment.

  bench/rendezvous_spread.py --trainlet build-bench/agent/trainlet [--pods 64] [--runs 4]

Starts --pods real agents (the leader first, then the members one after the
other, as bench/rendezvous.py does, trainer `date`) and prints, per run, times
relative to the last member's exec: when the last member logged "joining
leader", the first, median and last member's "rendezvous N ms" line, the
leader's own, and the last trainer's exec. A diagnostic for bench/HISTORY.md
(the rendezvous rows), not a benchmark row.
"""
import argparse
import datetime
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TRAINER = ["date", "+%s%N"]
STARTED = ["sh", "-c", 'date +%s%N >&2; exec "$@"', "pod"]
LINE = re.compile(r"\[trainlet pod\d+ (\S+) info\] (joining leader|rendezvous [\d.]+ ms)")


def stamp_ns(text):
    # spdlog's millisecond stamp: the middle of that millisecond
    return datetime.datetime.fromisoformat(text).timestamp() * 1e9 + 0.5e6


def once(binary, n):
    rdzv, master = common.free_ports(2)
    procs = []
    try:
        procs.append(subprocess.Popen(common.agent_argv(binary, 0, n, rdzv, master, TRAINER,
                                                        log_level="info"),
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      env=common.ENV))
        common.wait_listening(rdzv, procs[0])
        for i in range(1, n):
            procs.append(subprocess.Popen(STARTED + common.agent_argv(binary, i, n, rdzv, master,
                                                                      TRAINER, log_level="info"),
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          env=common.ENV))
        outs = [p.communicate(timeout=120) for p in procs]
    finally:
        common.kill_all(procs, 9)
        common.reap(procs, 5)
    t_last = max(int(common.STAMP.search(err).group(1)) for _, err in outs[1:])
    joins, assigned, trainers = [], [], []
    for i, (out, err) in enumerate(outs):
        seen = {m.group(2).split()[0]: stamp_ns(m.group(1))
                for m in LINE.finditer(err.decode(errors="replace"))}
        if "rendezvous" not in seen:
            raise RuntimeError(f"agent {i} logged no assignment: {err.decode()[-300:]}")
        if i > 0:
            joins.append((seen["joining"] - t_last) / 1e6)
        assigned.append((seen["rendezvous"] - t_last) / 1e6)
        trainers.append((int(common.STAMP.findall(out)[0]) - t_last) / 1e6)
    members = assigned[1:]
    print(f"last join {max(joins):.1f} ms; members assigned: first {min(members):.1f}, "
          f"median {statistics.median(members):.1f}, last {max(members):.1f} ms; "
          f"leader {assigned[0]:.1f} ms; last trainer exec {max(trainers):.1f} ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainlet", required=True)
    ap.add_argument("--pods", type=int, default=64)
    ap.add_argument("--runs", type=int, default=4)
    a = ap.parse_args()
    for _ in range(a.runs):
        once(os.path.abspath(a.trainlet), a.pods)


if __name__ == "__main__":
    main()
