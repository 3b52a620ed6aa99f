"""FSDP training step of a small decoder-only transformer language model.

One SGD step of a GPT-style model in float32: token and position embeddings,
pre-LayerNorm blocks with causal multi-head self-attention and a tanh-GELU MLP,
a final LayerNorm, an output projection tied to the token embedding, softmax
cross-entropy, ``jax.value_and_grad`` and a plain SGD update. The step returns
``(new_params, loss)``.

Every weight matrix is sharded along one axis over a 1-D ``("fsdp",)`` mesh of
all ``jax.devices()``; LayerNorm scales, biases and the position table are
replicated, and the batch is sharded along its first dimension. Inside
``jax.shard_map`` each device all-gathers the weights it needs
(``jax.lax.all_gather``), and autodiff turns that into a ``psum_scatter`` of the
weight gradients. The compiled step therefore contains all-gather ops (one per
weight matrix), reduce-scatter ops (one per weight matrix: gradients summed over
the batch shards and left sharded) and all-reduce ops (the loss and the
gradients of the replicated vectors; XLA combines them into one tuple
all-reduce).

Letting the SPMD partitioner infer the collectives from sharding annotations
alone does not give reduce-scatter on the CPU backend: it emits an all-reduce
followed by a dynamic-slice, because XLA:CPU has no pass that fuses the two.
Hence the explicit ``shard_map``.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from autotune.bench import Workload

PRESETS = ("tiny", "small", "large")
DESCRIPTION = "decoder-only transformer LM training step, FSDP-sharded over all devices"

# Model and batch sizes per preset. "batch_per_device" scales the global batch
# with the device count (used for the GPU-sized preset).
CONFIGS = {
    "tiny": dict(vocab=256, d_model=64, heads=4, d_ff=256, layers=2, seq=32, batch=8),
    "small": dict(vocab=512, d_model=128, heads=4, d_ff=512, layers=2, seq=64, batch=8),
    "large": dict(
        vocab=32768, d_model=1024, heads=16, d_ff=4096, layers=12, seq=1024, batch_per_device=8
    ),
}
SEED = 1701
LEARNING_RATE = 0.5
INIT_SCALE = 0.02
AXIS = "fsdp"

# Which axis of each weight matrix is sharded on "fsdp"; absent names are replicated.
SHARDED_AXIS = {"embed": 1, "wqkv": 0, "wo": 1, "w1": 0, "w2": 1}


def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array) -> jax.Array:
    """Normalise the last axis of ``x`` and apply ``scale`` and ``bias``."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale + bias


def attention(x: jax.Array, block: dict, heads: int) -> jax.Array:
    """Causal multi-head self-attention of ``x`` (batch, seq, d_model)."""
    b, s, d = x.shape
    qkv = (x @ block["wqkv"]).reshape(b, s, 3, heads, d // heads)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d // heads)
    causal = jnp.tril(jnp.ones((s, s), dtype=bool))
    logits = jnp.where(causal, logits, jnp.finfo(logits.dtype).min)
    weights = jax.nn.softmax(logits, axis=-1)
    out = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, s, d)
    return out @ block["wo"]


def mlp(x: jax.Array, block: dict) -> jax.Array:
    """Two-layer MLP with a tanh-approximated GELU."""
    hidden = jax.nn.gelu(x @ block["w1"] + block["b1"], approximate=True)
    return hidden @ block["w2"] + block["b2"]


def forward(params: dict, tokens: jax.Array, heads: int) -> jax.Array:
    """Return next-token logits (batch, seq, vocab) for ``tokens`` (batch, seq)."""
    x = params["embed"][tokens] + params["pos"][: tokens.shape[1]]
    for block in params["blocks"]:
        x = x + attention(layer_norm(x, block["ln1_scale"], block["ln1_bias"]), block, heads)
        x = x + mlp(layer_norm(x, block["ln2_scale"], block["ln2_bias"]), block)
    x = layer_norm(x, params["lnf_scale"], params["lnf_bias"])
    return x @ params["embed"].T


def loss_fn(params: dict, inputs: jax.Array, targets: jax.Array, heads: int) -> jax.Array:
    """Mean softmax cross-entropy of the next-token predictions."""
    logp = jax.nn.log_softmax(forward(params, inputs, heads), axis=-1)
    picked = jnp.take_along_axis(logp, targets[..., None], axis=-1)
    return -jnp.mean(picked)


def gather_params(shards: dict) -> dict:
    """All-gather each sharded weight matrix to its full shape (inside ``shard_map``)."""

    def gather(path: tuple, leaf: jax.Array) -> jax.Array:
        axis = SHARDED_AXIS.get(getattr(path[-1], "key", None))
        if axis is None:
            return leaf
        return jax.lax.all_gather(leaf, AXIS, axis=axis, tiled=True)

    return jax.tree_util.tree_map_with_path(gather, shards)


def local_step(shards: dict, inputs: jax.Array, targets: jax.Array, heads: int):
    """Per-device SGD step on parameter shards and a batch shard; returns (shards, loss).

    The gradient of ``all_gather`` is a reduce-scatter, so each device receives the
    batch-summed gradient of its own weight shard; replicated vectors get an all-reduce.
    """

    def global_loss(shards: dict) -> jax.Array:
        local = loss_fn(gather_params(shards), inputs, targets, heads)
        return jax.lax.pmean(local, AXIS)

    loss, grads = jax.value_and_grad(global_loss)(shards)
    new_shards = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, shards, grads)
    return new_shards, loss


def make_step(mesh: Mesh, specs: dict, heads: int):
    """Return the jitted FSDP ``step(params, inputs, targets) -> (new_params, loss)``."""
    batch = P(AXIS, None)
    mapped = jax.shard_map(
        functools.partial(local_step, heads=heads),
        mesh=mesh,
        in_specs=(specs, batch, batch),
        out_specs=(specs, P()),
    )
    p_shard = step_shardings(mesh, specs)
    b_shard = NamedSharding(mesh, batch)
    return jax.jit(
        mapped,
        in_shardings=(p_shard, b_shard, b_shard),
        out_shardings=(p_shard, NamedSharding(mesh, P())),
    )


def normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """``INIT_SCALE`` times standard normal float32 values, drawn on the host.

    NumPy, not `jax.random`: JAX compiles its generator op by op, which cost this
    tiny preset's trial processes about 4 s each on a 2-core CPU. The values are
    the step's inputs, so its program is the same either way.
    """
    return INIT_SCALE * rng.standard_normal(shape, dtype=np.float32)


def init_block(rng: np.random.Generator, d: int, f: int) -> dict:
    """Initialise one transformer block's parameters (float32, host-side)."""
    zeros = functools.partial(np.zeros, dtype=np.float32)
    return {
        "ln1_scale": np.ones((d,), np.float32), "ln1_bias": zeros((d,)),
        "wqkv": normal(rng, d, 3 * d),
        "wo": normal(rng, d, d),
        "ln2_scale": np.ones((d,), np.float32), "ln2_bias": zeros((d,)),
        "w1": normal(rng, d, f), "b1": zeros((f,)),
        "w2": normal(rng, f, d), "b2": zeros((d,)),
    }  # fmt: skip


def init_params(rng: np.random.Generator, cfg: dict) -> dict:
    """Initialise all model parameters for config ``cfg`` (host-side)."""
    d = cfg["d_model"]
    return {
        "embed": normal(rng, cfg["vocab"], d),
        "pos": normal(rng, cfg["seq"], d),
        "blocks": [init_block(rng, d, cfg["d_ff"]) for _ in range(cfg["layers"])],
        "lnf_scale": np.ones((d,), np.float32),
        "lnf_bias": np.zeros((d,), np.float32),
    }


def param_spec(path: tuple, leaf: jax.Array) -> P:
    """PartitionSpec for one parameter: its ``SHARDED_AXIS`` on "fsdp", else replicated."""
    name = getattr(path[-1], "key", None)
    if name not in SHARDED_AXIS:
        return P()
    spec = [None] * leaf.ndim
    spec[SHARDED_AXIS[name]] = AXIS
    return P(*spec)


def resolve_config(preset: str, n_devices: int) -> dict:
    """Return the size config for ``preset``, checking that sharded sizes divide evenly."""
    if preset not in CONFIGS:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(PRESETS)}")
    cfg = dict(CONFIGS[preset])
    cfg.setdefault("batch", cfg.pop("batch_per_device", 0) * n_devices)
    for name in ("vocab", "d_model", "d_ff", "batch"):
        if cfg[name] % n_devices:
            raise ValueError(f"{preset}: {name}={cfg[name]} not divisible by {n_devices} devices")
    return cfg


def make_batch(rng: np.random.Generator, cfg: dict) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic random token ids: inputs and next-token targets, (batch, seq) each."""
    tokens = rng.integers(0, cfg["vocab"], size=(cfg["batch"], cfg["seq"] + 1), dtype=np.int32)
    return tokens[:, :-1], tokens[:, 1:]


def workload(preset: str = "small") -> Workload:
    """Return the FSDP-sharded, jitted training step and its inputs for ``preset``."""
    devices = jax.devices()
    cfg = resolve_config(preset, len(devices))
    mesh = Mesh(np.array(devices), (AXIS,))
    rng = np.random.default_rng(SEED)
    params = init_params(rng, cfg)
    specs = jax.tree_util.tree_map_with_path(param_spec, params)
    step = make_step(mesh, specs, cfg["heads"])
    params = jax.device_put(params, step_shardings(mesh, specs))
    batch = jax.device_put(make_batch(rng, cfg), NamedSharding(mesh, P(AXIS, None)))
    meta = dict(cfg, preset=preset, device_count=len(devices), parameter_count=count(params))
    return Workload(step=step, args=(params, *batch), name=f"transformer-{preset}", meta=meta)


def step_shardings(mesh: Mesh, specs: dict) -> dict:
    """NamedShardings on ``mesh`` for a pytree of PartitionSpecs."""
    return jax.tree.map(
        lambda spec: NamedSharding(mesh, spec), specs, is_leaf=lambda x: isinstance(x, P)
    )


def count(params: dict) -> int:
    """Total number of scalar parameters."""
    return int(sum(leaf.size for leaf in jax.tree.leaves(params)))
