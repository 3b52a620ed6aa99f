"""The child's phases and its result file: compile (and fingerprint), then measure.

A failing configuration is a result: the child still writes its file, with
`status` set to the failure kind, and exits 0. The parent reads the kind
from the file (`autotune.ground.protocol.parse_result`).

In a multi-process trial (a launcher started several processes,
`autotune.child.ranks`) each process writes its own file, process 0 the one
the parent named. The workload is built before anything else touches JAX, so
it may call `jax.distributed.initialize` first. The adaptive decisions are
process 0's in every process. A process whose own run fails (an exception,
not an outcome every process agreed on) writes its file and leaves at once
with exit code 1 (`os._exit`, past JAX's shutdown barrier, which would wait
for the others forever), so the launcher can end the rest.

A compile-only job may name further configurations (`Job.also_compile`, a
space fit's compiles): once its own result is written, the child compiles
each in turn and writes each one's result beside it
(`autotune.ground.protocol.case_result_path`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from autotune.child.failure import Failure, classified
from autotune.child.pgle_phase import pgle_candidate
from autotune.child.program import (
    collectives,
    hlo_stats,
    memory_figures,
    program_bytes,
    program_fingerprint,
)
from autotune.child.ranks import (
    Agree,
    process_0_agreement,
    process_rank,
    process_total,
    result_path,
)
from autotune.child.timing import compile_lowered, numerics_facts, time_direct, time_paired
from autotune.child.workload import Workload, build_workload
from autotune.ground.protocol import (
    JOB_ENV,
    Job,
    Phase,
    ProtocolError,
    Result,
    case_result_path,
)
from autotune.rules.stopping import over_budget

#: The longest failure message kept in a result (the tail of XLA's text).
MESSAGE_CHARS = 4000


def measure(work: Workload, job: Job, rank: int = 0) -> dict[str, Any]:
    """Run the job's phases on a workload; the dict is the result file's body.

    Compile always (and fingerprint the program). A candidate whose program
    is in `job.known_programs` is not timed: the result names the trial that
    measured it (`same_program_as`). One whose compiled footprint exceeds
    `job.memory_budget_bytes` is not timed either: its status is
    `over_budget`. Without the `measure` phase nothing is timed. Raises
    Failure for a configuration that fails.

    With several JAX processes, whether the program is known and whether it is
    over budget are process 0's answers in every process, and so are warm-up
    and pruning (`autotune.child.ranks.process_0_agreement`). `rank` names the
    process's own compiler dumps (process k > 0: `dump-k/`).
    """
    import jax

    step = work.step if hasattr(work.step, "lower") else jax.jit(work.step)
    lowered = step.lower(*work.args)
    agree = process_0_agreement()
    dumps = _dump_root(job.artifact_dir, rank)
    if job.pgle_mode is not None:
        return _pgle(work, job, lowered, dumps, agree)
    result: dict[str, Any] = {"mode": "paired" if job.paired else "direct"}
    cand, result["compile_time_s"] = compile_lowered(
        lowered, job.compiler_options or {}, _subdir(dumps, "candidate"))
    result["fingerprint"] = program_fingerprint(_subdir(dumps, "candidate"), job.program_flags)
    known = job.known_programs.get(result["fingerprint"] or "")
    footprint = program_bytes(cand)
    over = over_budget(footprint, job.memory_budget_bytes)
    if agree is not None:  # process 0's decisions, in one collective
        known_0, over_0 = agree([-1.0 if known is None else float(known), float(over)])
        known, over = (None if known_0 < 0 else int(known_0)), bool(over_0)
    if known is not None:
        result.update(same_program_as=known,
                      message=f"the same program as trial {known}, which measured it")
    elif over:
        result.update(status="over_budget", message=(
            f"the compiled program needs {footprint} bytes, above the memory budget of "
            f"{job.memory_budget_bytes} bytes: not timed"))
    elif Phase.MEASURE in job.phases:
        result.update(_timed(lowered, cand, work.args, job, dumps, agree))
    result["hlo_stats"] = hlo_stats(cand)
    result["collectives"] = collectives(cand)
    result.update(memory_figures(cand, direct=not job.paired))
    return result


def _pgle(work: Workload, job: Job, lowered: Any, dumps: str | None,
          agree: Agree | None) -> dict[str, Any]:
    """A PGLE job (`autotune.child.pgle_phase`): the configuration's PGLE candidate timed
    against the configuration itself. The HLO facts and memory are the candidate's
    (the reference's where JAX compiled the candidate itself, in auto mode)."""
    ref, cand, result = pgle_candidate(lowered, work.step, work.args, job, dumps)
    result["mode"] = "paired"
    if Phase.MEASURE in job.phases:
        result.update(time_paired(ref, cand, work.args, job, agree))
        result.update(numerics_facts(cand, ref, work.args))
    shown = cand if hasattr(cand, "as_text") else ref
    result["hlo_stats"] = hlo_stats(shown)
    result["collectives"] = collectives(shown)
    result.update(memory_figures(shown, direct=False))
    return result


def _timed(lowered: Any, cand: Any, args: tuple[Any, ...], job: Job, dumps: str | None,
           agree: Agree | None) -> dict[str, Any]:
    """The measure phase: PAIRED against a baseline compiled here (with the job's
    `reference_options`, XLA's defaults unless given), or DIRECT alone."""
    if not job.paired:
        return {**time_direct(cand, args, job, agree), **numerics_facts(cand, None, args)}
    base, base_seconds = compile_lowered(lowered, job.reference_options or {},
                                         _subdir(dumps, "baseline"))
    return {
        "baseline_compile_time_s": base_seconds,
        "baseline_fingerprint": program_fingerprint(_subdir(dumps, "baseline"),
                                                    job.reference_program_flags),
        **time_paired(base, cand, args, job, agree),
        **numerics_facts(cand, base, args),
    }


def _dump_root(artifact_dir: str | None, rank: int) -> str | None:
    """The folder under which a process dumps: `dump/` for process 0, `dump-k/` for k > 0
    (the processes of one trial share its artifact folder)."""
    if not artifact_dir:
        return None
    return os.path.join(artifact_dir, "dump" if rank == 0 else f"dump-{rank}")


def _subdir(root: str | None, name: str) -> str | None:
    return os.path.join(root, name) if root else None


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
        "process_count": jax.process_count(),
        "process_index": jax.process_index(),
    }


def write_result(path: str | None, body: dict[str, Any]) -> None:
    """Write the result document (to stdout when no path is given), stamped with the
    time it is written (`written_at`, seconds since the epoch).

    `body` holds `protocol.Result`'s fields by name (a name it lacks is a TypeError)."""
    text = Result(**body, written_at=time.time()).to_json(indent=1)
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text + "\n")


def measure_to_file(build: Callable[[], Workload], environ: dict[str, str], *,
                    strict: bool = False) -> int:
    """Build the workload, run the job from `environ`, write the result; return 0 (with
    `strict`, by hand, the result printed: 1 when it is not `ok`, so a shell sees it).

    Faults outside the measured code (a missing file, a bad contract, the
    workload's own exception) also end up in the file, classified. The
    workload is built before JAX starts a backend here (it may call
    `jax.distributed.initialize`). The file is this process's
    (`autotune.child.ranks.result_path`); where the launcher's variables say
    several processes run, a process that failed on its own leaves with exit
    code 1 once its file is written (see the module docstring).
    """
    body: dict[str, Any] = {"status": "ok", "message": ""}
    failed, job, work = True, None, None
    try:
        job = Job.from_json(environ.get(JOB_ENV))
        work = build()
        body.update(_versions())
        body.update(measure(work, job, process_rank(environ)))  # may set status (over_budget)
        failed = False
    except ProtocolError as exc:  # a fault of the parent, reported through the file all the same
        body.update(status="crashed", message=f"the trial's job is invalid: {exc}")
    except Exception as exc:  # a failing configuration (Failure), or the workload's own
        body.update(_failed(exc))  # failure (OOM while building, a bug...)
    path = result_path(environ)
    write_result(path, body)
    if failed and process_total(environ) > 1:
        _leave_now(1)
    if job is not None and work is not None and path:
        _also_compile(work, job, path)
    return 1 if strict and not path and body["status"] != "ok" else 0


def _failed(exc: Exception) -> dict[str, Any]:
    """The status and message of a run that raised `exc` (a Failure keeps its kind)."""
    found = exc if isinstance(exc, Failure) else classified(exc)
    return {"status": found.kind, "message": str(found)[-MESSAGE_CHARS:]}


def _also_compile(work: Workload, job: Job, path: str) -> None:
    """Compile each of the job's `also_compile` configurations in turn, as compile-only
    jobs of their own (dumps in `case-i/` of the artifact folder), and write each
    result to `case_result_path(path, i)` as it is known."""
    versions = _versions() if job.also_compile else {}
    for i, case in enumerate(job.also_compile, 1):
        artifacts = _subdir(job.artifact_dir, f"case-{i}")
        body: dict[str, Any] = {"status": "ok", "message": "", **versions}
        try:
            body.update(measure(work, replace(
                job, compiler_options=dict(case["compiler_options"]),
                program_flags=case["program_flags"], artifact_dir=artifacts,
                also_compile=())))
        except Exception as exc:
            body.update(_failed(exc))
        write_result(case_result_path(path, i), body)


def _leave_now(code: int) -> None:
    """Exit at once with `code`: no atexit hooks (JAX's distributed shutdown waits at a
    barrier for every process, which a failed process's peers never reach)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def run_file(path: str, preset: str, environ: dict[str, str], *, strict: bool = False) -> int:
    """Measure the workload file `path` (its `workload(preset)`); write the result file
    (`strict`: see `measure_to_file`)."""
    return measure_to_file(lambda: build_workload(path, preset), environ, strict=strict)


def main(argv: list[str] | None = None, *, strict: bool = False) -> int:
    """`python -m autotune.child FILE [--preset P]`: measure one workload file. With
    `strict` (`python -m autotune.bench`, a user's command), exit 1 when what it prints
    is not `ok`; the trial child itself always exits 0 once its result is written."""
    parser = argparse.ArgumentParser(prog="python -m autotune.child")
    parser.add_argument("file", help="workload file defining workload(preset)")
    parser.add_argument("--preset", default="small")
    args = parser.parse_args(argv)
    return run_file(args.file, args.preset, dict(os.environ), strict=strict)
