"""Compile and time executables in the trial child; collect the facts for the numerics guard.

Warm-up and pruning follow `autotune.rules.stopping`, with the bounds of the job.
In a multi-process trial (an `agree` function, `autotune.child.ranks`) those
rules decide on process 0's step times in every process, so all processes
run the same steps; each still records its own times. jax and numpy are
imported inside the functions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autotune.child.failure import Failure, classified
from autotune.child.ranks import Agree
from autotune.ground.protocol import Job
from autotune.rules.stopping import prune_verdict, warm_up


def compile_lowered(lowered: Any, options: Mapping[str, Any],
                    dump_dir: str | None) -> tuple[Any, float]:
    """Compile `lowered` with per-compilation options; return (executable, seconds).

    `dump_dir` asks XLA to dump the optimised HLO and code there (the program
    fingerprint is read from it). Raises Failure for a configuration XLA refuses.
    """
    opts = dict(options)
    if dump_dir:
        opts["xla_dump_to"] = dump_dir
    start = time.perf_counter()
    try:
        compiled = lowered.compile(compiler_options=opts) if opts else lowered.compile()
    except Exception as exc:  # XLA raises several types; all are results here
        raise classified(exc) from exc
    return compiled, time.perf_counter() - start


def run_once(compiled: Any, args: tuple[Any, ...]) -> tuple[float, Any]:
    """One step ending in block_until_ready; returns (seconds, outputs)."""
    import jax

    start = time.perf_counter()
    try:
        out = jax.block_until_ready(compiled(*args))
    except Exception as exc:
        raise classified(exc) from exc
    return time.perf_counter() - start, out


def host_arrays(outputs: Any) -> list[Any]:
    """Every output leaf as a numpy array. A leaf laid over other processes' devices too
    (a multi-process trial) gives the shards this process holds, one array each."""
    import jax
    import numpy as np

    arrays = []
    for leaf in jax.tree_util.tree_leaves(outputs):
        if getattr(leaf, "is_fully_addressable", True) or leaf.is_fully_replicated:
            arrays.append(np.asarray(jax.device_get(leaf)))
        else:
            arrays.extend(np.asarray(shard.data) for shard in leaf.addressable_shards)
    return arrays


def checksum(outputs: Any) -> float:
    """Sum of every output element in float64 (this process's shards of a leaf spread
    over several processes); raises Failure on NaN or Inf."""
    import numpy as np

    total = 0.0
    for leaf in host_arrays(outputs):
        arr = np.asarray(leaf, dtype=np.float64)
        if not np.all(np.isfinite(arr)):
            raise Failure("nonfinite", "the step produced NaN or Inf values")
        total += float(arr.sum())
    return total


def _warm_up(exes: list[Any], args: tuple[Any, ...], job: Job,
             agree: Agree | None = None) -> tuple[list[list[float]], bool]:
    """`stopping.warm_up` over `exes`. With `agree`, the rule sees process 0's time of
    each step (so every process stops after the same round) and the times returned are
    this process's own."""
    def rounds(steps: Sequence[Callable[..., float]]) -> tuple[list[list[float]], bool]:
        return warm_up(steps, minimum=job.warmup, cap=job.max_warmup,
                       window=job.settle_window, tolerance=job.settle_tolerance)

    if agree is None:
        steps = [lambda exe=exe: run_once(exe, args)[0] for exe in exes]
        return rounds(steps)
    own: list[list[float]] = [[] for _ in exes]

    def step(k: int) -> float:
        own[k].append(run_once(exes[k], args)[0])
        return agree([own[k][-1]])[0]

    agreed = [lambda k=k: step(k) for k in range(len(exes))]
    _, settled = rounds(agreed)
    return own, settled


def time_direct(compiled: Any, args: tuple[Any, ...], job: Job,
                agree: Agree | None = None) -> dict[str, Any]:
    """Warm up until settled (with `agree`: until process 0's times settle), then time
    `job.steps` steps of one executable."""
    first, out = run_once(compiled, args)
    (warm,), settled = _warm_up([compiled], args, job, agree)
    times = [run_once(compiled, args)[0] for _ in range(job.steps)]
    return {
        "first_step_time_s": first,
        "warmup_steps": len(warm),
        "warmup_settled": settled,
        "warmup_times_s": warm,
        "step_times_s": times,
        "checksum": checksum(out),
    }


def time_paired(base: Any, cand: Any, args: tuple[Any, ...], job: Job,
                agree: Agree | None = None) -> dict[str, Any]:
    """Warm up both until settled, then alternate their steps in A B B A order to cancel drift.

    Stops early with status `pruned` when `autotune.rules.stopping.prune_verdict` says so after
    a pair: the margin rule (`job.prune_ratio`) or the median rule (`job.prune_curve`).
    With `agree` (a multi-process trial) warm-up and pruning judge process 0's times, so
    every process stops at the same step with the same message; each records its own.
    """
    first, out = run_once(cand, args)
    base_first, base_out = run_once(base, args)
    (base_warm, cand_warm), settled = _warm_up([base, cand], args, job, agree)
    base_times: list[float] = []
    cand_times: list[float] = []
    # what the prune rule judges: these very lists, or process 0's times in a multi-process
    # trial (sent only where a rule can prune: without one there is nothing to decide)
    sync = agree if job.prune_ratio is not None or job.prune_curve is not None else None
    base_seen, cand_seen = (base_times, cand_times) if sync is None else ([], [])
    pruned: dict[str, Any] = {}
    for i in range(job.steps):
        order = ((base, base_times), (cand, cand_times))
        for exe, sink in order if i % 2 == 0 else reversed(order):
            sink.append(run_once(exe, args)[0])
        if sync is not None:
            seen = sync([base_times[-1], cand_times[-1]])
            base_seen.append(seen[0])
            cand_seen.append(seen[1])
        if why := prune_verdict(cand_seen, base_seen, job.prune_ratio, job.prune_after,
                                job.prune_curve):
            pruned = {"status": "pruned", "message": why}
            break
    return {
        **pruned,
        "first_step_time_s": first,
        "baseline_first_step_time_s": base_first,
        "warmup_steps": len(cand_warm),
        "warmup_settled": settled,
        "warmup_times_s": cand_warm,
        "baseline_warmup_times_s": base_warm,
        "step_times_s": cand_times,
        "baseline_step_times_s": base_times,
        "checksum": checksum(out),
        "baseline_checksum": checksum(base_out),
    }


def numerics_facts(cand: Any, base: Any | None, args: tuple[Any, ...]) -> dict[str, Any]:
    """Facts for the numerics guard; in PAIRED mode also the verdict against the baseline.

    One more step of each executable gives outputs to compare leaf by leaf. The
    lowest-precision float dtype and the sum of |x| let the parent compare
    checksums of DIRECT-mode runs from separate processes. In a multi-process trial
    each process compares the shards it holds.
    """
    import numpy as np

    from autotune.rules import numerics

    leaves = host_arrays(run_once(cand, args)[1])
    floats = [str(x.dtype) for x in leaves if "float" in str(x.dtype)]
    body: dict[str, Any] = {
        "output_dtype": min(floats, key=numerics.tolerance, default="") if floats else "",
        "abs_sum": float(sum(np.abs(x.astype(np.float64)).sum() for x in leaves)),
    }
    if base is not None:
        base_leaves = host_arrays(run_once(base, args)[1])
        verdict = numerics.compare_arrays(leaves, base_leaves)
        body["numerics"] = verdict
        if not verdict["ok"]:
            body.update(status="numerics_mismatch", message=numerics.describe_mismatch(verdict))
    return body
