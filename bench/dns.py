#!/usr/bin/python3
"""DNS: the leader's record published at the DNS server -> the member connected.

  bench/dns.py --trainlet build/agent/trainlet [--runs 5] [--wait 4]

Two simulated pods (tests/e2e/podsim.py: network/PID/UTS/mount namespaces and a
real dnsmasq with --neg-ttl=1 --local-ttl=1, as the end-to-end tests use). The
leader's record starts unpublished, so the member's lookups of trainer-0 get
NXDOMAIN and it backs off; after --wait s (its backoff has reached its cap) the
record is published (atomic rename into dnsmasq's --hostsdir, re-read through
inotify). The figure is the member's trainer exec (`date +%s%N`, which runs once
the member has connected, been admitted and got its assignment) minus the moment
just before publishing. Goal: <= 1 s beyond the DNS server's TTLs (1 s here).
Needs root.
"""
import argparse
import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
import common  # noqa: E402


def once(binary, wait):
    import podsim  # noqa: PLC0415 - needs root; only imported when the row runs
    with podsim.Cluster(pods=2) as c:
        c.publish(1)
        for i in (0, 1):
            c.start_pod(i, [binary, "--nnodes", "2", "--nproc-per-node", "1",
                            "--grace-period", "2", "--rdzv-timeout", "60", "--log-level", "info",
                            "--termination-log", os.path.join(c.workdir, f"tlog{i}"),
                            "--", "date", "+%s%N"])
        time.sleep(wait)
        t_pub = time.time_ns()
        c.publish(0)
        codes = [c.pods[i].wait(30) for i in (0, 1)]
        out = c.pods[1].stdout()
        stamps = re.findall(r"(\d{19})", out)
        if codes != [0, 0] or len(stamps) != 1:
            raise RuntimeError(f"dns: exits {codes}, member output {out[-300:]!r}")
        return (int(stamps[0]) - t_pub) / 1e6


def run(binary, runs, wait, log=print):
    xs = [once(binary, wait) for _ in range(runs)]
    out = {"publish_to_assigned": common.stats(xs), "ttl_s": 1, "wait_s": wait}
    log(f"dns: published -> member assigned {common.fmt_ms(out['publish_to_assigned'])}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainlet", required=True)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--wait", type=float, default=4.0)
    a = ap.parse_args()
    print(json.dumps(run(os.path.abspath(a.trainlet), a.runs, a.wait)))


if __name__ == "__main__":
    main()
