#!/usr/bin/python3
"""Log forwarding: 1 GiB of lines from the workers through the agent, vs the same to a file.

  bench/logs.py --trainlet build/agent/trainlet --linegen build/bench/trainlet-linegen \
      [--bytes 1073741824] [--workers 2] [--runs 3] [--dir /dev/shm] [--files tee|redirects]

Each of --workers workers (trainlet-linegen write) writes bytes/workers of numbered
100-byte lines in 64 KiB blocks. Direct: the same workers started by `sh`, all
writing to one file. Through trainlet: one pod with --workers workers; the agent
reads each worker's pipe, prefixes every line with "[rankN]: " and writes the
lines to its own stdout, the same kind of file. Throughput = the workers' bytes /
wall time. Also reported: the agent's own CPU seconds (its threads, not the
workers'), the figure a change to the agent moves. Every output is then checked (trainlet-linegen check): each worker's
sequence complete and in order, no line torn. Runs interleaved, a direct run
then a trainlet run, so each pair's ratio compares runs made seconds apart;
the reported ratio is the median of those paired ratios. Also reported: the CPU
seconds (user + system, of every process of the run) each way takes. The file
lives in --dir (tmpfs by default, so the disk does not set the pace).
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

LINE = 100


def own_cpu_s(pid):
    """User + system seconds of process `pid`'s own threads, its children not
    counted (proc(5), /proc/PID/stat utime and stime); read while it is a zombie."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(argv, path, env=None):
    """Wall seconds, CPU seconds (user + system of the whole process tree) and
    the CPU seconds of the first process alone (for trainlet: the agent, its
    pump threads included, without the workers)."""
    with open(path, "wb") as out:
        r0 = os.times()
        t0 = time.monotonic_ns()
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL, env=env)
        os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped
        dt = (time.monotonic_ns() - t0) / 1e9
        own = own_cpu_s(p.pid)
        p.wait()
        r1 = os.times()
    if p.returncode != 0:
        raise RuntimeError(f"{argv[:3]} exited {p.returncode}")
    return dt, (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system), own


def check(linegen, path, workers):
    with open(path, "rb") as f:
        p = subprocess.run([linegen, "check", str(LINE), str(workers)], stdin=f,
                           stdout=subprocess.PIPE, text=True)
    r = json.loads(p.stdout)
    r["ok"] = p.returncode == 0
    return r


def run(binary, linegen, total, workers, runs, directory, log=print, files_flag="--tee"):
    per = total // workers // LINE * LINE
    expected = per // LINE
    path = os.path.join(directory, f"trainlet-bench-logs-{os.getpid()}")
    direct_sh = " ".join(f"RANK={r} {linegen} write {per} {LINE} &" for r in range(workers))
    direct = ["sh", "-c", direct_sh + " wait"]
    through = [binary, "--nproc-per-node", str(workers), "--log-level", "warn", "--", linegen,
               "write", str(per), str(LINE)]
    # torchrun's per-rank log files too (--tee 3 --log-dir, in the same tmpfs).
    log_dir = os.path.join(directory, f"trainlet-bench-logdir-{os.getpid()}")
    files = [binary, "--nproc-per-node", str(workers), "--log-level", "warn", files_flag, "3",
             "--log-dir", log_dir, "--", linegen, "write", str(per), str(LINE)]
    res = {"direct": [], "trainlet": [], "files": []}
    cpu = {"direct": [], "trainlet": [], "files": []}
    own = {"direct": [], "trainlet": [], "files": []}  # the first process's own CPU s
    checks = {"direct": [], "trainlet": [], "files": []}
    file_bytes = []
    try:
        for _ in range(runs):
            for name, argv in (("direct", direct), ("trainlet", through), ("files", files)):
                dt, cpu_s, own_s = timed(argv, path, common.ENV)
                res[name].append(per * workers / dt / 2**20)  # MiB/s
                cpu[name].append(cpu_s)
                own[name].append(own_s)
                if name == "files" and files_flag == "--redirects":  # nothing on the console
                    checks[name].append({"ok": os.path.getsize(path) == 0, "lost": 0})
                    os.unlink(path)
                    file_bytes.append(sum(os.path.getsize(os.path.join(d, f))
                                          for d, _, fs in os.walk(log_dir) for f in fs))
                    subprocess.run(["rm", "-rf", log_dir], check=True)
                    continue
                c = check(linegen, path, workers)
                c["lost"] = expected - c["complete_lines_per_source"]
                checks[name].append(c)
                os.unlink(path)
                if name == "files":  # every byte of every worker is in its stdout.log
                    file_bytes.append(sum(os.path.getsize(os.path.join(d, f))
                                          for d, _, fs in os.walk(log_dir) for f in fs))
                    subprocess.run(["rm", "-rf", log_dir], check=True)
    finally:
        if os.path.exists(path):
            os.unlink(path)
        subprocess.run(["rm", "-rf", log_dir], check=False)
    out = {"bytes": per * workers, "workers": workers,
           "direct_mib_s": common.stats(res["direct"]),
           "trainlet_mib_s": common.stats(res["trainlet"]),
           "direct_cpu_s": common.stats(cpu["direct"]),
           "trainlet_cpu_s": common.stats(cpu["trainlet"]),
           "agent_cpu_s": common.stats(own["trainlet"]),
           "paired_ratios": [t / d for d, t in zip(res["direct"], res["trainlet"])],
           "lines_expected_per_worker": expected,
           "all_complete": all(c["ok"] and c["lost"] == 0 for c in checks["trainlet"] + checks["direct"]),
           "checks": checks}
    out["ratio_of_medians"] = out["trainlet_mib_s"]["median"] / out["direct_mib_s"]["median"]
    out["ratio"] = common.stats(out["paired_ratios"])["median"]
    out["files_mib_s"] = common.stats(res["files"])
    out["files_cpu_s"] = common.stats(cpu["files"])
    out["files_agent_cpu_s"] = common.stats(own["files"])
    # The cost of the files: --tee 3 --log-dir against plain forwarding, paired.
    out["files_ratio"] = common.stats([f / t for t, f in zip(res["trainlet"], res["files"])])["median"]
    out["files_complete"] = all(b == per * workers for b in file_bytes) and all(
        c["ok"] and c["lost"] == 0 for c in checks["files"])
    log(f"logs: direct {out['direct_mib_s']['median']:.0f} MiB/s, trainlet "
        f"{out['trainlet_mib_s']['median']:.0f} MiB/s; paired ratio {out['ratio'] * 100:.0f} % "
        f"(of medians {out['ratio_of_medians'] * 100:.0f} %); CPU s "
        f"{out['direct_cpu_s']['median']:.2f} vs {out['trainlet_cpu_s']['median']:.2f}; "
        f"complete: {out['all_complete']}; with {files_flag} 3 --log-dir {out['files_mib_s']['median']:.0f} "
        f"MiB/s = {out['files_ratio'] * 100:.0f} % of forwarding, files complete: "
        f"{out['files_complete']}")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainlet", required=True)
    ap.add_argument("--linegen", required=True)
    ap.add_argument("--bytes", type=int, default=1 << 30)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--files", default="tee", choices=["tee", "redirects"],
                    help="the files run: --tee 3 (files and console) or --redirects 3 (files only)")
    a = ap.parse_args()
    print(json.dumps(run(os.path.abspath(a.trainlet), os.path.abspath(a.linegen), a.bytes,
                         a.workers, a.runs, a.dir, files_flag="--" + a.files)))


if __name__ == "__main__":
    main()
