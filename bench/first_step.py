#!/usr/bin/python3
"""Time to the first training step, trainlet against torchrun, interleaved (issue 31):

    bench/first_step.py TRAINLET [PAIRS] [PYTHON]

Each run starts a real torch trainer (import torch, init a gloo process group, one
all-reduce step) with --standalone --nproc-per-node 2 under `TRAINLET` and under `PYTHON -m
torch.distributed.run` (torchrun), both with --redirects 1 --tee 2 (torch 1.13's torchrun needs --redirects on
Python 3.11; the trainer's line goes to stderr, teed to the console),
the two in turns (which goes first alternates), after one warm-up of each. A run's time is
from just before the launcher's exec to rank 0's first step (its clock after the
all-reduce). Prints each launcher's median and range, the medians of each phase (launch to
the trainer's first line, `import torch`, `init_process_group`, the step), the ratio
trainlet/torchrun, and the worker environment that differs between the two.
PYTHON defaults to /usr/bin/python3 (Debian's torch 1.13); scripts/install-torch puts a torch
2.x at /opt/trainlet-torch/bin/python.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

TRAINER = r"""
import os, sys, time, json
t_main = time.time_ns()
import torch
t_import = time.time_ns()
import torch.distributed as dist
dist.init_process_group("gloo")
t_init = time.time_ns()
x = torch.ones(1 << 16)
dist.all_reduce(x)
t_step = time.time_ns()
if dist.get_rank() == 0:
    keys = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TORCH_NUM_THREADS",
            "PYTHONUNBUFFERED", "CUDA_VISIBLE_DEVICES", "LOCAL_WORLD_SIZE")
    env = {k: os.environ.get(k) for k in keys}
    print("BENCH " + json.dumps({"main": t_main, "import": t_import, "init": t_init,
                                 "step": t_step, "threads": torch.get_num_threads(),
                                 "affinity": len(os.sched_getaffinity(0)), "env": env}),
          file=sys.stderr, flush=True)
"""


def run(cmd, t_env):
    t0 = time.time_ns()
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=t_env,
                         timeout=600).stdout.decode(errors="replace")
    for line in out.splitlines():
        at = line.find("BENCH ")
        if at >= 0:
            r = json.loads(line[at + 6:])
            return {"total": (r["step"] - t0) / 1e6, "launch": (r["main"] - t0) / 1e6,
                    "import": (r["import"] - r["main"]) / 1e6,
                    "init": (r["init"] - r["import"]) / 1e6,
                    "step": (r["step"] - r["init"]) / 1e6, "threads": r["threads"],
                    "affinity": r["affinity"], "env": r["env"]}
    raise RuntimeError(f"no BENCH line from {cmd[0]}:\n{out[-2000:]}")


def main():
    trainlet = os.path.abspath(sys.argv[1])
    pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    python = sys.argv[3] if len(sys.argv) > 3 else "/usr/bin/python3"
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "first_step.py")
        with open(script, "w") as f:
            f.write(TRAINER)
        env = {"PATH": os.path.dirname(python) + ":/usr/bin:/bin", "HOME": d}
        cmds = {
            "torchrun": [python, "-m", "torch.distributed.run", "--standalone",
                         "--nproc_per_node", "2", "--redirects", "1", "--tee", "2", "--log_dir",
                         os.path.join(d, "tr"), script],
            "trainlet": [trainlet, "--standalone", "--nproc_per_node", "2", "--redirects", "1",
                         "--tee", "2", "--log_dir", os.path.join(d, "tl"), "--log-level", "warn",
                         "--python", python, script],
        }
        for name in cmds:  # warm-up: page cache, .pyc files
            run(cmds[name], env)
        res = {name: [] for name in cmds}
        for i in range(pairs):
            order = list(cmds) if i % 2 == 0 else list(reversed(cmds))
            for name in order:
                res[name].append(run(cmds[name], env))
    for name, rs in res.items():
        tot = [r["total"] for r in rs]
        phases = {p: statistics.median(r[p] for r in rs) for p in ("launch", "import", "init", "step")}
        print(f"{name}: median {statistics.median(tot):.0f} ms, range {min(tot):.0f}-{max(tot):.0f}, "
              f"n={len(tot)}; phases (medians, ms): " +
              ", ".join(f"{p} {v:.0f}" for p, v in phases.items()) +
              f"; torch threads {rs[0]['threads']}, cpus {rs[0]['affinity']}, env {rs[0]['env']}")
    m = {name: statistics.median(r["total"] for r in rs) for name, rs in res.items()}
    print(f"ratio trainlet/torchrun (medians): {m['trainlet'] / m['torchrun']:.3f}")


if __name__ == "__main__":
    main()
