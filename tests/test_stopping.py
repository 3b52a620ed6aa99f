"""The child's stopping rules, in-process: warm-up settling and the prune decision."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from autotune.ground.protocol import PRUNE_AFTER
from autotune.rules.stopping import (
    CURVE_MIN_TRIALS,
    curve_at,
    curve_verdict,
    median_curve,
    prune_curve,
    prune_limit,
    prune_point,
    prune_verdict,
    running_ratios,
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


# --- the median rule: the other trials' curve ---------------------------------------------


def steady(ratio: float, pairs: int) -> tuple[list[float], list[float]]:
    """A trial whose candidate runs `ratio` times the baseline's 1.0 s at every pair."""
    return [ratio] * pairs, [1.0] * pairs


def test_the_running_ratio_after_k_pairs_is_of_the_medians_of_the_first_k():
    cand = [1.0, 1.0, 1.0, 9.0, 9.0, 9.0, 9.0]
    assert running_ratios(cand, [1.0] * 7) == [1.0, 1.0, 1.0, 1.0, 1.0, 5.0, 9.0]
    assert running_ratios([1.0, 3.0, 2.0], [1.0, 1.0, 2.0]) == [1.0, 2.0, 2.0]
    assert running_ratios([2.0, 2.0, 2.0], [1.0, 1.0]) == [2.0, 2.0]  # pairs only
    assert running_ratios([], []) == []
    assert running_ratios([2.0, 2.0, 6.0], [4.0, 4.0, 2.0]) == [0.5, 0.5, 0.5]  # a quotient


def test_the_curve_is_the_median_running_ratio_of_the_trials_that_reached_each_k():
    trials = [steady(r, 8) for r in (1.0, 2.0, 3.0, 4.0, 5.0)]
    assert CURVE_MIN_TRIALS == 5
    assert median_curve(trials) == [3.0] * 8
    trials.append(steady(10.0, 6))  # pruned after 6 pairs: counts up to 6 only
    trials.append(steady(1.0, 10))  # the only trial past 8 pairs
    assert median_curve(trials) == [3.0] * 6 + [2.5] * 2 + [None] * 2
    assert median_curve(trials, min_trials=1) == [3.0] * 6 + [2.5] * 2 + [1.0] * 2
    assert median_curve(trials[:4]) == [None] * 8  # four trials: no limit anywhere
    assert median_curve([]) == []


def test_the_curve_follows_each_trials_running_ratio_not_its_final_one():
    rising = ([1.0, 1.0, 1.0, 9.0, 9.0, 9.0, 9.0], [1.0] * 7)  # 1.0 for 5 pairs, then 5, 9
    assert median_curve([rising] * 5) == [1.0] * 5 + [5.0, 9.0]


def test_the_curve_at_k_pairs_is_its_item_k_minus_1_and_none_past_its_end():
    curve = [None, 1.5, 1.2]
    assert curve_at(curve, 2) == 1.5 and curve_at(curve, 3) == 1.2
    assert curve_at(curve, 1) is None and curve_at(curve, 4) is None
    assert curve_at(curve, 0) is None and curve_at(None, 2) is None
    assert curve_at([1.3, 1.5], 1) == 1.3  # one pair: the first item


def test_a_candidate_above_the_other_trials_median_stops_after_enough_pairs():
    cand, base = steady(1.2, 6)
    curve = [1.1] * 6
    why = curve_verdict(cand, base, curve, after=6)
    assert why == ("stopped after 6 paired steps: 1.200x the baseline's step time, above "
                   "1.100, the other trials' median after 6 steps")
    assert curve_verdict(cand[:5], base[:5], curve, after=5) is not None
    assert curve_verdict(cand[:5], base[:5], curve, after=6) is None  # too early to judge
    assert curve_verdict(cand, base, [1.2] * 6, after=6) is None  # at the median is not above
    assert curve_verdict(cand, base, [1.1] * 5 + [None], after=6) is None  # no limit at 6
    assert curve_verdict(cand, base, [1.1] * 5, after=6) is None  # the curve ends before 6
    assert curve_verdict(cand, base, None, after=6) is None


def test_the_median_rule_takes_the_lowest_running_quotient_from_the_first_pair_on():
    """The lowest running ratio counts from the first pair up to the last: a candidate
    fast at its first pair, or only by its last, goes on."""
    curve = [1.1] * 4
    base = [2.0] * 4
    assert curve_verdict([2.0, 3.0, 3.0, 3.0], base, curve, after=4) is None  # 1.0 at pair 1
    assert curve_verdict([3.0, 3.0, 3.0, 3.0], base, curve, after=4) is not None  # 1.5 each
    assert curve_verdict([3.0, 3.0, 1.0, 1.0], base, curve, after=4) is None  # 1.0 at pair 4
    why = curve_verdict([2.4, 2.4], [2.0, 2.0], [1.1, 1.1], after=2)
    assert why is not None and "1.200x the baseline's step time" in why


def test_the_curve_rules_where_it_has_a_value_else_the_margin_and_the_message_says_which():
    cand, base = steady(1.2, 6)
    by_curve = prune_verdict(cand, base, 1.3, 6, curve=[1.1] * 6)  # within the margin
    assert by_curve is not None and "the other trials' median after 6 steps" in by_curve
    assert prune_verdict(cand, base, None, 6, curve=[1.1] * 6) == by_curve
    assert prune_verdict(cand, base, 1.15, 6, curve=[1.1] * 6) == by_curve
    # where the curve has a value it alone decides: the margin does not add its losses
    assert prune_verdict(cand, base, 1.15, 6, curve=[1.3] * 6) is None
    by_margin = prune_verdict(cand, base, 1.15, 6, curve=[1.3] * 5 + [None])  # no value at 6
    assert by_margin is not None and "above the 1.150 limit" in by_margin
    assert prune_verdict(cand, base, 1.3, 6, curve=[1.3] * 6) is None  # neither
    assert prune_verdict(cand, base, 1.3, 6) is None  # no curve: the margin rule alone
    assert prune_verdict(cand[:5], base[:5], 1.0, 6, curve=[1.0] * 6) is None


def test_prune_point_replays_both_rules_pair_by_pair():
    base = [1.0] * 12
    cand = [1.0] * 6 + [1.5] * 6  # running ratio 1.0 up to 11 pairs, 1.25 at 12
    assert prune_point(cand, base, 1.3, PRUNE_AFTER) is None  # the margin alone never stops it
    # its lowest running ratio so far (1.0) stays under the curve: late slow steps do not prune
    assert prune_point(cand, base, 1.3, PRUNE_AFTER, curve=[1.2] * 12) is None
    assert prune_point([1.3] * 12, base, 1.5, PRUNE_AFTER, curve=[1.2] * 12) == PRUNE_AFTER
    assert prune_point(cand, base, 1.3, PRUNE_AFTER, curve=[1.2] * 11 + [None]) is None
    assert prune_point(cand, base, None, PRUNE_AFTER, curve=[0.9] * 12) == PRUNE_AFTER
    assert prune_point(cand, base, None, PRUNE_AFTER, curve=[None] * 8 + [0.9] * 4) == 9
    slow = [2.0] * 12
    assert prune_point(slow, base, 1.3, PRUNE_AFTER, curve=[None] * 12) == PRUNE_AFTER
    assert prune_point(slow, base, None, PRUNE_AFTER, curve=[None] * 12) is None


def test_a_search_trial_carries_a_curve_only_when_pruning_applies_and_enough_trials_ran():
    five = [running_ratios(*steady(r, 6)) for r in (1.0, 2.0, 3.0, 4.0, 5.0)]
    assert prune_curve(1.3, five, paired=True, time_only=True) == [3.0] * 6
    assert prune_curve(1.3, five[:4], paired=True, time_only=True) is None  # no limit anywhere
    assert prune_curve(1.3, [], paired=True, time_only=True) is None
    assert prune_curve(None, five, paired=True, time_only=True) is None  # --no-prune
    assert prune_curve(1.3, five, paired=False, time_only=True) is None
    assert prune_curve(1.3, five, paired=True, time_only=False) is None


def test_a_footprint_above_the_budget_is_not_timed_and_one_at_it_is():
    from autotune.rules.stopping import over_budget

    assert over_budget(101, 100) and not over_budget(100, 100) and not over_budget(99, 100)
    assert not over_budget(None, 100) and not over_budget(10**12, None)
