"""A workload whose step cannot be compiled (mismatched matmul shapes)."""

import jax.numpy as jnp

from autotune.bench import Workload


def workload(preset: str = "small") -> Workload:
    a = jnp.ones((4, 3), jnp.float32)
    b = jnp.ones((5, 2), jnp.float32)
    return Workload(step=lambda a, b: a @ b, args=(a, b), name="bad-shapes")
