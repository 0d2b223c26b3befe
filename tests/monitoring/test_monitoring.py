#!/usr/bin/python3
"""The alert rules and the dashboard of examples/monitoring, checked against promtool and
against the series a real trainlet exports.

    /usr/bin/python3 tests/monitoring/test_monitoring.py --trainlet build/agent/trainlet

- promtool check rules on trainlet-rules.yml, and promtool test rules on
  trainlet-rules.test.yml, whose tests make every alert fire and not fire.
- prometheusrule.yaml is what `generate --prometheusrule` makes of the rules now, and its
  rules are the plain file's; generate's parameters change what they say and nothing else.
- Every alert has a severity, a summary, a description naming the pod (or the pod index)
  and the Job, and a runbook_url whose section exists in docs/runbook.md.
- Every series a rule or a dashboard query names is one trainlet exports (the families of
  /metrics scraped from a `trainlet local` gang's leader with --health-port) or a recording
  rule's; and every exported family is on the dashboard.
- prometheus.yml (plain Prometheus) passes promtool check config, its kubernetes_sd
  replaced by a static target (Debian's Prometheus is built without Kubernetes discovery).

promtool comes from Debian's prometheus package (scripts/install-deps); without it the
promtool checks skip, saying so. python3-yaml is needed.
"""

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.request

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MON = os.path.join(REPO, "examples", "monitoring")
RULES = os.path.join(MON, "trainlet-rules.yml")
RULES_TEST = os.path.join(MON, "trainlet-rules.test.yml")
GENERATE = os.path.join(MON, "generate")
RUNBOOK = os.path.join(REPO, "docs", "runbook.md")
TRAINLET = os.environ.get("TRAINLET_BIN", "")
PROMTOOL = "/usr/bin/promtool"
NEED_PROMTOOL = "promtool not installed (scripts/install-deps installs Debian's prometheus)"

# PromQL words that are not series names.
PROMQL_WORDS = {
    "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
    "group_right", "inf", "nan",
}


def load(path):
    with open(path) as f:
        return yaml.safe_load(f) if path.endswith((".yml", ".yaml")) else json.load(f)


def rules():
    return [r for g in load(RULES)["groups"] for r in g["rules"]]


def alerts():
    return [r for r in rules() if "alert" in r]


def run(argv, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120, **kw)


def series_names(expr):
    """The series names a PromQL expression selects (not functions, keywords, labels)."""
    expr = re.sub(r"#[^\n]*", " ", expr)                       # comments
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', " ", expr)             # strings
    expr = re.sub(r"\{[^}]*\}", " ", expr)                     # label matchers
    expr = re.sub(r"\[[^\]]*\]", " ", expr)                    # ranges, subqueries
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = set()
    for m in re.finditer(r"(?<![\w$.])([a-zA-Z_:][\w:]*)(\s*\()?", expr):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in PROMQL_WORDS:
            continue
        names.add(word)
    return names


def dashboard_exprs(dash):
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"]))
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            q = v["query"]["query"]
            m = re.fullmatch(r"label_values\((.*),\s*\w+\)", q)
            out.append((f"variable {v['name']}", m.group(1) if m else q))
    for a in dash["annotations"]["list"]:
        out.append((f"annotation {a['name']}", a["expr"]))
    return out


def free_port(n):
    """A port P with P..P+n-1 free on 127.0.0.1 (bound and released just now)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + n < 65536 and all(_free(port + i) for i in range(n)):
            return port
    raise RuntimeError("no free port range")


def _free(port):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


_FAMILIES = None


def exported_families():
    """{name: type} of the families a `trainlet local` leader's /metrics has."""
    global _FAMILIES
    if _FAMILIES is not None:
        return _FAMILIES
    port = free_port(2)
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen([TRAINLET, "local", "--nnodes", "2", "--health-port", str(port),
                             "--hang-timeout", "30", "--", "sleep", "30"],
                            stdout=subprocess.DEVNULL, stderr=log, text=True)
    try:
        text = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "trainlet_gang_formed 1" not in text:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    text = r.read().decode()
            except OSError:
                pass
            time.sleep(0.2)
        if "trainlet_gang_formed 1" not in text:
            log.seek(0)
            raise AssertionError(f"no formed gang's metrics on 127.0.0.1:{port}:\n{text}\n"
                                 f"trainlet local:\n{log.read()[-3000:]}")
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    _FAMILIES = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    return _FAMILIES


class RulesTest(unittest.TestCase):
    @unittest.skipUnless(os.access(PROMTOOL, os.X_OK), NEED_PROMTOOL)
    def test_promtool_checks_the_rules_and_runs_their_unit_tests(self):
        r = run([PROMTOOL, "check", "rules", RULES])
        self.assertEqual(r.returncode, 0, r.stdout)
        r = run([PROMTOOL, "test", "rules", os.path.basename(RULES_TEST)], cwd=MON)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("SUCCESS", r.stdout)

    def test_every_alert_has_tests_that_fire_it_and_that_do_not(self):
        fires, quiet = set(), set()
        for t in load(RULES_TEST)["tests"]:
            for a in t.get("alert_rule_test", []):
                (fires if a.get("exp_alerts") else quiet).add(a["alertname"])
        names = {a["alert"] for a in alerts()}
        self.assertEqual(names - fires, set(), "alerts no test makes fire")
        self.assertEqual(names - quiet, set(), "alerts no test checks silent")
        self.assertEqual(fires | quiet, names, "tests of alerts that do not exist")

    def test_every_alert_says_what_where_and_links_its_runbook_section(self):
        with open(RUNBOOK) as f:
            anchors = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                       for h in re.findall(r"^#+ (.*)$", f.read(), re.M)}
        for a in alerts():
            name, ann = a["alert"], a.get("annotations", {})
            self.assertIn(a.get("labels", {}).get("severity"), {"critical", "warning", "info"},
                          name)
            self.assertTrue(ann.get("summary"), name)
            d = ann.get("description", "")
            self.assertIn("$labels.training_job", d, f"{name}: the description names the Job")
            self.assertIn("$labels.namespace", d, name)
            by = re.findall(r"\bby \(([^)]*)\)", a["expr"])[0]
            for who in ("pod", "member", "node_name"):
                if re.search(rf"\b{who}\b", by):
                    self.assertIn(f"$labels.{who}", d, f"{name}: the description names the {who}")
            url = ann.get("runbook_url", "")
            self.assertEqual(url, f"docs/runbook.md#{name.lower()}", name)
            self.assertIn(name.lower(), anchors, f"{name}: no section in docs/runbook.md")

    def test_gang_wide_series_are_aggregated_with_max_not_sum(self):
        gang_wide = ("trainlet_gang_generation", "trainlet_gang_restarts_total",
                     "trainlet_gang_restart_count", "trainlet_gang_max_restarts",
                     "trainlet_gang_spares_configured", "trainlet_gang_formed",
                     "trainlet_gang_pods_")
        dash = load(os.path.join(MON, "dashboard.json"))
        exprs = [r["expr"] for r in rules()] + [e for _, e in dashboard_exprs(dash)]
        for e in exprs:
            for m in re.finditer(r"\b(sum|count|avg)\s*by\s*\([^)]*\)\s*\(([^;]*)", e):
                inner = m.group(2).split(")")[0]
                for g in gang_wide:
                    self.assertNotIn(g, inner, f"{m.group(1)} by over a gang-wide series: {e}")


class GenerateTest(unittest.TestCase):
    def test_prometheusrule_is_generated_from_the_rules_now(self):
        r = run([sys.executable, GENERATE, "--prometheusrule"])
        self.assertEqual(r.returncode, 0, r.stdout)
        with open(os.path.join(MON, "prometheusrule.yaml")) as f:
            self.assertEqual(r.stdout, f.read(),
                             "prometheusrule.yaml is stale: run examples/monitoring/generate "
                             "--prometheusrule > examples/monitoring/prometheusrule.yaml")
        pr = yaml.safe_load(r.stdout)
        self.assertEqual((pr["apiVersion"], pr["kind"]),
                         ("monitoring.coreos.com/v1", "PrometheusRule"))
        self.assertEqual(pr["spec"]["groups"], load(RULES)["groups"])

    def test_parameters_change_their_values_only(self):
        r = run([sys.executable, GENERATE, "--set", "TrainletStraggler.for=5s",
                 "--set", "TrainletRestartStorm.window=1m",
                 "--set", "TrainletRestartStorm.threshold=1",
                 "--set", "TrainletRestartBudgetNearlySpent.threshold=0.5",
                 "--runbook-base", "https://wiki.example/ml/"])
        self.assertEqual(r.returncode, 0, r.stdout)
        got = {x.get("alert"): x for g in yaml.safe_load(r.stdout)["groups"] for x in g["rules"]}
        want = {x.get("alert"): x for x in rules()}
        self.assertEqual(got["TrainletStraggler"]["for"], "5s")
        self.assertIn("[1m]", got["TrainletRestartStorm"]["expr"])
        self.assertRegex(got["TrainletRestartStorm"]["expr"], r">= 1  # threshold")
        self.assertRegex(got["TrainletRestartBudgetNearlySpent"]["expr"], r"\b0\.5  # threshold")
        self.assertEqual(got["TrainletStraggler"]["annotations"]["runbook_url"],
                         "https://wiki.example/ml/docs/runbook.md#trainletstraggler")
        for name in want:  # nothing else changed
            if name in ("TrainletStraggler", "TrainletRestartStorm",
                        "TrainletRestartBudgetNearlySpent") or name is None:
                continue
            g = dict(got[name], annotations=dict(got[name]["annotations"]))
            g["annotations"]["runbook_url"] = want[name]["annotations"]["runbook_url"]
            self.assertEqual(g, want[name], name)

    def test_a_wrong_parameter_is_an_error(self):
        for bad in ("Nope.for=1m", "TrainletHardwareFailure.threshold=2",
                    "TrainletStraggler.for=soon", "TrainletStraggler.colour=red",
                    "TrainletNoProgress.threshold=ten"):
            r = run([sys.executable, GENERATE, "--set", bad])
            self.assertEqual(r.returncode, 2, f"{bad}: {r.stdout}")
            self.assertRegex(r.stdout, r"^generate: .+\n$", bad)

    @unittest.skipUnless(os.access(PROMTOOL, os.X_OK), NEED_PROMTOOL)
    def test_the_plain_prometheus_config_passes_promtool(self):
        cfg = load(os.path.join(MON, "prometheus.yml"))
        job = cfg["scrape_configs"][0]
        self.assertEqual(job.pop("kubernetes_sd_configs"), [{"role": "pod"}])
        job["static_configs"] = [{"targets": ["127.0.0.1:8080"]}]
        with tempfile.TemporaryDirectory() as d:
            cfg["rule_files"] = [RULES]
            path = os.path.join(d, "prometheus.yml")
            with open(path, "w") as f:
                yaml.safe_dump(cfg, f)
            r = run([PROMTOOL, "check", "config", path])
            self.assertEqual(r.returncode, 0, r.stdout)


class SeriesTest(unittest.TestCase):
    def setUp(self):
        if not TRAINLET:
            self.skipTest("no --trainlet binary given")

    def test_rules_name_only_exported_series(self):
        families = exported_families()
        recorded = {r["record"] for r in rules() if "record" in r}
        for r in rules():
            unknown = series_names(r["expr"]) - set(families) - recorded
            self.assertEqual(unknown, set(), f"{r.get('alert') or r.get('record')}: {r['expr']}")

    def test_dashboard_names_only_exported_series_and_shows_every_family(self):
        families = exported_families()
        dash = load(os.path.join(MON, "dashboard.json"))
        shown = set()
        for where, expr in dashboard_exprs(dash):
            names = series_names(expr)
            self.assertTrue(names, f"{where}: no series in {expr}")
            self.assertEqual(names - set(families), set(), f"{where}: {expr}")
            shown |= names
        self.assertEqual(set(families) - shown, set(), "exported families not on the dashboard")
        for p in dash["panels"]:
            for t in p.get("targets", []):
                self.assertIn('namespace="$namespace"', t["expr"], p["title"])
                self.assertIn('training_job=~"$job"', t["expr"], p["title"])
        self.assertEqual([v["name"] for v in dash["templating"]["list"]],
                         ["datasource", "namespace", "job"])

    def test_counters_are_rated_and_gauges_are_not(self):
        families = exported_families()
        dash = load(os.path.join(MON, "dashboard.json"))
        exprs = [r["expr"] for r in rules()] + [e for _, e in dashboard_exprs(dash)]
        for e in exprs:
            for m in re.finditer(r"\b(rate|increase|irate)\s*\(\s*([\w:]+)", e):
                self.assertEqual(families.get(m.group(2)), "counter", e)
            for name, kind in families.items():
                if kind == "counter" and re.search(rf"\b{name}\b", e):
                    self.assertRegex(e, rf"\b(rate|increase|irate)\s*\(\s*{name}\b|max by \([^)]*\) \({name}\{{", e)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--trainlet", help="the trainlet binary whose /metrics the queries must use")
    a, rest = p.parse_known_args()
    if a.trainlet:
        TRAINLET = os.path.abspath(a.trainlet)
    sys.dont_write_bytecode = True
    unittest.main(argv=[sys.argv[0]] + rest)
