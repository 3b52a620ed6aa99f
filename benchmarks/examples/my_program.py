"""An example program for `autotune study --command "..."`.

Any program can be tuned if it builds its step and calls
`autotune.bench.report(...)`: autotune runs the command (split like a shell
would, never through one) once per trial, with the configuration in XLA_FLAGS
or, in paired mode, in the measurement settings, and reads the result file
that `report` writes.

    autotune study --space cpu --command "python benchmarks/examples/my_program.py --size 256"
"""

import argparse

import jax
import jax.numpy as jnp

from autotune import bench


def build(size: int) -> bench.Workload:
    """A softmax attention-like step over a (size, size) matrix."""
    q = jax.random.normal(jax.random.PRNGKey(1), (size, 64), jnp.float32)

    def step(q):
        scores = jax.nn.softmax(q @ q.T / 8.0, axis=-1)
        return scores @ q

    return bench.Workload(step=step, args=(q,), name="my-program")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512)
    args = parser.parse_args()
    return bench.report(lambda: build(args.size))


if __name__ == "__main__":
    raise SystemExit(main())
