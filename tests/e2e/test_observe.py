"""Seeing the gang: /metrics, JSON logs, progress while waiting, carriage returns.

Simulated pods as in test_gang.py (pods x 1 worker, --grace-period 2, a
--termination-log per pod).

  * metrics: 2 pods with --health-port 8080 --max-restarts 1 --hang-timeout 30.
    Generation 0: pod 1's worker exits 3 (class worker); pod 0's is stopped (TERM,
    exits 143). Generation 1: both workers touch their heartbeat file and print a
    carriage-return progress bar. /metrics, scraped in each pod's network namespace
    with `trainlet probe metrics` and once over plain HTTP, is parsed with
    prometheus-client's text parser (from /opt/trainlet-pylib, as scripts/install-deps
    puts it; skipped without it) and checked against what happened: generation 1, one
    restart, 2 of 2 pods, 1 worker running, pod 1's exit counted under worker and pod 0's
    under peer_failed, last failure class worker, a fresh heartbeat, lines forwarded and
    none dropped; the leader has a heartbeat round trip for pod 1 and names pod 1, class
    worker, on its node (NODE_NAME node-b, from pod 1's hello) as the last culprit; every pod
    says formed, MIN 2, --max-restarts 1 with 1 counted, no spares. The progress bar's
    redraws each came out with the rank prefix.
  * json: 2 pods with --log-format json (pod 1 also --worker-log-format json); pod 1's
    worker exits 42 (bug). Every line of trainlet's own stderr parses as one JSON object
    with time (RFC 3339, ms), level, pod_index, generation and message; the last one's
    "summary" is the termination message's object. Pod 1's worker lines are JSON too
    ({"rank":1,"stream":...,"line":...}). Start-up failures (a bad flag, a bad value) are
    one JSON line each as well.
  * stragglers: 3 pods with --hang-timeout 30; pods 0 and 1 touch their heartbeat file
    every 0.1 s, pod 2's worker sleeps 1.5 s between touches. The leader names pod 2
    (rank 2) within 3 of its steps, exports trainlet_straggler{member="2"} 1, and never
    names the others.
  * progress: 3 pods, pod 2 pointed at a port where nothing listens. Within 10-13 s the
    leader says which index is missing and how long is left, and pod 2 which address it
    tried and the last error.
"""

import json
import os
import re
import subprocess
import sys
import time
import unittest

import test_gang
from harness import BIN, PYTHON, PodsimTestCase

HEALTH_PORT = 8080
GRACE = 2
PYLIB = "/opt/trainlet-pylib"  # where scripts/install-deps puts prometheus-client
RFC3339_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

# usage: sh -c WORKER trainer MARKS FIRST LATER CODE
#   generation 0 runs mode FIRST, later ones LATER:
#   fail: exit CODE after 0.5 s; live: wait until stopped;
#   beat: a carriage-return progress bar, then touch $TRAINLET_HEARTBEAT_FILE every 0.2 s
#         for 12 s, exit 0.
WORKER = r"""
marks=$1 first=$2 later=$3 code=$4
gen=${TORCHELASTIC_RESTART_COUNT:-unset}
mark() { echo "$1 $(date +%s.%N) $gen" >> "$marks"; }
trap 'mark TERM; exit 143' TERM
mark ready
echo "rank $RANK ready: generation $gen"
mode=$first
[ "$gen" != 0 ] && mode=$later
case $mode in
fail) sleep 0.5; echo "rank $RANK failing with $code" >&2; exit "$code" ;;
beat) printf 'bar 1/3\rbar 2/3\rbar 3/3\n'
      n=0; while [ $n -lt 60 ]; do touch "$TRAINLET_HEARTBEAT_FILE"; sleep 0.2; n=$((n + 1)); done
      exit 0 ;;
*)    n=0; while [ $n -lt 6000 ]; do sleep 0.1; n=$((n + 1)); done; exit 1 ;;
esac
"""


# usage: sh -c STEPPER trainer MARKS TENTHS STEPS: STEPS steps of TENTHS/10 s, a touch
# of $TRAINLET_HEARTBEAT_FILE and a "step <wall time>" mark after each; exit 0.
STEPPER = r"""
marks=$1 tenths=$2 steps=$3
trap 'exit 143' TERM
echo "rank $RANK ready"
n=0
while [ $n -lt "$steps" ]; do
  i=0; while [ $i -lt "$tenths" ]; do sleep 0.1; i=$((i + 1)); done
  touch "$TRAINLET_HEARTBEAT_FILE"
  echo "step $(date +%s.%N)" >> "$marks"
  n=$((n + 1))
done
"""


def prometheus_parser():
    if os.path.isdir(PYLIB) and PYLIB not in sys.path:
        sys.path.append(PYLIB)
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        return None
    return text_string_to_metric_families


def scrape(cluster, i):
    """`trainlet probe metrics` in pod i's network namespace: (exit code, text)."""
    r = subprocess.run(["ip", "netns", "exec", cluster.pod_ns(i), BIN, "probe", "metrics",
                        "--health-port", str(HEALTH_PORT)],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=15)
    cluster.event(f"probe metrics in {cluster.hostname(i)}: exit {r.returncode}")
    return r.returncode, r.stdout


def samples(parse, text):
    """{(name, frozenset(labels)): value} from a Prometheus text exposition."""
    out = {}
    for family in parse(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


class ObserveTest(test_gang.GangHelpers, PodsimTestCase):
    needs_trainlet = True

    standin_skip = "the stand-in has no metrics"

    def worker(self, c, i, first, later, code=0):
        return ["sh", "-c", WORKER, "trainer", self.marks_path(c, i), first, later, str(code)]

    def start(self, c, i, worker, *flags, nnodes=2, rdzv_timeout=30, env=None):
        return c.start_pod(i, self.trainlet("--termination-log", self.tlog(c, i), *flags,
                                            nnodes=nnodes, nproc=1, grace=GRACE,
                                            rdzv_timeout=rdzv_timeout, cmd=worker), env=env)

    # -- /metrics ------------------------------------------------------------------------
    def test_metrics_follow_a_restart_and_exit_classes(self):
        parse = prometheus_parser()
        if parse is None:
            self.skipTest(f"prometheus-client not importable (scripts/install-deps puts it "
                          f"in {PYLIB})")
        with self.cluster(pods=2) as c:
            c.publish_all()
            flags = ("--health-port", str(HEALTH_PORT), "--max-restarts", "1",
                     "--hang-timeout", "30")
            # Each pod's node, as the downward API's spec.nodeName gives it.
            self.start(c, 0, self.worker(c, 0, "live", "beat"), *flags,
                       env={"NODE_NAME": "node-a"})
            self.start(c, 1, self.worker(c, 1, "fail", "beat", 3), *flags,
                       env={"NODE_NAME": "node-b"})
            for i in range(2):
                c.pods[i].wait_for_output(r"\[rank\d\]: bar 3/3\n", 40, "stdout")
            time.sleep(2.5)  # heartbeats both ways (1 s each): a round trip to report
            got = {}
            for i in range(2):
                code, text = scrape(c, i)
                self.assertEqual(code, 0, f"probe metrics in pod {i} failed\n" + c.pods[i].tail())
                self.assertIn("# TYPE trainlet_gang_restarts_total counter", text)
                got[i] = samples(parse, text)
            r = subprocess.run(
                ["ip", "netns", "exec", c.pod_ns(1), PYTHON, "-c",
                 "import urllib.request as u; r = u.urlopen('http://127.0.0.1:%d/metrics', "
                 "timeout=5); print(r.status, r.headers['Content-Type'])" % HEALTH_PORT],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
            self.assertEqual(r.stdout.strip(), "200 text/plain; version=0.0.4; charset=utf-8")

            def value(i, name, **labels):
                key = (name, frozenset((k, str(v)) for k, v in labels.items()))
                self.assertIn(key, got[i], f"pod {i}: no {name}{labels}")
                return got[i][key]

            for i in range(2):
                self.assertEqual(value(i, "trainlet_gang_generation"), 1)
                self.assertEqual(value(i, "trainlet_gang_restarts_total"), 1)
                self.assertEqual(value(i, "trainlet_gang_pods_joined"), 2)
                self.assertEqual(value(i, "trainlet_gang_pods_expected"), 2)
                self.assertEqual(value(i, "trainlet_workers_running"), 1)
                self.assertEqual(value(i, "trainlet_last_failure", **{"class": "worker"}), 1)
                self.assertEqual(value(i, "trainlet_last_failure", **{"class": "bug"}), 0)
                self.assertLess(value(i, "trainlet_worker_heartbeat_age_seconds", local_rank=0), 5)
                self.assertGreaterEqual(value(i, "trainlet_output_lines_total", stream="stdout"), 2)
                self.assertEqual(value(i, "trainlet_output_dropped_lines_total", stream="stdout"), 0)
                self.assertEqual(value(i, "trainlet_output_dropped_lines_total", stream="stderr"), 0)
                self.assertGreater(value(i, "trainlet_process_resident_memory_bytes"), 1 << 20)
                self.assertGreater(value(i, "trainlet_process_cpu_seconds_total"), 0)
                self.assertGreater(value(i, "trainlet_rendezvous_duration_seconds"), 0)
                # What the alert rules (examples/monitoring) need besides.
                self.assertEqual(value(i, "trainlet_gang_formed"), 1)
                self.assertEqual(value(i, "trainlet_gang_pods_min"), 2)
                self.assertEqual(value(i, "trainlet_gang_max_restarts"), 1)
                self.assertEqual(value(i, "trainlet_gang_restart_count"), 1)
                self.assertEqual(value(i, "trainlet_gang_spares_configured"), 0)
            # The leader names the culprit of generation 0 and its node, which only pod 1's
            # hello told it; a member has no culprit series.
            self.assertEqual(value(0, "trainlet_gang_last_culprit", member=1, node_name="node-b",
                                   **{"class": "worker"}), 1)
            self.assertFalse([k for k in got[1] if k[0] == "trainlet_gang_last_culprit"])
            # Generation 0: pod 1's worker failed (worker), pod 0's was stopped for it.
            self.assertEqual(value(1, "trainlet_worker_exits_total", **{"class": "worker"}), 1)
            self.assertEqual(value(1, "trainlet_worker_exits_total", **{"class": "ok"}), 0)
            self.assertEqual(value(0, "trainlet_worker_exits_total", **{"class": "peer_failed"}), 1)
            self.assertEqual(value(0, "trainlet_worker_exits_total", **{"class": "worker"}), 0)
            rtt = value(0, "trainlet_heartbeat_rtt_seconds", member=1)
            self.assertTrue(0 < rtt < 1, f"heartbeat round trip {rtt}")
            self.assertNotIn(("trainlet_heartbeat_rtt_seconds", frozenset({("member", "1")})),
                             got[1], "a member exports the leader's per-pod series")
            print(f"\n    heartbeat rtt pod 1: {rtt * 1000:.2f} ms", end=" ", flush=True)
            exits = self.watch(c, 40)
            self.assertEqual({i: e[0] for i, e in exits.items()}, {0: 0, 1: 0})
            # Carriage returns end lines: every redraw of the bar has the prefix.
            for i in range(2):
                self.assertIn(f"[rank{i}]: bar 1/3\r[rank{i}]: bar 2/3\r[rank{i}]: bar 3/3\n",
                              c.pods[i].stdout())
            self.assertNothingLeft(c)

    # -- --log-format json -------------------------------------------------------------------
    def assertJsonLines(self, text, who, worker_prefix=True):
        """Every line of trainlet's stderr `text` is one JSON object of the log format
        (worker lines, `[rankN]: ...`, excepted when worker_prefix); returns them."""
        objs = []
        for line in text.splitlines():
            if worker_prefix and re.match(r"^\[rank\d+\]: ", line):
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                self.fail(f"{who}: not JSON: {line!r}")
            self.assertIsInstance(obj, dict, line)
            if "rank" in obj and "stream" in obj:  # a wrapped worker line
                self.assertEqual(set(obj), {"rank", "stream", "line"}, line)
                objs.append(obj)
                continue
            for key in ("time", "level", "generation", "message"):
                self.assertIn(key, obj, f"{who}: {line}")
            self.assertRegex(obj["time"], RFC3339_MS)
            objs.append(obj)
        self.assertTrue(objs, f"{who}: no lines")
        return objs

    def test_json_logs_every_line_parses_failures_included(self):
        with self.cluster(pods=2) as c:
            c.publish_all()
            self.start(c, 0, self.worker(c, 0, "live", "live"), "--log-format", "json")
            self.start(c, 1, self.worker(c, 1, "fail", "fail", 42), "--log-format", "json",
                       "--worker-log-format", "json")
            exits = self.watch(c, 40)
            self.assertEqual({i: e[0] for i, e in exits.items()}, {0: 76, 1: 42})
            for i in range(2):
                objs = self.assertJsonLines(c.pods[i].stderr(), f"pod {i}")
                own = [o for o in objs if "message" in o]
                # Lines before the pod knew its index (flag parsing) have no pod_index.
                self.assertTrue(all(o.get("pod_index", i) == i for o in own), own[:3])
                self.assertEqual(own[-1].get("pod_index"), i)
                with open(self.tlog(c, i)) as f:
                    termination = json.load(f)
                last = own[-1]
                self.assertEqual(last["summary"], termination, f"pod {i}: last line {last}")
                self.assertEqual(last["level"], "error")
                self.assertEqual((last["class"], last["code"]),
                                 (termination["class"], termination["code"]))
            wrapped = [o for o in self.assertJsonLines(c.pods[1].stderr(), "pod 1", False)
                       if "stream" in o]
            self.assertIn({"rank": 1, "stream": "stderr", "line": "rank 1 failing with 42"},
                          wrapped)
            stdout = [json.loads(ln) for ln in c.pods[1].stdout().splitlines()]
            self.assertIn({"rank": 1, "stream": "stdout", "line": "rank 1 ready: generation 0"},
                          stdout)
            self.assertNothingLeft(c)

    def test_json_logs_for_startup_errors(self):
        for argv, code in (([BIN, "--log-format", "json", "--no-such-flag", "--", "true"], 78),
                           ([BIN, "--log-format=json", "--nnodes", "x", "--", "true"], 78)):
            env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINLET_", "PET_"))}
            r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=30, env=env)
            self.assertEqual(r.returncode, code, r.stderr)
            objs = self.assertJsonLines(r.stderr, " ".join(argv))
            self.assertEqual(len(objs), 1, r.stderr)
            self.assertEqual((objs[0]["class"], objs[0]["code"]), ("config", 78))
            self.assertEqual(objs[0]["summary"]["class"], "config")
        env = dict(env, TRAINLET_LOG_FORMAT="json")
        r = subprocess.run([BIN, "--nnodes", "x", "--", "true"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, timeout=30, env=env)
        self.assertEqual(len(self.assertJsonLines(r.stderr, "TRAINLET_LOG_FORMAT=json")), 1)

    # -- stragglers ------------------------------------------------------------------------
    def test_a_straggler_is_named_within_three_of_its_steps(self):
        with self.cluster(pods=3) as c:
            c.publish_all()
            plan = {0: (1, 100), 1: (1, 100), 2: (15, 8)}  # (tenths per step, steps)
            for i, (tenths, steps) in plan.items():
                worker = ["sh", "-c", STEPPER, "trainer", self.marks_path(c, i), str(tenths),
                          str(steps)]
                self.start(c, i, worker, "--hang-timeout", "30", "--health-port",
                           str(HEALTH_PORT), nnodes=3)
            m = c.pods[0].wait_for_output(
                r"straggler: pod 2 \(rank 2\) at ([0-9.]+) steps/s, ([0-9.]+)x behind", 40,
                "stderr")
            named = time.time()
            code, text = scrape(c, 0)
            self.assertEqual(code, 0)
            self.assertIn('\ntrainlet_straggler{member="2"} 1\n', text)
            self.assertNotIn('trainlet_straggler{member="0"}', text)
            with open(self.marks_path(c, 2)) as f:
                steps = [float(ln.split()[1]) for ln in f]
            before = sum(1 for t in steps if t <= named)
            print(f"\n    pod 2 named after {before} of its steps ({m.group(1)} steps/s, "
                  f"{m.group(2)}x behind)", end=" ", flush=True)
            self.assertLessEqual(before, 3, "named too late")
            exits = self.watch(c, 60)
            self.assertEqual({i: e[0] for i, e in exits.items()}, {0: 0, 1: 0, 2: 0})
            self.assertNotRegex(c.pods[0].stderr(), r"straggler: pod [01] \(",
                                "a pod at the gang's pace was named")
            self.assertNothingLeft(c)

    # -- progress while waiting ------------------------------------------------------------
    def test_progress_while_waiting_in_the_rendezvous(self):
        with self.cluster(pods=3) as c:
            c.publish_all()
            for i in range(2):
                self.start(c, i, self.worker(c, i, "live", "live"), nnodes=3, rdzv_timeout=16)
            # Pod 2 tries a port where nothing listens: refused, again and again.
            self.start(c, 2, self.worker(c, 2, "live", "live"), "--rdzv-port", "29411",
                       nnodes=3, rdzv_timeout=16)
            t0 = time.monotonic()
            leader = c.pods[0].wait_for_output(
                r"leader: waiting for the gang: 2 of 3 pod\(s\) joined; missing indices 2; "
                r"(\d+) s left", 20, "stderr")
            took = time.monotonic() - t0
            member = c.pods[2].wait_for_output(
                r"rendezvous: still trying leader \S+ port 29411 \(.*addresses tried: "
                r"[0-9.]+; last error: [0-9.]+: Connection refused\); (\d+) s left", 10, "stderr")
            c.pods[1].wait_for_output(r"connected to leader \S+ port 29400, waiting for the gang "
                                      r"to form; \d+ s left", 10, "stderr")
            print(f"\n    first progress line after {took:.1f} s", end=" ", flush=True)
            self.assertLess(took, 13)
            for m in (leader, member):
                self.assertTrue(3 <= int(m.group(1)) <= 7, m.group(0))
            exits = self.watch(c, 30)
            self.assertEqual({i: e[0] for i, e in exits.items()}, {0: 75, 1: 75, 2: 75})
            # At most one line per 10 s: the deadline (16 s) leaves room for one each.
            for i in (0, 2):
                n = len(re.findall(r"waiting for the gang: |still trying leader",
                                   c.pods[i].stderr()))
                self.assertEqual(n, 1, c.pods[i].stderr())
            self.assertNothingLeft(c)


if __name__ == "__main__":
    unittest.main()
