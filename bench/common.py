"""Helpers shared by the bench/ scripts (Python 3.11, standard library only).

Times are CLOCK_REALTIME nanoseconds (time.time_ns(), `date +%s%N`), the one clock
every process, namespace and launcher shares. Memory comes from /proc (proc(5)):
VmRSS, VmHWM from status, Pss from smaps_rollup.
"""
import os
import re
import socket
import statistics
import subprocess
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"                      # Debian's, with python3-torch
ENV = dict(os.environ, PATH="/usr/bin:/bin")     # Debian's torchrun, not a venv's
STAMP = re.compile(rb"(\d{19})")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_ports(n):
    ports = set()
    while len(ports) < n:
        ports.add(free_port())
    return list(ports)


def listening(port):
    """True when something listens on TCP `port` (any address, v4 or v6)."""
    hexport = f":{port:04X} "
    for path in ("/proc/net/tcp6", "/proc/net/tcp"):
        try:
            for line in open(path):
                f = line.split()
                if len(f) > 3 and f[1].endswith(hexport.strip()) and f[3] == "0A":
                    return True
        except OSError:
            pass
    return False


def wait_listening(port, proc=None, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not listening(port):
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited {proc.returncode} before listening on {port}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing listens on {port} after {timeout} s")
        time.sleep(0.002)


def memory(pid):
    """(VmRSS, VmHWM, Pss) of `pid` in KiB."""
    status = open(f"/proc/{pid}/status").read()
    rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
    hwm = int(re.search(r"VmHWM:\s+(\d+)", status).group(1))
    pss = int(re.search(r"^Pss:\s+(\d+)", open(f"/proc/{pid}/smaps_rollup").read(), re.M).group(1))
    return rss, hwm, pss


def rss_anon(pid):
    """RssAnon of `pid` in KiB (proc(5)): the private heap and stack, without the file pages
    (executable, libc) that VmRSS also counts and that every process mapping them shares."""
    return int(re.search(r"RssAnon:\s+(\d+)", open(f"/proc/{pid}/status").read()).group(1))


def stats(xs):
    xs = sorted(xs)
    return {"median": statistics.median(xs), "min": xs[0], "max": xs[-1], "n": len(xs)}


def fmt_ms(s, digits=1):
    if not s:
        return "n/a"
    return f"{s['median']:.{digits}f} ms ({s['min']:.{digits}f} – {s['max']:.{digits}f}, n={s['n']})"


def agent_argv(binary, index, nnodes, rdzv_port, master_port, trainer, nproc=1, extra=(),
               log_level="warn"):
    """One pod's trainlet as `trainlet local` starts it: leader on 127.0.0.1, fixed ports."""
    return [binary, "--nnodes", str(nnodes), "--nproc-per-node", str(nproc),
            "--node-rank", str(index), "--master-addr", "127.0.0.1",
            "--rdzv-port", str(rdzv_port), "--master-port", str(master_port),
            "--job-id", "bench", "--grace-period", "5", "--rdzv-timeout", "120",
            "--log-level", log_level, *extra, "--", *trainer]


def loadgen_argv(loadgen, port, nnodes, first, count, report_after_ms=0, nproc=1,
                 master_port=29500, timeout_s=120):
    return [loadgen, "--port", str(port), "--nnodes", str(nnodes), "--first-index", str(first),
            "--count", str(count), "--nproc-per-node", str(nproc), "--master-port",
            str(master_port), "--job-id", "bench", "--report-after-ms", str(report_after_ms),
            "--timeout-s", str(timeout_s)]


def torchrun_argv(nnodes, port, trainer, extra=()):
    # torch 1.13 spells its flags with underscores, and on Python 3.11 crashes
    # unless both --redirects and --tee are given (an upstream bug).
    return ["torchrun", "--nnodes", str(nnodes), "--nproc_per_node", "1",
            "--rdzv_backend", "c10d", "--rdzv_endpoint", f"127.0.0.1:{port}",
            "--rdzv_id", "bench", "--redirects", "2", "--tee", "1", *extra,
            "--no_python", *trainer]


def kill_all(procs, sig=15):
    for p in procs:
        if p.poll() is None:
            try:
                p.send_signal(sig)
            except ProcessLookupError:
                pass


def reap(procs, timeout=30):
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


ASSIGNED = re.compile(r"\[trainlet pod\d+ (\S+) info\] rendezvous [\d.]+ ms: generation")


def assigned_ns(stderr):
    """When an agent logged its assignment ("rendezvous N ms: generation ..."), in
    CLOCK_REALTIME ns: spdlog's local-time stamp has millisecond resolution, so the
    middle of that millisecond."""
    import datetime
    m = ASSIGNED.search(stderr)
    if not m:
        return None
    t = datetime.datetime.fromisoformat(m.group(1)).timestamp()
    return int(round(t * 1000)) * 1_000_000 + 500_000
