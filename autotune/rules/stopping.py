"""When the trial child stops: warm-up that has settled, and a candidate pruned as too slow.

The budget's rule (`free_compiles`) is here too: what `--trials` counts.
The child applies these rules step by step; the parent sets the prune limit
(`prune_limit`) and the other trials' median curve (`median_curve`), and
replays the same rules over recorded steps (`prune_point`, in
`autotune.launch.replay` and the pruning benchmark), so one definition serves both.
Pure and standard library only, tested in-process.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence

#: Trials that must have reached k pairs before the median curve limits a trial at k
#: (like the `n_startup_trials` of Optuna's MedianPruner, counted per pair).
CURVE_MIN_TRIALS = 5
#: Compile-only runs `--trials` does not count, as a multiple of `--trials`: a search
#: trial whose configuration compiled to a program this host timed already is answered
#: from that timing and costs one compile, so the first `FREE_COMPILES * trials` of them
#: are free and the budget buys timed processes (`Store.claim`). A rule of `auto`, chosen
#: leave-one-workload-out (`benchmarks/scripts/leave_one_out.py`; the README's Search
#: section). Read when used.
FREE_COMPILES = 0.0


def free_compiles(trials: int) -> int:
    """How many compile-only runs a budget of `trials` does not count (`FREE_COMPILES`)."""
    return int(FREE_COMPILES * trials)


def settled(times: Sequence[float], window: int = 5, tolerance: float = 0.05) -> bool:
    """The last `window` times lie within `tolerance` of their median.

    That is max/median - 1 <= tolerance and 1 - min/median <= tolerance.
    False when fewer than `window` times are given. Raises ValueError for
    window < 1.
    """
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    last = sorted(list(times)[-window:])
    if len(last) < window:
        return False
    med = statistics.median(last)
    return med > 0 and last[-1] / med - 1 <= tolerance and 1 - last[0] / med <= tolerance


def warm_up(steps: Sequence[Callable[[], float]], *, minimum: int, cap: int, window: int,
            tolerance: float) -> tuple[list[list[float]], bool]:
    """Warm-up rounds until every executable has settled.

    Each round calls every function of `steps` once (one timed step of one
    executable, returning seconds), in A B order on even rounds and B A on odd
    ones. Warming stops after `cap` rounds, or earlier once at least `minimum`
    rounds ran and every executable's times are `settled(window, tolerance)`.
    A `cap` below `minimum` is raised to it; a `window` below 1 counts as 1.

    Returns:
        Each executable's warm-up times, and whether all had settled.
    """
    times: list[list[float]] = [[] for _ in steps]
    window, cap = max(window, 1), max(minimum, cap)
    while True:
        done = all(settled(t, window, tolerance) for t in times)
        rounds = len(times[0])
        if rounds >= cap or (done and rounds >= minimum):
            return times, done
        order = range(len(steps)) if rounds % 2 == 0 else reversed(range(len(steps)))
        for k in order:
            times[k].append(steps[k]())


def running_ratios(cand: Sequence[float], base: Sequence[float]) -> list[float]:
    """The running ratio after each pair: item k-1 is median(cand[:k]) / median(base[:k]).

    As many items as there are pairs (the shorter of the two lists).
    """
    return [statistics.median(cand[:k]) / statistics.median(base[:k])
            for k in range(1, min(len(cand), len(base)) + 1)]


def median_curve(trials: Iterable[tuple[Sequence[float], Sequence[float]]],
                 min_trials: int = CURVE_MIN_TRIALS) -> list[float | None]:
    """The other trials' median running ratio per number of pairs.

    `trials` are (candidate steps, baseline steps) of recorded PAIRED trials,
    a pruned trial's steps up to where it stopped. Item k-1 of the curve is
    the median, over the trials with at least k pairs, of their running
    ratio after k pairs (`running_ratios`), or None where fewer than
    `min_trials` trials reached k pairs. The curve is as long as the longest
    trial (empty without trials).
    """
    return curve_of_ratios([running_ratios(cand, base) for cand, base in trials], min_trials)


def curve_of_ratios(ratios: Iterable[Sequence[float]],
                    min_trials: int = CURVE_MIN_TRIALS) -> list[float | None]:
    """`median_curve` from each trial's `running_ratios`, already computed."""
    at: list[list[float]] = []
    for trial in ratios:
        for k, ratio in enumerate(trial):
            if k == len(at):
                at.append([])
            at[k].append(ratio)
    return [statistics.median(r) if len(r) >= min_trials else None for r in at]


def curve_at(curve: Sequence[float | None] | None, pairs: int) -> float | None:
    """The curve's median after `pairs` pairs (item pairs-1); None beyond its end or without one."""
    if curve is None or not 1 <= pairs <= len(curve):
        return None
    return curve[pairs - 1]


def prune_verdict(cand: Sequence[float], base: Sequence[float], limit: float | None,
                  after: int, curve: Sequence[float | None] | None = None) -> str | None:
    """Why the candidate stops here, or None to go on.

    Once at least `after` paired steps are timed, after k = len(cand) pairs:

    - the median rule, where the curve has a value at k (`curve_at(curve, k)`,
      see `median_curve`; five or more other trials reached k pairs): stop
      when the candidate's lowest running ratio so far exceeds it
      (`curve_verdict`);
    - else the margin rule: stop when r = median(cand) / median(base)
      exceeds `limit` (None: no limit).

    The margin is the fallback while too few trials make a curve: on the
    recorded tables the median rule alone prunes fewer good configurations
    than the margin for about the same saving, and either rule together
    prunes more than each (README, `benchmarks/scripts/pruning_check.py`).
    The message names the rule: the limit, or the other trials' median.
    """
    if len(cand) < after:
        return None
    if curve_at(curve, len(cand)) is not None:
        return curve_verdict(cand, base, curve, after)
    if limit is not None and (ratio := statistics.median(cand) / statistics.median(base)) > limit:
        return (f"stopped after {len(cand)} paired steps: {ratio:.3f}x the baseline's step time, "
                f"above the {limit:.3f} limit (clearly slower than the best so far)")
    return None


def curve_verdict(cand: Sequence[float], base: Sequence[float],
                  curve: Sequence[float | None] | None, after: int) -> str | None:
    """The median rule alone: why the candidate stops here, or None to go on.

    Once at least `after` pairs are timed, the candidate stops when its
    lowest running ratio so far (median(cand[:j]) / median(base[:j]) for j up
    to k = len(cand); Optuna's MedianPruner takes a trial's best intermediate
    value the same way) exceeds `curve_at(curve, k)`. The lowest, not the
    latest: a good candidate that one slow step pushes above the median is
    not lost (on the recorded tables this halves the good configurations
    pruned; README, pruning_check.py).
    """
    median = curve_at(curve, len(cand))
    if len(cand) < after or median is None:
        return None
    ratio = min(statistics.median(cand[:j]) / statistics.median(base[:j])
                for j in range(1, len(cand) + 1))
    if ratio <= median:
        return None
    return (f"stopped after {len(cand)} paired steps: {ratio:.3f}x the baseline's step time, "
            f"above {median:.3f}, the other trials' median after {len(cand)} steps")


def prune_point(cand: Sequence[float], base: Sequence[float], limit: float | None,
                after: int, curve: Sequence[float | None] | None = None) -> int | None:
    """The number of pairs after which the child would stop these recorded steps, or None.

    The live rule (`prune_verdict` after each pair, the margin `limit` and
    the median `curve` together), replayed over steps already recorded.
    """
    for k in range(after, len(cand) + 1):
        if prune_verdict(cand[:k], base[:k], limit, after, curve):
            return k
    return None


def prune_limit(margin: float | None, best_ratio: float | None, *, paired: bool,
                time_only: bool) -> float | None:
    """The ratio above which a search trial is stopped: `margin` times the best so far.

    None (never prune) without a margin or a best ratio yet, outside PAIRED
    mode (the child compares against its own baseline) and when memory is an
    objective too (a slow configuration may still be worth its memory).
    """
    if margin is None or best_ratio is None or not paired or not time_only:
        return None
    return margin * best_ratio


def prune_curve(margin: float | None, ratios: Iterable[Sequence[float]],
                *, paired: bool, time_only: bool) -> list[float | None] | None:
    """The median curve a search trial carries (`curve_of_ratios` of the other trials'
    `running_ratios`, which the caller may keep per trial: a stored trial's never change).

    None (no median rule) under the same conditions as `prune_limit`: without
    a margin (pruning is off), outside PAIRED mode and when memory is an
    objective too; and None while the curve sets no limit at any number of
    pairs (fewer than `CURVE_MIN_TRIALS` trials).
    """
    if margin is None or not paired or not time_only:
        return None
    curve = curve_of_ratios(ratios)
    return curve if any(c is not None for c in curve) else None


def over_budget(footprint: int | None, budget: int | None) -> bool:
    """Whether a compiled footprint exceeds the memory budget, so the candidate is not timed.

    False without a budget, or without a figure (a backend that gives no
    memory analysis is timed, and judged on what it measured).
    """
    return budget is not None and footprint is not None and footprint > budget
