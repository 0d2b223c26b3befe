"""A trainer that saves a checkpoint when it is asked to stop (SIGTERM), the way
preemptible training jobs do. Real torch, CPU, no process group (each rank trains alone:
what is tested is the stop, not the collectives).

usage: save_on_term.py MODE CKPT_DIR
  MODE dataloader: batches come from DataLoader(num_workers=2); on SIGTERM the main
       process finishes its step and saves the checkpoint itself (torch.save to a .tmp
       file, a second for a large checkpoint's write, then rename).
  MODE writer: a writer process (multiprocessing, spawn), started at the beginning (training
       starts once it is up), waits for the state on a queue; on SIGTERM the main process hands it over and waits for
       the writer, which saves the same way.
A SIGUSR1 is noted ("rank R got SIGUSR1") by the main process. Prints "rank R ready"
after a few steps, "rank R saved step N" once the checkpoint is
complete (CKPT_DIR/rank<R>.pt), and exits 0.
"""

import multiprocessing
import os
import signal
import sys
import time

import torch

SAVE_SECONDS = 1.0  # a large checkpoint's write: the processes it needs must live this long


def save(state, path):
    tmp = path + ".tmp"
    torch.save(state, tmp)
    time.sleep(SAVE_SECONDS)
    os.replace(tmp, path)


def writer_loop(ready, queue, path):
    ready.set()  # torch imported (this module's), waiting for work
    state = queue.get()
    save(state, path)


class Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 1 << 30

    def __getitem__(self, i):
        x = torch.full((8,), float(i % 97) / 97)
        return x, x.sum()


def main():
    mode, ckpt_dir = sys.argv[1], sys.argv[2]
    rank = int(os.environ["RANK"])
    path = os.path.join(ckpt_dir, f"rank{rank}.pt")
    stop = []
    signal.signal(signal.SIGTERM, lambda signo, frame: stop.append(signo))
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    if mode == "dataloader":
        batches = iter(torch.utils.data.DataLoader(Squares(), batch_size=16, num_workers=2))
        # SIGUSR1 is the main process's business (a notice, a stack dump): installed after
        # the workers started, as with spawn/forkserver workers, they do not inherit it.
        signal.signal(signal.SIGUSR1,
                      lambda signo, frame: print(f"rank {rank} got SIGUSR1", flush=True))
    else:
        ctx = multiprocessing.get_context("spawn")
        queue, ready = ctx.Queue(), ctx.Event()
        writer = ctx.Process(target=writer_loop, args=(ready, queue, path))
        writer.start()
        while not ready.wait(0.1) and writer.is_alive():
            pass
        batches = iter(lambda: (torch.rand(16, 8), torch.rand(16)), None)
    step = 0
    while not stop:
        x, y = next(batches)
        loss = (model(x).squeeze(1) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        if step == 5:
            print(f"rank {rank} ready", flush=True)
        time.sleep(0.01)
    print(f"rank {rank} got SIGTERM at step {step}; saving", flush=True)
    state = {"rank": rank, "step": step, "model": model.state_dict()}
    if mode == "dataloader":
        save(state, path)
    else:
        queue.put(state)
        writer.join()
        if writer.exitcode != 0:
            print(f"rank {rank} writer exited {writer.exitcode}", flush=True)
            queue.cancel_join_thread()  # nobody reads the state it holds: do not wait at exit
            sys.exit(1)
    print(f"rank {rank} saved step {step}", flush=True)


if __name__ == "__main__":
    main()
