"""Shrinking the recommended configuration to the flags that matter.

`FakeCompilerLauncher` stands in for XLA (named so: a fake). It models a
workload whose compiled program has three features: fast math, a vector
width, and one that either of two flags turns on. Steps are constant, so
every interval is a point and every verdict is known from the model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from autotune.cli import app
from autotune.flags.catalog import load_catalog
from autotune.launcher import Launcher, TrialRequest
from autotune.protocol import Job, ProtocolError
from autotune.records import (
    FlagValue,
    Measurement,
    MeasureMode,
    OutcomeKind,
    Role,
    RunRecord,
    TrialOutcome,
)
from autotune.results.shrink import Effect, shrink
from autotune.spaces import load_space
from autotune.storage import Store
from autotune.study import StudyPlan, StudyRunner
from autotune.workloads import resolve_benchmark

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


class FakeCompilerLauncher(Launcher):
    """A fake of XLA and the trial child (no JAX): compiles to `features`, times by
    `step_time`, against the request's reference configuration (XLA's defaults
    unless given). Records every request."""

    def __init__(self) -> None:
        self.requests: list[TrialRequest] = []

    def launch(self, request: TrialRequest) -> TrialOutcome:
        self.requests.append(request)
        fingerprint = "-".join(features(request.flags)) or "base"
        if not request.timed:
            return TrialOutcome(OutcomeKind.OK, "", Measurement(
                (), 0.5, mode=MeasureMode.PAIRED, fingerprint=fingerprint))
        reference = request.reference or {}
        m = Measurement((step_time(request.flags),) * 8, 0.5, mode=MeasureMode.PAIRED,
                        baseline_step_times_s=(step_time(reference),) * 8,
                        fingerprint=fingerprint,
                        baseline_fingerprint="-".join(features(reference)) or "base")
        return TrialOutcome(OutcomeKind.OK, "", m)


def confirmed_winner(tmp_path: Path) -> tuple[StudyRunner, Store, FakeCompilerLauncher]:
    """A study whose search found WINNER (trial 1) and confirmed it at 0.72 of the time."""
    url = f"sqlite:///{tmp_path / 'autotune.db'}"
    store = Store.open(url)
    store.ensure_study("s", "cpu", "matmul", "tiny", 1, MeasureMode.PAIRED, "cpu")
    launcher = FakeCompilerLauncher()
    base = TrialRequest(Path("w.py"), "tiny", flags={})
    store.record_run("s", 0, Role.BASELINE, {}, {}, launcher.launch(base))
    search = replace(base, flags=WINNER)
    store.record_run("s", 1, Role.SEARCH, WINNER, {}, launcher.launch(search))
    for _ in range(3):
        store.record_run("s", 1, Role.CONFIRM, WINNER, {}, launcher.launch(search))
    launcher.requests.clear()
    plan = StudyPlan(name="s", space_name="cpu", space=load_space("cpu"), preset="tiny",
                     workload=resolve_benchmark("matmul"), trials=2)
    return StudyRunner(plan, store, launcher, url), store, launcher


def test_shrinking_keeps_only_the_flags_whose_removal_measurably_slows_it(tmp_path):
    runner, _, launcher = confirmed_winner(tmp_path)
    state = runner.shrink(repeats=3)
    assert state is not None and state.done and state.note is None
    assert state.minimal == {FAST: True, XNN: False}
    why = {r.flag: (r.effect, r.dropped) for r in state.removals}
    assert why == {
        LEVEL: (Effect.DEFAULT, True),
        REGION: (Effect.NO_PROGRAM_CHANGE, True),
        FUSION: (Effect.NO_PROGRAM_CHANGE, True),  # XNN still gives the "x" feature
        WIDTH: (Effect.NOT_SLOWER, True),  # another program, no faster
        FAST: (Effect.SLOWER, False),
        XNN: (Effect.SLOWER, False),  # the last of the pair: removing it loses "x"
    }
    fast = next(r for r in state.removals if r.flag == FAST)
    assert fast.estimate is not None and fast.estimate.ratio == pytest.approx(1.25)
    assert fast.reason() == ("removing it measurably slows the configuration: ×1.250 "
                             "[1.250, 1.250] without it")
    assert state.check is not None and state.check.ratio == pytest.approx(0.72)
    # 6 compiles (the winner, then without each flag), 3 timed runs per flag timed
    # (FAST, WIDTH, XNN), then the smaller set against the defaults 3 times
    timed = [r.timed for r in launcher.requests]
    assert timed == [False] * 6 + [True] * 12
    assert all(r.reference is None and r.reference_options is None
               for r in launcher.requests[-3:])
    assert launcher.requests[6].reference_options == {FAST: True, WIDTH: 512, XNN: False}


def test_shrinking_again_measures_nothing_more(tmp_path):
    runner, _, launcher = confirmed_winner(tmp_path)
    first = runner.shrink(repeats=3)
    count = len(launcher.requests)
    again = runner.shrink(repeats=3)
    assert again == first and len(launcher.requests) == count


def test_the_export_holds_the_minimal_set_and_what_was_dropped_and_why(tmp_path):
    runner, store, _ = confirmed_winner(tmp_path)
    runner.shrink(repeats=3)
    result = CliRunner().invoke(app, ["export", "s", "-o", "-", "--storage", store.url])
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(result.output)
    assert doc["recommended"] is True and doc["flags"] == {FAST: True, XNN: False}
    assert doc["xla_flags"] == f"--{FAST}=true --{XNN}=false"
    assert doc["full_flags"] == WINNER
    dropped = {d["flag"]: d["why"] for d in doc["dropped"]}
    assert dropped[REGION] == "no effect on the compiled program"
    assert dropped[LEVEL] == "XLA's default value"
    assert dropped[WIDTH].startswith("removing it did not measurably slow the configuration")
    assert set(dropped) == {LEVEL, REGION, FUSION, WIDTH}
    assert [k["flag"] for k in doc["kept"]] == [FAST, XNN]
    assert doc["measured"]["speedup"] == pytest.approx(1 / 0.72)
    assert doc["measured"]["confirmed"] is True


# --- the rules, from hand-made runs -----------------------------------------------------------


def run(number: int, role: Role, flags: dict, m: Measurement | None,
        kind: OutcomeKind = OutcomeKind.OK) -> RunRecord:
    from datetime import UTC, datetime

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
    assert state.note is not None and "not confirmed faster" in state.note
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


def test_importance_reports_each_flags_paired_contribution(tmp_path):
    import json

    import optuna

    runner, store, _ = confirmed_winner(tmp_path)
    runner.shrink(repeats=3)
    optuna.create_study(study_name="s", storage=store.url)
    shown = CliRunner().invoke(app, ["importance", "s", "--storage", store.url])
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert (f"{FAST}=true ×1.250 [1.250, 1.250] without it: measurable (kept)") in text
    assert f"{REGION}=true no effect on the compiled program (dropped)" in text
    assert (f"{WIDTH}=512 ×1.000 [1.000, 1.000] without it: no measurable effect "
            "(dropped)") in text
    result = CliRunner().invoke(app, ["importance", "s", "--format", "json",
                                      "--storage", store.url])
    ablation = json.loads(result.output)["ablation"]
    assert ablation["trial"] == 1 and ablation["done"] is True
    measurable = {f["flag"] for f in ablation["flags"] if f["measurable"]}
    assert measurable == {FAST, XNN}
    assert sorted(ablation["flags"][0]) == ["dropped", "effect", "flag", "interval",
                                            "measurable", "ratio", "value"]


def test_one_changed_flag_is_already_minimal_and_needs_no_run():
    source = run(1, Role.SEARCH, {FAST: True, LEVEL: 3}, timed(0.8))
    state = shrink([source], source, load_catalog(), repeats=3)
    assert state.done and state.minimal == {FAST: True}
    assert [(r.flag, r.effect) for r in state.removals] == [(LEVEL, Effect.DEFAULT)]
