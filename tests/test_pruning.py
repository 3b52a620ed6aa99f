"""Median pruning: the curve a study hands its search trials, the replay double and a real child
applying it (the rule itself is tested in-process in test_stopping)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from outcomes import paired_outcome

from autotune.flags.catalog import load_catalog
from autotune.flags.compose import config_key
from autotune.ground.protocol import Job
from autotune.ground.records import (
    Environment,
    OutcomeKind,
    Role,
    RunRecord,
    TrialOutcome,
)
from autotune.launch.launcher import SubprocessLauncher, TrialRequest
from autotune.launch.replay import ReplayTable, TableLauncher
from autotune.launch.workloads import resolve_benchmark
from autotune.rules.stopping import median_curve
from autotune.spaces import load_space
from autotune.storage import Store
from autotune.study.plan import StudyPlan
from autotune.study.runner import StudyRunner
from autotune.study.search import Search

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "benchmarks/tables/mlp-dp-small.json"  # 15 paired steps per recorded run
LEVEL = "xla_backend_optimization_level"
WIDTH = "xla_cpu_prefer_vector_width"
MEDIAN_WORDS = "the other trials' median after"


def paired(ratio: float, pairs: int, kind: OutcomeKind = OutcomeKind.OK) -> TrialOutcome:
    """A PAIRED outcome whose candidate runs `ratio` times the baseline's 10 ms at every pair."""
    return paired_outcome(ratio, baseline=(0.01,) * pairs, backend="cpu", device_count=8,
                          kind=kind, message="stopped" if kind is OutcomeKind.PRUNED else "",
                          duration_s=1.0)


def expected_curve(runs: Sequence[RunRecord]) -> tuple[float | None, ...] | None:
    """The curve by its definition: search and recommended runs, ok or pruned, PAIRED steps."""
    steps = [(r.outcome.measurement.step_times_s, r.outcome.measurement.baseline_step_times_s)
             for r in runs if r.role in (Role.SEARCH, Role.RECOMMENDED)
             and r.outcome.kind in (OutcomeKind.OK, OutcomeKind.PRUNED)
             and r.outcome.measurement is not None and r.outcome.measurement.timed_steps]
    curve = median_curve(steps)
    return tuple(curve) if any(c is not None for c in curve) else None


class CurveRecorder(TableLauncher):
    """A TableLauncher that keeps, per launch, the trial's role, the curve its request
    carried and the curve this environment's stored runs gave at that moment."""

    def __init__(self, table: ReplayTable, store: Store, seed: int) -> None:
        super().__init__(table, load_catalog(), seed=seed)
        self.store = store
        self.role: Role | None = None  # set by the search's request (patched below)
        self.seen: list[tuple[Role | None, Any, Any]] = []

    def launch(self, request: TrialRequest) -> TrialOutcome:
        expected = expected_curve(self.store.runs("s"))
        self.seen.append((self.role, request.job.prune_curve, expected))
        self.role = None
        return super().launch(request)


def test_search_trials_carry_the_curve_of_the_stored_runs_and_the_baseline_none(
        tmp_path, monkeypatch):
    table = ReplayTable.load(MLP)
    space = load_space(str(ROOT / table.meta["space"]))
    store = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}")
    launcher = CurveRecorder(table, store, seed=4)
    plan = StudyPlan.of(name="s", space=space,
                     workload=resolve_benchmark("mlp-dp"), sampler="random", seed=4, trials=16,
                     steps=15)
    runner = StudyRunner(plan, store, launcher, store.url)
    request = Search.request

    def tagged(self: Search, role: Role, *rest: Any, **named: Any) -> Any:
        launcher.role = role
        return request(self, role, *rest, **named)

    monkeypatch.setattr(Search, "request", tagged)
    runner.prepare()
    # Six search trials another process of this environment measured before the baseline ran
    # here: five timed 15 pairs, one pruned after 6 (it counts for 6 pairs only).
    env = Environment("here", "3.11", "0.10.2", "0.10.2", "cpu", "cpu", 8)
    earlier = [({LEVEL: 1}, paired(0.95, 15)), ({LEVEL: 2}, paired(1.0, 15)),
               ({WIDTH: 128}, paired(1.05, 15)), ({WIDTH: 512}, paired(1.1, 15)),
               ({"xla_cpu_use_fusion_emitters": False}, paired(1.2, 15)),
               ({LEVEL: 0}, paired(2.0, 6, OutcomeKind.PRUNED))]
    for flags, outcome in earlier:
        store.record_run("s", None, Role.SEARCH, flags, {}, outcome, env,
                         ratio=outcome.measurement.paired_ratio if outcome.ok else None,
                         env_key=runner.env_key)
    runner.run()

    roles = [role for role, _, _ in launcher.seen]
    assert roles[0] is Role.BASELINE and roles.count(Role.SEARCH) >= 5
    base_role, base_curve, base_expected = launcher.seen[0]
    assert base_expected is not None and base_curve is None  # the baseline is never pruned
    first_search = next(curve for role, curve, _ in launcher.seen if role is Role.SEARCH)
    assert first_search == pytest.approx([1.075] * 6 + [1.05] * 9)  # median of 6, then of 5
    for role, curve, expected in launcher.seen:
        if role is Role.SEARCH:
            assert curve == pytest.approx(expected)
        else:
            assert curve is None
    pruned = [r for r in store.runs("s", roles=[Role.SEARCH]) if r.trial_number is not None
              and r.outcome.kind is OutcomeKind.PRUNED]
    assert any(MEDIAN_WORDS in r.outcome.message for r in pruned)


def test_a_study_without_pruning_sends_no_curve(tmp_path):
    table = ReplayTable.load(MLP)
    space = load_space(str(ROOT / table.meta["space"]))
    store = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}")
    launcher = CurveRecorder(table, store, seed=2)
    plan = StudyPlan.of(name="s", space=space,
                     workload=resolve_benchmark("mlp-dp"), sampler="random", seed=2, trials=12,
                     steps=15, prune_margin=None)
    StudyRunner(plan, store, launcher, store.url).run()
    assert any(expected is not None for _, _, expected in launcher.seen)
    assert all(curve is None for _, curve, _ in launcher.seen)


def test_the_table_launcher_prunes_by_the_curve_where_the_margin_alone_would_not():
    table = ReplayTable.load(MLP)
    launcher = TableLauncher(table, load_catalog(), seed=1)
    slow = {LEVEL: 0}  # about 1.4x the baseline
    recorded = len(table.runs[config_key(slow)][0]["step_times_s"])
    request = TrialRequest(Path("w.py"), "small",
                           job=Job(prune_ratio=3.0, prune_curve=(1.1,) * recorded), flags=slow)
    outcome = launcher.launch(request)
    assert outcome.kind is OutcomeKind.PRUNED
    assert outcome.message.startswith("stopped after 6 paired steps: ")
    assert "above 1.100, the other trials' median after 6 steps" in outcome.message
    assert len(outcome.measurement.step_times_s) == len(
        outcome.measurement.baseline_step_times_s) == 6
    for curve in ((3.0,) * recorded, (None,) * recorded, None):
        again = TrialRequest(Path("w.py"), "small", job=Job(prune_ratio=3.0, prune_curve=curve),
                             flags=slow)
        assert launcher.launch(again).kind is OutcomeKind.OK


@pytest.mark.slow
def test_a_real_child_stops_above_the_curve_though_within_the_margin(workloads_dir):
    # The candidate is XLA's defaults against themselves: a ratio near 1.0, far within the
    # margin's 100x, but above a curve of 0.02 at every pair. The verdict takes the lowest
    # running ratio, which counts the first pair alone, so one stalled baseline step can
    # take it under the curve: on a busy machine a pair of 0.1 ms steps measured below 0.5,
    # and an 8-pair run of the large preset's millisecond steps once ended unpruned beside
    # the other slow tests under a curve of 0.2. Beside four CPU burners on two cores,
    # fifteen 8-pair runs' lowest running ratios were 0.685-0.988 (2026-12-07); 0.02
    # needs a first baseline step fifty times its candidate's.
    request = TrialRequest(workloads_dir / "toy.py", "large",
                           job=Job(steps=20, warmup=1, max_warmup=2, prune_ratio=100.0,
                                   prune_curve=(0.02,) * 20, compiler_options={}))
    outcome = SubprocessLauncher().launch(request)
    assert outcome.kind is OutcomeKind.PRUNED, outcome.message + outcome.stderr_tail
    assert "above 0.020, the other trials' median after" in outcome.message
    assert 6 <= len(outcome.measurement.step_times_s) < 20
    unpruned = TrialRequest(workloads_dir / "toy.py", "large",
                            job=Job(steps=8, warmup=1, max_warmup=2, prune_ratio=100.0,
                                    prune_curve=(None,) * 7 + (0.02,), compiler_options={}))
    # the curve limits the eighth pair only
    late = SubprocessLauncher().launch(unpruned)
    assert late.kind is OutcomeKind.PRUNED, late.message + late.stderr_tail
    assert "after 8 paired steps" in late.message
