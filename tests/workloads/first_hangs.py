"""The toy step, except that the first process to build it hangs (a worker killed while it
measures the baseline, for tests of a dead holder): with $FIRST_HANGS_MARKER set, the
process that creates that file first sleeps for an hour; every later one builds the step."""

import os
import time

from autotune.bench import Workload


def workload(preset: str = "small") -> Workload:
    marker = os.environ.get("FIRST_HANGS_MARKER")
    if marker:
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            pass
        else:
            time.sleep(3600)
    import jax.numpy as jnp

    x = jnp.linspace(-3, 3, 64 * 64, dtype=jnp.float32).reshape(64, 64)
    return Workload(step=lambda x: jnp.tanh(x @ x) + x, args=(x,), name="first_hangs")
