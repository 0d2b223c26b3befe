#!/usr/bin/python3
"""Runs trainlet's end-to-end tests: the real binary as PID 1 of simulated pods.

    sudo /usr/bin/python3 tests/e2e/run_e2e.py --trainlet build/agent/trainlet [-k sigterm] [-v]

Stand-in for developing the harness without the binary:
    --trainlet tests/e2e/standin_trainlet.py

Discovers tests/e2e/test_*.py (unittest). Needs root, iproute2, util-linux unshare and
/usr/sbin/dnsmasq; tests that need what is missing are skipped and say why. Pod logs go
to --workdir (default: a fresh /tmp/trainlet-e2e-*), kept for failing tests (and for all
with --keep). Exit status 0 when every test passed or was skipped, 1 otherwise.
"""

import argparse
import os
import signal
import sys
import time
import unittest

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
HERE = os.path.dirname(os.path.abspath(__file__))


class TimedResult(unittest.TextTestResult):
    """Also records each test's wall time for a summary."""

    def startTest(self, test):
        self._t0 = time.monotonic()
        super().startTest(test)

    def stopTest(self, test):
        self.timings = getattr(self, "timings", [])
        self.timings.append((time.monotonic() - self._t0, test.id()))
        super().stopTest(test)


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trainlet", required=True, help="the trainlet binary to test")
    p.add_argument("--repo", default=os.path.dirname(os.path.dirname(HERE)),
                   help="source tree (default: this file's)")
    p.add_argument("-k", dest="patterns", action="append", default=[],
                   help="only tests whose id matches this substring or fnmatch pattern "
                        "(repeatable), as unittest -k")
    p.add_argument("--workdir", help="where pods write their logs")
    p.add_argument("--keep", action="store_true", help="keep logs of passing tests too")
    p.add_argument("--failfast", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true")
    args = p.parse_args()

    binary = os.path.abspath(args.trainlet)
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        p.error(f"--trainlet {binary}: not an executable file")
    os.environ["TRAINLET_E2E_BIN"] = binary
    os.environ["TRAINLET_E2E_REPO"] = os.path.abspath(args.repo)
    if args.workdir:
        os.environ["TRAINLET_E2E_WORKDIR"] = os.path.abspath(args.workdir)
    if args.keep:
        os.environ["TRAINLET_E2E_KEEP"] = "1"

    sys.path.insert(0, HERE)
    import harness  # noqa: E402  (after the environment is set)
    import podsim  # noqa: E402

    # SIGTERM (ctest timeout, CI cancel) unwinds like Ctrl-C so every Cluster tears down.
    signal.signal(signal.SIGTERM, _interrupt)
    if os.geteuid() == 0:
        podsim.cleanup_stale()
    workdir = harness.workdir_root()
    print(f"e2e: trainlet {binary}\ne2e: logs under {workdir}", flush=True)

    loader = unittest.TestLoader()
    if args.patterns:
        loader.testNamePatterns = [pat if "*" in pat else f"*{pat}*" for pat in args.patterns]
    suite = loader.discover(start_dir=HERE, pattern="test_*.py", top_level_dir=HERE)
    runner = unittest.TextTestRunner(verbosity=1 if args.quiet else 2, failfast=args.failfast,
                                     resultclass=TimedResult, stream=sys.stdout)
    t0 = time.monotonic()
    try:
        result = runner.run(suite)
    except KeyboardInterrupt as e:  # every Cluster has torn down on the way out
        print(f"e2e: interrupted ({e or 'Ctrl-C'}); logs under {workdir}", file=sys.stderr)
        return 130
    timings = sorted(getattr(result, "timings", []), reverse=True)
    if timings:
        print("slowest: " + ", ".join(f"{t:.1f}s {name.split('.', 1)[-1]}"
                                      for t, name in timings[:5]))
    print(f"e2e: {result.testsRun} tests in {time.monotonic() - t0:.1f}s, "
          f"{len(result.failures) + len(result.errors)} failed, {len(result.skipped)} skipped; "
          f"logs of failures under {workdir}", flush=True)
    if result.testsRun == 0:
        print("e2e: no tests matched", file=sys.stderr)
        return 1
    if result.wasSuccessful() and not args.keep:
        try:
            os.rmdir(workdir)  # empty unless something failed
        except OSError:
            pass
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
