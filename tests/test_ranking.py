"""Verdicts and ranking, in-process, from hand-made run records.

Every figure here is stated by hand from the inputs, never recomputed with
the code under test.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autotune.flags.catalog import load_catalog
from autotune.ground.records import (
    Environment,
    Measurement,
    MeasureMode,
    OutcomeKind,
    Role,
    RunRecord,
    StudyRecord,
    TrialOutcome,
)
from autotune.results.confirmation import (
    MIN_GAIN,
    Confirmation,
    Confirmations,
    baseline_trial,
    confirm_runs,
    confirmation,
    needs_confirmation,
    worth_applying,
)
from autotune.results.ranking import (
    _tier_key,
    admit_next,
    confirmed_order,
    environments,
    find_environment,
    main_runs,
    measured_elsewhere,
    ordered,
    over_budget,
    pareto_front,
    pick_reason,
    ranked,
    recommend,
    verdict_text,
)
from autotune.results.table import (
    best_row_json,
    best_rows,
    changed_flags,
    compile_only,
    counted_trials,
    measured_backend,
    outcome_counts,
    study_row,
    trial_rows,
)
from autotune.rules.stats import RatioEstimate

MiB = 1 << 20
FAST = "xla_cpu_enable_fast_math"
LEVEL = "xla_backend_optimization_level"
WIDTH = "xla_cpu_prefer_vector_width"
WHEN = datetime(2026, 1, 1, tzinfo=UTC)


def measurement(cand: float = 1.0, base: float | None = 1.0, *, memory: int | None = None,
                same: bool = False, steps: int = 6) -> Measurement:
    """Constant step times: the candidate's `cand`, the in-process baseline's `base`."""
    paired = base is not None
    return Measurement(step_times_s=(cand,) * steps, compile_time_s=1.0,
                       mode=MeasureMode.PAIRED if paired else MeasureMode.DIRECT,
                       baseline_step_times_s=(base,) * steps if paired else (),
                       peak_memory_bytes=memory, fingerprint="base" if same else f"p{cand}",
                       baseline_fingerprint="base" if paired else None)


class Runs:
    """Builds a study's runs, numbering ids and trials in order."""

    def __init__(self) -> None:
        self.runs: list[RunRecord] = []

    def add(self, role: Role, flags: dict, ratio: float | None, *, trial: int | None = None,
            kind: OutcomeKind = OutcomeKind.OK, m: Measurement | None = None,
            environment: Environment | None = None) -> RunRecord:
        number = len(self.runs) if trial is None else trial
        if m is None and kind is OutcomeKind.OK:  # a program of its own, as in a study
            m = replace(measurement(ratio or 1.0), fingerprint=f"t{number}")
        run = RunRecord(len(self.runs) + 1, "s", number, role, flags, {},
                        TrialOutcome(kind, "", m), WHEN, environment, ratio)
        self.runs.append(run)
        return run


def estimate(ratio: float, low: float, high: float) -> RatioEstimate:
    return RatioEstimate(ratio, low, high, 0.95, 4, 80)


# --- the verdict of a confirmation ------------------------------------------------------------


@pytest.mark.parametrize(("est", "same", "verdict", "gain"), [
    (estimate(0.9, 0.85, 0.95), False, "faster", True),
    (estimate(1.1, 1.05, 1.15), False, "slower", False),
    (estimate(0.9, 0.85, 1.02), False, "no measurable gain", False),
    (estimate(0.97, 0.95, 1.0), False, "no measurable gain", False),  # 1.0 on the edge counts
    (estimate(1.03, 1.0, 1.05), False, "no measurable gain", False),
    (None, False, "failed", False),
    (None, True, "no measurable gain", False),
    (estimate(0.9, 0.85, 0.95), True, "no measurable gain", True),
])
def test_a_confirmation_is_faster_only_when_its_whole_interval_is(est, same, verdict, gain):
    c = Confirmation(1, {FAST: True}, est, runs=4, failures=0, same_program=same)
    assert c.verdict() == verdict
    assert c.measurable_gain is gain


@pytest.mark.parametrize(("runs", "failures", "verdict"), [
    (1, 0, "slower in 1 process"), (3, 0, "slower in 3 processes"),
    (5, 2, "slower in 3 processes"), (4, 0, "slower")])
def test_slower_in_fewer_than_min_processes_names_them_and_ranks_as_slower(
        runs, failures, verdict):
    """One racing process is no verdict on a configuration: "slower" alone needs
    `MIN_PROCESSES` (as "faster" does); the ranking's tier is that of the slower either
    way."""
    c = Confirmation(1, {FAST: True}, estimate(1.1, 1.05, 1.15), runs=runs, failures=failures)
    assert (c.verdict(), c.measured_slower) == (verdict, True)
    assert _tier_key(Runs().add(Role.SEARCH, {FAST: True}, 1.1), c)[0] == 3
    assert not Confirmation(1, {}, estimate(1.1, 1.05, 1.15), runs=1, failures=0,
                            same_program=True).measured_slower


@pytest.mark.parametrize(("high", "worth", "verdict"), [
    (0.9799, True, "faster"),
    (1 - MIN_GAIN, False, "less than 2.0% faster"),  # the bound itself is not below it
    (0.985, False, "less than 2.0% faster"),  # faster, but by less than is worth applying
])
def test_a_gain_is_worth_applying_only_when_its_whole_interval_is_below_1_less_min_gain(
        high, worth, verdict):
    est = estimate(0.96, 0.95, high)
    assert not est.includes_one and worth_applying(est) is worth
    c = Confirmation(1, {FAST: True}, est, runs=4, failures=0)
    assert (c.verdict(), c.worth_gain, c.recommendable) == (verdict, worth, worth)
    short = Confirmation(1, {FAST: True}, est, runs=3, failures=0)  # too few processes
    assert short.verdict() == ("faster in 3 processes, 4 needed" if worth else verdict)
    assert not short.recommendable


@pytest.mark.parametrize(("ratio", "point", "worth", "verdict"), [
    (0.9699, 0.03, True, "faster"),
    (0.97, 0.03, False, "estimated less than 3.0% faster"),  # the bound itself is not below
    (0.975, 0.03, False, "estimated less than 3.0% faster"),
    (0.975, 0.0, True, "faster"),  # without the estimate's floor: the interval alone
])
def test_a_gain_is_worth_applying_only_when_its_estimate_is_below_1_less_point_gain(
        monkeypatch, ratio, point, worth, verdict):
    from autotune.results import confirmation

    monkeypatch.setattr(confirmation, "POINT_GAIN", point)
    est = estimate(ratio, ratio - 0.01, 0.979)  # the interval below 1 - MIN_GAIN
    assert worth_applying(est) is worth
    c = Confirmation(1, {FAST: True}, est, runs=4, failures=0)
    assert (c.verdict(), c.worth_gain, c.recommendable) == (verdict, worth, worth)


def test_the_floor_in_words_names_the_estimated_gain_only_where_it_asks_more(monkeypatch):
    from autotune.results import confirmation

    assert confirmation.floor_text() == "at least 2.0% faster (3.0% by its estimate)"
    monkeypatch.setattr(confirmation, "POINT_GAIN", 0.0)
    assert confirmation.floor_text() == "at least 2.0% faster"
    monkeypatch.setattr(confirmation, "POINT_GAIN", 0.03)
    assert confirmation.floor_text() == "at least 2.0% faster (3.0% by its estimate)"
    monkeypatch.setattr(confirmation, "POINT_GAIN", 0.02)  # asks nothing the interval does not
    assert confirmation.floor_text() == "at least 2.0% faster"
    monkeypatch.setattr(confirmation, "MIN_GAIN", 0.0)
    monkeypatch.setattr(confirmation, "POINT_GAIN", 0.0)
    assert confirmation.floor_text() == "faster"


# --- confirmation from stored runs ------------------------------------------------------------


def test_a_paired_confirmation_pools_the_confirm_runs_of_its_trial_only():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(same=True))
    source = s.add(Role.SEARCH, {FAST: True}, 0.8)
    s.add(Role.SEARCH, {LEVEL: 1}, 0.95)
    for cand in (0.9, 0.9, 0.9):
        s.add(Role.CONFIRM, {FAST: True}, cand, trial=1, m=measurement(cand))
    s.add(Role.CONFIRM, {LEVEL: 1}, 0.5, trial=2, m=measurement(0.5))
    s.add(Role.CONFIRM, {FAST: True}, None, trial=1, kind=OutcomeKind.CRASHED)
    s.add(Role.CONFIRM, {FAST: True}, None, trial=1, kind=OutcomeKind.NUMERICS_MISMATCH,
          m=measurement(0.1))  # measured, but wrong: a failure, not evidence
    c = confirmation(s.runs, source)
    assert (c.trial_number, c.runs, c.failures, c.same_program) == (1, 5, 2, False)
    assert c.flags == {FAST: True}
    assert c.estimate.ratio == pytest.approx(0.9)
    assert [r.id for r in confirm_runs(s.runs, 1)] == [4, 5, 6, 8, 9]


def test_a_direct_confirmation_compares_with_the_baselines_confirm_runs():
    s = Runs()
    s.add(Role.BASELINE, {}, None, m=measurement(0.02, None))
    source = s.add(Role.SEARCH, {FAST: True}, 0.9, m=measurement(0.018, None))
    for _ in range(3):
        s.add(Role.CONFIRM, {}, None, trial=0, m=measurement(0.020, None))
        s.add(Role.CONFIRM, {FAST: True}, None, trial=1, m=measurement(0.015, None))
    for _ in range(4):  # failed baseline runs, measured all the same, are no evidence
        s.add(Role.CONFIRM, {}, None, trial=0, kind=OutcomeKind.NUMERICS_MISMATCH,
              m=measurement(0.001, None))
    c = confirmation(s.runs, source)
    assert c.estimate.ratio == pytest.approx(0.75) and c.runs == 3
    assert baseline_trial(s.runs) == 0


def test_a_direct_confirmation_without_baseline_runs_has_no_estimate():
    s = Runs()
    source = s.add(Role.SEARCH, {FAST: True}, 0.9, m=measurement(0.018, None))
    s.add(Role.CONFIRM, {FAST: True}, None, trial=0, m=measurement(0.015, None))
    c = confirmation(s.runs, source)
    assert c.estimate is None and c.verdict() == "failed"
    assert baseline_trial(s.runs) is None


def test_a_confirmation_whose_runs_all_failed_has_no_estimate():
    s = Runs()
    s.add(Role.BASELINE, {}, None, m=measurement(0.02, None))
    source = s.add(Role.SEARCH, {FAST: True}, 0.9, m=measurement(0.018, None))
    s.add(Role.CONFIRM, {}, None, trial=0, m=measurement(0.020, None))
    s.add(Role.CONFIRM, {FAST: True}, None, trial=1, kind=OutcomeKind.OOM)
    c = confirmation(s.runs, source)
    assert (c.estimate, c.runs, c.failures) == (None, 1, 1)
    assert c.verdict() == "failed"


def test_no_confirm_runs_is_no_confirmation_and_the_baselines_program_needs_none():
    s = Runs()
    source = s.add(Role.SEARCH, {FAST: True}, 0.9)
    assert confirmation(s.runs, source) is None and needs_confirmation(source)
    same = s.add(Role.SEARCH, {WIDTH: 256}, 0.95, m=measurement(0.95, same=True))
    assert not needs_confirmation(same)
    c = confirmation(s.runs, same)
    assert c.same_program and c.estimate is None
    assert (c.trial_number, c.flags, c.runs, c.failures) == (1, {WIDTH: 256}, 0, 0)
    direct_same = s.add(Role.SEARCH, {LEVEL: 2}, 0.9,
                        m=Measurement((1.0,), 1.0, fingerprint="x", baseline_fingerprint="x"))
    assert needs_confirmation(direct_same)  # only PAIRED mode compares programs in one process


# --- ranking ----------------------------------------------------------------------------------


def study_with_confirmations() -> Runs:
    """Search order: LUCKY (0.80), REAL (0.85), NOOP (0.90), SLOW (1.20); then confirmation."""
    s = Runs()
    s.add(Role.BASELINE, {}, 1.01, m=measurement(1.01, same=True))
    s.add(Role.SEARCH, {WIDTH: 128}, 0.80)  # 1: lucky
    s.add(Role.SEARCH, {FAST: True}, 0.85)  # 2: real
    s.add(Role.SEARCH, {LEVEL: 2}, 0.90)  # 3: never confirmed
    s.add(Role.SEARCH, {LEVEL: 1}, 1.20)  # 4: slow
    s.add(Role.SEARCH, {WIDTH: 128}, 0.95)  # 5: the lucky one measured again, worse
    s.add(Role.SEARCH, {"xla_cpu_use_xnnpack": False}, None, kind=OutcomeKind.PRUNED)
    s.add(Role.SEARCH, {LEVEL: 0}, None, kind=OutcomeKind.TIMEOUT)
    for _ in range(4):
        s.add(Role.CONFIRM, {WIDTH: 128}, None, trial=1, m=measurement(1.0))
        s.add(Role.CONFIRM, {FAST: True}, None, trial=2, m=measurement(0.88))
        s.add(Role.CONFIRM, {LEVEL: 1}, None, trial=4, m=measurement(0.95))
    return s


def test_ranked_orders_programs_by_every_observation_pooled():
    runs = study_with_confirmations().runs
    # 2: 0.85 then 0.88 x3 -> 0.88; 3: 0.90 once; 4: 1.20 then 0.95 x3 -> 0.95; 1: 0.80, its
    # configuration again as trial 5 (0.95), then 1.0 x3 -> 1.0. Failures are out.
    assert [r.trial_number for r in ranked(runs)] == [2, 3, 4, 1]


def test_a_run_that_compiled_to_another_trials_program_is_that_trials_row():
    s = Runs()
    s.add(Role.SEARCH, {FAST: True}, 0.8)
    s.add(Role.SEARCH, {LEVEL: 2}, 0.8, m=Measurement((), 1.0, mode=MeasureMode.PAIRED,
                                                      fingerprint="p0.8", same_program_as=0))
    s.add(Role.SEARCH, {LEVEL: 1}, 0.9, m=Measurement((), 1.0, mode=MeasureMode.PAIRED))
    assert [r.trial_number for r in ranked(s.runs)] == [0, 2]
    assert measured_elsewhere(s.runs) == 1


def test_ties_rank_by_the_earlier_run():
    s = Runs()
    s.add(Role.SEARCH, {FAST: True}, 0.9)
    s.add(Role.SEARCH, {LEVEL: 2}, 0.9)
    assert [r.id for r in ranked(s.runs)] == [1, 2]


def test_confirmed_configurations_rank_first_by_their_confirmed_ratio():
    order = confirmed_order(study_with_confirmations().runs)
    # confirmed: REAL 0.88, SLOW 0.95, LUCKY 1.0; then the unconfirmed in the search's order
    assert [run.trial_number for run, _ in order] == [2, 4, 1, 3]
    assert [c is not None for _, c in order] == [True, True, True, False]


def test_best_rows_lead_with_the_baseline_then_rank_from_one():
    rows = best_rows(study_with_confirmations().runs, load_catalog(), limit=2)
    assert [(row.rank, row.run.trial_number) for row in rows] == [(None, 0), (1, 2), (2, 4)]
    assert rows[0].changed == {} and rows[0].confirmation is None
    assert rows[1].changed == {FAST: True} and rows[1].confirmed
    assert rows[1].claimed_speedup == pytest.approx(1 / 0.88)
    assert rows[1].speedup == pytest.approx(1 / 0.85)
    assert rows[1].median_s == 0.85 and rows[1].peak_memory_bytes is None
    assert rows[1].same_program is False and rows[0].same_program is True


def test_an_unconfirmed_row_claims_the_search_figure_and_a_no_op_claims_one():
    s = Runs()
    s.add(Role.SEARCH, {FAST: True}, 0.8)
    s.add(Role.SEARCH, {WIDTH: 256}, 0.9, m=measurement(0.9, same=True))
    rows = best_rows(s.runs, load_catalog())
    assert [r.rank for r in rows] == [1, 2]  # no baseline measured: no baseline row
    # the baseline's program is known to gain nothing: it ranks above the unconfirmed
    assert rows[0].confirmed and rows[0].claimed_speedup == 1.0
    assert not rows[1].confirmed and rows[1].claimed_speedup == pytest.approx(1.25)
    assert not any(r.recommended for r in rows)


def test_a_row_without_a_measurement_has_no_figures():
    run = RunRecord(1, "s", 1, Role.SEARCH, {FAST: True}, {},
                    TrialOutcome(OutcomeKind.OK, ""), WHEN, None, 0.8)
    row = best_rows([run], load_catalog())[0]
    assert (row.median_s, row.peak_memory_bytes, row.same_program) == (None, None, None)


def test_best_rows_show_ten_configurations_unless_told_otherwise():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(same=True))
    for width in range(12):
        s.add(Role.SEARCH, {WIDTH: 2 ** width}, 0.5 + width / 100)
    rows = best_rows(s.runs, load_catalog())
    assert [r.rank for r in rows] == [None, *range(1, 11)]


def test_changed_flags_leave_out_values_equal_to_xlas_default():
    assert changed_flags({FAST: False, LEVEL: 3, WIDTH: 128}, load_catalog()) == {WIDTH: 128}


# --- the recommendation: only what confirmation proved ----------------------------------------


def confirmed(s: Runs, trial: int, flags: dict, search: float, cands: list[float],
              bases: list[float] | None = None, *, wrong: int = 0) -> None:
    """A search trial and its paired confirm runs: one run per candidate step time, each
    against an in-process baseline step time (1.0 unless `bases` says), and `wrong`
    confirm runs that broke the numerics guard."""
    s.add(Role.SEARCH, flags, search, trial=trial)
    for cand, base in zip(cands, bases or [1.0] * len(cands), strict=True):
        s.add(Role.CONFIRM, flags, None, trial=trial, m=measurement(cand, base))
    for _ in range(wrong):
        s.add(Role.CONFIRM, flags, None, trial=trial, kind=OutcomeKind.NUMERICS_MISMATCH)


def tiered_study() -> Runs:
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    s.add(Role.SEARCH, {"xla_cpu_use_xnnpack": False}, 0.70, trial=1)  # unconfirmed, best search
    confirmed(s, 2, {FAST: True}, 0.90, [0.80] * 4)  # faster: point interval 1.25
    confirmed(s, 3, {LEVEL: 2}, 0.85, [0.82, 0.95, 0.82, 0.70])  # faster, wider, worse
    confirmed(s, 4, {LEVEL: 1}, 0.75, [0.90, 1.10, 1.00, 0.98])  # no measurable gain
    confirmed(s, 5, {WIDTH: 128}, 0.80, [1.30] * 4)  # slower
    confirmed(s, 6, {WIDTH: 256}, 0.72, [0.60] * 4, wrong=1)  # broke numerics
    s.add(Role.SEARCH, {WIDTH: 512}, 0.95, trial=7, m=measurement(0.95, same=True))  # no-op
    return s


def test_confirmed_faster_ranks_first_by_the_lower_end_then_no_gain_unconfirmed_slower():
    order = confirmed_order(tiered_study().runs)
    # 2's interval is a point at 1.25; 3's is wider and its estimate worse (both rules);
    # no gain: 4 (1.0 ratio) and the no-op 7 (1.0) in search order; unconfirmed 1;
    # slower 5; the numerics failure 6 last, however fast it measured
    assert [run.trial_number for run, _ in order] == [2, 3, 4, 7, 1, 5, 6]


def test_the_recommendation_is_the_first_confirmed_faster_configuration():
    rec = recommend(tiered_study().runs)
    assert rec.recommended and rec.run is not None and rec.run.trial_number == 2
    assert rec.reason.startswith("confirmed ×1.250 [1.250, 1.250] faster than XLA's defaults")
    assert "4 fresh processes" in rec.reason and "numerics guard passed" in rec.reason


def test_a_faster_configuration_that_broke_the_numerics_guard_is_never_recommended():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(s, 1, {FAST: True}, 0.6, [0.6, 0.6, 0.6], wrong=1)
    c = confirmation(s.runs, s.runs[1])
    assert c is not None and c.measurable_gain and c.numerics_failures == 1
    assert not c.recommendable and not recommend(s.runs).recommended
    assert "broke the numerics guard" in verdict_text(c)


@pytest.mark.parametrize(("cands", "why"), [
    ([0.9, 1.1, 1.0], "no configuration was confirmed at least 2.0% faster (3.0% by its "
                      "estimate) than XLA's defaults (the best confirmed, trial 1: ×1.000"),
    ([1.2, 1.2, 1.2], "trial 1: ×0.833 [0.833, 0.833] slower"),
])
def test_without_a_confirmed_gain_the_recommendation_is_xlas_defaults(cands, why):
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(s, 1, {FAST: True}, 0.5, cands)
    rec = recommend(s.runs)
    assert not rec.recommended and rec.run is None
    assert why in rec.reason and rec.reason.endswith("keep XLA's defaults")
    assert not any(row.recommended for row in best_rows(s.runs, load_catalog()))


def test_an_unconfirmed_study_recommends_the_defaults_and_says_to_confirm():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    s.add(Role.SEARCH, {FAST: True}, 0.5, trial=1)
    rec = recommend(s.runs)
    assert rec.run is None and "no configuration was confirmed" in rec.reason
    assert "--confirm K" in rec.reason
    assert "beside XLA's defaults was measured" in recommend([s.runs[0]]).reason


def test_an_explicit_pick_says_why_it_is_not_the_recommendation():
    s = tiered_study()
    rec = recommend(s.runs)
    order = dict((run.trial_number, (run, c)) for run, c in confirmed_order(s.runs))
    assert pick_reason(*order[2], rec) == rec.reason
    assert pick_reason(*order[3], rec).endswith("but trial 2 ranks above it and is the "
                                                "recommendation")
    assert pick_reason(*order[1], rec) == ("explicit pick: not confirmed; not recommended "
                                           "over XLA's defaults")
    assert "slower" in pick_reason(*order[5], rec)


def test_the_memory_objective_recommends_only_less_memory_than_the_baseline():
    rec = recommend(memory_study().runs, objectives=("memory",))
    assert rec.run is not None and rec.run.trial_number == 2  # 80 MiB < the baseline's 100
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, memory=100 * MiB, same=True))
    s.add(Role.SEARCH, {FAST: True}, 0.8, m=measurement(0.8, memory=100 * MiB))
    assert not recommend(s.runs, objectives=("memory",)).recommended


def test_no_gain_ranks_by_its_confirmed_ratio_whatever_the_search_said():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(s, 1, {FAST: True}, 0.70, [0.95, 1.10, 1.08])  # no gain at 1.08
    s.add(Role.SEARCH, {WIDTH: 512}, 0.95, trial=2, m=measurement(0.95, same=True))  # 1.0
    confirmed(s, 3, {LEVEL: 2}, 0.90, [0.92, 1.06, 0.97])  # no gain at 0.97
    assert [run.trial_number for run, _ in confirmed_order(s.runs)] == [3, 2, 1]


def test_sequential_confirmation_takes_on_the_next_program_only_while_none_is_recommendable(
        monkeypatch):
    """`admit_next`: the first of `to_confirm`'s order that is no target and needs
    confirming, within the memory budget, up to `CONFIRM_MORE` of them, and none once a
    target is recommendable."""
    from autotune.results import ranking

    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(1.0, memory=100 * MiB, same=True))
    s.add(Role.SEARCH, {WIDTH: 512}, 0.60, trial=1, m=measurement(0.6, same=True))  # no-op
    confirmed(s, 2, {LEVEL: 2}, 0.70, [1.0] * 4)  # the target, confirmed no faster
    s.add(Role.SEARCH, {FAST: True}, 0.80, trial=3, m=measurement(0.8, memory=300 * MiB))
    s.add(Role.SEARCH, {LEVEL: 1}, 0.85, trial=4)
    runs = s.runs
    target = next(r for r in runs if r.trial_number == 2)
    assert ranking.CONFIRM_MORE == 6  # as shipped
    monkeypatch.setattr(ranking, "CONFIRM_MORE", 0)
    assert admit_next(runs, [target], 0) is None
    monkeypatch.setattr(ranking, "CONFIRM_MORE", 2)
    # 2 pooled 1.0 now ranks after 3 and 4; the no-op 1 needs no confirming
    assert admit_next(runs, [target], 0).trial_number == 3  # type: ignore[union-attr]
    assert admit_next(runs, [target], 0, 250 * MiB).trial_number == 4  # type: ignore[union-attr]
    assert admit_next(runs, [target], 1).trial_number == 3  # type: ignore[union-attr]
    assert admit_next(runs, [target], 2) is None  # as many taken on as allowed
    later = next(r for r in runs if r.trial_number == 3)
    assert admit_next(runs, [target, later], 1).trial_number == 4  # type: ignore[union-attr]
    last = next(r for r in runs if r.trial_number == 4)
    assert admit_next(runs, [target, later, last], 0) is None  # nothing left to take on
    confirmed(s, 5, {FAST: False}, 0.9, [0.9] * 4)  # confirmed worth applying
    worth = next(r for r in s.runs if r.trial_number == 5 and r.role is Role.SEARCH)
    assert admit_next(s.runs, [target, worth], 0) is None


def test_the_recommendation_respects_the_memory_budget_and_carries_its_confirmation():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(1.0, memory=100 * MiB, same=True))
    s.add(Role.SEARCH, {FAST: True}, 0.7, trial=1, m=measurement(0.7, memory=300 * MiB))
    for _ in range(4):
        s.add(Role.CONFIRM, {FAST: True}, None, trial=1, m=measurement(0.7, memory=300 * MiB))
    confirmed(s, 2, {LEVEL: 2}, 0.9, [0.9] * 4)
    s.add(Role.CONFIRM, {LEVEL: 2}, None, trial=2, kind=OutcomeKind.CRASHED)
    assert recommend(s.runs).run.trial_number == 1  # type: ignore[union-attr]
    rec = recommend(s.runs, memory_budget=250 * MiB)
    assert rec.run is not None and rec.run.trial_number == 2
    assert rec.confirmation is not None and rec.confirmation.trial_number == 2
    assert "in 4 fresh processes" in rec.reason  # the crashed run is not one of them
    rows = best_rows(s.runs, load_catalog(), memory_budget=250 * MiB)
    assert [(r.run.trial_number, r.recommended) for r in rows] == [(0, False), (2, True)]


def test_best_rows_and_their_recommendation_follow_the_order_the_caller_gives():
    runs = tiered_study().runs
    order = ordered(runs)  # trial 2, then 3: both confirmed faster
    rows = best_rows(runs, load_catalog(), limit=2, order=[order[1], order[0], *order[2:]])
    assert [(r.rank, r.run.trial_number, r.recommended) for r in rows] == [
        (None, 0, False), (1, 3, True), (2, 2, False)]


def test_only_the_main_environments_rows_can_be_recommended():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    for trial in range(1, 7):
        s.add(Role.SEARCH, {WIDTH: 2 ** trial}, 0.95, trial=trial)
    main = len(s.runs)  # a: seven timed runs; b: six, and a configuration confirmed faster
    s.add(Role.BASELINE, {}, 1.0, trial=7, m=measurement(same=True))
    confirmed(s, 8, {FAST: True}, 0.8, [0.8] * 4)
    s.runs[:] = [replace(r, env_key="a" if i < main else "b") for i, r in enumerate(s.runs)]
    rows = best_rows(s.runs, load_catalog(), limit=1)
    assert [(r.environment, r.rank, r.run.trial_number, r.recommended) for r in rows] == [
        ("a", None, 0, False), ("a", 1, 1, False), ("b", None, 7, False), ("b", 1, 8, False)]
    assert rows[-1].confirmed and rows[-1].confirmation.recommendable


def test_a_programs_evidence_pools_only_its_processes_within_the_memory_budget():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(1.0, memory=100 * MiB, same=True))
    s.add(Role.SEARCH, {FAST: True}, 0.8, trial=1, m=measurement(0.8, memory=200 * MiB))
    s.add(Role.CONFIRM, {FAST: True}, None, trial=1, m=measurement(0.8, memory=300 * MiB))
    both = best_row_json(best_rows(s.runs, load_catalog())[1])
    assert both["observations"] == 2  # two PAIRED processes: an interval over them
    assert both["pooled_interval"] == [pytest.approx(1.25), pytest.approx(1.25)]
    within = best_row_json(best_rows(s.runs, load_catalog(), memory_budget=250 * MiB)[1])
    assert (within["trial"], within["observations"], within["pooled_interval"]) == (1, 1, None)


def test_the_reasons_read_exactly():
    s = tiered_study()
    order = dict((run.trial_number, (run, c)) for run, c in confirmed_order(s.runs))
    assert verdict_text(order[7][1]) == "no measurable gain (the baseline's program)"
    assert verdict_text(order[6][1]) == ("×1.667 [1.667, 1.667] faster, 1 runs broke the "
                                         "numerics guard")
    assert pick_reason(*order[3], recommend(s.runs)).startswith("explicit pick: ×")
    none = Runs()
    none.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    assert recommend(none.runs).reason == ("no configuration beside XLA's defaults was "
                                           "measured: keep XLA's defaults")
    none.add(Role.SEARCH, {FAST: True}, None, trial=1,
             m=Measurement((), 1.0, mode=MeasureMode.PAIRED, same_program_as=0))
    assert recommend(none.runs).reason == (
        "every configuration tried compiled to XLA's default program: the flags change nothing "
        "the compiler does for this workload; keep XLA's defaults")
    over = Runs()
    over.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(1.0, memory=100 * MiB, same=True))
    over.add(Role.SEARCH, {FAST: True}, 0.8, trial=1, m=measurement(0.8, memory=300 * MiB))
    over.add(Role.SEARCH, {LEVEL: 2}, None, trial=2, m=Measurement(
        (), 1.0, mode=MeasureMode.PAIRED, same_program_as=1, peak_memory_bytes=300 * MiB))
    assert recommend(over.runs, memory_budget=200 * MiB).reason == (
        "no configuration within the memory budget ran: keep XLA's defaults")
    orphan = Runs()  # no baseline stored: nothing is XLA's default program
    orphan.add(Role.SEARCH, {FAST: True}, None, trial=1,
               m=Measurement((), 1.0, mode=MeasureMode.PAIRED, same_program_as=5))
    assert recommend(orphan.runs).reason.startswith("no configuration within the memory")
    elsewhere = Runs()
    elsewhere.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    elsewhere.add(Role.SEARCH, {FAST: True}, None, trial=1, kind=OutcomeKind.CRASHED)
    assert recommend(elsewhere.runs).reason == (
        "no configuration ran successfully: keep XLA's defaults")
    unconfirmed = Runs()
    unconfirmed.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    unconfirmed.add(Role.SEARCH, {FAST: True}, 0.5, trial=1)
    assert recommend(unconfirmed.runs).reason == (
        "no configuration was confirmed (the search's figures are one process each, and the "
        "best of many is usually lucky): keep XLA's defaults, or run the study again with "
        "--confirm K")
    gainless = Runs()
    gainless.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(gainless, 1, {FAST: True}, 0.5, [1.0, 1.0, 1.0])
    assert recommend(gainless.runs).reason == (
        "no configuration was confirmed at least 2.0% faster (3.0% by its estimate) than "
        "XLA's defaults (the best "
        "confirmed, trial 1: ×1.000 [1.000, 1.000] no measurable gain over 3 fresh "
        "processes): keep XLA's defaults")


def test_without_a_least_gain_the_reason_asks_only_for_faster(monkeypatch):
    from autotune.results import confirmation as rules

    monkeypatch.setattr(rules, "MIN_GAIN", 0.0)
    gainless = Runs()
    gainless.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(gainless, 1, {FAST: True}, 0.5, [1.0, 1.0, 1.0])
    assert recommend(gainless.runs).reason.startswith(
        "no configuration was confirmed faster (3.0% by its estimate) than XLA's defaults")
    monkeypatch.setattr(rules, "POINT_GAIN", 0.0)
    assert recommend(gainless.runs).reason.startswith(
        "no configuration was confirmed faster than XLA's defaults (the best confirmed, ")


def _keyed(s: Runs, key: str, role: Role = Role.SEARCH, ok: bool = True) -> None:
    s.add(role, {FAST: True}, 0.9 if ok else None,
          kind=OutcomeKind.OK if ok else OutcomeKind.CRASHED)
    s.runs[-1] = replace(s.runs[-1], env_key=key)


def test_environments_tied_on_timed_runs_go_by_the_first_ok_baseline_then_first_measured():
    s = Runs()
    _keyed(s, "a")
    _keyed(s, "b")
    assert [g.key for g in environments(s.runs)] == ["a", "b"]  # no baseline in either
    _keyed(s, "a", Role.BASELINE, ok=False)  # a failed baseline does not count
    _keyed(s, "b", Role.BASELINE)
    _keyed(s, "a")  # a: 2 timed, b: 2 timed
    assert [g.key for g in environments(s.runs)] == ["b", "a"]
    assert [g.key for g in environments(tuple(s.runs))] == ["b", "a"]  # any sequence
    assert isinstance(main_runs(tuple(s.runs[:1])), list)


def test_an_exact_key_wins_over_the_keys_it_begins():
    s = Runs()
    _keyed(s, "ab")
    _keyed(s, "abc")
    assert find_environment(s.runs, "ab").key == "ab"
    assert find_environment(s.runs, "abc").key == "abc"
    assert find_environment(s.runs, "a") is None  # names two


def test_the_no_gain_reason_cites_a_confirmed_program_other_than_the_defaults():
    """DIRECT confirmation times the defaults' program too (trial 0's confirm runs): it is
    a row, may rank first among the no-gain tier, and is never the one the reason cites
    (seen on an H200, where it read "trial 0: ... over 0 fresh processes")."""
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    for _ in range(3):
        s.add(Role.CONFIRM, {}, None, trial=0, m=measurement(0.9, same=True))
    assert recommend(s.runs).reason == ("every confirmed configuration compiled to XLA's "
                                        "default program: keep XLA's defaults")
    confirmed(s, 1, {FAST: True}, 0.5, [1.2, 1.2, 1.2])
    assert confirmed_order(s.runs)[0][0].trial_number == 0
    assert recommend(s.runs).reason == (
        "no configuration was confirmed at least 2.0% faster (3.0% by its estimate) than "
        "XLA's defaults (the best "
        "confirmed, trial 1: ×0.833 [0.833, 0.833] slower in 3 processes): keep XLA's "
        "defaults")


def test_the_memory_recommendation_reads_exactly_and_needs_a_clean_baseline():
    rec = recommend(memory_study().runs, objectives=("memory",))
    assert rec.reason == (f"peak memory {80 * MiB} bytes, below the baseline's {100 * MiB} "
                          "bytes; the numerics guard passed")
    assert rec.confirmation is None
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, memory=100 * MiB, same=True))
    s.add(Role.SEARCH, {FAST: True}, 0.8, m=measurement(0.8, memory=50 * MiB))
    s.add(Role.CONFIRM, {FAST: True}, None, trial=1, m=measurement(0.8, memory=50 * MiB))
    s.add(Role.CONFIRM, {FAST: True}, None, trial=1, kind=OutcomeKind.NUMERICS_MISMATCH)
    refused = recommend(s.runs, objectives=("memory",))
    assert refused.run is None
    assert refused.reason == ("no configuration needed less peak memory than XLA's defaults: "
                              "keep them")
    clean = Runs()
    clean.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, memory=100 * MiB, same=True))
    clean.add(Role.SEARCH, {FAST: True}, 0.8, m=measurement(0.8, memory=50 * MiB))
    clean.add(Role.CONFIRM, {FAST: True}, None, trial=1, m=measurement(0.8, memory=50 * MiB))
    chosen = recommend(clean.runs, objectives=("memory",))
    assert chosen.run is not None  # 0 failures: clean
    assert chosen.confirmation is not None and chosen.confirmation.runs == 1
    failed_base = Runs()
    failed_base.add(Role.BASELINE, {}, None, kind=OutcomeKind.CRASHED)
    failed_base.add(Role.SEARCH, {FAST: True}, 0.8, m=measurement(0.8, memory=50 * MiB))
    assert recommend(failed_base.runs, objectives=("memory",)).run is None
    no_base = Runs()
    no_base.add(Role.SEARCH, {LEVEL: 2}, 0.9, m=measurement(0.9, memory=500 * MiB))
    no_base.add(Role.SEARCH, {FAST: True}, 0.8, m=measurement(0.8, memory=50 * MiB))
    assert recommend(no_base.runs, objectives=("memory",)).run is None  # nothing to beat


# --- memory: budgets, the memory objective and the Pareto front ------------------------------


def memory_study() -> Runs:
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, memory=100 * MiB, same=True))
    s.add(Role.SEARCH, {FAST: True}, 0.8, m=measurement(0.8, memory=300 * MiB))  # 1
    s.add(Role.SEARCH, {LEVEL: 2}, 0.9, m=measurement(0.9, memory=80 * MiB))  # 2
    s.add(Role.SEARCH, {LEVEL: 1}, 0.95, m=measurement(0.95, memory=200 * MiB))  # 3: dominated
    s.add(Role.SEARCH, {WIDTH: 128}, 0.9, m=replace(measurement(0.9, memory=90 * MiB),
                                                    fingerprint="p0.9-4"))  # 4: dominated
    s.add(Role.SEARCH, {LEVEL: 0}, 1.5, m=measurement(1.5, memory=80 * MiB))  # 5: dominated
    return s


def test_a_budget_leaves_out_what_exceeds_it_and_counts_it():
    runs = memory_study().runs
    assert [r.trial_number for r in ranked(runs, 250 * MiB)] == [2, 4, 3, 5]
    assert over_budget(runs, 250 * MiB) == 1
    assert over_budget(runs, 80 * MiB) == 3
    assert over_budget(runs, None) == 0
    assert [r.trial_number for r in ranked(runs, 200 * MiB)] == [2, 4, 3, 5]  # at it is within


def test_the_memory_objective_ranks_by_peak_memory_then_time():
    order = ordered(memory_study().runs, objectives=("memory",))
    assert [run.trial_number for run, _ in order] == [2, 5, 4, 3, 1]
    within = ordered(memory_study().runs, objectives=("memory",), memory_budget=150 * MiB)
    assert [run.trial_number for run, _ in within] == [2, 5, 4]


@pytest.mark.parametrize("objectives", [("time",), ("time", "memory")])
def test_a_budget_holds_for_every_ranking_and_the_best_rows(objectives):
    runs = memory_study().runs
    order = ordered(runs, objectives=objectives, memory_budget=250 * MiB)
    assert [run.trial_number for run, _ in order] == [2, 4, 3, 5]
    assert [run.trial_number for run, _ in confirmed_order(runs, 250 * MiB)] == [2, 4, 3, 5]
    rows = best_rows(runs, load_catalog(), memory_budget=250 * MiB, objectives=objectives)
    assert [row.run.trial_number for row in rows] == [0, 2, 4, 3, 5]


def test_time_and_memory_rank_by_time():
    order = ordered(memory_study().runs, objectives=("time", "memory"))
    assert [run.trial_number for run, _ in order] == [1, 2, 4, 3, 5]


def test_the_pareto_front_holds_what_nothing_beats_on_both():
    front = pareto_front(memory_study().runs)
    # 1 fastest; 2 smallest and faster than 5; the baseline (1.0, 100 MiB) is beaten by 2
    assert [r.trial_number for r in front] == [1, 2]
    within = pareto_front(memory_study().runs, memory_budget=250 * MiB)
    assert [r.trial_number for r in within] == [2]


def test_an_over_budget_baseline_stays_off_the_front():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, memory=100 * MiB, same=True))
    s.add(Role.SEARCH, {LEVEL: 2}, 1.2, m=measurement(1.2, memory=50 * MiB))
    assert [r.trial_number for r in pareto_front(s.runs)] == [0, 1]
    assert [r.trial_number for r in pareto_front(s.runs, memory_budget=80 * MiB)] == [1]


def test_a_failed_baseline_is_not_replaced_on_the_front_by_a_search_run():
    s = Runs()
    s.add(Role.BASELINE, {}, None, kind=OutcomeKind.CRASHED)
    s.add(Role.SEARCH, {FAST: True}, 0.8, m=measurement(0.8, memory=300 * MiB))
    s.add(Role.SEARCH, {LEVEL: 2}, 0.9, m=measurement(0.9, memory=80 * MiB))
    assert [r.trial_number for r in pareto_front(s.runs)] == [1, 2]  # each once


def test_only_the_first_measured_baseline_joins_the_front():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, memory=50 * MiB, same=True))
    s.add(Role.BASELINE, {}, 0.99, m=measurement(0.99, memory=50 * MiB, same=True))
    assert [r.id for r in pareto_front(s.runs)] == [1]


def test_the_baseline_joins_the_front_when_nothing_beats_it():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, memory=50 * MiB, same=True))
    s.add(Role.SEARCH, {FAST: True}, 0.8, m=measurement(0.8, memory=300 * MiB))
    s.add(Role.SEARCH, {LEVEL: 2}, 1.0, m=measurement(1.0, memory=60 * MiB))  # ties on time
    assert [r.trial_number for r in pareto_front(s.runs)] == [1, 0]


# --- counts and facts -------------------------------------------------------------------------


def test_outcome_counts_and_the_measured_backend():
    s = study_with_confirmations()
    counts = outcome_counts(s.runs)
    assert counts == {"ok": 18, "pruned": 1, "timeout": 1}
    assert measured_backend(s.runs) is None
    env = Environment("h", "3.11", "0.10.2", "0.10.2", "cpu", "cpu", 8)
    s.add(Role.SEARCH, {LEVEL: 3}, 1.0, environment=env)
    assert measured_backend(s.runs) == "cpu"


def test_trial_rows_carry_every_run_with_its_stable_keys():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(same=True, steps=4))
    s.add(Role.SEARCH, {FAST: True}, 0.8, m=Measurement((), 1.0, mode=MeasureMode.PAIRED,
                                                        fingerprint="base", same_program_as=0))
    s.add(Role.SEARCH, {LEVEL: 0}, None, kind=OutcomeKind.TIMEOUT)
    rows = trial_rows(s.runs)
    figures = ("median_ci_s", "iqr_s", "cv", "outliers", "compile_time_s",
               "first_step_time_s", "warmup_steps", "warmup_settled")
    first = {k: v for k, v in rows[0].items() if k not in figures}
    assert first == {"run": 1, "trial": 0, "role": "baseline", "outcome": "ok", "message": "",
                     "flags": {}, "fingerprint": "base", "same_program_as": None,
                     "timed_steps": 4, "median_step_s": 1.0}
    low, high = rows[0]["median_ci_s"]
    assert low <= rows[0]["median_step_s"] <= high and rows[0]["outliers"] == 0
    assert (rows[0]["iqr_s"], rows[0]["cv"]) == (0.0, 0.0)  # four equal steps
    assert (rows[0]["first_step_time_s"], rows[0]["warmup_steps"],
            rows[0]["warmup_settled"]) == (None, None, None)  # what `measurement` leaves
    timed = Runs()
    timed.add(Role.SEARCH, {FAST: True}, 0.9, m=replace(
        measurement(steps=4), step_times_s=(1.0, 2.0, 3.0, 4.0), first_step_time_s=7.0,
        warmup_steps=5, warmup_settled=True))
    (row,) = trial_rows(timed.runs)
    assert row["iqr_s"] > 0 and row["cv"] > 0
    assert (row["first_step_time_s"], row["warmup_steps"], row["warmup_settled"]) == (
        7.0, 5, True)
    assert rows[1]["timed_steps"] == 0 and rows[1]["same_program_as"] == 0
    assert rows[1]["median_step_s"] is None and rows[1]["flags"] == {FAST: True}
    assert rows[1]["median_ci_s"] is None and rows[1]["compile_time_s"] == 1.0  # compiled
    assert rows[2] == {"run": 3, "trial": 2, "role": "search", "outcome": "timeout",
                       "message": "", "flags": {LEVEL: 0}, "fingerprint": None,
                       "same_program_as": None, "timed_steps": 0, "median_step_s": None,
                       **dict.fromkeys(figures)}


def test_a_study_row_counts_trials_and_runs():
    s = study_with_confirmations()
    record = StudyRecord("s", "cpu", "matmul", "tiny", 8, MeasureMode.PAIRED, WHEN)
    assert study_row(record, s.runs) == {
        "name": "s", "space": "cpu", "benchmark": "matmul", "preset": "tiny", "devices": 8,
        "trials": 8, "counted": 8, "target": None, "runs": 20, "state": "searching",
        "priority": 0, "created": "2026-01-01T00:00:00+00:00"}


def test_a_study_row_is_queued_until_a_process_measures_it():
    record = StudyRecord("s", "cpu", "matmul", "tiny", 8, MeasureMode.PAIRED, WHEN)
    assert study_row(record, [])["state"] == "queued"
    assert study_row(record, [], running=True)["state"] == "searching"


def test_a_study_row_has_no_target_where_its_recipe_gives_no_whole_number():
    record = StudyRecord("s", "cpu", "matmul", "tiny", 8, MeasureMode.PAIRED, WHEN,
                         plan={"recipe": {"options": {"trials": 20.5}}})
    row = study_row(record, study_with_confirmations().runs)
    assert (row["target"], row["counted"], row["state"]) == (None, 8, "searching")


def test_best_rows_as_json_state_the_confirmed_figure_and_the_verdict():
    rows = best_rows(study_with_confirmations().runs, load_catalog(), limit=3)
    doc = [best_row_json(row) for row in rows]
    assert [(d["rank"], d["trial"]) for d in doc] == [(None, 0), (1, 2), (2, 4), (3, 1)]
    base, real, slow, lucky = doc
    assert base["confirmed_speedup"] is None and base["verdict"] is None
    assert base["same_program"] is True and base["flags_changed"] == {}
    assert real["flags_changed"] == {FAST: True} and real["verdict"] == "faster"
    assert real["search_speedup"] == pytest.approx(1 / 0.85)
    assert real["confirmed_speedup"] == pytest.approx(1 / 0.88)
    low, high = real["confirmed_interval"]
    assert low == pytest.approx(1 / 0.88) == high  # constant steps: a point interval
    assert real["median_step_s"] == 0.85 and real["peak_memory_bytes"] is None
    assert lucky["verdict"] == "no measurable gain" and lucky["confirmed_speedup"] == 1.0
    assert real["confirmation_text"] == verdict_text(rows[1].confirmation)
    assert real["confirmation_text"].endswith("faster") and base["confirmation_text"] == \
        "not confirmed"
    assert [d["recommended"] for d in doc] == [False, True, False, False]
    assert sorted(real) == sorted(["rank", "trial", "flags_changed", "median_step_s",
                                   "search_speedup", "confirmed_speedup",
                                   "confirmed_interval", "verdict", "confirmation_text",
                                   "recommended",
                                   "peak_memory_bytes", "memory_source", "same_program",
                                   "observations",
                                   "pooled_speedup", "pooled_interval", "program_trials",
                                   "environment"])
    # trial 2's program: its search run (0.85) and four confirmation runs (0.88) pooled
    assert real["observations"] == 5 and real["program_trials"] == [2]
    assert real["pooled_speedup"] == pytest.approx(1 / 0.88)
    low, high = real["pooled_interval"]  # over the five processes: 0.85 once, 0.88 four times
    assert low <= 1 / 0.88 <= high and high <= 1 / 0.85 + 1e-9
    assert slow["pooled_interval"] is not None and base["pooled_interval"] is None
    assert base["observations"] is None  # the baseline row is XLA's defaults, not a program


def test_a_no_op_row_is_confirmed_at_one_without_an_interval():
    s = Runs()
    s.add(Role.SEARCH, {WIDTH: 256}, 0.9, m=measurement(0.9, same=True))
    [row] = [best_row_json(r) for r in best_rows(s.runs, load_catalog())]
    assert (row["confirmed_speedup"], row["confirmed_interval"], row["verdict"]) == (
        1.0, None, "no measurable gain")


# --- the notes under best ---------------------------------------------------------------------


def study(budget: int | None = None, backend: str | None = "cpu") -> StudyRecord:
    return StudyRecord("s", "cpu", "matmul", "tiny", 1, MeasureMode.PAIRED, WHEN,
                       space_backend=backend, memory_budget_bytes=budget)


def test_the_noise_note_is_said_only_when_the_best_is_inside_the_baselines_own_spread():
    from autotune.results.notes import noise_note

    catalog = load_catalog()
    inside = Runs()
    inside.add(Role.BASELINE, {}, 1 / 1.04)  # A/A: x1.04
    inside.add(Role.SEARCH, {FAST: True}, 1 / 1.03)
    note = noise_note(best_rows(inside.runs, catalog))
    assert note is not None and note.kind == "noise_floor"
    assert "×1.030 is within this study's noise floor (baseline vs itself: ×1.040)" in note.text
    edge = Runs()
    edge.add(Role.BASELINE, {}, 1 / 1.04)
    edge.add(Role.SEARCH, {FAST: True}, 1 / 1.04)  # exactly the floor: still inside
    assert noise_note(best_rows(edge.runs, catalog)) is not None
    outside = Runs()
    outside.add(Role.BASELINE, {}, 1 / 1.02)
    outside.add(Role.SEARCH, {FAST: True}, 1 / 1.05)
    assert noise_note(best_rows(outside.runs, catalog)) is None


def test_a_confirmed_best_needs_no_noise_note():
    from autotune.results.notes import noise_note

    s = Runs()
    s.add(Role.BASELINE, {}, 1 / 1.04)
    s.add(Role.SEARCH, {FAST: True}, 1 / 1.03)
    s.add(Role.CONFIRM, {FAST: True}, 0.97, trial=1, m=measurement(0.97))
    s.add(Role.CONFIRM, {FAST: True}, 0.97, trial=1, m=measurement(0.97))
    assert noise_note(best_rows(s.runs, load_catalog())) is None


def test_the_budget_note_counts_the_configurations_above_it():
    from autotune.results.notes import budget_note

    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, memory=10 * MiB))
    s.add(Role.SEARCH, {FAST: True}, 0.9, m=measurement(0.9, memory=30 * MiB))
    s.add(Role.SEARCH, {LEVEL: 1}, 0.8, m=measurement(0.8, memory=40 * MiB))
    assert budget_note(study(), s.runs) is None
    assert budget_note(study(20 * MiB), s.runs).text == (
        "memory budget 20.0 MiB: 2 configurations above it are infeasible and not ranked")
    assert budget_note(study(35 * MiB), s.runs).text.startswith(
        "memory budget 35.0 MiB: 1 configuration above")


def test_the_backend_note_says_when_the_flags_had_nothing_to_act_on():
    from autotune.results.notes import backend_note

    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(same=True),
          environment=Environment("h", "3.11", "0.10", "0.10", "cpu", "cpu", 1))
    assert backend_note(study(backend="cpu"), s.runs) is None
    assert backend_note(study(backend="any"), s.runs) is None
    note = backend_note(study(backend="gpu"), s.runs)
    assert note is not None and "holds gpu flags but the trials ran on cpu" in note.text


def test_study_notes_keep_their_order_and_kinds():
    from autotune.results.notes import study_notes

    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(same=True))
    s.add(Role.SEARCH, {FAST: True}, None, kind=OutcomeKind.CRASHED)
    notes = study_notes(study(), s.runs, best_rows(s.runs, load_catalog()))
    assert [n.kind for n in notes] == ["outcomes", "speedup", "memory_source"]
    assert notes[0].text == "runs by outcome: crashed: 1, ok: 1"


def test_sizes_are_written_in_binary_units():
    from autotune.results.notes import size_text

    assert [size_text(n) for n in (None, 0, 1023, 1024, 1536, 5 * MiB, 3 << 30, 2 << 40,
                                   5000 << 40)] == [
        "-", "0 B", "1023 B", "1.0 KiB", "1.5 KiB", "5.0 MiB", "3.0 GiB", "2.0 TiB",
        "5000.0 TiB"]


def test_every_note_says_what_it_says_in_full():
    from autotune.results.notes import Note, study_notes

    here = Environment("h", "3.11", "0.10", "0.10", "cpu", "cpu", 1)
    s = Runs()
    s.add(Role.BASELINE, {}, 1 / 1.04, m=measurement(1.0, memory=10 * MiB), environment=here)
    s.add(Role.SEARCH, {FAST: True}, 1 / 1.03, m=measurement(0.97, memory=30 * MiB))
    same = Measurement(step_times_s=(), compile_time_s=1.0, mode=MeasureMode.PAIRED,
                       fingerprint="p0.97", same_program_as=1, memory_source="memory_stats")
    s.add(Role.SEARCH, {LEVEL: 2}, 1 / 1.03, m=same)
    s.add(Role.SEARCH, {LEVEL: 1}, None, kind=OutcomeKind.CRASHED)
    record = study(budget=20 * MiB, backend="gpu")
    notes = study_notes(record, s.runs, best_rows(s.runs, load_catalog(),
                                                  memory_budget=20 * MiB))
    assert notes == [
        Note("outcomes", "runs by outcome: crashed: 1, ok: 3"),
        Note("same_program", "1 trials compiled to a program another trial had timed: not "
             "timed again, each shown as that trial's row"),
        Note("speedup", "speedup = baseline median step time / configuration's median step "
             "time, both timed in one process, steps alternated, so the process's own speed "
             "cancels; own step is the configuration's median in its own process, which a "
             "busier or quieter host moves: compare speedups, not own steps. Search: one "
             "paired process per trial, a program's processes pooled (n) (baseline row: "
             "default vs default, the noise floor). Confirmed: re-measured in fresh processes "
             "interleaved with the baseline; an interval that holds 1.0 is no measurable "
             "gain."),
        Note("memory_source", "peak memory from: memory_stats, unknown"),
        Note("memory_budget", "memory budget 20.0 MiB: 1 configuration above it are "
             "infeasible and not ranked"),
        Note("backend", "note: space 'cpu' holds gpu flags but the trials ran on cpu: the "
             "flags had no effect to measure; differences are noise."),
    ]


def test_memory_figures_of_another_source_than_the_baselines_are_marked_not_comparable():
    """Seen on an H200: a DIRECT configuration's allocator peak (148.5 MiB) beside the
    PAIRED baseline's program footprint (19.3 MiB) read as 7x the memory."""
    from autotune.results.notes import memory_note

    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=replace(measurement(1.0, memory=20 * MiB, same=True),
                                            memory_source="memory_analysis"))
    s.add(Role.SEARCH, {FAST: True}, 1.1, m=replace(measurement(0.9, None, memory=150 * MiB),
                                                    memory_source="memory_stats"))
    s.add(Role.SEARCH, {LEVEL: 2}, 1.05, m=replace(measurement(0.95, memory=20 * MiB),
                                                   memory_source="memory_analysis"))
    rows = best_rows(s.runs, load_catalog())
    assert {r.run.trial_number: r.memory_source for r in rows} == {
        0: "memory_analysis", 1: "memory_stats", 2: "memory_analysis"}
    assert memory_note(s.runs, rows).text == (
        "peak memory from: memory_analysis, memory_stats; * marks memory_stats (the device "
        "allocator's peak, in a process of its own), not comparable with the baseline's "
        "memory_analysis (the compiled program's footprint)")
    assert memory_note(s.runs[::2], best_rows(s.runs[::2], load_catalog())).text == (
        "peak memory from: memory_analysis")
    assert [best_row_json(r)["memory_source"] for r in rows
            if r.run.trial_number == 1] == ["memory_stats"]


def test_without_runs_the_notes_say_none_and_without_a_baseline_no_noise_floor():
    from autotune.results.notes import noise_note, study_notes

    notes = study_notes(study(), [], [])
    assert [n.text for n in notes][0] == "runs by outcome: none"
    assert notes[-1].text == "peak memory from: -"
    s = Runs()
    s.add(Role.SEARCH, {FAST: True}, 1 / 1.03)  # no baseline row at all
    assert noise_note(best_rows(s.runs, load_catalog())) is None


def test_the_noise_floor_note_in_full():
    from autotune.results.notes import Note, noise_note

    s = Runs()
    s.add(Role.BASELINE, {}, 1 / 1.04)
    s.add(Role.SEARCH, {FAST: True}, 1 / 0.98)
    assert noise_note(best_rows(s.runs, load_catalog())) == Note(
        "noise_floor", "note: the best speedup ×0.980 is within this study's noise floor "
        "(baseline vs itself: ×1.040); no measurable gain on this workload so far.")


def test_untimed_configurations_over_the_budget_count_once_each_and_confirmations_not():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(memory=10 * MiB))
    s.add(Role.SEARCH, {FAST: True}, 0.9, m=measurement(0.9, memory=30 * MiB))  # timed, above
    s.add(Role.SEARCH, {LEVEL: 1}, None, kind=OutcomeKind.OVER_BUDGET)
    s.add(Role.SEARCH, {LEVEL: 2}, None, kind=OutcomeKind.OVER_BUDGET)
    s.add(Role.SEARCH, {LEVEL: 2}, None, kind=OutcomeKind.OVER_BUDGET)  # the same one again
    s.add(Role.CONFIRM, {LEVEL: 0}, None, trial=1, kind=OutcomeKind.OVER_BUDGET)
    assert over_budget(s.runs, 20 * MiB) == 3
    assert over_budget(s.runs, None) == 0


@given(st.lists(st.tuples(st.sampled_from([0.8, 0.9, 1.0, 1.1]),
                          st.sampled_from([1, 2, 3, 4])), min_size=1, max_size=12))
def test_the_pareto_front_is_every_point_no_other_beats_on_both(points):
    """The sweep keeps exactly what the definition keeps, in (time, memory) order, ties
    (equal time and memory) included."""
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, memory=3 * MiB, same=True))
    for i, (ratio, mib) in enumerate(points):
        s.add(Role.SEARCH, {WIDTH: 100 + i}, ratio, m=measurement(ratio, memory=mib * MiB))
    candidates = ranked(s.runs) + s.runs[:1]

    def beats(a, b):
        ta, tb, ma, mb = a.ratio, b.ratio, a.outcome.measurement.peak_memory_bytes, \
            b.outcome.measurement.peak_memory_bytes
        return ta <= tb and ma <= mb and (ta < tb or ma < mb)

    expected = sorted((r for r in candidates if not any(beats(o, r) for o in candidates)),
                      key=lambda r: (r.ratio, r.outcome.measurement.peak_memory_bytes))
    assert [r.id for r in pareto_front(s.runs)] == [r.id for r in expected]


# --- sequential confirmation's rule ------------------------------------------------------------


def _targets(s: Runs) -> list[RunRecord]:
    return [r for r in s.runs if r.role is Role.SEARCH]


def test_sequential_confirmation_measures_the_open_leader_until_the_cap():
    from autotune.results.confirmation import sequential_next

    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(s, 1, {FAST: True}, 0.8, [0.90, 1.06, 0.93, 1.02])  # open, the better estimate
    confirmed(s, 2, {LEVEL: 1}, 0.9, [0.95, 1.04, 0.97, 1.03])  # open, a worse one
    a, b = _targets(s)
    assert sequential_next(s.runs, [a, b], cap=5) is a
    assert sequential_next(s.runs, [b, a], cap=5) is a  # by estimate, not by order
    assert sequential_next(s.runs, [a, b], cap=4) is None  # both at the cap
    assert sequential_next(s.runs, [b], cap=5) is b
    assert sequential_next(s.runs, [], cap=5) is None


def test_a_confirmed_leader_ends_sequential_confirmation_but_a_weaker_one_does_not():
    from autotune.results.confirmation import sequential_next

    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(s, 1, {FAST: True}, 0.8, [0.95, 0.96, 0.95, 0.96])  # confirmed faster
    confirmed(s, 2, {LEVEL: 1}, 0.9, [0.70, 1.20, 0.75, 1.10])  # open, a better estimate
    confirmed(s, 3, {LEVEL: 2}, 0.9, [0.97, 1.04, 0.98, 1.03])  # open, worse than the confirmed
    winner, better, worse = _targets(s)
    assert sequential_next(s.runs, [winner, better, worse], cap=16) is better
    assert sequential_next(s.runs, [winner, worse], cap=16) is None


def test_the_separate_contest_measures_what_may_still_be_two_percent_faster_than_the_leader(
        monkeypatch):
    from autotune.results import confirmation

    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(s, 1, {FAST: True}, 0.8, [0.90, 0.91, 0.90, 0.91])  # the leader, 0.905
    confirmed(s, 2, {LEVEL: 1}, 0.8, [0.80, 1.06, 0.82, 1.04])  # open: worse, reaches 0.80
    confirmed(s, 3, {LEVEL: 2}, 0.8, [0.93, 0.94, 0.93, 0.94])  # confirmed, told apart
    leader, wide, apart = _targets(s)
    monkeypatch.setattr(confirmation, "CONFIRM_CONTEST", "first")
    assert confirmation.sequential_next(s.runs, [leader, wide, apart], cap=16) is None
    monkeypatch.setattr(confirmation, "CONFIRM_CONTEST", "separate")
    assert confirmation.sequential_next(s.runs, [leader, wide, apart], cap=16) is wide
    assert confirmation.sequential_next(s.runs, [leader, apart], cap=16) is None
    assert confirmation.sequential_next(s.runs, [leader, wide, apart], cap=4) is None  # at cap


def test_the_separate_contest_measures_a_confirmed_rival_until_it_is_told_apart(monkeypatch):
    from autotune.results import confirmation

    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(s, 1, {FAST: True}, 0.8, [0.90, 0.91, 0.90, 0.91])  # the leader, 0.905
    confirmed(s, 2, {LEVEL: 1}, 0.8, [0.84, 0.96, 0.86, 0.965])  # confirmed, may be faster
    leader, rival = _targets(s)
    rival_conf = confirmation.confirmation(s.runs, rival)
    assert rival_conf is not None and rival_conf.recommendable
    assert rival_conf.estimate.ratio > 0.905 and rival_conf.estimate.low < 0.905 * 0.98
    monkeypatch.setattr(confirmation, "CONFIRM_CONTEST", "separate")
    assert confirmation.sequential_next(s.runs, [leader, rival], cap=16) is rival
    alone = Runs()
    alone.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(alone, 1, {LEVEL: 1}, 0.8, [0.84, 0.96, 0.86, 0.965])  # wide, and no rival
    assert confirmation.sequential_next(alone.runs, _targets(alone), cap=16) is None
    monkeypatch.setattr(confirmation, "SEPARATE_BY", 0.2)  # nothing can be 20% faster
    assert confirmation.sequential_next(s.runs, [leader, rival], cap=16) is None
    monkeypatch.setattr(confirmation, "CONFIRM_CONTEST", "first")
    monkeypatch.setattr(confirmation, "SEPARATE_BY", 0.02)
    assert confirmation.sequential_next(s.runs, [leader, rival], cap=16) is None


def test_the_separate_contest_measures_a_leader_with_fewer_processes_than_its_contender(
        monkeypatch):
    from autotune.results import confirmation

    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(s, 1, {FAST: True}, 0.8, [0.88, 0.91, 0.88, 0.91])  # the leader: 4, lucky?
    confirmed(s, 2, {LEVEL: 1}, 0.8, [0.84, 0.97, 0.86, 0.98, 0.85, 0.97])  # 6: may be faster
    leader, rival = _targets(s)
    monkeypatch.setattr(confirmation, "CONFIRM_CONTEST", "separate")
    assert confirmation.sequential_next(s.runs, [leader, rival], cap=16) is leader
    assert confirmation.sequential_next(s.runs, [leader, rival], cap=6) is None  # rival capped
    confirmed(s, 3, {LEVEL: 2}, 0.8, [0.84, 0.97, 0.86])  # open, 3: the contender now
    assert confirmation.sequential_next(s.runs, _targets(s), cap=16) is _targets(s)[2]
    # the leader at the cap: the contender under it is still measured
    assert confirmation.sequential_next(s.runs, _targets(s), cap=4) is _targets(s)[2]


def test_separate_against_the_leaders_bound_measures_a_leader_confirmed_on_lucky_processes(
        monkeypatch):
    from autotune.results import confirmation

    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(s, 1, {FAST: True}, 0.8, [0.84, 0.95, 0.86, 0.94])  # the leader: wide, 4
    confirmed(s, 2, {LEVEL: 1}, 0.8, [0.89, 1.00, 0.90, 0.99, 0.91])  # open: worse, 5
    leader, contender = _targets(s)
    lead = confirmation.confirmation(s.runs, leader).estimate
    other = confirmation.confirmation(s.runs, contender).estimate
    assert confirmation.confirmation(s.runs, leader).recommendable
    assert not confirmation.confirmation(s.runs, contender).recommendable
    # not 2% faster than the leader's estimate, but than its pessimistic end
    assert lead.ratio * 0.98 < other.low < lead.high * 0.98 and other.ratio > lead.ratio
    monkeypatch.setattr(confirmation, "CONFIRM_CONTEST", "separate")
    assert confirmation.SEPARATE_AGAINST == 0.5  # as shipped: half way to the bound
    assert confirmation.sequential_next(s.runs, [leader, contender], cap=16) is leader
    monkeypatch.setattr(confirmation, "SEPARATE_AGAINST", 0.0)  # against the estimate
    assert confirmation.sequential_next(s.runs, [leader, contender], cap=16) is None
    monkeypatch.setattr(confirmation, "SEPARATE_AGAINST", 1.0)  # against the bound
    assert confirmation.sequential_next(s.runs, [leader, contender], cap=16) is leader
    monkeypatch.setattr(confirmation, "CONFIRM_CONTEST", "first")
    assert confirmation.sequential_next(s.runs, [leader, contender], cap=16) is None


def test_the_separate_contest_ranks_confirmed_configurations_by_their_estimate(monkeypatch):
    from autotune.results import confirmation

    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(s, 1, {FAST: True}, 0.8, [0.90, 0.91, 0.90, 0.91])  # 0.905, a narrow interval
    confirmed(s, 2, {LEVEL: 1}, 0.8, [0.80, 0.93, 0.82, 0.92])  # better, wider
    monkeypatch.setattr(confirmation, "CONFIRM_CONTEST", "first")
    assert [r.trial_number for r, _ in confirmed_order(s.runs)] == [1, 2]  # by the bound
    monkeypatch.setattr(confirmation, "CONFIRM_CONTEST", "separate")
    assert [r.trial_number for r, _ in confirmed_order(s.runs)] == [2, 1]  # by the estimate
    assert recommend(s.runs).run.trial_number == 2
    # a wide interval holding 1.0 with a better estimate ranks after every confirmed gain
    confirmed(s, 3, {LEVEL: 2}, 0.8, [0.60, 1.30, 0.62, 1.25])
    assert [r.trial_number for r, _ in confirmed_order(s.runs)][:2] == [2, 1]
    assert recommend(s.runs).run.trial_number == 2


def test_the_projected_stop_gives_up_what_its_cap_cannot_confirm(monkeypatch):
    from autotune.results import confirmation

    monkeypatch.setattr(confirmation, "MIN_GAIN", 0.01)  # the figures below are for 0.99
    estimate = RatioEstimate(0.95, 0.90, 1.00, 0.95, n_processes=4, n_pairs=4)
    # 4 processes x (log(1/0.95) / log(0.99/0.95))^2 = 6.19 to bring 1.00 under 0.99
    monkeypatch.setattr(confirmation, "CONFIRM_STOP", "cap")  # nothing given up early
    assert not confirmation.cannot_confirm_by(estimate, 6)
    assert not confirmation.cannot_confirm_by(RatioEstimate(0.99, 0.9, 1.1, 0.95, 4, 4), 6)
    monkeypatch.setattr(confirmation, "CONFIRM_STOP", "projected")
    assert confirmation.cannot_confirm_by(estimate, 6)
    assert not confirmation.cannot_confirm_by(estimate, 7)
    wider = RatioEstimate(0.95, 0.85, 1.05, 0.95, n_processes=4, n_pairs=4)
    assert confirmation.cannot_confirm_by(wider, 7)  # a wider interval needs more
    more = RatioEstimate(0.95, 0.90, 1.00, 0.95, n_processes=8, n_pairs=8)
    assert confirmation.cannot_confirm_by(more, 7) and not confirmation.cannot_confirm_by(more, 13)
    at_floor = RatioEstimate(0.99, 0.95, 1.03, 0.95, n_processes=4, n_pairs=4)
    assert confirmation.cannot_confirm_by(at_floor, 10**6)  # its estimate is no gain worth it
    monkeypatch.setattr(confirmation, "MIN_GAIN", 0.0)  # the bound moves with MIN_GAIN
    assert not confirmation.cannot_confirm_by(at_floor, 10**6)


def test_the_slower_stop_gives_up_a_target_measured_not_faster_on_enough_processes(
        monkeypatch):
    from autotune.results import confirmation

    monkeypatch.setattr(confirmation, "CONFIRM_STOP", "slower")
    floor = confirmation.SLOWER_AFTER
    slower = RatioEstimate(1.01, 0.90, 1.12, 0.95, n_processes=floor, n_pairs=floor)
    assert not confirmation.cannot_confirm_by(slower, 32)  # what ships: it may be 10% faster
    monkeypatch.setattr(confirmation, "SLOWER_REACH", 1.0)  # any interval: the count alone
    assert confirmation.cannot_confirm_by(slower, 32)
    level = RatioEstimate(1.0, 0.90, 1.10, 0.95, n_processes=floor, n_pairs=floor)
    assert confirmation.cannot_confirm_by(level, 32)  # not faster: given up too
    early = RatioEstimate(1.01, 0.90, 1.12, 0.95, n_processes=floor - 1, n_pairs=floor - 1)
    assert not confirmation.cannot_confirm_by(early, 32)  # too few processes to say
    faster = RatioEstimate(0.999, 0.90, 1.10, 0.95, n_processes=30, n_pairs=30)
    assert not confirmation.cannot_confirm_by(faster, 32)  # measured on, to the cap
    monkeypatch.setattr(confirmation, "SLOWER_REACH", 0.05)  # kept while it may be 5% faster
    assert not confirmation.cannot_confirm_by(slower, 32)  # its interval reaches 0.90
    assert confirmation.cannot_confirm_by(
        RatioEstimate(1.01, 0.96, 1.06, 0.95, n_processes=floor, n_pairs=floor), 32)
    at_reach = RatioEstimate(1.01, 1 - 0.05, 1.06, 0.95, n_processes=floor, n_pairs=floor)
    assert confirmation.cannot_confirm_by(at_reach, 32)  # reaching exactly 5%: given up
    monkeypatch.setattr(confirmation, "SLOWER_REACH", 1.0)
    monkeypatch.setattr(confirmation, "SLOWER_AFTER", floor + 4)  # the count is the constant
    assert not confirmation.cannot_confirm_by(slower, 32)
    assert confirmation.cannot_confirm_by(
        RatioEstimate(1.01, 0.95, 1.07, 0.95, n_processes=floor + 4, n_pairs=floor + 4), 32)
    monkeypatch.setattr(confirmation, "CONFIRM_STOP", "cap")
    assert not confirmation.cannot_confirm_by(slower, 32)


def test_sequential_confirmation_under_the_projected_stop(monkeypatch):
    from autotune.results import confirmation

    monkeypatch.setattr(confirmation, "MIN_GAIN", 0.01)  # "to go": to bring it under 0.99
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(s, 1, {FAST: True}, 0.8, [0.90, 1.06, 0.93, 1.02])  # 0.974, about 107 to go
    confirmed(s, 2, {LEVEL: 1}, 0.8, [0.97, 1.03, 0.975, 1.02])  # 0.997: never
    wide, none = _targets(s)
    assert confirmation.sequential_next(s.runs, [wide, none], cap=16) is wide
    assert confirmation.sequential_next(s.runs, [none], cap=16) is none
    monkeypatch.setattr(confirmation, "CONFIRM_STOP", "projected")
    assert confirmation.sequential_next(s.runs, [wide, none], cap=16) is None
    assert confirmation.sequential_next(s.runs, [wide, none], cap=120) is wide
    assert confirmation.sequential_next(s.runs, [none], cap=10**6) is None


def test_sequential_confirmation_skips_what_shows_no_gain_or_broke_the_numerics(monkeypatch):
    from autotune.results import confirmation as rules
    from autotune.results.confirmation import NOT_WORTH, sequential_next

    assert NOT_WORTH == 0.01
    monkeypatch.setattr(rules, "MIN_GAIN", 0.01)  # NOT_WORTH is the floor, 0.99
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(s, 1, {FAST: True}, 0.8, [1.0, 1.0, 1.0, 1.0])  # no gain at all
    confirmed(s, 2, {LEVEL: 1}, 0.8, [0.995, 1.02, 0.996, 1.01])  # at most 0.5% to gain
    confirmed(s, 3, {LEVEL: 2}, 0.8, [0.985, 1.02, 0.986, 1.01])  # up to 1.5%: still open
    confirmed(s, 4, {LEVEL: 0}, 0.8, [0.90, 1.06, 0.93, 1.02], wrong=1)  # numerics broke
    none, small, open_, wrong = _targets(s)
    assert sequential_next(s.runs, [none, small, wrong], cap=16) is None
    assert sequential_next(s.runs, [none, small, open_, wrong], cap=16) is open_
    same = Runs()
    same.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    same.add(Role.SEARCH, {LEVEL: 3}, 1.0, trial=1, m=measurement(same=True))
    assert sequential_next(same.runs, _targets(same), cap=16) is None  # the default program
    failed = Runs()
    failed.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(failed, 1, {FAST: True}, 0.8, [], wrong=2)  # nothing timed: no estimate
    assert sequential_next(failed.runs, _targets(failed), cap=16) is None
    unconfirmed = Runs()
    unconfirmed.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    unconfirmed.add(Role.SEARCH, {FAST: True}, 0.8, trial=1)  # not confirmed yet
    assert sequential_next(unconfirmed.runs, _targets(unconfirmed), cap=16) is None
    slight = Runs()  # faster, never by 1%: its whole interval above 0.99
    slight.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(slight, 1, {FAST: True}, 0.8, [0.992, 0.995, 0.993, 0.996])
    [only] = _targets(slight)
    assert only.trial_number == 1
    assert 0.99 <= confirmation(slight.runs, only).estimate.low  # type: ignore[union-attr]
    assert sequential_next(slight.runs, [only], cap=16) is None
    reaching = Runs()  # its interval reaches up to 1.0 over 4 processes: open
    reaching.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(reaching, 1, {FAST: True}, 0.8, [0.95, 1.00, 0.96, 0.99])
    [target] = _targets(reaching)
    assert confirmation(reaching.runs, target).estimate.high < 1.01  # type: ignore[union-attr]
    assert sequential_next(reaching.runs, [target], cap=16) is target


def test_a_gain_confirmed_in_too_few_processes_is_measured_again_not_recommended(
        monkeypatch):
    """`MIN_PROCESSES` (4): two processes whose interval lies below 1 - `MIN_GAIN` are not
    enough; the verdict says so, sequential confirmation measures the configuration again
    until a fourth successful process recommends it. A failed run does not count toward
    the floor. Without the floor the same two processes would be recommended."""
    from autotune.results import confirmation

    assert confirmation.MIN_PROCESSES == 4
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(s, 1, {FAST: True}, 0.8, [0.90, 0.91])
    [target] = _targets(s)
    two = Confirmations.of(s.runs).of_run(target)
    assert not two.recommendable and not two.worth_gain
    assert two.verdict() == "faster in 2 processes, 4 needed"
    assert confirmation.sequential_next(s.runs, [target], cap=16) is target
    assert confirmation.sequential_next(s.runs, [target], cap=2) is None  # at the cap
    s.add(Role.CONFIRM, {FAST: True}, None, trial=1, kind=OutcomeKind.CRASHED)
    s.add(Role.CONFIRM, {FAST: True}, None, trial=1, m=measurement(0.92, 1.0))
    failed = Confirmations.of(s.runs).of_run(target)
    assert failed.runs == 4 and not failed.recommendable  # three good runs of four
    assert failed.verdict() == "faster in 3 processes, 4 needed"
    assert confirmation.sequential_next(s.runs, [target], cap=16) is target
    s.add(Role.CONFIRM, {FAST: True}, None, trial=1, m=measurement(0.91, 1.0))
    four = Confirmations.of(s.runs).of_run(target)
    assert four.recommendable and four.verdict() == "faster"
    assert confirmation.sequential_next(s.runs, [target], cap=16) is None  # confirmed
    monkeypatch.setattr(confirmation, "MIN_PROCESSES", 1)
    assert two.recommendable and two.verdict() == "faster"


def test_sequential_confirmation_looks_past_targets_it_skips_and_stops_on_a_tie(monkeypatch):
    from autotune.results import confirmation
    from autotune.results.confirmation import sequential_next

    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    s.add(Role.SEARCH, {LEVEL: 3}, 1.0, trial=1, m=measurement(same=True))  # the default program
    confirmed(s, 2, {FAST: True}, 0.8, [0.90, 1.06, 0.93, 1.02])  # open
    same, open_ = _targets(s)
    assert sequential_next(s.runs, [same, open_], cap=16) is open_
    tie = Runs()
    tie.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(tie, 1, {FAST: True}, 0.8, [0.95, 0.95, 0.95, 0.95])  # confirmed at 0.95
    confirmed(tie, 2, {LEVEL: 1}, 0.8, [0.80, 0.95, 0.95, 1.10])  # open, also 0.95
    winner, level = _targets(tie)
    confs = Confirmations.of(tie.runs)
    assert confs.of_run(winner).estimate.ratio == confs.of_run(level).estimate.ratio
    assert sequential_next(tie.runs, [winner, level], cap=16) is level  # may be 16% faster
    monkeypatch.setattr(confirmation, "CONFIRM_CONTEST", "first")
    assert sequential_next(tie.runs, [winner, level], cap=16) is None  # no better: done


# --- what confirmation takes, and what --trials counts -----------------------------------------


def test_confirmation_takes_programs_in_the_order_its_rule_names(monkeypatch):
    """A backed at 0.95 (three processes, 0.88-1.02), B lucky once at 0.93, C at 0.94
    twice, D once at 0.85: "pooled" takes D then B first, "backed" the backed A first,
    "bound" the best pessimistic estimate (D's lead outweighs its one process; then A,
    then C: two processes narrow C more than B's one). Above a memory budget, D is out."""
    from autotune.results import ranking

    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, same=True))
    s.add(Role.SEARCH, {FAST: True}, 0.95)  # trial 1
    s.add(Role.SEARCH, {LEVEL: 2}, 0.93)  # trial 2
    s.add(Role.SEARCH, {WIDTH: 128}, 0.94)  # trial 3
    s.add(Role.SEARCH, {WIDTH: 512}, 0.85,
          m=replace(measurement(0.85, memory=64 * MiB), fingerprint="t4"))  # trial 4
    for ratio in (0.88, 1.02):
        s.add(Role.RACE, {FAST: True}, ratio, trial=1)
    s.add(Role.RACE, {WIDTH: 128}, 0.94, trial=3)

    def order(rule: str, budget: int | None = None) -> list[int | None]:
        monkeypatch.setattr(ranking, "CONFIRM_ORDER", rule)
        return [r.trial_number for r in ranking.to_confirm(s.runs, budget)
                if r.role is not Role.BASELINE]

    assert order("pooled") == [4, 2, 3, 1] == [r.trial_number for r in ranked(s.runs)
                                                if r.role is not Role.BASELINE]
    assert order("backed") == [1, 4, 2, 3]
    assert order("bound") == [4, 1, 3, 2]
    assert order("bound", 32 * MiB) == [1, 3, 2]


def test_trials_counts_compile_only_runs_but_those_its_allowance_frees(monkeypatch):
    from autotune.rules import stopping

    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, same=True))
    s.add(Role.SEARCH, {FAST: True}, 0.95)
    untimed = Measurement((), 1.0, mode=MeasureMode.PAIRED, same_program_as=1)
    for width in (128, 256, 512):  # compiled to a program timed already
        s.add(Role.SEARCH, {WIDTH: width}, None, m=untimed)
    s.add(Role.CONFIRM, {FAST: True}, 0.95, trial=1)  # never counted
    s.add(Role.RACE, {FAST: True}, 0.95, trial=1)
    s.add(Role.SEARCH, {LEVEL: 2}, None, kind=OutcomeKind.CRASHED)  # never free
    s.add(Role.FINGERPRINT, {LEVEL: 1}, None, m=untimed)  # the fit's: not the budget's
    assert [compile_only(r) for r in s.runs] == [False, False, True, True, True, False,
                                                 False, False, True]
    assert counted_trials(s.runs, 3) == 7  # 5 trials of the budget's roles, 1 race, 1 crash
    monkeypatch.setattr(stopping, "FREE_COMPILES", 1.0)
    assert stopping.free_compiles(3) == 3 and stopping.free_compiles(2) == 2
    assert counted_trials(s.runs, 3) == 4
    assert counted_trials(s.runs, 2) == 5  # two of the three are free
    assert counted_trials(s.runs, 10) == 4  # the three, and no more
    assert counted_trials(s.runs) == 7  # no target, nothing free
    monkeypatch.setattr(stopping, "FREE_COMPILES", 0.5)
    assert stopping.free_compiles(3) == 1 and counted_trials(s.runs, 3) == 6


def test_the_first_reading_of_a_process_ranks_without_a_kept_answer(monkeypatch):
    from autotune.results import ranking

    monkeypatch.setattr(ranking, "_LAST_PROGRAMS", None)  # as in a fresh process
    s = tiered_study()
    assert ranked(s.runs) == ranked(list(s.runs))  # the kept answer, and one computed anew
