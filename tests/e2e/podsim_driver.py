"""Drives a podsim Cluster from its own process: "another run" of the harness on this machine.

test_podsim.py starts it (in the test's PID namespace or in a fresh one) to prove that two
runs at once cannot touch each other's pods or namespaces. One command per stdin line, one
JSON answer per stdout line:
  up N       start a Cluster of N pods          -> {"names": [netns names], "run": run tag}
  start I    start pod I as `sleep 300`           -> {"pidns": "pid:[...]"}
  stop I     SIGKILL pod I and reap it            -> {}
  check      -> {"running": {I: bool}, "usable": {netns name: bool}}
  down       tear the Cluster down and exit       -> {}
"""

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import podsim  # noqa: E402


def usable(name):
    """The netns name still opens a namespace (`ip -n` works there)."""
    return subprocess.run(["ip", "-n", name, "link", "show", "lo"], stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def main():
    cluster = None
    for line in sys.stdin:
        cmd, *args = line.split()
        answer = {}
        if cmd == "up":
            cluster = podsim.Cluster(pods=int(args[0])).start()
            answer = {"names": [cluster.net_ns] + [cluster.pod_ns(i) for i in
                                                   range(cluster.npods)],
                      "run": podsim.run_tag()}
        elif cmd == "start":
            pod = cluster.start_pod(int(args[0]), ["sleep", "300"])
            answer = {"pidns": pod.pidns}
        elif cmd == "stop":
            cluster.pods[int(args[0])].kill()
        elif cmd == "check":
            answer = {"running": {i: p.running() for i, p in cluster.pods.items()},
                      "usable": {n: usable(n) for n in [cluster.net_ns] +
                                 [cluster.pod_ns(i) for i in range(cluster.npods)]}}
        elif cmd == "down":
            cluster.teardown()
        print(json.dumps(answer), flush=True)
        if cmd == "down":
            return


if __name__ == "__main__":
    main()
