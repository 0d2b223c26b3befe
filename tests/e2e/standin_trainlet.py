#!/usr/bin/python3
"""A stand-in for the trainlet binary, so tests/e2e can be developed and tried without it:

    run_e2e.py --trainlet tests/e2e/standin_trainlet.py

It implements, simply, the part of trainlet's contract the e2e tests observe: the CLI,
node rank from JOB_COMPLETION_INDEX, leader derived from the pod's FQDN in /etc/hosts,
torchrun's worker env, `[rank<R>]: ` output prefixes, exit codes (0 / first failing
worker's code or 128+signal / 78 config / 75 leader never resolved / 143 after SIGTERM),
SIGTERM forwarding to each worker's process group with a grace period then SIGKILL,
and, as PID 1, reaping every zombie and stopping adopted orphans.

It has NO rendezvous between pods: it waits until the leader's name resolves (within
--rdzv-timeout), then starts the workers and lets torch's env:// TCPStore do the rest.
It is a test double, not a reference implementation; `trainlet local` is not supported.
"""

import argparse
import os
import re
import signal
import socket
import sys
import threading
import time

EXIT_CONFIG = 78
EXIT_INFRA = 75
EXIT_TERMINATED = 143


def log(msg):
    sys.stderr.write(f"trainlet-standin[{os.getpid()}]: {msg}\n")
    sys.stderr.flush()


def env_default(*names, default=None):
    for n in names:
        if os.environ.get(n):
            return os.environ[n]
    return default


def parse(argv):
    if "--" not in argv:
        log("usage: trainlet [flags] -- cmd args...")
        sys.exit(EXIT_CONFIG)
    cut = argv.index("--")
    flags, cmd = argv[:cut], argv[cut + 1:]
    p = argparse.ArgumentParser(prog="trainlet-standin")
    p.add_argument("--nnodes", type=int,
                   default=env_default("PET_NNODES", "TRAINLET_NNODES", default="1"))
    p.add_argument("--nproc-per-node", type=int,
                   default=env_default("PET_NPROC_PER_NODE", default="1"))
    p.add_argument("--node-rank", type=int,
                   default=env_default("JOB_COMPLETION_INDEX", "PET_NODE_RANK"))
    p.add_argument("--master-addr")
    p.add_argument("--rdzv-port", type=int, default=29400)
    p.add_argument("--master-port", type=int, default=29500)
    p.add_argument("--rdzv-timeout", type=float, default=600)
    p.add_argument("--grace-period", type=float, default=25)
    p.add_argument("--log-level", default="info")
    try:
        args = p.parse_args(flags)
    except SystemExit:
        sys.exit(EXIT_CONFIG)
    if args.node_rank is None or not cmd:
        log("node rank unknown (no --node-rank / JOB_COMPLETION_INDEX) or no command")
        sys.exit(EXIT_CONFIG)
    if not (0 <= args.node_rank < args.nnodes) or args.nproc_per_node < 1:
        log(f"bad topology: node rank {args.node_rank}, nnodes {args.nnodes}, "
            f"nproc {args.nproc_per_node}")
        sys.exit(EXIT_CONFIG)
    return args, cmd


def leader_from_hosts():
    """trainer-2 with FQDN trainer-2.trainer.ns.svc.cluster.local -> trainer-0.trainer.ns..."""
    host = socket.gethostname()
    with open("/etc/hosts") as f:
        for line in f:
            names = line.split("#")[0].split()[1:]
            if host in names:
                for n in names:
                    if n.startswith(host + "."):
                        m = re.fullmatch(r"(.*)-\d+", host)
                        if m:
                            return f"{m.group(1)}-0{n[len(host):]}"
    return None


def wait_resolvable(name, timeout):
    deadline = time.monotonic() + timeout
    delay, tries = 0.1, 0
    while True:
        tries += 1
        try:
            socket.getaddrinfo(name, None, socket.AF_INET)
            log(f"leader {name} resolved after {tries} tries")
            return True
        except socket.gaierror as e:
            if time.monotonic() + delay > deadline:
                log(f"leader {name} not resolvable after {timeout}s: {e}")
                return False
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


class Supervisor:
    def __init__(self, args, cmd):
        self.args, self.cmd = args, cmd
        self.workers = {}          # pid -> rank
        self.pumps = []
        self.out_lock = threading.Lock()
        self.term_requested = False
        self.stop_deadline = None  # set once stopping
        self.exit_code = None      # first cause wins
        self.is_init = os.getpid() == 1

    def spawn(self, master):
        a = self.args
        world = a.nnodes * a.nproc_per_node
        for local in range(a.nproc_per_node):
            rank = a.node_rank * a.nproc_per_node + local
            env = dict(os.environ)
            env.update(RANK=str(rank), LOCAL_RANK=str(local), WORLD_SIZE=str(world),
                       LOCAL_WORLD_SIZE=str(a.nproc_per_node), GROUP_RANK=str(a.node_rank),
                       GROUP_WORLD_SIZE=str(a.nnodes), ROLE_RANK=str(rank),
                       ROLE_WORLD_SIZE=str(world), ROLE_NAME="default",
                       MASTER_ADDR=master, MASTER_PORT=str(a.master_port),
                       TORCHELASTIC_RUN_ID="standin", TORCHELASTIC_RESTART_COUNT="0",
                       TORCHELASTIC_MAX_RESTARTS="0")
            env.setdefault("OMP_NUM_THREADS", "1")
            rout, wout = os.pipe()
            rerr, werr = os.pipe()
            pid = os.posix_spawnp(
                self.cmd[0], self.cmd, env,
                file_actions=[(os.POSIX_SPAWN_DUP2, wout, 1), (os.POSIX_SPAWN_DUP2, werr, 2)],
                setpgroup=0, setsigmask=set(),
                setsigdef={signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGPIPE})
            os.close(wout)
            os.close(werr)
            self.workers[pid] = rank
            for fd, stream in ((rout, sys.stdout.buffer), (rerr, sys.stderr.buffer)):
                t = threading.Thread(target=self.pump, args=(fd, stream, rank), daemon=True)
                t.start()
                self.pumps.append(t)
            log(f"started rank {rank} pid {pid}")

    def pump(self, fd, stream, rank):
        prefix = f"[rank{rank}]: ".encode()
        with os.fdopen(fd, "rb") as f:
            for line in f:
                with self.out_lock:
                    stream.write(prefix + line if line.endswith(b"\n") else prefix + line + b"\n")
                    stream.flush()

    def others_in_pod(self):
        if not self.is_init:
            return []
        return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != 1]

    def begin_stop(self, code, why):
        if self.exit_code is None:
            self.exit_code = code
        if self.stop_deadline is not None:
            return
        log(f"stopping ({why}); grace {self.args.grace_period}s")
        self.stop_deadline = time.monotonic() + self.args.grace_period
        self.signal_all(signal.SIGTERM)

    def signal_all(self, sig):
        for pid in self.workers:
            try:
                os.killpg(pid, sig)
            except ProcessLookupError:
                pass
        if self.is_init:
            try:
                os.kill(-1, sig)  # every process in our PID namespace but us: kill(2)
            except ProcessLookupError:
                pass

    def reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            rank = self.workers.pop(pid, None)
            if rank is None:
                continue  # an adopted orphan
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code
            log(f"rank {rank} exited {code}")
            if code != 0 and self.stop_deadline is None:
                self.begin_stop(code, f"rank {rank} failed with {code}")

    def run(self):
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "term_requested", True))
        signal.signal(signal.SIGINT, lambda *_: setattr(self, "term_requested", True))
        killed = False
        while True:
            self.reap()
            if self.term_requested and self.exit_code is None:
                self.begin_stop(EXIT_TERMINATED, "SIGTERM")
            if not self.workers:
                left = self.others_in_pod()
                if not left:
                    break
                self.begin_stop(0, f"{len(left)} leftover processes")
            if self.stop_deadline is not None and not killed and \
                    time.monotonic() >= self.stop_deadline:
                log("grace period over: SIGKILL")
                self.signal_all(signal.SIGKILL)
                killed = True
            time.sleep(0.02)
        for t in self.pumps:
            t.join(1.0)
        code = self.exit_code or 0
        log(f"exit {code}")
        return code


def main():
    args, cmd = parse(sys.argv[1:])
    master = args.master_addr or env_default("MASTER_ADDR") or leader_from_hosts()
    if not master:
        log("cannot derive the leader: no --master-addr and no FQDN for this host in /etc/hosts")
        return EXIT_CONFIG
    sup = Supervisor(args, cmd)
    signal.signal(signal.SIGTERM, lambda *_: setattr(sup, "term_requested", True))
    if not wait_resolvable(master, args.rdzv_timeout):
        return EXIT_INFRA
    if sup.term_requested:
        return EXIT_TERMINATED
    sup.spawn(master)
    return sup.run()


if __name__ == "__main__":
    sys.exit(main())
