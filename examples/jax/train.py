"""A JAX trainer on a trainlet gang: one process per worker, CPU or GPU.

trainlet gives every worker JAX_COORDINATOR_ADDRESS (MASTER_ADDR and a port the
leader hands out), JAX_NUM_PROCESSES (WORLD_SIZE), JAX_PROCESS_ID (RANK) and,
where the pod's GPUs are known, JAX_LOCAL_DEVICE_IDS. JAX itself reads only the
coordinator address from the environment, so they are passed to
jax.distributed.initialize() here (https://docs.jax.dev/en/latest/multi_process.html).

    trainlet --nnodes 2 --nproc-per-node 1 examples/jax/train.py

Runs one cross-process psum: every process contributes RANK + 1, so each
gets WORLD_SIZE * (WORLD_SIZE + 1) / 2; exits 1 if not.
"""

import os
import sys

import jax

if os.environ.get("JAX_PLATFORMS", "cpu") == "cpu":
    # Cross-process collectives on CPU go through gloo.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")

local_ids = os.environ.get("JAX_LOCAL_DEVICE_IDS")
jax.distributed.initialize(
    coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
    num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
    process_id=int(os.environ["JAX_PROCESS_ID"]),
    local_device_ids=[int(i) for i in local_ids.split(",")] if local_ids else None,
)

import jax.numpy as jnp  # noqa: E402  (after initialize)

n, rank = jax.process_count(), jax.process_index()
local = jax.local_device_count()
x = jnp.full((local,), float(rank + 1) / local)
total = jax.pmap(lambda v: jax.lax.psum(v, "i"), axis_name="i")(x)
got, want = float(total[0]), n * (n + 1) / 2
print(f"process {rank} of {n}: psum={got:g} expected={want:g} devices={jax.device_count()}",
      flush=True)
jax.distributed.shutdown()
sys.exit(0 if abs(got - want) < 1e-6 else 1)
