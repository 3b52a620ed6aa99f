"""The rules of shrinking, in-process, from hand-made run records (mutation-tested).

The end-to-end study through a fake compiler is in test_shrink.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

import pytest

from autotune.flags.catalog import load_catalog
from autotune.ground.protocol import Job, ProtocolError
from autotune.ground.records import (
    FlagValue,
    Measurement,
    MeasureMode,
    OutcomeKind,
    Role,
    RunRecord,
    TrialOutcome,
)
from autotune.results.shrink import Effect, shrink

FAST = "xla_cpu_enable_fast_math"  # fast math: 0.8 of the time
WIDTH = "xla_cpu_prefer_vector_width"  # 512: another program, no faster
XNN = "xla_cpu_use_xnnpack"  # False, or FUSION False: the "x" feature, 0.9 of the time
FUSION = "xla_cpu_use_fusion_emitters"
REGION = "xla_cpu_copy_insertion_use_region_analysis"  # True: nothing changes
LEVEL = "xla_backend_optimization_level"  # 3 is XLA's default
WINNER: dict[str, FlagValue] = {FAST: True, WIDTH: 512, XNN: False, FUSION: False,
                                REGION: True, LEVEL: 3}
STEP_S = 1e-3


def features(flags: Mapping[str, FlagValue]) -> tuple[str, ...]:
    """The modelled program: which features the flags turn on."""
    found = []
    if flags.get(FAST):
        found.append("fast")
    if flags.get(WIDTH, 256) == 512:
        found.append("vec")
    if flags.get(XNN) is False or flags.get(FUSION) is False:
        found.append("x")
    return tuple(found)


def step_time(flags: Mapping[str, FlagValue]) -> float:
    time = STEP_S
    time *= 0.8 if "fast" in features(flags) else 1.0
    time *= 0.9 if "x" in features(flags) else 1.0
    return time




def run(number: int, role: Role, flags: dict, m: Measurement | None,
        kind: OutcomeKind = OutcomeKind.OK) -> RunRecord:
    return RunRecord(number, "s", 1, role, flags, {}, TrialOutcome(kind, "", m),
                     datetime(2026, 1, 1, tzinfo=UTC))


def compiled(fingerprint: str) -> Measurement:
    return Measurement((), 0.5, mode=MeasureMode.PAIRED, fingerprint=fingerprint)


def timed(ratio: float) -> Measurement:
    return Measurement((ratio,) * 4, 0.5, mode=MeasureMode.PAIRED,
                       baseline_step_times_s=(1.0,) * 4, fingerprint="f")


def test_a_smaller_set_not_confirmed_on_its_own_gives_way_to_the_confirmed_program():
    source = run(1, Role.SEARCH, {FAST: True, WIDTH: 512}, timed(0.8))
    runs = [source, run(2, Role.FINGERPRINT, {FAST: True, WIDTH: 512}, compiled("a")),
            run(3, Role.FINGERPRINT, {WIDTH: 512}, compiled("b")),
            run(4, Role.FINGERPRINT, {FAST: True}, compiled("c")),
            run(5, Role.ABLATION, {WIDTH: 512}, timed(1.0)),  # FAST: not slower without it
            run(6, Role.MINIMAL, {WIDTH: 512}, timed(1.0))]  # and alone: no gain
    state = shrink(runs, source, load_catalog(), repeats=1)
    assert state.done and state.minimal == {FAST: True, WIDTH: 512}
    assert [(r.flag, r.dropped) for r in state.removals] == [(FAST, False)]
    assert state.note is not None and "not confirmed at least 2.0% faster" in state.note
    assert state.check is None  # the figures stay the confirmed configuration's


def test_a_removal_that_fails_keeps_the_flag():
    source = run(1, Role.SEARCH, {FAST: True, WIDTH: 512}, timed(0.8))
    runs = [source, run(2, Role.FINGERPRINT, {FAST: True, WIDTH: 512}, compiled("a")),
            run(3, Role.FINGERPRINT, {WIDTH: 512}, compiled("b")),
            run(4, Role.FINGERPRINT, {FAST: True}, compiled("c")),
            run(5, Role.ABLATION, {WIDTH: 512}, None, OutcomeKind.CRASHED),
            run(6, Role.ABLATION, {FAST: True}, timed(1.3))]
    state = shrink(runs, source, load_catalog())
    assert state.done and state.minimal == {FAST: True, WIDTH: 512}
    assert [(r.flag, r.effect) for r in state.removals] == [(FAST, Effect.FAILED),
                                                            (WIDTH, Effect.SLOWER)]


def test_what_is_missing_is_the_next_step():
    source = run(1, Role.SEARCH, {FAST: True, WIDTH: 512}, timed(0.8))
    first = shrink([source], source, load_catalog(), repeats=3)
    assert first.next is not None and not first.next.timed
    assert first.next.flags == {FAST: True, WIDTH: 512}
    runs = [source, run(2, Role.FINGERPRINT, {FAST: True, WIDTH: 512}, compiled("a")),
            run(3, Role.FINGERPRINT, {WIDTH: 512}, compiled("b")),
            run(4, Role.FINGERPRINT, {FAST: True}, compiled("c")),
            run(5, Role.ABLATION, {WIDTH: 512}, timed(1.3))]
    step = shrink(runs, source, load_catalog(), repeats=3).next
    assert step is not None and step.role is Role.ABLATION and step.runs == 2
    assert step.reference == {FAST: True, WIDTH: 512}


def test_a_flag_only_the_environment_carries_is_not_shrunk():
    source = run(1, Role.SEARCH, {FAST: True, "TF_CPP_MIN_LOG_LEVEL": 2}, timed(0.8))
    state = shrink([source], source, load_catalog(), repeats=3)
    assert state.done and state.minimal == {FAST: True, "TF_CPP_MIN_LOG_LEVEL": 2}
    assert state.note is not None and "environment" in state.note


def test_a_job_takes_a_reference_only_when_paired():
    assert Job.from_json(Job(compiler_options={FAST: True},
                             reference_options={WIDTH: 512}).to_json()).reference_options == {
        WIDTH: 512}
    with pytest.raises(ProtocolError, match="reference_options"):
        Job(compiler_options=None, reference_options={WIDTH: 512})




def test_one_changed_flag_is_already_minimal_and_needs_no_run():
    source = run(1, Role.SEARCH, {FAST: True, LEVEL: 3}, timed(0.8))
    state = shrink([source], source, load_catalog(), repeats=3)
    assert state.done and state.minimal == {FAST: True}
    assert [(r.flag, r.effect) for r in state.removals] == [(LEVEL, Effect.DEFAULT)]


def model_run(number: int, role: Role, flags: dict, reference: dict | None) -> RunRecord:
    """A run as the modelled compiler answers it: compile only, or timed against
    `reference` (XLA's defaults when None)."""
    fingerprint = "-".join(features(flags)) or "base"
    if role is Role.FINGERPRINT:
        return run(number, role, flags, compiled(fingerprint))
    ref = reference or {}
    m = Measurement((step_time(flags),) * 4, 0.5, mode=MeasureMode.PAIRED,
                    baseline_step_times_s=(step_time(ref),) * 4, fingerprint=fingerprint)
    return run(number, role, flags, m)


def drive(winner: dict, repeats: int = 2) -> tuple[object, list[RunRecord]]:
    """Shrink `winner` against the model, making each run shrinking asks for. A shrink
    still asking for runs after 100 steps never ends (a step its runs do not answer): it
    fails."""
    source = run(1, Role.SEARCH, winner, timed(0.7))
    runs = [source]
    state = shrink(runs, source, load_catalog(), repeats)
    for _ in range(100):
        if state.next is None:
            break
        step = state.next
        for _ in range(step.runs):
            runs.append(model_run(len(runs) + 1, step.role, dict(step.flags),
                                  dict(step.reference) if step.reference else None))
        state = shrink(runs, source, load_catalog(), repeats)
    if state.next is not None:
        raise AssertionError(f"shrinking still asks for runs after 100 steps: {state.next}")
    return state, runs


def test_shrinking_drives_to_the_flags_that_matter_in_process():
    state, runs = drive(WINNER)
    assert state.minimal == {FAST: True, XNN: False}  # type: ignore[attr-defined]
    assert [(r.flag, r.effect, r.dropped) for r in state.removals] == [  # type: ignore[attr-defined]
        (LEVEL, Effect.DEFAULT, True),
        (REGION, Effect.NO_PROGRAM_CHANGE, True),
        (FUSION, Effect.NO_PROGRAM_CHANGE, True),
        (FAST, Effect.SLOWER, False),
        (WIDTH, Effect.NOT_SLOWER, True),
        (XNN, Effect.SLOWER, False),
    ]
    roles = [r.role for r in runs[1:]]
    assert roles == [Role.FINGERPRINT] * 6 + [Role.ABLATION] * 6 + [Role.MINIMAL] * 2
    assert state.check is not None and state.check.ratio == pytest.approx(0.72)  # type: ignore
    # each removal is timed against the set it was removed from
    ablations = [r for r in runs if r.role is Role.ABLATION]
    assert [sorted(r.flags) for r in ablations[::2]] == [
        [WIDTH, XNN], [FAST, XNN], [FAST]]


def test_a_set_only_dropped_by_program_keeps_the_confirmation_and_needs_no_check():
    state, runs = drive({FAST: True, REGION: True})
    assert state.minimal == {FAST: True} and state.check is None  # type: ignore[attr-defined]
    assert not any(r.role is Role.MINIMAL for r in runs)


def test_with_no_fingerprint_a_flag_is_never_dropped_for_its_program():
    source = run(1, Role.SEARCH, {FAST: True, WIDTH: 512}, timed(0.8))
    runs = [source, run(2, Role.FINGERPRINT, {FAST: True, WIDTH: 512}, None, OutcomeKind.CRASHED),
            run(3, Role.FINGERPRINT, {WIDTH: 512}, None, OutcomeKind.CRASHED),
            run(4, Role.FINGERPRINT, {FAST: True}, None, OutcomeKind.CRASHED)]
    step = shrink(runs, source, load_catalog(), repeats=1).next
    assert step is not None and step.role is Role.ABLATION and step.runs == 1


def test_every_state_on_the_way_keeps_what_was_found_so_far():
    final, runs = drive(WINNER)
    source = runs[0]
    found = [(r.flag, r.value, r.effect, r.dropped) for r in final.removals]  # type: ignore
    assert found == [(LEVEL, 3, Effect.DEFAULT, True), (REGION, True, Effect.NO_PROGRAM_CHANGE,
                                                        True),
                     (FUSION, False, Effect.NO_PROGRAM_CHANGE, True),
                     (FAST, True, Effect.SLOWER, False), (WIDTH, 512, Effect.NOT_SLOWER, True),
                     (XNN, False, Effect.SLOWER, False)]
    assert all(r.estimate is not None for r in final.removals[3:])  # type: ignore[attr-defined]
    for cut in range(1, len(runs)):  # replaying any prefix gives a prefix of the findings
        state = shrink(runs[:cut], source, load_catalog(), 2)
        assert state.trial_number == 1 and state.next is not None
        seen = [(r.flag, r.value, r.effect, r.dropped) for r in state.removals]
        assert seen == found[:len(seen)]
    after_region = shrink(runs[:3], source, load_catalog(), 2)  # full, then without REGION
    assert [r.flag for r in after_region.removals] == [LEVEL, REGION]
    assert after_region.next is not None and after_region.next.role is Role.FINGERPRINT
    _, runs3 = drive(WINNER, repeats=3)
    three = shrink(runs3[:-2], runs3[0], load_catalog(), 3)  # one check run of three made
    assert three.next is not None and three.next.role is Role.MINIMAL and three.next.runs == 2
    partial = shrink(runs[:-1], source, load_catalog(), 2)  # one check run of two made
    assert partial.next is not None and partial.next.role is Role.MINIMAL
    assert partial.next.runs == 1 and partial.next.reference is None
    assert len(partial.removals) == 6


def test_a_failed_check_keeps_what_step_two_dropped_but_not_what_the_program_showed():
    full = {FAST: True, WIDTH: 512, REGION: True}
    source = run(1, Role.SEARCH, full, timed(0.8))
    runs = [source, run(2, Role.FINGERPRINT, full, compiled("a")),
            run(3, Role.FINGERPRINT, {FAST: True, WIDTH: 512}, compiled("a")),  # REGION: same
            run(4, Role.FINGERPRINT, {WIDTH: 512}, compiled("b")),
            run(5, Role.FINGERPRINT, {FAST: True}, compiled("c")),
            run(6, Role.ABLATION, {WIDTH: 512}, timed(1.0)),  # FAST: not slower without it
            run(7, Role.MINIMAL, {WIDTH: 512}, timed(1.0))]  # but {WIDTH} alone: no gain
    state = shrink(runs, source, load_catalog(), repeats=1)
    assert state.done and state.minimal == {FAST: True, WIDTH: 512} and state.check is None
    assert [(r.flag, r.value, r.effect, r.dropped) for r in state.removals] == [
        (REGION, True, Effect.NO_PROGRAM_CHANGE, True), (FAST, True, Effect.NOT_SLOWER, False)]
    assert state.removals[1].estimate is not None
    assert state.note == ("the smaller set was not confirmed at least 2.0% faster (3.0% by "
                          "its estimate) than XLA's defaults on its own: the flags whose "
                          "removal did not measurably slow it stay")


@pytest.mark.parametrize("second", [
    run(7, Role.ABLATION, {WIDTH: 512}, None, OutcomeKind.CRASHED),  # one of two failed
    run(7, Role.ABLATION, {WIDTH: 512}, Measurement((1.0,) * 4, 0.5, mode=MeasureMode.PAIRED)),
    run(7, Role.ABLATION, {WIDTH: 512}, Measurement((), 0.5, mode=MeasureMode.PAIRED,
                                                    baseline_step_times_s=(1.0,) * 4)),
])
def test_a_removal_is_judged_only_on_runs_that_all_timed_both_sides(second):
    source = run(1, Role.SEARCH, {FAST: True, WIDTH: 512}, timed(0.8))
    runs = [source, run(2, Role.FINGERPRINT, {FAST: True, WIDTH: 512}, compiled("a")),
            run(3, Role.FINGERPRINT, {WIDTH: 512}, compiled("b")),
            run(4, Role.FINGERPRINT, {FAST: True}, compiled("c")),
            run(5, Role.ABLATION, {WIDTH: 512}, timed(0.5)), second]
    state = shrink(runs, source, load_catalog(), repeats=2)
    first = state.removals[0]
    assert (first.flag, first.value, first.effect, first.dropped) == (FAST, True, Effect.FAILED,
                                                                      False)


def test_a_removal_whose_interval_holds_one_is_not_slower_whatever_its_ratio():
    source = run(1, Role.SEARCH, {FAST: True, WIDTH: 512}, timed(0.8))
    wide = Measurement((1.2, 0.9, 1.3, 0.8), 0.5, mode=MeasureMode.PAIRED,
                       baseline_step_times_s=(1.0,) * 4, fingerprint="f")
    runs = [source, run(2, Role.FINGERPRINT, {FAST: True, WIDTH: 512}, compiled("a")),
            run(3, Role.FINGERPRINT, {WIDTH: 512}, compiled("b")),
            run(4, Role.FINGERPRINT, {FAST: True}, compiled("c")),
            run(5, Role.ABLATION, {WIDTH: 512}, wide)]
    first = shrink(runs, source, load_catalog(), repeats=1).removals[0]
    assert first.estimate is not None and first.estimate.includes_one
    assert first.estimate.ratio > 1 and first.effect is Effect.NOT_SLOWER and first.dropped


def test_a_failed_compile_that_names_the_same_fingerprint_does_not_drop_a_flag():
    source = run(1, Role.SEARCH, {FAST: True, WIDTH: 512}, timed(0.8))
    runs = [source, run(2, Role.FINGERPRINT, {FAST: True, WIDTH: 512}, compiled("a")),
            run(3, Role.FINGERPRINT, {WIDTH: 512}, compiled("a"), OutcomeKind.CRASHED)]
    state = shrink(runs, source, load_catalog(), repeats=1)
    assert state.removals == [] and state.next is not None
    assert state.next.flags == {FAST: True}  # FAST stayed; WIDTH's compile comes next


def test_only_this_trials_shrink_runs_are_read_and_notes_say_why_nothing_was_done():
    source = run(1, Role.SEARCH, {FAST: True, WIDTH: 512}, timed(0.8))
    other = replace_trial(run(2, Role.FINGERPRINT, {FAST: True, WIDTH: 512}, compiled("a")), 2)
    search = run(3, Role.SEARCH, {FAST: True, WIDTH: 512}, timed(0.8))
    state = shrink([source, other, search], source, load_catalog(), repeats=1)
    assert state.trial_number == 1 and state.next is not None and state.next.role is (
        Role.FINGERPRINT)
    assert state.next.flags == {FAST: True, WIDTH: 512}  # the other trial's compile is not its
    nothing = run(1, Role.SEARCH, {LEVEL: 3}, timed(0.8))
    assert shrink([nothing], nothing, load_catalog()).note == "nothing to shrink"
    one = run(1, Role.SEARCH, {FAST: True}, timed(0.8))
    assert shrink([one], one, load_catalog()).note is None
    env = run(1, Role.SEARCH, {FAST: True, "TF_CPP_MIN_LOG_LEVEL": 2}, timed(0.8))
    assert shrink([env], env, load_catalog()).note == (
        "not shrunk: a flag that only the environment carries cannot be compared with the "
        "rest in one process")


def replace_trial(r: RunRecord, number: int) -> RunRecord:
    from dataclasses import replace

    return replace(r, trial_number=number)


@pytest.mark.parametrize("check", [
    Measurement((0.8, 1.2, 0.7, 1.1), 0.5, mode=MeasureMode.PAIRED,
                baseline_step_times_s=(1.0,) * 4, fingerprint="f"),  # faster-looking, holds 1
    Measurement((1.3,) * 4, 0.5, mode=MeasureMode.PAIRED, baseline_step_times_s=(1.0,) * 4,
                fingerprint="f"),  # measurably slower
])
def test_the_check_holds_only_for_an_interval_wholly_faster(check):
    full = {FAST: True, WIDTH: 512}
    source = run(1, Role.SEARCH, full, timed(0.8))
    runs = [source, run(2, Role.FINGERPRINT, full, compiled("a")),
            run(3, Role.FINGERPRINT, {WIDTH: 512}, compiled("b")),
            run(4, Role.FINGERPRINT, {FAST: True}, compiled("c")),
            run(5, Role.ABLATION, {WIDTH: 512}, timed(1.0)),
            run(6, Role.MINIMAL, {WIDTH: 512}, check)]
    state = shrink(runs, source, load_catalog(), repeats=1)
    assert state.done and state.check is None and state.minimal == full


def test_a_removal_says_why_in_one_sentence():
    from autotune.results.shrink import Removal
    from autotune.rules.stats import RatioEstimate

    assert Removal(FAST, True, Effect.NO_PROGRAM_CHANGE, True).reason() == (
        "no effect on the compiled program")
    est = RatioEstimate(1.25, 1.2, 1.3, 0.95, 3, 24)
    assert Removal(FAST, True, Effect.SLOWER, False, est).reason() == (
        "removing it measurably slows the configuration: ×1.250 [1.200, 1.300] without it")
