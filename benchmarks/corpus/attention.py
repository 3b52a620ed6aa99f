"""Multi-head self-attention with its projections: one SGD training step on one device.

Queries, keys and values projected from the input, scaled dot-product
attention per head (softmax over keys), the output projection and a
squared-error loss; the gradient flows back through all of it. Batched
matmuls, a softmax and transposes: what dot emitters and fusion act on.
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


def workload(preset: str = "small"):
    """The jitted training step and its arguments for `preset`, on the first device."""
    return sgd_workload(NAME, preset, SIZES, loss, make_inputs)
