"""RMS norm and residual adds around small linear maps, four layers: one SGD step.

Each layer is `x + tanh(rms_norm(x) * gain @ w)`: a reduction over the row, a
division by its root, a narrow matmul and the residual add. Mostly
elementwise and reduction work with small dots between, in float32.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from autotune.bench import Workload

PRESETS = ("tiny", "small")
SEED = 1701
LEARNING_RATE = 1e-3


def train_step(params, *batch):
    """One SGD step of `loss`: (new params, loss)."""
    value, grads = jax.value_and_grad(loss)(params, *batch)
    return jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads), value


def _on_device(tree):
    return jax.device_put(tree, jax.devices()[0])


def workload(preset: str = "small") -> Workload:
    """The jitted training step and its arguments for `preset`, on the first device."""
    if preset not in SIZES:  # before jax.devices(): a typo never starts a backend
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(PRESETS)}")
    params, batch = make_inputs(**SIZES[preset])
    return Workload(step=jax.jit(train_step), args=(_on_device(params), *_on_device(batch)),
                    name=f"{NAME}-{preset}", meta=dict(SIZES[preset], preset=preset))

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
