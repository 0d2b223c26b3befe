"""Static checks of the shipped examples: the k8s manifest parses and is consistent with
trainlet's contract, and the Dockerfile has the expected shape. No root, no cluster.
"""

import os
import re
import unittest

from harness import REPO

try:
    import yaml
except ImportError:  # python3-yaml is optional
    yaml = None

JOB_YAML = os.path.join(REPO, "examples", "k8s", "indexed-job.yaml")
DOCKERFILE = os.path.join(REPO, "docker", "Dockerfile")


def flag(argv, name):
    return argv[argv.index(name) + 1]


@unittest.skipIf(yaml is None, "python3-yaml not installed")
class IndexedJobManifestTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        with open(JOB_YAML) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        cls.kinds = {d["kind"]: d for d in docs}

    def test_headless_service_matches_subdomain(self):
        svc, job = self.kinds["Service"], self.kinds["Job"]
        self.assertEqual(svc["spec"]["clusterIP"], "None")
        self.assertEqual(svc["spec"]["selector"], {"job-name": job["metadata"]["name"]})
        pod = job["spec"]["template"]["spec"]
        self.assertEqual(pod["subdomain"], svc["metadata"]["name"])
        self.assertEqual(pod["restartPolicy"], "Never")

    def test_trainlet_command_matches_job(self):
        spec = self.kinds["Job"]["spec"]
        self.assertEqual(spec["completionMode"], "Indexed")
        self.assertEqual(spec["completions"], spec["parallelism"])
        pod = spec["template"]["spec"]
        (container,) = pod["containers"]
        argv = container["command"]
        self.assertEqual(argv[0], "trainlet")
        self.assertIn("--", argv)
        flags = argv[:argv.index("--")]
        self.assertEqual(int(flag(flags, "--nnodes")), spec["completions"])
        grace = int(flag(flags, "--grace-period")) if "--grace-period" in flags else 25
        self.assertLess(grace, pod["terminationGracePeriodSeconds"],
                        "trainlet must finish its own grace before the kubelet's SIGKILL")
        self.assertEqual(container["terminationMessagePolicy"], "FallbackToLogsOnError")

    def test_pod_failure_policy(self):
        spec = self.kinds["Job"]["spec"]
        self.assertIn("backoffLimit", spec)
        rules = spec["podFailurePolicy"]["rules"]
        first = rules[0]
        self.assertEqual(first["action"], "Ignore")
        self.assertEqual([c["type"] for c in first["onPodConditions"]], ["DisruptionTarget"])
        container = spec["template"]["spec"]["containers"][0]["name"]
        by_code = {}
        for r in rules[1:]:
            codes = r["onExitCodes"]
            self.assertEqual(codes.get("containerName", container), container)
            if codes["operator"] == "In":
                for v in codes["values"]:
                    by_code.setdefault(v, r["action"])
            else:
                self.assertEqual((codes["operator"], r["action"]), ("NotIn", "Count"))
                self.assertIn(0, codes["values"])
        # 76 (peer_failed) -> Ignore: `trainlet policy` generates the manifest's policy.
        self.assertEqual(by_code, {42: "FailJob", 78: "FailJob", 76: "Ignore"})


class DockerfileTest(unittest.TestCase):

    def test_shape(self):
        with open(DOCKERFILE) as f:
            text = f.read()
        self.assertGreaterEqual(len(re.findall(r"(?m)^FROM ", text)), 2, "multi-stage")
        self.assertIn("scripts/install-deps", text)
        self.assertIn("python3-torch", text)
        self.assertRegex(text, r'(?m)^ENTRYPOINT \["trainlet"\]$')


if __name__ == "__main__":
    unittest.main()
