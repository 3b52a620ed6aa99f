"""When the trial child stops: warm-up that has settled, and a candidate pruned as too slow.

The child applies these rules step by step; the parent sets the prune limit
(`prune_limit`) and replays the same rule over recorded steps (`prune_point`,
in `autotune.replay` and the pruning benchmark), so one definition serves
both. Pure and standard library only, tested in-process.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence


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


def prune_verdict(cand: Sequence[float], base: Sequence[float], limit: float | None,
                  after: int) -> str | None:
    """Why the candidate stops here, or None to go on.

    With a `limit`, once at least `after` paired steps are timed, the
    candidate stops when median(cand) / median(base) exceeds the limit.
    """
    if limit is None or len(cand) < after:
        return None
    ratio = statistics.median(cand) / statistics.median(base)
    if ratio <= limit:
        return None
    return (f"stopped after {len(cand)} paired steps: {ratio:.3f}x the baseline's step time, "
            f"above the {limit:.3f} limit (clearly slower than the best so far)")


def prune_point(cand: Sequence[float], base: Sequence[float], limit: float | None,
                after: int) -> int | None:
    """The number of pairs after which the child would stop these recorded steps, or None.

    The live rule (`prune_verdict` after each pair), replayed over steps
    already recorded.
    """
    for k in range(after, len(cand) + 1):
        if prune_verdict(cand[:k], base[:k], limit, after):
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


def over_budget(footprint: int | None, budget: int | None) -> bool:
    """Whether a compiled footprint exceeds the memory budget, so the candidate is not timed.

    False without a budget, or without a figure (a backend that gives no
    memory analysis is timed, and judged on what it measured).
    """
    return budget is not None and footprint is not None and footprint > budget
