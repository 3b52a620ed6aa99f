"""What the corpus workloads share: one SGD training step of a loss, on the first device.

Not a workload (no `workload` function); each corpus file puts this folder on
`sys.path` and calls `sgd_workload`. Program fingerprints leave out source
lines (`autotune.child.program.without_source`), so the tables recorded before
the step moved here still name the same programs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax

from autotune.bench import Workload

LEARNING_RATE = 1e-3


def sgd_workload(name: str, preset: str, sizes: Mapping[str, Mapping[str, int]],
                 loss: Callable[..., jax.Array],
                 make_inputs: Callable[..., tuple[Any, tuple[Any, ...]]]) -> Workload:
    """The jitted `train_step(params, *batch) -> (new params, loss)` (the loss, its gradient
    and one SGD update) and its arguments for `preset`, on the first device.

    Raises:
        ValueError: an unknown preset (before JAX starts a backend).
    """
    if preset not in sizes:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(sizes)}")

    def train_step(params, *batch):
        value, grads = jax.value_and_grad(loss)(params, *batch)
        return jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads), value

    params, batch = make_inputs(**sizes[preset])
    device = jax.devices()[0]
    args = (jax.device_put(params, device), *jax.device_put(batch, device))
    return Workload(step=jax.jit(train_step), args=args, name=f"{name}-{preset}",
                    meta=dict(sizes[preset], preset=preset))
