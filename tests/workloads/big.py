"""A workload that needs ~2.5 GB: under a smaller memory limit it must end as `oom`."""

import jax.numpy as jnp

from autotune.bench import Workload


def workload(preset: str = "small") -> Workload:
    n = {"tiny": 256, "small": 25_000}[preset]
    x = jnp.ones((n, n), jnp.float32)
    return Workload(step=lambda x: (x * 2.0).sum(), args=(x,), name="big")
