"""A real Prometheus scrapes a real gang and evaluates trainlet's alert rules.

Debian's `prometheus` server (scripts/install-deps installs it) runs on 127.0.0.1 with a temp
data directory, scrape and evaluation intervals of 1 s, the rules of
examples/monitoring/trainlet-rules.yml as `generate` writes them with seconds instead of
minutes, and a scrape config whose targets carry the Kubernetes pod metadata a pod discovery
would (namespace, pod name, container, the Job's label) and whose relabelings are those of
examples/monitoring/prometheus.yml: the series get the labels the Prometheus Operator's
PodMonitor gives them (namespace, pod, job, container, training_job).

It scrapes a `trainlet local` gang of 3 agents (loopback only, --health-port, --hang-timeout 30,
--max-restarts 2, NODE_NAME set): in generation 0 pod 1's worker exits 3 (class worker), the
gang restarts in place; in generation 1 pod 2's worker steps 15 times slower than the others
(a straggler). Through Prometheus' HTTP API: every pod's series have the Operator's labels and
no exported_pod; generation 1 and one restart on each pod; the leader's culprit names pod
index 1, class worker, and the node; the leader names member 2 a straggler; the alerts
TrainletStraggler (member 2), TrainletRestartStorm and TrainletRestartBudgetNearlySpent fire
and the others (not formed, no progress, no heartbeat files, hardware, spares, memory, dropped
output) stay inactive. The Prometheus process is always stopped and its data removed.

Skips, saying why, only without /usr/bin/prometheus (or with the Python stand-in).
"""

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

from harness import BIN, REPO

try:
    import yaml
except ImportError:
    yaml = None

PROMETHEUS = "/usr/bin/prometheus"
MON = os.path.join(REPO, "examples", "monitoring")
PODS = 3
NODE = "e2e-node-a"
NAMESPACE = "e2e"
JOB = "trainer"

# Rules with seconds for minutes (examples/monitoring/generate --set).
FAST = [
    "TrainletGangNotFormed.for=20s",
    "TrainletNoProgress.threshold=20", "TrainletNoProgress.for=3s",
    "TrainletNoHeartbeatFiles.for=5s",
    "TrainletStraggler.for=3s",
    "TrainletRestartStorm.window=3m", "TrainletRestartStorm.threshold=1",
    "TrainletRestartBudgetNearlySpent.threshold=0.5",
    "TrainletSparesUsedUp.for=3s",
    "TrainletAgentMemoryHigh.for=3s",
    "TrainletOutputDropped.window=1m",
]
FIRING = {"TrainletStraggler", "TrainletRestartStorm", "TrainletRestartBudgetNearlySpent"}

# Generation 0: pod 1 fails after 5 s of steps. Generation 1: pod 2 steps every 1.5 s, the
# others every 0.1 s, until the stop file exists (at most 240 s).
WORKER = r"""
stop=$1 gen=${TORCHELASTIC_RESTART_COUNT:-0}
trap 'exit 143' TERM
echo "rank $RANK generation $gen"
if [ "$gen" = 0 ] && [ "$RANK" = 1 ]; then
  n=0; while [ $n -lt 25 ]; do touch "$TRAINLET_HEARTBEAT_FILE"; sleep 0.2; n=$((n + 1)); done
  echo "rank 1 fails" >&2; exit 3
fi
period=0.1
[ "$gen" != 0 ] && [ "$RANK" = 2 ] && period=1.5
end=$(( $(date +%s) + 240 ))
while [ ! -e "$stop" ] && [ "$(date +%s)" -lt "$end" ]; do
  touch "$TRAINLET_HEARTBEAT_FILE"; sleep $period
done
"""


def die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_ports(n):
    """n consecutive free loopback ports (bound and released just now)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n >= 65536:
            continue
        socks = []
        try:
            for i in range(n):
                t = socket.socket()
                socks.append(t)
                t.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for t in socks:
                t.close()
    raise RuntimeError("no free loopback port range")


class PrometheusTest(unittest.TestCase):
    def setUp(self):
        if not os.access(PROMETHEUS, os.X_OK):
            self.skipTest(f"{PROMETHEUS} not installed (scripts/install-deps installs Debian's "
                          f"prometheus package)")
        if not (BIN and os.access(BIN, os.X_OK)) or BIN.endswith(".py"):
            self.skipTest("needs the trainlet binary (the stand-in has no metrics)")
        if yaml is None:
            self.skipTest("python3-yaml not importable")
        self.dir = tempfile.mkdtemp(prefix="trainlet-prom-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

    # -- processes (always stopped: addCleanup runs even when setUp's caller fails) --------
    def spawn(self, argv, log, **kw):
        f = open(os.path.join(self.dir, log), "a")  # O_APPEND: every agent writes to it
        self.addCleanup(f.close)
        # Its own process group (stopped whole below), and SIGTERM from the kernel should
        # this test process die first (prctl(2) PR_SET_PDEATHSIG): nothing outlives the test.
        p = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, preexec_fn=die_with_parent, **kw)
        self.addCleanup(self.stop, p)
        return p

    @staticmethod
    def stop(p):
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def log(self, name):
        try:
            with open(os.path.join(self.dir, name)) as f:
                return f.read()
        except FileNotFoundError:
            return "(none yet)"

    # -- Prometheus ----------------------------------------------------------------------
    def start_prometheus(self, health_port):
        rules = subprocess.run([sys.executable, os.path.join(MON, "generate"),
                                *[a for s in FAST for a in ("--set", s)]],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               check=True).stdout
        with open(os.path.join(self.dir, "rules.yml"), "w") as f:
            f.write(rules)
        with open(os.path.join(MON, "prometheus.yml")) as f:
            plain = yaml.safe_load(f)["scrape_configs"][0]
        targets = [{"targets": [f"127.0.0.1:{health_port + i}"],
                    "labels": {"__meta_kubernetes_namespace": NAMESPACE,
                               "__meta_kubernetes_pod_name": f"{JOB}-{i}-x{i}z",
                               "__meta_kubernetes_pod_container_name": "trainer",
                               "__meta_kubernetes_pod_container_port_name": "metrics",
                               "__meta_kubernetes_pod_label_job_name": JOB}}
                   for i in range(PODS)]
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s",
                             "scrape_timeout": "1s"},
                  "rule_files": ["rules.yml"],
                  "scrape_configs": [{"job_name": f"{NAMESPACE}/{JOB}",  # the Operator's job
                                      "static_configs": targets,
                                      "relabel_configs": plain["relabel_configs"]}]}
        with open(os.path.join(self.dir, "prometheus.yml"), "w") as f:
            yaml.safe_dump(config, f)
        self.prom_port = free_ports(1)
        self.prom = self.spawn([PROMETHEUS, "--config.file", "prometheus.yml",
                                "--storage.tsdb.path", os.path.join(self.dir, "data"),
                                "--web.listen-address", f"127.0.0.1:{self.prom_port}"],
                               "prometheus.log", cwd=self.dir)
        self.wait_for(lambda: self.api("/-/ready", raw=True), 60, "prometheus ready")

        def scraping():  # discovery hands targets over after ~5 s; the gang starts after it
            t = self.api("/api/v1/targets")["activeTargets"]
            return len(t) == PODS and all(x["lastScrape"] > "2000" for x in t)
        self.wait_for(scraping, 60, "prometheus scraping every target (down before the gang)")

    def api(self, path, raw=False, **params):
        url = f"http://127.0.0.1:{self.prom_port}{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                body = r.read().decode()
        except OSError:
            return None
        if raw:
            return body
        out = json.loads(body)
        self.assertEqual(out["status"], "success", body)
        return out["data"]

    def query(self, q):
        return self.api("/api/v1/query", query=q)["result"]

    def alert_states(self):
        """{alert name: (state, [labels of each active alert])} from /api/v1/rules."""
        out = {}
        for g in self.api("/api/v1/rules", type="alert")["groups"]:
            for r in g["rules"]:
                out[r["name"]] = (r["state"], [a["labels"] for a in r.get("alerts", [])
                                               if a["state"] == "firing"])
        return out

    def wait_for(self, check, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = check()
            if got:
                return got
            if self.prom.poll() is not None:
                self.fail(f"prometheus exited {self.prom.returncode}:\n"
                          + self.log("prometheus.log")[-3000:])
            time.sleep(0.5)
        self.fail(f"timed out after {timeout} s waiting for {what}\n--- gang:\n"
                  + self.log("gang.log")[-3000:])

    # -- the test ------------------------------------------------------------------------
    def test_prometheus_scrapes_a_gang_and_evaluates_the_alerts(self):
        health = free_ports(PODS)
        self.start_prometheus(health)
        stop = os.path.join(self.dir, "stop")
        env = dict(os.environ, NODE_NAME=NODE)
        gang = self.spawn([BIN, "local", "--nnodes", str(PODS), "--health-port", str(health),
                           "--hang-timeout", "30", "--max-restarts", "2", "--grace-period", "2",
                           "--", "sh", "-c", WORKER, "worker", stop], "gang.log", env=env)

        def generation(n):
            r = self.query("trainlet_gang_generation")
            return len(r) == PODS and all(s["value"][1] == str(n) for s in r) and r
        self.wait_for(lambda: generation(0), 60, "generation 0 on every pod")
        got = self.wait_for(lambda: generation(1), 90, "generation 1 on every pod")
        # The Operator's target labels, and ours apart from them.
        self.assertEqual(sorted(s["metric"]["pod"] for s in got),
                         [f"{JOB}-{i}-x{i}z" for i in range(PODS)])
        for s in got:
            m = s["metric"]
            self.assertEqual((m["namespace"], m["job"], m["container"], m["training_job"],
                              m["job_name"]), (NAMESPACE, f"{NAMESPACE}/{JOB}", "trainer", JOB, JOB),
                             m)
        self.assertEqual(self.query('{__name__=~"trainlet_.+", exported_pod!=""}'), [])
        for name, want in (("trainlet_gang_restarts_total", "1"),
                           ("trainlet_gang_restart_count", "1"),
                           ("trainlet_gang_max_restarts", "2"), ("trainlet_gang_pods_min", "3"),
                           ("trainlet_gang_spares_configured", "0")):
            vals = [s["value"][1] for s in self.query(name)]
            self.assertEqual(vals, [want] * PODS, name)
        culprit = self.query("trainlet_gang_last_culprit")
        self.assertEqual(len(culprit), 1, culprit)
        self.assertEqual({k: culprit[0]["metric"][k] for k in ("pod", "member", "class",
                                                              "node_name")},
                         {"pod": f"{JOB}-0-x0z", "member": "1", "class": "worker",
                          "node_name": NODE})
        self.assertEqual(self.query("sum(trainlet_worker_exits_total{class=\"worker\"})")[0]
                         ["value"][1], "1")

        def alerts_fired():
            states = self.alert_states()
            return all(states.get(a, ("",))[0] == "firing" for a in FIRING) and states
        states = self.wait_for(alerts_fired, 90, f"alerts {sorted(FIRING)} firing")
        straggler = self.query("trainlet_straggler")
        self.assertEqual([(s["metric"]["pod"], s["metric"]["member"]) for s in straggler],
                         [(f"{JOB}-0-x0z", "2")])
        self.assertEqual(states["TrainletStraggler"][1],
                         [{"alertname": "TrainletStraggler", "member": "2",
                           "namespace": NAMESPACE, "severity": "warning", "training_job": JOB}])
        for name in ("TrainletRestartStorm", "TrainletRestartBudgetNearlySpent"):
            self.assertEqual(states[name][1],
                             [{"alertname": name, "namespace": NAMESPACE, "severity": "warning",
                               "training_job": JOB}])
        quiet = {n: s for n, (s, _) in states.items() if n not in FIRING}
        self.assertEqual(set(quiet), {"TrainletGangNotFormed", "TrainletNoProgress",
                                      "TrainletNoHeartbeatFiles", "TrainletSparesUsedUp",
                                      "TrainletHardwareFailure", "TrainletAgentMemoryHigh",
                                      "TrainletOutputDropped"})
        self.assertEqual(quiet, {n: "inactive" for n in quiet})
        self.assertEqual(
            self.query("namespace_training_job:trainlet_gang_generation:max")[0]["value"][1], "1")
        print(f"\n    alerts firing: {sorted(FIRING)}; heartbeat age "
              f"{self.query('max(trainlet_worker_heartbeat_age_seconds)')[0]['value'][1]} s",
              end=" ", flush=True)
        # The gang ends well.
        open(stop, "w").close()
        gang.wait(60)
        self.assertEqual(gang.returncode, 0, self.log("gang.log")[-3000:])


if __name__ == "__main__":
    unittest.main()
