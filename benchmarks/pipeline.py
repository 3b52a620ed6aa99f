"""GPipe-style pipeline forward pass: one stage per device, activations sent with ppermute.

A stack of residual MLP blocks (``x + gelu(x @ w1 + b1) @ w2``), one block per
pipeline stage, in float32. The stages form a 1-D ``("stage",)`` mesh of all
``jax.devices()``; each stage's weights are its slice of arrays stacked along
a leading stage dimension. The global batch is split into microbatches that
flow through the pipeline inside ``jax.shard_map``: a ``jax.lax.scan`` over
``microbatches + stages - 1`` ticks in which every stage applies its block to
what it holds (stage 0 takes the next microbatch) and passes the result to the
next stage with ``jax.lax.ppermute`` (stage i -> i + 1, no wrap-around);
each stage keeps the outputs it computed. Forward only; at the end the last
stage computes the mean squared error against fixed targets.

The compiled step has a **collective-permute** inside the scan's while loop
(the point-to-point send/recv that the GPU pipelined-p2p and
collective-permute-decomposer flags act on; the pairs form no cycle, as the
decomposer requires) and one small all-reduce that broadcasts the loss from
the last stage. The step returns ``(stage_outputs, loss)``: every stage's
block outputs for every microbatch, shape (stages, microbatches, microbatch,
d_model), sharded on the stage dimension, and the loss. One device is a
one-stage pipeline: the ppermute has no pairs and XLA drops it, so only the
all-reduce remains.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from autotune.bench import Workload

PRESETS = ("tiny", "small", "large")
DESCRIPTION = "pipeline-parallel forward pass: one stage per device, ppermute between stages"

# microbatches: how many flow through the pipeline; microbatch: rows in each.
CONFIGS = {
    "tiny": dict(microbatches=4, microbatch=8, d_model=32, d_ff=64),
    "small": dict(microbatches=8, microbatch=64, d_model=128, d_ff=256),
    "large": dict(microbatches=32, microbatch=2048, d_model=4096, d_ff=16384),
}
SEED = 1701
INIT_SCALE = 0.02
AXIS = "stage"


def stage_block(x: jax.Array, w: dict) -> jax.Array:
    """This stage's residual MLP block."""
    return x + jax.nn.gelu(x @ w["w1"] + w["b1"], approximate=True) @ w["w2"]


def _varying(x: jax.Array) -> jax.Array:
    """``x`` marked as varying over the stage axis, as the scan's carry must be: JAX's
    ``jax.lax.pcast(x, AXIS, to="varying")``, named ``jax.lax.pvary`` in the releases
    before it (0.8.0, the oldest autotune supports, has only ``pvary``)."""
    if hasattr(jax.lax, "pcast"):
        return jax.lax.pcast(x, AXIS, to="varying")
    return jax.lax.pvary(x, AXIS)


def local_pipeline(weights: dict, inputs: jax.Array, targets: jax.Array, n_stages: int):
    """Run the pipeline on one stage (inside ``shard_map``); return (outputs, loss).

    ``weights`` hold this stage's block with a leading dimension of 1;
    ``inputs`` and ``targets`` (microbatches, microbatch, d_model) are replicated.
    """
    w = jax.tree.map(lambda a: a[0], weights)
    stage = jax.lax.axis_index(AXIS)
    n_micro = inputs.shape[0]
    forward_pairs = [(i, i + 1) for i in range(n_stages - 1)]

    def tick(carry, t):
        received, outputs = carry
        fresh = inputs[jnp.clip(t, 0, n_micro - 1)]
        x = jnp.where(stage == 0, fresh, received)
        y = stage_block(x, w)
        index = t - stage  # the microbatch this stage works on at tick t
        valid = (index >= 0) & (index < n_micro)
        slot = jnp.clip(index, 0, n_micro - 1)
        outputs = outputs.at[slot].set(jnp.where(valid, y, outputs[slot]))
        return (jax.lax.ppermute(y, AXIS, forward_pairs), outputs), None

    zeros = _varying(jnp.zeros_like(inputs))
    carry = (zeros[0], zeros)
    (_, outputs), _ = jax.lax.scan(tick, carry, jnp.arange(n_micro + n_stages - 1))
    last = stage == n_stages - 1
    local_loss = jnp.where(last, jnp.mean(jnp.square(outputs - targets)), 0.0)
    return outputs[None], jax.lax.psum(local_loss, AXIS)


def make_step(mesh: Mesh, weight_specs: dict):
    """Return the jitted ``step(weights, inputs, targets) -> (stage_outputs, loss)``."""
    n_stages = mesh.shape[AXIS]
    mapped = jax.shard_map(
        functools.partial(local_pipeline, n_stages=n_stages),
        mesh=mesh,
        in_specs=(weight_specs, P(), P()),
        out_specs=(P(AXIS), P()),
    )
    w_shard = jax.tree.map(
        lambda s: NamedSharding(mesh, s), weight_specs, is_leaf=lambda x: isinstance(x, P)
    )
    rep = NamedSharding(mesh, P())
    return jax.jit(
        mapped,
        in_shardings=(w_shard, rep, rep),
        out_shardings=(NamedSharding(mesh, P(AXIS)), rep),
    )


def init_weights(rng: np.random.Generator, n_stages: int, cfg: dict) -> dict:
    """Per-stage block weights stacked along a leading stage dimension (host-side: not
    `jax.random`, which compiles its generator op by op in every trial process)."""
    d, f = cfg["d_model"], cfg["d_ff"]
    return {
        "w1": INIT_SCALE * rng.standard_normal((n_stages, d, f), dtype=np.float32),
        "b1": np.zeros((n_stages, f), np.float32),
        "w2": INIT_SCALE * rng.standard_normal((n_stages, f, d), dtype=np.float32),
    }


def make_data(rng: np.random.Generator, cfg: dict) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian microbatched inputs and targets, (microbatches, microbatch, d_model) each."""
    shape = (cfg["microbatches"], cfg["microbatch"], cfg["d_model"])
    return (rng.standard_normal(shape, dtype=np.float32),
            rng.standard_normal(shape, dtype=np.float32))


def workload(preset: str = "small") -> Workload:
    """Return the jitted pipeline forward step and its inputs for ``preset``."""
    if preset not in CONFIGS:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(PRESETS)}")
    cfg = CONFIGS[preset]
    devices = jax.devices()
    n_stages = len(devices)
    mesh = Mesh(np.array(devices), (AXIS,))
    rng = np.random.default_rng(SEED)
    weights = init_weights(rng, n_stages, cfg)
    specs = {name: P(AXIS) for name in weights}
    step = make_step(mesh, specs)
    weights = jax.device_put(weights, {n: NamedSharding(mesh, s) for n, s in specs.items()})
    data = jax.device_put(make_data(rng, cfg), NamedSharding(mesh, P()))
    meta = dict(
        cfg,
        preset=preset,
        stages=n_stages,
        device_count=n_stages,
        parameter_count=int(sum(a.size for a in weights.values())),
    )
    return Workload(step=step, args=(weights, *data), name=f"pipeline-{preset}", meta=meta)
