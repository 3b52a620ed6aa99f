"""Run one trial: a workload measured in a fresh child process.

`Launcher` is the plug point (subprocess here; a replay launcher for tests and
search benchmarks arrives with the search work). A launcher never raises for a
bad configuration: it returns a `TrialOutcome` whose kind says what happened.
"""

from __future__ import annotations

import os
import sys
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from autotune._proc import Finished, run_bounded
from autotune.failures import classify_exit
from autotune.measurement import ResultFileError, read_result
from autotune.protocol import JOB_ENV, RESULT_ENV, Job, Phase
from autotune.records import FlagValue, OutcomeKind, TrialOutcome


@dataclass(frozen=True)
class TrialRequest:
    """Everything needed to run one trial.

    Attributes:
        workload: path of a workload file (see `autotune.bench`).
        preset: size preset passed to the workload.
        env: variables to set in the child on top of the parent's environment
            (XLA_FLAGS already merged with the user's own).
        compiler_options: typed per-compilation options for PAIRED mode, or
            None for DIRECT mode.
        steps: timed steps (per executable).
        prune_ratio: PAIRED mode: stop early once the candidate is this many
            times slower than the baseline (None: never).
        prune_curve: PAIRED mode: the other trials' median running ratio per
            number of pairs (item k-1: after k pairs; None items and past the
            end: no limit); the child also stops once the candidate is slower
            than that (`autotune.protocol.Job.prune_curve`). None: no curve.
        warmup, max_warmup: warm-up rounds after the first step: at least
            `warmup`, more until step times settle, at most `max_warmup`.
        timeout_s: hard limit for the whole child, compilation included.
        memory_limit_bytes: address-space limit of the child (None: none).
        flags: the configuration under test (what `env`/`compiler_options` carry),
            for launchers that look results up rather than measure them.
        command: run this program instead of `python -m autotune.child WORKLOAD`;
            it must measure through `autotune.bench.report` (never run by a shell).
        workdir: the child's working directory (default: a scratch folder of its own).
        known_programs: program fingerprint -> the trial that measured it; the
            child compiles, and times nothing when its program is among them.
        memory_budget_bytes: the child times nothing when the compiled program
            needs more (the outcome is `over_budget`); None: no budget.
        reference_options: PAIRED mode: options of the in-process reference
            the candidate is timed against (None: XLA's defaults).
        reference: the configuration those options carry, for launchers that
            look results up rather than measure them.
        timed: False compiles only (for the program's fingerprint).
    """

    workload: Path
    preset: str
    env: Mapping[str, str] = field(default_factory=dict)
    compiler_options: Mapping[str, Any] | None = None
    steps: int = 20
    warmup: int = 2
    max_warmup: int = 30
    prune_ratio: float | None = None
    prune_curve: tuple[float | None, ...] | None = None
    timeout_s: float = 300.0
    memory_limit_bytes: int | None = None
    command: tuple[str, ...] | None = None
    flags: Mapping[str, FlagValue] = field(default_factory=dict)
    workdir: Path | None = None
    known_programs: Mapping[str, int] = field(default_factory=dict)
    memory_budget_bytes: int | None = None
    reference_options: Mapping[str, Any] | None = None
    reference: Mapping[str, FlagValue] | None = None
    timed: bool = True


class Launcher(ABC):
    """Runs one trial and returns its outcome.

    Contract: `launch` returns a TrialOutcome for every configuration, good or
    bad (unknown flag, crash, timeout...); it raises only for faults of the tool
    itself (e.g. no Python interpreter). Implementations are not required to be
    thread-safe; use one launcher per worker thread.
    """

    @abstractmethod
    def launch(self, request: TrialRequest) -> TrialOutcome:
        """Measure `request` and return what happened."""


class SubprocessLauncher(Launcher):
    """Launches `python -m autotune.child WORKLOAD` in a fresh process per trial.

    Args:
        python: the interpreter for the child (default: this one).
        scratch_root: where per-trial scratch folders are made (default: system temp).
        keep_scratch: keep the scratch folder (result file, logs, XLA dump).
    """

    def __init__(
        self,
        python: str | None = None,
        scratch_root: Path | None = None,
        keep_scratch: bool = False,
    ) -> None:
        self.python = python or sys.executable
        self.scratch_root = scratch_root
        self.keep_scratch = keep_scratch

    def launch(self, request: TrialRequest) -> TrialOutcome:
        scratch = Path(tempfile.mkdtemp(prefix="autotune-trial-", dir=self.scratch_root))
        try:
            finished = run_bounded(
                self._argv(request), self._child_env(request, scratch), scratch,
                request.timeout_s, request.memory_limit_bytes, request.workdir,
                scratch=None if self.keep_scratch else scratch,
            )
            return self._outcome(request, finished, scratch / "result.json")
        finally:
            if not self.keep_scratch:
                _remove_tree(scratch)

    def _argv(self, request: TrialRequest) -> list[str]:
        if request.command is not None:
            return list(request.command)
        return [self.python, "-m", "autotune.child", str(request.workload),
                "--preset", request.preset]

    def _child_env(self, request: TrialRequest, scratch: Path) -> dict[str, str]:
        env = dict(os.environ)
        env.update(request.env)
        env[RESULT_ENV] = str(scratch / "result.json")
        env[JOB_ENV] = Job(
            steps=request.steps, warmup=request.warmup, max_warmup=request.max_warmup,
            prune_ratio=request.prune_ratio, prune_curve=request.prune_curve,
            compiler_options=request.compiler_options,
            artifact_dir=str(scratch), known_programs=dict(request.known_programs),
            memory_budget_bytes=request.memory_budget_bytes,
            reference_options=request.reference_options,
            phases=(Phase.COMPILE, Phase.MEASURE) if request.timed else (Phase.COMPILE,),
        ).to_json()
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def _outcome(self, request: TrialRequest, run: Finished, result: Path) -> TrialOutcome:
        rc = run.returncode
        base = TrialOutcome(
            OutcomeKind.CRASHED, "", duration_s=run.duration_s,
            exit_code=rc if rc is not None and rc >= 0 else None,
            signal=-rc if rc is not None and rc < 0 else None,
            stdout_tail=run.stdout, stderr_tail=run.stderr,
        )
        decided = classify_exit(rc, run.timed_out, run.stderr_head + run.stderr,
                                request.timeout_s, request.memory_limit_bytes)
        if decided is not None:
            return replace(base, kind=decided[0], message=decided[1])
        outcome = _from_result_file(result, base)
        if request.command is not None and not result.exists():
            outcome = replace(outcome, message=outcome.message + "; does the command call "
                              "autotune.bench.report()?")
        return outcome


def _from_result_file(result: Path, base: TrialOutcome) -> TrialOutcome:
    """The outcome the child wrote, or CRASHED when it wrote none (or garbage)."""
    try:
        kind, message, measurement = read_result(result)
    except ResultFileError as exc:
        last = (base.stderr_tail.strip().splitlines() or [""])[-1]
        msg = f"the child exited with code {base.exit_code} and wrote no result ({last})"
        return replace(base, message=str(exc) if result.exists() else msg)
    return replace(base, kind=kind, message=message, measurement=measurement)


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
