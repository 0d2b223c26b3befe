#!/usr/bin/python3
"""Hot spares, two trainlet binaries side by side: bench/spares.py's measurement (a lost
pod -> the spare's worker running with the lost pod's RANK; optionally today's fixed gang,
a lost pod -> the survivors' workers stopped), runs alternating A, B, A, B... so both see
the same machine load (other sessions share its 2 cores).

  bench/spares_ab.py --a OLD_BIN --b NEW_BIN [--pods 64] [--runs 5] [--fault freeze|kill]
                     [--survivors]

Prints one JSON object: per binary the stats (ms) of each figure, and of "restart": the
spare's worker running minus the first worker's SIGTERM trap in the same run (the leader's
Stop arriving), which leaves out the detection's spread (where the fault fell between the
lost pod's heartbeats); "since_last_frame": the spare's worker running minus the lost pod's own worker START, right
before its channel's first (and, frozen within one heartbeat interval, last) frame: detection
plus restart without the harness's lag between the gang's forming and the fault;
"started_before": how many of the next generation's other
workers had started before the spare's (the order of the leader's assignment writes).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import spares  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--pods", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--fault", choices=("freeze", "kill"), default="freeze")
    ap.add_argument("--survivors", action="store_true", help="also the fixed gang's figure")
    a = ap.parse_args()
    bins = {"a": os.path.abspath(a.a), "b": os.path.abspath(a.b)}
    kinds = [("spare", True)] + ([("survivors", False)] if a.survivors else [])
    names = [name for name, _ in kinds] + ["restart", "since_last_frame", "started_before"]
    got = {k: {name: [] for name in names} for k in bins}
    for i in range(a.runs):
        for name, spare in kinds:
            for k, binary in (bins.items() if i % 2 == 0 else reversed(bins.items())):
                d = {}
                ms = spares.once(binary, a.pods, spare, a.fault, detail=d)
                got[k][name].append(ms)
                extra = ""
                if "first_term" in d:
                    got[k]["restart"].append(ms - d["first_term"])
                    extra = (f" (first SIGTERM {d['first_term']:.1f} ms, restart "
                             f"{ms - d['first_term']:.1f} ms)")
                if "since_last_frame" in d:
                    got[k]["since_last_frame"].append(d["since_last_frame"])
                    extra += f"; {d['since_last_frame']:.1f} ms after the lost pod's last frame"
                if "started_before" in d:
                    got[k]["started_before"].append(d["started_before"])
                    extra += f"; {d['started_before']} worker(s) of the gang started before"
                print(f"run {i + 1} {k} {name}: {ms:.1f} ms{extra}", file=sys.stderr, flush=True)
    res = {"pods": a.pods, "fault": a.fault, "a": bins["a"], "b": bins["b"]}
    for k in bins:
        res[k] = {name: common.stats(xs) for name, xs in got[k].items() if xs}
        for name, st in res[k].items():
            shown = common.fmt_ms(st)
            if name == "started_before":
                shown = f"{st['median']} ({st['min']} – {st['max']}, n={st['n']})"
            print(f"{k} {name}: {shown}", file=sys.stderr)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
