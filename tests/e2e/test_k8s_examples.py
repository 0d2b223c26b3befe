"""Static checks of every Kubernetes example in examples/k8s against the real trainlet binary.
No root, no cluster; stdlib + python3-yaml (skipped without it).

- Every file parses, with no duplicate mapping keys (PyYAML would silently keep the last).
- Every container whose command is trainlet: a trainer command after `--`, only flags that
  `trainlet --help` knows, terminationMessagePolicy FallbackToLogsOnError, and
  terminationGracePeriodSeconds >= --grace-period + 5 (defaults 30 and 25).
- Gang size: in an Indexed Job (JobSet Jobs are Indexed by default) trainlet's --nnodes equals
  completions and parallelism, unless --node-rank pins every pod to "index 0 of 1"
  (--nnodes 1 --node-rank 0: one independent pod per index); without an index, no gang.
- Tokens: every gang's trainlet reads --token-file from a mounted Secret volume.
- Leader: when trainlet derives it (more than one pod, no --master-addr/MASTER_ADDR), the pod's
  subdomain is a headless Service of the same file whose selector matches the pods (JobSet:
  network.enableDNSHostnames); a --master-addr is <job>-0 in the pod's own subdomain.
- Policies: each `# $ trainlet policy ARGS` comment line is followed, verbatim (comments
  included, indented), by a document that running `trainlet policy ARGS` prints now, and the
  keys it sets are the live keys of the mapping it sits in (parsed and compared). Every
  podFailurePolicy and JobSet failurePolicy comes from such a block; containerName names a
  trainlet container; pod templates of Jobs with a podFailurePolicy use restartPolicy Never.
- README.md next to the manifests lists every file.
- docker/: the Debian packages of the binary's shared libraries (ldd + dpkg -S) are the ones
  docker/Dockerfile, docker/Dockerfile.add-to-image and docker/README.md install.
- Gangs across a JobSet's roles (--gang): every trainlet of the JobSet gives the same layout,
  which lists the replicatedJobs in order with their replicas and completions; the pods mount
  their labels and annotations (downward API) at --podinfo-dir; enableDNSHostnames is on and
  a spec.coordinator, if any, is gang index 0. Pods serving --health-port have a readiness
  probe on /readyz.
- Schemas: with kubernetes-validate importable (scripts/install-deps puts it in
  /opt/trainlet-pylib; skipped without it), core kinds (v1, batch/v1) and every JobSet
  replicatedJob's Job template are validated strictly against its latest schema. JobSet and
  Kueue kinds are checked field by field against their APIs (jobset.x-k8s.io/v1alpha2,
  kueue.x-k8s.io/v1beta2): required fields, enums, names and cross-references.

The binary comes from TRAINLET_E2E_BIN (run_e2e.py --trainlet); checks needing it skip without
it, or with the Python stand-in.
"""

import difflib
import glob
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import unittest

from harness import BIN, REPO

PYLIB = "/opt/trainlet-pylib"  # where scripts/install-deps puts kubernetes-validate

try:
    import yaml
except ImportError:  # python3-yaml is optional
    yaml = None

K8S_DIR = os.path.join(REPO, "examples", "k8s")
DOCKER_DIR = os.path.join(REPO, "docker")
MANIFESTS = sorted(glob.glob(os.path.join(K8S_DIR, "*.yaml")))
MARKER = re.compile(r"^(?P<indent> *)# \$ (?P<cmd>trainlet policy\b.*?)\s*$")
DEFAULT_GRACE = 25              # trainlet's --grace-period default
DEFAULT_TERMINATION_GRACE = 30  # Kubernetes' terminationGracePeriodSeconds default
MARGIN = 5                      # seconds trainlet must finish before the kubelet's SIGKILL
LEADER_ENV = ("TRAINLET_MASTER_ADDR", "PET_MASTER_ADDR", "MASTER_ADDR")


def have_binary():
    """The real, compiled trainlet (not tests/e2e/standin_trainlet.py, which has no `policy`)."""
    if not (BIN and os.access(BIN, os.X_OK)):
        return False
    with open(BIN, "rb") as f:
        return f.read(4) == b"\x7fELF"


def run_trainlet(*args):
    """stdout of the real binary; TRAINLET_* of this environment must not change its output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINLET_")}
    r = subprocess.run([BIN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=env, timeout=30)
    if r.returncode != 0:
        raise AssertionError(f"trainlet {' '.join(args)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


class Manifest:
    """One file: its lines, its documents as (node, object) pairs, and where each key is."""

    def __init__(self, path):
        self.path = path
        self.name = os.path.relpath(path, REPO)
        with open(path) as f:
            self.text = f.read()
        self.lines = self.text.split("\n")
        self.docs = []          # python objects, one per non-empty document
        self.keys = {}          # (line, column) of a mapping key -> (doc index, path, key)
        self.duplicates = []    # (line, key)
        loader = yaml.SafeLoader(self.text)
        try:
            while loader.check_node():
                node = loader.get_node()
                if node is None:
                    continue
                obj = loader.construct_document(node)
                if obj is None:
                    continue
                self._walk(node, len(self.docs), ())
                self.docs.append(obj)
        finally:
            loader.dispose()

    def _walk(self, node, doc, path):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for k, v in node.value:
                key = k.value
                if key in seen:
                    self.duplicates.append((k.start_mark.line + 1, key))
                seen.add(key)
                self.keys[(k.start_mark.line, k.start_mark.column)] = (doc, path, key)
                self._walk(v, doc, path + (key,))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                self._walk(v, doc, path + (i,))

    def at(self, doc, path):
        obj = self.docs[doc]
        for p in path:
            obj = obj[p]
        return obj


class Workload:
    """A Job spec and its pod template: a Job, or one replicated Job of a JobSet."""

    def __init__(self, manifest, doc, spec_path, jobset=None, rjob=None):
        self.manifest, self.doc, self.spec_path = manifest, doc, spec_path
        obj = manifest.docs[doc]
        self.jobset, self.rjob = jobset, rjob
        self.spec = manifest.at(doc, spec_path)
        self.template = self.spec.get("template") or {}
        self.pod = self.template.get("spec") or {}
        self.labels = (self.template.get("metadata") or {}).get("labels") or {}
        meta = obj.get("metadata") or {}
        self.namespace = meta.get("namespace")
        if jobset is None:
            self.job_name = meta.get("name")  # None with generateName
            self.where = f"{manifest.name}: Job {meta.get('name') or meta.get('generateName')}"
        else:
            self.job_name = None              # <jobset>-<rjob>-<replica>
            self.where = f"{manifest.name}: JobSet {meta.get('name')} replicatedJob {rjob['name']}"
        mode = self.spec.get("completionMode")
        # JobSet's webhook defaults every Job's completionMode to Indexed.
        self.indexed = mode == "Indexed" or (jobset is not None and mode is None)

    def containers(self):
        return list(self.pod.get("containers") or [])

    def trainlet_containers(self):
        out = []
        for c in self.containers():
            argv = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
            if argv and os.path.basename(argv[0]) == "trainlet":
                out.append((c, argv))
        return out


def workloads(manifest):
    for i, obj in enumerate(manifest.docs):
        if not isinstance(obj, dict):
            continue
        if obj.get("kind") == "Job":
            yield Workload(manifest, i, ("spec",))
        elif obj.get("kind") == "JobSet":
            for j, rjob in enumerate(obj["spec"].get("replicatedJobs") or []):
                yield Workload(manifest, i, ("spec", "replicatedJobs", j, "template", "spec"),
                               jobset=obj, rjob=rjob)
        elif obj.get("kind") in TRAINER_RUNTIMES:
            spec = obj["spec"]["template"]["spec"]
            for j, rjob in enumerate(spec.get("replicatedJobs") or []):
                w = Workload(manifest, i, ("spec", "template", "spec", "replicatedJobs", j,
                                           "template", "spec"), rjob=rjob)
                w.indexed, w.runtime = True, obj  # JobSet's Jobs are Indexed
                yield w


# Kubeflow Trainer v2's runtimes: with mlPolicy.torch, Trainer injects torchrun's PET_*
# variables (PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT).
TRAINER_RUNTIMES = ("ClusterTrainingRuntime", "TrainingRuntime")


def injects_pet(w):
    runtime = getattr(w, "runtime", None)
    return runtime is not None and "torch" in (runtime["spec"].get("mlPolicy") or {})


def parse_flags(flags):
    """{--name: [values]} from trainlet's flags (every option takes values)."""
    out, name = {}, None
    for tok in flags:
        if tok.startswith("-"):
            name, eq, value = tok.partition("=")
            out.setdefault(name, [])
            if name in SWITCHES:
                out[name].append("1")
                name = None
            elif eq:
                out[name].append(value)
                name = None
        elif name is None:
            raise AssertionError(f"stray argument {tok!r} before --")
        else:
            out[name].append(tok)
    return out


# trainlet's options that take no value (every other one takes exactly one).
SWITCHES = {"--preflight", "--require-gpus", "--standalone", "-m", "--module", "--no-python",
            "--no_python", "--run-path", "--run_path"}


def split_trainlet(argv):
    """(launcher tokens, trainer argv): the trainer starts at the first positional or after --."""
    i = 1
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            return argv[1:i], argv[i + 1:]
        if not tok.startswith("-"):
            break
        i += 1 if ("=" in tok or tok in SWITCHES) else 2
    return argv[1:i], argv[i:]


def launcher_flags(argv):
    return parse_flags(split_trainlet(argv)[0])


def setting(flags, env, flag, *env_names):
    """The value trainlet would use: the flag, then the environment."""
    if flags.get(flag):
        return flags[flag][-1]
    for e in env_names:
        if e in env:
            return env[e]
    return None


def container_env(container):
    return {e["name"]: e.get("value") for e in container.get("env") or [] if "name" in e}


def parse_gang(value):
    """[(name, replicas, pods per Job)] from --gang NAME=PODS or NAME=REPLICASxPODS."""
    out = []
    for part in value.split(","):
        name, _, count = part.partition("=")
        replicas, _, pods = count.rpartition("x")
        out.append((name, int(replicas or 1), int(pods)))
    return out


def jobset_layout(jobset):
    """[(name, replicas, pods per Job)] of a JobSet's replicatedJobs, in order."""
    return [(r["name"], int(r.get("replicas", 1)),
             int(r["template"]["spec"].get("completions", 1)))
            for r in jobset["spec"]["replicatedJobs"]]


def apt_installed(text):
    """Packages named by every `apt-get install` in a Dockerfile or shell snippet."""
    text = re.sub(r"\\\n", " ", text)  # join continuation lines
    out = set()
    for m in re.finditer(r"apt-get\s+install\s+([^&;|\n]*)", text):
        out.update(t for t in m.group(1).split() if not t.startswith("-"))
    return out


def load_all():
    return [Manifest(p) for p in MANIFESTS]


@unittest.skipIf(yaml is None, "python3-yaml not installed")
class K8sExamplesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.manifests = load_all()

    def test_files_parse(self):
        self.assertGreaterEqual(len(self.manifests), 6, f"manifests in {K8S_DIR}")
        for m in self.manifests:
            with self.subTest(m.name):
                self.assertTrue(m.docs, "no documents")
                self.assertEqual(m.duplicates, [], "duplicate keys (line, key)")
                for d in m.docs:
                    self.assertIsInstance(d, dict)
                    self.assertIn("apiVersion", d)
                    self.assertIn("kind", d)
                    self.assertTrue((d.get("metadata") or {}).get("name")
                                    or (d.get("metadata") or {}).get("generateName"))

    def test_readme_lists_every_file(self):
        with open(os.path.join(K8S_DIR, "README.md")) as f:
            readme = f.read()
        for m in self.manifests:  # a table row per file: | `name.yaml` | ... |
            name = os.path.basename(m.path)
            self.assertTrue(re.search(rf"(?m)^\| `{re.escape(name)}` \|", readme),
                            f"examples/k8s/README.md has no table row for {name}")

    def test_trainlet_command_lines(self):
        known = None
        if have_binary():
            known = set(re.findall(r"--[a-z][a-z0-9-]*", run_trainlet("--help")))
        seen = 0
        for m in self.manifests:
            for w in workloads(m):
                for c, argv in w.trainlet_containers():
                    seen += 1
                    with self.subTest(f"{w.where} container {c['name']}"):
                        launcher, trainer = split_trainlet(argv)
                        self.assertTrue(trainer, "no trainer command (a script, or after --)")
                        self.assertFalse(trainer[0].startswith("-"), f"trainer command {trainer}")
                        if "--" not in argv[:len(launcher) + 2]:
                            # Without --, the first positional is torchrun's training_script.
                            self.assertTrue(trainer[0].endswith(".py") or
                                            SWITCHES & set(launcher), f"{trainer[0]} is no script")
                        flags = parse_flags(launcher)
                        if known is not None:
                            self.assertEqual(set(flags) - known, set(), "flags trainlet lacks")
                        self.assertEqual(c.get("terminationMessagePolicy"), "FallbackToLogsOnError")
        self.assertGreater(seen, 0, "no trainlet container in any manifest")

    def test_kubeflow_runtimes(self):
        """A Trainer runtime's trainlet gets torchrun's PET_* from mlPolicy.torch, in the
        `node` container Trainer injects them into; each TrainJob names a runtime of the
        file; run with the variables Trainer injects, the TrainJob's command line runs
        `python -u SCRIPT ARGS` with torchrun's environment (the real binary)."""
        runtimes = {}
        for m in self.manifests:
            for w in workloads(m):
                if getattr(w, "runtime", None) is None:
                    continue
                for c, argv in w.trainlet_containers():
                    with self.subTest(f"{w.where} container {c['name']}"):
                        self.assertTrue(injects_pet(w), "mlPolicy.torch makes Trainer set PET_*")
                        self.assertEqual(c["name"], "node", "Trainer injects PET_* into `node`")
                        runtimes[w.runtime["metadata"]["name"]] = argv
            for obj in m.docs:
                if obj.get("kind") != "TrainJob":
                    continue
                with self.subTest(f"{m.name}: TrainJob {obj['metadata']['name']}"):
                    ref = obj["spec"]["runtimeRef"]["name"]
                    self.assertIn(ref, runtimes, "runtimeRef names no runtime of the file")
                    argv = obj["spec"].get("trainer", {}).get("command") or runtimes[ref]
                    if have_binary():
                        self.runs_with_trainer_env(argv)
        if any(os.path.basename(p) == "kubeflow-trainjob.yaml" for p in MANIFESTS):
            self.assertTrue(runtimes)

    def runs_with_trainer_env(self, argv):
        tmp = tempfile.mkdtemp(prefix="k8s-trainer-")
        try:
            py = os.path.join(tmp, "python")
            with open(py, "w") as f:
                f.write('#!/bin/sh\necho "argv:$*|$WORLD_SIZE|$MASTER_ADDR|$MASTER_PORT|$RANK"\n')
            os.chmod(py, 0o755)
            launcher, trainer = split_trainlet(argv)
            launcher = [os.path.join(tmp, "logs") if a.startswith("/var/log") else a
                        for a in launcher]
            # The image's script (/workspace/train.py) is not on this machine, and a
            # missing script is refused before the start: a stand-in of the same name.
            if trainer and trainer[0].endswith(".py") and not os.path.exists(trainer[0]):
                script = os.path.join(tmp, os.path.basename(trainer[0]))
                open(script, "w").close()
                trainer = [script, *trainer[1:]]
            env = {"PATH": "/usr/bin:/bin", "PET_NNODES": "1", "PET_NPROC_PER_NODE": "2",
                   "PET_NODE_RANK": "0", "PET_MASTER_ADDR": "127.0.0.1",
                   "PET_MASTER_PORT": "29400", "TRAINLET_LIBNCCL": "/nonexistent",
                   "TRAINLET_RDZV_TIMEOUT": "20"}
            r = subprocess.run([BIN, "--python", py, *launcher, *trainer], env=env,
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertIn(f"[rank1]: argv:-u {' '.join(trainer)}|2|127.0.0.1|29400|1", r.stdout)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_grace_periods(self):
        for m in self.manifests:
            for w in workloads(m):
                for c, argv in w.trainlet_containers():
                    with self.subTest(f"{w.where} container {c['name']}"):
                        flags = launcher_flags(argv)
                        grace = setting(flags, container_env(c), "--grace-period",
                                        "TRAINLET_GRACE_PERIOD")
                        grace = DEFAULT_GRACE if grace is None else int(grace)
                        kubelet = int(w.pod.get("terminationGracePeriodSeconds",
                                                DEFAULT_TERMINATION_GRACE))
                        self.assertGreaterEqual(
                            kubelet, grace + MARGIN,
                            f"terminationGracePeriodSeconds {kubelet} must exceed --grace-period "
                            f"{grace} by {MARGIN} s, or the kubelet's SIGKILL (137) beats trainlet")

    def test_gang_size_matches_job(self):
        for m in self.manifests:
            for w in workloads(m):
                for c, argv in w.trainlet_containers():
                    with self.subTest(f"{w.where} container {c['name']}"):
                        flags = launcher_flags(argv)
                        env = container_env(c)
                        nnodes = setting(flags, env, "--nnodes", "TRAINLET_NNODES", "PET_NNODES")
                        rank = setting(flags, env, "--node-rank", "TRAINLET_NODE_RANK")
                        gang = setting(flags, env, "--gang", "TRAINLET_GANG")
                        completions = int(w.spec.get("completions", 1))
                        parallelism = int(w.spec.get("parallelism", 1))
                        if injects_pet(w):
                            # Trainer sets completions, parallelism and PET_NNODES from numNodes.
                            self.assertIsNone(gang, "Trainer's torch policy makes one Job")
                            self.assertIn(nnodes, (None, str(w.runtime["spec"]["mlPolicy"].get(
                                "numNodes", 1))), "--nnodes != mlPolicy.numNodes")
                        elif gang is not None:
                            self.assertIsNotNone(w.jobset, "--gang spans a JobSet's roles")
                            layout = parse_gang(gang)
                            self.assertEqual(layout, jobset_layout(w.jobset),
                                             "--gang must list the replicatedJobs in order: "
                                             "name=[replicasx]completions")
                            total = sum(r * p for _, r, p in layout)
                            if nnodes is not None:
                                self.assertEqual(int(nnodes), total, "--nnodes != --gang's pods")
                            self.assertEqual(parallelism, completions,
                                             "a gang needs all its pods at once")
                        elif rank is not None:
                            # Every pod gets the same fixed rank: only "index 0 of 1" is sane.
                            self.assertEqual((nnodes, rank), ("1", "0"),
                                             "a pinned --node-rank means one pod per gang: "
                                             "--nnodes 1 --node-rank 0")
                        elif w.indexed:
                            self.assertIsNotNone(nnodes, "an Indexed Job's trainlet needs "
                                                 "--nnodes (else it exits 78)")
                            self.assertEqual(int(nnodes), completions, "--nnodes != completions")
                            self.assertEqual(parallelism, completions,
                                             "a gang needs all its pods at once")
                        else:
                            self.assertIn(nnodes, (None, "1"),
                                          "no index (NonIndexed Job): every pod is a lone pod")

    def test_gangs_mount_a_token(self):
        """Every gang authenticates (--token-file from a mounted Secret): without a token a
        stranger can take a free index (README: strangers on the port)."""
        for m in self.manifests:
            for w in workloads(m):
                for c, argv in w.trainlet_containers():
                    flags = launcher_flags(argv)
                    env = container_env(c)
                    nnodes = setting(flags, env, "--nnodes", "TRAINLET_NNODES", "PET_NNODES")
                    gang = setting(flags, env, "--gang", "TRAINLET_GANG")
                    if gang is None and nnodes in (None, "1"):
                        # A lone pod, or a size the operator injects at run time (Kubeflow
                        # Trainer's PET_NNODES): not checked here.
                        continue
                    with self.subTest(f"{w.where} container {c['name']}"):
                        token = setting(flags, env, "--token-file", "TRAINLET_TOKEN_FILE")
                        self.assertIsNotNone(token, "a gang passes --token-file")
                        volumes = {v["name"]: v for v in w.pod.get("volumes") or []}
                        secret = None
                        for mount in c.get("volumeMounts") or []:
                            path = mount["mountPath"].rstrip("/") + "/"
                            if token.startswith(path):
                                secret = (volumes.get(mount["name"]) or {}).get("secret")
                        self.assertIsNotNone(secret, f"{token} lies in a mounted Secret volume")
                        self.assertTrue(secret.get("secretName"), "the Secret is named")

    def test_leader_is_reachable(self):
        for m in self.manifests:
            services = [d for d in m.docs if d.get("kind") == "Service"
                        and d.get("spec", {}).get("clusterIP") == "None"]
            for w in workloads(m):
                for c, argv in w.trainlet_containers():
                    with self.subTest(f"{w.where} container {c['name']}"):
                        flags = launcher_flags(argv)
                        env = container_env(c)
                        nnodes = setting(flags, env, "--nnodes", "TRAINLET_NNODES", "PET_NNODES")
                        leader = setting(flags, env, "--master-addr", *LEADER_ENV)
                        if w.jobset is not None:
                            network = w.jobset["spec"].get("network") or {}
                            subdomain = network.get("subdomain") or w.jobset["metadata"]["name"]
                            dns = network.get("enableDNSHostnames") is True
                            leader0 = (f"{w.jobset['metadata']['name']}-{w.rjob['name']}-0-0"
                                       if int(w.rjob.get("replicas", 1)) == 1 else None)
                        else:
                            subdomain = w.pod.get("subdomain")
                            dns = False
                            leader0 = f"{w.job_name}-0" if w.job_name else None
                        gang = setting(flags, env, "--gang", "TRAINLET_GANG")
                        if gang is not None and leader is None:
                            self.assertTrue(dns, "trainlet derives the gang's leader from "
                                            "JobSet's pod names: enableDNSHostnames: true")
                            first = w.jobset["spec"]["replicatedJobs"][0]["name"]
                            coord = w.jobset["spec"].get("coordinator")
                            if coord is not None:
                                self.assertEqual(
                                    (coord.get("replicatedJob"), int(coord.get("jobIndex", 0)),
                                     int(coord.get("podIndex", 0))), (first, 0, 0),
                                    "the coordinator must be gang index 0 (trainlet's leader)")
                            continue
                        if leader is None and nnodes is not None and int(nnodes) > 1:
                            if w.jobset is not None:
                                self.assertTrue(dns, "trainlet derives the leader from the pod's "
                                                "FQDN: set spec.network.enableDNSHostnames: true")
                                continue
                            self.assertTrue(subdomain, "trainlet derives the leader from the "
                                            "pod's FQDN, which needs `subdomain`")
                            match = [s for s in services if s["metadata"]["name"] == subdomain
                                     and s["metadata"].get("namespace") == w.namespace]
                            self.assertTrue(match, f"no headless Service {subdomain!r} in the "
                                            f"same file and namespace")
                            selector = match[0]["spec"].get("selector") or {}
                            labels = dict(w.labels)
                            if w.job_name:  # labels the Job controller adds
                                labels.update({"job-name": w.job_name,
                                               "batch.kubernetes.io/job-name": w.job_name})
                            self.assertTrue(selector)
                            self.assertTrue(selector.items() <= labels.items(),
                                            f"Service selector {selector} does not select the "
                                            f"pods (labels {labels})")
                        elif leader is not None and not re.fullmatch(r"[0-9.:]+", leader):
                            parts = leader.rstrip(".").split(".")
                            if len(parts) >= 2:  # trainlet refuses another subdomain (exit 78)
                                self.assertEqual(parts[1], subdomain, "--master-addr subdomain")
                            if leader0:
                                self.assertEqual(parts[0], leader0, "the leader is index 0")


    def test_one_gang_per_jobset(self):
        seen = 0
        for m in self.manifests:
            for i, obj in enumerate(m.docs):
                if obj.get("kind") != "JobSet":
                    continue
                gangs = set()
                for w in workloads(m):
                    if w.doc != i:
                        continue
                    for c, argv in w.trainlet_containers():
                        flags = launcher_flags(argv)
                        gangs.add(setting(flags, container_env(c), "--gang", "TRAINLET_GANG"))
                with self.subTest(f"{m.name}: JobSet {obj['metadata']['name']}"):
                    self.assertEqual(len(gangs), 1, f"every trainlet of a JobSet gives the same "
                                     f"--gang (else exit 78): {gangs}")
                    seen += 1
        self.assertGreater(seen, 0, "no JobSet example")

    def test_podinfo_is_mounted(self):
        """Pods that read JobSet's labels (--gang) mount them where trainlet looks."""
        for m in self.manifests:
            for w in workloads(m):
                for c, argv in w.trainlet_containers():
                    flags = launcher_flags(argv)
                    env = container_env(c)
                    mounts = {v["name"]: v["mountPath"] for v in c.get("volumeMounts") or []}
                    needs = setting(flags, env, "--gang", "TRAINLET_GANG") is not None
                    if not needs and not mounts:
                        continue
                    where = setting(flags, env, "--podinfo-dir", "TRAINLET_PODINFO_DIR") or \
                        "/etc/podinfo"
                    with self.subTest(f"{w.where} container {c['name']}"):
                        volumes = {v["name"]: v for v in w.pod.get("volumes") or []}
                        found = None
                        for name, path in mounts.items():
                            api = (volumes.get(name) or {}).get("downwardAPI")
                            if api and path.rstrip("/") == where.rstrip("/"):
                                found = {i["path"]: i["fieldRef"]["fieldPath"]
                                         for i in api["items"]}
                        if needs or found is not None:
                            self.assertEqual(found, {"labels": "metadata.labels",
                                                     "annotations": "metadata.annotations"},
                                             f"a downwardAPI volume with `labels` and "
                                             f"`annotations` mounted at {where}")

    def test_readiness_probes(self):
        for m in self.manifests:
            for w in workloads(m):
                for c, argv in w.trainlet_containers():
                    flags = launcher_flags(argv)
                    port = setting(flags, container_env(c), "--health-port",
                                   "TRAINLET_HEALTH_PORT")
                    if port in (None, "0"):
                        continue
                    with self.subTest(f"{w.where} container {c['name']}"):
                        probe = c.get("readinessProbe") or {}
                        if "httpGet" in probe:
                            self.assertEqual(probe["httpGet"]["path"], "/readyz")
                            self.assertEqual(str(probe["httpGet"]["port"]), port)
                        else:
                            cmd = (probe.get("exec") or {}).get("command") or []
                            self.assertEqual(cmd[:3], ["trainlet", "probe", "ready"],
                                             "readinessProbe: httpGet /readyz or "
                                             "`trainlet probe ready`")


@unittest.skipIf(yaml is None, "python3-yaml not installed")
class K8sPoliciesTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if not have_binary():
            raise unittest.SkipTest(f"no compiled trainlet (TRAINLET_E2E_BIN={BIN!r})")
        cls.manifests = load_all()
        cls.outputs = {}

    def generated(self, cmd):
        """The documents `cmd` (trainlet policy ...) prints, as lists of lines."""
        if cmd not in self.outputs:
            args = shlex.split(cmd)
            self.assertEqual(args[:2], ["trainlet", "policy"])
            out = run_trainlet(*args[1:])
            self.outputs[cmd] = [d.split("\n") for d in out.rstrip("\n").split("\n---\n")]
        return self.outputs[cmd]

    def covered(self, m):
        """Checks every marker of m; returns {(doc, path, key)} of the keys the blocks set."""
        covered = set()
        for i, line in enumerate(m.lines):
            mark = MARKER.match(line)
            if not mark:
                continue
            indent, cmd = mark.group("indent"), mark.group("cmd")
            docs = self.generated(cmd)
            block = None
            for doc in docs:
                want = [indent + l if l else "" for l in doc]
                if m.lines[i + 1:i + 1 + len(want)] == want:
                    block = doc
                    break
            if block is None:
                def got(doc):
                    return m.lines[i + 1:i + 1 + len(doc)]

                closest = max(docs, key=lambda d: difflib.SequenceMatcher(
                    None, [indent + l for l in d], got(d)).ratio())
                want = [indent + l if l else "" for l in closest]
                diff = "\n".join(difflib.unified_diff(
                    want, got(closest), f"`{cmd}` now", m.name, lineterm=""))
                self.fail(f"{m.name}:{i + 1}: the block after `# $ {cmd}` is not what the "
                          f"command prints (examples/k8s/regenerate-policies):\n{diff}")
            expected = yaml.safe_load("\n".join(block))
            self.assertIsInstance(expected, dict)
            # Where the block's keys live: the mapping whose keys sit at the block's indent.
            found = set()
            for j in range(i + 1, i + 1 + len(block)):
                at = m.keys.get((j, len(indent)))
                if at is None:
                    continue
                doc, path, key = at
                self.assertIn(key, expected, f"{m.name}:{j + 1}: key {key!r}")
                self.assertEqual(m.at(doc, path)[key], expected[key],
                                 f"{m.name}:{j + 1}: {key} differs from `{cmd}` as parsed")
                found.add(key)
                covered.add((doc, path, key))
            self.assertEqual(found, set(expected),
                             f"{m.name}:{i + 1}: not every key `{cmd}` prints is live")
        return covered

    def test_every_policy_is_generated(self):
        for m in self.manifests:
            with self.subTest(m.name):
                covered = self.covered(m)
                for w in workloads(m):
                    if not w.trainlet_containers():
                        continue
                    self.assertIn("podFailurePolicy", w.spec, f"{w.where}: no podFailurePolicy")
                    self.assertIn((w.doc, w.spec_path, "podFailurePolicy"), covered,
                                  f"{w.where}: podFailurePolicy not preceded by `# $ trainlet "
                                  f"policy ...`")
                for i, obj in enumerate(m.docs):
                    if obj.get("kind") == "JobSet":
                        self.assertIn("failurePolicy", obj["spec"])
                        self.assertIn((i, ("spec",), "failurePolicy"), covered,
                                      "JobSet failurePolicy not preceded by `# $ trainlet "
                                      "policy --jobset`")

    def test_policy_fits_pod(self):
        for m in self.manifests:
            for w in workloads(m):
                policy = w.spec.get("podFailurePolicy")
                if policy is None and "backoffLimitPerIndex" not in w.spec:
                    continue
                with self.subTest(w.where):
                    self.assertEqual(w.pod.get("restartPolicy"), "Never",
                                     "podFailurePolicy and backoffLimitPerIndex need Never")
                    trainlets = {c["name"] for c, _ in w.trainlet_containers()}
                    for rule in (policy or {}).get("rules", []):
                        if rule.get("action") == "FailIndex":
                            self.assertIn("backoffLimitPerIndex", w.spec)
                            self.assertTrue(w.indexed)
                        name = (rule.get("onExitCodes") or {}).get("containerName")
                        if name is not None:
                            self.assertIn(name, trainlets, "containerName is not the trainlet "
                                          "container (trainlet policy --container NAME)")


def kubernetes_validate_module():
    """kubernetes_validate, from /opt/trainlet-pylib or the path; None when absent."""
    import sys
    if os.path.isdir(PYLIB) and PYLIB not in sys.path:
        sys.path.append(PYLIB)
    try:
        import kubernetes_validate
    except ImportError:
        return None
    return kubernetes_validate


DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# JobSet failurePolicy (jobset.x-k8s.io/v1alpha2): actions, rule names, the Job failure
# reasons of batch/v1 that onJobFailureReasons may name.
JOBSET_ACTIONS = {"FailJobSet", "RestartJobSet", "RestartJobSetAndIgnoreMaxRestarts"}
JOB_FAILURE_REASONS = {"BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes",
                       "MaxFailedIndexesExceeded", "PodFailurePolicy"}
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")


@unittest.skipIf(yaml is None, "python3-yaml not installed")
class K8sSchemaTest(unittest.TestCase):
    """Kubernetes kinds against kubernetes-validate's schemas (skipped without it); JobSet
    and Kueue kinds field by field against their APIs (always)."""

    def validate_core(self, kv, version, obj, what):
        try:
            kv.validate(obj, version, strict=True)
        except kv.ValidationError as e:
            self.fail(f"{what}: {e.message} at {'.'.join(map(str, e.path))}")

    def test_core_kinds_validate(self):
        kv = kubernetes_validate_module()
        if kv is None:
            self.skipTest("kubernetes-validate not importable (scripts/install-deps)")
        version = kv.latest_version()
        seen = 0
        for m in load_all():
            for d in m.docs:
                if d["apiVersion"] in ("v1", "batch/v1"):
                    with self.subTest(f"{m.name} {d['kind']} (Kubernetes {version})"):
                        self.validate_core(kv, version, d, m.name)
                        seen += 1
                elif d["kind"] == "JobSet":
                    # Each replicatedJob's template is a batch/v1 JobTemplateSpec.
                    for r in d["spec"]["replicatedJobs"]:
                        job = {"apiVersion": "batch/v1", "kind": "Job",
                               "metadata": {"name": r["name"]}, **r["template"]}
                        with self.subTest(f"{m.name} JobSet replicatedJob {r['name']}"):
                            self.validate_core(kv, version, job, m.name)
                            seen += 1
        self.assertGreater(seen, 0)

    def test_jobset_fields(self):
        seen = 0
        for m in load_all():
            for d in m.docs:
                if d["kind"] != "JobSet":
                    continue
                seen += 1
                with self.subTest(f"{m.name} JobSet {d['metadata']['name']}"):
                    self.assertEqual(d["apiVersion"], "jobset.x-k8s.io/v1alpha2")
                    spec = d["spec"]
                    self.assertEqual(set(spec) - {"replicatedJobs", "network", "successPolicy",
                                                  "failurePolicy", "coordinator", "suspend",
                                                  "startupPolicy", "managedBy",
                                                  "ttlSecondsAfterFinished"}, set(),
                                     "unknown JobSet spec fields")
                    rjobs = spec["replicatedJobs"]
                    names = [r["name"] for r in rjobs]
                    self.assertEqual(len(names), len(set(names)), "replicatedJob names unique")
                    for r in rjobs:
                        self.assertRegex(r["name"], DNS_LABEL)
                        self.assertEqual(set(r) - {"name", "replicas", "template",
                                                   "dependsOn", "groupName"}, set())
                        self.assertGreaterEqual(int(r.get("replicas", 1)), 1)
                        self.assertIn("template", r["template"]["spec"])
                        # JobSet's pod names must stay within a 63-character DNS label.
                        longest = (f"{d['metadata']['name']}-{r['name']}-"
                                   f"{int(r.get('replicas', 1)) - 1}-"
                                   f"{int(r['template']['spec'].get('completions', 1)) - 1}")
                        self.assertLessEqual(len(longest), 63, longest)
                    net = spec.get("network") or {}
                    self.assertEqual(set(net) - {"enableDNSHostnames", "subdomain",
                                                 "publishNotReadyAddresses"}, set())
                    sp = spec.get("successPolicy")
                    if sp is not None:
                        self.assertIn(sp["operator"], ("All", "Any"))
                        self.assertLessEqual(set(sp.get("targetReplicatedJobs") or []),
                                             set(names))
                    fp = spec.get("failurePolicy")
                    if fp is not None:
                        self.assertGreaterEqual(int(fp.get("maxRestarts", 0)), 0)
                        for rule in fp.get("rules") or []:
                            self.assertRegex(rule["name"], RULE_NAME)
                            self.assertIn(rule["action"], JOBSET_ACTIONS)
                            self.assertLessEqual(set(rule.get("onJobFailureReasons") or []),
                                                 JOB_FAILURE_REASONS)
                            self.assertLessEqual(set(rule.get("targetReplicatedJobs") or []),
                                                 set(names))
                    coord = spec.get("coordinator")
                    if coord is not None:
                        self.assertIn(coord["replicatedJob"], names)
                        r = rjobs[names.index(coord["replicatedJob"])]
                        self.assertLess(int(coord.get("jobIndex", 0)), int(r.get("replicas", 1)))
                        self.assertLess(int(coord.get("podIndex", 0)),
                                        int(r["template"]["spec"].get("completions", 1)))
        self.assertGreater(seen, 0, "no JobSet example")

    def test_kueue_fields(self):
        seen = 0
        for m in load_all():
            kinds = {}
            for d in m.docs:
                kinds.setdefault(d["kind"], []).append(d)
            if not any(d["apiVersion"].startswith("kueue.x-k8s.io/") for d in m.docs):
                continue
            seen += 1
            with self.subTest(m.name):
                flavors = {f["metadata"]["name"] for f in kinds.get("ResourceFlavor", [])}
                cqs = {q["metadata"]["name"]: q for q in kinds.get("ClusterQueue", [])}
                for d in m.docs:
                    if d["apiVersion"].startswith("kueue.x-k8s.io/"):
                        self.assertEqual(d["apiVersion"], "kueue.x-k8s.io/v1beta2")
                        self.assertIn(d["kind"], ("ResourceFlavor", "ClusterQueue", "LocalQueue"))
                for f in kinds.get("ResourceFlavor", []):
                    self.assertNotIn("namespace", f["metadata"], "ResourceFlavor is cluster-wide")
                    for k, v in (f["spec"].get("nodeLabels") or {}).items():
                        self.assertIsInstance(v, str)
                for q in cqs.values():
                    self.assertNotIn("namespace", q["metadata"], "ClusterQueue is cluster-wide")
                    self.assertNotIn("cohort", q["spec"], "v1beta2 calls it cohortName")
                    pre = q["spec"].get("preemption") or {}
                    for k, allowed in (("reclaimWithinCohort", {"Never", "LowerPriority", "Any"}),
                                       ("withinClusterQueue", {"Never", "LowerPriority",
                                                               "LowerOrNewerEqualPriority"})):
                        if k in pre:
                            self.assertIn(pre[k], allowed, k)
                    for g in q["spec"]["resourceGroups"]:
                        covered = g["coveredResources"]
                        for f in g["flavors"]:
                            self.assertIn(f["name"], flavors, "a flavor of this file")
                            self.assertEqual([r["name"] for r in f["resources"]], covered,
                                             "each flavor lists the covered resources in order")
                            for r in f["resources"]:
                                self.assertIn("nominalQuota", r)
                queues = {}
                for lq in kinds.get("LocalQueue", []):
                    self.assertIn("namespace", lq["metadata"], "LocalQueue is namespaced")
                    self.assertIn(lq["spec"]["clusterQueue"], cqs)
                    queues[(lq["metadata"]["namespace"], lq["metadata"]["name"])] = lq
                for job in kinds.get("Job", []) + kinds.get("JobSet", []):
                    name = (job["metadata"].get("labels") or {}).get("kueue.x-k8s.io/queue-name")
                    if name is None:
                        continue
                    ns = job["metadata"].get("namespace", "default")
                    self.assertIn((ns, name), queues, "queue-name names a LocalQueue of the "
                                  "Job's namespace")
                    self.assertTrue(job["spec"].get("suspend"), "queued workloads start suspended")
        self.assertGreater(seen, 0, "no Kueue example")


class DockerRuntimeLibsTest(unittest.TestCase):
    """The docs and Dockerfiles install what the binary links against."""

    BASE = {"libc6", "libgcc-s1", "libstdc++6"}  # in every Debian image

    def test_runtime_packages_documented(self):
        if not have_binary():
            self.skipTest(f"no compiled trainlet (TRAINLET_E2E_BIN={BIN!r})")
        if not (shutil.which("ldd") and shutil.which("dpkg")):
            self.skipTest("needs ldd and dpkg (Debian)")
        r = subprocess.run(["ldd", BIN], stdout=subprocess.PIPE, text=True, timeout=30)
        libs = re.findall(r"=> (/\S+)", r.stdout)
        self.assertTrue(libs, r.stdout)
        if any(re.search(r"/lib(asan|ubsan|tsan|lsan)\.so", lib) for lib in libs):
            self.skipTest("a sanitizer build links runtimes that images never get")
        packages = set()
        for lib in libs:
            for candidate in (lib, os.path.realpath(lib)):
                q = subprocess.run(["dpkg", "-S", candidate], stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True, timeout=30)
                if q.returncode == 0:
                    packages.add(q.stdout.split(":")[0])
                    break
            else:
                self.skipTest(f"{lib} belongs to no Debian package (not a Debian build?)")
        # Empty with the default static build (TRAINLET_STATIC_DEPS): glibc only.
        needed = packages - self.BASE
        for name in ("Dockerfile", "Dockerfile.add-to-image", "README.md"):
            with open(os.path.join(DOCKER_DIR, name)) as f:
                installed = apt_installed(f.read())
            with self.subTest(name):
                self.assertEqual(sorted(needed - installed), [],
                                 f"docker/{name}: `apt-get install` lacks runtime packages")

    def test_add_to_image_shape(self):
        with open(os.path.join(DOCKER_DIR, "Dockerfile.add-to-image")) as f:
            text = f.read()
        self.assertRegex(text, r"(?m)^COPY --from=\S+ /usr/local/bin/trainlet /usr/local/bin/trainlet$")
        self.assertRegex(text, r'(?m)^ENTRYPOINT \["trainlet"\]$')


if __name__ == "__main__":
    unittest.main()
