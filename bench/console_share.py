#!/usr/bin/python3
"""Ranks sharing a slow console: how evenly the lines of workers that write without pause
reach a reader that takes less than they write.

  bench/console_share.py --trainlet build/agent/trainlet [--workers 3] [--seconds 5] [--runs 3]
      [--read-bytes 4096] [--pause-ms 1]

One pod with --workers workers, each `yes` with a 99-byte line. trainlet's stdout is a pipe
this script reads --read-bytes at a time with a --pause-ms pause between reads (a console
slower than the workers), for --seconds; then trainlet gets SIGTERM. Reported per run: the
lines each rank got, and the smallest rank's share of all lines (1/workers is an even share).
This was pump_test's RanksSharingASlowPipeEachGetTheirShare, which asserted a fifth for each
of three ranks: on a loaded machine the threads do not get the CPU evenly, so the unit test
now checks the turn order (OutputTurnsTest) and that every rank gets through, and the share is
measured here, on the machine one cares about.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def one_run(binary, workers, seconds, read_bytes, pause_s):
    argv = [binary, "--nproc-per-node", str(workers), "--log-level", "warn", "--grace-period",
            "2", "--", "yes", "x" * 98]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=common.ENV)
    got = bytearray()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        got += os.read(p.stdout.fileno(), read_bytes)
        time.sleep(pause_s)
    p.send_signal(signal.SIGTERM)
    # Drain so the agent can finish; these lines are not counted.
    while os.read(p.stdout.fileno(), 1 << 16):
        pass
    p.wait(30)
    lines = {}
    for line in bytes(got).split(b"\n")[:-1]:
        key = line[:line.find(b"]") + 1].decode()
        lines[key] = lines.get(key, 0) + 1
    total = sum(lines.values())
    least = min((lines.get(f"[rank{r}]", 0) for r in range(workers)), default=0)
    return {"lines": lines, "total": total, "least_share": least / total if total else 0.0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainlet", required=True)
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--read-bytes", type=int, default=4096)
    ap.add_argument("--pause-ms", type=float, default=1)
    a = ap.parse_args()
    runs = [one_run(os.path.abspath(a.trainlet), a.workers, a.seconds, a.read_bytes,
                    a.pause_ms / 1000) for _ in range(a.runs)]
    shares = [r["least_share"] for r in runs]
    print(json.dumps({"workers": a.workers, "even_share": 1 / a.workers,
                      "least_share": common.stats(shares), "runs": runs}))


if __name__ == "__main__":
    main()
