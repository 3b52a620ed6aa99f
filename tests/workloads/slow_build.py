"""The toy step, built after a pause of $SLOW_BUILD_S seconds in every process (default 0):
a trial whose child is busy for a while, during which its parent only waits (for tests of
a database that goes away under a running trial)."""

import os
import time

from autotune.bench import Workload


def workload(preset: str = "small") -> Workload:
    time.sleep(float(os.environ.get("SLOW_BUILD_S", "0")))
    import jax.numpy as jnp

    x = jnp.linspace(-3, 3, 64 * 64, dtype=jnp.float32).reshape(64, 64)
    return Workload(step=lambda x: jnp.tanh(x @ x) + x, args=(x,), name="slow_build")
