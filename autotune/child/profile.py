"""The child's profile phase: trace the profile run's executable and turn it into costs.

The executable was compiled with `autotune.pgle.profile_run_options` (no
overlap, and on CPU one trace event per executed instruction). Its runs are
traced with JAX's profiler; the costs come from JAX's converter
(`jax.experimental.profiler.get_profiled_instructions_proto`, which reads a
GPU trace) where it gives any, otherwise from the trace's own events, named
as the program's HLO instructions (what a CPU trace gives; the converter
returns nothing for it). The rules are `autotune.pgle`'s; jax is imported
inside the functions.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

from autotune.child.failure import Failure
from autotune.child.timing import run_once
from autotune.pgle import (
    Cost,
    costs_from_trace_events,
    decode_profiled_instructions,
    hlo_instruction_names,
)

#: The Chrome-trace files JAX's profiler writes: `<dir>/plugins/profile/<stamp>/*.trace.json.gz`.
TRACE_GLOB = "plugins/profile/*/*.trace.json.gz"


def collect_profile(executable: Any, args: tuple[Any, ...], *, runs: int, percentile: float,
                    trace_dir: str, hlo_text: str) -> tuple[list[Cost], str]:
    """Profile `executable(*args)` and return (costs, source).

    One warm call first, untraced; then `runs` calls (each to
    `block_until_ready`) under `jax.profiler.trace(trace_dir,
    create_perfetto_trace=True)`. The costs are the converter's
    (`get_profiled_instructions_proto`; source "converter"; its finite
    positive costs, as it gives them) when it yields any, otherwise the
    trace's events named as instructions of `hlo_text` (the executable's
    optimised HLO), each instruction's durations over all runs taken at
    `percentile` (source "trace-events"). A fresh `trace_dir` is best: of
    several traces in it, the newest is read.

    Raises:
        Failure: the step's own failure (classified), or `crashed` when the
            profiler fails or no cost could be built (no trace file, no event
            matched an HLO instruction; the message says which).
        ValueError: `runs` below 1.
    """
    if runs < 1:
        raise ValueError(f"a profile needs at least one run, got {runs}")
    _trace(executable, args, runs, trace_dir)
    costs, why_not = _converter_costs(trace_dir)
    if costs:
        return costs, "converter"
    try:
        return trace_event_costs(trace_dir, hlo_text, percentile), "trace-events"
    except Failure as failure:
        raise Failure("crashed", f"{failure}{why_not}") from None


def _trace(executable: Any, args: tuple[Any, ...], runs: int, trace_dir: str) -> None:
    """One warm call, then `runs` calls under the profiler (the step's failures are
    classified by `run_once`; the profiler's own are `crashed`)."""
    import jax

    run_once(executable, args)
    try:
        with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
            for _ in range(runs):
                run_once(executable, args)
    except Failure:
        raise
    except Exception as exc:
        raise Failure("crashed", f"the profiler could not trace the step: {exc}") from exc


def _converter_costs(trace_dir: str) -> tuple[list[Cost], str]:
    """The converter's finite positive costs, and, when there are none, why (a clause
    for a failure message)."""
    try:
        from jax.experimental.profiler import get_profiled_instructions_proto

        data = get_profiled_instructions_proto(trace_dir)
        costs = decode_profiled_instructions(data)
    except Exception as exc:  # the converter is optional: the trace's events remain
        return [], f" (JAX's converter failed too: {exc})"
    kept = [c for c in costs if math.isfinite(c.cost_us) and c.cost_us > 0]
    return kept, "" if kept else " (JAX's converter found no costs either)"


def trace_files(trace_dir: str) -> list[Path]:
    """The Chrome-trace files of the newest trace under `trace_dir` (by the folder's
    modification time), sorted; [] when there is none."""
    files = list(Path(trace_dir).glob(TRACE_GLOB))
    if not files:
        return []
    newest = max({f.parent for f in files}, key=lambda d: (d.stat().st_mtime, d.name))
    return sorted(f for f in files if f.parent == newest)


def trace_events(path: Path) -> list[dict[str, Any]]:
    """The `traceEvents` of one gzip'd Chrome-trace JSON file; Failure `crashed` for a
    file that cannot be read as one."""
    try:
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError, EOFError) as exc:
        raise Failure("crashed", f"the trace file {path} cannot be read: {exc}") from exc
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise Failure("crashed", f"the trace file {path} holds no list of traceEvents")
    return [e for e in events if isinstance(e, dict)]


def trace_event_costs(trace_dir: str, hlo_text: str, percentile: float) -> list[Cost]:
    """Costs from the newest trace under `trace_dir`: its events named as instructions
    of `hlo_text`, aggregated per name at `percentile` (`autotune.pgle`).

    Raises:
        Failure: `crashed` when there is no trace file, or no event with a
            positive duration matched an HLO instruction (the message says which).
    """
    files = trace_files(trace_dir)
    if not files:
        raise Failure("crashed", f"the profiler wrote no trace file ({TRACE_GLOB}) "
                                 f"under {trace_dir}")
    names = hlo_instruction_names(hlo_text)
    events = [e for path in files for e in trace_events(path)]
    costs = costs_from_trace_events(events, names, percentile)
    if not costs:
        raise Failure("crashed", f"no event of the trace ({len(events)} events in "
                                 f"{', '.join(str(f) for f in files)}) matched one of the "
                                 f"program's {len(names)} HLO instructions with a positive "
                                 "duration")
    return costs
