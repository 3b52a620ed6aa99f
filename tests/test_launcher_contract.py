"""The `Launcher` contract, one test per promise, parametrised over every implementation.

`autotune.launch.launcher.Launcher`: `launch(request)` returns a `TrialOutcome` for every
configuration, good or bad, whose kind says what happened; an ok outcome carries what
was measured (positive, finite step times; PAIRED requests time the baseline too); a
compile-only request (`timed=False`) times nothing. The implementations: the real one
(a trial child in a subprocess, slow), the replaying ones of `autotune.launch.replay`, and the
home-made launchers of the tests, which stand in for them elsewhere.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from child_env import cpu_child_env
from outcomes import paired_outcome, trial_request
from test_fit_study import Profiled
from test_heartbeat import SlowLauncher
from test_pruning import MLP, CurveRecorder
from test_search import ModelLauncher, tradeoff
from test_shrink import FakeCompilerLauncher

from autotune.flags.catalog import load_catalog
from autotune.ground.protocol import Job
from autotune.ground.records import Measurement, MeasureMode, OutcomeKind, TrialOutcome
from autotune.launch.launcher import Launcher, SubprocessLauncher, TrialRequest
from autotune.launch.replay import ReplayLauncher, ReplayTable, TableLauncher, config_key
from autotune.launch.workloads import resolve_benchmark
from autotune.storage import Store

ROOT = Path(__file__).resolve().parents[1]
#: A flag neither XLA nor any recorded table knows.
UNKNOWN = {"xla_no_such_flag": True}


@dataclass(frozen=True)
class Implementation:
    """How to build one launcher and the requests it can answer.

    `compile_only` and `refuses`, where set, say why the implementation does not model
    compile-only requests or configurations it cannot run (those checks are skipped).
    """

    make: Callable[[Path], Launcher]
    workload: Path
    preset: str
    fields: Mapping[str, Any] = field(default_factory=dict)
    compile_only: str | None = None
    refuses: str | None = None

    def request(self, flags: Mapping[str, Any] | None = None, **fields: Any) -> TrialRequest:
        return trial_request(self.workload, self.preset, flags=dict(flags or {}),
                             **{**self.fields, **fields})


def _real_child(_: Path) -> Launcher:
    return SubprocessLauncher()


def _table(_: Path) -> Launcher:
    return TableLauncher(ReplayTable.load(MLP), load_catalog(), seed=0)


def _replay(_: Path) -> Launcher:
    recorded = paired_outcome(0.9, fingerprint="fast", baseline_fingerprint="base")
    return ReplayLauncher({config_key({}): [recorded]})


def _store(tmp_path: Path) -> Store:
    """A database with study `s`, which the launchers that look at the store read."""
    store = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}")
    store.ensure_study("s", "cpu", "matmul", "tiny", 1, MeasureMode.PAIRED, "cpu")
    return store


def _curve_recorder(tmp_path: Path) -> Launcher:
    return CurveRecorder(ReplayTable.load(MLP), _store(tmp_path), seed=0)


def _slow(tmp_path: Path) -> Launcher:
    return SlowLauncher(_store(tmp_path), 0.0)


MATMUL = resolve_benchmark("matmul").path
MLP_DP = resolve_benchmark("mlp-dp").path
FAKE = Path("w.py")  # the fakes run nothing: any workload
ANSWERS_EVERYTHING = "{} models no failure: it answers every configuration"
TIMES_EVERYTHING = "{} models no compile-only request: it times every request"

IMPLEMENTATIONS = [
    pytest.param(Implementation(
        _real_child, MATMUL, "tiny",
        fields={"steps": 3, "warmup": 1, "max_warmup": 3, "timeout_s": 120.0,
                "env": cpu_child_env(1)}),
        id="subprocess-real-child", marks=pytest.mark.slow),
    pytest.param(Implementation(_table, MLP_DP, "small"), id="table"),
    pytest.param(Implementation(
        _replay, FAKE, "tiny",
        compile_only="ReplayLauncher hands out the outcomes it was given, whatever the "
                     "request asks: it does not model compile-only requests"),
        id="replay"),
    pytest.param(Implementation(_curve_recorder, MLP_DP, "small"), id="test_pruning-CurveRecorder"),
    pytest.param(Implementation(lambda _: Profiled(), MLP_DP, "small"),
                 id="test_fit_study-Profiled"),
    pytest.param(Implementation(lambda _: FakeCompilerLauncher(), FAKE, "tiny",
                                refuses=ANSWERS_EVERYTHING.format("FakeCompilerLauncher")),
                 id="test_shrink-FakeCompilerLauncher"),
    pytest.param(Implementation(lambda _: ModelLauncher(tradeoff), FAKE, "tiny",
                                compile_only=TIMES_EVERYTHING.format("ModelLauncher"),
                                refuses=ANSWERS_EVERYTHING.format("ModelLauncher")),
                 id="test_search-ModelLauncher"),
    pytest.param(Implementation(_slow, FAKE, "tiny",
                                compile_only=TIMES_EVERYTHING.format("SlowLauncher"),
                                refuses=ANSWERS_EVERYTHING.format("SlowLauncher")),
                 id="test_heartbeat-SlowLauncher"),
]

#: Every implementation above, by class name (the check below finds every one there is).
COVERED = {"SubprocessLauncher", "TableLauncher", "ReplayLauncher", "CurveRecorder", "Profiled",
           "FakeCompilerLauncher", "ModelLauncher", "SlowLauncher"}


@pytest.fixture(params=IMPLEMENTATIONS)
def implementation(request: pytest.FixtureRequest) -> Implementation:
    return request.param


# --- the checks ---------------------------------------------------------------------------


def launched(launcher: Launcher, request: TrialRequest) -> TrialOutcome:
    """`launcher.launch(request)`, which must return an outcome of a known kind, never raise."""
    name = type(launcher).__name__
    try:
        outcome = launcher.launch(request)
    except Exception as exc:  # the contract: an outcome for every configuration
        pytest.fail(f"{name}.launch raised {exc!r} instead of returning an outcome")
    assert isinstance(outcome, TrialOutcome), f"{name}.launch returned {outcome!r}"
    assert isinstance(outcome.kind, OutcomeKind), f"{name}: kind {outcome.kind!r}"
    return outcome


def positive_finite(steps: tuple[float, ...]) -> bool:
    return bool(steps) and all(math.isfinite(t) and t > 0 for t in steps)


def assert_measured(outcome: TrialOutcome) -> Measurement:
    """An ok outcome with timed steps, each positive and finite."""
    assert outcome.ok, f"{outcome.kind}: {outcome.message} {outcome.stderr_tail}"
    m = outcome.measurement
    assert isinstance(m, Measurement), f"an ok outcome without a measurement: {m!r}"
    assert positive_finite(m.step_times_s), m.step_times_s
    return m


def assert_paired(outcome: TrialOutcome) -> None:
    """An ok PAIRED measurement: the candidate's steps and the in-process baseline's."""
    m = assert_measured(outcome)
    assert m.mode is MeasureMode.PAIRED
    assert positive_finite(m.baseline_step_times_s), m.baseline_step_times_s


# --- the contract -------------------------------------------------------------------------


def test_a_configuration_it_can_run_is_an_ok_outcome_with_positive_finite_steps(
        implementation: Implementation, tmp_path: Path) -> None:
    launcher = implementation.make(tmp_path)
    assert_measured(launched(launcher, implementation.request()))


def test_a_paired_request_times_the_baseline_beside_the_candidate(
        implementation: Implementation, tmp_path: Path) -> None:
    launcher = implementation.make(tmp_path)
    assert_paired(launched(launcher, implementation.request(compiler_options={})))


def test_a_compile_only_request_times_nothing(
        implementation: Implementation, tmp_path: Path) -> None:
    if implementation.compile_only:
        pytest.skip(implementation.compile_only)
    launcher = implementation.make(tmp_path)
    outcome = launched(launcher, implementation.request(compiler_options={}, timed=False))
    assert outcome.ok, f"{outcome.kind}: {outcome.message} {outcome.stderr_tail}"
    m = outcome.measurement
    assert m is not None and m.fingerprint  # what it is for: the program's fingerprint
    assert m.step_times_s == () and m.baseline_step_times_s == () and m.timed_steps == 0


def test_a_configuration_it_cannot_run_is_a_failed_outcome_not_an_exception(
        implementation: Implementation, tmp_path: Path) -> None:
    if implementation.refuses:
        pytest.skip(implementation.refuses)
    launcher = implementation.make(tmp_path)
    outcome = launched(launcher, implementation.request(UNKNOWN, compiler_options=UNKNOWN))
    assert not outcome.ok and outcome.message, outcome


def test_a_series_launched_together_gets_what_each_gets_alone(
        implementation: Implementation, tmp_path: Path) -> None:
    """`launch_all` (one child compiles a fit's series, `SubprocessLauncher`): in order,
    each request's outcome as `launch` gives it, a configuration it cannot run included."""
    if implementation.compile_only:
        pytest.skip(implementation.compile_only)
    configs = [{}] + ([] if implementation.refuses else [UNKNOWN]) + [{}]
    requests = [implementation.request(c, compiler_options=c, timed=False) for c in configs]
    launcher = implementation.make(tmp_path)
    together = launcher.launch_all(requests)
    (tmp_path / "alone").mkdir()
    alone = [launched(implementation.make(tmp_path / "alone"), r) for r in requests]
    assert [o.kind for o in together] == [o.kind for o in alone]
    assert [o.measurement and o.measurement.fingerprint for o in together] == [
        o.measurement and o.measurement.fingerprint for o in alone]
    assert together[0].ok and together[0].measurement.step_times_s == ()


# --- the contract test itself -------------------------------------------------------------


class ReturnsNone(Launcher):
    def launch(self, request: TrialRequest) -> TrialOutcome:
        return None  # type: ignore[return-value]


class Raises(Launcher):
    def launch(self, request: TrialRequest) -> TrialOutcome:
        raise RuntimeError("unknown flag")


class KindAsText(Launcher):
    def launch(self, request: TrialRequest) -> TrialOutcome:
        return paired_outcome(kind="ok")  # type: ignore[arg-type]


class NanSteps(Launcher):
    def launch(self, request: TrialRequest) -> TrialOutcome:
        return paired_outcome(steps=(1e-3, math.nan))


class DirectOnly(Launcher):
    def launch(self, request: TrialRequest) -> TrialOutcome:
        return TrialOutcome(OutcomeKind.OK, "", Measurement((1e-3,), 0.1))


@pytest.mark.parametrize(("broken", "check"), [
    (ReturnsNone(), assert_measured), (Raises(), assert_measured),
    (KindAsText(), assert_measured), (NanSteps(), assert_measured),
    (DirectOnly(), assert_paired)], ids=lambda x: type(x).__name__ if isinstance(
        x, Launcher) else x.__name__)
def test_the_contract_fails_a_launcher_that_breaks_it(
        broken: Launcher, check: Callable[[TrialOutcome], object]) -> None:
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        check(launched(broken, TrialRequest(FAKE, "tiny", job=Job(compiler_options={}))))


def _launcher_classes(folder: Path) -> set[str]:
    """The classes defined in `folder`'s Python files on a launcher base, by name."""
    bases = {"Launcher", "SubprocessLauncher", "TableLauncher", "ReplayLauncher"}
    found = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.Name) and b.id in bases for b in node.bases):
                found.add(node.name)
    return found


def test_every_launcher_implementation_is_in_the_contract() -> None:
    this = {"ReturnsNone", "Raises", "KindAsText", "NanSteps", "DirectOnly"}
    assert _launcher_classes(ROOT / "autotune") | (_launcher_classes(ROOT / "tests") - this) \
        == COVERED
