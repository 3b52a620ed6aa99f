"""Sequence-parallel tensor-parallel MLP blocks: all-gather -> matmul -> reduce-scatter.

The Megatron-style sequence-parallel MLP, forward only, in float32. The
activations ``x`` (tokens, d_model) are sharded along the token dimension
over a 1-D ``("tp",)`` mesh of all ``jax.devices()``; in each residual block
the first weight ``w1`` (d_model, d_ff) is sharded on its output dimension
and the second ``w2`` (d_ff, d_model) on its input dimension. Inside
``jax.shard_map`` every block does::

    full = all_gather(x, "tp", axis=0, tiled=True)   # (tokens, d_model)
    h = gelu(full @ w1_shard)                          # (tokens, d_ff / n)
    part = h @ w2_shard                                # partial sums over d_ff
    x = x + psum_scatter(part, "tp", scatter_dimension=0, tiled=True)

so the compiled step has one **all-gather** feeding a dot and one
**reduce-scatter** fed by a dot per block (plus one small all-reduce for the
loss). These are the two patterns XLA's collective-matmul (windowed einsum)
optimisations decompose into a loop of partial matmuls overlapped with
collective-permutes (``xla_gpu_multi_streamed_windowed_einsum``,
``xla_gpu_threshold_for_windowed_einsum_mib``, and the TPU equivalents). The
step returns ``(x_out, loss)``: the final activations, still token-sharded,
and the mean square of them. On one device the collectives have a group of
one.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from autotune.bench import Workload

PRESETS = ("tiny", "small", "large")
DESCRIPTION = "tensor-parallel MLP blocks: all-gather feeds a matmul, a matmul feeds reduce-scatter"

CONFIGS = {
    "tiny": dict(tokens=64, d_model=32, d_ff=128, layers=1),
    "small": dict(tokens=512, d_model=256, d_ff=1024, layers=2),
    "large": dict(tokens=8192, d_model=4096, d_ff=16384, layers=4),
}
SEED = 1701
INIT_SCALE = 0.02
AXIS = "tp"
MAX_LISTED_COUNT = 64


def block(x: jax.Array, w1: jax.Array, w2: jax.Array) -> jax.Array:
    """One sequence-parallel MLP block on local shards (inside ``shard_map``)."""
    full = jax.lax.all_gather(x, AXIS, axis=0, tiled=True)
    hidden = jax.nn.gelu(full @ w1, approximate=True)
    partial = hidden @ w2
    return x + jax.lax.psum_scatter(partial, AXIS, scatter_dimension=0, tiled=True)


def local_forward(x: jax.Array, w1s: jax.Array, w2s: jax.Array):
    """Apply every block to the local token shard; return (x_out, global mean-square loss)."""
    for w1, w2 in zip(w1s, w2s, strict=True):
        x = block(x, w1, w2)
    loss = jax.lax.pmean(jnp.mean(jnp.square(x)), AXIS)
    return x, loss


# Activations token-sharded; w1 (layers, d, f) sharded on f; w2 (layers, f, d) on f.
IN_SPECS = (P(AXIS, None), P(None, None, AXIS), P(None, AXIS, None))


def make_step(mesh: Mesh):
    """Return the jitted ``step(x, w1s, w2s) -> (x_out, loss)``."""
    mapped = jax.shard_map(
        local_forward, mesh=mesh, in_specs=IN_SPECS, out_specs=(IN_SPECS[0], P())
    )
    return jax.jit(
        mapped,
        in_shardings=tuple(NamedSharding(mesh, s) for s in IN_SPECS),
        out_shardings=(NamedSharding(mesh, IN_SPECS[0]), NamedSharding(mesh, P())),
    )


def make_inputs(cfg: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Deterministic activations (tokens, d) and stacked weights (layers, d, f), (layers, f, d)."""
    # drawn on the host: `jax.random` compiles its generator op by op (seconds of every
    # trial process); the values are inputs, the program is the same
    rng = np.random.default_rng(SEED)
    t, d, f, n_layers = cfg["tokens"], cfg["d_model"], cfg["d_ff"], cfg["layers"]
    x = rng.standard_normal((t, d), dtype=np.float32)
    w1 = INIT_SCALE * rng.standard_normal((n_layers, d, f), dtype=np.float32)
    w2 = INIT_SCALE * rng.standard_normal((n_layers, f, d), dtype=np.float32)
    return x, w1, w2


def resolve_config(preset: str, n_devices: int) -> dict:
    """Return the size config for ``preset``, checking that tokens and d_ff split evenly."""
    if preset not in CONFIGS:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(PRESETS)}")
    cfg = dict(CONFIGS[preset])

    def fits(n: int) -> bool:
        return cfg["tokens"] % n == 0 and cfg["d_ff"] % n == 0

    if not fits(n_devices):
        good = [c for c in range(1, MAX_LISTED_COUNT + 1) if fits(c)]
        raise ValueError(
            f"collective-matmul {preset}: tokens={cfg['tokens']} and d_ff={cfg['d_ff']} must "
            f"split evenly over {n_devices} devices; device counts that work (up to 64): "
            f"{', '.join(map(str, good))}"
        )
    return cfg


def workload(preset: str = "small") -> Workload:
    """Return the jitted tensor-parallel forward step and its sharded inputs for ``preset``."""
    if preset not in CONFIGS:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(PRESETS)}")
    devices = jax.devices()
    cfg = resolve_config(preset, len(devices))
    mesh = Mesh(np.array(devices), (AXIS,))
    step = make_step(mesh)
    args = jax.device_put(make_inputs(cfg), tuple(NamedSharding(mesh, s) for s in IN_SPECS))
    meta = dict(
        cfg,
        preset=preset,
        device_count=len(devices),
        parameter_count=2 * cfg["layers"] * cfg["d_model"] * cfg["d_ff"],
        flops=4 * cfg["layers"] * cfg["tokens"] * cfg["d_model"] * cfg["d_ff"],
    )
    return Workload(step=step, args=args, name=f"collective-matmul-{preset}", meta=meta)
