"""`StudyOptions`: every option of a study, in one record.

The command line builds it from `autotune study`'s options, the Python API
from `Study.create`'s arguments; a worker reads it back from the study's
recipe. Everything else is derived from it: the plan (`autotune.api.plan_study`
resolves the space, the workload and the sizes), what a re-run must match
(`recorded`), the job every trial's child gets (`job`: the options named as
`autotune.protocol.Job` fields) and what happens after the search
(`AfterSearch.of`). Adding an option is adding a field here, its command-line
option, and a line in the README.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from autotune.errors import UsageError
from autotune.protocol import Job

#: Options a re-run may change (running more trials continues the study), or that are
#: recorded otherwise: the study's columns, the files' hashes, sizes in bytes, the command's
#: words (`StudyPlan.recorded`). Every other option is recorded as it is.
NOT_RECORDED = frozenset({
    "space", "benchmark", "script", "command", "name", "trials", "seed", "objective",
    "memory_budget", "preset", "devices", "mode", "drop_unknown", "allow_backend_mismatch",
    "trial_memory_limit", "racing", "heartbeat_s", "confirm", "confirm_repeats", "shrink",
    "pgle"})

#: The options every trial's job carries: those named as a field of the child's `Job`.
JOB_FIELDS = frozenset(f.name for f in fields(Job))


class StudyOptions(BaseModel):
    """What the user asked a study to do (the defaults are `autotune study`'s)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    space: str = Field(description="Search space name or YAML file.")
    benchmark: str = Field("transformer", description="Built-in benchmark to tune.")
    script: str | None = Field(None, description="Your own workload file.")
    command: str | None = Field(None, description="Your own program, measuring through "
                                "autotune.bench.report().")
    name: str | None = Field(None, description="Study name (default SPACE-BENCHMARK-PRESET).")
    trials: int = Field(12, ge=1, description="Trials the study should hold in all.")
    sampler: str = Field("auto", description="auto, tpe, random, grid, nsga2 or gp.")
    seed: int | None = Field(None, description="Seed of the sampler.")
    objective: str = Field("time", description="time, memory, or time,memory.")
    memory_budget: str | None = Field(None, description="Peak memory a configuration may use.")
    timeout_per_trial: float = Field(300.0, gt=0, description="Seconds per trial.")
    preset: str = Field("small", description="Workload size: tiny, small or large.")
    devices: int = Field(8, ge=1, description="CPU devices for sharded workloads.")
    steps: int = Field(20, ge=1, description="Timed steps per trial.")
    warmup: int = Field(2, ge=1, description="Minimum warm-up rounds after the first step.")
    max_warmup: int = Field(30, ge=1, description="Warm-up rounds at most.")
    settle_tolerance: float = Field(0.05, gt=0, lt=1, description=(
        "Warm-up ends once the last steps of every executable lie within this fraction of "
        "their median."))
    mode: str = Field("paired", description="paired (in-process vs baseline) or direct.")
    drop_unknown: bool = Field(False, description="Leave out flags this XLA does not know.")
    allow_backend_mismatch: bool = Field(False, description="Run a space meant for another "
                                         "backend.")
    prune_margin: float | None = Field(1.3, ge=1.0, description="Stop a trial once it is this "
                                       "many times slower than the best (None: never).")
    trial_memory_limit: str | None = Field(None, description="Address-space limit of a trial.")
    fit: bool = Field(True, description="Fit the space to the workload after its baseline.")
    racing: bool = Field(True, description="Measure the search's leader again.")
    heartbeat_s: int = Field(30, ge=1, description="Seconds between a worker's heartbeats.")
    launcher: str | None = Field(None, description="A cluster launcher template with {cmd}.")
    confirm: int = Field(3, ge=0, description="Configurations confirmed after the search.")
    confirm_repeats: int = Field(4, ge=1, description="Fresh processes per confirmation.")
    shrink: bool = Field(True, description="Shrink the recommendation to the flags that "
                         "matter.")
    pgle: int = Field(0, ge=0, description="Configurations measured again with a PGLE "
                      "profile.")

    @field_validator("space", "script", mode="before")
    @classmethod
    def _path_as_text(cls, value: Any) -> Any:
        """A file given as a path (`pathlib.Path`) is kept as its text."""
        return os.fspath(value) if isinstance(value, os.PathLike) else value

    @classmethod
    def of(cls, **values: Any) -> StudyOptions:
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
            raise UsageError(f"study options refused: {problems}") from None

    def recorded(self) -> dict[str, Any]:
        """The options a re-run of the study must ask for as they are (JSON-ready)."""
        return {k: v for k, v in self.model_dump(mode="json").items() if k not in NOT_RECORDED}

    def job(self) -> Job:
        """What every trial's job shares: the options named as `Job` fields."""
        return Job(**{k: getattr(self, k) for k in type(self).model_fields if k in JOB_FIELDS})


@dataclass(frozen=True)
class AfterSearch:
    """What a study does once its search is done (the recipe keeps it for workers).

    Attributes:
        confirm: re-measure the best K configurations (0: skip everything after).
        confirm_repeats: fresh processes per confirmed configuration (and per
            shrinking and PGLE measurement).
        shrink: shrink the recommendation to the flags that matter.
        pgle: measure the best K again with a PGLE profile each (0: off).
    """

    confirm: int = 3
    confirm_repeats: int = 4
    shrink: bool = True
    pgle: int = 0

    @classmethod
    def of(cls, options: StudyOptions) -> AfterSearch:
        """What `options` ask for after the search."""
        return cls(options.confirm, options.confirm_repeats, options.shrink, options.pgle)
