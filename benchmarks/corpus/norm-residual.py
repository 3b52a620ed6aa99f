"""RMS norm and residual adds around small linear maps, four layers: one SGD step.

Each layer is `x + tanh(rms_norm(x) * gain @ w)`: a reduction over the row, a
division by its root, a narrow matmul and the residual add. Mostly
elementwise and reduction work with small dots between, in float32.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _sgd import sgd_workload  # noqa: E402  (a sibling file; workloads are loaded by path)

PRESETS = ("tiny", "small")
SEED = 1701

NAME = "norm-residual"
DESCRIPTION = "four RMS-norm + residual layers around narrow matmuls, training step, one device"
SIZES = {"tiny": dict(rows=64, width=64, layers=2),
         "small": dict(rows=1024, width=256, layers=4)}
EPS = 1e-6


def loss(params, x, target):
    for gain, w in zip(params["gains"], params["ws"], strict=True):
        norm = x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS)
        x = x + jnp.tanh((norm * gain) @ w)
    return jnp.mean((x - target) ** 2)


def make_inputs(rows, width, layers):
    keys = jax.random.split(jax.random.PRNGKey(SEED), layers + 2)
    params = {"gains": [jnp.ones((width,), jnp.float32) for _ in range(layers)],
              "ws": [jax.random.normal(k, (width, width), jnp.float32) / jnp.sqrt(width)
                     for k in keys[:layers]]}
    x = jax.random.normal(keys[-2], (rows, width), jnp.float32)
    return params, (x, jax.random.normal(keys[-1], (rows, width), jnp.float32))


def workload(preset: str = "small"):
    """The jitted training step and its arguments for `preset`, on the first device."""
    return sgd_workload(NAME, preset, SIZES, loss, make_inputs)
