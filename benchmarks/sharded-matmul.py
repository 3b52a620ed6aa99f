"""SPMD-partitioned matmul on a 2-D ('x', 'y') mesh: the XLA overview's sharding example.

The XLA architecture overview shows a two-device program: a mesh with axes
``'x'`` and ``'y'`` over ``[['cpu:0', 'cpu:1']]``, ``f(a, b) = -((a @ b) * 0.125)``
with ``a`` int8 (1024, 512) and ``b`` float32 (512, 2048), and the output
constrained with ``with_sharding_constraint(out, PartitionSpec('x', 'y'))``.
This workload is that program (the "small" preset has the document's sizes),
jitted on a mesh of all ``jax.devices()`` of shape ``(n / 2, 2)``: on two
devices exactly the document's ``1 x 2`` mesh, on eight a ``4 x 2`` one, on
one device ``1 x 1``.

With replicated inputs the partitioner needs no communication at all (every
device computes its own output tile), so the inputs are sharded the way a
model would hold them: ``a`` as ``P('x', 'y')`` (rows over 'x', the contracted
dimension over 'y') and ``b`` as ``P('y', None)``. Each device then computes a
partial product of its rows that must be summed over 'y' and split over 'y'
again for the output's ``P('x', 'y')`` layout: the SPMD partitioner inserts
that reduction itself. On XLA:CPU it compiles to an **all-reduce** over the
'y' groups followed by a dynamic-slice (XLA:GPU's reduce-scatter creator
pass rewrites that pair into a reduce-scatter; XLA:CPU has no such pass).
The int8 -> float32 convert, the dot and the scale/negate epilogue are those
of ``benchmarks/matmul.py``. On one device there is no collective.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from autotune.bench import Workload

PRESETS = ("tiny", "small", "large")
DESCRIPTION = "int8 x f32 matmul partitioned by XLA's SPMD partitioner on a 2-D (x, y) mesh"

# (M, K, N) per preset; "small" is the document's example.
SIZES = {
    "tiny": (64, 32, 128),
    "small": (1024, 512, 2048),
    "large": (16384, 8192, 16384),
}
SEED = 1701
Y = 2  # size of the 'y' mesh axis (the document's two devices lie along 'y')
MAX_LISTED_COUNT = 64


def make_f(mesh: Mesh):
    """Return the document's ``f(a, b)`` with its output constraint bound to ``mesh``."""
    out_sharding = NamedSharding(mesh, P("x", "y"))

    def f(a: jax.Array, b: jax.Array) -> jax.Array:
        """Return ``-((a @ b) * 0.125)`` in float32, constrained to ``P('x', 'y')``."""
        out = -((a.astype(jnp.float32) @ b) * 0.125)
        return jax.lax.with_sharding_constraint(out, out_sharding)

    return f


def mesh_shape(n: int) -> tuple[int, int] | None:
    """The (x, y) mesh shape used for ``n`` devices, or None if ``n`` does not fit."""
    if n == 1:
        return (1, 1)
    if n % Y:
        return None
    return (n // Y, Y)


def fits(n: int, m: int, k: int, nn: int) -> bool:
    """Whether ``n`` devices form a mesh that divides the (M, K) and (K, N) shards evenly."""
    shape = mesh_shape(n)
    if shape is None:
        return False
    x, y = shape
    return m % x == 0 and k % y == 0 and nn % y == 0


def resolve_config(preset: str, n_devices: int) -> tuple[int, int, int]:
    """Return (M, K, N) for ``preset``, checking that ``n_devices`` fits the mesh."""
    if preset not in SIZES:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(PRESETS)}")
    m, k, n = SIZES[preset]
    if not fits(n_devices, m, k, n):
        good = [c for c in range(1, MAX_LISTED_COUNT + 1) if fits(c, m, k, n)]
        raise ValueError(
            f"sharded-matmul {preset}: {n_devices} devices do not form an (n/2, 2) mesh that "
            f"divides M={m}, K={k}, N={n}; device counts that work (up to 64): "
            f"{', '.join(map(str, good))}"
        )
    return m, k, n


# Shardings of the inputs: a (M, K) rows over 'x' and K over 'y'; b (K, N) K over 'y'.
IN_SPECS = (P("x", "y"), P("y", None))


def make_inputs(m: int, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic int8 ``a`` (m, k) and float32 ``b`` (k, n), drawn on the host (not
    `jax.random`, which compiles its generator op by op) and not yet placed."""
    rng = np.random.default_rng(SEED)
    a = rng.integers(-128, 127, size=(m, k), dtype=np.int8)
    b = rng.standard_normal((k, n), dtype=np.float32)
    return a, b


def workload(preset: str = "small") -> Workload:
    """Return the jitted, SPMD-partitioned matmul and its sharded inputs for ``preset``."""
    if preset not in SIZES:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(PRESETS)}")
    devices = jax.devices()
    m, k, n = resolve_config(preset, len(devices))
    shape = mesh_shape(len(devices))
    assert shape is not None  # resolve_config() checked it
    mesh = Mesh(np.array(devices).reshape(shape), ("x", "y"))
    shardings = tuple(NamedSharding(mesh, spec) for spec in IN_SPECS)
    step = jax.jit(make_f(mesh), in_shardings=shardings)
    a, b = jax.device_put(make_inputs(m, k, n), shardings)
    meta = {
        "preset": preset,
        "M": m,
        "K": k,
        "N": n,
        "mesh": {"x": shape[0], "y": shape[1]},
        "flops": 2 * m * k * n,
        "parameter_count": 0,
        "device_count": len(devices),
    }
    return Workload(step=step, args=(a, b), name=f"sharded-matmul-{preset}", meta=meta)
