"""The child's stopping rules, in-process: warm-up settling and the prune decision."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from autotune.protocol import PRUNE_AFTER
from autotune.stopping import (
    prune_limit,
    prune_point,
    prune_verdict,
    settled,
    warm_up,
)

# --- settled ---------------------------------------------------------------------------------


def test_the_last_window_must_lie_within_the_tolerance_of_its_median():
    assert settled([0.5, 0.2, 1.0, 1.01, 0.99, 1.02, 1.0])  # early steps fall out of the window
    assert not settled([1.0, 1.0, 1.0, 1.0, 1.2])  # the slowest is 20% above the median
    assert not settled([1.0, 1.0, 1.0, 1.0, 0.9])  # the fastest is 10% below it
    assert settled([1.0, 1.09, 1.0], window=3, tolerance=0.1)
    assert not settled([1.0, 1.09, 1.0], window=3, tolerance=0.05)


def test_the_tolerance_bounds_are_inclusive_on_both_sides():
    assert settled([1.0, 1.0, 1.25], window=3, tolerance=0.25)  # max/median - 1 == tol
    assert not settled([1.0, 1.0, 1.26], window=3, tolerance=0.25)
    assert settled([0.75, 1.0, 1.0], window=3, tolerance=0.25)  # 1 - min/median == tol
    assert not settled([0.74, 1.0, 1.0], window=3, tolerance=0.25)


def test_the_window_is_judged_by_its_median_not_its_mean():
    # median 1.0: 1.2 is 20% above it; the mean (1.04) would call it within 16%
    assert not settled([1.0, 1.0, 1.0, 1.0, 1.2], tolerance=0.16)


def test_too_few_times_never_settle_and_window_one_settles_at_once():
    assert not settled([1.0, 1.0, 1.0, 1.0])  # one short of the default window of 5
    assert settled([1.0] * 5)
    assert not settled([])
    assert settled([3.0], window=1, tolerance=0.0)


def test_zero_times_never_settle():
    assert not settled([0.0] * 5)


def test_a_window_below_one_is_an_error_that_names_it():
    with pytest.raises(ValueError, match="^window must be at least 1, got 0$"):
        settled([1.0], window=0)


# --- warm-up ---------------------------------------------------------------------------------


def scripted(times: Sequence[float], calls: list[str], name: str) -> Callable[[], float]:
    """A step that reports the next of `times` (the last one once they run out)."""
    it = iter(times)
    last = [times[-1]]

    def step() -> float:
        calls.append(name)
        last[0] = next(it, last[0])
        return last[0]

    return step


def test_warm_up_stops_once_every_executable_has_settled():
    calls: list[str] = []
    noisy = scripted([5.0, 3.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0], calls, "a")
    times, done = warm_up([noisy], minimum=2, cap=30, window=5, tolerance=0.05)
    assert done is True
    assert times == [[5.0, 3.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0]]  # not one step more


def test_warm_up_judges_settling_by_the_tolerance_it_is_given():
    calls: list[str] = []
    within_20 = scripted([1.0, 1.2, 1.0, 1.2, 1.0, 1.2], calls, "a")
    times, done = warm_up([within_20], minimum=2, cap=30, window=5, tolerance=0.25)
    assert done is True and len(times[0]) == 5


def test_warm_up_runs_to_the_cap_when_it_never_settles():
    calls: list[str] = []
    alternating = scripted([1.0, 2.0] * 20, calls, "a")
    times, done = warm_up([alternating], minimum=2, cap=12, window=5, tolerance=0.05)
    assert done is False and len(times[0]) == 12


def test_warm_up_runs_at_least_the_minimum_even_when_settled():
    calls: list[str] = []
    times, done = warm_up([scripted([1.0], calls, "a")], minimum=7, cap=30, window=3,
                          tolerance=0.05)
    assert done is True and len(times[0]) == 7


def test_a_cap_below_the_minimum_is_raised_to_it():
    calls: list[str] = []
    times, done = warm_up([scripted([1.0, 2.0] * 10, calls, "a")], minimum=6, cap=2, window=5,
                          tolerance=0.05)
    assert len(times[0]) == 6 and done is False


def test_warm_up_waits_for_the_slowest_to_settle_and_alternates_the_order():
    calls: list[str] = []
    steady = scripted([1.0], calls, "base")
    late = scripted([4.0, 3.0, 2.0, 1.0, 1.0, 1.0], calls, "cand")
    (base, cand), done = warm_up([steady, late], minimum=1, cap=30, window=3, tolerance=0.05)
    assert done is True and len(base) == len(cand) == 6
    assert calls[:6] == ["base", "cand", "cand", "base", "base", "cand"]  # A B, B A, A B


def test_warm_up_with_no_minimum_and_a_settled_window_of_one_runs_one_round():
    calls: list[str] = []
    times, done = warm_up([scripted([2.0], calls, "a")], minimum=0, cap=30, window=0,
                          tolerance=0.0)  # window 0 counts as 1
    assert done is True and times == [[2.0]]


# --- pruning ---------------------------------------------------------------------------------


def test_a_candidate_is_pruned_only_above_the_limit_and_after_enough_pairs():
    base = [1.0] * 10
    slow = [1.5] * 10
    assert prune_verdict(slow[:5], base[:5], 1.3, after=6) is None  # too early to judge
    why = prune_verdict(slow[:6], base[:6], 1.3, after=6)
    assert why == ("stopped after 6 paired steps: 1.500x the baseline's step time, above the "
                   "1.300 limit (clearly slower than the best so far)")
    assert prune_verdict(slow, base, 1.5, after=6) is None  # at the limit is not above it
    assert prune_verdict(slow, base, None, after=6) is None  # no limit: never pruned


def test_the_prune_ratio_is_candidate_over_baseline():
    cand, base = [3.0] * 6, [2.0] * 6  # 1.5x the baseline
    assert prune_verdict(cand, base, 1.4, after=6) is not None
    assert prune_verdict(cand, base, 1.6, after=6) is None


def test_the_prune_ratio_is_of_medians_so_one_slow_step_does_not_prune():
    base = [1.0] * 7
    cand = [1.0, 1.0, 1.0, 9.0, 1.0, 1.0, 1.0]  # mean ratio 2.1, median ratio 1.0
    assert prune_verdict(cand, base, 1.3, after=6) is None


def test_prune_point_replays_the_live_rule_pair_by_pair():
    base = [1.0] * 12
    cand = [1.0] * 6 + [2.0] * 6  # the median passes 1.3 only at the twelfth pair
    assert prune_point(cand, base, 1.3, after=PRUNE_AFTER) == 12
    assert prune_verdict(cand[:11], base[:11], 1.3, PRUNE_AFTER) is None
    assert prune_point(cand, base, 2.5, after=PRUNE_AFTER) is None
    assert prune_point([2.0] * 6, [1.0] * 6, 1.3, after=6) == 6  # the first chance counts
    assert prune_point([2.0] * 5, [1.0] * 5, 1.3, after=6) is None


def test_the_limit_is_the_margin_times_the_best_in_paired_time_only_studies():
    assert prune_limit(1.3, 0.8, paired=True, time_only=True) == pytest.approx(1.04)
    assert prune_limit(None, 0.8, paired=True, time_only=True) is None
    assert prune_limit(1.3, None, paired=True, time_only=True) is None
    assert prune_limit(1.3, 0.8, paired=False, time_only=True) is None
    assert prune_limit(1.3, 0.8, paired=True, time_only=False) is None


def test_a_footprint_above_the_budget_is_not_timed_and_one_at_it_is():
    from autotune.stopping import over_budget

    assert over_budget(101, 100) and not over_budget(100, 100) and not over_budget(99, 100)
    assert not over_budget(None, 100) and not over_budget(10**12, None)
