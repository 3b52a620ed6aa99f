"""A tiny elementwise-heavy step for launcher tests (one CPU device)."""

import jax
import jax.numpy as jnp

from autotune.bench import Workload

DESCRIPTION = "elementwise toy step for tests"


def workload(preset: str = "small") -> Workload:
    """`preset` picks the size: tiny 64x64, small 256x256."""
    n = {"tiny": 64, "small": 256, "large": 1024}[preset]
    x = jnp.linspace(-3, 3, n * n, dtype=jnp.float32).reshape(n, n)

    def step(x):
        return jnp.tanh(x) * jnp.sin(x) + jnp.exp(-x * x) + jax.nn.gelu(x @ x)

    return Workload(step=step, args=(x,), name="toy")
