#!/usr/bin/python3
"""Probe latency while strangers hold the health port (issue 24).

  bench/probes.py --trainlet build/agent/trainlet [--seconds 30] [--slow 200] [--idle 1000]

One agent (--nnodes 1, --health-port, a worker that sleeps) on loopback. A
kubelet-style probe (tests/e2e/probe_load.py probe: a fresh connection, GET /livez or
/readyz, read to the close, 1 s timeout) every 100 ms from 127.0.0.1 for --seconds, in
three rounds: nothing else connected; --slow connections from 127.0.0.2 each sending
a byte every 0.8 s (a slowloris, reopened as soon as the agent drops one); --idle
connections from 127.0.0.2 sending nothing (reopened likewise). Per round: probes
answered 200 within 1 s, median / p99 / max in ms, connections the flood had dropped,
and the agent's VmHWM. No root needed (127.0.0.2 is loopback too).
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

PROBE_LOAD = os.path.join(os.path.dirname(HERE), "tests", "e2e", "probe_load.py")
TRAINER = ["sh", "-c", "echo started; exec sleep 600"]


def percentile(sorted_xs, q):
    return sorted_xs[min(len(sorted_xs) - 1, int(len(sorted_xs) * q))] if sorted_xs else None


def round_(port, seconds, mode=None, conns=0):
    """One round: (probe results, flood counts or None)."""
    flood = None
    if mode:
        flood = subprocess.Popen([common.PYTHON, PROBE_LOAD, "flood", "127.0.0.1", str(port),
                                  "--conns", str(conns), "--mode", mode, "--interval", "0.8",
                                  "--source", "127.0.0.2"],
                                 stdout=subprocess.PIPE, text=True)
        if flood.stdout.readline().strip() != "ready":
            raise RuntimeError("the flood did not get its connections")
    try:
        out = subprocess.run([common.PYTHON, PROBE_LOAD, "probe", "127.0.0.1", str(port),
                              "--every", "0.1", "--seconds", str(seconds), "--timeout", "1"],
                             stdout=subprocess.PIPE, text=True, check=True).stdout
    finally:
        counts = None
        if flood:
            flood.terminate()
            counts = json.loads(flood.communicate(timeout=30)[0].strip().splitlines()[-1])
    return json.loads(out), counts


def run(binary, seconds, slow, idle, log=print):
    rdzv, master, health = common.free_ports(3)
    agent = subprocess.Popen(common.agent_argv(binary, 0, 1, rdzv, master, TRAINER,
                                               extra=("--health-port", str(health))),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=common.ENV)
    rows = []
    try:
        if b"started" not in agent.stdout.readline():
            raise RuntimeError("the agent's trainer did not start")
        common.wait_listening(health, agent)
        for name, mode, conns in (("none", None, 0), (f"{slow} slow", "slow", slow),
                                  (f"{idle} idle", "idle", idle)):
            results, counts = round_(health, seconds, mode, conns)
            ms = sorted(r[2] for r in results if r[1] == 200)
            row = {"load": name, "probes": len(results), "ok": len(ms),
                   "median_ms": percentile(ms, 0.5), "p99_ms": percentile(ms, 0.99),
                   "max_ms": ms[-1] if ms else None,
                   "dropped": counts["dropped"] if counts else 0,
                   "vmhwm_kib": common.memory(agent.pid)[1]}
            rows.append(row)
            ms_of = {k: "-" if row[k] is None else f"{row[k]:.2f}"
                     for k in ("median_ms", "p99_ms", "max_ms")}
            log(f"probes, {name}: {row['ok']}/{row['probes']} answered 200 within 1 s, median "
                f"{ms_of['median_ms']} ms, p99 {ms_of['p99_ms']} ms, max {ms_of['max_ms']} ms; "
                f"flood connections dropped {row['dropped']}; agent VmHWM {row['vmhwm_kib']} KiB")
        return rows
    finally:
        common.kill_all([agent], 15)
        common.reap([agent])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trainlet", required=True)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--slow", type=int, default=200)
    p.add_argument("--idle", type=int, default=1000)
    p.add_argument("--json", help="also write the rows here")
    a = p.parse_args()
    rows = run(os.path.abspath(a.trainlet), a.seconds, a.slow, a.idle)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
