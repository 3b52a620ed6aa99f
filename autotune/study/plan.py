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

from autotune.protocol import Job
from autotune.records import MeasureMode, Role, TrialOutcome
from autotune.results.shrink import Step
from autotune.spaces import Space
from autotune.study.samplers import Objective, SamplerChoice, choose_sampler
from autotune.study.trials import RequestSettings, with_device_count
from autotune.workloads import WorkloadInfo

#: Seconds between looks at the database while another process measures what this one needs.
POLL_S = 1.0

#: The claim key of the baseline: the empty configuration.
BASELINE_KEY = ""

#: The claim key of fitting the space to the workload (`autotune.study.fit`).
FIT_KEY = "fit:space"


@dataclass(frozen=True)
class StudyPlan:
    """What the user asked for; validated before anything touches the database."""

    name: str
    space_name: str
    space: Space
    workload: WorkloadInfo
    preset: str = "small"
    devices: int = 8
    trials: int = 12
    sampler: str = "auto"
    seed: int | None = None
    timeout_per_trial: float = 300.0
    steps: int = 20
    warmup: int = 2
    max_warmup: int = 30
    mode: MeasureMode = MeasureMode.PAIRED
    base_env: Mapping[str, str] = field(default_factory=dict)
    command: tuple[str, ...] | None = None
    memory_limit_bytes: int | None = None
    prune_margin: float | None = 1.3
    objectives: tuple[Objective, ...] = (Objective.TIME,)
    memory_budget_bytes: int | None = None
    #: Seconds between heartbeats (Optuna's of a trial, ours of a claim every third of it);
    #: a worker silent for twice this long is dead: its trial failed and queued again.
    heartbeat_s: int = 30
    racing: bool = True
    fit: bool = True
    #: A cluster launcher template each trial runs through (`{cmd}` is the child), or None.
    launcher: str | None = None
    #: How a worker rebuilds this plan (`autotune.api.join_study`): stored by `prepare`
    #: with the study; None (a worker's own plan, or the Python API's) stores nothing.
    recipe: Mapping[str, Any] | None = field(default=None, compare=False)

    def recorded(self) -> dict[str, Any]:
        """The plan fields stored with the study, beyond its columns (JSON-ready).

        A re-run must ask for the same: the space file's and workload file's
        content (hashed), the command, steps, warm-up, sampler, prune margin
        and the time and memory limits of a trial, whether the space is
        fitted to the workload (`fit`), and the cluster launcher (`launcher`).
        `trials` and `seed` may change (running more trials continues the study).
        """
        return {
            "space_sha256": _sha256(self.space.path),
            "workload_sha256": None if self.command else _sha256(self.workload.path),
            "command": list(self.command) if self.command else None,
            "steps": self.steps, "warmup": self.warmup, "max_warmup": self.max_warmup,
            "sampler": self.sampler, "prune_margin": self.prune_margin,
            "timeout_per_trial": self.timeout_per_trial,
            "memory_limit_bytes": self.memory_limit_bytes,
            "fit": self.fit,
            "launcher": self.launcher,
        }

    def sampler_choice(self) -> SamplerChoice:
        """The sampler to run (`auto` resolved). Raises UsageError for a bad choice."""
        return choose_sampler(self.sampler, self.objectives, self.space, self.trials)

    def settings(self) -> RequestSettings:
        """What every trial request of this study shares."""
        return RequestSettings(
            workload=self.workload.path, preset=self.preset, mode=self.mode,
            base_env=with_device_count(self.base_env, self.devices),
            job=Job(steps=self.steps, warmup=self.warmup, max_warmup=self.max_warmup),
            timeout_s=self.timeout_per_trial,
            memory_limit_bytes=self.memory_limit_bytes, command=self.command,
            launcher=self.launcher)

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
    """Reported after each launched trial, for progress displays."""

    number: int
    role: Role
    outcome: TrialOutcome
    speedup: float | None
    best_speedup: float | None
    done: int
    total: int


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
    """Reported after each confirmation run."""

    trial_number: int
    outcome: TrialOutcome
    done: int
    total: int


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
