"""What a study optimises and which Optuna sampler proposes its configurations.

Objectives: `time` (step time relative to the baseline, lower is better),
`memory` (peak memory in bytes), or both (a Pareto front). Samplers come from
an explicit registry, every one seeded:

- `tpe`: multivariate, grouped TPE (one or two objectives);
- `random`: uniform over the space's parameters;
- `grid`: every configuration of the space, in a seeded shuffled order (the
  runner enqueues the points; refused for continuous or huge spaces);
- `nsga2`: NSGA-II, for two objectives only;
- `gp`: Gaussian-process Bayesian optimisation, where torch and scipy are installed;
- `auto`: `grid` when the whole space fits in the trial budget and in
  `GRID_LIMIT`, else `tpe` for one objective and `nsga2` for two.

Every decision reads the space's size as `Space.size` counts it; no grid is
built until it is known to hold at most `GRID_LIMIT` points.

Importing this module does not import optuna.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from autotune.ground.errors import UsageError

if TYPE_CHECKING:
    from autotune.spaces import Space

#: Most configurations `grid` enumerates (and `auto` picks grid for): the runner
#: builds every point, with its effective configuration, in memory.
GRID_LIMIT = 20_000
#: Trials TPE (and GP) draw at random before they model the results. The
#: baseline and the recommended configuration, enqueued first, count among
#: them. Optuna's default of 10 spends half of a 20-trial GPU budget on
#: random draws. Chosen on seeds 0-19 of the recorded norm-act table (within
#: 2% of the best in a median of 6 trials, against 11 with 8 and 16 with 10);
#: on 100 held-out seeds it needed 9 against random search's 12, a lean that a
#: rank test did not call significant (p=0.245; counted in launched trials by the
#: single-measurement rule, before evidence was pooled by program: commit 044c1b4).
TPE_STARTUP = 4
#: What `auto` runs for one objective on a space too large for `grid`: "tpe" or
#: "random". A rule of `auto`, so it is chosen leave-one-workload-out
#: (`benchmarks/scripts/leave_one_out.py`; the README's Search section).
AUTO_ONE_OBJECTIVE = "tpe"


class Objective(StrEnum):
    """A quantity a study minimises."""

    TIME = "time"
    MEMORY = "memory"


def parse_objectives(text: str) -> tuple[Objective, ...]:
    """`time`, `memory` or `time,memory` (either order) as objectives.

    Raises:
        UsageError: an unknown name, a repeated one, or none.
    """
    names = [part.strip() for part in text.split(",") if part.strip()]
    known = ", ".join(o.value for o in Objective)
    if not names:
        raise UsageError(f"--objective is empty; give {known} or time,memory")
    out: list[Objective] = []
    for name in names:
        try:
            objective = Objective(name)
        except ValueError:
            raise UsageError(f"unknown objective '{name}'. Known objectives: {known} "
                             "(or both, comma-separated: time,memory)") from None
        if objective in out:
            raise UsageError(f"objective '{name}' is given twice in '{text}'")
        out.append(objective)
    return tuple(out)


@dataclass(frozen=True)
class SamplerChoice:
    """The sampler a study runs with, and why (for `auto`)."""

    name: str
    reason: str = ""

    @property
    def is_grid(self) -> bool:
        return self.name == "grid"


def _tpe(seed: int | None, n_objectives: int) -> Any:
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True,
                                          n_startup_trials=TPE_STARTUP)


def _random(seed: int | None, n_objectives: int) -> Any:
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)


def _nsga2(seed: int | None, n_objectives: int) -> Any:
    import optuna

    return optuna.samplers.NSGAIISampler(seed=seed, population_size=10)


def _gp(seed: int | None, n_objectives: int) -> Any:
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=TPE_STARTUP)


#: name -> factory(seed, number of objectives). `grid` draws through `random`:
#: its points are enqueued by the runner, the sampler only fills anything left.
SAMPLERS: dict[str, Callable[[int | None, int], Any]] = {
    "tpe": _tpe, "random": _random, "grid": _random, "nsga2": _nsga2, "gp": _gp,
}
NAMES = (*SAMPLERS, "auto")


def choose_sampler(name: str, objectives: tuple[Objective, ...], space: Space,
                   trials: int) -> SamplerChoice:
    """Check a sampler name against the study and resolve `auto`.

    Raises:
        UsageError: unknown name; `grid` on a space too large or continuous;
            `nsga2` with one objective; `gp` without torch and scipy.
    """
    if name not in NAMES:
        raise UsageError(f"unknown sampler '{name}'. Known samplers: {', '.join(NAMES)}")
    if name == "auto":
        return _auto(objectives, space, trials)
    if name == "grid":
        _check_grid(space)
    if name == "nsga2" and len(objectives) < 2:
        raise UsageError("nsga2 searches for a Pareto front of two objectives; pass "
                         "--objective time,memory, or use --sampler tpe for one objective")
    if name == "gp" and not all(importlib.util.find_spec(m) for m in ("torch", "scipy")):
        raise UsageError("the gp sampler needs torch and scipy, which are not installed: "
                         "pip install torch scipy, or use --sampler tpe")
    return SamplerChoice(name)


def _auto(objectives: tuple[Objective, ...], space: Space, trials: int) -> SamplerChoice:
    """`grid` when the space's size (counted, never enumerated) fits both the trial
    budget and `GRID_LIMIT`; else `AUTO_ONE_OBJECTIVE` for one objective, `nsga2` for
    two."""
    size = space.size()
    if size is not None and size <= min(trials, GRID_LIMIT):
        return SamplerChoice("grid", f"the space's {size} configurations fit in {trials} trials")
    if len(objectives) > 1:
        return SamplerChoice("nsga2", "two objectives")
    return SamplerChoice(AUTO_ONE_OBJECTIVE, "one objective" + _why_not_grid(size, trials))


def _why_not_grid(size: int | None, trials: int) -> str:
    if size is None:
        return ""
    if size > GRID_LIMIT:
        return f", {size} configurations > {GRID_LIMIT} that grid enumerates"
    return f", {size} configurations > {trials} trials"


def _check_grid(space: Space) -> None:
    """Refuse a space with no grid, or one of more than `GRID_LIMIT` points (counted by
    `Space.size`, never built).

    Raises:
        UsageError: the count, the limit, and what to do instead.
    """
    size = space.size()
    if size is None:
        raise UsageError(f"space '{space.name}' has a continuous range: it has no grid. "
                         "Give the range a step, or use --sampler tpe")
    if size > GRID_LIMIT:
        raise UsageError(f"space '{space.name}' has {size} configurations, more than grid "
                         f"enumerates ({GRID_LIMIT}): use --sampler tpe, random or auto, "
                         "or shrink the space (fewer params, choices or range steps)")


def make_sampler(choice: SamplerChoice, seed: int | None, n_objectives: int) -> Any:
    """The Optuna sampler of a checked choice (see `choose_sampler`)."""
    return SAMPLERS[choice.name](seed, n_objectives)


def grid_order(space: Space, seed: int | None) -> list[dict[str, Any]]:
    """The space's grid points (Optuna params) in a seeded shuffled order.

    Raises:
        UsageError: the space has no grid or more than `GRID_LIMIT` points
            (checked before a single point is built).
    """
    import random

    _check_grid(space)
    points = space.grid()
    random.Random(seed).shuffle(points)
    return points
