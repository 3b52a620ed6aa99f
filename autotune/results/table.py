"""The rows of a study's tables: `best` (`BestRow`, `best_rows`, `best_row_json`), `trials`
(`trial_rows`) and `studies` (`study_row`), and the counts beside them.

Works on plain `RunRecord`s; the order and the recommendation are `ranking`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.flags.compose import effective_config
from autotune.ground.records import PLAN_FINISHED, FlagValue, Role, RunRecord, StudyRecord
from autotune.results.confirmation import Confirmation
from autotune.results.evidence import ProgramEvidence
from autotune.results.ranking import (
    EnvironmentGroup,
    Order,
    environments,
    ordered,
    programs,
    recommend,
    verdict_text,
)
from autotune.rules.stopping import free_compiles


@dataclass(frozen=True)
class BestRow:
    """One line of `autotune best`: a configuration and how it measured.

    `rank` is None for the baseline row (shown for reference: its speedup is
    the in-process A/A ratio, i.e. the noise floor of the measurement).
    `recommended` marks the one row `recommend` picks (at most one).
    `environment` is the key of the environment the row was ranked in.
    """

    rank: int | None
    run: RunRecord
    changed: Mapping[str, FlagValue]
    confirmation: Confirmation | None = None
    recommended: bool = False
    program: ProgramEvidence | None = None
    environment: str | None = None

    @property
    def confirmed(self) -> bool:
        """Re-measured in the confirmation phase (or found to be the baseline's program)."""
        c = self.confirmation
        return c is not None and (c.estimate is not None or c.same_program)

    @property
    def claimed_speedup(self) -> float | None:
        """The confirmed speedup where there is one, else the search's own figure."""
        c = self.confirmation
        if c is not None and c.estimate is not None:
            return c.estimate.speedup
        return 1.0 if c is not None and c.same_program else self.run.speedup

    @property
    def speedup(self) -> float | None:
        return self.run.speedup

    @property
    def median_s(self) -> float | None:
        m = self.run.outcome.measurement
        return m.median_s if m else None

    @property
    def peak_memory_bytes(self) -> int | None:
        m = self.run.outcome.measurement
        return m.peak_memory_bytes if m else None

    @property
    def memory_source(self) -> str | None:
        """Where `peak_memory_bytes` comes from: `memory_stats` (the device allocator's
        peak, a process of its own) or `memory_analysis` (the compiled program's
        footprint); figures of different sources are not comparable."""
        m = self.run.outcome.measurement
        return m.memory_source if m else None

    @property
    def same_program(self) -> bool | None:
        m = self.run.outcome.measurement
        return m.same_program_as_baseline if m else None


def changed_flags(flags: Mapping[str, FlagValue], catalog: Any) -> dict[str, FlagValue]:
    """The flags of a configuration whose value differs from XLA's documented default."""
    return effective_config(flags, catalog)


def best_rows(runs: list[RunRecord], catalog: Any, limit: int = 10,
              memory_budget: int | None = None,
              objectives: Sequence[str] = ("time",), *, order: Order | None = None
              ) -> list[BestRow]:
    """The baseline row (if measured) followed by the `limit` best configurations.

    Configurations over `memory_budget` are not ranked (see `ranked`); the
    order follows `objectives` (see `ordered`; `order` is that, when the
    caller has it already). A study measured in several environments gets
    these rows for each environment (`environments`, the main one first),
    each ranked on its own runs against its own baseline; only the main
    environment's rows can be `recommended`.
    """
    groups = environments(runs)
    rows: list[BestRow] = []
    for i, group in enumerate(groups):
        rows += _rows(group, catalog, limit, memory_budget, objectives,
                      order if i == 0 else None, recommending=i == 0)
    return rows


def _rows(group: EnvironmentGroup, catalog: Any, limit: int, memory_budget: int | None,
          objectives: Sequence[str], order: Order | None, recommending: bool
          ) -> list[BestRow]:
    """`best_rows` of one environment."""
    runs, key = group.runs, group.key
    rows: list[BestRow] = []
    baseline = next((r for r in runs if r.role is Role.BASELINE and r.outcome.ok), None)
    if baseline is not None:
        rows.append(BestRow(None, baseline, {}, environment=key))
    if order is None:
        order = ordered(runs, objectives, memory_budget)
    chosen = recommend(runs, objectives, memory_budget, order=order).run if recommending \
        else None
    evidence = {p.first.id: p for p in programs(runs, memory_budget)}
    for rank, (run, conf) in enumerate(order[:limit], start=1):
        rows.append(BestRow(rank, run, changed_flags(run.flags, catalog), conf,
                            recommended=chosen is not None and chosen.id == run.id,
                            program=evidence.get(run.id), environment=key))
    return rows


def outcome_counts(runs: list[RunRecord]) -> dict[str, int]:
    """How many runs ended in each outcome kind."""
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.outcome.kind.value] = counts.get(run.outcome.kind.value, 0) + 1
    return counts


def measured_backend(runs: list[RunRecord]) -> str | None:
    """The backend the study's trials ran on (from their environment), if any ran."""
    return next((r.environment.backend for r in runs if r.environment is not None), None)


def trial_rows(runs: list[RunRecord]) -> list[dict[str, Any]]:
    """Every run of a study as a plain row with stable keys (`trials --format json`).

    Keys: `run`, `trial`, `role`, `outcome`, `message`, `flags` (the
    configuration's flags as a mapping), `fingerprint`, `same_program_as`,
    `timed_steps` (0 when no step was timed) and `median_step_s` (None then); the
    figures `trials` shows: `median_ci_s` ([low, high], the bootstrap interval of the
    median), `iqr_s`, `cv`, `outliers`, `compile_time_s`, `first_step_time_s`,
    `warmup_steps` and `warmup_settled` (None where not measured).
    """
    rows = []
    for run in runs:
        m = run.outcome.measurement
        rows.append({
            "run": run.id, "trial": run.trial_number, "role": run.role.value,
            "outcome": run.outcome.kind.value, "message": run.outcome.message,
            "flags": dict(run.flags),
            "fingerprint": m.fingerprint if m else None,
            "same_program_as": m.same_program_as if m else None,
            "timed_steps": m.timed_steps if m else 0,
            "median_step_s": m.median_s if m else None,
            **_step_figures(m),
        })
    return rows


def _step_figures(m: Any) -> dict[str, Any]:
    """The step-time figures of `trials` (`rules.stats.step_stats`), None where none."""
    from autotune.rules.stats import step_stats

    summary = step_stats(m.step_times_s) if m is not None and m.step_times_s else None
    return {
        "median_ci_s": [summary.ci_low, summary.ci_high] if summary else None,
        "iqr_s": summary.iqr if summary else None,
        "cv": summary.cv if summary else None,
        "outliers": summary.n_outliers if summary else None,
        "compile_time_s": m.compile_time_s if m is not None else None,
        "first_step_time_s": m.first_step_time_s if m is not None else None,
        "warmup_steps": m.warmup_steps if m is not None else None,
        "warmup_settled": m.warmup_settled if m is not None else None,
    }


def study_row(record: StudyRecord, runs: list[RunRecord], running: bool = False
              ) -> dict[str, Any]:
    """One study as a plain row with stable keys (`studies --format json`).

    Keys: `name`, `space`, `benchmark`, `preset`, `devices`, `trials` (distinct
    trial numbers measured), `counted` (the runs that count toward `--trials`:
    `counted_trials`), `target` (the trials it was asked for, None where the study
    keeps no recipe), `runs` (every run, confirmation included),
    `state` (`study_state`; `running`: a process measures it now), `priority`
    (for a standing pool of workers) and `created` (ISO 8601).
    """
    return {
        "name": record.name, "space": record.space, "benchmark": record.benchmark,
        "preset": record.preset, "devices": record.devices,
        "trials": len({r.trial_number for r in runs if r.trial_number is not None}),
        "counted": counted_trials(runs, target_trials(record)), "target": target_trials(record),
        "runs": len(runs),
        "state": study_state(record, runs, running), "priority": priority(record),
        "created": record.created_at.isoformat(),
    }


#: Roles whose trials count toward a study's `--trials` (racing counts each process).
_BUDGET_TRIALS = frozenset({Role.BASELINE, Role.RECOMMENDED, Role.SEARCH})


def _options(record: StudyRecord) -> dict[str, Any]:
    recipe = (record.plan or {}).get("recipe") or {}
    return dict(recipe.get("options") or {})


def target_trials(record: StudyRecord) -> int | None:
    """The trials the study was last asked for (its recipe's), None without a recipe."""
    trials = _options(record).get("trials")
    return trials if isinstance(trials, int) else None


def priority(record: StudyRecord) -> int:
    """The study's priority for a standing pool of workers (its recipe's; 0 without)."""
    value = _options(record).get("priority")
    return value if isinstance(value, int) else 0


def study_state(record: StudyRecord, runs: list[RunRecord], running: bool) -> str:
    """Where a study stands, one of `STUDY_STATES`:

    - `queued`: nothing measured yet (submitted with `--submit`, or stopped before
      its baseline), no process on it;
    - `failed`: its baseline failed every time it ran, and no process is on it;
    - `done`: the phases after the search ended for as many trials as it was asked
      for (`Store.mark_finished`);
    - `confirming`: the search holds every trial it was asked for, the phases after
      it have not ended;
    - `searching`: otherwise.
    """
    if not runs and not running:
        return "queued"
    baseline = [r for r in runs if r.role is Role.BASELINE]
    if baseline and not any(r.outcome.ok for r in baseline) and not running:
        return "failed"
    target = target_trials(record)
    finished = ((record.plan or {}).get(PLAN_FINISHED) or {}).get("trials")
    if isinstance(finished, int) and (target is None or finished >= target):
        return "done"
    searched = counted_trials(runs, target)
    return "confirming" if target is not None and searched >= target else "searching"


def counted_trials(runs: list[RunRecord], target: int | None = None) -> int:
    """The study's measurements that count toward `--trials` (`target`): its baseline,
    recommended and search trials (one each, however often a failed one was retried) and
    every racing process, less the compile-only ones that budget does not count
    (`rules.stopping.free_compiles`)."""
    trials = {r.trial_number for r in runs if r.role in _BUDGET_TRIALS}
    compiled = sum(r.role in _BUDGET_TRIALS and compile_only(r) for r in runs)
    return len(trials) + sum(r.role is Role.RACE for r in runs) - min(
        compiled, free_compiles(target or 0))


def compile_only(run: RunRecord) -> bool:
    """An OK run that timed nothing: its program was timed already (`Store._counted`)."""
    m = run.outcome.measurement
    return run.outcome.ok and (m is None or not m.step_times_s)


def best_row_json(row: BestRow) -> dict[str, Any]:
    """One row of `best` with stable keys (`best --format json`).

    Keys: `rank` (None for the baseline), `trial`, `flags_changed`,
    `median_step_s`, `search_speedup` (the search's own figure),
    `confirmed_speedup` and `confirmed_interval` (None when not re-measured),
    `verdict` (`faster`, `slower`, `no measurable gain`, `failed`, `less than 2.0%
    faster` for a gain below `confirmation.MIN_GAIN`, `estimated less than 3.0% faster`
    for an estimate short of `confirmation.POINT_GAIN`, or None when not confirmed),
    `confirmation_text` (the confirmation in words with its figure, as `best`'s table
    shows it: `ranking.verdict_text`), `recommended` (the one configuration autotune
    recommends over XLA's defaults),
    `peak_memory_bytes` with its `memory_source` (`memory_stats` or
    `memory_analysis`: not comparable with each other) and `same_program` (as
    the baseline's);
    the row's program (`results.evidence`): `observations` (processes that timed
    it), `pooled_speedup` (all of them pooled) with `pooled_interval` (the
    bootstrap over them; None below two PAIRED processes) and `program_trials`
    (the trials whose configurations compiled to it); `environment` (the key of
    the environment the row was ranked in: a study measured in several has rows
    for each, `best_rows`; None for runs stored before environments had keys).
    """
    c = row.confirmation
    estimate = c.estimate if c is not None else None
    return {
        "rank": row.rank, "trial": row.run.trial_number, "flags_changed": dict(row.changed),
        "median_step_s": row.median_s, "search_speedup": row.speedup,
        "confirmed_speedup": estimate.speedup if estimate else (1.0 if row.confirmed else None),
        "confirmed_interval": list(estimate.speedup_interval) if estimate else None,
        "verdict": c.verdict() if c is not None else None,
        "confirmation_text": verdict_text(c),
        "recommended": row.recommended,
        "peak_memory_bytes": row.peak_memory_bytes, "memory_source": row.memory_source,
        "same_program": row.same_program,
        "observations": row.program.n if row.program else None,
        "pooled_speedup": 1 / row.program.ratio if row.program else None,
        "pooled_interval": _pooled_interval(row.program),
        "program_trials": row.program.trials if row.program else None,
        "environment": row.environment,
    }


def _pooled_interval(program: ProgramEvidence | None) -> list[float] | None:
    """The speedup interval over every process of the program, None below two."""
    estimate = program.estimate() if program is not None and program.n > 1 else None
    return list(estimate.speedup_interval) if estimate is not None else None
