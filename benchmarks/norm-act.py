"""Fusion-heavy step: layer norm, GELU and softmax over rows, data-parallel.

The elementwise and reduction part of a transformer block with the matrix
multiplications left out, in float32: each row of a ``(rows, width)``
activation is layer-normalised (mean and variance reductions, a division by
the standard deviation), passed through the exact (erf) GELU, turned into a
softmax over the row (max and sum reductions, exp, a division), and combined
with the input through ``log1p``. The step returns that activation.

On GPUs this is what fusion and code-generation flags act on; on XLA:CPU it
is what the fast-math flags act on: relaxing all four of NaN/Inf/division/
function guarantees together lets LLVM vectorise the reductions and divisions,
while any one of them alone does not (measured with
``benchmarks/scripts/record_table.py``; see the README's Search section).

Rows are split over a 1-D ``("data",)`` mesh of all ``jax.devices()``; every
row is independent, so the compiled step has no collective.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from autotune.bench import Workload

PRESETS = ("tiny", "small", "large")
DESCRIPTION = "layer norm, GELU and softmax over rows (fusion-heavy, no matmul), data-parallel"

CONFIGS = {
    "tiny": dict(rows=64, width=128),
    "small": dict(rows=2048, width=1024),
    "large": dict(rows=32768, width=4096),
}
SEED = 1701
EPS = 1e-5
AXIS = "data"
MAX_LISTED_COUNT = 64


def block(x: jax.Array, gain: jax.Array) -> jax.Array:
    """Layer norm -> GELU -> softmax over the last axis, mixed back with the input."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    y = jax.nn.gelu((x - mean) / jnp.sqrt(var + EPS) * gain, approximate=False)
    return jax.nn.softmax(y, axis=-1) * x + jnp.log1p(jnp.abs(y))


def make_step(mesh: Mesh):
    """Return the jitted ``step(x, gain) -> activation`` with rows split over ``AXIS``."""
    rows = NamedSharding(mesh, P(AXIS))
    return jax.jit(block, in_shardings=(rows, NamedSharding(mesh, P())), out_shardings=rows)


def resolve_config(preset: str, n_devices: int) -> dict:
    """Return the size config for ``preset``, checking that the rows split evenly."""
    if preset not in CONFIGS:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(PRESETS)}")
    cfg = dict(CONFIGS[preset])
    if cfg["rows"] % n_devices:
        good = [c for c in range(1, MAX_LISTED_COUNT + 1) if cfg["rows"] % c == 0]
        raise ValueError(
            f"norm-act {preset}: rows={cfg['rows']} do not split over {n_devices} devices; "
            f"device counts that work (up to 64): {', '.join(map(str, good))}"
        )
    return cfg


def workload(preset: str = "small") -> Workload:
    """Return the jitted, row-parallel step and its inputs for ``preset``."""
    if preset not in CONFIGS:  # before jax.devices(): a typo never starts a backend
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(PRESETS)}")
    cfg = resolve_config(preset, len(jax.devices()))
    return build(cfg, preset, f"norm-act-{preset}")


def build(cfg: dict, preset: str, name: str) -> Workload:
    """The step over every device of ``jax.devices()`` and its seeded inputs of ``cfg``'s
    ``rows`` x ``width`` (rows that split evenly over the devices), named ``name``."""
    devices = jax.devices()
    mesh = Mesh(np.array(devices), (AXIS,))
    # drawn on the host: `jax.random` compiles its generator op by op (a second of
    # every trial process); the values are inputs, the program is the same
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((cfg["rows"], cfg["width"]), dtype=np.float32)
    gain = 1.0 + np.float32(0.1) * rng.standard_normal((cfg["width"],), dtype=np.float32)
    args = (jax.device_put(x, NamedSharding(mesh, P(AXIS))),
            jax.device_put(gain, NamedSharding(mesh, P())))
    meta = dict(cfg, preset=preset, device_count=len(devices))
    return Workload(step=make_step(mesh), args=args, name=name, meta=meta)
