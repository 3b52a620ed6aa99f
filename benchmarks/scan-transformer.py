"""FSDP training step of a decoder-only transformer whose layers run under ``jax.lax.scan``.

The model, its blocks and its loss are ``transformer``'s (loaded beside this
file): token and position embeddings, pre-LayerNorm blocks with causal
multi-head self-attention and a tanh-GELU MLP, a final LayerNorm, an output
projection tied to the token embedding, softmax cross-entropy, one plain SGD
step in float32. The step returns ``(new_params, loss)``.

What differs is how the blocks run: their parameters are stacked along a
leading layer axis and the blocks run as one ``jax.lax.scan``, as large models
are written (one compiled block, a loop over layers). Every weight matrix is
sharded along one of its own axes over a 1-D ``("fsdp",)`` mesh of all
``jax.devices()``; inside ``jax.shard_map`` the scan's body all-gathers the
current layer's weight shards (``jax.lax.all_gather``) just before using them.
The body is rematerialised (``jax.checkpoint``), as FSDP does to avoid keeping
every layer's gathered weights: the backward scan gathers each layer's weights
again and autodiff turns the gathers into ``psum_scatter`` of the weight
gradients. The compiled step therefore holds **all-gather** and
**reduce-scatter** ops inside **while loops** (the forward and the backward
scan; one per weight matrix and layer step), plus an all-gather and a
reduce-scatter of the embedding outside them and **all-reduce** ops (the loss,
and the gradients of the replicated vectors, inside the backward loop too).
That is what the latency hiding scheduler, the pipelined collectives, while-loop
double buffering and the combine thresholds act on.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from autotune.bench import Workload

PRESETS = ("tiny", "small", "large")
DESCRIPTION = ("decoder-only transformer LM training step, its layers under lax.scan: "
               "FSDP weights gathered and gradients scattered per layer inside the loop")

# Model and batch sizes per preset ("batch_per_device" scales the global batch with
# the device count). Several layers: XLA removes a loop of a single trip, and the
# collectives with it.
CONFIGS = {
    "tiny": dict(vocab=256, d_model=64, heads=4, d_ff=256, layers=4, seq=32, batch=8),
    "small": dict(vocab=512, d_model=128, heads=4, d_ff=512, layers=4, seq=64, batch=8),
    "large": dict(
        vocab=32768, d_model=1024, heads=16, d_ff=4096, layers=24, seq=1024, batch_per_device=8
    ),
}
SEED = 1701


def _sibling(name: str):
    """The built-in workload file `name`.py beside this one, loaded by path."""
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_autotune_benchmark_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The blocks, the loss and the sharding rules are transformer's.
_T = _sibling("transformer")
AXIS, LEARNING_RATE = _T.AXIS, _T.LEARNING_RATE
attention, mlp, layer_norm, gather_params = _T.attention, _T.mlp, _T.layer_norm, _T.gather_params
init_block, make_batch, step_shardings, count = (
    _T.init_block, _T.make_batch, _T.step_shardings, _T.count)


def check_preset(preset: str) -> None:
    """Raise ValueError naming the known presets when ``preset`` is not one of them."""
    if preset not in CONFIGS:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(PRESETS)}")


def resolve_config(preset: str, n_devices: int) -> dict:
    """The size config of ``preset``, checking that the sharded sizes divide evenly."""
    check_preset(preset)
    cfg = dict(CONFIGS[preset])
    cfg.setdefault("batch", cfg.pop("batch_per_device", 0) * n_devices)
    for name in ("vocab", "d_model", "d_ff", "batch"):
        if cfg[name] % n_devices:
            raise ValueError(f"{preset}: {name}={cfg[name]} not divisible by {n_devices} devices")
    return cfg


def block_step(x: jax.Array, shards: dict, heads: int) -> tuple[jax.Array, None]:
    """One layer of the scan: gather this layer's weight shards, apply the block."""
    block = gather_params(shards)
    x = x + attention(layer_norm(x, block["ln1_scale"], block["ln1_bias"]), block, heads)
    x = x + mlp(layer_norm(x, block["ln2_scale"], block["ln2_bias"]), block)
    return x, None


def forward(shards: dict, tokens: jax.Array, heads: int) -> jax.Array:
    """Next-token logits (batch, seq, vocab) of ``tokens``, from parameter shards."""
    embed = jax.lax.all_gather(shards["embed"], AXIS, axis=1, tiled=True)
    x = embed[tokens] + shards["pos"][: tokens.shape[1]]
    body = jax.checkpoint(functools.partial(block_step, heads=heads), prevent_cse=False)
    x, _ = jax.lax.scan(body, x, shards["blocks"])
    x = layer_norm(x, shards["lnf_scale"], shards["lnf_bias"])
    return x @ embed.T


def local_step(shards: dict, inputs: jax.Array, targets: jax.Array, heads: int):
    """Per-device SGD step on parameter shards and a batch shard; returns (shards, loss)."""

    def global_loss(shards: dict) -> jax.Array:
        logp = jax.nn.log_softmax(forward(shards, inputs, heads), axis=-1)
        local = -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))
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


def init_params(rng: np.random.Generator, cfg: dict) -> dict:
    """All parameters for ``cfg`` (host-side, drawn as transformer's are); the blocks'
    stacked along a leading layer axis."""
    params = _T.init_params(rng, cfg)
    params["blocks"] = jax.tree.map(lambda *layers: np.stack(layers), *params["blocks"])
    return params


def param_spec(path: tuple, leaf: jax.Array) -> P:
    """PartitionSpec of one parameter: transformer's, one axis later under the layer axis."""
    stacked = getattr(path[0], "key", None) == "blocks"
    name = getattr(path[-1], "key", None)
    if name not in _T.SHARDED_AXIS:
        return P()
    spec: list[str | None] = [None] * leaf.ndim
    spec[_T.SHARDED_AXIS[name] + stacked] = AXIS
    return P(*spec)


def workload(preset: str = "small") -> Workload:
    """Return the scanned FSDP training step and its inputs for ``preset``."""
    check_preset(preset)  # before JAX starts a backend
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
    return Workload(step=step, args=(params, *batch), name=f"scan-transformer-{preset}",
                    meta=meta)
