"""A Lennard-Jones molecular-dynamics step (a JAX MD style simulation), one device.

The energy of N particles in a periodic box is summed over every pair,
4 ((s/r)^12 - (s/r)^6) with the minimum-image distance, the forces are its
gradient with respect to the positions (autodiff), and one velocity-Verlet
style update moves the particles. Every pair costs divisions, powers and a
rounding for the periodic image: the step is bound by that elementwise
arithmetic, which fast-math flags change.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp

from autotune.bench import Workload

PRESETS = ("tiny", "small")
SEED = 1703
DT = 1e-4

NAME = "lj-md"
DESCRIPTION = "Lennard-Jones molecular-dynamics step (pairwise forces by autodiff), one device"
SIZES: Mapping[str, Mapping[str, float]] = {"tiny": dict(particles=64, box=6.0),
                                            "small": dict(particles=1024, box=16.0)}


def energy(positions, box):
    delta = positions[:, None, :] - positions[None, :, :]
    delta = delta - box * jnp.round(delta / box)
    r2 = jnp.sum(delta * delta, axis=-1) + jnp.eye(positions.shape[0], dtype=positions.dtype)
    inv6 = (1.0 / r2) ** 3
    pair = 4.0 * (inv6 * inv6 - inv6) * (1.0 - jnp.eye(positions.shape[0], dtype=positions.dtype))
    return 0.5 * jnp.sum(pair)


def md_step(positions, velocities, box):
    forces = -jax.grad(energy)(positions, box)
    velocities = velocities + DT * forces
    positions = jnp.mod(positions + DT * velocities, box)
    return positions, velocities, energy(positions, box)


def workload(preset: str = "small") -> Workload:
    """The jitted step and its arguments for `preset`, on the first device.

    Raises:
        ValueError: an unknown preset (before JAX starts a backend).
    """
    if preset not in SIZES:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(SIZES)}")
    n, box = int(SIZES[preset]["particles"]), float(SIZES[preset]["box"])
    side = int(round(n ** (1 / 3))) + 1
    grid = jnp.stack(jnp.meshgrid(*[jnp.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)[:n]
    jitter = 0.05 * jax.random.normal(jax.random.PRNGKey(SEED), (n, 3), jnp.float32)
    positions = (grid.astype(jnp.float32) + 0.5) * (box / side) + jitter
    velocities = jnp.zeros((n, 3), jnp.float32)
    device = jax.devices()[0]
    args = jax.device_put((positions, velocities, jnp.float32(box)), device)
    return Workload(step=jax.jit(md_step), args=args, name=f"{NAME}-{preset}",
                    meta=dict(SIZES[preset], preset=preset))
