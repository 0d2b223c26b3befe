#!/usr/bin/env python3
"""A small but real DDP training run for trainlet's examples and end-to-end tests.

Every rank fits the same linear model y = x @ w_true + b_true + noise on its own
shard of synthetic data. DistributedDataParallel averages the gradients, so all
ranks must finish with identical parameters; the script checks that at the end
and fails if they differ or if the loss did not fall.

Launched by trainlet (or torchrun), it reads the usual env:// variables:
RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. Backend: nccl when
CUDA is available (one GPU per LOCAL_RANK), gloo otherwise.

The last line every rank prints is machine-readable:
    final loss <L> first loss <L0> params-equal <True|False> world <W>
Exit codes: 0 success; 1 parameters differ across ranks or the loss did not fall;
2 bad environment or arguments.
"""

import argparse
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

IN_FEATURES = 16
OUT_FEATURES = 1


def log(msg):
    # flush: trainlet prefixes our lines as they arrive; a block buffer would
    # hide progress (and the final line) until exit.
    print(msg, flush=True)


def env_int(name):
    value = os.environ.get(name)
    try:
        return int(value)
    except (TypeError, ValueError):
        why = "is not set; launch me with trainlet" if value is None else "is not an integer"
        print(f"train.py: {name}={value!r} {why}", file=sys.stderr, flush=True)
        sys.exit(2)


def make_shard(rank, samples, seed):
    """This rank's data: the same true model everywhere, a rank-specific sample."""
    truth = torch.Generator().manual_seed(seed)
    w_true = torch.randn(IN_FEATURES, OUT_FEATURES, generator=truth)
    b_true = torch.randn(OUT_FEATURES, generator=truth)
    gen = torch.Generator().manual_seed(seed + 1 + rank)
    x = torch.randn(samples, IN_FEATURES, generator=gen)
    y = x @ w_true + b_true + 0.01 * torch.randn(samples, OUT_FEATURES, generator=gen)
    return x, y


def flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--samples", type=int, default=512, help="samples per rank")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be >= 1")

    torch.set_num_threads(1)  # many ranks share few cores; more threads only contend
    rank = env_int("RANK")
    world = env_int("WORLD_SIZE")
    local_rank = env_int("LOCAL_RANK")

    use_cuda = torch.cuda.is_available() and args.backend != "gloo"
    backend = args.backend if args.backend != "auto" else ("nccl" if use_cuda else "gloo")
    if use_cuda:
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    t0 = time.monotonic()
    dist.init_process_group(backend=backend, init_method="env://")
    log(f"rank {rank}/{world} local_rank {local_rank} backend {backend} device {device} "
              f"master {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')} "
              f"init {time.monotonic() - t0:.2f}s")

    # Same initial weights on every rank (DDP would broadcast rank 0's anyway).
    torch.manual_seed(args.seed)
    model = torch.nn.Linear(IN_FEATURES, OUT_FEATURES).to(device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if use_cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    x, y = make_shard(rank, args.samples, args.seed)
    x, y = x.to(device), y.to(device)

    def global_loss(local):
        t = local.detach().clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t.item() / world

    # Progress for trainlet's hang detection (--hang-timeout): touch the file it
    # names after every step. Two lines, no dependency on trainlet.
    heartbeat = os.environ.get("TRAINLET_HEARTBEAT_FILE")
    first = last = None
    for step in range(args.steps):
        if heartbeat:
            os.utime(heartbeat)
        lo = (step * args.batch) % args.samples
        xb, yb = x[lo:lo + args.batch], y[lo:lo + args.batch]
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(ddp(xb), yb)
        loss.backward()
        opt.step()
        last = global_loss(loss)
        if first is None:
            first = last
        if rank == 0 or step in (0, args.steps - 1):
            log(f"step {step} loss {last:.6f}")

    # Every rank compares every rank's parameters with its own.
    mine = flat_params(model)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    diffs = [(other - mine).abs().max().item() for other in gathered]
    params_equal = all(d == 0.0 for d in diffs)

    log(f"final loss {last:.6f} first loss {first:.6f} params-equal {params_equal} "
              f"world {world}")
    shutdown(dist.barrier)

    if not params_equal:
        print(f"train.py: rank {rank}: parameters differ across ranks, max abs diff per rank "
              f"{diffs}", file=sys.stderr, flush=True)
        return 1
    if not last < first:
        print(f"train.py: rank {rank}: loss did not fall ({first:.6f} -> {last:.6f})",
              file=sys.stderr, flush=True)
        return 1
    return 0


def shutdown(barrier, limit=10.0):
    """Waits for every rank at the last barrier, but gives up after `limit` s; the caller
    then leaves with os._exit, without dist.destroy_process_group().

    destroy_process_group() now and then never returns even after a barrier
    (pytorch/pytorch#75097, seen here with torch 1.13 and gloo). Called in a helper thread
    and bounded, it still hung the process, most likely with the helper's teardown
    holding the GIL inside gloo: the main thread stopped after its last line (a
    faulthandler dump: main thread in sys.stdout.flush(), the other thread with no Python
    frame; 3 runs in 75 of two agents on one host under load). The training is over by
    then: os._exit frees what the process group holds, so it is not destroyed at all."""
    t = threading.Thread(target=barrier, daemon=True)
    t.start()
    t.join(limit)
    if t.is_alive():
        print("train.py: the last barrier did not return; exiting anyway",
              file=sys.stderr, flush=True)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: no interpreter teardown, where gloo's threads can also hang.
    os._exit(code)
