"""An example of your own workload for `autotune study --script FILE`.

The contract: the file defines `workload(preset) -> autotune.bench.Workload`,
the step function and the (possibly sharded) arrays to call it with. autotune
compiles it, runs warm-up steps, times the steps (each ending in
`block_until_ready`), checks the outputs against the baseline's and records
peak memory. Build everything on `jax.devices()`; the device count comes from
the environment (`--devices N` on a CPU). Import only jax, numpy and
`autotune.bench` here.

    autotune study --space cpu --script benchmarks/examples/my_step.py --preset small
"""

import jax
import jax.numpy as jnp

from autotune.bench import Workload

DESCRIPTION = "example user workload: a two-layer MLP forward and loss"
SIZES = {"tiny": (64, 128), "small": (512, 1024), "large": (8192, 16384)}


def workload(preset: str = "small") -> Workload:
    """A batch through two dense layers with GELU, and a squared-error loss."""
    if preset not in SIZES:
        raise ValueError(f"unknown preset {preset!r}; known: {', '.join(SIZES)}")
    batch, width = SIZES[preset]
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    x = jax.random.normal(k1, (batch, width), jnp.float32)
    w1 = jax.random.normal(k2, (width, width), jnp.float32) / width**0.5
    w2 = jax.random.normal(k3, (width, width), jnp.float32) / width**0.5

    def step(x, w1, w2):
        y = jax.nn.gelu(x @ w1) @ w2
        return y, jnp.mean((y - x) ** 2)

    return Workload(step=step, args=(x, w1, w2), name="my-step", meta={"batch": batch})
