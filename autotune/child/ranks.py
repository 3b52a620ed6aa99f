"""Which process of a multi-process trial this is, and decisions every process takes alike.

A trial run through a launcher (`autotune.launch.launcher.parse_template`) may be
several processes of one workload (`jax.distributed`). Each reads its rank
and the number of processes from the launcher's variables
(`autotune.ground.protocol.RANK_VARIABLES`, `SIZE_VARIABLES`): pure rules, tested
in-process. Process 0 writes the trial's result file; process k > 0 writes
`<that path>.<k>` (`autotune.ground.protocol.rank_result_path`), on a filesystem
every host sees.

Every process must run the same executions in the same order, or their
collectives wait for each other forever. So the child's adaptive decisions
(warm-up settled, prune now, program already known, over the memory budget)
are process 0's everywhere: `process_0_agreement` hands each process process
0's figures, bit for bit, and every process applies the one rule to them.

Standard library only at import time; jax and numpy inside the functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autotune.ground.protocol import RANK_VARIABLES, RESULT_ENV, SIZE_VARIABLES, rank_result_path

#: Returns process 0's values on every process (a collective: every process calls it at
#: the same point of its run, with as many values).
Agree = Callable[[Sequence[float]], list[float]]


def _whole(text: str | None, low: int) -> int | None:
    """`text` as a whole number of at least `low`, or None."""
    if text is None or not text.strip().isdigit():
        return None
    value = int(text.strip())
    return value if value >= low else None


def _first(environ: Mapping[str, str], names: Sequence[str], low: int) -> int | None:
    return next((v for v in (_whole(environ.get(n), low) for n in names) if v is not None), None)


def process_rank(environ: Mapping[str, str]) -> int:
    """This process's rank: the first of `RANK_VARIABLES` set to a whole number (0 or
    more), in that order (JAX_PROCESS_ID, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID);
    0 where none is. A variable set to anything else is passed over."""
    found = _first(environ, RANK_VARIABLES, 0)
    return 0 if found is None else found


def process_total(environ: Mapping[str, str]) -> int:
    """How many processes the launcher started: the first of `SIZE_VARIABLES` set to a
    whole number (1 or more), in that order; 1 where none is."""
    found = _first(environ, SIZE_VARIABLES, 1)
    return 1 if found is None else found


def result_path(environ: Mapping[str, str]) -> str | None:
    """Where this process writes its result: `RESULT_ENV` for process 0, `<that>.<k>` for
    rank k > 0; None without `RESULT_ENV` (the result is printed)."""
    path = environ.get(RESULT_ENV)
    return rank_result_path(path, process_rank(environ)) if path else None


def to_words(values: Sequence[float]) -> Any:
    """float64 values as int32 words (two per value): JAX moves them exactly without x64."""
    import numpy as np

    return np.asarray(values, dtype=np.float64).view(np.int32)


def from_words(words: Any) -> list[float]:
    """The float64 values `to_words` made, bit for bit."""
    import numpy as np

    return [float(v) for v in np.ascontiguousarray(words, dtype=np.int32).view(np.float64)]


def process_0_agreement() -> Agree | None:
    """None where JAX runs one process (nothing to agree on: the single-process path
    stays as it is); else a function that returns process 0's values on every process.

    It broadcasts through a collective (`multihost_utils.broadcast_one_to_all`), so
    every process calls it at the same point with as many values. Call this after the
    workload is built (`jax.distributed.initialize`, if any, has run).
    """
    import jax

    if jax.process_count() == 1:
        return None
    from jax.experimental import multihost_utils

    def agree(values: Sequence[float]) -> list[float]:
        return from_words(multihost_utils.broadcast_one_to_all(to_words(values)))

    return agree
