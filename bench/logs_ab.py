#!/usr/bin/python3
"""Log forwarding, two trainlet binaries side by side (before/after a change).

  bench/logs_ab.py --before BIN_A --after BIN_B --linegen build/bench/trainlet-linegen \
      [--bytes 536870912] [--workers 2] [--rounds 8] [--dir /dev/shm]

Each round runs bench/logs.py's measurement once per binary (a direct run, a trainlet run and
a --tee run each), the two binaries in alternating order, so each pair is measured seconds
apart; reported: the median over rounds of after/before for forwarding throughput (MiB/s),
for the ratio to direct, for the CPU seconds of the trainlet run (workers
included), and for the agent's own CPU seconds, forwarding and --tee.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import logs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--linegen", required=True)
    ap.add_argument("--bytes", type=int, default=1 << 29)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--dir", default="/dev/shm")
    a = ap.parse_args()
    bins = {"before": os.path.abspath(a.before), "after": os.path.abspath(a.after)}
    rows = []
    for r in range(a.rounds):
        order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
        got = {}
        for name in order:
            got[name] = logs.run(bins[name], os.path.abspath(a.linegen), a.bytes, a.workers, 1,
                                 a.dir, log=lambda *_: None)
        rows.append(got)
    def paired(f):
        return common.stats([f(g["after"]) / f(g["before"]) for g in rows])
    out = {
        "rounds": a.rounds, "bytes": a.bytes, "workers": a.workers,
        "before_mib_s": common.stats([g["before"]["trainlet_mib_s"]["median"] for g in rows]),
        "after_mib_s": common.stats([g["after"]["trainlet_mib_s"]["median"] for g in rows]),
        "after_over_before_mib_s": paired(lambda x: x["trainlet_mib_s"]["median"]),
        "after_over_before_ratio_to_direct": paired(lambda x: x["ratio"]),
        "after_over_before_cpu_s": paired(lambda x: x["trainlet_cpu_s"]["median"]),
        "after_over_before_tee_mib_s": paired(lambda x: x["files_mib_s"]["median"]),
        # The agent's own CPU seconds (logs.timed), forwarding and --tee: what
        # a change to the agent moves, much less than the wall clock by the
        # machine's other load.
        "before_agent_cpu_s": common.stats([g["before"]["agent_cpu_s"]["median"] for g in rows]),
        "after_agent_cpu_s": common.stats([g["after"]["agent_cpu_s"]["median"] for g in rows]),
        "after_over_before_agent_cpu_s": paired(lambda x: x["agent_cpu_s"]["median"]),
        "before_tee_agent_cpu_s": common.stats(
            [g["before"]["files_agent_cpu_s"]["median"] for g in rows]),
        "after_tee_agent_cpu_s": common.stats(
            [g["after"]["files_agent_cpu_s"]["median"] for g in rows]),
        "after_over_before_tee_agent_cpu_s": paired(lambda x: x["files_agent_cpu_s"]["median"]),
        "all_complete": all(g[n]["all_complete"] and g[n]["files_complete"]
                            for g in rows for n in g),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
