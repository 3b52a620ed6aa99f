"""Data-parallel training step of an MLP classifier: replicated weights, gradient all-reduce.

One SGD step in float32 of a multi-layer perceptron (dense layers with a
tanh-GELU between them) trained with softmax cross-entropy on a deterministic
synthetic batch (Gaussian inputs, labels from a fixed random linear "teacher").
The step returns ``(new_params, loss)``.

Plain data parallelism over a 1-D ``("data",)`` mesh of all ``jax.devices()``:
every parameter is replicated and the batch is split along its first
dimension. Inside ``jax.shard_map`` each device computes the loss of its own
batch shard; the loss differentiated is their mean over devices
(``jax.lax.pmean``), and because the parameters are device-invariant autodiff
sums their gradients across devices, so every replica applies the same,
globally averaged update. The compiled step contains **all-reduce**: one per
gradient and one for the loss before XLA's all-reduce combiner runs, which on
XLA:CPU merges them all into a single tuple all-reduce (what the all-reduce
combine threshold and latency-hiding-scheduler flags act on). On one device
the all-reduce remains in the HLO, over a group of one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from autotune.bench import Workload

PRESETS = ("tiny", "small", "large")
DESCRIPTION = "data-parallel MLP training step: replicated weights, gradients all-reduced"

# Sizes per preset: input features, hidden width, number of hidden layers,
# classes, and the global batch ("batch_per_device" scales it with the devices).
CONFIGS = {
    "tiny": dict(features=32, hidden=64, layers=2, classes=8, batch=32),
    "small": dict(features=256, hidden=512, layers=3, classes=16, batch=256),
    "large": dict(features=4096, hidden=8192, layers=8, classes=1024, batch_per_device=2048),
}
SEED = 1701
LEARNING_RATE = 0.1
AXIS = "data"
MAX_LISTED_COUNT = 64


def forward(params: list[dict], x: jax.Array) -> jax.Array:
    """Logits of the MLP: GELU between the dense layers, none after the last."""
    for layer in params[:-1]:
        x = jax.nn.gelu(x @ layer["w"] + layer["b"], approximate=True)
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params: list[dict], x: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy of ``labels`` under the MLP's logits."""
    logp = jax.nn.log_softmax(forward(params, x), axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


def local_step(params: list[dict], x: jax.Array, labels: jax.Array):
    """Per-device SGD step on a batch shard; returns (new_params, global mean loss).

    The loss differentiated is the mean over ``AXIS`` of the shards' losses. The
    parameters are replicated (device-invariant) while each shard's loss varies by
    device, so autodiff sums their gradients over ``AXIS`` (the transpose of the
    implicit broadcast): every replica gets the global mean gradient via all-reduce.
    """

    def global_loss(params: list[dict]) -> jax.Array:
        return jax.lax.pmean(loss_fn(params, x, labels), AXIS)

    loss, grads = jax.value_and_grad(global_loss)(params)
    new_params = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)
    return new_params, loss


def make_step(mesh: Mesh):
    """Return the jitted ``step(params, x, labels) -> (new_params, loss)``."""
    mapped = jax.shard_map(
        local_step,
        mesh=mesh,
        in_specs=(P(), P(AXIS), P(AXIS)),
        out_specs=(P(), P()),
    )
    replicated = NamedSharding(mesh, P())
    batch = NamedSharding(mesh, P(AXIS))
    return jax.jit(
        mapped,
        in_shardings=(replicated, batch, batch),
        out_shardings=(replicated, replicated),
    )


def init_params(rng: np.random.Generator, cfg: dict) -> list[dict]:
    """He-style normal initialisation of every dense layer; zero biases (host-side:
    `jax.random` compiles its generator op by op, seconds of every trial process)."""
    widths = [cfg["features"], *[cfg["hidden"]] * cfg["layers"], cfg["classes"]]
    return [
        {
            "w": (rng.standard_normal((fan_in, fan_out), dtype=np.float32)
                  * np.float32(np.sqrt(2.0 / fan_in))),
            "b": np.zeros((fan_out,), np.float32),
        }
        for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True)
    ]


def make_batch(rng: np.random.Generator, cfg: dict) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian inputs and the labels a fixed random linear teacher gives them."""
    x = rng.standard_normal((cfg["batch"], cfg["features"]), dtype=np.float32)
    teacher = rng.standard_normal((cfg["features"], cfg["classes"]), dtype=np.float32)
    labels = np.argmax(x @ teacher, axis=-1).astype(np.int32)
    return x, labels


def resolve_config(preset: str, n_devices: int) -> dict:
    """Return the size config for ``preset``, checking that the batch splits evenly."""
    if preset not in CONFIGS:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(PRESETS)}")
    cfg = dict(CONFIGS[preset])
    per_device = cfg.pop("batch_per_device", None)
    if per_device is not None:
        cfg["batch"] = per_device * n_devices
    elif cfg["batch"] % n_devices:
        good = [c for c in range(1, MAX_LISTED_COUNT + 1) if cfg["batch"] % c == 0]
        raise ValueError(
            f"mlp-dp {preset}: batch={cfg['batch']} does not split over {n_devices} devices; "
            f"device counts that work (up to 64): {', '.join(map(str, good))}"
        )
    return cfg


def workload(preset: str = "small") -> Workload:
    """Return the data-parallel, jitted MLP training step and its inputs for ``preset``."""
    if preset not in CONFIGS:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(PRESETS)}")
    devices = jax.devices()
    cfg = resolve_config(preset, len(devices))
    mesh = Mesh(np.array(devices), (AXIS,))
    rng = np.random.default_rng(SEED)
    params = jax.device_put(init_params(rng, cfg), NamedSharding(mesh, P()))
    batch = jax.device_put(make_batch(rng, cfg), NamedSharding(mesh, P(AXIS)))
    count = int(sum(leaf.size for leaf in jax.tree.leaves(params)))
    meta = dict(cfg, preset=preset, device_count=len(devices), parameter_count=count)
    return Workload(step=make_step(mesh), args=(params, *batch), name=f"mlp-dp-{preset}", meta=meta)
