"""`StudyOptions`: every option of a study, in one record.

The command line builds it from `autotune study`'s options, the Python API
from `Study.create`'s arguments; a worker reads it back from the study's
recipe. Everything else is derived from it: the plan (`autotune.api.plan_study`
resolves the space, the workload and the sizes), what a re-run must match
(`recorded`), the job every trial's child gets (`job`: the options named as
`autotune.ground.protocol.Job` fields) and what happens after the search
(`AfterSearch.of`). Adding an option is adding a field here (the command line
makes its option from it) and a line in the README.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from autotune.ground.errors import UsageError
from autotune.ground.protocol import Job
from autotune.results.confirmation import CONFIRM_MAX, MIN_PROCESSES

#: Options a re-run may change (running more trials continues the study), or that are
#: recorded otherwise: the study's columns, the files' hashes, sizes in bytes, the command's
#: words (`StudyPlan.recorded`). Every other option is recorded as it is.
NOT_RECORDED = frozenset({
    "space", "benchmark", "script", "command", "name", "trials", "seed", "objective",
    "memory_budget", "preset", "devices", "mode", "drop_unknown", "allow_backend_mismatch",
    "trial_memory_limit", "racing", "heartbeat_s", "confirm", "confirm_repeats", "confirm_max",
    "confirm_steps",
    "shrink", "pgle", "keep_trial_files", "priority", "warm_start"})

#: The values `--sampler` and `--preset` take, listed in `--help` and completed by the shell
#: (the samplers are `autotune.study.samplers.NAMES`; a test keeps the two equal).
SAMPLER_CHOICES = ("auto", "tpe", "random", "grid", "nsga2", "gp")
PRESET_CHOICES = ("tiny", "small", "large")


def choices(*values: str) -> dict[str, Any]:
    """A field's `json_schema_extra` listing the values its option takes."""
    return {"choices": list(values)}

#: The options every trial's job carries: those named as a field of the child's `Job`.
JOB_FIELDS = frozenset(f.name for f in fields(Job))


class Options(BaseModel):
    """A command's options as one frozen record: unknown names and values out of range are
    refused (`of`); a file may be given as a path and is kept as its text."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _path_as_text(cls, value: Any) -> Any:
        """A file given as a path (`pathlib.Path`) is kept as its text."""
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @classmethod
    def of(cls, **values: Any) -> Self:
        """The options `values` name (the rest at their defaults).

        Raises:
            UsageError: an unknown option, or a value of the wrong type or range,
                naming each.
        """
        try:
            return cls(**values)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'options'}: {e['msg']}"
                                 for e in exc.errors())
            raise UsageError(f"{cls.WHAT} options refused: {problems}") from None

    #: What the options are of, in messages.
    WHAT: ClassVar[str] = "command"


class StudyOptions(Options):
    """What the user asked a study to do.

    `autotune study` has one option per field, made from it (`autotune.cli.study`):
    `--NAME` (or the field's `option`), its description as the help, its bounds as
    the option's. A field named as a `Job` field reaches every trial's child.
    """

    WHAT: ClassVar[str] = "study"

    space: str = Field(description="Search space name or YAML file.")
    benchmark: str = Field("transformer", description="Built-in benchmark to tune.")
    script: str | None = Field(None, description=(
        "Your own workload file defining workload(preset) (see the README)."))
    command: str | None = Field(None, description=(
        "Tune any program that measures through autotune.bench.report() (split like a shell "
        "would, never run by one)."))
    trials: int = Field(12, ge=1, description="Trials the study should hold in all.")
    name: str | None = Field(None, description="Study name (default SPACE-BENCHMARK-PRESET-"
                             "Ndev, N the devices JAX sees: cpu-matmul-small-8dev).")
    sampler: str = Field("auto", description=(
        "auto, tpe, random, grid, nsga2 or gp (auto: grid when the whole space fits in "
        "--trials, else tpe for one objective and nsga2 for two)."),
        json_schema_extra=choices(*SAMPLER_CHOICES))
    seed: int | None = Field(None, description="Seed of the sampler.")
    objective: str = Field("time", description=(
        "time, memory, or time,memory for a Pareto front of both."),
        json_schema_extra=choices("time", "memory", "time,memory"))
    memory_budget: str | None = Field(None, description=(
        "Peak memory a configuration may use, e.g. 12GiB: those above it are infeasible and "
        "never reported as the winner."))
    timeout_per_trial: float = Field(300.0, ge=1, description="Seconds per trial.")
    preset: str = Field("small", description="Workload size: tiny, small or large.",
                        json_schema_extra=choices(*PRESET_CHOICES))
    devices: int = Field(8, ge=1, description="CPU devices for sharded workloads.")
    steps: int = Field(20, ge=3, description="Timed steps per trial.")
    warmup: int = Field(2, ge=1, description="Minimum warm-up rounds after the first step.")
    max_warmup: int = Field(30, ge=1, description=(
        "Warm-up rounds at most, while step times have not settled."))
    settle_tolerance: float = Field(0.05, ge=0.001, le=0.5, description=(
        "Warm-up ends once the last 5 steps of every executable lie within this fraction of "
        "their median (0.05: 5%)."))
    mode: str = Field("paired", description="paired (in-process vs baseline) or direct.",
                      json_schema_extra=choices("paired", "direct"))
    drop_unknown: bool = Field(False, description=(
        "Leave out the space's flags this XLA does not know, instead of stopping."))
    allow_backend_mismatch: bool = Field(False, description=(
        "Run a space meant for another backend than JAX reports here."))
    confirm: int = Field(3, ge=0, description=(
        "Re-measure the best K configurations after the search, and up to six more once "
        "those are closed with none recommended (0: skip)."))
    confirm_repeats: int = Field(2, ge=2, description=(
        "Fresh processes per confirmed configuration, before sequential confirmation "
        "(shrinking and PGLE take at least 4)."))
    confirm_max: int = Field(CONFIRM_MAX, ge=0, description=(
        "Then measure the leader once more at a time until its interval lies below 0.98 "
        "(recommended if its estimate shows 3%), shows no gain, or it has this many "
        "processes (0: no sequential confirmation; "
        f"nothing is recommended on fewer than {MIN_PROCESSES} processes)."))
    confirm_steps: int | None = Field(None, ge=3, description=(
        "Timed steps per confirmation process (default: --steps). A paired ratio's noise "
        "falls with its steps, so a few longer processes can confirm a gain that many "
        "short ones cannot."))
    prune_margin: float | None = Field(1.3, ge=1.0, description=(
        "Stop a trial once it is this many times slower than the best so far (paired mode)."))
    shrink: bool = Field(True, description=(
        "After confirmation, drop the recommended configuration's flags that do not matter "
        "(compile without each, then time without each; paired mode)."))
    warm_start: bool = Field(True, description=(
        "Begin the search with the confirmed configurations of the database's earlier "
        "studies on this backend and device kind, the most alike workloads first "
        "(--no-warm-start: from nothing). They are measured and confirmed like any other."))
    priority: int = Field(0, description=(
        "A standing pool of workers (`autotune worker` without --study) serves the study "
        "of the highest priority first, then the one with the fewest trials in flight."))
    keep_trial_files: str | None = Field(None, description=(
        "Keep each trial's folder (full stdout and stderr, result, XLA's artifacts, "
        "flags.json) in this folder instead of deleting it."))
    trial_memory_limit: str | None = Field(None, description=(
        "Resident-memory limit of each trial (its processes together), e.g. 16GiB, held by "
        "the kernel too where a cgroup can be made; above it the trial is killed and "
        "recorded as oom (default: none)."))
    fit: bool = Field(True, description=(
        "Fit the space to the workload after its baseline: drop flags that cannot act on its "
        "program, clip thresholds to its collectives' sizes (see `best`)."))
    racing: bool = Field(True, description=(
        "Measure the search's leader again until 3 processes back it, before sampling more "
        "(counted in --trials; paired mode, time objective)."))
    heartbeat_s: int = Field(30, ge=1, json_schema_extra={"option": "--heartbeat"},
                             description=(
        "Seconds between a worker's heartbeats; one silent for twice as long is dead, and "
        "its trial goes back to the queue."))
    launcher: str | None = Field(None, description=(
        'Run each trial through a cluster launcher, e.g. "srun -N 2 --ntasks-per-node 1 '
        '{cmd}" ({cmd} is the trial; process 0 reports).'))
    pgle: int = Field(0, ge=0, description=(
        "After confirmation, measure the best K configurations again with a PGLE profile "
        "collected for each; `export` carries a profile that is confirmed faster (paired "
        "mode; 0: off)."))

    def recorded(self) -> dict[str, Any]:
        """The options a re-run of the study must ask for as they are (JSON-ready)."""
        return {k: v for k, v in self.model_dump(mode="json").items() if k not in NOT_RECORDED}

    def job(self) -> Job:
        """What every trial's job shares: the options named as `Job` fields."""
        return Job(**{k: getattr(self, k) for k in type(self).model_fields if k in JOB_FIELDS})


#: Fresh processes per measurement of shrinking and PGLE at least (`AfterSearch`). The
#: confirmation's own rounds default to 2 (`--confirm-repeats`: chosen leave-one-workload-out
#: from 2, 3 and 4 on the recorded tables; README, Search), then sequential confirmation adds
#: processes where they are needed; shrinking and PGLE keep the 4 they had.
MEASURE_REPEATS = 4


@dataclass(frozen=True)
class AfterSearch:
    """What a study does once its search is done (the recipe keeps it for workers).

    Attributes:
        confirm: re-measure the best K configurations (0: skip everything after).
        confirm_repeats: fresh processes per confirmed configuration in the rounds
            before sequential confirmation; shrinking and PGLE take `measure_repeats`.
        confirm_max: sequential confirmation's cap of processes per configuration
            (`autotune.study.confirm.sequential`; 0 or at most `confirm_repeats`: off).
        confirm_steps: timed steps per confirmation process (None: the study's steps).
        shrink: shrink the recommendation to the flags that matter.
        pgle: measure the best K again with a PGLE profile each (0: off).
    """

    confirm: int = 3
    confirm_repeats: int = 2
    shrink: bool = True
    pgle: int = 0
    confirm_max: int = CONFIRM_MAX
    confirm_steps: int | None = None

    @property
    def measure_repeats(self) -> int:
        """Fresh processes per measurement of shrinking and of PGLE: `confirm_repeats`, at
        least `MEASURE_REPEATS` (their verdicts have no sequential phase to add more)."""
        return max(self.confirm_repeats, MEASURE_REPEATS)

    @classmethod
    def of(cls, options: StudyOptions, *, confirm: int | None = None,
           confirm_repeats: int | None = None, shrink: bool | None = None,
           pgle: int | None = None, confirm_max: int | None = None,
           confirm_steps: int | None = None) -> AfterSearch:
        """What `options` ask for after the search, each argument given (not None) instead
        of the option of its name."""
        def pick(given: Any, own: Any) -> Any:
            return own if given is None else given

        return cls(pick(confirm, options.confirm), pick(confirm_repeats, options.confirm_repeats),
                   pick(shrink, options.shrink), pick(pgle, options.pgle),
                   pick(confirm_max, options.confirm_max),
                   pick(confirm_steps, options.confirm_steps))


class PgleOptions(Options):
    """What `autotune pgle` is asked to do (its command-line options are made from these
    fields, as `autotune study`'s are)."""

    WHAT: ClassVar[str] = "pgle"

    benchmark: str = Field("transformer", description="Built-in benchmark to profile.")
    script: str | None = Field(None, description=(
        "Your own workload file defining workload(preset)."))
    command: str | None = Field(None, description=(
        "Any program that measures through autotune.bench.report()."))
    config: str | None = Field(None, description=(
        "A configuration `autotune export` wrote (default: XLA's defaults)."))
    mode: str = Field("manual", description=(
        "manual (003's profile run, conversion and performance run) or auto (JAX's "
        "jax_enable_pgle)."), json_schema_extra=choices("manual", "auto"))
    profile_runs: int = Field(3, ge=1, description="Runs profiled.")
    percentile: float = Field(50.0, description=(
        "Percentile of each instruction's profiled durations."))
    repeats: int = Field(4, ge=1, description=(
        "Fresh processes timing the performance run against the same configuration "
        "without the profile."))
    out: str | None = Field(None, description=(
        "Folder for profile.pbtxt and its record (default autotune-pgle/NAME-PRESET/; an "
        "earlier profile there is replaced)."))
    profile: str | None = Field(None, description=(
        "Use this profile instead of collecting one; refused where stale."))
    preset: str = Field("small", description="Workload size: tiny, small or large.",
                        json_schema_extra=choices(*PRESET_CHOICES))
    devices: int = Field(8, ge=1, description="CPU devices for sharded workloads.")
    steps: int = Field(20, ge=3, description="Timed steps per process.")
    warmup: int = Field(2, ge=1, description="Minimum warm-up rounds after the first step.")
    max_warmup: int = Field(30, ge=1, description=(
        "Warm-up rounds at most, while step times have not settled."))
    timeout_per_trial: float = Field(300.0, ge=1, description="Seconds per process.")
