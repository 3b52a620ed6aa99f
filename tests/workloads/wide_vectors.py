"""A compute-bound polynomial (Horner, degree 64) on a vector that fits in cache (one CPU
device): the one step here that a flag makes much faster on this CPU. On a host with
AVX-512, `xla_cpu_prefer_vector_width=512` runs it in about 0.6 of XLA's default time
(256-bit vectors); fast math changes its program (a small exp beside) but not its time.
So a study of both confirms a recommendation and shrinks it to the vector width
(`benchmarks/scripts/fault_check.py`'s shrink cases)."""

import jax.numpy as jnp

from autotune.bench import Workload

DESCRIPTION = "compute-bound polynomial for the fault suite's shrink phase"


def workload(preset: str = "small") -> Workload:
    """`preset` picks the length: tiny 256k, small 1M, large 4M elements."""
    n = {"tiny": 1 << 18, "small": 1 << 20, "large": 1 << 22}[preset]
    x = jnp.linspace(0.0, 0.9, n, dtype=jnp.float32)

    def step(x):
        acc = x
        for i in range(64):
            acc = acc * x + (0.5 + i * 1e-3)
        return acc, jnp.exp(x[:1024])  # a little exp: fast math changes the program, not the time

    return Workload(step=step, args=(x,), name="wide-vectors")
