"""An embedding lookup pooled into a softmax: one SGD training step on one device.

Token ids gather rows of an embedding table (the gradient scatters them back:
a scatter-add), the rows are mean-pooled per sequence and a linear head gives
a softmax cross-entropy. Gather and scatter dominate, not matmuls.
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
