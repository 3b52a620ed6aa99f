"""Run one trial: a workload measured in a fresh child process.

`Launcher` is the plug point (subprocess here; a replay launcher for tests and
search benchmarks arrives with the search work). A launcher never raises for a
bad configuration: it returns a `TrialOutcome` whose kind says what happened.

A trial may run through a cluster launcher (`TrialRequest.launcher`, a
template such as `srun -N 2 --ntasks-per-node 1 {cmd}`; `parse_template`),
which may start several processes of the child. Every process gets the same
environment; process 0 writes the result, process k > 0 writes its own file
beside it (`autotune.ground.protocol.rank_result_path`), and a failure any of them
reports can decide the trial (`deciding_report`).
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import sys
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from autotune.ground.errors import UsageError
from autotune.ground.proc import Finished, run_bounded
from autotune.ground.protocol import (
    COORDINATOR_ENV,
    JOB_ENV,
    RANK_VARIABLES,
    RESULT_ENV,
    SIZE_VARIABLES,
    Job,
    Phase,
    case_result_path,
)
from autotune.ground.records import FlagValue, Measurement, OutcomeKind, TrialOutcome
from autotune.rules.failures import classify_exit
from autotune.rules.measurement import ResultFileError, read_result

#: The word of a launcher template that stands for the child's command line.
CMD_PLACEHOLDER = "{cmd}"
#: Statuses every process of a multi-process trial takes from process 0's decisions
#: (`autotune.child.ranks`): another process reporting one adds nothing to process 0's.
AGREED_STATUSES = frozenset({"pruned", "over_budget"})
#: Variables an inherited environment may hold that would make a trial without a launcher
#: believe it is one of several processes; such a trial runs without them.
LAUNCHER_VARIABLES = (*RANK_VARIABLES, *SIZE_VARIABLES, COORDINATOR_ENV)


def parse_template(text: str) -> tuple[str, ...]:
    """Check a launcher template and return its words (`shlex.split`).

    Exactly one word holds `{cmd}`. A word that is `{cmd}` alone becomes the
    child's command line, word for word (`srun -N 2 {cmd}`); a word with more
    around it gets the command line quoted for a POSIX shell (`shlex.join`),
    for launchers that take one string (`ssh host 'cd /work && {cmd}'`). The
    launcher must pass the environment on to every process (srun does; with
    Open MPI add `-x AUTOTUNE_JOB -x AUTOTUNE_RESULT -x XLA_FLAGS`), should
    end the others when one fails (`srun --kill-on-bad-exit=1`; mpirun and
    `autotune.ground.local_launch` do), and the trial's scratch folder must lie on
    a filesystem every host sees.

    Raises:
        UsageError: the template is empty, does not parse (an open quote), has
            no `{cmd}`, or has it more than once; the message says which.
    """
    try:
        words = tuple(shlex.split(text))
    except ValueError as exc:
        raise UsageError(f"--launcher {text!r} does not parse: {exc}") from exc
    if not words:
        raise UsageError("--launcher is empty: give a command such as "
                         "'srun -N 2 --ntasks-per-node 1 {cmd}'")
    holding = sum(word.count(CMD_PLACEHOLDER) for word in words)
    if holding == 0:
        raise UsageError(f"--launcher {text!r} has no {CMD_PLACEHOLDER}: write {CMD_PLACEHOLDER} "
                         "where the trial's command goes, e.g. 'mpirun -n 2 {cmd}'")
    if holding > 1:
        raise UsageError(f"--launcher {text!r} has {CMD_PLACEHOLDER} {holding} times: "
                         "write it once, where the trial's command goes")
    return words


def expand_template(words: Sequence[str], argv: Sequence[str]) -> list[str]:
    """The launcher's command line: `words` (from `parse_template`) with `{cmd}` replaced
    by `argv` (see `parse_template`)."""
    out: list[str] = []
    for word in words:
        if word == CMD_PLACEHOLDER:
            out.extend(argv)
        else:
            out.append(word.replace(CMD_PLACEHOLDER, shlex.join(argv)))
    return out


@dataclass(frozen=True)
class RankReport:
    """What one process of a multi-process trial wrote: its status, message and when
    (`written_at`, seconds since the epoch; None where the file did not say)."""

    rank: int
    status: str
    message: str
    written_at: float | None = None

    @property
    def failed(self) -> bool:
        """A failure of this process's own (process 0's: any status but ok)."""
        return self.status != "ok" and (self.rank == 0 or self.status not in AGREED_STATUSES)


def deciding_report(reports: Iterable[RankReport]) -> RankReport | None:
    """The report whose failure decides a multi-process trial, or None when none failed.

    The first failure is taken for the cause: once one process fails, the
    others fail in their next collective, later (`written_at`; hosts' clocks
    are taken to agree; a report without a time counts as the latest; ties go
    to the lowest rank). A status every process takes from process 0
    (`AGREED_STATUSES`, pruned and over budget) is process 0's failure only, so
    another rank's adds nothing. Where this is process 0's report, the trial
    is judged as a single-process trial on process 0's result (how the
    launcher ended, then the file); otherwise it takes this process's status
    and its message prefixed with "process k: " (`rank_message`), whatever
    the launcher did (a timeout included: a launcher that leaves the others
    running after one failed lets them wait until the trial's limit).
    """
    failed = [r for r in reports if r.failed]
    if not failed:
        return None
    return min(failed, key=lambda r: (math.inf if r.written_at is None else r.written_at, r.rank))


def rank_message(report: RankReport) -> str:
    """A report's message as the trial's: "process k: ..." for k > 0, process 0's as it is."""
    return report.message if report.rank == 0 else f"process {report.rank}: {report.message}"


@dataclass(frozen=True)
class PgleSpec:
    """A PGLE trial (`autotune.ground.protocol.Job.pgle_mode`; PAIRED only), applied to a request
    by `TrialRequest.with_pgle`.

    Attributes:
        mode: "manual" (003's profile and performance runs) or "auto" (JAX's).
        profile: manual: the cost profile's path, outside the trial's scratch.
        collect: manual: profile first and write `profile` (else read it, and
            the child refuses it where it is stale).
        runs: runs profiled.
        percentile: of each instruction's profiled durations.
        model: the workload's identity, recorded with the profile.
    """

    mode: str = "manual"
    profile: str | None = None
    collect: bool = False
    runs: int = 3
    percentile: float = 50.0
    model: str | None = None


@dataclass(frozen=True)
class TrialRequest:
    """Everything needed to run one trial: the child's job, and how to start the child.

    Attributes:
        workload: path of a workload file (see `autotune.bench`).
        preset: size preset passed to the workload.
        job: how the child measures (`autotune.ground.protocol.Job`: steps, warm-up,
            prune limits, the typed `compiler_options` of PAIRED mode or None
            for DIRECT mode, known programs, memory budget, reference options,
            phases, PGLE); the launcher adds the trial's `artifact_dir`.
        env: variables to set in the child on top of the parent's environment
            (XLA_FLAGS already merged with the user's own).
        timeout_s: hard limit for the whole child, compilation included.
        memory_limit_bytes: the memory the child and its descendants may hold: a cgroup's
            limit where the machine allows one, else the guard's watch on their resident
            memory; the outcome `oom` either way (None: no limit).
        flags: the configuration under test (what `env`/`compiler_options` carry),
            for launchers that look results up rather than measure them.
        command: run this program instead of `python -m autotune.child WORKLOAD`;
            it must measure through `autotune.bench.report` (never run by a shell).
        workdir: the child's working directory (default: a scratch folder of its own).
        reference: the configuration the job's `reference_options` carry, for
            launchers that look results up rather than measure them.
        launcher: a cluster launcher's template (`parse_template`, e.g.
            `srun -N 2 --ntasks-per-node 1 {cmd}`): the child's command line
            runs through it, every process with the same environment, and the
            result is process 0's (`launch` raises UsageError for a template
            `parse_template` refuses: check it first). None: one child process,
            which runs without the rank and size variables (`LAUNCHER_VARIABLES`)
            this process may have inherited from a launcher of its own.
    """

    workload: Path
    preset: str
    job: Job = field(default_factory=Job)
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 300.0
    memory_limit_bytes: int | None = None
    command: tuple[str, ...] | None = None
    flags: Mapping[str, FlagValue] = field(default_factory=dict)
    workdir: Path | None = None
    reference: Mapping[str, FlagValue] | None = None
    launcher: str | None = None

    @property
    def timed(self) -> bool:
        """Whether the child times anything (False: it compiles only, for a fingerprint)."""
        return Phase.MEASURE in self.job.phases

    def with_job(self, **changes: Any) -> TrialRequest:
        """This request with the job's fields in `changes` replaced."""
        return replace(self, job=replace(self.job, **changes))

    def compile_only(self) -> TrialRequest:
        """This request compiling and fingerprinting only, timing nothing."""
        return self.with_job(phases=(Phase.COMPILE,))

    def with_pgle(self, spec: PgleSpec) -> TrialRequest:
        """This request as a PGLE trial (`PgleSpec`): the job's PGLE fields set, and the
        `profile` phase before `measure` where the spec collects its profile."""
        profile = (Phase.PROFILE,) if spec.collect else ()
        measure = (Phase.MEASURE,) if self.timed else ()
        return self.with_job(pgle_mode=spec.mode, pgle_profile=spec.profile,
                             pgle_runs=spec.runs, pgle_percentile=spec.percentile,
                             pgle_model=spec.model, phases=(Phase.COMPILE, *profile, *measure))


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

    def launch_all(self, requests: Sequence[TrialRequest]) -> list[TrialOutcome]:
        """Measure each of `requests`: their outcomes, in order, as `launch` would give
        them (here, one `launch` each; `SubprocessLauncher` compiles a series of
        compile-only requests in one process)."""
        return [self.launch(request) for request in requests]


#: The variable naming where trials' scratch folders go: with a multi-host `launcher`,
#: a folder every host sees (each process writes its result file there).
SCRATCH_ENV = "AUTOTUNE_SCRATCH"


class SubprocessLauncher(Launcher):
    """Launches `python -m autotune.child WORKLOAD` in a fresh process per trial.

    With a request's `launcher` template the child's command line runs through
    it, under the same guard and time limit (a timeout kills the launcher's
    whole process group; a launcher must end its remote processes when it is
    killed, as srun and mpirun do). The scratch folder holds every process's
    result file: across hosts, `scratch_root` must be on a filesystem all of
    them see.

    Args:
        python: the interpreter for the child (default: this one).
        scratch_root: where per-trial scratch folders are made (default: the folder
            `AUTOTUNE_SCRATCH` names, else the system's temporary folder).
        keep_scratch: keep the scratch folder (result files, logs, XLA dump).
    """

    def __init__(
        self,
        python: str | None = None,
        scratch_root: Path | None = None,
        keep_scratch: bool = False,
    ) -> None:
        self.python = python or sys.executable
        scratch = os.environ.get(SCRATCH_ENV)
        self.scratch_root = scratch_root or (Path(scratch) if scratch else None)
        self.keep_scratch = keep_scratch

    def launch(self, request: TrialRequest) -> TrialOutcome:
        scratch = Path(tempfile.mkdtemp(prefix="autotune-trial-", dir=self.scratch_root))
        if self.keep_scratch:  # a kept folder says which configuration it measured
            (scratch / "flags.json").write_text(json.dumps(
                {"flags": dict(request.flags), "env": dict(request.env)}, indent=1,
                default=str))
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

    def launch_all(self, requests: Sequence[TrialRequest]) -> list[TrialOutcome]:
        """One child compiles a series of compile-only PAIRED requests (`batchable`: a
        space fit's), each with its own per-compilation options (`Job.also_compile`),
        under the first's time limit once per request. Each request's outcome is its own
        result file's, its duration a share of the child's; a request whose file the
        child did not write (it crashed or ran out of time on an earlier one) is
        launched again on its own, so a failure is the configuration's that caused it."""
        if len(requests) < 2 or not batchable(requests):
            return super().launch_all(requests)
        keep = self.keep_scratch
        first = requests[0]
        batch = replace(first.with_job(also_compile=tuple(
            {"compiler_options": dict(r.job.compiler_options or {}),
             "program_flags": r.job.program_flags} for r in requests[1:])),
            timeout_s=first.timeout_s * len(requests))
        scratch = Path(tempfile.mkdtemp(prefix="autotune-trial-", dir=self.scratch_root))
        try:
            finished = run_bounded(
                self._argv(batch), self._child_env(batch, scratch), scratch, batch.timeout_s,
                batch.memory_limit_bytes, batch.workdir, scratch=None if keep else scratch)
            base = TrialOutcome(OutcomeKind.CRASHED, "",
                                duration_s=finished.duration_s / len(requests),
                                stdout_tail=finished.stdout, stderr_tail=finished.stderr)
            result = scratch / "result.json"
            files = [result] + [Path(case_result_path(str(result), i))
                                for i in range(1, len(requests))]
            read = [_from_result_file(path, base) if path.exists() else None for path in files]
        finally:
            if not keep:
                _remove_tree(scratch)
        return [outcome if outcome is not None else self.launch(request)
                for request, outcome in zip(requests, read, strict=True)]

    def _argv(self, request: TrialRequest) -> list[str]:
        if request.command is not None:
            argv = list(request.command)
        else:
            argv = [self.python, "-m", "autotune.child", str(request.workload),
                    "--preset", request.preset]
        if request.launcher is None:
            return argv
        return expand_template(parse_template(request.launcher), argv)

    def _child_env(self, request: TrialRequest, scratch: Path) -> dict[str, str]:
        env = dict(os.environ)
        if request.launcher is None:
            for name in LAUNCHER_VARIABLES:
                env.pop(name, None)
        env.update(request.env)
        env[RESULT_ENV] = str(scratch / "result.json")
        env[JOB_ENV] = replace(request.job, artifact_dir=str(scratch)).to_json()
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
        if request.launcher is not None and (failed := _rank_failure(result, base)):
            return failed
        decided = classify_exit(rc, run.timed_out, run.stderr_head + run.stderr,
                                request.timeout_s, request.memory_limit_bytes)
        if decided is not None:
            return replace(base, kind=decided[0], message=decided[1])
        outcome = _from_result_file(result, base)
        if request.command is not None and not result.exists():
            outcome = replace(outcome, message=outcome.message + "; does the command call "
                              "autotune.bench.report()?")
        if request.launcher is not None and outcome.ok and rc != 0:
            last = (run.stderr.strip().splitlines() or [""])[-1]
            outcome = replace(outcome, kind=OutcomeKind.CRASHED, message=(
                f"process 0 reported success but the launcher exited with code {rc}: another "
                f"process ended without a result ({last})"))
        return outcome


def batchable(requests: Sequence[TrialRequest]) -> bool:
    """Whether one child may compile all of `requests` (`Job.also_compile`): each is
    compile-only, PAIRED, not PGLE's and runs without a cluster launcher, and they differ
    in their configuration alone (flags, per-compilation options, program flags)."""
    def rest(request: TrialRequest) -> TrialRequest:
        return replace(request, flags={}, job=replace(
            request.job, compiler_options={}, program_flags=""))

    first = rest(requests[0])
    return all(r.job.phases == (Phase.COMPILE,) and r.job.paired and r.job.pgle_mode is None
               and r.launcher is None and rest(r) == first for r in requests)


def rank_files(result: Path) -> dict[int, Path]:
    """The result files of a trial's processes beside process 0's `result`, by rank
    (process 0's included where it exists)."""
    found = {0: result} if result.exists() else {}
    pattern = re.compile(re.escape(result.name) + r"\.(\d+)")
    for path in result.parent.glob(result.name + ".*"):
        if (match := pattern.fullmatch(path.name)) and int(match.group(1)) > 0:
            found[int(match.group(1))] = path
    return found


def _rank_failure(result: Path, base: TrialOutcome) -> TrialOutcome | None:
    """The outcome a failure of another process than 0 decides (`deciding_report`),
    with process 0's measurement where it wrote one; None where process 0's result,
    or how the launcher ended, decides. An unreadable file counts as no report."""
    reports: dict[int, tuple[RankReport, Measurement | None]] = {}
    for rank, path in rank_files(result).items():
        try:
            kind, message, measurement = read_result(path)
            stamp = json.loads(path.read_text(encoding="utf-8")).get("written_at")
        except (ResultFileError, OSError, ValueError):
            continue
        reports[rank] = (RankReport(rank, kind.value, message, stamp), measurement)
    deciding = deciding_report(report for report, _ in reports.values())
    if deciding is None or deciding.rank == 0:
        return None
    zero = reports[0][1] if 0 in reports else None
    measurement = zero if zero is not None else reports[deciding.rank][1]
    return replace(base, kind=OutcomeKind(deciding.status), message=rank_message(deciding),
                   measurement=measurement)


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
