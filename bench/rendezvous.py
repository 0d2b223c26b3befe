#!/usr/bin/python3
"""Rendezvous time: the last pod started -> every pod has its assignment.

  bench/rendezvous.py --trainlet build/agent/trainlet --loadgen build/bench/trainlet-loadgen \
      [--sizes 8,64,512,4096] [--real 64] [--runs 5] [--torchrun-sizes 8,64]
  bench/rendezvous.py ... --scale 12500      # the scale row: one leader + load generator

Up to --real pods are real trainlet agents on this machine (the leader, index 0,
first; then the members, spawned one after the other); the rest are simulated by
trainlet-loadgen, started last, which opens one connection per pod and speaks the
wire protocol (bench/src/loadgen.cc). "Last pod started" is the later of: the
last agent's exec (stamped by a `sh` wrapper just before it execs trainlet), and
the moment the load generator had initiated all of its connections. "Every pod
has its assignment" is the latest of: each real agent's log line "rendezvous N
ms: generation ..." (spdlog's millisecond stamp, taken as the middle of that
millisecond) and the load generator's last assignment received. Also reported:
until every trainer has been exec'd (`date +%s%N`), which adds the spawn of up
to 64 trainers on this machine's cores.
torchrun: N `torchrun --rdzv_backend c10d` processes, the same trainer; the
figure is measured the same way (its interpreter start is part of "started").
Scale: one real leader, everything else from the load generator; the time from
the load generator's start (all 12,499 connections at once) to its last
assignment, and the leader's peak RSS (VmHWM) and RSS after the rendezvous.
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

TRAINER = ["date", "+%s%N"]
# "A pod started": the moment just before its launcher is exec'd, stamped by the
# wrapper on stderr (so the harness's own fork latency is not counted).
STARTED = ["sh", "-c", 'date +%s%N >&2; exec "$@"', "pod"]


def trainlet_once(binary, loadgen, n, real):
    rdzv, master = common.free_ports(2)
    real = min(n, real)
    procs = []
    try:
        leader = subprocess.Popen(common.agent_argv(binary, 0, n, rdzv, master, TRAINER,
                                                    log_level="info"),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=common.ENV)
        procs.append(leader)
        common.wait_listening(rdzv, leader)
        t_last = 0
        for i in range(1, real):
            procs.append(subprocess.Popen(STARTED + common.agent_argv(binary, i, n, rdzv, master,
                                                                      TRAINER, log_level="info"),
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          env=common.ENV))
        lg = None
        if n > real:
            lg = subprocess.Popen(common.loadgen_argv(loadgen, rdzv, n, real, n - real,
                                                      master_port=master),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        outs = [p.communicate(timeout=180) for p in procs]
        stamps, codes, assigned = [], [p.returncode for p in procs], []
        for out, err in outs[1:]:
            t_last = max(t_last, int(common.STAMP.search(err).group(1)))
        for out, err in outs:
            a = common.assigned_ns(err.decode(errors="replace"))
            if a is None:
                raise RuntimeError(f"an agent did not log its assignment: {err.decode()[-300:]}")
            assigned.append(a)
            s = common.STAMP.findall(out)
            if len(s) != 1:
                raise RuntimeError(f"an agent printed {len(s)} stamps; exit codes {codes}; "
                                   f"stderr: {err.decode()[-500:]}")
            stamps.append(int(s[0]))
        if any(codes):
            raise RuntimeError(f"agents exited {codes}")
        end = max(stamps[1:] or stamps)
        end_assigned = max(assigned)
        retries = 0
        if lg is not None:
            out, err = lg.communicate(timeout=180)
            r = json.loads(out.strip().splitlines()[-1])
            if lg.returncode != 0:
                raise RuntimeError(f"loadgen: {r} {err[-500:]}")
            t_last = max(t_last, r["last_started_ns"])
            end = max(end, r["all_assigned_ns"])
            end_assigned = max(end_assigned, r["all_assigned_ns"])
            retries = r["retries"]
        return (end_assigned - t_last) / 1e6, (end - t_last) / 1e6, retries
    finally:
        common.kill_all(procs, 9)
        common.reap(procs, 5)


def torchrun_once(n, timeout=600):
    port = common.free_port()
    procs = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen(STARTED + common.torchrun_argv(n, port, TRAINER),
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          env=common.ENV))
        deadline = time.monotonic() + timeout
        outs = [p.communicate(timeout=max(1, deadline - time.monotonic())) for p in procs]
        t_last = max(int(common.STAMP.search(err).group(1)) for _, err in outs)
        stamps = [int(s) for out, _ in outs for s in common.STAMP.findall(out)]
        if len(stamps) != n:
            raise RuntimeError(f"torchrun: {len(stamps)} of {n} trainers ran")
        return (max(stamps) - t_last) / 1e6
    finally:
        common.kill_all(procs, 9)
        common.reap(procs, 5)


def scale_once(binary, loadgen, n):
    rdzv, master = common.free_ports(2)
    leader = subprocess.Popen(common.agent_argv(binary, 0, n, rdzv, master, ["sleep", "60"]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=common.ENV)
    lg = None
    try:
        common.wait_listening(rdzv, leader)
        lg = subprocess.Popen(common.loadgen_argv(loadgen, rdzv, n, 1, n - 1, report_after_ms=-1,
                                                  master_port=master),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = lg.stdout.readline()
        if not line.startswith("assigned"):
            raise RuntimeError(f"loadgen: {line} {lg.stderr.read()[-500:]}")
        time.sleep(1.0)  # heartbeats flowing: steady state
        rss, hwm, pss = common.memory(leader.pid)
        leader.terminate()  # the gang stops: Stop to every member, the load generator exits
        out, _ = lg.communicate(timeout=60)
        r = json.loads(out.strip().splitlines()[-1])
        return {"burst_ms": (r["all_assigned_ns"] - r["started_ns"]) / 1e6,
                "last_started_ms": (r["all_assigned_ns"] - r["last_started_ns"]) / 1e6,
                "retries": r["retries"], "rss_kib": rss, "hwm_kib": hwm, "pss_kib": pss}
    finally:
        common.kill_all([p for p in (leader, lg) if p], 9)
        common.reap([p for p in (leader, lg) if p], 5)


def run(binary, loadgen, sizes, real, runs, torchrun_sizes, torchrun_runs, log=print):
    rows = []
    for n in sizes:
        xs, xt, retries = [], [], 0
        for _ in range(runs if n <= 64 else max(1, runs // 2 + 1)):
            ms, mt, r = trainlet_once(binary, loadgen, n, real)
            xs.append(ms)
            xt.append(mt)
            retries += r
        row = {"pods": n, "real_agents": min(n, real), "trainlet": common.stats(xs),
               "trainlet_trainers": common.stats(xt), "loadgen_retries": retries,
               "torchrun": None}
        if n in torchrun_sizes:
            try:
                ts = [torchrun_once(n) for _ in range(torchrun_runs if n <= 8 else 1)]
                row["torchrun"] = common.stats(ts)
            except Exception as e:  # noqa: BLE001 - a failing torchrun is a result here
                row["torchrun_error"] = str(e)[:200]
        log(f"rendezvous {n} pods: trainlet {common.fmt_ms(row['trainlet'], 2)} (trainers "
            f"{common.fmt_ms(row['trainlet_trainers'], 1)}); "
            f"torchrun {common.fmt_ms(row['torchrun'])}")
        rows.append(row)
    return rows


def run_scale(binary, loadgen, n, runs, log=print):
    res = [scale_once(binary, loadgen, n) for _ in range(runs)]
    out = {"pods": n, "burst": common.stats([r["burst_ms"] for r in res]),
           "last_started": common.stats([r["last_started_ms"] for r in res]),
           "retries": sum(r["retries"] for r in res),
           "rss_kib": max(r["rss_kib"] for r in res), "hwm_kib": max(r["hwm_kib"] for r in res),
           "pss_kib": max(r["pss_kib"] for r in res)}
    log(f"scale {n} pods: {common.fmt_ms(out['burst'])}, leader RSS {out['rss_kib'] / 1024:.1f} "
        f"MiB, peak {out['hwm_kib'] / 1024:.1f} MiB, retries {out['retries']}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainlet", required=True)
    ap.add_argument("--loadgen", required=True)
    ap.add_argument("--sizes", default="8,64,512,4096")
    ap.add_argument("--real", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--torchrun-sizes", default="8,64")
    ap.add_argument("--torchrun-runs", type=int, default=3)
    ap.add_argument("--scale", type=int, default=0)
    a = ap.parse_args()
    binary, loadgen = os.path.abspath(a.trainlet), os.path.abspath(a.loadgen)
    if a.scale:
        print(json.dumps(run_scale(binary, loadgen, a.scale, a.runs)))
        return
    sizes = [int(x) for x in a.sizes.split(",")]
    tsizes = [int(x) for x in a.torchrun_sizes.split(",") if x]
    print(json.dumps(run(binary, loadgen, sizes, a.real, a.runs, tsizes, a.torchrun_runs)))


if __name__ == "__main__":
    main()
