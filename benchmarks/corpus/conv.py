"""Three 3x3 convolutions with ReLU, then a linear head: one SGD step on one device.

NHWC images through `lax.conv_general_dilated` (padding SAME), global average
pooling and a softmax cross-entropy over classes; the gradient adds the
transposed convolutions. What the convolution emitters act on.
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

NAME = "conv"
DESCRIPTION = "three 3x3 convolutions + ReLU, pooled into a softmax head, training step, one device"
SIZES = {"tiny": dict(batch=2, size=8, channels=4, classes=4),
         "small": dict(batch=8, size=32, channels=32, classes=10)}
DIMS = ("NHWC", "HWIO", "NHWC")


def loss(params, images, labels):
    x = images
    for kernel in params["kernels"]:
        x = jax.nn.relu(jax.lax.conv_general_dilated(x, kernel, (1, 1), "SAME",
                                                     dimension_numbers=DIMS))
    logits = x.mean(axis=(1, 2)) @ params["head"]
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * labels, axis=-1))


def make_inputs(batch, size, channels, classes):
    keys = jax.random.split(jax.random.PRNGKey(SEED), 6)
    shapes = [(3, 3, 3, channels), (3, 3, channels, channels), (3, 3, channels, channels)]
    params = {"kernels": [jax.random.normal(k, s, jnp.float32) / jnp.sqrt(9 * s[2])
                          for k, s in zip(keys[:3], shapes, strict=True)],
              "head": jax.random.normal(keys[3], (channels, classes), jnp.float32)}
    images = jax.random.normal(keys[4], (batch, size, size, 3), jnp.float32)
    labels = jax.nn.one_hot(jax.random.randint(keys[5], (batch,), 0, classes), classes)
    return params, (images, labels)


def workload(preset: str = "small"):
    """The jitted training step and its arguments for `preset`, on the first device."""
    return sgd_workload(NAME, preset, SIZES, loss, make_inputs)
