"""An embedding lookup pooled into a softmax: one SGD training step on one device.

Token ids gather rows of an embedding table (the gradient scatters them back:
a scatter-add), the rows are mean-pooled per sequence and a linear head gives
a softmax cross-entropy. Gather and scatter dominate, not matmuls.
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

NAME = "embedding"
DESCRIPTION = "embedding gather (scatter-add in the gradient), pooled, softmax head; one device"
SIZES = {"tiny": dict(vocab=256, dim=16, batch=4, seq=8, classes=4),
         "small": dict(vocab=16384, dim=128, batch=256, seq=64, classes=32)}


def loss(params, ids, labels):
    pooled = params["table"][ids].mean(axis=1)
    logits = pooled @ params["head"]
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * labels, axis=-1))


def make_inputs(vocab, dim, batch, seq, classes):
    k1, k2, k3, k4 = jax.random.split(jax.random.PRNGKey(SEED), 4)
    params = {"table": jax.random.normal(k1, (vocab, dim), jnp.float32),
              "head": jax.random.normal(k2, (dim, classes), jnp.float32) / jnp.sqrt(dim)}
    ids = jax.random.randint(k3, (batch, seq), 0, vocab)
    labels = jax.nn.one_hot(jax.random.randint(k4, (batch,), 0, classes), classes)
    return params, (ids, labels)


def workload(preset: str = "small"):
    """The jitted training step and its arguments for `preset`, on the first device."""
    return sgd_workload(NAME, preset, SIZES, loss, make_inputs)
