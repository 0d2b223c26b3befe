"""trainlet for Python trainers: the same files and environment as the C++ library
(session/include/trainlet/session.h), with no import of torch.

    import trainlet
    for step in range(steps):
        train_step()
        trainlet.heartbeat()             # trainlet's hang detection sees progress
    ...
    trainlet.report_error("hardware", "ECC error on GPU 3")   # then exit non-zero

Under trainlet (or torchrun) a worker has RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TRAINLET_HEARTBEAT_FILE and
TORCHELASTIC_ERROR_FILE; without them a process is rank 0 of 1.
The `trainlet` command itself is the binary the wheel puts on PATH.
"""
import json
import os
import sys
import time

__all__ = ["rank", "world_size", "local_rank", "local_world_size", "under_trainlet",
           "heartbeat", "report_error", "ERROR_CLASSES"]

# The classes a trainer may report and the pod's exit code for each (`trainlet exit-codes`).
ERROR_CLASSES = {"bug": 42, "hardware": 74, "infra": 75, "oom": 77}


def _int_env(name, default, lo, hi):
    v = os.environ.get(name, "")
    if v == "":
        return default
    try:
        n = int(v, 10)
    except ValueError:
        n = None
    if n is None or not lo <= n <= hi:
        raise ValueError(f"{name}='{v}' is not a number in [{lo}, {hi}]")
    return n


def world_size():
    """WORLD_SIZE (1 when unset). ValueError names the variable when malformed."""
    return _int_env("WORLD_SIZE", 1, 1, 1 << 24)


def rank():
    """This worker's global RANK in [0, WORLD_SIZE) (0 when unset)."""
    return _int_env("RANK", 0, 0, world_size() - 1)


def local_rank():
    """LOCAL_RANK: the worker's index within its pod (0 when unset)."""
    return _int_env("LOCAL_RANK", 0, 0, 1 << 16)


def local_world_size():
    """LOCAL_WORLD_SIZE: workers in this pod (1 when unset)."""
    return _int_env("LOCAL_WORLD_SIZE", 1, 1, 1 << 16)


def under_trainlet():
    """True when a launcher gave this process RANK and WORLD_SIZE."""
    return bool(os.environ.get("RANK")) and bool(os.environ.get("WORLD_SIZE"))


def heartbeat():
    """Shows progress to trainlet's hang detection: touches $TRAINLET_HEARTBEAT_FILE
    (its mtime). Cheap; a no-op without the variable; never raises for I/O errors."""
    path = os.environ.get("TRAINLET_HEARTBEAT_FILE", "")
    if not path:
        return
    try:
        os.utime(path, None)
    except FileNotFoundError:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644))
        except OSError:
            pass
    except OSError:
        pass


def report_error(cls, message):
    """Reports a failure of class `cls` ("bug", "hardware", "infra", "oom"): the pod exits
    with that class's code once this worker exits non-zero. Writes $TORCHELASTIC_ERROR_FILE
    (torchelastic's format, with the "[trainlet:<class>]" marker the agent classifies by),
    atomically (a temporary file, then rename); without the variable the line goes to
    stderr. Returns False when the file cannot be written; ValueError for an unknown class."""
    if cls not in ERROR_CLASSES:
        raise ValueError(f"unknown error class {cls!r} (one of {', '.join(sorted(ERROR_CLASSES))})")
    text = f"[trainlet:{cls}] {message}"
    path = os.environ.get("TORCHELASTIC_ERROR_FILE", "")
    if not path:
        print(text, file=sys.stderr, flush=True)
        return True
    doc = {"message": {"message": text,
                       "extraInfo": {"py_callstack": "", "timestamp": str(int(time.time()))}}}
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.rename(tmp, path)
    except OSError:
        return False
    return True
