"""Static checks of every Kubernetes example in examples/k8s against the real trainlet binary.
No root, no cluster; stdlib + python3-yaml (skipped without it).

- Every file parses, with no duplicate mapping keys (PyYAML would silently keep the last).
- Every container whose command is trainlet: a trainer command after `--`, only flags that
  `trainlet --help` knows, terminationMessagePolicy FallbackToLogsOnError, and
  terminationGracePeriodSeconds >= --grace-period + 5 (defaults 30 and 25).
- Gang size: in an Indexed Job (JobSet Jobs are Indexed by default) trainlet's --nnodes equals
  completions and parallelism, unless --node-rank pins every pod to "index 0 of 1"
  (--nnodes 1 --node-rank 0: one independent pod per index); without an index, no gang.
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
- With kubernetes-validate importable (it is not installed for you), core kinds (v1, batch/v1)
  are validated strictly against its latest schema; skipped otherwise.

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
import unittest

from harness import BIN, REPO

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


def parse_flags(flags):
    """{--name: [values]} from trainlet's flags (every option takes values)."""
    out, name = {}, None
    for tok in flags:
        if tok.startswith("--"):
            name, eq, value = tok.partition("=")
            out.setdefault(name, [])
            if eq:
                out[name].append(value)
                name = None
        elif name is None:
            raise AssertionError(f"stray argument {tok!r} before --")
        else:
            out[name].append(tok)
    return out


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
                        self.assertIn("--", argv, "trainlet needs `--` before the trainer command")
                        cut = argv.index("--")
                        trainer = argv[cut + 1:]
                        self.assertTrue(trainer, "no trainer command after --")
                        self.assertFalse(trainer[0].startswith("-"), f"trainer command {trainer}")
                        flags = parse_flags(argv[1:cut])
                        if known is not None:
                            self.assertEqual(set(flags) - known, set(), "flags trainlet lacks")
                        self.assertEqual(c.get("terminationMessagePolicy"), "FallbackToLogsOnError")
        self.assertGreater(seen, 0, "no trainlet container in any manifest")

    def test_grace_periods(self):
        for m in self.manifests:
            for w in workloads(m):
                for c, argv in w.trainlet_containers():
                    with self.subTest(f"{w.where} container {c['name']}"):
                        flags = parse_flags(argv[1:argv.index("--")])
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
                        flags = parse_flags(argv[1:argv.index("--")])
                        env = container_env(c)
                        nnodes = setting(flags, env, "--nnodes", "TRAINLET_NNODES", "PET_NNODES")
                        rank = setting(flags, env, "--node-rank", "TRAINLET_NODE_RANK")
                        completions = int(w.spec.get("completions", 1))
                        parallelism = int(w.spec.get("parallelism", 1))
                        if rank is not None:
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

    def test_leader_is_reachable(self):
        for m in self.manifests:
            services = [d for d in m.docs if d.get("kind") == "Service"
                        and d.get("spec", {}).get("clusterIP") == "None"]
            for w in workloads(m):
                for c, argv in w.trainlet_containers():
                    with self.subTest(f"{w.where} container {c['name']}"):
                        flags = parse_flags(argv[1:argv.index("--")])
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


@unittest.skipIf(yaml is None, "python3-yaml not installed")
class K8sSchemaTest(unittest.TestCase):
    """Only when kubernetes-validate is importable; it is never installed by the tests."""

    def test_core_kinds_validate(self):
        try:
            import kubernetes_validate
        except ImportError:
            self.skipTest("kubernetes-validate not importable")
        version = kubernetes_validate.latest_version()
        for m in load_all():
            for d in m.docs:
                if d["apiVersion"] not in ("v1", "batch/v1"):
                    continue  # CRDs (JobSet, Kueue): no schema there
                with self.subTest(f"{m.name} {d['kind']} (Kubernetes {version})"):
                    try:
                        kubernetes_validate.validate(d, version, strict=True)
                    except kubernetes_validate.ValidationError as e:
                        self.fail(f"{e.message} at {'.'.join(map(str, e.path))}")


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
