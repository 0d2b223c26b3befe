"""The seed's JobSet `pytorch-ddp` in simulated pods: one gang across replicated Jobs.

Shape (as JobSet creates it, network.enableDNSHostnames): a `leader` replicated Job of 1 pod
and a `workers` replicated Job of 4 pods (Indexed), hostnames
pytorch-ddp-<replicatedJob>-<jobIndex>-<podIndex> in subdomain pytorch-ddp, each pod's
JOB_COMPLETION_INDEX its index within its own Job, and JobSet's labels and annotations in a
downward-API folder (`labels`, `annotations` in the kubelet's key="value" format, Go-quoted),
passed with --podinfo-dir. Every pod runs `trainlet --gang leader=1,workers=4` with no
--nnodes and no --master-addr: the gang index, the leader's name and the attempt come from
those files and names.

- test_pytorch_example_in_gang_order: examples/pytorch/train.py (DDP, gloo) to completion;
  ranks 0..4 in gang order (leader pod rank 0, workers pod k rank 1+k).
- test_role_environment: 2 workers per pod; every worker's RANK, ROLE_NAME, ROLE_RANK,
  ROLE_WORLD_SIZE, WORLD_SIZE and GROUP_RANK.
- test_pod_of_previous_restart_attempt_is_refused: a pod of restart-attempt 0 (still
  terminating after a JobSet restart) never joins the gang of attempt 1 and exits 75 at its
  deadline naming both attempts; the replacement pod of attempt 1 completes the gang.
- test_mismatched_gang_is_refused: a pod with a different --gang is refused with CONFIG
  naming the `gang` field.
- test_success_policy_leader_sigterm: successPolicy targetReplicatedJobs [workers]: the
  workers finish (exit 0), the leader's trainer is still running, the JobSet controller then
  deletes the leader pod (SIGTERM): it exits 143, class terminated, without warnings.
- test_preempted_gang: Kueue preemption (SIGTERM to every pod at once): every pod stops its
  workers and exits 143 within the grace period.
- test_preempted_gang_staggered: the kubelets deliver SIGTERM at different times: pod 2 first,
  the others only after the leader has told the gang to stop. Pods that get their own
  SIGTERM while still stopping exit 143 too; a pod that never gets one is collateral (76).
"""

import json
import os
import time
import unittest

from harness import PYTHON, TRAIN_PY, FINAL_LINE, PodsimTestCase, rank_lines, torch_missing

JOBSET = "pytorch-ddp"
ROLES = [("leader", 1), ("workers", 4)]  # the seed's replicatedJobs, 1 replica each
GANG = ",".join(f"{name}={pods}" for name, pods in ROLES)


def go_quote(value):
    """Go's strconv.Quote for the ASCII the tests use: how the kubelet writes values."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def pods_of_jobset():
    """[(role, job index, completion index)] in gang order."""
    return [(role, 0, c) for role, pods in ROLES for c in range(pods)]


class JobSetTest(PodsimTestCase):
    needs_trainlet = True

    def jobset(self):
        names = [f"{JOBSET}-{role}-{j}-{c}" for role, j, c in pods_of_jobset()]
        return self.cluster(pods=len(names), svc=JOBSET, hostnames=names)

    def podinfo(self, cluster, i, attempt=0):
        """Writes pod i's downward-API folder as the kubelet does; returns its path."""
        role, j, c = pods_of_jobset()[i]
        d = os.path.join(cluster.workdir, f"podinfo-{i}-attempt{attempt}")
        os.makedirs(d, exist_ok=True)
        replicas = "1"
        labels = {
            "batch.kubernetes.io/controller-uid": f"uid-{role}-{attempt}",
            "batch.kubernetes.io/job-completion-index": str(c),
            "job-name": f"{JOBSET}-{role}-{j}",
            "jobset.sigs.k8s.io/job-index": str(j),
            "jobset.sigs.k8s.io/jobset-name": JOBSET,
            "jobset.sigs.k8s.io/replicatedjob-name": role,
            "jobset.sigs.k8s.io/replicatedjob-replicas": replicas,
            "jobset.sigs.k8s.io/restart-attempt": str(attempt),
        }
        annotations = dict(labels)
        # A value with quotes and a newline, escaped as the kubelet does.
        annotations["kubectl.kubernetes.io/last-applied-configuration"] = '{"kind":"JobSet"}\n'
        for name, kv in (("labels", labels), ("annotations", annotations)):
            with open(os.path.join(d, name), "w") as f:
                f.write("\n".join(f"{k}={go_quote(v)}" for k, v in sorted(kv.items())))
        return d

    def start(self, cluster, i, cmd, attempt=0, nproc=1, grace=5, rdzv_timeout=60, extra=()):
        role, j, c = pods_of_jobset()[i]
        argv = [self.bin(), "--gang", GANG, "--podinfo-dir", self.podinfo(cluster, i, attempt),
                "--nproc-per-node", str(nproc), "--grace-period", str(grace),
                "--rdzv-timeout", str(rdzv_timeout), "--log-level", "debug",
                "--termination-log", os.path.join(cluster.workdir, f"termination-{i}-{attempt}"),
                *extra, "--", *cmd]
        return cluster.start_pod(i, argv, env={"JOB_COMPLETION_INDEX": str(c)})

    @staticmethod
    def bin():
        from harness import BIN
        return BIN

    def termination(self, cluster, i, attempt=0):
        with open(os.path.join(cluster.workdir, f"termination-{i}-{attempt}")) as f:
            return json.loads(f.read())

    def test_pytorch_example_in_gang_order(self):
        reason = torch_missing() or (None if os.path.isfile(TRAIN_PY) else f"no {TRAIN_PY}")
        if reason:
            self.skipTest(reason)
        with self.jobset() as c:
            c.publish_all()
            # Workers first, the leader last: start order must not matter.
            for i in reversed(range(5)):
                self.start(c, i, [PYTHON, TRAIN_PY, "--steps", "10"])
            codes = c.wait_all(180)
            self.assertEqual(codes, {i: 0 for i in range(5)})
            finals = {}
            for i, pod in c.pods.items():
                ranks = rank_lines(pod.output())
                self.assertEqual(sorted(ranks), [i], f"pod {i} ({pod.name}) runs rank {i} only")
                for line in ranks[i]:
                    m = FINAL_LINE.search(line)
                    if m:
                        finals[i] = m
            self.assertEqual(sorted(finals), list(range(5)))
            for rank, m in finals.items():
                self.assertEqual(m.group(3), "True", f"rank {rank}: parameters differ")
                self.assertEqual(int(m.group(4)), 5, f"rank {rank}: WORLD_SIZE")
            self.assertEqual(len({m.group(1) for m in finals.values()}), 1, "all-reduced loss")
            # The workers found the leader by JobSet's name for gang index 0.
            self.assertIn(f"joining leader {JOBSET}-leader-0-0.{c.domain}.", c.pods[3].output())
            self.assertNothingLeft(c)

    def test_role_environment(self):
        with self.jobset() as c:
            c.publish_all()
            cmd = ["sh", "-c", "echo env RANK=$RANK WORLD_SIZE=$WORLD_SIZE GROUP_RANK=$GROUP_RANK "
                   "ROLE_NAME=$ROLE_NAME ROLE_RANK=$ROLE_RANK ROLE_WORLD_SIZE=$ROLE_WORLD_SIZE"]
            for i in range(5):
                self.start(c, i, cmd, nproc=2)
            self.assertEqual(c.wait_all(60), {i: 0 for i in range(5)})
            seen = {}
            for i, pod in c.pods.items():
                for rank, lines in rank_lines(pod.output()).items():
                    for line in lines:
                        if line.startswith("env "):
                            seen[rank] = dict(kv.split("=", 1) for kv in line.split()[1:])
                            self.assertEqual(seen[rank]["GROUP_RANK"], str(i))
            self.assertEqual(sorted(seen), list(range(10)))
            for rank, env in seen.items():
                role = "leader" if rank < 2 else "workers"
                want = {"RANK": str(rank), "WORLD_SIZE": "10", "ROLE_NAME": role,
                        "ROLE_RANK": str(rank if role == "leader" else rank - 2),
                        "ROLE_WORLD_SIZE": "2" if role == "leader" else "8"}
                self.assertEqual({k: env[k] for k in want}, want, f"rank {rank}")

    def test_pod_of_previous_restart_attempt_is_refused(self):
        with self.jobset() as c:
            c.publish_all()
            ok = ["sh", "-c", "sleep 1; echo done"]
            # Attempt 1 after a JobSet restart; pod 3's slot first holds a pod of attempt 0
            # that has not yet terminated.
            stale = self.start(c, 3, ok, attempt=0, rdzv_timeout=4)
            for i in (0, 1, 2, 4):
                self.start(c, i, ok, attempt=1)
            self.assertExit(stale, 30, 75)
            out = stale.output()
            self.assertIn("attempt 0", out)
            self.assertIn("attempt 1", out)
            self.assertNotRegex(out, r"\[rank\d+\]", "a stale pod must never get a rank")
            self.assertEqual(self.termination(c, 3, 0)["class"], "infra")
            # Meanwhile the gang of attempt 1 waited for its pod 3; the replacement joins.
            for i in (0, 1, 2, 4):
                self.assertTrue(c.pods[i].running(), f"pod {i} gave up early")
            self.start(c, 3, ok, attempt=1)
            self.assertEqual(c.wait_all(60), {i: 0 for i in range(5)})
            self.assertIn("[rank3]: done", c.pods[3].output())

    def test_mismatched_gang_is_refused(self):
        with self.jobset() as c:
            c.publish_all()
            cmd = ["sleep", "30"]
            leader = self.start(c, 0, cmd)
            # A pod from an edited manifest: workers as 2 Jobs x 2 pods. Same 5 pods, same
            # gang index (1 + 0*2 + 1 = 2), another layout: refused, naming the field.
            argv = [self.bin(), "--gang", "leader=1,workers=2x2", "--podinfo-dir",
                    self.podinfo_replicas(c, 2, replicas=2), "--grace-period", "5",
                    "--rdzv-timeout", "30", "--", *cmd]
            member = c.start_pod(2, argv, env={"JOB_COMPLETION_INDEX": "1"})
            self.assertExit(member, 20, 78)
            self.assertRegex(member.output(), r"launch configuration differs: gang=leader=1,"
                             r"workers=2x2 on pod 2.*gang=leader=1,workers=4 on pod 0")
            # The culprit is the member with the other layout; the leader refuses it and
            # keeps serving (a hello proves nothing: it must never fail the leader).
            time.sleep(1)
            self.assertTrue(leader.running(), "the leader exited because of a member's hello\n"
                            + leader.output())
            self.assertRegex(leader.output(), r"refused .*launch configuration differs")

    def podinfo_replicas(self, cluster, i, replicas):
        d = self.podinfo(cluster, i)
        for name in ("labels", "annotations"):
            path = os.path.join(d, name)
            with open(path) as f:
                text = f.read()
            with open(path, "w") as f:
                f.write(text.replace('replicatedjob-replicas="1"',
                                     f'replicatedjob-replicas="{replicas}"'))
        return d

    def test_success_policy_leader_sigterm(self):
        with self.jobset() as c:
            c.publish_all()
            self.start(c, 0, ["sh", "-c", "echo leader-up; exec sleep 60"])
            for i in range(1, 5):
                self.start(c, i, ["sh", "-c", "sleep 0.5; echo worker-done"])
            for i in range(1, 5):
                self.assertExit(c.pods[i], 30, 0)
            leader = c.pods[0]
            leader.wait_for_output(r"\[rank0\]: leader-up", 10)
            time.sleep(0.3)
            self.assertTrue(leader.running(), "the leader's trainer is still running")
            # successPolicy met: JobSet deletes the leader pod; the kubelet sends SIGTERM.
            t0 = time.monotonic()
            leader.signal(15)
            self.assertExit(leader, 10, 143)
            self.assertLess(time.monotonic() - t0, 5, "within the grace period")
            summary = self.termination(c, 0)
            self.assertEqual(summary["class"], "terminated")
            noise = [ln for ln in leader.stderr().splitlines()
                     if " warning] " in ln or " error] " in ln]
            self.assertEqual(noise, [], "the leader stops quietly: no warnings, no errors")

    def start_checkpointing_gang(self, c, grace):
        """Starts the 5 pods with trainers that take 1 s to save a checkpoint on SIGTERM;
        returns once every trainer is up."""
        c.publish_all()
        cmd = ["sh", "-c", "trap 'sleep 1; echo checkpointed; exit 0' TERM; echo up; "
               "while :; do sleep 0.1; done"]
        for i in range(5):
            self.start(c, i, cmd, grace=grace)
        for i in range(5):
            c.pods[i].wait_for_output(r"\]: up$", 30)

    def test_preempted_gang(self):
        with self.jobset() as c:
            grace = 5
            self.start_checkpointing_gang(c, grace)
            t0 = time.monotonic()
            for pod in c.pods.values():  # Kueue suspends the JobSet: every pod is deleted
                pod.signal(15)
            codes = c.wait_all(grace + 5)
            elapsed = time.monotonic() - t0
            self.assertEqual(codes, {i: 143 for i in range(5)})
            self.assertLess(elapsed, grace, "every pod stopped inside the grace period")
            for i, pod in c.pods.items():
                self.assertIn("checkpointed", pod.output(), f"pod {i}: workers got SIGTERM")
                self.assertEqual(self.termination(c, i)["class"], "terminated", f"pod {i}")
            self.assertNothingLeft(c)

    def test_preempted_gang_staggered(self):
        with self.jobset() as c:
            grace = 5
            self.start_checkpointing_gang(c, grace)
            t0 = time.monotonic()
            c.pods[2].signal(15)
            c.pods[0].wait_for_output(r"gang: pod 2: stopped by SIGTERM.*; stopping every pod", 5)
            for i in (0, 1, 3):  # pod 4's kubelet is slow: no SIGTERM before it is done
                c.pods[i].signal(15)
            codes = c.wait_all(grace + 5)
            self.assertLess(time.monotonic() - t0, grace)
            self.assertEqual(codes, {0: 143, 1: 143, 2: 143, 3: 143, 4: 76})
            self.assertEqual(self.termination(c, 4)["class"], "peer_failed")


if __name__ == "__main__":
    unittest.main()


class JobSetRestartJobTest(PodsimTestCase):
    """JobSet's failurePolicy action RestartJob recreates one failed Job with its label
    jobset.sigs.k8s.io/job-restart-attempt raised and restart-attempt unchanged
    (kubernetes-sigs/jobset pkg/constants/constants.go, JobRestartAttemptKey). With
    `--gang leader=1,workers=2`: the untouched leader (job-restart-attempt 0) and the
    recreated workers Job's pods (1) form the gang; a stale pod of the old workers Job
    (0), arriving after a pod of attempt 1 of that Job joined, is refused (retriable: it
    exits 75 at its own deadline, never gets a rank)."""

    needs_trainlet = True
    standin_skip = "the stand-in has no JobSet identity"
    GANG = "leader=1,workers=2"
    # slot -> (role, completion index, job-restart-attempt); slot 3: the stale pod.
    SLOTS = {0: ("leader", 0, 0), 1: ("workers", 0, 1), 2: ("workers", 1, 1),
             3: ("workers", 1, 0)}

    def podinfo(self, cluster, slot):
        role, c, jra = self.SLOTS[slot]
        d = os.path.join(cluster.workdir, f"podinfo-{slot}")
        os.makedirs(d, exist_ok=True)
        labels = {
            "batch.kubernetes.io/controller-uid": f"uid-{role}-{jra}",
            "batch.kubernetes.io/job-completion-index": str(c),
            "batch.kubernetes.io/job-name": f"{JOBSET}-{role}-0",
            "jobset.sigs.k8s.io/job-index": "0",
            "jobset.sigs.k8s.io/jobset-name": JOBSET,
            "jobset.sigs.k8s.io/replicatedjob-name": role,
            "jobset.sigs.k8s.io/replicatedjob-replicas": "1",
            "jobset.sigs.k8s.io/restart-attempt": "0",
            "jobset.sigs.k8s.io/job-restart-attempt": str(jra),
        }
        for name in ("labels", "annotations"):
            with open(os.path.join(d, name), "w") as f:
                f.write("\n".join(f"{k}={go_quote(v)}" for k, v in sorted(labels.items())))
        return d

    def start(self, cluster, slot, rdzv_timeout=60):
        from harness import BIN
        role, c, _ = self.SLOTS[slot]
        argv = [BIN, "--gang", self.GANG, "--podinfo-dir", self.podinfo(cluster, slot),
                "--grace-period", "2", "--rdzv-timeout", str(rdzv_timeout), "--log-level",
                "debug", "--", "sh", "-c", "sleep 1; echo done rank $RANK of $WORLD_SIZE"]
        return cluster.start_pod(slot, argv, env={"JOB_COMPLETION_INDEX": str(c)})

    def test_recreated_job_joins_and_a_stale_pod_is_refused(self):
        names = [f"{JOBSET}-leader-0-0", f"{JOBSET}-workers-0-0", f"{JOBSET}-workers-0-1",
                 f"{JOBSET}-workers-0-1-old"]
        with self.cluster(pods=4, svc=JOBSET, hostnames=names) as c:
            c.publish_all()
            leader = self.start(c, 0)
            leader.wait_for_output(r"leader: listening on port", 10, "stderr")
            self.start(c, 1)
            leader.wait_for_output(r"pod 1 joined from", 15, "stderr")
            stale = self.start(c, 3, rdzv_timeout=4)
            self.assertExit(stale, 30, 75)
            self.assertRegex(stale.output(), r"job-restart-attempt 0.*recreated: attempt 1")
            self.assertNotRegex(stale.output(), r"\[rank\d+\]", "a stale pod got a rank")
            self.assertTrue(leader.running(), "the leader gave up\n" + leader.output())
            self.start(c, 2)
            for slot in (0, 1, 2):
                self.assertExit(c.pods[slot], 60, 0)
            for slot in (0, 1, 2):
                self.assertIn(f"done rank {slot} of 3", c.pods[slot].output())
            self.assertNothingLeft(c)
