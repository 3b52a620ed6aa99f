"""A GRU cell under `lax.scan` over the sequence: one SGD training step on one device.

The recurrence runs in a while loop (the scan), each step three small matmuls
and the gates' sigmoids and tanh; the gradient is a second, reversed scan.
What the loop and fusion flags act on, with little parallel work per step.
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

NAME = "scan-rnn"
DESCRIPTION = "GRU cell under lax.scan over 64 steps, training step, one device"
SIZES = {"tiny": dict(batch=4, seq=8, dim=16),
         "small": dict(batch=32, seq=64, dim=128)}


def loss(params, xs, target):
    def cell(h, x):
        z = jax.nn.sigmoid(x @ params["wz"] + h @ params["uz"])
        r = jax.nn.sigmoid(x @ params["wr"] + h @ params["ur"])
        n = jnp.tanh(x @ params["wn"] + (r * h) @ params["un"])
        h = (1 - z) * n + z * h
        return h, h

    h0 = jnp.zeros((xs.shape[1], xs.shape[2]), jnp.float32)
    last, _ = jax.lax.scan(cell, h0, xs)
    return jnp.mean((last - target) ** 2)


def make_inputs(batch, seq, dim):
    keys = jax.random.split(jax.random.PRNGKey(SEED), 8)
    names = ("wz", "uz", "wr", "ur", "wn", "un")
    params = {n: jax.random.normal(k, (dim, dim), jnp.float32) / jnp.sqrt(dim)
              for n, k in zip(names, keys, strict=False)}
    xs = jax.random.normal(keys[6], (seq, batch, dim), jnp.float32)
    return params, (xs, jax.random.normal(keys[7], (batch, dim), jnp.float32))


def workload(preset: str = "small"):
    """The jitted training step and its arguments for `preset`, on the first device."""
    return sgd_workload(NAME, preset, SIZES, loss, make_inputs)
