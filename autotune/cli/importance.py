"""`autotune importance STUDY`: each flag's paired contribution, then the search's variance."""

# Imports inside the commands are lazy on purpose: `autotune --help` and every command's
# start load only what that command needs (no Optuna, SQLAlchemy, numpy or jinja2).

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
    say,
)


def importance(
    study_name: Annotated[str, typer.Argument(metavar="STUDY", help="Study name.")],
    storage: StorageOpt = DEFAULT_STORAGE,
    fmt: FormatOpt = OutputFormat.TABLE,
) -> None:
    """Which flags matter: paired ablation of the recommendation, then the search's variance.

    First each flag of the recommended configuration, removed one at a time
    and timed against it in one process (the only figure that is a gain);
    then, from the search history, each flag's share of variance (PED-ANOVA),
    which is not a gain.

    A study with fewer than 2 complete search trials prints one line saying
    there is nothing to compare yet and exits 0 (nothing is wrong: the study
    is just young). A missing study raises StudyNotFoundError; a study that
    minimises memory alone, UsageError (exit 2). The time ratio is read from
    the study's objectives wherever it stands (`memory,time` puts it second).
    """
    from autotune.api.importance import importance as study_importance

    store = open_store(storage, must_exist=True)
    found = study_importance(store, study_name)
    if fmt is OutputFormat.JSON:
        print_json(found.to_json())
        return
    _print_ablation(found.ablation)
    if not found.enough:
        say(f"nothing to compare yet: study {literal(repr(study_name))} has "
            f"{found.trials} complete search trial(s) and flag importance needs at least "
            "2; run more trials (the same `autotune study` command with a larger "
            "--trials)")
        return
    _print_table(study_name, found.effects, found.noise)
    _print_notes(found.trials, found.noise)


def _print_ablation(ablation: dict[str, Any]) -> None:
    """Each flag's paired contribution, one full `name=value` a line under its verdict."""
    if ablation["trial"] is None:
        say(literal(f"paired ablation: {ablation['note']}"))
        return
    say(f"paired ablation of the recommended configuration (trial "
        f"{ablation['trial']}): each flag removed, timed against the set it was "
        "removed from, in one process (ratio: time without it / with it)")
    for flag in ablation["flags"]:
        out.print(f"  {literal(flag['flag'])}={_shown(flag['value'])}", highlight=False,
                  soft_wrap=True)
        say(f"    {_contribution(flag)}")
    if ablation["note"]:
        say(literal(ablation["note"]))


def _contribution(flag: dict[str, Any]) -> str:
    """A flag's ablation in words; 'measurable' only beside an interval that excludes 1.0."""
    verdict = "dropped" if flag["dropped"] else "kept"
    if flag["interval"] is None:
        return f"{flag['effect']} ({verdict})"
    low, high = flag["interval"]
    figure = f"×{flag['ratio']:.3f} [{low:.3f}, {high:.3f}] without it"
    if flag["measurable"]:
        return f"{figure}: measurable ({verdict})"
    return f"{figure}: no measurable effect ({verdict})"


def _print_table(study_name: str, effects: list[Any], noise: float | None) -> None:
    """The search's share of variance, one param a line (names never cut), its figures
    on the next line; ranked only where the spread is above the noise."""
    say(f"{literal(study_name)}: share of variance in the search (not a gain):")
    rank = 0
    for e in effects:
        rank += e.above_noise
        label = f"{rank}." if e.above_noise else "-"
        out.print(f"  {label} {literal(e.param)}", highlight=False, soft_wrap=True)
        share = "-" if e.importance is None else f"{e.importance:.2f}"
        say(f"     variance share {share}; {_effect_text(e)}; {e.trials} trials; "
            f"{_verdict(e, noise)}")


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
    if e.above_noise:
        return "above the noise (confounded: not a gain)"
    if noise is None:
        return "within the noise"
    return f"within the ±{noise:.1%} noise"


def _print_notes(n_trials: int, noise: float | None) -> None:
    if noise is None:
        say("noise: unknown, no run holds paired step times (baseline and candidate "
            "timed in one process): every nonzero spread is called above the noise")
    else:
        say(f"noise: ±{noise:.1%} per trial ratio, the median half-width of the 95% "
            "bootstrap interval of each run's paired ratio (candidate vs baseline steps "
            "in one process)")
    say(f"from {n_trials} complete search trials (search and recommended; failed and "
        "pruned ones left out). Spread: worst value's median time ratio over the best "
        "value's, over whatever the other flags were (confounded). Variance share: "
        "Optuna's PED-ANOVA over the params set in every trial; '-' = not evaluated "
        "(conditional param or too few trials). Neither is a gain: the paired ablation "
        "above is.")
