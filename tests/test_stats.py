"""Robust step statistics, paired/unpaired ratio intervals, settling, and the child's warm-up."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.stats import (
    RatioEstimate,
    outlier_mask,
    paired_ratio,
    settled,
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
        with pytest.raises(ValueError):
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
    with pytest.raises(ValueError):
        paired_ratio([[1.0]], [[1.0], [2.0]])
    with pytest.raises(ValueError):
        paired_ratio([], [])
    with pytest.raises(ValueError):
        paired_ratio([[]], [[1.0]])
    with pytest.raises(ValueError):
        paired_ratio([[1.0]], [[1.0]], confidence=1.0)


def test_bootstrap_of_10_processes_by_20_steps_is_fast():
    rng = np.random.default_rng(0)
    cand, base = processes(rng, 0.9, rng.uniform(0.01, 0.02, 10))
    paired_ratio(cand, base)  # warm numpy up
    best = math.inf
    for _ in range(3):  # the best of three, so a busy machine does not fail it
        start = time.perf_counter()
        paired_ratio(cand, base, n_boot=2000)
        best = min(best, time.perf_counter() - start)
    assert best < 0.1


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
    with pytest.raises(ValueError):
        unpaired_ratio([], base)


def test_ratio_estimate_properties():
    e = RatioEstimate(0.8, 0.7, 0.9, 0.95, 3, 60)
    assert e.speedup == pytest.approx(1.25)
    assert e.speedup_interval == pytest.approx((1 / 0.9, 1 / 0.7))
    assert not e.includes_one
    assert e.relative_halfwidth == pytest.approx(0.125)
    assert RatioEstimate(1.0, 0.95, 1.05, 0.95, 1, 20).includes_one


# --- settled and spread ----------------------------------------------------


def test_settled():
    assert settled([0.5, 0.2, 1.0, 1.01, 0.99, 1.02, 1.0])
    assert not settled([1.0, 1.0, 1.0, 1.0, 1.2])
    assert not settled([1.0, 1.0, 1.0, 1.0, 0.9])
    assert not settled([1.0, 1.0, 1.0])  # fewer than the window
    assert settled([1.0, 1.0, 1.0], window=3)
    assert settled([1.0, 1.09, 1.0], window=3, tolerance=0.1)
    assert not settled([1.0, 1.09, 1.0], window=3, tolerance=0.05)
    assert not settled([])
    with pytest.raises(ValueError):
        settled([1.0], window=0)


def test_spread():
    assert spread([0.015, 0.030, 0.020]) == pytest.approx(2.0)
    assert spread([0.02]) == 1.0
    with pytest.raises(ValueError):
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
        _ = est.includes_one, est.relative_halfwidth


# --- the trial child's warm-up ---------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("options", [{}, None], ids=["paired", "direct"])
def test_child_warms_up_until_settled_and_records_it(options):
    env = dict(os.environ)
    env.pop("AUTOTUNE_RESULT", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["AUTOTUNE_MEASURE"] = json.dumps(
        {"steps": 5, "warmup": 2, "max_warmup": 10, "compiler_options": options})
    done = subprocess.run(
        [sys.executable, "-m", "autotune.bench", str(ROOT / "tests/workloads/toy.py"),
         "--preset", "tiny"],
        env=env, capture_output=True, text=True, timeout=300, check=True)
    body = json.loads(done.stdout)
    assert body["status"] == "ok", body["message"]
    assert 2 <= body["warmup_steps"] <= 10
    assert len(body["warmup_times_s"]) == body["warmup_steps"]
    assert isinstance(body["warmup_settled"], bool)
    assert body["warmup_settled"] or body["warmup_steps"] == 10
    assert body["first_step_time_s"] > 0 and len(body["step_times_s"]) == 5
    if options is not None:
        assert len(body["baseline_warmup_times_s"]) == body["warmup_steps"]
        assert len(body["baseline_step_times_s"]) == 5
