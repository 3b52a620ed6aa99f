"""A SwiGLU feed-forward block: one SGD training step on one device.

`(silu(x @ w1) * (x @ w3)) @ w2` with a squared-error loss: three matmuls and
the gated activation between them (the feed-forward block of recent language
models), and their gradients.
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

NAME = "gated-mlp"
DESCRIPTION = "SwiGLU feed-forward training step (three matmuls, gated activation), one device"
SIZES = {"tiny": dict(tokens=32, dim=32, hidden=64),
         "small": dict(tokens=512, dim=256, hidden=1024)}


def loss(params, x, target):
    gated = jax.nn.silu(x @ params["w1"]) * (x @ params["w3"])
    return jnp.mean((gated @ params["w2"] - target) ** 2)


def make_inputs(tokens, dim, hidden):
    k1, k2, k3, kx, kt = jax.random.split(jax.random.PRNGKey(SEED), 5)
    params = {"w1": jax.random.normal(k1, (dim, hidden), jnp.float32) / jnp.sqrt(dim),
              "w3": jax.random.normal(k3, (dim, hidden), jnp.float32) / jnp.sqrt(dim),
              "w2": jax.random.normal(k2, (hidden, dim), jnp.float32) / jnp.sqrt(hidden)}
    x = jax.random.normal(kx, (tokens, dim), jnp.float32)
    return params, (x, jax.random.normal(kt, (tokens, dim), jnp.float32))


def workload(preset: str = "small"):
    """The jitted training step and its arguments for `preset`, on the first device."""
    return sgd_workload(NAME, preset, SIZES, loss, make_inputs)
