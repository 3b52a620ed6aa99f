"""A workload whose step produces NaN (for the nonfinite outcome)."""

import jax.numpy as jnp

from autotune.bench import Workload


def workload(preset: str = "small") -> Workload:
    x = jnp.zeros((8, 8), jnp.float32)
    return Workload(step=lambda x: jnp.log(x) * 0.0, args=(x,), name="nan")
