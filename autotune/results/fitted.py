"""What fitting the search space to the workload did, as every renderer shows it.

The study stores its fit (`autotune.spaces.fit.SpaceFit`) once; this module
reads it from the study's record and says what was dropped or clipped and
why: `fit_json` (stable keys, for `best --format json` and the dashboard) and
`change_text` (one sentence per change, for the notes under `best`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotune.ground.records import FlagValue, StudyRecord
from autotune.spaces.fit import Action, FitChange, SpaceFit


def fit_of(record: StudyRecord) -> SpaceFit | None:
    """The study's stored fit, or None: not fitted (yet), fitting off (`--no-fit`), a
    study made before fitting existed, or a fit another autotune version stored."""
    if record.space_fit is None:
        return None
    try:
        return SpaceFit.from_json(record.space_fit)
    except (ValueError, KeyError, TypeError):
        return None


def values_text(values: Sequence[FlagValue]) -> str:
    """Candidates in words: `16 MiB to 1 GiB (7 values)` for a long run of powers of two
    of at least 1 KiB (sizes), else the values joined; `nothing` for none."""
    if not values:
        return "nothing"
    sizes = all(isinstance(v, int) and not isinstance(v, bool) and v >= 1024 and not v & (v - 1)
                for v in values)
    shown = [_size(int(v)) if sizes else str(v) for v in values]
    if len(shown) > 3:
        return f"{shown[0]} to {shown[-1]} ({len(shown)} values)"
    return ", ".join(shown)


def change_text(change: FitChange) -> str:
    """One change in a sentence: `dropped FLAG: why` or `clipped FLAG to NEW (was OLD): why`."""
    if change.action is Action.CLIPPED:
        return (f"clipped {change.flag} to {values_text(change.new)} (was "
                f"{values_text(change.old)}): {change.reason}")
    return f"dropped {change.flag}: {change.reason}"


def summary_text(fit: SpaceFit) -> str:
    """The fit in one sentence: how many params it dropped and clipped, from what."""
    if fit.skipped is not None:
        return f"search space not fitted to the workload: {fit.skipped}"
    dropped = sum(c.action is Action.DROPPED for c in fit.changes)
    clipped = len(fit.changes) - dropped
    probes = f"; {fit.probes} compile-only run{'' if fit.probes == 1 else 's'}" \
        if fit.probes else ""
    if not fit.changes:
        return f"search space fitted to the baseline's program: nothing to drop or clip{probes}"
    return (f"search space fitted to the baseline's program: {dropped} param"
            f"{'' if dropped == 1 else 's'} dropped, {clipped} clipped{probes}")


def fit_json(record: StudyRecord) -> dict[str, Any] | None:
    """The study's fit with stable keys, or None when it has none (see `fit_of`).

    Keys: `summary` (one sentence), `skipped` (why nothing was fitted, or None),
    `probes` (compile-only runs), `collectives` (kind -> count, bytes,
    loop_count, loop_bytes, smallest_bytes, largest_bytes of the baseline's
    program; None when it reported none), `changes` (each with `param`,
    `flag`, `action` dropped or clipped, `reason`, `old` and `new` candidates,
    `evidence` collectives, probe or condition, `text`, the sentence, and
    `old_text` and `new_text`, the candidates in words) and
    `recommended` (flag -> its value in the recommended trial where the fit
    changed it; None: left out).
    """
    fit = fit_of(record)
    if fit is None:
        return None
    document = fit.to_json()
    return {"summary": summary_text(fit), "skipped": fit.skipped, "probes": fit.probes,
            "collectives": document["collectives"],
            "changes": [{**c.to_json(), "text": change_text(c), "old_text": values_text(c.old),
                         "new_text": values_text(c.new)} for c in fit.changes],
            "recommended": document["recommended"]}


def with_fit(rows: list[dict[str, Any]], record: StudyRecord) -> list[dict[str, Any]]:
    """The rows of `best --format json` with the key `space_fit`: the baseline's row
    (rank None, the program the space was fitted to) holds `fit_json`, the others None."""
    fitted = fit_json(record)
    return [{**row, "space_fit": fitted if row.get("rank") is None else None} for row in rows]


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"
