"""A workload that returns a plain `(step, args)` pair: no autotune import at all."""

import jax.numpy as jnp


def workload(preset: str = "small"):
    x = jnp.linspace(-3, 3, 64 * 64, dtype=jnp.float32).reshape(64, 64)
    return (lambda x: jnp.tanh(x @ x) + x), (x,)
