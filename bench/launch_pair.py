#!/usr/bin/python3
"""Launch overhead of two trainlet binaries side by side (before/after a change):
    bench/launch_pair.py BEFORE AFTER RUNS
exec of the launcher -> exec of `date +%s%N`, interleaved, after 3 warm-ups; medians."""
import os, re, statistics, subprocess, sys, time
def once(cmd):
    env = {"PATH": "/usr/bin:/bin"}
    t0 = time.time_ns()
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, check=True).stdout
    return (int(re.search(rb"(\d{19})", out).group(1)) - t0) / 1e6
bins = sys.argv[1:3]; runs = int(sys.argv[3])
res = {b: [] for b in bins}
for _ in range(3):
    for b in bins: once([b, "--log-level", "warn", "--", "date", "+%s%N"])
for _ in range(runs):
    for b in bins: res[b].append(once([b, "--log-level", "warn", "--", "date", "+%s%N"]))
for b in bins:
    print(f"{b}: median {statistics.median(res[b]):.2f} ms, range {min(res[b]):.2f}-{max(res[b]):.2f}, n={runs}")
print(f"ratio after/before (medians): {statistics.median(res[bins[1]]) / statistics.median(res[bins[0]]):.3f}")
