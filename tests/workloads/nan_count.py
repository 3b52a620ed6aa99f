"""A step whose result depends on IEEE NaN semantics: fast math changes what it computes.

It counts the NaN entries of its input. Under fast math without NaN
guarantees the compiler may assume there are none and fold the test to
false; the numerics guard must see that the result changed.
"""

import jax.numpy as jnp

from autotune.bench import Workload


def workload(preset: str = "small") -> Workload:
    x = jnp.linspace(0.0, 3.0, 4096, dtype=jnp.float32)
    x = x.at[::64].set(jnp.nan)

    def step(x):
        return jnp.sum(jnp.isnan(x).astype(jnp.float32)) + jnp.float32(1.0)

    return Workload(step=step, args=(x,), name="nan-count")
