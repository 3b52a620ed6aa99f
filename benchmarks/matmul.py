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
    """Build deterministic int8 ``a`` (m, k) and bf16 ``b`` (k, n) on the first device."""
    key_a, key_b = jax.random.split(jax.random.PRNGKey(SEED))
    a = jax.random.randint(key_a, (m, k), minval=-128, maxval=127, dtype=jnp.int8)
    b = jax.random.normal(key_b, (k, n), dtype=jnp.bfloat16)
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
