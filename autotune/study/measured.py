"""What a study has measured, by effective configuration, and what Optuna is told of it.

Two configurations ask XLA for the same thing when their effective flags
(`autotune.flags.compose.effective_config`: values equal to XLA's defaults
removed; inactive parameters are never in a configuration) are equal. A study
measures each such configuration once: when the sampler proposes one again,
the runner tells Optuna the recorded result instead of launching a trial.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autotune.flags.compose import config_key, effective_config
from autotune.ground.records import FlagValue, Role, RunRecord
from autotune.results.ranking import peak_memory, within_budget

#: Roles whose runs are the study's measurements of a configuration (not re-measurements).
MEASURED_ROLES = (Role.BASELINE, Role.RECOMMENDED, Role.SEARCH)
#: Roles `--trials` counts: every process of the search phase, the racing of its leaders
#: (`autotune.results.evidence`) included.
BUDGET_ROLES = (*MEASURED_ROLES, Role.RACE)


@dataclass
class MeasuredIndex:
    """Effective configuration -> the run that measured it.

    Attributes:
        catalog: the flag catalog (for XLA's defaults).
        runs: key (`config_key` of the effective flags) -> run; an OK run
            is preferred over a failed one of the same configuration.
        in_flight: keys that processes are measuring now (running claims).
    """

    catalog: Any
    runs: dict[str, RunRecord] = field(default_factory=dict)
    in_flight: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, runs: Iterable[RunRecord], catalog: Any) -> MeasuredIndex:
        """The index of a study's stored runs."""
        index = cls(catalog)
        for run in runs:
            index.add(run)
        return index

    def key(self, flags: Mapping[str, FlagValue]) -> str:
        """The lookup key of a configuration: its effective flags as text."""
        return config_key(effective_config(flags, self.catalog))

    def get(self, flags: Mapping[str, FlagValue]) -> RunRecord | None:
        """The run that measured this configuration (or one equivalent to it), if any."""
        return self.runs.get(self.key(flags))

    def add(self, run: RunRecord) -> None:
        """Index one run (runs of other roles, e.g. confirmation, are ignored)."""
        if run.role not in MEASURED_ROLES:
            return
        key = self.key(run.flags)
        held = self.runs.get(key)
        if held is None or (run.outcome.ok and not held.outcome.ok):
            self.runs[key] = run

    def baseline_ok(self) -> bool:
        """Whether the baseline has been measured successfully."""
        return any(r.role is Role.BASELINE and r.outcome.ok for r in self.runs.values())

    def known_programs(self) -> dict[str, int]:
        """Program fingerprint -> the trial that timed it.

        Only successful runs with timed steps and a ratio count: a program that
        one of them measured need not be timed again in the same environment
        (the index holds one environment's runs, see `Store.runs(env_key=...)`).
        """
        known: dict[str, int] = {}
        for run in sorted(self.runs.values(), key=lambda r: r.id):
            m = run.outcome.measurement
            if (run.outcome.ok and run.ratio and m is not None and m.timed_steps
                    and m.fingerprint and run.trial_number is not None):
                known.setdefault(m.fingerprint, run.trial_number)
        return known

    def run_of_trial(self, number: int) -> RunRecord | None:
        """The indexed run of trial `number`, if any."""
        return next((r for r in self.runs.values() if r.trial_number == number), None)

    def best_ratio(self, budget: int | None = None) -> float | None:
        """The lowest time ratio among measured non-baseline configurations within `budget`."""
        ratios = [r.ratio for r in self.runs.values()
                  if r.role is not Role.BASELINE and r.ratio and within_budget(r, budget)]
        return min(ratios) if ratios else None


def objective_values(run: RunRecord, objectives: Sequence[str]) -> list[float] | None:
    """What Optuna is told for this run: one value per objective, or None for a failure.

    `time` is the step-time ratio against the baseline; `memory` the peak
    memory in bytes. A run missing one of them (failed, pruned) gives None.
    """
    values: list[float] = []
    for objective in objectives:
        value = run.ratio if objective == "time" else peak_memory(run)
        if not run.outcome.ok or value is None:
            return None
        values.append(float(value))
    return values
