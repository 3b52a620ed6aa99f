"""`autotune importance STUDY`: which flags mattered, and which were within the noise."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from autotune.cli._common import (
    DEFAULT_STORAGE,
    FormatOpt,
    OutputFormat,
    StorageOpt,
    literal,
    open_store,
    out,
    print_json,
)


def importance(
    study_name: Annotated[str, typer.Argument(metavar="STUDY", help="Study name.")],
    storage: StorageOpt = DEFAULT_STORAGE,
    fmt: FormatOpt = OutputFormat.TABLE,
) -> None:
    """Rank a study's flags by how much they moved the step time, against the noise.

    A study with fewer than 2 complete search trials prints one line saying
    there is nothing to compare yet and exits 0 (nothing is wrong: the study
    is just young). A missing study raises StudyNotFoundError; a study that
    minimises memory alone, UsageError (exit 2). The time ratio is read from
    the study's objectives wherever it stands (`memory,time` puts it second).
    """
    from autotune.errors import UsageError
    from autotune.results.importance import (
        compared_trials,
        flag_effects,
        importance_json,
        load_trials,
        noise_level,
    )

    store = open_store(storage, must_exist=True)
    record = store.get_study(study_name)
    if "time" not in record.objectives:
        raise UsageError(f"study {study_name!r} minimises peak memory only; importance ranks "
                         "flags by their effect on step time, which its trials do not optimise. "
                         "Use a study run with --objective time or time,memory")
    trials = compared_trials(load_trials(store.url, study_name))
    enough = len(trials) >= 2
    noise = noise_level(store.runs(study_name)) if enough else None
    effects = flag_effects(trials, noise, objective_index=record.objectives.index("time")) \
        if enough else []
    if fmt is OutputFormat.JSON:
        print_json(importance_json(study_name, len(trials), noise, effects))
        return
    if not enough:
        out.print(f"nothing to compare yet: study {literal(repr(study_name))} has {len(trials)} "
                  "complete search trial(s) and flag importance needs at least 2; run more trials "
                  "(the same `autotune study` command with a larger --trials)", highlight=False)
        return
    _print_table(study_name, effects, noise)
    _print_notes(len(trials), noise)


def _print_table(study_name: str, effects: list[Any], noise: float | None) -> None:
    from rich.table import Table

    table = Table(title=f"{literal(study_name)}: which flags mattered")
    for col in ("rank", "param", "importance", "effect on step time", "trials", "verdict"):
        table.add_column(col, overflow="fold")
    rank = 0
    for e in effects:
        if e.measurable:
            rank += 1
        table.add_row(str(rank) if e.measurable else "", literal(e.param),
                      "-" if e.importance is None else f"{e.importance:.2f}",
                      _effect_text(e), str(e.trials), _verdict(e, noise))
    out.print(table)


def _shown(value: Any) -> str:
    """A flag value as the flag strings write it (bools lower case), ready to print."""
    return literal(str(value).lower() if isinstance(value, bool) else str(value))


def _effect_text(e: Any) -> str:
    if e.values_tried < 2:
        return f"only {_shown(e.best_value)} tried"
    digits = 2 if e.effect >= 0.1 else 3
    return (f"×{1 + e.effect:.{digits}f} slower at {_shown(e.worst_value)} than at "
            f"{_shown(e.best_value)} ({e.effect:+.1%})")


def _verdict(e: Any, noise: float | None) -> str:
    if e.values_tried < 2:
        return "one value tried: nothing to compare"
    if e.measurable:
        return "measurable"
    if noise is None:
        return "no measurable effect"
    return f"no measurable effect (within the ±{noise:.1%} noise)"


def _print_notes(n_trials: int, noise: float | None) -> None:
    if noise is None:
        out.print("noise: unknown, no run holds paired step times (baseline and candidate "
                  "timed in one process): every nonzero effect is called measurable",
                  highlight=False)
    else:
        out.print(f"noise: ±{noise:.1%} per trial ratio, the median half-width of the 95% "
                  "bootstrap interval of each run's paired ratio (candidate vs baseline steps "
                  "in one process)", highlight=False)
    out.print(f"from {n_trials} complete search trials (search and recommended; failed and "
              "pruned ones left out). Effect: worst value's median time ratio over the best "
              "value's. Importance: Optuna's PED-ANOVA over the params set in every trial; "
              "'-' = not evaluated (conditional param or too few trials)", highlight=False)
