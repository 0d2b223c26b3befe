#!/usr/bin/python3
"""The portable release build beside the native one, in one run (rows launch and memory).

  bench/portable.py --native build/agent/trainlet --portable build-portable/x86_64/agent/trainlet \
      --loadgen build/bench/trainlet-loadgen [--runs 50] [--memory-runs 5]

launch: exec of the launcher -> exec of `date +%s%N` (bench/launch.py's measure), and
`--version` (process start alone), both builds interleaved run by run. Beside the wall
times, each process's CPU time (user + system) and minor page faults from wait4(2)'s
rusage (the launcher with the trainer it reaped): on a shared, loaded machine these barely
move with the load, where wall times do.
memory: VmRSS/PSS/RssAnon of the leader and a member once heartbeats flow (bench/memory.py's
measure; RssAnon leaves out the shared file pages of the executable and libc), by default
2 pods (both real agents) and 64 pods (8 real agents + loadgen
connections), the builds alternating. Prints medians and portable/native ratios; JSON with --json.
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
import launch  # noqa: E402
import memory  # noqa: E402


def usage_once(cmd):
    """(stdout, wall ms from exec to exit, CPU ms, minor faults) of one run of cmd."""
    t0 = time.time_ns()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=common.ENV)
    out = p.stdout.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = (time.time_ns() - t0) / 1e6
    p.returncode = os.waitstatus_to_exitcode(status)
    p.stdout.close()
    if p.returncode != 0:
        raise RuntimeError(f"{cmd} exited {p.returncode}")
    return out, wall, (ru.ru_utime + ru.ru_stime) * 1e3, ru.ru_minflt


def bench_launch(builds, runs):
    trainer = ["date", "+%s%N"]
    rows = ("launch_ms", "launch_cpu_ms", "launch_minflt", "version_ms", "version_cpu_ms",
            "version_minflt")
    r = {row: {k: [] for k in builds} for row in rows}
    for _ in range(3):
        for b in builds.values():
            launch.once([b, "--log-level", "warn", "--"] + trainer)
    for _ in range(runs):
        for k, b in builds.items():
            t0 = time.time_ns()
            out, _, cpu, flt = usage_once([b, "--log-level", "warn", "--"] + trainer)
            r["launch_ms"][k].append((int(common.STAMP.search(out).group(1)) - t0) / 1e6)
            r["launch_cpu_ms"][k].append(cpu)
            r["launch_minflt"][k].append(flt)
            _, wall, cpu, flt = usage_once([b, "--version"])
            r["version_ms"][k].append(wall)
            r["version_cpu_ms"][k].append(cpu)
            r["version_minflt"][k].append(flt)
    return {row: {k: common.stats(v) for k, v in r[row].items()} for row in rows}


MEMORY_FIELDS = ("leader_rss_kib", "member_rss_kib", "leader_pss_kib", "member_pss_kib",
                 "leader_anon_kib", "member_anon_kib")


def bench_memory(builds, loadgen, runs, sizes):
    out = {}
    for n, real in sizes:
        rows = {k: [] for k in builds}
        for _ in range(runs):
            for k, b in builds.items():
                rows[k].append(memory.once(b, loadgen, n, real))
        out[f"{n}_pods"] = {
            k: {f: statistics.median(r[f] for r in v) for f in MEMORY_FIELDS}
            for k, v in rows.items()}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--native", required=True)
    ap.add_argument("--portable", required=True)
    ap.add_argument("--loadgen", required=True)
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--memory-runs", type=int, default=5)
    ap.add_argument("--memory-sizes", default="2:2,64:8",
                    help="PODS:REAL_AGENTS,... (the rest of PODS are loadgen connections)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    builds = {"native": os.path.abspath(a.native), "portable": os.path.abspath(a.portable)}
    res = bench_launch(builds, a.runs)
    sizes = [tuple(int(x) for x in s.split(":")) for s in a.memory_sizes.split(",")]
    res["memory"] = bench_memory(builds, os.path.abspath(a.loadgen), a.memory_runs, sizes)
    res["binary_bytes"] = {k: os.path.getsize(b) for k, b in builds.items()}
    if a.json:
        print(json.dumps(res, indent=1))
        return
    print(f"launch ({a.runs} runs, interleaved): median ms, portable/native")
    for row in ("launch_ms", "launch_cpu_ms", "launch_minflt", "version_ms", "version_cpu_ms",
                "version_minflt"):
        n, p = res[row]["native"]["median"], res[row]["portable"]["median"]
        print(f"  {row:14s} native {n:7.2f}  portable {p:7.2f}  ratio {p / n:.3f}")
    print(f"memory ({a.memory_runs} runs each, alternating): median KiB, portable/native")
    for size, v in res["memory"].items():
        for f in MEMORY_FIELDS:
            n, p = v["native"][f], v["portable"][f]
            print(f"  {size:8s} {f:15s} native {n:8.0f}  portable {p:8.0f}  ratio {p / n:.3f}")
    print("binary bytes: " + ", ".join(f"{k} {v}" for k, v in res["binary_bytes"].items()))


if __name__ == "__main__":
    main()
