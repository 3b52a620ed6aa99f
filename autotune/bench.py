"""What a workload imports: `Workload`, and `report()` for a program of your own.

Contract for a workload file (the benchmarks in `benchmarks/` and a user's
`--script FILE` follow it):

    from autotune.bench import Workload

    def workload(preset: str) -> Workload:
        ...  # build arrays on jax.devices(), return the step and its arguments

`Workload.step` is a function of `*args` (a `jax.jit`-wrapped one keeps its
shardings); autotune jits it if it is not. `workload(preset)` may also return a
plain `(step, args)` pair. By hand, `python -m autotune.bench` exits 1 when the
result it prints is not `ok` (a missing file, a workload that fails). The file never imports optuna,
sqlalchemy or the autotune CLI. `python -m autotune.bench FILE --preset P`
measures a workload file on its own (the trial child, `autotune.child`,
does the work). The child calls `workload(preset)` before it touches JAX
itself, so a multi-process workload may call `jax.distributed.initialize`
there first (see `benchmarks/distributed-mlp.py`).

`Workload` and `PRESETS` are defined in the child package (`autotune.child.workload`)
and re-exported here; importing this module loads neither jax nor numpy.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from autotune.child.run import main as child_main
from autotune.child.run import measure_to_file
from autotune.child.workload import PRESETS, Workload

__all__ = ["PRESETS", "Workload", "main", "report"]


def report(work: Workload | Callable[[], Workload]) -> int:
    """Measure a workload from your own program, for `autotune study --command`.

    Call it where your program has built its step and arguments (or pass a
    function that builds them). It reads the job the parent passed in the
    environment, measures, writes the result to the file the parent named
    (or prints it when run by hand) and returns 0; the configuration under
    test reaches the process through XLA_FLAGS or, in paired mode, the job.

    Under a launcher (`--launcher`) every process of the program calls it at
    the same point, after `jax.distributed.initialize`; process k > 0 writes
    its result beside process 0's (`autotune.child.ranks`), so the parent's
    scratch folder must be on a filesystem every host sees. Where several
    processes run, one whose own measurement fails ends the program at once
    with exit code 1 once its result is written (its peers would wait for it
    forever), so the launcher can stop the others.
    """
    return measure_to_file(work if callable(work) else (lambda: work), dict(os.environ))


def main(argv: list[str] | None = None) -> int:
    """`python -m autotune.bench FILE [--preset P]`: measure one workload file; exit 1
    when the result it prints is not `ok`."""
    return child_main(argv, strict=True)


if __name__ == "__main__":
    raise SystemExit(main())
