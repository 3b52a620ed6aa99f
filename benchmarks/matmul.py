"""Single-device int8 x bf16 matmul: the XLA overview document's running example.

Computes ``-((a @ b) * 0.125)`` with ``a`` an int8 (M, K) matrix converted to
bfloat16 before the dot and ``b`` a bfloat16 (K, N) matrix, as in the document's
HLO (convert, dot, multiply, negate). It runs on one device and produces no
collectives; it exercises the dot emitter and the fusion of the elementwise
epilogue.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from autotune.bench import Workload

PRESETS = ("tiny", "small", "large")
DESCRIPTION = "int8 x bf16 matmul with scale and negate on one device (no collectives)"

# (M, K, N) per preset; "small" is the document's example.
SIZES = {
    "tiny": (64, 32, 128),
    "small": (1024, 512, 2048),
    "large": (8192, 4096, 8192),
}
SEED = 1701


def f(a: jax.Array, b: jax.Array) -> jax.Array:
    """Return ``-((a @ b) * 0.125)`` in bfloat16, converting int8 ``a`` first."""
    return -((a.astype(jnp.bfloat16) @ b) * jnp.bfloat16(0.125))


def make_inputs(m: int, k: int, n: int) -> tuple[jax.Array, jax.Array]:
    """Build deterministic int8 ``a`` (m, k) and bf16 ``b`` (k, n) on the first device.

    Drawn with NumPy on the host: `jax.random` compiles its generator op by op, which
    took about 1.1 s of every trial process (40% of a tiny trial's) on a 2-core CPU,
    against 0.07 s here. The values are inputs, not constants: the step's program is
    the same either way.
    """
    rng = np.random.default_rng(SEED)
    a = rng.integers(-128, 127, size=(m, k), dtype=np.int8)
    b = rng.standard_normal((k, n), dtype=np.float32).astype(jnp.bfloat16)
    device = jax.devices()[0]
    return jax.device_put(a, device), jax.device_put(b, device)


def workload(preset: str = "small") -> Workload:
    """Return the jitted matmul step and its inputs for ``preset``."""
    if preset not in SIZES:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(PRESETS)}")
    m, k, n = SIZES[preset]
    a, b = make_inputs(m, k, n)
    meta = {
        "preset": preset,
        "M": m,
        "K": k,
        "N": n,
        "flops": 2 * m * k * n,
        "parameter_count": 0,
        "device_count": 1,
    }
    return Workload(step=jax.jit(f), args=(a, b), name=f"matmul-{preset}", meta=meta)
