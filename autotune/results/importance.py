"""Which flags mattered in a study: paired ablation first, the search's variance second.

**Contribution** (`ablation`): each flag of the recommended configuration, from
its shrinking (`results.shrink`): removed one at a time and timed against the
configuration in the same process. Only an interval that excludes 1.0 is
"measurable"; a flag whose removal left the compiled program unchanged has
"no effect on the compiled program". This is the only figure that is a gain.

**Share of variance** (`flag_effects`), two figures per param (flag or
`group:<name>` switch) from the study's complete search and recommended
trials, neither of them a gain:

- *variance share*: Optuna's `get_param_importances` (PED-ANOVA, its default
  evaluator): how much the param's value tells the best trials apart from the
  rest. Normalised to sum to 1 over the params evaluated.
- *spread*: how far the time ratio moves with the param's value: the worst
  value's median ratio over the best value's, minus 1. It is marginal, one
  param at a time over whatever the other params were in those trials, so a
  sampler that tried two flags together lends one flag the other's effect.
  A spread above the measurement noise (`noise_level`, one trial's, times
  max(1, sqrt(1/n_best + 1/n_worst))) is `above_noise`, and only then ranked.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import warnings
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.ground.records import Measurement, Role, RunRecord
from autotune.results.shrink import Shrink
from autotune.rules.stats import paired_ratio

if TYPE_CHECKING:
    from optuna.trial import FrozenTrial

#: Trial roles whose params and ratios are compared (the baseline sets no param).
COMPARED_ROLES = frozenset({Role.SEARCH.value, Role.RECOMMENDED.value})
#: Run roles that are one paired process each, whose intervals give the noise.
NOISE_ROLES = frozenset({Role.SEARCH, Role.RECOMMENDED, Role.BASELINE})
#: A numeric param with more distinct values than this is cut into this many ranges.
MAX_LEVELS = 5
#: With fewer compared trials Optuna's importance is not computed (left None).
MIN_TRIALS_FOR_IMPORTANCE = 3


@dataclass(frozen=True)
class FlagEffect:
    """What one param did to the time ratio (candidate / baseline, lower is faster).

    Attributes:
        param: the Optuna param name (a flag, or `group:<name>`).
        importance: Optuna's normalised importance; None when not evaluated
            (a conditional param, absent from some trials, or too few trials).
        effect: `worst_ratio / best_ratio - 1`, >= 0; 0.0 with one value tried.
        best_value, worst_value: the values (or "lo..hi" ranges of a numeric
            param with many values) with the lowest and highest median ratio.
        best_ratio, worst_ratio: those median ratios.
        values_tried: how many distinct values (or ranges) the trials set.
        trials: how many compared trials set the param.
        above_noise: two or more values tried and `effect` above the noise of the
            comparison (one trial's noise x max(1, sqrt(1/n_best + 1/n_worst))).
    """

    param: str
    importance: float | None
    effect: float
    best_value: Any
    best_ratio: float
    worst_value: Any
    worst_ratio: float
    values_tried: int
    trials: int
    above_noise: bool


def compared_trials(trials: Iterable[FrozenTrial]) -> list[FrozenTrial]:
    """The COMPLETE search and recommended trials with finite values, each measurement once.

    A trial that reused an earlier measurement of the same configuration (user
    attr `reused_run_id`) is dropped when a kept trial already has its params:
    counting it again would weight that configuration twice in every median.
    """
    from optuna.trial import TrialState

    done = [t for t in trials if t.state is TrialState.COMPLETE and t.values
            and t.user_attrs.get("role") in COMPARED_ROLES
            and all(math.isfinite(v) for v in t.values)]
    kept: list[FrozenTrial] = []
    seen: set[str] = set()
    for trial in sorted(done, key=lambda t: ("reused_run_id" in t.user_attrs, t.number)):
        key = repr(sorted(trial.params.items()))
        if key not in seen or "reused_run_id" not in trial.user_attrs:
            kept.append(trial)
            seen.add(key)
    return sorted(kept, key=lambda t: t.number)


def noise_level(runs: Iterable[RunRecord]) -> float | None:
    """The measurement noise of one trial's time ratio, as a share of the ratio.

    Each OK search, recommended or baseline run that holds paired step times
    (candidate and baseline timed in one process) gives the relative half-width
    of its ratio's 95% bootstrap interval, `(high - low) / 2 / ratio`; the
    figure is their median (0.01 = a trial's ratio is known to about ±1%).
    None when no run holds paired step times (e.g. a DIRECT-mode study).
    """
    widths = [w for run in runs if run.role in NOISE_ROLES and run.outcome.ok
              and run.outcome.measurement is not None
              and (w := _half_width(run.outcome.measurement)) is not None]
    return statistics.median(widths) if widths else None


def _half_width(m: Measurement) -> float | None:
    if not m.step_times_s or not m.baseline_step_times_s:
        return None
    try:
        est = paired_ratio([m.step_times_s], [m.baseline_step_times_s], n_boot=200)
    except ValueError:  # a time that is not positive and finite
        return None
    return (est.high - est.low) / 2 / est.ratio


def flag_effects(trials: Sequence[FrozenTrial], noise: float | None,
                 objective_index: int = 0) -> list[FlagEffect]:
    """The effect of every param set in the compared trials, most important first.

    Args:
        trials: Optuna trials of one study; only `compared_trials(trials)` are used.
        noise: `noise_level` of the study; None checks effects against 0 only.
        objective_index: which objective is the time ratio (0 in autotune's
            studies, single- or multi-objective).

    Returns:
        Measurable effects by importance (unevaluated last), then by effect;
        then the rest by effect. Empty when no compared trial sets a param.
    """
    kept = compared_trials(trials)
    importances = _importances(kept, objective_index)
    by_param: dict[str, list[tuple[Any, float]]] = defaultdict(list)
    for trial in kept:
        for name, value in trial.params.items():
            by_param[name].append((value, trial.values[objective_index]))
    effects = [_effect(name, pairs, importances.get(name), noise)
               for name, pairs in by_param.items()]
    return sorted(effects, key=_rank_key)


def _rank_key(e: FlagEffect) -> tuple[int, float, float, str]:
    if not e.above_noise:
        return (1, 0.0, -e.effect, e.param)
    return (0, -(e.importance if e.importance is not None else -1.0), -e.effect, e.param)


def _importances(trials: list[FrozenTrial], objective_index: int) -> dict[str, float]:
    """Optuna's importance of the params set in every trial ({} when it cannot tell)."""
    import optuna

    common = set.intersection(*(set(t.params) for t in trials)) if trials else set()
    if len(trials) < MIN_TRIALS_FOR_IMPORTANCE or not common:
        return {}
    with _quiet_optuna():
        study = optuna.create_study(directions=["minimize"] * len(trials[0].values))
        study.add_trials(trials)
        try:
            return optuna.importance.get_param_importances(
                study, params=sorted(common), target=lambda t: t.values[objective_index])
        except (ValueError, RuntimeError, ZeroDivisionError):  # too few or too alike trials
            return {}


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    """No INFO logs (in-memory study created) nor warnings (few trials) from Optuna."""
    import optuna

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        optuna.logging.set_verbosity(verbosity)


def _effect(param: str, pairs: list[tuple[Any, float]], importance: float | None,
            noise: float | None) -> FlagEffect:
    levels = _levels(pairs)
    medians = {level: statistics.median(ratios) for level, ratios in levels.items()}
    ordered = sorted(medians, key=medians.__getitem__)
    best, worst = ordered[0], ordered[-1]
    effect = medians[worst] / medians[best] - 1 if medians[best] > 0 else 0.0
    # two values with one trial each differ by up to sqrt(2) times one trial's noise; more
    # trials average it down, but never below one trial's: the other flags vary within
    # each value's trials too
    margin = (noise or 0.0) * max(1.0, math.sqrt(1 / len(levels[best]) + 1 / len(levels[worst])))
    return FlagEffect(
        param=param, importance=importance, effect=effect,
        best_value=best, best_ratio=medians[best], worst_value=worst,
        worst_ratio=medians[worst], values_tried=len(medians), trials=len(pairs),
        above_noise=len(medians) > 1 and effect > margin,
    )


def _levels(pairs: list[tuple[Any, float]]) -> dict[Any, list[float]]:
    """Ratios by value; a numeric param with many values by "lo..hi" range of values."""
    values = sorted({v for v, _ in pairs}, key=repr)
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    label = {v: v for v in values}
    if numeric and len(values) > MAX_LEVELS:
        values.sort()
        size = math.ceil(len(values) / MAX_LEVELS)
        for start in range(0, len(values), size):
            chunk = values[start:start + size]
            label.update({v: f"{chunk[0]:g}..{chunk[-1]:g}" for v in chunk})
    grouped: dict[Any, list[float]] = defaultdict(list)
    for value, ratio in pairs:
        grouped[label[value]].append(ratio)
    return grouped


def ablation_json(state: Shrink | None, reason: str) -> dict[str, Any]:
    """The paired contributions of the recommended configuration's flags (stable keys).

    `trial` is None when nothing is recommended (`note` says why); each flag has
    `effect` (see `results.shrink.Effect`), `dropped`, `ratio` and `interval`
    (time without the flag / with it; None where nothing was timed) and
    `measurable` (the interval excludes 1.0).
    """
    if state is None:
        return {"trial": None, "done": True, "note": reason, "flags": []}
    flags = []
    for r in state.removals:
        e = r.estimate
        flags.append({"flag": r.flag, "value": r.value, "effect": str(r.effect),
                      "dropped": r.dropped, "ratio": e.ratio if e else None,
                      "interval": [e.low, e.high] if e else None,
                      "measurable": e is not None and not e.includes_one})
    return {"trial": state.trial_number, "done": state.done,
            "note": state.note if state.done else "not shrunk yet: run the study again",
            "flags": flags}


def importance_json(study_name: str, trials: int, noise: float | None,
                    effects: Sequence[FlagEffect],
                    ablation: dict[str, Any] | None = None) -> dict[str, Any]:
    """`importance --format json`: the study, how many trials were compared, the noise,
    the paired `ablation` (see `ablation_json`) and one object per param of the search's
    share of variance (stable keys; `rank` is null for spreads within the noise)."""
    rank, flags = 0, []
    for e in effects:
        rank += e.above_noise
        flags.append({
            "param": e.param, "rank": rank if e.above_noise else None,
            "variance_share": e.importance, "spread": e.effect,
            "best_value": e.best_value, "best_ratio": e.best_ratio,
            "worst_value": e.worst_value, "worst_ratio": e.worst_ratio,
            "values_tried": e.values_tried, "trials": e.trials, "above_noise": e.above_noise,
        })
    return {"study": study_name, "trials": trials, "noise": noise,
            "ablation": ablation if ablation is not None else ablation_json(None, ""),
            "flags": flags}
