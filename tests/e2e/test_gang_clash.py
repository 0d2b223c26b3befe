"""Pods that claim the same place: clashes are refused at once, replacements never.

In simulated pods (namespaces + dnsmasq), each agent PID 1, workers `sh` scripts that mark
ready/done (test_gang.WORKER):

- test_two_live_pods_claim_one_index: a 3-pod gang without a token; pod 1 joins; a second
  pod (its own IP) also says --node-rank 1 while pod 1 is live (answers the leader's
  heartbeats): the agent cannot tell it from a stranger, so it keeps trying and exits 75
  (infra) at its --rdzv-timeout (4 s), its message naming both pods' addresses; the gang
  completes with the third pod and exits 0.
- test_two_live_pods_with_a_token_claim_one_index: the same gang with --token-file: both
  pods hold the secret, so two pods were given one index: the second exits 78 (config)
  within 5 s, its message naming both pods' addresses; the gang exits 0.
- test_a_stranger_cannot_take_a_survivors_index_during_a_restart: a 3-pod gang without a
  token, --max-restarts 1; pod 2's worker fails (a restart) while pod 1's worker takes 3 s
  to stop; meanwhile a stranger (another pod saying --node-rank 1, the gang's job id and
  attempt) joins the restart's round: the round keeps index 1 for pod 1 (its instance id),
  so the stranger is refused and exits 75 at its --rdzv-timeout with no worker run, pod 1
  rejoins with RANK 1 in generation 1 and pods 0-2 exit 0.
- test_replacement_of_a_silent_holder_is_admitted: pod 1 joins and is frozen (SIGSTOP: its
  connection stays open, it answers nothing); a recreated pod 1 (another IP) claims the
  index and is admitted, never 78; the gang trains and exits 0.
- test_two_leaders: two pods both launched as index 0 with the leader's name: both exit 78
  within 5 s of the second one's start, each message naming both addresses.
- test_loopback_leader_in_a_pod: a member with --master-addr localhost in a pod
  (KUBERNETES_SERVICE_HOST set; and, separately, with its index from JOB_COMPLETION_INDEX)
  exits 78 within 1 s, before any rendezvous; `trainlet local` inside a pod still runs.
"""

import json
import os
import re
import signal
import time

from harness import BIN, PodsimTestCase
import test_gang

GRACE = 2
CLASH_BOUND = 5.0   # s: the bound for a clash's 78
LOOPBACK_BOUND = 1.0


# usage: sh -c RESTART_WORKER trainer MARKS MODE. Generation 0: fail exits 1 after 2 s;
# slowterm's SIGTERM trap marks "term" and takes 3 s. Every generation marks
# "start<restart count> <RANK>" and runs 5 s.
RESTART_WORKER = r"""
marks=$1 mode=$2
echo "start$TORCHELASTIC_RESTART_COUNT $RANK" >> "$marks"
[ "$mode" = slowterm ] && trap 'echo "term $(date +%s.%N)" >> "$marks"; sleep 3; exit 143' TERM
[ "$mode" = slowterm ] || trap 'exit 143' TERM
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$mode" = fail ]; then sleep 2; exit 1; fi
n=0; while [ $n -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
exit 0
"""


def worker(marks, mode, tenths, code=0):
    return ["sh", "-c", test_gang.WORKER, "trainer", marks, mode, str(tenths), str(code)]


class GangClashTest(test_gang.GangHelpers, PodsimTestCase):
    needs_trainlet = True
    standin_skip = "the stand-in has no rendezvous"

    def start(self, c, slot, node_rank, *flags, nnodes, mode="ok", tenths=20, env=None,
              rdzv_timeout=30):
        argv = self.trainlet("--termination-log", self.tlog(c, slot), "--node-rank",
                             str(node_rank), "--master-addr", c.fqdn(0), *flags, nnodes=nnodes,
                             grace=GRACE, rdzv_timeout=rdzv_timeout,
                             cmd=worker(self.marks_path(c, slot), mode, tenths))
        return c.start_pod(slot, argv, env=env)

    def verdict(self, c, slot, cls, code, reason=None):
        """Pod `slot`'s termination message (its index may differ from its slot)."""
        with open(self.tlog(c, slot)) as f:
            s = json.loads(f.read())
        self.assertEqual((s.get("class"), s.get("code")), (cls, code), json.dumps(s))
        if reason:
            self.assertRegex(s.get("reason", ""), reason, json.dumps(s))
        return s

    def leader_and_pod_1(self, c, *flags):
        """A 3-pod gang's leader (slot 0) and pod 1 (slot 1), admitted; the gang waits."""
        c.publish_all()
        self.start(c, 0, 0, *flags, nnodes=3)
        c.pods[0].wait_for_output(r"leader: listening on port", 10, "stderr")
        self.start(c, 1, 1, *flags, nnodes=3)
        c.pods[0].wait_for_output(r"pod 1 joined from", 10, "stderr")

    def codes(self, exits):
        return {i: code for i, (code, _) in exits.items()}

    def check_clash(self, flags, code, cls, low, high, rdzv_timeout):
        with self.cluster(pods=4) as c:
            self.leader_and_pod_1(c, *flags(c))
            t0 = time.time()
            self.start(c, 2, 1, *flags(c), nnodes=3, rdzv_timeout=rdzv_timeout)
            got = c.pods[2].wait(rdzv_timeout + 15)
            took = time.time() - t0
            self.assertEqual(got, code, "the second claimant\n" + c.pods[2].tail())
            s = self.verdict(c, 2, cls, code)
            print(f"\n    clash: exit {code} {took:.2f}s after its start: {s['reason']!r}",
                  end=" ", flush=True)
            self.assertGreater(took, low)
            self.assertLess(took, high)
            for slot in (1, 2):
                self.assertIn(c.pod_ip(slot), s["reason"], f"pod {slot}'s address not named")
            self.assertFalse(os.path.exists(self.marks_path(c, 2)), "the claimant's worker ran")
            self.start(c, 3, 2, *flags(c), nnodes=3)
            exits = self.watch(c, 40)
            self.assertEqual(self.codes(exits), {0: 0, 1: 0, 2: code, 3: 0},
                             "\n".join(c.pods[i].tail(8) for i in range(4)))
            self.assertNothingLeft(c)

    def test_two_live_pods_claim_one_index(self):
        # Without a token: retried until the claimant's own --rdzv-timeout, then infra.
        self.check_clash(lambda c: (), 75, "infra", 4.0, 4.0 + CLASH_BOUND, rdzv_timeout=4)

    def test_two_live_pods_with_a_token_claim_one_index(self):
        self.check_clash(lambda c: ("--token-file", self.token(c)), 78, "config", 0.0,
                         CLASH_BOUND, rdzv_timeout=30)

    def token(self, c):
        path = os.path.join(c.workdir, "token")
        if not os.path.exists(path):
            with open(path, "w") as f:
                f.write("clash-test-token\n")
        return path

    def test_replacement_of_a_silent_holder_is_admitted(self):
        with self.cluster(pods=4) as c:
            self.leader_and_pod_1(c)
            c.pods[1].signal(signal.SIGSTOP)  # connection open, nothing answers
            time.sleep(3.5)  # past the holder's liveness (2.4 s)
            self.start(c, 2, 1, nnodes=3)
            c.pods[0].wait_for_output(r"index 1 claimed again from .*silent for \d+ ms: "
                                      r"replacing it", 15, "stderr")
            self.start(c, 3, 2, nnodes=3)
            for slot in (0, 2, 3):
                c.pods[slot].wait_for_output(r"(?m)^\[rank\d+\]: rank \d+ ready", 30)
            self.assertRegex(c.pods[2].output(), r"(?m)^\[rank1\]: rank 1 ready")
            for slot in (0, 2, 3):
                self.assertEqual(c.pods[slot].wait(40), 0, c.pods[slot].tail())
            c.pods[1].signal(signal.SIGKILL)
            c.pods[1].wait(10)
            self.assertFalse(os.path.exists(self.marks_path(c, 1)), "the frozen pod's worker ran")
            self.assertNothingLeft(c)

    def test_a_stranger_cannot_take_a_survivors_index_during_a_restart(self):
        with self.cluster(pods=4) as c:
            c.publish_all()
            for slot, mode in ((0, "ok"), (1, "slowterm"), (2, "fail")):
                argv = self.trainlet("--termination-log", self.tlog(c, slot), "--node-rank",
                                     str(slot), "--master-addr", c.fqdn(0), "--max-restarts",
                                     "1", nnodes=3, grace=5, rdzv_timeout=30,
                                     cmd=["sh", "-c", RESTART_WORKER, "trainer",
                                          self.marks_path(c, slot), mode])
                c.start_pod(slot, argv)
            # The restart began: pod 1's worker got its SIGTERM and takes 3 s to stop.
            deadline = time.monotonic() + 30
            while "term" not in self.marks(c, 1):
                self.assertLess(time.monotonic(), deadline, "no restart\n" + c.pods[1].tail())
                time.sleep(0.02)
            t0 = time.time()
            self.start(c, 3, 1, "--max-restarts", "1", nnodes=3, rdzv_timeout=6)
            # The gang's own worker is not given to the stranger: it runs in pod 1.
            code = c.pods[3].wait(25)
            took = time.time() - t0
            print(f"\n    stranger: exit {code} {took:.2f}s after its start", end=" ",
                  flush=True)
            self.assertEqual(code, 75, "the stranger\n" + c.pods[3].tail(20))
            self.verdict(c, 3, "infra", 75)
            self.assertFalse(os.path.exists(self.marks_path(c, 3)), "the stranger's worker ran")
            exits = self.watch(c, 40)
            self.assertEqual(self.codes(exits), {0: 0, 1: 0, 2: 0, 3: 75},
                             "\n".join(c.pods[i].tail(10) for i in range(4)))
            self.assertEqual(self.marks(c, 1).get("start1"), [1.0], "pod 1 lost its RANK")
            self.assertNothingLeft(c)

    def test_two_leaders(self):
        with self.cluster(pods=3) as c:
            c.publish_all()
            self.start(c, 0, 0, nnodes=2)
            c.pods[0].wait_for_output(r"leader: listening on port", 10, "stderr")
            t0 = time.time()
            self.start(c, 1, 0, nnodes=2)
            exits = {i: c.pods[i].wait(15) for i in (0, 1)}
            took = time.time() - t0
            self.assertEqual(exits, {0: 78, 1: 78},
                             "\n".join(c.pods[i].tail(10) for i in (0, 1)))
            print(f"\n    two leaders: both exit 78 within {took:.2f}s", end=" ", flush=True)
            self.assertLess(took, CLASH_BOUND)
            for i in (0, 1):
                s = self.verdict(c, i, "config", 78, r"(?i)leader")
                for slot in (0, 1):
                    self.assertIn(c.pod_ip(slot), s["reason"],
                                  f"pod {i}'s message does not name pod {slot}")
                self.assertFalse(os.path.exists(self.marks_path(c, i)), f"pod {i}'s worker ran")
            self.assertNothingLeft(c)

    def test_loopback_leader_in_a_pod(self):
        with self.cluster(pods=3) as c:
            c.publish_all()
            cases = {1: {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}, 2: {}}
            for slot, env in cases.items():
                flags = ["--node-rank", "1"] if env else []  # slot 2: JOB_COMPLETION_INDEX
                argv = self.trainlet("--termination-log", self.tlog(c, slot), *flags,
                                     "--master-addr", "localhost", nnodes=3, grace=GRACE,
                                     rdzv_timeout=30,
                                     cmd=worker(self.marks_path(c, slot), "ok", 1))
                t0 = time.time()
                c.start_pod(slot, argv, env=env)
                code = c.pods[slot].wait(10)
                took = time.time() - t0
                self.assertEqual(code, 78, c.pods[slot].tail())
                s = self.verdict(c, slot, "config", 78, r"'localhost'.*loopback")
                print(f"\n    loopback leader (slot {slot}): 78 after {took:.2f}s: "
                      f"{s['reason'][:90]!r}", end=" ", flush=True)
                self.assertLess(took, LOOPBACK_BOUND + 1.0)  # process start on a loaded box
                self.assertNotIn("joining leader", c.pods[slot].stderr())
            # trainlet local inside a pod: its agents dial 127.0.0.1 and run.
            c.start_pod(0, [BIN, "local", "--nnodes", "2", "--nproc-per-node", "1", "--",
                            "sh", "-c", "echo local rank $RANK of $WORLD_SIZE"],
                        env={"KUBERNETES_SERVICE_HOST": "10.96.0.1"})
            self.assertEqual(c.pods[0].wait(60), 0, c.pods[0].tail())
            for r in (0, 1):
                self.assertRegex(c.pods[0].output(), rf"local rank {r} of 2")
            self.assertNothingLeft(c)
