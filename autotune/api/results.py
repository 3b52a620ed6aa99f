"""The typed results of the Python API: `Study.best()` and `Study.recommendation()`.

Each is a frozen dataclass whose fields are the keys of the CLI's JSON (`autotune best
--format json`, the export's `recommended`/`trial`/`reason`) with `to_json()` giving that
JSON back, so a script may use attributes and a pipeline the same dicts as the CLI.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

__all__ = ["BestEntry", "RecommendationResult"]


@dataclass(frozen=True)
class BestEntry:
    """One row of `autotune best` (see `autotune.results.table.best_row_json` for each key):
    `rank` None for the baseline; figures None where not measured."""

    rank: int | None
    trial: int | None
    flags_changed: dict[str, Any]
    median_step_s: float | None
    search_speedup: float | None
    confirmed_speedup: float | None
    confirmed_interval: list[float] | None
    verdict: str | None
    confirmation_text: str
    recommended: bool
    peak_memory_bytes: int | None
    memory_source: str | None
    same_program: bool | None
    observations: int | None
    pooled_speedup: float | None
    pooled_interval: list[float] | None
    program_trials: list[int] | None
    environment: str | None
    space_fit: dict[str, Any] | None

    @classmethod
    def of(cls, row: dict[str, Any]) -> BestEntry:
        """The entry of one `best --format json` row (its keys are exactly the fields)."""
        return cls(**{f.name: row[f.name] for f in fields(cls)})

    def to_json(self) -> dict[str, Any]:
        """The row as `autotune best --format json` prints it."""
        return asdict(self)


@dataclass(frozen=True)
class RecommendationResult:
    """What autotune recommends: a configuration confirmed faster than XLA's defaults
    (`trial`), or the defaults themselves (`recommended` false, `trial` None), and why."""

    recommended: bool
    trial: int | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        """`{recommended, trial, reason}`."""
        return asdict(self)
