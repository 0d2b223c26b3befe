#!/usr/bin/python3
"""Load on a health port, and probes through it (standard library only).

    probe_load.py flood HOST PORT --conns 200 --mode slow [--interval 0.8] [--seconds 60]
    probe_load.py probe HOST PORT [--every 0.1] [--seconds 10] [--timeout 1]

flood: keeps --conns connections open to HOST:PORT. `slow` sends one byte of a
request header that never ends every --interval s per connection (a slowloris);
`idle` sends nothing. A connection the server drops is reopened at once. Prints
"ready" once --conns connections have been established, and on SIGTERM or at
--seconds a JSON line of counts (opened, established, dropped, failed connects).

probe: what the kubelet's httpGet probes do (a fresh connection per probe,
`User-Agent: kube-probe`, Connection: close), every --every s for --seconds,
alternating /livez and /readyz; a probe without its whole answer within --timeout
s (the kubelet's timeoutSeconds, 1 by default) fails. Prints one JSON line:
[[path, status or null, milliseconds, error or null], ...].

Used by tests/e2e/test_probes.py (in simulated pods) and bench/probes.py (on
loopback, the flood from 127.0.0.2).
"""
import argparse
import errno
import json
import resource
import selectors
import signal
import socket
import sys
import time

SLOW_HEAD = b"GET /livez HTTP/1.1\r\nHost: x\r\n"
SLOW_LINE = b"X-Slow: a\r\n"  # repeated forever: the header never ends


def slow_byte(n):
    """The n-th byte a slow connection sends."""
    if n < len(SLOW_HEAD):
        return SLOW_HEAD[n:n + 1]
    k = (n - len(SLOW_HEAD)) % len(SLOW_LINE)
    return SLOW_LINE[k:k + 1]


class Flood:
    def __init__(self, addr, conns, mode, interval, source=None):
        self.addr, self.conns, self.mode, self.interval = addr, conns, mode, interval
        self.source = source
        self.sel = selectors.DefaultSelector()
        self.live = {}  # socket -> {"connected": bool, "sent": bytes sent, "due": next send}
        self.counts = {"opened": 0, "established": 0, "dropped": 0, "connect_failed": 0,
                       "most_open": 0}
        self.stop = False

    def open_one(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        if self.source:
            s.bind((self.source, 0))
        err = s.connect_ex(self.addr)
        if err not in (0, errno.EINPROGRESS):
            s.close()
            self.counts["connect_failed"] += 1
            return False
        self.counts["opened"] += 1
        self.live[s] = {"connected": False, "sent": 0, "due": 0.0}
        self.sel.register(s, selectors.EVENT_WRITE)
        return True

    def drop(self, s, failed_connect=False):
        self.sel.unregister(s)
        del self.live[s]
        s.close()
        self.counts["connect_failed" if failed_connect else "dropped"] += 1

    def on_event(self, s, mask):
        st = self.live[s]
        if not st["connected"]:
            if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                return self.drop(s, failed_connect=True)
            st["connected"] = True
            st["due"] = time.monotonic()
            self.counts["established"] += 1
            self.sel.modify(s, selectors.EVENT_READ)
            return
        try:
            if s.recv(4096):
                return  # an answer (400, 431) before the close: keep reading
        except OSError:
            pass
        self.drop(s)

    def send_due(self, now):
        for s, st in list(self.live.items()):
            if st["connected"] and st["due"] <= now:
                try:
                    s.send(slow_byte(st["sent"]))
                    st["sent"] += 1
                    st["due"] = now + self.interval
                except BlockingIOError:
                    st["due"] = now + self.interval
                except OSError:
                    self.drop(s)

    def run(self, seconds, ready=lambda: None):
        deadline = time.monotonic() + seconds
        said_ready = False
        while not self.stop and time.monotonic() < deadline:
            while len(self.live) < self.conns:
                if not self.open_one():
                    break  # out of ports or descriptors: try again next round
            self.counts["most_open"] = max(self.counts["most_open"], len(self.live))
            if not said_ready and self.counts["established"] >= self.conns:
                ready()
                said_ready = True
            timeout = 0.05
            for key, mask in self.sel.select(timeout):
                if key.fileobj in self.live:
                    self.on_event(key.fileobj, mask)
            if self.mode == "slow":
                self.send_due(time.monotonic())
        for s in list(self.live):
            s.close()
        return self.counts


def probe_once(addr, path, timeout):
    """One kubelet-style GET: (status or None, milliseconds, error or None)."""
    t0 = time.monotonic()
    request = (f"GET {path} HTTP/1.1\r\nHost: {addr[0]}:{addr[1]}\r\n"
               "User-Agent: kube-probe/1.31\r\nAccept: */*\r\nConnection: close\r\n\r\n").encode()
    try:
        with socket.create_connection(addr, timeout=timeout) as s:
            s.settimeout(max(0.001, timeout - (time.monotonic() - t0)))
            s.sendall(request)
            reply = b""
            while True:
                s.settimeout(max(0.001, timeout - (time.monotonic() - t0)))
                chunk = s.recv(4096)
                if not chunk:
                    break
                reply += chunk
        ms = (time.monotonic() - t0) * 1000
        parts = reply.split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            return None, ms, f"no status line: {reply[:40]!r}"
        return int(parts[1]), ms, None
    except OSError as e:
        return None, (time.monotonic() - t0) * 1000, f"{type(e).__name__}: {e}"


def probes(addr, every, seconds, timeout, paths=("/livez", "/readyz")):
    out = []
    t0 = time.monotonic()
    k = 0
    while True:
        at = t0 + k * every
        if at - t0 >= seconds:
            break
        time.sleep(max(0.0, at - time.monotonic()))
        path = paths[k % len(paths)]
        status, ms, err = probe_once(addr, path, timeout)
        out.append([path, status, round(ms, 3), err])
        k += 1
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("flood")
    f.add_argument("host")
    f.add_argument("port", type=int)
    f.add_argument("--conns", type=int, default=200)
    f.add_argument("--mode", choices=("slow", "idle"), default="slow")
    f.add_argument("--interval", type=float, default=0.8)
    f.add_argument("--seconds", type=float, default=600)
    f.add_argument("--source", help="bind to this source address (e.g. 127.0.0.2)")
    q = sub.add_parser("probe")
    q.add_argument("host")
    q.add_argument("port", type=int)
    q.add_argument("--every", type=float, default=0.1)
    q.add_argument("--seconds", type=float, default=10)
    q.add_argument("--timeout", type=float, default=1.0)
    a = p.parse_args()
    if a.cmd == "probe":
        print(json.dumps(probes((a.host, a.port), a.every, a.seconds, a.timeout)), flush=True)
        return 0
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = a.conns + 64
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    flood = Flood((a.host, a.port), a.conns, a.mode, a.interval, a.source)

    def on_term(signum, frame):
        flood.stop = True
    signal.signal(signal.SIGTERM, on_term)
    counts = flood.run(a.seconds, lambda: print("ready", flush=True))
    print(json.dumps(counts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
