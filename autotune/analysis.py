"""Rank a study's measured configurations against its baseline.

Works on plain `RunRecord`s from the store; never touches the database itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.records import FlagValue, Role, RunRecord


@dataclass(frozen=True)
class BestRow:
    """One line of `autotune best`: a configuration and how it measured.

    `rank` is None for the baseline row (shown for reference: its speedup is
    the in-process A/A ratio, i.e. the noise floor of the measurement).
    """

    rank: int | None
    run: RunRecord
    changed: Mapping[str, FlagValue]

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
    def same_program(self) -> bool | None:
        m = self.run.outcome.measurement
        return m.same_program_as_baseline if m else None


def changed_flags(flags: Mapping[str, FlagValue], catalog: Any) -> dict[str, FlagValue]:
    """The flags of a configuration whose value differs from XLA's documented default."""
    out: dict[str, FlagValue] = {}
    for name, value in flags.items():
        try:
            default = catalog.get(name).default
        except Exception:  # a flag the catalog does not know: always worth showing
            default = None
        if default is None or value != default:
            out[name] = value
    return out


def _config_key(flags: Mapping[str, FlagValue]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in flags.items()))


def ranked(runs: list[RunRecord]) -> list[RunRecord]:
    """Successful non-baseline runs, fastest first; one (the best) per distinct configuration."""
    candidates = [r for r in runs if r.outcome.ok and r.ratio and r.role is not Role.BASELINE]
    best: dict[tuple[tuple[str, str], ...], RunRecord] = {}
    for run in sorted(candidates, key=lambda r: (r.ratio, r.id)):
        best.setdefault(_config_key(run.flags), run)
    return list(best.values())


def best_rows(runs: list[RunRecord], catalog: Any, limit: int = 10) -> list[BestRow]:
    """The baseline row (if measured) followed by the `limit` best configurations."""
    rows: list[BestRow] = []
    baseline = next((r for r in runs if r.role is Role.BASELINE and r.outcome.ok), None)
    if baseline is not None:
        rows.append(BestRow(None, baseline, {}))
    for rank, run in enumerate(ranked(runs)[:limit], start=1):
        rows.append(BestRow(rank, run, changed_flags(run.flags, catalog)))
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
