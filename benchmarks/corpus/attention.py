"""Multi-head self-attention with its projections: one SGD training step on one device.

Queries, keys and values projected from the input, scaled dot-product
attention per head (softmax over keys), the output projection and a
squared-error loss; the gradient flows back through all of it. Batched
matmuls, a softmax and transposes: what dot emitters and fusion act on.
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

NAME = "attention"
DESCRIPTION = "multi-head self-attention training step (projections, softmax) on one device"
SIZES = {"tiny": dict(batch=2, seq=16, dim=32, heads=2),
         "small": dict(batch=4, seq=128, dim=128, heads=4)}


def loss(params, x, target):
    b, s, d = x.shape
    h = params["heads"].shape[0]

    def split(w):
        return (x @ w).reshape(b, s, h, d // h).transpose(0, 2, 1, 3)

    q, k, v = split(params["wq"]), split(params["wk"]), split(params["wv"])
    weights = jax.nn.softmax(q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(d / h), axis=-1)
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(b, s, d) @ params["wo"]
    return jnp.mean((out * params["heads"].mean() - target) ** 2)


def make_inputs(batch, seq, dim, heads):
    keys = jax.random.split(jax.random.PRNGKey(SEED), 6)
    params = {name: jax.random.normal(k, (dim, dim), jnp.float32) / jnp.sqrt(dim)
              for name, k in zip(("wq", "wk", "wv", "wo"), keys, strict=False)}
    params["heads"] = jnp.ones((heads,), jnp.float32)
    x = jax.random.normal(keys[4], (batch, seq, dim), jnp.float32)
    return params, (x, jax.random.normal(keys[5], (batch, seq, dim), jnp.float32))
