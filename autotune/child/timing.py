"""Compile and time executables in the trial child; collect the facts for the numerics guard.

Warm-up and pruning follow `autotune.stopping`, with the bounds of the job.
jax and numpy are imported inside the functions.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from autotune.child.failure import Failure, classified
from autotune.protocol import Job
from autotune.stopping import prune_verdict, warm_up


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


def checksum(outputs: Any) -> float:
    """Sum of every output element in float64; raises Failure on NaN or Inf."""
    import jax
    import numpy as np

    total = 0.0
    for leaf in jax.tree_util.tree_leaves(outputs):
        arr = np.asarray(jax.device_get(leaf), dtype=np.float64)
        if not np.all(np.isfinite(arr)):
            raise Failure("nonfinite", "the step produced NaN or Inf values")
        total += float(arr.sum())
    return total


def _warm_up(exes: list[Any], args: tuple[Any, ...], job: Job) -> tuple[list[list[float]], bool]:
    steps = [lambda exe=exe: run_once(exe, args)[0] for exe in exes]
    return warm_up(steps, minimum=job.warmup, cap=job.max_warmup, window=job.settle_window,
                   tolerance=job.settle_tolerance)


def time_direct(compiled: Any, args: tuple[Any, ...], job: Job) -> dict[str, Any]:
    """Warm up until settled, then time `job.steps` steps of one executable."""
    first, out = run_once(compiled, args)
    (warm,), settled = _warm_up([compiled], args, job)
    times = [run_once(compiled, args)[0] for _ in range(job.steps)]
    return {
        "first_step_time_s": first,
        "warmup_steps": len(warm),
        "warmup_settled": settled,
        "warmup_times_s": warm,
        "step_times_s": times,
        "checksum": checksum(out),
    }


def time_paired(base: Any, cand: Any, args: tuple[Any, ...], job: Job) -> dict[str, Any]:
    """Warm up both until settled, then alternate their steps in A B B A order to cancel drift.

    Stops early with status `pruned` when `autotune.stopping.prune_verdict` says so after
    a pair: the margin rule (`job.prune_ratio`) or the median rule (`job.prune_curve`).
    """
    first, out = run_once(cand, args)
    base_first, base_out = run_once(base, args)
    (base_warm, cand_warm), settled = _warm_up([base, cand], args, job)
    base_times: list[float] = []
    cand_times: list[float] = []
    pruned: dict[str, Any] = {}
    for i in range(job.steps):
        order = ((base, base_times), (cand, cand_times))
        for exe, sink in order if i % 2 == 0 else reversed(order):
            sink.append(run_once(exe, args)[0])
        if why := prune_verdict(cand_times, base_times, job.prune_ratio, job.prune_after,
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
    checksums of DIRECT-mode runs from separate processes.
    """
    import jax
    import numpy as np

    from autotune import numerics

    leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(run_once(cand, args)[1])]
    floats = [str(x.dtype) for x in leaves if "float" in str(x.dtype)]
    body: dict[str, Any] = {
        "output_dtype": min(floats, key=numerics.tolerance, default="") if floats else "",
        "abs_sum": float(sum(np.abs(x.astype(np.float64)).sum() for x in leaves)),
    }
    if base is not None:
        base_leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(run_once(base, args)[1])]
        verdict = numerics.compare_arrays(leaves, base_leaves)
        body["numerics"] = verdict
        if not verdict["ok"]:
            body.update(status="numerics_mismatch", message=numerics.describe_mismatch(verdict))
    return body
