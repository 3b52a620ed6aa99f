"""The child's phases and its result file: compile (and fingerprint), then measure.

A failing configuration is a result: the child still writes its file, with
`status` set to the failure kind, and exits 0. The parent reads the kind
from the file (`autotune.protocol.parse_result`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from autotune.bench import Workload
from autotune.child.failure import Failure, classified
from autotune.child.program import (
    collectives,
    hlo_stats,
    memory_figures,
    program_bytes,
    program_fingerprint,
)
from autotune.child.timing import compile_lowered, numerics_facts, time_direct, time_paired
from autotune.child.workload import build_workload
from autotune.protocol import JOB_ENV, RESULT_ENV, SCHEMA_VERSION, Job, Phase, ProtocolError
from autotune.stopping import over_budget

#: The longest failure message kept in a result (the tail of XLA's text).
MESSAGE_CHARS = 4000


def measure(work: Workload, job: Job) -> dict[str, Any]:
    """Run the job's phases on a workload; the dict is the result file's body.

    Compile always (and fingerprint the program). A candidate whose program
    is in `job.known_programs` is not timed: the result names the trial that
    measured it (`same_program_as`). One whose compiled footprint exceeds
    `job.memory_budget_bytes` is not timed either: its status is
    `over_budget`. Without the `measure` phase nothing is timed. Raises
    Failure for a configuration that fails.
    """
    import jax

    step = work.step if hasattr(work.step, "lower") else jax.jit(work.step)
    lowered = step.lower(*work.args)
    result: dict[str, Any] = {"mode": "paired" if job.paired else "direct"}
    cand, result["compile_time_s"] = compile_lowered(
        lowered, job.compiler_options or {}, _subdir(job.artifact_dir, "candidate"))
    result["fingerprint"] = program_fingerprint(_subdir(job.artifact_dir, "candidate"))
    known = job.known_programs.get(result["fingerprint"] or "")
    footprint = program_bytes(cand)
    if known is not None:
        result.update(same_program_as=known,
                      message=f"the same program as trial {known}, which measured it")
    elif over_budget(footprint, job.memory_budget_bytes):
        result.update(status="over_budget", message=(
            f"the compiled program needs {footprint} bytes, above the memory budget of "
            f"{job.memory_budget_bytes} bytes: not timed"))
    elif Phase.MEASURE in job.phases:
        result.update(_timed(lowered, cand, work.args, job))
    result["hlo_stats"] = hlo_stats(cand)
    result["collectives"] = collectives(cand)
    result.update(memory_figures(cand, direct=not job.paired))
    return result


def _timed(lowered: Any, cand: Any, args: tuple[Any, ...], job: Job) -> dict[str, Any]:
    """The measure phase: PAIRED against a baseline compiled here (with the job's
    `reference_options`, XLA's defaults unless given), or DIRECT alone."""
    if not job.paired:
        return {**time_direct(cand, args, job), **numerics_facts(cand, None, args)}
    base, base_seconds = compile_lowered(lowered, job.reference_options or {},
                                         _subdir(job.artifact_dir, "baseline"))
    return {
        "baseline_compile_time_s": base_seconds,
        "baseline_fingerprint": program_fingerprint(_subdir(job.artifact_dir, "baseline")),
        **time_paired(base, cand, args, job),
        **numerics_facts(cand, base, args),
    }


def _subdir(root: str | None, name: str) -> str | None:
    return os.path.join(root, "dump", name) if root else None


def _versions() -> dict[str, Any]:
    import jax
    import jaxlib

    devices = jax.devices()
    return {
        "jax_version": jax.__version__,
        "jaxlib_version": getattr(jaxlib, "__version__", ""),
        "backend": jax.default_backend(),
        "device_kind": devices[0].device_kind,
        "device_count": len(devices),
    }


def write_result(path: str | None, body: dict[str, Any]) -> None:
    """Write the result document (to stdout when no path is given)."""
    text = json.dumps({"schema_version": SCHEMA_VERSION, **body}, indent=1)
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text + "\n")


def measure_to_file(build: Callable[[], Workload], environ: dict[str, str]) -> int:
    """Build the workload, run the job from `environ`, write the result; return 0.

    Faults outside the measured code (a missing file, a bad contract, the
    workload's own exception) also end up in the file, classified.
    """
    body: dict[str, Any] = {"status": "ok", "message": ""}
    try:
        job = Job.from_json(environ.get(JOB_ENV))
        body.update(_versions())
        body.update(measure(build(), job))  # may set status (over_budget)
    except Failure as failure:
        body.update(status=failure.kind, message=str(failure)[-MESSAGE_CHARS:])
    except ProtocolError as exc:  # a fault of the parent, reported through the file all the same
        body.update(status="crashed", message=f"the trial's job is invalid: {exc}")
    except Exception as exc:  # the workload's own failure (OOM while building, a bug...)
        found = classified(exc)
        body.update(status=found.kind, message=str(found)[-MESSAGE_CHARS:])
    write_result(environ.get(RESULT_ENV), body)
    return 0


def run_file(path: str, preset: str, environ: dict[str, str]) -> int:
    """Measure the workload file `path` (its `workload(preset)`); write the result file."""
    return measure_to_file(lambda: build_workload(path, preset), environ)


def main(argv: list[str] | None = None) -> int:
    """`python -m autotune.child FILE [--preset P]`: measure one workload file."""
    parser = argparse.ArgumentParser(prog="python -m autotune.child")
    parser.add_argument("file", help="workload file defining workload(preset)")
    parser.add_argument("--preset", default="small")
    args = parser.parse_args(argv)
    return run_file(args.file, args.preset, dict(os.environ))
