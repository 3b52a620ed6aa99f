"""Shrinking the recommended configuration to the flags that matter.

`FakeCompilerLauncher` stands in for XLA (named so: a fake). It models a
workload whose compiled program has three features: fast math, a vector
width, and one that either of two flags turns on. Steps are constant, so
every interval is a point and every verdict is known from the model.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from test_shrink_rules import FAST, FUSION, LEVEL, REGION, WIDTH, WINNER, XNN, features, step_time
from typer.testing import CliRunner

from autotune.cli import app
from autotune.ground.records import (
    Measurement,
    MeasureMode,
    OutcomeKind,
    Role,
    TrialOutcome,
)
from autotune.launch.launcher import Launcher, TrialRequest
from autotune.launch.workloads import resolve_benchmark
from autotune.results.shrink import Effect
from autotune.spaces import load_space
from autotune.storage import Store
from autotune.study.plan import StudyPlan
from autotune.study.runner import StudyRunner


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
    for _ in range(4):
        store.record_run("s", 1, Role.CONFIRM, WINNER, {}, launcher.launch(search))
    launcher.requests.clear()
    plan = StudyPlan.of(name="s", space=load_space("cpu"), preset="tiny",
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
    assert all(r.reference is None and r.job.reference_options is None
               for r in launcher.requests[-3:])
    assert launcher.requests[6].job.reference_options == {FAST: True, WIDTH: 512, XNN: False}


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
