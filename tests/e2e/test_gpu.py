"""GPUs and NCCL in simulated pods (NVIDIA/nccl#1038, #1837, #913; microsoft/pai#4314), with the fake
libcuda/libnccl/libnvml the unit tests build (build/gpu/libfake_*.so):

- every pod's workers get the same fresh NCCL unique id and its version (NVIDIA/nccl#1038);
- NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME that match no interface exit 78 at once,
  naming the interfaces that exist (NVIDIA/nccl#1837);
- unset, both are set to the interface that routes to the leader, never docker0 or a
  link-local-only interface (NVIDIA/nccl#913);
- --preflight across pods: ok, or a wrong all-reduce exits 74 naming pod, rank, GPU;
- NVML evidence at start, and after a worker failure, exits 74 (microsoft/pai#4314).
"""

import json
import os
import re
import signal
import subprocess
import time
import unittest

from harness import BIN, PodsimTestCase


def fake(name):
    if not BIN:
        return None
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(BIN))), "gpu",
                        f"libfake_{name}.so")
    return path if os.path.exists(path) else None


ENV_LINE = re.compile(r"\[rank(\d+)\]: IF=(\S*)/(\S*) ID=(\S*) V=(\S*)")
SHOW = ["sh", "-c", "echo IF=$NCCL_SOCKET_IFNAME/$GLOO_SOCKET_IFNAME "
                    "ID=$TRAINLET_NCCL_UNIQUE_ID V=$TRAINLET_NCCL_VERSION"]


class GpuTest(PodsimTestCase):
    needs_trainlet = True

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        if not (fake("cuda") and fake("nccl") and fake("nvml")):
            raise unittest.SkipTest("fake GPU libraries not built next to the trainlet binary")

    def gpu_env(self, **extra):
        env = {"TRAINLET_LIBCUDA": fake("cuda"), "TRAINLET_LIBNCCL": fake("nccl"),
               "TRAINLET_LIBNVML": fake("nvml")}
        env.update(extra)
        return env

    def test_ids_and_interface_toward_the_leader(self):
        with self.cluster(pods=2) as c:
            c.publish_all()
            # Decoys in pod 1: docker0 (routable elsewhere) and a link-local-only veth.
            ns = c.pod_ns(1)
            for cmd in (["link", "add", "docker0", "type", "bridge"],
                        ["addr", "add", "172.17.0.1/16", "dev", "docker0"],
                        ["link", "set", "docker0", "up"],
                        ["link", "add", "veth-x", "type", "veth", "peer", "name", "veth-y"],
                        ["addr", "add", "fe80::1/64", "dev", "veth-x", "nodad"],
                        ["link", "set", "veth-x", "up"], ["link", "set", "veth-y", "up"]):
                subprocess.run(["ip", "-n", ns, *cmd], check=True)
            argv = self.trainlet(nnodes=2, nproc=2, cmd=SHOW)
            pods = [c.start_pod(i, argv, env=self.gpu_env()) for i in range(2)]
            for p in pods:
                self.assertExit(p, 60, 0)
            seen = {}
            for p in pods:
                for m in ENV_LINE.finditer(p.output()):
                    seen[int(m.group(1))] = m.groups()[1:]
            self.assertEqual(sorted(seen), [0, 1, 2, 3])
            ids = {v[2] for v in seen.values()}
            self.assertEqual(len(ids), 1, "every rank must get the same id")
            self.assertEqual(len(ids.pop()), 256)
            for rank, (nccl_if, gloo_if, _, version) in seen.items():
                self.assertEqual((nccl_if, gloo_if), ("eth0", "eth0"), f"rank {rank}")
                self.assertEqual(version, "22809")
            # The decoys were there, and up.
            self.assertIn("docker0", subprocess.run(["ip", "-n", ns, "-br", "addr"], check=True,
                                                    capture_output=True, text=True).stdout)

    def test_bad_socket_ifname_is_config_at_once(self):
        cases = [({"NCCL_SOCKET_IFNAME": "eth2"},
                  "NCCL_SOCKET_IFNAME='eth2': no interface matches; interfaces: lo, eth0"),
                 ({"GLOO_SOCKET_IFNAME": "^lo"}, "GLOO_SOCKET_IFNAME='^lo': Gloo needs concrete")]
        with self.cluster(pods=1) as c:
            c.publish_all()
            for env, text in cases:
                pod = c.start_pod(0, self.trainlet(cmd=["true"]), env=env)
                self.assertExit(pod, 10, 78)
                self.assertLess(pod.elapsed(), 2.0)
                self.assertIn(text, pod.stderr())

    def test_user_value_is_kept_and_only_the_other_is_exported(self):
        with self.cluster(pods=2) as c:
            c.publish_all()
            argv = self.trainlet(nnodes=2, nproc=1, cmd=SHOW)
            pods = [c.start_pod(i, argv, env=self.gpu_env(NCCL_SOCKET_IFNAME="=eth0"))
                    for i in range(2)]
            for p in pods:
                self.assertExit(p, 60, 0)
                m = ENV_LINE.search(p.output())
                self.assertEqual(m.group(2, 3), ("=eth0", "eth0"))

    def test_preflight_across_pods(self):
        with self.cluster(pods=2) as c:
            c.publish_all()
            argv = self.trainlet("--preflight", nnodes=2, nproc=2, cmd=["true"])
            pods = [c.start_pod(i, argv, env=self.gpu_env()) for i in range(2)]
            for p in pods:
                self.assertExit(p, 60, 0)
                self.assertIn("GPU preflight ok: 2 GPU(s), world 4", p.output())

    def test_preflight_wrong_result_is_hardware_naming_pod_rank_gpu(self):
        with self.cluster(pods=2) as c:
            c.publish_all()
            argv = self.trainlet("--preflight", "--termination-log", "/tmp/termination-log",
                                 nnodes=2, nproc=1, cmd=["sleep", "30"])
            p0 = c.start_pod(0, argv, env=self.gpu_env())
            p1 = c.start_pod(1, argv, env=self.gpu_env(FAKE_NCCL_MODE="wrong_result"))
            self.assertExit(p1, 60, 74)
            self.assertRegex(p1.output(), r"GPU preflight failed on pod trainer-1 \(index 1\), "
                                          r"rank 1 \(local rank 0, GPU-00010203-[0-9a-f-]+\): "
                                          r"all-reduce returned")
            self.assertNotEqual(p0.wait(60), 0)

    def test_hung_preflight_runs_off_the_loop(self):
        # The preflight runs on its own thread: while NCCL init hangs, the agent still
        # answers its health probes (the kubelet's livenessProbe would kill a pod whose
        # endpoint hangs) and a SIGTERM ends the pod at once as terminated.
        from test_gang_features import HEALTH_PORT, probe
        with self.cluster(pods=1) as c:
            c.publish_all()
            argv = self.trainlet("--preflight", "--preflight-timeout", "60",
                                 "--health-port", str(HEALTH_PORT), nnodes=1, nproc=1,
                                 cmd=["true"])
            p = c.start_pod(0, argv, env=self.gpu_env(FAKE_NCCL_MODE="init_hang"))
            p.wait_for_output(r"rendezvous [0-9.]+ ms", 30, "stderr")
            time.sleep(1.0)  # the preflight children are in their NCCL init
            self.assertTrue(p.running(), p.tail())
            t0 = time.monotonic()
            self.assertEqual(probe(c, 0, "live"), 0, "no /livez answer during the preflight")
            took = time.monotonic() - t0
            p.signal(signal.SIGTERM)
            t_term = time.monotonic()
            self.assertExit(p, 10, 143)
            print(f"\n    probe {took:.2f}s; exit 143 {time.monotonic() - t_term:.2f}s after "
                  "SIGTERM", end=" ", flush=True)
            self.assertLess(time.monotonic() - t_term, 5)
            self.assertNothingLeft(c)

    def test_gpu_fault_at_start_is_hardware(self):
        with self.cluster(pods=1) as c:
            c.publish_all()
            pod = c.start_pod(0, self.trainlet(cmd=["true"]),
                              env=self.gpu_env(FAKE_NVML_BAD="1", FAKE_NVML_ACTION="1"))
            self.assertExit(pod, 20, 74)
            self.assertIn("GPU fault at start: GPU 1 (GPU-00000000-0000-0000-0000-000000000001): "
                          "3 uncorrected ECC errors, recovery action: GPU reset", pod.stderr())

    def test_worker_failure_with_nvml_evidence_is_hardware(self):
        with self.cluster(pods=1) as c:
            c.publish_all()
            flag = os.path.join(c.workdir, "bad-gpu")
            # The worker "segfaults" (exit 139) after the GPU goes bad under it.
            cmd = ["sh", "-c", f"echo 0 > {flag}; echo ImportError >&2; exit 42"]
            pod = c.start_pod(0, self.trainlet(cmd=cmd),
                              env=self.gpu_env(FAKE_NVML_BAD_FILE=flag))
            self.assertExit(pod, 20, 74)
            summary = json.loads(pod.stderr().strip().splitlines()[-1].split(": ", 1)[1])
            self.assertEqual(summary["evidence"], "gpu-health")
            self.assertIn("GPU fault: GPU 0", summary["reason"])


if __name__ == "__main__":
    unittest.main()
