#!/usr/bin/python3
"""The leader under hostile connections (the rendezvous side of faults and strangers).

  bench/wire_faults.py --trainlet build/agent/trainlet --loadgen build/bench/trainlet-loadgen \
      [--misaligned-s 60] [--idle 2000] [--runs 3]

misaligned: a 2-pod gang; the member (trainlet-loadgen --misaligned-s S) streams heartbeat
  frames for S seconds in writes of 4097 bytes, each ending one byte into a frame. The
  leader's VmRSS is sampled every second: the figure is its spread (max - min) from 5 s on
  (the first seconds free start-up buffers: RSS falls by ~1.5 MiB), and the bytes streamed. (Before the decoder compacted on every read the
  leader grew by ~17 MB/s here.)
idle: a 4-pod gang. Pod 1 joins (a load generator of its own); another opens --idle
  connections that never send a byte, each reopened as soon as the leader drops it; 3 s
  later a third one starts pods 2 and 3 (the last pods). The figure is the time from its start to its last
  assignment (the gang formed), with the leader's VmHWM and how often idle sockets were
  dropped and reopened.
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def misaligned_once(binary, loadgen, seconds):
    rdzv, master = common.free_ports(2)
    procs = []
    try:
        leader = subprocess.Popen(common.agent_argv(binary, 0, 2, rdzv, master,
                                                    ["sleep", str(seconds + 15)]),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  env=common.ENV)
        procs.append(leader)
        common.wait_listening(rdzv, leader)
        argv = common.loadgen_argv(loadgen, rdzv, 2, 1, 1, master_port=master,
                                   timeout_s=seconds + 30) + ["--misaligned-s", str(seconds)]
        lg = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs.append(lg)
        samples = []
        t_end = time.monotonic() + seconds
        time.sleep(1.0)  # the gang forms, the stream starts
        while time.monotonic() < t_end:
            samples.append(common.memory(leader.pid)[0])
            time.sleep(1.0)
        out, _ = lg.communicate(timeout=60)
        res = json.loads(out.decode().strip().splitlines()[-1])
        alive = leader.poll() is None
        steady = samples[5:]  # after 5 s: start-up buffers freed, the stream at full rate
        return {"rss_min_kib": min(steady), "rss_max_kib": max(steady),
                "rss_first_kib": samples[0], "rss_last_kib": samples[-1],
                "spread_kib": max(steady) - min(steady), "samples": len(steady),
                "streamed_mib": res["misaligned_bytes"] / 2**20, "leader_alive": alive,
                "loadgen_errors": res["errors"], "last_error": res["last_error"]}
    finally:
        common.kill_all(procs)
        common.reap(procs)


def idle_once(binary, loadgen, idle):
    rdzv, master = common.free_ports(2)
    procs = []
    try:
        leader = subprocess.Popen(common.agent_argv(binary, 0, 4, rdzv, master, ["true"]),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  env=common.ENV)
        procs.append(leader)
        common.wait_listening(rdzv, leader)
        # Pod 1 is a process of its own, as every real pod is: inside the
        # flood's process its hello would wait behind the flood's own handlers.
        first = subprocess.Popen(common.loadgen_argv(loadgen, rdzv, 4, 1, 1, master_port=master,
                                                     timeout_s=120),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs.append(first)
        flood = subprocess.Popen(common.loadgen_argv(loadgen, rdzv, 4, 1, 0, master_port=master,
                                                     timeout_s=120) + ["--idle", str(idle)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs.append(flood)
        time.sleep(3.0)  # every pending-handshake slot is taken, again and again
        last = subprocess.Popen(common.loadgen_argv(loadgen, rdzv, 4, 2, 2, master_port=master,
                                                    timeout_s=60),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs.append(last)
        out, _ = last.communicate(timeout=90)
        res = json.loads(out.decode().strip().splitlines()[-1])
        hwm = 0
        try:
            hwm = common.memory(leader.pid)[1]
        except (OSError, AttributeError):
            pass
        flood.send_signal(15)
        fout, _ = flood.communicate(timeout=30)
        fres = json.loads(fout.decode().strip().splitlines()[-1])
        first.send_signal(15)
        pout, _ = first.communicate(timeout=30)
        pres = json.loads(pout.decode().strip().splitlines()[-1])
        formed_ms = (res["all_assigned_ns"] - res["started_ns"]) / 1e6 \
            if res["all_assigned_ns"] else None
        return {"formed_ms": formed_ms, "leader_hwm_kib": hwm,
                "idle_reopens": fres["idle_reopens"], "pod1_assigned": pres["assigned"],
                "last_error": res["last_error"]}
    finally:
        common.kill_all(procs)
        common.reap(procs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainlet", required=True)
    ap.add_argument("--loadgen", required=True)
    ap.add_argument("--misaligned-s", type=int, default=60)
    ap.add_argument("--idle", type=int, default=2000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", choices=["misaligned", "idle"])
    a = ap.parse_args()
    binary, loadgen = os.path.abspath(a.trainlet), os.path.abspath(a.loadgen)
    out = {}
    if a.only in (None, "idle"):
        runs = [idle_once(binary, loadgen, a.idle) for _ in range(a.runs)]
        out["idle"] = {"runs": runs,
                       "formed": common.stats([r["formed_ms"] or 1e9 for r in runs]),
                       "hwm_kib_max": max(r["leader_hwm_kib"] for r in runs)}
        print(f"idle {a.idle}: gang formed {common.fmt_ms(out['idle']['formed'])} after its "
              f"last pods started; leader VmHWM max {out['idle']['hwm_kib_max'] / 1024:.1f} MiB; "
              f"reopens {[r['idle_reopens'] for r in runs]}", file=sys.stderr)
    if a.only in (None, "misaligned"):
        r = misaligned_once(binary, loadgen, a.misaligned_s)
        out["misaligned"] = r
        print(f"misaligned {a.misaligned_s} s: {r['streamed_mib']:.0f} MiB streamed, leader RSS "
              f"{r['rss_min_kib'] / 1024:.2f}-{r['rss_max_kib'] / 1024:.2f} MiB (spread "
              f"{r['spread_kib']} KiB, {r['samples']} samples from 5 s; first sample "
              f"{r['rss_first_kib'] / 1024:.2f} MiB), alive {r['leader_alive']}",
              file=sys.stderr)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
