"""podsim: a simulated Kubernetes Indexed Job + headless Service, built from namespaces.

Pods are named <svc>-<i> like an Indexed Job's, or by an explicit list (Cluster(hostnames=...))
for JobSet-style names in the same subdomain <svc>.

What a Cluster is:
  * one "network" network namespace holding a Linux bridge (br0, 10.213.0.1/24) and a
    real dnsmasq that serves the headless Service's records from a --hostsdir, so tests
    can publish, withdraw and change records while pods run (dnsmasq re-reads the
    directory through inotify; see dnsmasq(8) --hostsdir). Every other name gets
    NXDOMAIN (--local=/#/), as CoreDNS answers for names nobody has published.
  * one network namespace per pod with a veth (eth0, 10.213.0.<10+i>/24) on the bridge.
  * a pod's process runs as PID 1 of fresh PID/UTS/mount namespaces, with the pod's
    hostname (<svc>-<i>), /etc/hosts as the kubelet writes it and /etc/resolv.conf as
    ClusterFirst DNS writes it (search list, ndots:5), both bind-mounted privately.

Address families (Cluster(family=...)), as a cluster's pod network gives them:
  * "ipv4" (default): 10.213.0.0/24 only.
  * "ipv6": IPv6 only, ULA fd00:213::/64 (RFC 4193): eth0 has no IPv4 address at all
    (lo keeps 127.0.0.1, as in every pod), dnsmasq listens on fd00:213::1 and serves
    AAAA records only.
  * "dual": both; the pod's /etc/hosts lists each pod IP on its own line and dnsmasq
    serves A and AAAA records, as the kubelet and CoreDNS do in a dual-stack cluster.
IPv6 addresses are added with `nodad` (no duplicate address detection: usable at once),
and every interface also has its kernel-made link-local fe80:: address, as a pod's has.

Host names (Cluster(fqdn_hostname=True)): as pod spec setHostnameAsFQDN: true, the pod's
host name (uname, $HOSTNAME) is its FQDN <hostname>.<svc>.<ns>.svc.cluster.local; the
/etc/hosts line stays "<ip>\t<fqdn>\t<hostname>" (the kubelet writes the same line).

Addresses are used only inside namespaces this module creates, so runs never touch
the host's network and concurrent runs cannot collide: namespace names carry the run's
pid and a random part, so two runs in different PID namespaces (where pids repeat) get
different names too.

Two runs on one machine (two clones' suites, a soak beside the e2e tests) never touch
each other's processes or namespaces:
  * a pod's processes are those in its PID namespace *while its PID 1 still exists*
    (pid and start time as recorded at start). A PID namespace lives as long as its
    init (pid_namespaces(7): the kernel kills the rest when init exits and init's exit
    waits for them), and its inode number is reused by the next namespace created once
    it is gone, so an inode alone names "the pod's" namespace only while PID 1 lives.
  * signals go through a pidfd (pidfd_open(2)) opened and checked against the process's
    start time (proc(5), /proc/<pid>/stat field 22), so a reused pid is never signalled.
  * the stale sweep deletes only namespaces of a run that provably died: its owner file
    (/run/podsim/<run>.owner: pid, start time, PID namespace, boot id) names a process
    of our own PID namespace that no longer runs. A run whose owner we cannot see
    (another PID namespace, no owner file) is left alone.

Threading: a Cluster and its Pods are meant to be driven from one thread; the only
background activity is delayed publish() timers, which only write files.

Needs root, iproute2 (`ip netns`), util-linux `unshare`, /usr/sbin/dnsmasq.
"""

import atexit
import collections
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time

SUBNET = "10.213.0"           # /24 inside our own namespaces only
DNS_IP = f"{SUBNET}.1"
SUBNET6 = "fd00:213:"         # ULA /64 (RFC 4193), inside our own namespaces only
DNS_IP6 = f"{SUBNET6}:1"
FAMILIES = ("ipv4", "ipv6", "dual")
NS_PREFIX = "tl"              # netns names: <run>c<k>net, <run>c<k>p<i>; <run> = tl<pid>r<hex>
NS_RE = re.compile(rf"^({NS_PREFIX}\d+r[0-9a-f]{{8}})c(\d+)(net|p\d+)$")
OLD_NS_RE = re.compile(rf"^{NS_PREFIX}\d+c\d+(net|p\d+)$")  # before owner files: never swept
OWNER_DIR = "/run/podsim"     # <run>.owner: who owns the namespaces named after <run>
NETNS_DIR = "/run/netns"      # where `ip netns` keeps its names (ip-netns(8))
DNSMASQ = "/usr/sbin/dnsmasq"
POD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The pod's PID 1 starts as this shell: set up what the kubelet would, then exec the
# entrypoint so that it (trainlet) is PID 1. Positional: hostname hosts resolv argv...
POD_INIT = r"""
set -e
hostname "$1"
mount --bind "$2" /etc/hosts
mount --bind "$3" /etc/resolv.conf
shift 3
exec "$@"
"""

_live_clusters = set()
_cluster_seq = 0
_seq_lock = threading.Lock()


class PodsimError(RuntimeError):
    pass


class PodTimeout(PodsimError):
    pass


# start: the process's start time in clock ticks after boot (proc(5), /proc/<pid>/stat
# field 22); (pid, start) names one process for good, a pid alone only while it runs.
ProcInfo = collections.namedtuple("ProcInfo", "pid ppid state comm cmdline start")


def _run(*argv, check=True, timeout=20):
    """Runs a setup command; raises PodsimError with its stderr on failure."""
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise PodsimError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def requirements_missing():
    """Returns a reason string when this machine can't host a Cluster, else None."""
    if os.geteuid() != 0:
        return "podsim needs root (network/PID namespaces, bind mounts)"
    for tool in ("ip", "unshare", "setpriv", "mount", "hostname"):
        if shutil.which(tool, path=POD_PATH) is None:
            return f"podsim needs `{tool}` on PATH"
    if not os.access(DNSMASQ, os.X_OK):
        return f"podsim needs {DNSMASQ} (apt-get install dnsmasq-base)"
    return None


# ---------------------------------------------------------------------------------
# /proc helpers


def _read(path, default=""):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return default


def _stat(pid):
    """(comm, fields from field 3 on) of /proc/<pid>/stat, or None if the process is gone."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return None
    # comm may hold spaces and parentheses; it ends at the last ')'. See proc(5).
    lpar, rpar = stat.find("("), stat.rfind(")")
    return stat[lpar + 1:rpar], stat[rpar + 2:].split()


def start_time(pid):
    """The start time of process `pid` (clock ticks after boot), or None if it is gone."""
    st = _stat(pid)
    return int(st[1][19]) if st else None  # field 22; st[1][0] is field 3


def proc_info(pid):
    """ProcInfo for a host pid, or None if it is gone. state is e.g. 'S', 'R', 'Z'."""
    st = _stat(pid)
    if st is None:
        return None
    comm, fields = st
    cmdline = _read(f"/proc/{pid}/cmdline").replace("\0", " ").strip()
    return ProcInfo(pid, int(fields[1]), fields[0], comm, cmdline, int(fields[19]))


def _all_pids():
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def _ns_id(pid, kind):
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def pids_in_namespace(kind, ns_id):
    """Host pids whose /proc/<pid>/ns/<kind> link equals ns_id (e.g. 'pid:[4026532]')."""
    return [p for p in _all_pids() if _ns_id(p, kind) == ns_id]


def _children(pid):
    out = []
    for tid in os.listdir(f"/proc/{pid}/task") if os.path.isdir(f"/proc/{pid}/task") else []:
        out += [int(c) for c in _read(f"/proc/{pid}/task/{tid}/children").split()]
    return out


def _nspid(pid):
    """The NSpid line of /proc/<pid>/status: pid as seen from each nested PID namespace."""
    for line in _read(f"/proc/{pid}/status").splitlines():
        if line.startswith("NSpid:"):
            return [int(x) for x in line.split()[1:]]
    return []


def signal_exact(pid, start, sig):
    """Sends `sig` to process `pid` only if it is still the one that started at `start`.

    The pidfd (pidfd_open(2)) pins the process: once its start time matched, the signal
    (pidfd_send_signal(2)) reaches that process or nothing, never a process that got its
    pid later. Returns True when the signal was sent."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return False  # gone
    try:
        if start_time(pid) != start:
            return False  # the pid now names another process
        signal.pidfd_send_signal(fd, sig)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------
# who owns which namespaces; leftovers from crashed runs

_run_tags = {}  # os.getpid() -> this process's run name (a fork is another run)


def _boot_id():
    return _read("/proc/sys/kernel/random/boot_id").strip()


def run_tag():
    """This process's run name, tl<pid>r<8 hex>: the prefix of its namespaces' names."""
    pid = os.getpid()
    if pid not in _run_tags:
        _run_tags[pid] = f"{NS_PREFIX}{pid}r{secrets.token_hex(4)}"
    return _run_tags[pid]


def _owner_path(run):
    return os.path.join(OWNER_DIR, f"{run}.owner")


def _claim_run():
    """Writes this run's owner file (before it creates any namespace). Idempotent."""
    path = _owner_path(run_tag())
    if os.path.exists(path):
        return
    os.makedirs(OWNER_DIR, exist_ok=True)
    me = os.getpid()
    owner = {"pid": me, "start": start_time(me), "pidns": _ns_id(me, "pid"),
             "boot_id": _boot_id()}
    tmp = f"{path}.{me}.tmp"
    with open(tmp, "w") as f:
        json.dump(owner, f)
    os.rename(tmp, path)


def _release_run():
    """Removes this run's owner file (at exit, once its clusters are torn down), unless a
    namespace of this run is left: the file then lets a later run's sweep remove it."""
    names = os.listdir(NETNS_DIR) if os.path.isdir(NETNS_DIR) else []
    if os.getpid() in _run_tags and not any(n.startswith(run_tag() + "c") for n in names):
        try:
            os.unlink(_owner_path(run_tag()))
        except OSError:
            pass


def run_is_dead(run):
    """True only when `run` provably ended: its owner file names a process of our own PID
    namespace, since this boot, that no longer runs (no process with that pid and start
    time). A run we cannot see (no or unreadable owner file, another PID namespace, whose
    pids mean other processes here) counts as alive."""
    try:
        with open(_owner_path(run)) as f:
            owner = json.load(f)
        pid, start = int(owner["pid"]), int(owner["start"])
        pidns, boot = owner["pidns"], owner["boot_id"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if pidns != _ns_id(os.getpid(), "pid") or boot != _boot_id():
        return False
    return start_time(pid) != start


def cleanup_stale(log=print):
    """Deletes podsim namespaces (and everything running in them) of runs that provably
    ended (run_is_dead), and those runs' owner files. Returns the names removed."""
    removed, unknown = [], []
    names = _run("ip", "netns", "list", check=False).stdout.split()
    for name in names:
        m = NS_RE.match(name)
        if not m:
            unknown += [name] if OLD_NS_RE.match(name) else []
            continue
        if m.group(1) != run_tag() and run_is_dead(m.group(1)):
            _destroy_netns(name)
            removed.append(name)
    left = {NS_RE.match(n).group(1) for n in names if NS_RE.match(n) and n not in removed}
    for entry in os.listdir(OWNER_DIR) if os.path.isdir(OWNER_DIR) else []:
        run = entry[:-len(".owner")]
        if entry.endswith(".owner") and run not in left and run_is_dead(run):
            try:
                os.unlink(_owner_path(run))
            except OSError:
                pass
    if removed:
        log(f"podsim: removed {len(removed)} stale namespaces: {' '.join(removed)}")
    if unknown:
        log(f"podsim: left alone {len(unknown)} namespaces of unknown owner (named before "
            f"owner files; `ip netns del` them by hand if no run uses them): "
            f"{' '.join(unknown)}")
    return removed


def _netns_id(name):
    """'net:[inode]' of named netns `name`, or None when the name holds no namespace here."""
    try:
        st = os.stat(os.path.join(NETNS_DIR, name))
    except OSError:
        return None
    # A name whose bind mount lives in another mount namespace is a plain empty file here;
    # a namespace is a file of nsfs, the file system /proc/<pid>/ns/* live on.
    try:
        nsfs = os.stat(f"/proc/{os.getpid()}/ns/net").st_dev
    except OSError:
        return None
    return f"net:[{st.st_ino}]" if st.st_dev == nsfs else None


def _destroy_netns(name):
    """Kills every process in netns `name` (and the PID namespaces they lead), then deletes it.

    The name's bind mount holds the namespace, so its inode names it for as long as the
    name exists; each process is signalled through a pidfd checked against its start."""
    ns = _netns_id(name)
    for _ in range(50 if ns else 0):
        procs = [i for i in map(proc_info, pids_in_namespace("net", ns)) if i]
        if not procs or _netns_id(name) != ns:
            break
        for info in procs:
            signal_exact(info.pid, info.start, signal.SIGKILL)
        time.sleep(0.05)
    _run("ip", "netns", "del", name, check=False)


# ---------------------------------------------------------------------------------


class Pod:
    """One pod: its PID 1 (run as a host child via `ip netns exec ... unshare`)."""

    def __init__(self, cluster, index, argv, popen, out_path, err_path):
        self.cluster = cluster
        self.index = index
        self.name = cluster.hostname(index)
        self.argv = argv
        self.popen = popen
        self.out_path = out_path
        self.err_path = err_path
        self.started = time.monotonic()
        self.ended = None
        self.pid1 = None          # host pid of the pod's PID 1
        self.pid1_start = None    # its start time (start_time()): pid1 names it only with this
        self.pidns = None         # 'pid:[inode]' of the pod's PID namespace, while PID 1 lives

    def _find_pid1(self, timeout=10.0):
        # Popen's pid is `ip netns exec`, which execs setpriv, which execs unshare (no
        # forks); unshare --fork forks the namespace's init, whose NSpid is "<hostpid> 1".
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for child in _children(self.popen.pid):
                ns = _nspid(child)
                info = proc_info(child)
                pidns = _ns_id(child, "pid")
                # Still unshare's child after reading its namespace: the same process.
                if (len(ns) >= 2 and ns[-1] == 1 and info and info.ppid == self.popen.pid
                        and start_time(child) == info.start):
                    self.pid1, self.pid1_start, self.pidns = child, info.start, pidns
                    return
            if self.popen.poll() is not None:
                return  # exited before we could see it (a very short-lived pod)
            time.sleep(0.005)
        raise PodsimError(f"pod {self.name}: no PID 1 appeared within {timeout}s")

    def pid1_present(self):
        """True while the pod's PID 1 exists (a zombie included): while it does, its PID
        namespace does too, so self.pidns names this pod's namespace and no other."""
        return self.pid1 is not None and start_time(self.pid1) == self.pid1_start

    @property
    def returncode(self):
        rc = self.popen.poll()
        if rc is not None and self.ended is None:
            self.ended = time.monotonic()
        return rc

    def running(self):
        return self.returncode is None

    def wait(self, timeout):
        """Waits up to `timeout` seconds for PID 1 to exit; returns its exit code.

        A PID 1 killed by signal S reads as 128+S (as a container runtime reports it).
        Raises PodTimeout (with the pod's log tail) when it is still running.
        """
        try:
            rc = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise PodTimeout(f"pod {self.name} still running after {timeout}s\n"
                             + self.tail()) from None
        if self.ended is None:
            self.ended = time.monotonic()
        if rc == 1 and "unshare: sigprocmask unblock failed" in self.stderr()[-200:]:
            # unshare --fork re-raises the child's fatal signal on itself, but
            # signal(SIGKILL, SIG_DFL) fails with EINVAL (util-linux 2.38), so a PID 1
            # killed by SIGKILL surfaces as "exit 1" plus this message.
            return 128 + signal.SIGKILL
        return 128 - rc if rc < 0 else rc

    def elapsed(self):
        """Seconds from start to exit (or to now, if running)."""
        return (self.ended or time.monotonic()) - self.started

    def signal(self, sig):
        """Sends `sig` to the pod's PID 1 from the host, like the kubelet/runtime does.

        PID 1 only receives signals it has a handler for (pid_namespaces(7)), except
        SIGKILL and SIGSTOP, which come from an ancestor namespace and are forced.
        """
        if self.pid1 is None:
            raise PodsimError(f"pod {self.name}: PID 1 unknown (exited early?)")
        if self.running():
            signal_exact(self.pid1, self.pid1_start, sig)

    def signal_process(self, info, sig):
        """Sends `sig` to one of this pod's processes (a ProcInfo from processes()), unless
        it has exited since: a pid reused by then is never signalled. Returns True if sent."""
        return signal_exact(info.pid, info.start, sig)

    def processes(self):
        """ProcInfo of every process in this pod's PID namespace (host pids), PID 1 included.

        Empty once PID 1 is gone: the kernel has then killed the rest (pid_namespaces(7))
        and the namespace's inode may already name another run's pod."""
        if self.pidns is None or not self.pid1_present():
            return []
        found = [i for i in map(proc_info, pids_in_namespace("pid", self.pidns)) if i]
        # PID 1 outlived the scan, so the namespace was this pod's throughout; a process
        # of this namespace cannot have started before its init.
        if not self.pid1_present():
            return []
        return [i for i in found if i.start >= self.pid1_start]

    def zombies(self):
        return [p for p in self.processes() if p.state == "Z"]

    def processes_with_env(self, **env):
        """ProcInfo of this pod's processes whose environment has every given NAME=value
        (e.g. RANK="2"): how a test finds a worker's host pid to signal it directly."""
        want = {f"{k}={v}" for k, v in env.items()}
        return [p for p in self.processes()
                if want <= set(_read(f"/proc/{p.pid}/environ").split("\0"))]

    def stdout(self):
        return _read(self.out_path)

    def stderr(self):
        return _read(self.err_path)

    def output(self):
        return self.stdout() + self.stderr()

    def wait_for_output(self, pattern, timeout, stream="both"):
        """Waits until regex `pattern` matches the pod's output; returns the match.

        Polls the captured files (every 20 ms). Raises PodTimeout with the log tail.
        """
        rx = re.compile(pattern, re.M)
        deadline = time.monotonic() + timeout
        while True:
            text = {"stdout": self.stdout, "stderr": self.stderr}.get(stream, self.output)()
            m = rx.search(text)
            if m:
                return m
            if time.monotonic() > deadline:
                raise PodTimeout(f"pod {self.name}: no /{pattern}/ within {timeout}s\n"
                                 + self.tail())
            if not self.running():
                # One last read: the line may have landed just before exit.
                text = {"stdout": self.stdout, "stderr": self.stderr}.get(stream, self.output)()
                m = rx.search(text)
                if m:
                    return m
                raise PodTimeout(f"pod {self.name} exited ({self.returncode}) without "
                                 f"/{pattern}/\n" + self.tail())
            time.sleep(0.02)

    def tail(self, lines=30):
        def last(text):
            return "\n".join("    " + ln for ln in text.splitlines()[-lines:])
        state = "running" if self.running() else f"exited {self.wait(0)}"
        return (f"--- pod {self.name} ({state}, {self.elapsed():.1f}s) argv: "
                f"{' '.join(self.argv)}\n  stdout ({self.out_path}):\n{last(self.stdout())}\n"
                f"  stderr ({self.err_path}):\n{last(self.stderr())}")

    def kill(self):
        """SIGKILLs PID 1 (the kernel then kills the rest of the PID namespace) and reaps."""
        if self.running():
            if self.pid1 is not None:
                signal_exact(self.pid1, self.pid1_start, signal.SIGKILL)
            try:
                self.popen.wait(5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        # Paranoia: anything still in the PID namespace while its PID 1 is (processes()
        # is empty once PID 1 is gone, so another run's pod is never touched).
        for info in self.processes():
            self.signal_process(info, signal.SIGKILL)


class Cluster:
    """A simulated Indexed Job `svc` with `pods` indices behind a headless Service `svc`.

    Use as a context manager; teardown always runs (also via atexit). The cluster's
    records start unpublished: call publish(i) (the kubelet/endpoints controller's job)
    before or after start_pod(i).
    """

    def __init__(self, svc="trainer", pods=3, namespace="default", workdir=None,
                 keep=False, log=None, hostnames=None, family="ipv4", fqdn_hostname=False):
        global _cluster_seq
        with _seq_lock:
            _cluster_seq += 1
            seq = _cluster_seq
        self.svc = svc
        self.npods = pods
        # Pod i's hostname: <svc>-<i> (an Indexed Job's), or hostnames[i] when given, e.g.
        # JobSet's <jobset>-<replicatedJob>-<jobIndex>-<podIndex>; the subdomain stays svc.
        if hostnames is not None and (len(hostnames) != pods or len(set(hostnames)) != pods):
            raise ValueError("hostnames: one distinct name per pod")
        self._hostnames = list(hostnames) if hostnames is not None else None
        if family not in FAMILIES:
            raise ValueError(f"family: one of {FAMILIES}")
        self.family = family
        self.fqdn_hostname = fqdn_hostname
        self.namespace = namespace
        self.domain = f"{svc}.{namespace}.svc.cluster.local"
        self.tag = f"{run_tag()}c{seq}"
        self.net_ns = f"{self.tag}net"
        self.keep = keep
        self._own_workdir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix=f"{self.tag}-")
        os.makedirs(self.workdir, exist_ok=True)
        self.hostsdir = os.path.join(self.workdir, "dns-records")
        self.dns_log = os.path.join(self.workdir, "dnsmasq.log")
        self.events_log = os.path.join(self.workdir, "events.log")
        self.pods = {}
        self._ip_override = {}
        self._cut_carrier = {}  # cut_link: pod index -> whether its carrier went down
        self._timers = []
        self._dnsmasq = None
        self._created_ns = []
        self._t0 = time.monotonic()
        self._log = log or (lambda msg: None)
        self._closed = False

    # -- names -------------------------------------------------------------------
    def hostname(self, i):
        """Pod i's hostname field (the Service's record name; short)."""
        return self._hostnames[i] if self._hostnames else f"{self.svc}-{i}"

    def uname(self, i):
        """Pod i's host name as its processes see it (the FQDN with fqdn_hostname)."""
        return self.fqdn(i) if self.fqdn_hostname else self.hostname(i)

    def fqdn(self, i):
        return f"{self.hostname(i)}.{self.domain}"

    def dns_ip(self):
        return DNS_IP6 if self.family == "ipv6" else DNS_IP

    def pod_ips(self, i):
        """Pod i's addresses, primary first: IPv4 then IPv6 in a dual-stack cluster."""
        if not 0 <= i < 200:
            raise ValueError("podsim supports indices 0..199")
        if i in self._ip_override:
            return [self._ip_override[i]]
        v4, v6 = f"{SUBNET}.{10 + i}", f"{SUBNET6}:{10 + i}"
        return {"ipv4": [v4], "ipv6": [v6], "dual": [v4, v6]}[self.family]

    def pod_ip(self, i):
        """Pod i's primary address (the first of pod_ips)."""
        return self.pod_ips(i)[0]

    def pod_ip6(self, i):
        """Pod i's IPv6 address (family "ipv6" or "dual")."""
        return [ip for ip in self.pod_ips(i) if ":" in ip][0]

    def readdress(self, i, ip):
        """Gives pod i a new IP, as when a pod is replaced (rescheduled): its eth0 gets
        `ip` instead of the old address, its /etc/hosts is rewritten for the next start,
        and its DNS records are republished (returns once dnsmasq has read them). Call it
        while pod i is not running."""
        if i in self.pods and self.pods[i].running():
            raise PodsimError(f"pod {i} is still running")
        self._ip_override[i] = ip
        ns = self.pod_ns(i)
        _run("ip", "-n", ns, "addr", "flush", "dev", "eth0", "scope", "global")
        self._add_addr(ns, "eth0", ip)
        self._write_pod_files(i)
        self.event(f"pod {self.hostname(i)} readdressed to {ip}")
        self.publish(i)

    def pod_ns(self, i):
        return f"{self.tag}p{i}"

    # -- lifecycle ---------------------------------------------------------------
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.teardown()
        return False

    def start(self):
        _claim_run()  # before any namespace: the stale sweep must see who owns them
        _live_clusters.add(self)
        try:
            self._start()
        except BaseException:
            self.teardown()
            raise
        return self

    def _start(self):
        os.makedirs(self.hostsdir)
        self._add_ns(self.net_ns)
        _run("ip", "-n", self.net_ns, "link", "set", "lo", "up")
        _run("ip", "-n", self.net_ns, "link", "add", "br0", "type", "bridge")
        if self.family != "ipv6":
            self._add_addr(self.net_ns, "br0", DNS_IP)
        if self.family != "ipv4":
            self._add_addr(self.net_ns, "br0", DNS_IP6)
        _run("ip", "-n", self.net_ns, "link", "set", "br0", "up")
        for i in range(self.npods):
            ns = self.pod_ns(i)
            self._add_ns(ns)
            _run("ip", "-n", self.net_ns, "link", "add", f"vp{i}", "type", "veth",
                 "peer", "name", "eth0", "netns", ns)
            _run("ip", "-n", self.net_ns, "link", "set", f"vp{i}", "master", "br0", "up")
            for ip in self.pod_ips(i):
                self._add_addr(ns, "eth0", ip)
            _run("ip", "-n", ns, "link", "set", "eth0", "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            self._write_pod_files(i)
        self._start_dnsmasq()
        self.event(f"cluster up: {self.npods} pods, workdir {self.workdir}")

    @staticmethod
    def _add_addr(ns, dev, ip):
        if ":" in ip:  # nodad: usable at once, not "tentative" for a second
            _run("ip", "-n", ns, "addr", "add", f"{ip}/64", "dev", dev, "nodad")
        else:
            _run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)

    def _add_ns(self, name):
        _run("ip", "netns", "add", name)
        self._created_ns.append(name)

    def _write_pod_files(self, i):
        # As the kubelet writes them for a pod with hostname+subdomain (Pod's DNS docs:
        # "A/AAAA records ... <hostname>.<subdomain>.<ns>.svc.cluster.local").
        # One line per pod IP (pkg/kubelet/kubelet_pods.go managedHostsFileContent).
        hosts = (f"# Kubernetes-managed hosts file (podsim).\n"
                 f"127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
                 f"fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\n"
                 f"fe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n"
                 + "".join(f"{ip}\t{self.fqdn(i)}\t{self.hostname(i)}\n"
                           for ip in self.pod_ips(i)))
        resolv = (f"search {self.namespace}.svc.cluster.local svc.cluster.local cluster.local\n"
                  f"nameserver {self.dns_ip()}\noptions ndots:5\n")
        with open(self._pod_file(i, "hosts"), "w") as f:
            f.write(hosts)
        with open(self._pod_file(i, "resolv.conf"), "w") as f:
            f.write(resolv)

    def _pod_file(self, i, what):
        return os.path.join(self.workdir, f"pod-{i}.{what}")

    def _start_dnsmasq(self):
        argv = ["ip", "netns", "exec", self.net_ns, "setpriv", "--pdeathsig", "KILL", DNSMASQ,
                "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
                "--no-poll", "--user=root", "--group=root",
                f"--pid-file={os.path.join(self.workdir, 'dnsmasq.pid')}",
                f"--listen-address={self.dns_ip()}", "--bind-interfaces",
                f"--hostsdir={self.hostsdir}", "--local=/cluster.local/", "--local=/#/",
                "--local-ttl=1", "--neg-ttl=1", "--log-queries",
                f"--log-facility={self.dns_log}"]
        self._dnsmasq = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL,
                                         stderr=open(self.dns_log + ".stderr", "w"))
        self._wait_dns_log(lambda text: "using only locally-known addresses" in text,
                           "dnsmasq start")

    def _wait_dns_log(self, predicate, what, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not predicate(_read(self.dns_log)):
            if self._dnsmasq.poll() is not None:
                raise PodsimError(f"dnsmasq exited ({self._dnsmasq.returncode}): "
                                  + _read(self.dns_log + ".stderr") + _read(self.dns_log))
            if time.monotonic() > deadline:
                raise PodsimError(f"{what}: dnsmasq did not confirm within {timeout}s")
            time.sleep(0.01)

    def teardown(self):
        """Kills every pod and dnsmasq, deletes the namespaces. Idempotent, never raises."""
        if self._closed:
            return
        self._closed = True
        for t in self._timers:
            t.cancel()
        for pod in list(self.pods.values()):
            try:
                pod.kill()
            except Exception as e:  # keep tearing down
                self._log(f"podsim: killing pod {pod.name}: {e}")
        if self._dnsmasq is not None and self._dnsmasq.poll() is None:
            self._dnsmasq.kill()
            try:
                self._dnsmasq.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for ns in reversed(self._created_ns):
            try:
                _destroy_netns(ns)
            except Exception as e:
                self._log(f"podsim: deleting netns {ns}: {e}")
        _live_clusters.discard(self)
        if self._own_workdir and not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- DNS ---------------------------------------------------------------------
    def _record_path(self, i):
        return os.path.join(self.hostsdir, self.hostname(i))

    def publish(self, i, delay=0.0, ip=None):
        """Publishes pod i's A records: <svc>-<i>.<domain> and the Service name <domain>.

        With delay > 0 returns at once and publishes from a timer thread later.
        Otherwise returns once dnsmasq has (re)read the record. `ip` overrides the
        address (e.g. a stale or wrong one).
        """
        if delay > 0:
            t = threading.Timer(delay, self._publish_now, (i, ip, False))
            t.daemon = True
            self._timers.append(t)
            t.start()
            self.event(f"publish {self.hostname(i)} scheduled in {delay}s")
            return
        self._publish_now(i, ip, True)

    def _publish_now(self, i, ip, wait):
        if self._closed:
            return
        path = self._record_path(i)
        tmp = os.path.join(self.hostsdir, f".{self.hostname(i)}.tmp")  # dnsmasq skips dotfiles
        before = _read(self.dns_log).count(f"read {path} ")
        with open(tmp, "w") as f:  # one line per address: A and AAAA records
            for addr in [ip] if ip else self.pod_ips(i):
                f.write(f"{addr} {self.fqdn(i)} {self.domain}\n")
        os.rename(tmp, path)  # atomic: dnsmasq never reads half a file
        self.event(f"published {self.fqdn(i)} -> {ip or self.pod_ip(i)}")
        if wait:
            self._wait_dns_log(lambda text: text.count(f"read {path} ") > before,
                               f"publish {self.fqdn(i)}")

    def unpublish(self, i):
        """Withdraws pod i's records (NXDOMAIN from then on); returns once dnsmasq flushed them."""
        path = self._record_path(i)
        if not os.path.exists(path):
            return
        before = _read(self.dns_log).count(f"from {path}\n")
        os.unlink(path)
        self.event(f"unpublished {self.fqdn(i)}")
        self._wait_dns_log(lambda text: text.count(f"from {path}\n") > before,
                           f"unpublish {self.fqdn(i)}")

    def publish_all(self):
        for i in range(self.npods):
            self.publish(i)

    # -- pods --------------------------------------------------------------------
    def start_pod(self, i, argv, env=None):
        """Starts pod i's container: `argv` exec'd as PID 1 with the pod's hostname,
        /etc/hosts, /etc/resolv.conf and network. The environment is a container's:
        PATH, HOME, HOSTNAME, JOB_COMPLETION_INDEX=i, plus `env` (a name mapped to
        None is left out: a pod of no Indexed Job has no JOB_COMPLETION_INDEX). Output goes to
        <workdir>/pod-<i>.out/.err. Returns the Pod once its PID 1 exists.
        """
        if i in self.pods and self.pods[i].running():
            raise PodsimError(f"pod {i} is already running")
        full_env = {"PATH": POD_PATH, "HOME": "/root", "LANG": "C.UTF-8",
                    "HOSTNAME": self.uname(i), "JOB_COMPLETION_INDEX": str(i)}
        full_env.update(env or {})
        full_env = {k: v for k, v in full_env.items() if v is not None}
        attempt = sum(1 for n in os.listdir(self.workdir) if n.startswith(f"pod-{i}.out"))
        suffix = f".{attempt}" if attempt else ""
        out_path = self._pod_file(i, "out" + suffix)
        err_path = self._pod_file(i, "err" + suffix)
        # If this process dies (even by SIGKILL) the kernel SIGKILLs unshare (setpriv
        # --pdeathsig, prctl(2) PR_SET_PDEATHSIG) and unshare SIGKILLs the pod's PID 1
        # (--kill-child), which takes the whole PID namespace down: no stray pods.
        cmd = ["ip", "netns", "exec", self.pod_ns(i), "setpriv", "--pdeathsig", "KILL",
               "unshare", "--pid", "--fork", "--kill-child=SIGKILL", "--uts", "--mount",
               "--mount-proc", "--propagation", "private",
               "sh", "-c", POD_INIT, "pod-init", self.uname(i),
               self._pod_file(i, "hosts"), self._pod_file(i, "resolv.conf")] + list(argv)
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            popen = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                     env=full_env, cwd="/")
        pod = Pod(self, i, list(argv), popen, out_path, err_path)
        self.pods[i] = pod  # before anything can fail: teardown must see it
        pod._find_pid1()
        self.event(f"started pod {pod.name} (host pid {pod.pid1}): {' '.join(argv)}")
        return pod

    def cut_link(self, i, carrier=True):
        """Partitions pod i from the network: its veth's bridge end goes down (the pod's
        eth0 loses carrier). Packets either way are dropped silently: no RST, no ICMP from
        the peer, as when a node drops off the network. restore_link(i) undoes it.

        carrier=False: the bridge drops pod i's frames both ways (its port disabled) while
        the pod's eth0 keeps its carrier, as when a switch or a path between the nodes
        blips: the pod's ARP entries stay (a carrier loss flushes them, and after it the
        pod re-resolves its peers' addresses at the ARP retry pace, 1 s)."""
        if carrier:
            _run("ip", "-n", self.net_ns, "link", "set", f"vp{i}", "down")
        else:
            _run("bridge", "-n", self.net_ns, "link", "set", "dev", f"vp{i}", "state", "0")
        self._cut_carrier[i] = carrier
        self.event(f"cut the link of {self.hostname(i)}" + ("" if carrier else " (carrier kept)"))

    def restore_link(self, i):
        if self._cut_carrier.pop(i, True):
            _run("ip", "-n", self.net_ns, "link", "set", f"vp{i}", "up")
        else:
            _run("bridge", "-n", self.net_ns, "link", "set", "dev", f"vp{i}", "state", "3")
        self.event(f"restored the link of {self.hostname(i)}")

    def processes_in_pod(self, i):
        """ProcInfo of every process left in pod i's PID namespace (PID 1 included)."""
        return self.pods[i].processes() if i in self.pods else []

    def wait_all(self, timeout, indices=None):
        """Waits up to `timeout` seconds in all for the given pods (default: every pod
        started) to exit; returns {index: exit code}. Raises PodTimeout."""
        deadline = time.monotonic() + timeout
        return {i: self.pods[i].wait(max(0.0, deadline - time.monotonic()))
                for i in sorted(self.pods if indices is None else indices)}

    # -- diagnostics -------------------------------------------------------------
    def event(self, msg):
        line = f"[{time.monotonic() - self._t0:7.3f}s] {msg}"
        with open(self.events_log, "a") as f:
            f.write(line + "\n")
        self._log(line)

    def diagnostics(self, lines=30):
        """Log tails of every pod, the event timeline and the DNS query log."""
        parts = [f"=== podsim {self.tag} workdir {self.workdir}"]
        for pod in sorted(self.pods.values(), key=lambda p: p.index):
            parts.append(pod.tail(lines))
            left = pod.processes()
            if left:
                parts.append("  processes in pod: " + "; ".join(
                    f"{p.pid}({p.state}) {p.cmdline or p.comm}" for p in left))
        parts.append("--- events:\n" + _read(self.events_log))
        dns = [ln for ln in _read(self.dns_log).splitlines() if "query[" in ln or " is " in ln]
        parts.append(f"--- dnsmasq (last {lines} answers):\n" + "\n".join(dns[-lines:]))
        return "\n".join(parts)


@atexit.register
def _teardown_all():
    for c in list(_live_clusters):
        c.teardown()
    _release_run()
