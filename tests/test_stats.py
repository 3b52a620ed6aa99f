"""Robust step statistics, paired/unpaired ratio intervals, settling, and the child's warm-up."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.rules import stats
from autotune.rules.stats import (
    STEPS_RESAMPLED_BELOW,
    RatioEstimate,
    outlier_mask,
    paired_ratio,
    spread,
    step_stats,
    unpaired_ratio,
)

ROOT = Path(__file__).resolve().parents[1]


def processes(rng, ratio, speeds, steps=20, noise=0.03):
    """Paired data: per process a common absolute speed, lognormal step noise."""
    cand = [list(rng.lognormal(np.log(ratio * s), noise, steps)) for s in speeds]
    base = [list(rng.lognormal(np.log(s), noise, steps)) for s in speeds]
    return cand, base


# --- step_stats ------------------------------------------------------------


def test_exact_median_and_quartiles_of_a_small_list():
    s = step_stats([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s.n, s.n_outliers) == (5, 0)
    assert (s.median, s.q1, s.q3, s.iqr) == (3.0, 2.0, 4.0, 2.0)
    assert s.cv == pytest.approx(statistics.stdev([1, 2, 3, 4, 5]) / 3)
    assert s.ci_low <= 3.0 <= s.ci_high and s.confidence == 0.95


def test_even_count_median_and_single_time():
    assert step_stats([4.0, 1.0, 3.0, 2.0]).median == 2.5
    one = step_stats([0.25])
    assert (one.n, one.median, one.iqr, one.cv, one.ci_low, one.ci_high) == (
        1, 0.25, 0.0, 0.0, 0.25, 0.25)


def test_no_times_gives_none_and_bad_times_raise():
    assert step_stats([]) is None
    for bad in ([1.0, 0.0], [1.0, -1.0], [1.0, float("nan")], [float("inf")]):
        with pytest.raises(ValueError, match=r"^step times must be a flat list of positive "
                                             r"finite numbers$"):
            step_stats(bad)


def test_one_slow_step_is_counted_but_does_not_move_the_median_or_interval():
    rng = np.random.default_rng(4)
    times = list(rng.lognormal(np.log(0.010), 0.02, 30))
    clean = step_stats(times)
    dirty = step_stats(times[:15] + [0.100] + times[15:])
    assert clean.n_outliers == 0
    assert outlier_mask(times[:15] + [0.100] + times[15:]) == [False] * 15 + [True] + [False] * 15
    assert (dirty.n, dirty.n_outliers) == (30, 1)
    assert dirty.median == pytest.approx(clean.median, rel=0.002)
    assert dirty.ci_high < 1.01 * clean.ci_high
    assert dirty.cv < 0.05  # the 10x step would make it about 1.6


def test_nearly_identical_steps_have_no_outliers():
    assert outlier_mask([1.0, 1.0, 1.0, 1.001, 0.9995]) == [False] * 5
    assert outlier_mask([]) == []


def test_median_interval_covers_the_true_median_about_95_percent_of_the_time():
    rng = np.random.default_rng(2024)
    true_median = 0.02  # median of a lognormal is exp(mu)
    hits = 0
    for rep in range(200):
        s = step_stats(list(rng.lognormal(np.log(true_median), 0.1, 25)), seed=rep)
        hits += s.ci_low <= true_median <= s.ci_high
    assert 0.90 <= hits / 200 <= 0.99


# --- paired_ratio ----------------------------------------------------------


def test_paired_ratio_sees_through_a_2x_difference_between_processes():
    """Two processes, one twice as slow, with unequal step counts per arm.

    Pooling mixes the processes' absolute speeds: the fast process holds most
    candidate steps and the slow one most baseline steps, so the pooled
    medians compare fast-process candidate steps with slow-process baseline
    steps. The per-process ratio cancels each process's speed.
    """
    rng = np.random.default_rng(7)
    def steps(median, n):
        return list(rng.lognormal(np.log(median), 0.03, n))

    fast_c, fast_b = steps(0.8 * 0.01, 30), steps(0.01, 10)
    slow_c, slow_b = steps(0.8 * 0.02, 10), steps(0.02, 30)
    est = paired_ratio([fast_c, slow_c], [fast_b, slow_b])
    pooled = statistics.median(fast_c + slow_c) / statistics.median(fast_b + slow_b)
    assert est.ratio == pytest.approx(0.8, rel=0.03)
    assert abs(est.ratio - 0.8) < abs(pooled - 0.8) / 5  # pooled says about 0.45
    assert est.low <= 0.8 <= est.high


def test_paired_ratio_recovers_the_ratio_across_bimodal_processes():
    rng = np.random.default_rng(11)
    cand, base = processes(rng, 0.8, [0.015, 0.016, 0.030, 0.031, 0.017, 0.029])
    est = paired_ratio(cand, base)
    assert est.ratio == pytest.approx(0.8, rel=0.02)
    assert est.low <= 0.8 <= est.high
    assert (est.n_processes, est.n_pairs) == (6, 120)


def test_a_against_a_includes_one_and_20_percent_faster_excludes_it():
    included = 0
    for data_seed in range(20):
        rng = np.random.default_rng(data_seed)
        cand, base = processes(rng, 1.0, rng.choice([0.015, 0.030], size=5))
        included += paired_ratio(cand, base).includes_one
    assert included >= 18
    rng = np.random.default_rng(99)
    faster = paired_ratio(*processes(rng, 0.8, [0.015, 0.030, 0.016, 0.029, 0.018], noise=0.05))
    assert not faster.includes_one and faster.high < 1
    assert faster.low <= 0.8 <= faster.high
    lo, hi = faster.speedup_interval
    assert lo <= faster.speedup <= hi and faster.speedup == pytest.approx(1 / faster.ratio)


def test_one_process_is_a_bootstrap_over_steps():
    rng = np.random.default_rng(5)
    est = paired_ratio(*processes(rng, 0.9, [0.01], steps=40))
    assert est.n_processes == 1 and est.low < est.ratio < est.high
    assert est.relative_halfwidth < 0.05


def test_same_seed_same_answer_other_seed_other_interval():
    rng = np.random.default_rng(1)
    cand, base = processes(rng, 0.9, [0.01, 0.02, 0.015])
    assert paired_ratio(cand, base, seed=4) == paired_ratio(cand, base, seed=4)
    assert paired_ratio(cand, base, seed=4) != paired_ratio(cand, base, seed=5)
    assert unpaired_ratio(cand, base, seed=4) == unpaired_ratio(cand, base, seed=4)
    assert step_stats(cand[0], seed=4) == step_stats(cand[0], seed=4)


def test_paired_ratio_rejects_mismatched_input():
    with pytest.raises(ValueError, match=r"^paired_ratio needs the same number \(>= 1\) of "
                                         r"candidate and baseline runs$"):
        paired_ratio([[1.0]], [[1.0], [2.0]])
    with pytest.raises(ValueError, match=r"same number \(>= 1\)"):
        paired_ratio([], [])
    with pytest.raises(ValueError, match=r"^every process needs at least one step time$"):
        paired_ratio([[]], [[1.0]])
    with pytest.raises(ValueError, match=r"^confidence must lie in \(0, 1\), got 1.0$"):
        paired_ratio([[1.0]], [[1.0]], confidence=1.0)
    with pytest.raises(ValueError, match=r"^confidence must lie in \(0, 1\), got 0.0$"):
        paired_ratio([[1.0]], [[1.0]], confidence=0.0)
    with pytest.raises(ValueError, match="^n_boot must be at least 1, got 0$"):
        paired_ratio([[1.0]], [[1.0]], n_boot=0)
    assert paired_ratio([[1.0]], [[2.0]], n_boot=1).ratio == 0.5  # one resample is enough
    with pytest.raises(ValueError, match="positive finite"):
        paired_ratio([[1.0, -1.0]], [[1.0]])


def test_unpaired_ratio_rejects_an_empty_side():
    message = "^unpaired_ratio needs at least one candidate and one baseline run$"
    with pytest.raises(ValueError, match=message):
        unpaired_ratio([[1.0]], [])
    with pytest.raises(ValueError, match=message):
        unpaired_ratio([], [[1.0]])


@pytest.mark.parametrize("ratio", [paired_ratio, unpaired_ratio])
def test_one_odd_process_does_not_move_the_figure(ratio):
    """The per-process figures are combined by their median, not their mean."""
    base = [[0.010] * 5] * 4
    cand = [[0.009] * 5] * 3 + [[0.003] * 5]  # three say 0.9, one odd process says 0.3
    assert ratio(cand, base).ratio == pytest.approx(0.9)  # the mean of logs would say 0.68
    odd_three = [[0.009] * 5, [0.009] * 5, [0.030] * 5]
    assert ratio(odd_three, base[:3]).ratio == pytest.approx(0.9)


def test_paired_ratio_is_the_median_of_per_process_ratios_of_medians():
    cand = [[0.8, 0.9, 5.0], [1.8, 1.6, 1.7]]  # medians 0.9 and 1.7
    base = [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]]  # ratios 0.9 and 0.85
    est = paired_ratio(cand, base)
    assert est.ratio == pytest.approx(math.sqrt(0.9 * 0.85))  # median of two logs: their mean
    assert (est.n_processes, est.n_pairs) == (2, 6)


def test_unpaired_ratio_is_the_ratio_of_the_medians_of_process_medians():
    cand = [[0.9, 0.9], [0.7, 0.7], [0.8, 0.8]]
    base = [[1.0], [2.0]]
    est = unpaired_ratio(cand, base)
    assert est.ratio == pytest.approx(0.8 / math.sqrt(2.0))  # base: median of logs of 1 and 2
    assert (est.n_processes, est.n_pairs) == (5, 2)


# --- unpaired_ratio --------------------------------------------------------


def test_unpaired_ratio_of_interleaved_processes():
    rng = np.random.default_rng(21)
    speeds = [0.015, 0.030, 0.016, 0.031, 0.015, 0.029, 0.017]
    cand = [list(rng.lognormal(np.log(0.7 * s), 0.03, 20)) for s in speeds]
    base = [list(rng.lognormal(np.log(s), 0.03, 20)) for s in speeds]
    est = unpaired_ratio(cand, base)
    assert est.ratio == pytest.approx(0.7, rel=0.1)
    assert est.low <= 0.7 <= est.high
    assert (est.n_processes, est.n_pairs) == (14, 7)
    # the per-process noise makes it much less certain than the paired figure
    assert est.relative_halfwidth > paired_ratio(cand, base).relative_halfwidth


def test_ratio_estimate_properties():
    e = RatioEstimate(0.8, 0.7, 0.9, 0.95, 3, 60)
    assert e.speedup == pytest.approx(1.25)
    assert e.speedup_interval == pytest.approx((1 / 0.9, 1 / 0.7))
    assert not e.includes_one
    assert e.relative_halfwidth == pytest.approx(0.125)
    assert RatioEstimate(1.0, 0.95, 1.05, 0.95, 1, 20).includes_one


# --- spread ----------------------------------------------------


def test_spread():
    assert spread([0.015, 0.030, 0.020]) == pytest.approx(2.0)
    assert spread([0.02]) == 1.0
    with pytest.raises(ValueError, match="^spread needs at least one median$"):
        spread([])


# --- properties ------------------------------------------------------------

positive = st.floats(min_value=0.0, exclude_min=True, allow_nan=False, allow_infinity=False)
runs = st.lists(st.lists(positive, min_size=1, max_size=12), min_size=1, max_size=4)


@settings(max_examples=200, deadline=None)
@given(st.lists(positive, min_size=1, max_size=30))
def test_step_stats_never_raises_and_orders_its_figures(times):
    s = step_stats(times, n_boot=50)
    assert s.n + s.n_outliers == len(times) and s.n >= (len(times) + 1) // 2
    assert s.ci_low <= s.median <= s.ci_high
    assert s.q1 <= s.median <= s.q3


@settings(max_examples=200, deadline=None)
@given(runs, runs)
def test_ratios_never_raise_and_contain_their_estimate(cand, base):
    base = (base * len(cand))[: len(cand)]
    for est in (paired_ratio(cand, base, n_boot=50), unpaired_ratio(cand, base, n_boot=50)):
        assert est.low <= est.ratio <= est.high
        lo, hi = est.speedup_interval
        assert lo <= est.speedup <= hi
        assert est.includes_one == (est.low <= 1.0 <= est.high)
        if math.isfinite(est.high) and est.ratio > 0:
            half = (est.high - est.low) / (2 * est.ratio)
            assert est.relative_halfwidth == pytest.approx(half) and half >= 0


# --- the trial child's warm-up ---------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("options", "tolerance", "rounds", "settled"), [
    # any five times are within a trillion-fold of their median, even a step of a few
    # microseconds that a busy machine preempted for a millisecond (10x was not enough
    # on CI): settled once the window is full
    ({}, 1e12, 5, True),
    (None, -1.0, 10, False),  # no times are ever within a negative tolerance: up to the cap
], ids=["paired-settles-at-the-window", "direct-runs-to-the-cap"])
def test_child_warms_up_until_settled_and_records_it(options, tolerance, rounds, settled):
    env = dict(os.environ)
    env.pop("AUTOTUNE_RESULT", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["AUTOTUNE_JOB"] = json.dumps(
        {"schema_version": 1, "steps": 5, "warmup": 2, "max_warmup": 10, "settle_window": 5,
         "settle_tolerance": tolerance, "compiler_options": options})
    done = subprocess.run(
        [sys.executable, "-m", "autotune.bench", str(ROOT / "tests/workloads/toy.py"),
         "--preset", "tiny"],
        env=env, capture_output=True, text=True, timeout=300, check=True)
    body = json.loads(done.stdout)
    assert body["status"] == "ok", body["message"]
    assert body["warmup_steps"] == rounds and body["warmup_settled"] is settled
    assert len(body["warmup_times_s"]) == rounds
    assert body["first_step_time_s"] > 0 and len(body["step_times_s"]) == 5
    if options is not None:
        assert len(body["baseline_warmup_times_s"]) == rounds
        assert len(body["baseline_step_times_s"]) == 5


# --- contracts that mutation testing found unguarded ----------------------------------------


def test_fences_are_far_out_from_the_25th_and_75th_percentiles():
    # quartiles of 1..9 plus x (numpy's linear interpolation): 3.25 and 7.75, IQR 4.5,
    # so the fences are 3.25 - 13.5 and 7.75 + 13.5 = 21.25
    assert outlier_mask([1, 2, 3, 4, 5, 6, 7, 8, 9, 21.2])[-1] is False
    assert outlier_mask([1, 2, 3, 4, 5, 6, 7, 8, 9, 21.3])[-1] is True
    assert outlier_mask([-10.2 + 12, 1, 2, 3, 4, 5, 6, 7, 8, 9])[0] is False


def test_a_narrow_spread_gets_fences_one_percent_of_the_median_wide():
    # median 1.002, IQR 0.004 < 1% of the median: the width is 3 * 0.01002 past the
    # upper quartile 1.004, so the fence is 1.03406
    steps = [1.0] * 5 + [1.004] * 4
    assert outlier_mask(steps + [1.034055])[-1] is False
    assert outlier_mask(steps + [1.034066])[-1] is True


def test_each_process_is_resampled_to_its_own_size():
    """Short processes beside long ones: the short one's median is not biased low."""
    from autotune.rules.stats import _pad, _resampled_medians

    groups = [np.array([1.0, 3.0]), np.arange(1.0, 11.0)]
    picks = np.zeros((20000, 1), dtype=np.intp)  # always the two-step process
    medians = _resampled_medians(np.random.default_rng(0), *_pad(groups), picks)
    assert set(np.unique(medians)) == {1.0, 2.0, 3.0}  # both steps are drawn, nothing else
    assert float(np.mean(medians)) == pytest.approx(2.0, abs=0.03)  # 1, 2, 3 at 1/4, 1/2, 1/4
    three = [np.array([1.0, 3.0]), np.full(5, 10.0), np.full(3, 100.0)]
    ones = np.ones((50, 2), dtype=np.intp)  # always the middle process
    assert set(np.unique(_resampled_medians(np.random.default_rng(0), *_pad(three), ones))) \
        == {10.0}


def test_a_two_step_interval_spans_both_steps():
    s = step_stats([1.0, 2.0])
    assert (s.ci_low, s.median, s.ci_high) == (1.0, 1.5, 2.0)


def test_the_interval_is_the_central_confidence_share_of_the_bootstrap():
    # 101 evenly spaced steps: the bootstrap sd of their median is about
    # 1 / (2 * density * sqrt(n)) = 101 / 20 = 5.05
    times = list(np.arange(1.0, 102.0))
    half = step_stats(times, confidence=0.5)
    wide = step_stats(times, confidence=0.95)
    assert 4.5 < half.ci_high - half.ci_low < 8.0  # about 2 * 0.674 * 5.05 = 6.8
    assert 15.0 < wide.ci_high - wide.ci_low < 21.0  # about 2 * 1.96 * 5.05 = 19.8
    assert half.confidence == 0.5 and paired_ratio([[1.0]], [[1.0]]).confidence == 0.95


def test_the_cv_is_scale_free_for_any_times_and_counts_two_steps():
    assert step_stats([1.0, 3.0]).cv == pytest.approx(statistics.stdev([1, 3]) / 2)
    assert step_stats([1e200, 3e200]).cv == pytest.approx(statistics.stdev([1, 3]) / 2)


def test_defaults_are_seed_0_and_2000_resamples():
    rng = np.random.default_rng(3)
    cand, base = processes(rng, 0.9, [0.01, 0.02, 0.015])
    assert paired_ratio(cand, base) == paired_ratio(cand, base, seed=0, n_boot=2000)
    assert unpaired_ratio(cand, base) == unpaired_ratio(cand, base, seed=0, n_boot=2000)
    # 101 distinct steps: the interval's ends fall between resampled medians, so they move
    # with the seed and the number of resamples
    many = list(np.random.default_rng(8).lognormal(0.0, 0.1, 101))
    assert step_stats(many) == step_stats(many, seed=0, n_boot=2000)
    assert step_stats(many) != step_stats(many, seed=1)


@pytest.mark.parametrize("copies", [1, 2])  # 5 processes a side, and 10 (processes only)
@pytest.mark.parametrize("varied", ["candidate", "baseline"])
def test_the_unpaired_interval_reflects_the_spread_of_either_sides_processes(varied, copies):
    spread_runs = [[m] * 5 for m in (0.8, 0.9, 1.0, 1.1, 1.2)] * copies
    steady = [[1.0] * 5] * 5 * copies
    cand, base = (spread_runs, steady) if varied == "candidate" else (steady, spread_runs)
    est = unpaired_ratio(cand, base)
    assert est.ratio == pytest.approx(1.0)
    assert est.high - est.low > 0.1  # resampled processes: medians from 0.8 to 1.2


def test_a_ratio_too_large_for_a_float_is_infinite_not_an_error():
    assert paired_ratio([[1e308]], [[0.5]]).ratio == math.inf


# --- which level the bootstrap resamples -----------------------------------


def agreeing_processes(n):
    """`n` paired processes whose medians agree exactly (ratio 0.9) while their steps
    scatter by 20%: all the noise is inside the processes."""
    steps = [0.8, 0.9, 1.0, 1.1, 1.2]
    return [[0.9 * x for x in steps]] * n, [steps] * n


def test_from_steps_resampled_below_processes_on_only_processes_are_resampled():
    n = STEPS_RESAMPLED_BELOW
    cand, base = agreeing_processes(n)
    est = paired_ratio(cand, base)
    # the processes agree: resampling them alone leaves the point; the steps' noise is
    # already in each process's median and is not counted a second time
    assert (est.low, est.high) == pytest.approx((0.9, 0.9))
    fewer = paired_ratio(*agreeing_processes(n - 1))
    assert fewer.high - fewer.low > 0.05  # below it the steps are resampled too
    direct = unpaired_ratio(cand, base)
    assert (direct.low, direct.high) == pytest.approx((0.9, 0.9))
    assert unpaired_ratio(cand, base[:n - 1]).high - direct.low > 0.05


def test_the_threshold_is_read_when_a_ratio_is_computed(monkeypatch):
    cand, base = agreeing_processes(STEPS_RESAMPLED_BELOW)
    monkeypatch.setattr(stats, "STEPS_RESAMPLED_BELOW", STEPS_RESAMPLED_BELOW + 1)
    est = paired_ratio(cand, base)
    assert est.high - est.low > 0.05


@pytest.mark.parametrize("n", [STEPS_RESAMPLED_BELOW, 16])
def test_the_ratio_interval_covers_the_true_ratio_about_95_percent_of_the_time(n):
    """Processes as the recorded tables have them: few steps, the steps' noise larger than
    the processes' (the ratio varies by 2% from process to process too). Counting the
    steps' noise twice (the hierarchical bootstrap at any count) held the true ratio on
    100% of these draws: too wide to confirm a gain that is there. A percentile interval
    of a median of few processes is a little narrow (about 93% here)."""
    rng = np.random.default_rng(31)
    hits, draws = 0, 300
    for rep in range(draws):
        cand, base = processes(rng, 0.95, list(rng.lognormal(0, 0.02, n)), steps=15,
                               noise=0.08)
        cand = [[x * e for x in c] for c, e in zip(cand, rng.lognormal(0, 0.02, n),
                                                    strict=True)]
        est = paired_ratio(cand, base, n_boot=500, seed=rep)
        hits += est.low <= 0.95 <= est.high
    assert 0.87 <= hits / draws <= 0.985
