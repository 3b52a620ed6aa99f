"""What a study is asked to do, and what its phases report back.

`StudyPlan` is the validated request (built by `autotune.api.plan_study`);
the events are what each phase tells a progress display after a run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.ground.records import MeasureMode, Role, TrialOutcome
from autotune.launch.workloads import WorkloadInfo
from autotune.results.shrink import Step
from autotune.spaces import Space
from autotune.study.options import StudyOptions
from autotune.study.samplers import Objective, SamplerChoice, choose_sampler, parse_objectives
from autotune.study.trials import RequestSettings, with_device_count

#: Seconds between looks at the database while another process measures what this one needs.
POLL_S = 1.0

#: The claim key of the baseline: the empty configuration.
BASELINE_KEY = ""

#: The claim key of fitting the space to the workload (`autotune.study.fit`).
FIT_KEY = "fit:space"
#: The claim key of giving the sampler the earlier studies' evidence (`StudyRunner.prior`).
PRIOR_KEY = "warm:prior"


@dataclass(frozen=True)
class StudyPlan:
    """A study's options (`StudyOptions`) resolved: the space loaded and checked, the
    workload found, the mode, objectives and sizes parsed; validated before anything
    touches the database (`autotune.api.plan_study`, or `StudyPlan.of` for a plan built
    in code)."""

    name: str
    space_name: str
    space: Space
    workload: WorkloadInfo
    options: StudyOptions
    mode: MeasureMode = MeasureMode.PAIRED
    objectives: tuple[Objective, ...] = (Objective.TIME,)
    base_env: Mapping[str, str] = field(default_factory=dict)
    command: tuple[str, ...] | None = None
    memory_limit_bytes: int | None = None
    memory_budget_bytes: int | None = None
    #: How a worker rebuilds this plan (`autotune.api.join_study`): stored by `prepare`
    #: with the study; None (a worker's own plan, or the Python API's) stores nothing.
    recipe: Mapping[str, Any] | None = field(default=None, compare=False)
    #: The space's flags outside the catalog that one compilation can take (the
    #: preflight probe's answer, `flags.open_flags.per_compile_open`): given per
    #: compilation in PAIRED trials; recorded, so every reader splits runs alike.
    per_compile_open: frozenset[str] = frozenset()

    @classmethod
    def of(cls, *, name: str, space: Space, workload: WorkloadInfo,
           base_env: Mapping[str, str] | None = None,
           objectives: tuple[Objective, ...] | None = None,
           memory_budget_bytes: int | None = None, **options: Any) -> StudyPlan:
        """A plan built in code (recorded tables, benchmarks, tests): `options` are
        `StudyOptions` fields; mode and objectives are parsed (or given), no probe is run."""
        if objectives is not None:
            options["objective"] = ",".join(o.value for o in objectives)
        opts = StudyOptions.of(space=space.name, name=name, benchmark=workload.name, **options)
        return cls(name, space.name, space, workload, opts, MeasureMode(opts.mode),
                   parse_objectives(opts.objective), dict(base_env or {}),
                   memory_budget_bytes=memory_budget_bytes)

    @property
    def trials(self) -> int:
        """Trials the study should hold in all (`options.trials`)."""
        return self.options.trials

    def recorded(self) -> dict[str, Any]:
        """The plan stored with the study, beyond its columns (JSON-ready).

        A re-run must ask for the same: the space file's and workload file's
        content (hashed), the command, the trial's memory limit in bytes, and
        every option `StudyOptions.recorded` names (steps, warm-up, sampler,
        prune margin, the time limit of a trial, fitting, the cluster
        launcher, ...). `trials` and `seed` may change (running more trials
        continues the study).
        """
        return {
            "space_sha256": _sha256(self.space.path),
            "workload_sha256": None if self.command else _sha256(self.workload.path),
            "command": list(self.command) if self.command else None,
            "memory_limit_bytes": self.memory_limit_bytes,
            "per_compile_open": sorted(self.per_compile_open),
            **self.options.recorded(),
        }

    def catalog(self) -> Any:
        """The flag catalog this study measures with: the packaged one, the open flags of
        `per_compile_open` given per compilation (`Catalog.per_compiling`)."""
        from autotune.flags.catalog import load_catalog

        return load_catalog().per_compiling(self.per_compile_open)

    def sampler_choice(self) -> SamplerChoice:
        """The sampler to run (`auto` resolved). Raises UsageError for a bad choice."""
        return choose_sampler(self.options.sampler, self.objectives, self.space, self.trials)

    def settings(self) -> RequestSettings:
        """What every trial request of this study shares (the job from the options)."""
        o = self.options
        return RequestSettings(
            workload=self.workload.path, preset=o.preset, mode=self.mode,
            base_env=with_device_count(self.base_env, o.devices), job=o.job(),
            timeout_s=o.timeout_per_trial, memory_limit_bytes=self.memory_limit_bytes,
            command=self.command, launcher=o.launcher)

    @property
    def paired(self) -> bool:
        """Whether trials are timed in-process against the baseline."""
        return self.mode is MeasureMode.PAIRED

    @property
    def time_only(self) -> bool:
        """Whether the study minimises step time alone (pruning and racing need it)."""
        return self.objectives == (Objective.TIME,)


@dataclass(frozen=True)
class TrialEvent:
    """Reported after each launched trial, for progress displays.

    `best_speedup` and `best_trial` are the study's answer at this point, as the
    dashboard's best-so-far chart (`results.view.best_so_far`) and `best`'s incumbent
    note give it: the incumbent's pooled speedup and first trial (`results.evidence.
    incumbent`), or 1.0 and None for XLA's defaults once the baseline ran; None and
    None before. Never one lucky process.
    """

    number: int
    role: Role
    outcome: TrialOutcome
    speedup: float | None
    best_speedup: float | None
    done: int
    total: int
    best_trial: int | None = None


@dataclass(frozen=True)
class RunSummary:
    """What `StudyRunner.run` did: trials launched, proposals answered from records, why it
    stopped before `--trials` launches (None when it did not)."""

    launched: int
    reused: int
    stopped: str | None = None


@dataclass(frozen=True)
class ShrinkEvent:
    """Reported after each run of shrinking."""

    trial_number: int
    step: Step
    outcome: TrialOutcome


@dataclass(frozen=True)
class ConfirmEvent:
    """Reported after each confirmation run. `total` is what the rounds will measure in
    all; a run of sequential confirmation, whose end no one knows beforehand, has `cap`
    (`--confirm-max`) and `processes`, the trial's re-measurements with this one, as the cap
    counts them (its confirmation and racing processes)."""

    trial_number: int
    outcome: TrialOutcome
    done: int
    total: int
    cap: int | None = None
    processes: int | None = None


@dataclass(frozen=True)
class PgleEvent:
    """Reported after each PGLE run of a study."""

    trial_number: int
    outcome: TrialOutcome
    done: int
    total: int


def _sha256(path: Path | None) -> str | None:
    """The first 16 hex digits of the file's SHA-256 (None without a file)."""
    if path is None or not Path(path).is_file():
        return None
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
