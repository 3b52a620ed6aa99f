"""The search: samplers, objectives, budgets, no repeated trials, heartbeats (no JAX).

Trials are answered by launchers that replay outcomes (the double for the trial
child); the study, Optuna, SQLite and the CLI are real.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import optuna
import pytest
from bench_scripts import script
from typer.testing import CliRunner

from autotune.cli import app
from autotune.flags.catalog import load_catalog
from autotune.flags.compose import config_key, effective_config
from autotune.ground.errors import UsageError
from autotune.ground.protocol import Job
from autotune.ground.records import (
    FlagValue,
    Measurement,
    MeasureMode,
    OutcomeKind,
    Role,
    TrialOutcome,
)
from autotune.launch.launcher import Launcher, TrialRequest
from autotune.launch.workloads import resolve_benchmark
from autotune.spaces import load_space
from autotune.storage import Store
from autotune.study.measured import BUDGET_ROLES
from autotune.study.plan import StudyPlan
from autotune.study.race import RACE_RETRIES
from autotune.study.runner import StudyRunner
from autotune.study.samplers import Objective, choose_sampler, parse_objectives

SMALL = """schema_version: 1
name: small
description: two CPU flags
backend: cpu
params:
  xla_backend_optimization_level: {type: categorical, choices: [0, 1, 2, 3], allow_unset: true}
  xla_cpu_enable_fast_math: {type: bool}
"""
LEVEL = "xla_backend_optimization_level"
FAST = "xla_cpu_enable_fast_math"
MiB = 1 << 20


def outcome(ratio: float, memory: int, seed: int = 0) -> TrialOutcome:
    """A paired measurement with this ratio (about 1% noise) and peak memory."""
    rng = random.Random(seed)
    base = tuple(0.01 * rng.gauss(1.0, 0.01) for _ in range(12))
    cand = tuple(0.01 * ratio * rng.gauss(1.0, 0.01) for _ in range(12))
    m = Measurement(step_times_s=cand, baseline_step_times_s=base, compile_time_s=0.1,
                    mode=MeasureMode.PAIRED, peak_memory_bytes=memory,
                    memory_source="memory_analysis", backend="cpu", device_count=8)
    return TrialOutcome(OutcomeKind.OK, "", m, duration_s=1.0, exit_code=0)


class ModelLauncher(Launcher):
    """Answers a trial from a model of the workload: flags -> (ratio, peak memory)."""

    def __init__(self, model: Callable[[Mapping[str, FlagValue]], tuple[float, int]]) -> None:
        self.model = model
        self.launched: list[str] = []
        self.catalog = load_catalog()

    def launch(self, request: TrialRequest) -> TrialOutcome:
        self.launched.append(config_key(effective_config(request.flags, self.catalog)))
        ratio, memory = self.model(request.flags)
        return outcome(ratio, memory, seed=len(self.launched))


def tradeoff(flags: Mapping[str, FlagValue]) -> tuple[float, int]:
    """Lower optimisation levels are slower but smaller; fast math is faster and bigger."""
    level = flags.get(LEVEL, 3)
    assert isinstance(level, int)
    ratio = {0: 2.0, 1: 1.3, 2: 1.05, 3: 1.0}[level] * (0.8 if flags.get(FAST) else 1.0)
    memory = (100 + 20 * level + (50 if flags.get(FAST) else 0)) * MiB
    return ratio, memory


@pytest.fixture
def small_space(tmp_path: Path):
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    return load_space(str(path))


def study(space, tmp_path: Path, launcher: Launcher, **plan: object) -> tuple[StudyRunner, Store]:
    url = f"sqlite:///{tmp_path / 'autotune.db'}"
    store = Store.open(url)
    # Racing the leaders re-measures them (tests/test_evidence.py): off here, where what is
    # counted is the search's own launches, unless a test asks for it.
    settings: dict[str, object] = {"name": "s", "space": space,
                                   "workload": resolve_benchmark("matmul"), "racing": False,
                                   **plan}
    return StudyRunner(StudyPlan.of(**settings), store, launcher, url), store  # type: ignore[arg-type]


def optuna_study(store: Store) -> optuna.Study:
    return optuna.load_study(study_name="s", storage=store.url)


# --- choosing a sampler -------------------------------------------------------------------


def test_objectives_parse_and_bad_names_say_what_is_known():
    assert parse_objectives("time") == (Objective.TIME,)
    assert parse_objectives("time, memory") == (Objective.TIME, Objective.MEMORY)
    with pytest.raises(UsageError, match="unknown objective 'speed'. Known objectives: time, "
                                         "memory"):
        parse_objectives("time,speed")
    with pytest.raises(UsageError, match="given twice"):
        parse_objectives("time,time")


def test_auto_is_grid_when_the_space_fits_the_budget_else_tpe_or_nsga2(small_space):
    one, two = (Objective.TIME,), (Objective.TIME, Objective.MEMORY)
    assert choose_sampler("auto", one, small_space, trials=10).name == "grid"
    assert choose_sampler("auto", one, small_space, trials=9).name == "tpe"
    assert choose_sampler("auto", two, small_space, trials=9).name == "nsga2"
    assert choose_sampler("auto", one, load_space("gpu-collectives"), trials=40).name == "tpe"


@pytest.mark.parametrize(("args", "message"), [
    (["--sampler", "bayes"], "unknown sampler 'bayes'. Known samplers: tpe, random, grid, nsga2, "
                             "gp, auto"),
    (["--sampler", "nsga2"], "nsga2 searches for a Pareto front of two objectives"),
    (["--objective", "latency"], "unknown objective 'latency'"),
    (["--memory-budget", "lots"], "--memory-budget 'lots' is not a size like 16GiB"),
    (["--memory-budget", "0GiB"], "--memory-budget '0GiB' must be more than 0 bytes"),
    (["--space", "gpu-collectives", "--sampler", "grid"],
     "space 'gpu-collectives' has 255552 configurations, more than grid enumerates"),
])
def test_bad_search_options_exit_2_before_any_trial(tmp_path, args, message):
    db = tmp_path / "a.db"
    argv = ["study", "--space", "cpu", "--benchmark", "matmul", "--storage", f"sqlite:///{db}"]
    result = CliRunner().invoke(app, argv + args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not db.exists()  # nothing ran, nothing was written


def test_gp_without_torch_says_what_to_install(small_space):
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed here: the gp sampler is available")
    with pytest.raises(UsageError, match="the gp sampler needs torch and scipy"):
        choose_sampler("gp", (Objective.TIME,), small_space, trials=10)


@pytest.mark.parametrize(("sampler", "objectives"), [
    ("tpe", (Objective.TIME,)), ("random", (Objective.TIME,)), ("grid", (Objective.TIME,)),
    ("nsga2", (Objective.TIME, Objective.MEMORY)),
])
def test_every_sampler_is_reproducible_from_its_seed(small_space, tmp_path, sampler, objectives):
    def launched(seed: int, folder: str) -> list[str]:
        (tmp_path / folder).mkdir()
        launcher = ModelLauncher(tradeoff)
        runner, _ = study(small_space, tmp_path / folder, launcher, sampler=sampler, trials=6,
                          seed=seed, objectives=objectives)
        runner.run()
        return launcher.launched

    first, again, other = launched(7, "a"), launched(7, "b"), launched(8, "c")
    assert first == again
    assert first != other


# --- no wasted trials ---------------------------------------------------------------------


def test_grid_measures_each_effective_configuration_once_then_stops(small_space, tmp_path):
    launcher = ModelLauncher(tradeoff)
    runner, store = study(small_space, tmp_path, launcher, sampler="grid", trials=50, seed=3)
    summary = runner.run()
    # 10 grid points, 8 effective configurations: level 3 and "unset" are the same request,
    # fast math false is the default
    assert len(small_space.grid()) == 10
    assert len(launcher.launched) == 8 == len(set(launcher.launched)) == summary.launched
    assert summary.stopped == ("every configuration of the space has been measured or is being "
                               "measured")
    assert launcher.launched[0] == ""  # the baseline first
    best = min(store.runs("s"), key=lambda r: r.ratio or 9)
    assert best.flags == {LEVEL: 3, FAST: True} or best.flags == {FAST: True}


def test_a_repeated_proposal_reuses_the_record_instead_of_launching(small_space, tmp_path):
    launcher = ModelLauncher(tradeoff)
    runner, store = study(small_space, tmp_path, launcher, sampler="tpe", trials=6, seed=1)
    summary = runner.run()
    assert len(launcher.launched) == len(set(launcher.launched)) == 6
    trials = optuna_study(store).trials
    reused = [t for t in trials if "reused_run_id" in t.user_attrs]
    assert len(trials) == 6 + summary.reused == 6 + len(reused)
    runs = {r.id: r for r in store.runs("s")}
    for t in reused:  # told the value of the run that measured the same configuration
        assert t.value == pytest.approx(runs[t.user_attrs["reused_run_id"]].ratio)


class LimitRecorder(ModelLauncher):
    """A ModelLauncher that also keeps the prune limit each request carried."""

    def __init__(self, model: Callable[[Mapping[str, FlagValue]], tuple[float, int]]) -> None:
        super().__init__(model)
        self.limits: list[float | None] = []

    def launch(self, request: TrialRequest) -> TrialOutcome:
        self.limits.append(request.job.prune_ratio)
        return super().launch(request)


def test_search_trials_carry_a_prune_limit_of_the_margin_times_the_best_so_far(
        small_space, tmp_path):
    launcher = LimitRecorder(tradeoff)
    runner, store = study(small_space, tmp_path, launcher, sampler="grid", trials=50, seed=3,
                          prune_margin=1.5)
    runner.run()
    runs = sorted(store.runs("s"), key=lambda r: r.id)
    assert launcher.limits[0] is None  # the baseline is never pruned
    for k, limit in enumerate(launcher.limits[1:], start=1):
        measured = [r.ratio for r in runs[:k] if r.ratio and r.role is not Role.BASELINE]
        assert limit == (pytest.approx(1.5 * min(measured)) if measured else None)
    assert sum(limit is not None for limit in launcher.limits) >= 5


def test_a_study_with_memory_as_an_objective_never_prunes(small_space, tmp_path):
    launcher = LimitRecorder(tradeoff)
    runner, _ = study(small_space, tmp_path, launcher, sampler="grid", trials=50, seed=3,
                      objectives=(Objective.TIME, Objective.MEMORY))
    runner.run()
    assert len(launcher.limits) == 8 and set(launcher.limits) == {None}


def test_known_programs_are_those_timed_successfully():
    from datetime import UTC, datetime

    from autotune.ground.records import Environment, RunRecord
    from autotune.study.measured import MeasuredIndex

    def run(number: int, flags: dict, fingerprint: str,
            kind: OutcomeKind = OutcomeKind.OK, steps: int = 3, same: int | None = None):
        m = Measurement(step_times_s=(0.01,) * steps, baseline_step_times_s=(0.01,) * steps,
                        compile_time_s=0.1, mode=MeasureMode.PAIRED, fingerprint=fingerprint,
                        same_program_as=same)
        env = Environment("here", "3.11", "0.10.2", "0.10.2", "cpu", "cpu", 1)
        return RunRecord(number + 1, "s", number, Role.SEARCH if number else Role.BASELINE,
                         flags, {}, TrialOutcome(kind, "", m), datetime.now(UTC), env,
                         1.0 if kind is OutcomeKind.OK else None)

    index = MeasuredIndex.of([
        run(0, {}, "base"),
        run(1, {FAST: True}, "fast"),
        run(2, {LEVEL: 2}, "fast"),  # the same program again: trial 1 keeps it
        run(3, {LEVEL: 1}, "pruned", kind=OutcomeKind.PRUNED),
        run(4, {LEVEL: 0}, "failed", kind=OutcomeKind.CRASHED),
        run(5, {LEVEL: 3}, "base", steps=0, same=0),  # timed nothing itself
    ], load_catalog())
    assert index.known_programs() == {"base": 0, "fast": 1}
    assert index.run_of_trial(1).flags == {FAST: True} and index.run_of_trial(9) is None


def test_resuming_counts_launches_and_never_remeasures(small_space, tmp_path):
    launcher = ModelLauncher(tradeoff)
    runner, _ = study(small_space, tmp_path, launcher, sampler="random", trials=4, seed=2)
    runner.run()
    again, _ = study(small_space, tmp_path, launcher, sampler="random", trials=7, seed=2)
    assert again.remaining() == 3
    again.run()
    assert len(launcher.launched) == 7 == len(set(launcher.launched))


def test_the_search_never_proposes_a_value_the_probe_rejected(small_space):
    from autotune.flags.probe import ProbeReport
    from autotune.study.preflight import check

    report = ProbeReport(
        jax_version="0", jaxlib_version="0", backend="cpu", device_kind="cpu", libtpu=False,
        accepted=frozenset({LEVEL, FAST}), unknown=frozenset(),
        rejected_values={LEVEL: {"1": "bad value"}}, checked_values={LEVEL: ("0", "1", "2")},
        per_compile={}, usage_defaults={})
    checked = check(small_space, load_catalog(), report, drop_unknown=False,
                    allow_backend_mismatch=False)
    assert checked.dropped_values == {LEVEL: [1]}
    configs = [checked.space.sample(optuna.trial.FixedTrial(p)) for p in checked.space.grid()]
    assert configs and all(c.get(LEVEL) != 1 for c in configs)


# --- objectives and budgets ---------------------------------------------------------------


def test_two_objectives_give_a_pareto_front_in_best(small_space, tmp_path):
    launcher = ModelLauncher(tradeoff)
    runner, store = study(small_space, tmp_path, launcher, sampler="grid", trials=10,
                          objectives=(Objective.TIME, Objective.MEMORY))
    runner.run()
    result = CliRunner().invoke(app, ["best", "s", "--storage", store.url])
    assert result.exit_code == 0, result.output
    text = result.output[result.output.index("Pareto front"):]
    front_trials = [line.split("│")[1].strip() for line in text.splitlines()
                    if line.startswith("│") and line.split("│")[1].strip().isdigit()]
    runs = {r.trial_number: r for r in store.runs("s")}
    points = [(runs[int(n)].ratio, runs[int(n)].outcome.measurement.peak_memory_bytes)
              for n in front_trials]
    everything = [(r.ratio, r.outcome.measurement.peak_memory_bytes) for r in runs.values()]
    # level 0 without fast math is the smallest; level 3 with fast math the fastest
    assert any(m == 100 * MiB and r == pytest.approx(2.0, rel=0.05) for r, m in points)
    assert any(m == 210 * MiB and r == pytest.approx(0.8, rel=0.05) for r, m in points)
    for r, m in everything:  # on the front exactly when nothing beats it on both
        beaten = any(r2 <= r and m2 <= m and (r2, m2) != (r, m) for r2, m2 in everything)
        assert ((r, m) in points) == (not beaten)
    assert optuna_study(store).directions == [optuna.study.StudyDirection.MINIMIZE] * 2


def test_a_budgeted_study_never_reports_an_over_budget_winner(small_space, tmp_path):
    launcher = ModelLauncher(tradeoff)
    budget = 170 * MiB  # fast math at level 3 (210 MiB) and level 2 (190 MiB) are over
    runner, store = study(small_space, tmp_path, launcher, sampler="grid", trials=10,
                          memory_budget_bytes=budget)
    runner.run()
    result = CliRunner().invoke(app, ["best", "s", "--storage", store.url])
    assert result.exit_code == 0, result.output
    assert "memory budget 170.0 MiB: 2 configurations above it are infeasible" in result.output
    export = tmp_path / "best.yaml"
    result = CliRunner().invoke(app, ["export", "s", "--rank", "1", "-o", str(export),
                                      "--storage", store.url])
    assert result.exit_code == 0, result.output
    import yaml

    doc = yaml.safe_load(export.read_text())
    assert doc["measured"]["peak_memory_bytes"] <= budget
    assert doc["flags"] == {LEVEL: 1, FAST: True}  # the fastest within budget (150 MiB, 1.04)
    feasibility = {t.user_attrs.get("feasible") for t in optuna_study(store).trials
                   if t.state.name == "COMPLETE"}
    assert feasibility == {True, False}
    over = [t for t in optuna_study(store).trials if t.user_attrs.get("feasible") is False]
    assert all(t.system_attrs["constraints:memory_budget"] > 0 for t in over)


def test_the_memory_objective_ranks_by_peak_memory(small_space, tmp_path):
    runner, store = study(small_space, tmp_path, ModelLauncher(tradeoff), sampler="grid",
                          trials=10, objectives=(Objective.MEMORY,))
    runner.run()
    from autotune.results.table import best_rows

    rows = best_rows(store.runs("s"), load_catalog(), objectives=("memory",))
    assert rows[1].run.flags.get(LEVEL) == 0 and not rows[1].run.flags.get(FAST)
    peaks = [r.peak_memory_bytes for r in rows[1:]]
    assert peaks == sorted(peaks)


# --- interrupted and killed ---------------------------------------------------------------


def test_a_trial_left_running_by_a_killed_process_is_failed_and_run_again(small_space, tmp_path):
    launcher = ModelLauncher(tradeoff)
    runner, store = study(small_space, tmp_path, launcher, sampler="random", trials=2, seed=5,
                          heartbeat_s=1)
    runner.run()  # baseline and one search trial
    # what a process killed mid-trial leaves: a RUNNING trial with a last heartbeat
    storage = optuna.storages.RDBStorage(store.url, heartbeat_interval=1, grace_period=2)
    orphan = optuna.load_study(study_name="s", storage=storage).ask({LEVEL: optuna.distributions
                                                                     .CategoricalDistribution(
                                                                         [0, 1, 2, 3, "unset"])})
    storage.record_heartbeat(orphan._trial_id)
    time.sleep(3.5)  # SQLite keeps heartbeats to the second
    again, _ = study(small_space, tmp_path, launcher, sampler="random", trials=3, seed=5,
                     heartbeat_s=1)
    again.run()
    trials = optuna_study(store).trials
    assert trials[orphan.number].state.name == "FAIL"
    retried = [t for t in trials if t.system_attrs.get("failed_trial") == orphan.number]
    assert len(retried) == 1 and retried[0].state.name == "COMPLETE"
    assert retried[0].params[LEVEL] == orphan.params[LEVEL]


def test_a_ctrl_c_as_the_heartbeat_starts_leaves_no_thread_that_blocks_the_exit(
        small_space, tmp_path, monkeypatch):
    """Seen in CI: an interrupted study printed its message and never exited. A Ctrl-C
    that landed inside the heartbeat's start() left Optuna's thread (no daemon) beating,
    and the interpreter waits for it at exit. The trial's heartbeat is autotune's own
    thread now (`_optuna.beating`); a Ctrl-C just as it starts stops it too."""
    import signal
    import threading

    started: list[threading.Thread] = []
    start = threading.Thread.start

    def start_then_ctrl_c(self: threading.Thread) -> None:
        start(self)
        if self.name.startswith("autotune-trial-"):
            started.append(self)
            signal.raise_signal(signal.SIGINT)  # arrives just as start() returns

    monkeypatch.setattr(threading.Thread, "start", start_then_ctrl_c)
    runner, store = study(small_space, tmp_path, ModelLauncher(tradeoff), sampler="random",
                          trials=3, heartbeat_s=1)
    with pytest.raises(KeyboardInterrupt):
        runner.run()
    assert len(started) == 1
    assert not started[0].is_alive()
    assert [t for t in threading.enumerate()
            if t is not threading.main_thread() and not t.daemon] == []
    assert [t.state.name for t in optuna_study(store).trials] == ["FAIL"]


# --- the recorded tables and the benchmarks built on them ---------------------------------

ROOT = Path(__file__).resolve().parents[1]
MLP = ROOT / "benchmarks/tables/mlp-dp-small.json"
TRANSFORMER = ROOT / "benchmarks/tables/transformer-small.json"


def request(flags: Mapping[str, FlagValue], prune_ratio: float | None = None) -> TrialRequest:
    return TrialRequest(Path("w.py"), "small", job=Job(prune_ratio=prune_ratio), flags=dict(flags))


def test_a_recorded_table_replays_its_repeats_as_noise():
    from statistics import median

    from autotune.launch.replay import ReplayTable, TableLauncher

    table = ReplayTable.load(MLP)
    assert table.meta["repeats"] == 3 and len(table.runs) == table.meta["distinct"] == 288
    launcher = TableLauncher(table, load_catalog(), seed=0)
    flags = {LEVEL: 2, "xla_cpu_use_xnnpack": True}  # xnnpack=true is the default: left out
    key = config_key({LEVEL: 2})
    pool = [r for k in table.members(table.programs[key]) for r in table.runs[k]]
    recorded = {round(median(r["step_times_s"]) / median(r["baseline_step_times_s"]), 9)
                for r in pool}
    seen = {round(launcher.launch(request(flags)).measurement.paired_ratio, 9)
            for _ in range(3 * len(pool))}
    # every repeat of the configuration's program (its own and those of configurations
    # compiled to the same program), and nothing else
    assert seen == recorded and len(seen) >= 3
    assert launcher.launch(request({"xla_cpu_enable_fast_min_max": False})).kind \
        is OutcomeKind.CRASHED  # not in the table: said, not raised


def test_the_table_launcher_prunes_by_the_childs_rule():
    from autotune.launch.replay import ReplayTable, TableLauncher

    table = ReplayTable.load(MLP)
    launcher = TableLauncher(table, load_catalog(), seed=1)
    slow = launcher.launch(request({LEVEL: 0}, prune_ratio=1.1))  # level 0 is ~1.4x slower
    assert slow.kind is OutcomeKind.PRUNED and "stopped after 6 paired steps" in slow.message
    assert len(slow.measurement.step_times_s) < len(table.runs[config_key({LEVEL: 0})][0][
        "step_times_s"])
    assert launcher.launch(request({LEVEL: 0}, prune_ratio=3.0)).kind is OutcomeKind.OK


def _table_file(tmp_path: Path, entries: list[dict], **meta: object) -> Path:
    doc = {"schema_version": 1, "kind": "autotune-replay-table", "benchmark": "matmul",
           "preset": "tiny", "devices": 1, "space": "benchmarks/tables/cpu-table.yaml",
           "configurations": len(entries), "distinct": len(entries), "repeats": 3, **meta,
           "entries": entries}
    path = tmp_path / "table.json"
    path.write_text(json.dumps(doc))
    return path


def _runs(*ratios: float) -> list[dict]:
    """Recorded repeats whose candidate/baseline ratio of medians is each of `ratios`."""
    return [{"status": "ok", "message": "", "step_times_s": [0.01 * r] * 6,
             "baseline_step_times_s": [0.01] * 6} for r in ratios]


def test_configurations_compiled_to_one_program_share_one_truth(tmp_path):
    from autotune.launch.replay import ReplayTable

    same_a, same_b, other = {LEVEL: 1}, {LEVEL: 2}, {LEVEL: 0}
    path = _table_file(tmp_path, [
        {"flags": same_a, "runs": _runs(0.90, 0.91, 0.92), "program": "p1"},
        {"flags": same_b, "runs": _runs(0.99, 1.00, 1.01), "program": "p1"},
        {"flags": other, "runs": _runs(2.0, 2.1, 2.2), "program": "p0"},
    ])
    table = ReplayTable.load(path)
    pooled = 0.955  # the median of all six repeats of program p1
    assert table.true_ratio(config_key(same_a)) == pytest.approx(pooled, abs=1e-9)
    assert table.true_ratio(config_key(same_b)) == pytest.approx(pooled, abs=1e-9)
    assert table.true_ratio(config_key(other)) == pytest.approx(2.1)
    assert sorted(table.pooled_repeats(config_key(same_b))) == pytest.approx(
        [0.90, 0.91, 0.92, 0.99, 1.00, 1.01])
    assert table.distinct_programs() == 2
    assert table.flatness(0.001) == pytest.approx(2 / 3)  # both p1 configurations are "best"


def test_a_table_without_fingerprints_judges_each_configuration_by_its_own_repeats(tmp_path):
    from autotune.launch.replay import ReplayTable

    path = _table_file(tmp_path, [
        {"flags": {LEVEL: 1}, "runs": _runs(0.90, 0.91, 0.92)},
        {"flags": {LEVEL: 2}, "runs": _runs(0.99, 1.00, 1.01)},
    ])
    table = ReplayTable.load(path)
    assert table.true_ratio(config_key({LEVEL: 1})) == pytest.approx(0.91)
    assert table.true_ratio(config_key({LEVEL: 2})) == pytest.approx(1.00)
    assert table.distinct_programs() is None


def test_a_confirmation_longer_than_the_tables_runs_is_served_from_its_long_runs(tmp_path):
    from autotune.launch.replay import ReplayTable, TableLauncher

    def long_run(ratio: float, steps: int) -> dict:
        return {"status": "ok", "message": "", "step_times_s": [0.01 * ratio] * steps,
                "baseline_step_times_s": [0.01] * steps, "compile_time_s": 0.5}

    recorded, joined = {LEVEL: 1}, {LEVEL: 0}
    path = _table_file(tmp_path, [
        {"flags": recorded, "runs": _runs(0.90, 0.91, 0.92), "program": "p1",
         "long_runs": [long_run(0.8, 40), long_run(0.7, 40)]},
        {"flags": joined, "runs": _runs(1.2, 1.3), "program": "p0"},
    ], steps=6, made_on={"vector_isa": "avx512f"},
       long=[{"steps": 40, "vector_isa": "avx512f"}])
    table = ReplayTable.load(path)
    assert table.long_runs == {config_key(recorded): table.long_runs[config_key(recorded)]}
    assert table.long_comparable
    launcher = TableLauncher(table, load_catalog(), seed=0, long_after=6)

    def longer(flags: Mapping[str, FlagValue], steps: int) -> TrialRequest:
        return TrialRequest(Path("w.py"), "small", job=Job(steps=steps), flags=dict(flags))

    # as many steps as the table's runs: the search's draw, as before
    short = launcher.launch(longer(recorded, 6)).measurement
    assert len(short.step_times_s) == 6
    assert min(abs(short.paired_ratio - r) for r in (0.90, 0.91, 0.92)) < 1e-9
    # more: one run of confirmation length, cut to the steps asked for, both arms
    long_ = [launcher.launch(longer(recorded, 25)) for _ in range(2)]
    assert sorted(o.measurement.paired_ratio for o in long_) == pytest.approx([0.7, 0.8])
    assert {len(o.measurement.step_times_s) for o in long_} == {25}
    assert {len(o.measurement.baseline_step_times_s) for o in long_} == {25}
    assert long_[0].duration_s == pytest.approx(0.5 + 25 * 0.01 * (1 + long_[0].measurement
                                                                   .paired_ratio))
    # a program without them: its ordinary runs joined end to end (6 + 6 + 6 >= 14 steps)
    glued = launcher.launch(longer(joined, 14))
    assert len(glued.measurement.step_times_s) == 14
    assert {round(t, 6) for t in glued.measurement.step_times_s} <= {0.012, 0.013}
    # 14 steps from two recorded runs of 6: the third piece draws one of them again
    assert launcher.served == {"long": 2, "joined": 1, "reused": 1}
    # long runs from another kind of machine (or one not known) confirm nothing here: the
    # table's own runs are joined instead
    for made_on in ({"vector_isa": "avx2"}, {}):
        doc = json.loads(path.read_text())
        path.write_text(json.dumps({**doc, "made_on": made_on}))
        foreign = ReplayTable.load(path)
        assert not foreign.long_comparable
        elsewhere = TableLauncher(foreign, load_catalog(), seed=0, long_after=6)
        other = elsewhere.launch(longer(recorded, 25)).measurement
        assert {round(t, 6) for t in other.step_times_s} <= {0.009, 0.0091, 0.0092}
        assert elsewhere.served == {"joined": 1, "reused": 2}  # 25 steps from 3 runs of 6


@pytest.mark.slow
def test_record_table_fingerprints_the_programs_of_a_table(tmp_path):
    """`--add-programs` compiles each entry for real: level 0 is another program, and
    a flag XLA:CPU ignores on a workload without dots (XNNPACK) is the same program."""
    import subprocess
    import sys

    default, ignored, level0 = {}, {"xla_cpu_use_xnnpack": False}, {LEVEL: 0}
    path = _table_file(tmp_path, [{"flags": f, "runs": _runs(1.0)} for f in
                                  (default, ignored, level0)], benchmark="norm-act")
    done = subprocess.run([sys.executable, "benchmarks/scripts/record_table.py",
                           "--add-programs", str(path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "3 configurations, 2 distinct programs" in done.stdout
    programs = [e["program"] for e in json.loads(path.read_text())["entries"]]
    assert programs[0] == programs[1] != programs[2]


def test_a_bad_table_file_is_named(tmp_path):
    from autotune.launch.replay import ReplayTable, TableError

    bad = tmp_path / "t.json"
    bad.write_text('{"kind": "something else"}')
    with pytest.raises(TableError, match="is not a replay table"):
        ReplayTable.load(bad)
    with pytest.raises(TableError, match="cannot read the replay table"):
        ReplayTable.load(tmp_path / "missing.json")


@pytest.mark.slow
def test_the_search_benchmark_prints_its_table_and_json():
    import json
    import subprocess
    import sys

    args = [sys.executable, "benchmarks/scripts/search_efficiency.py", str(MLP), "--seeds", "2",
            "--trials", "20", "--samplers", "random,auto", "--jobs", "2", "--random-to", "40"]
    # the table at a short cap (quicker); the JSON below at the default cap, which it names
    result = subprocess.run(args + ["--confirm-max", "4"], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any("within 2% of the best" in line and "flatness" in line for line in lines)
    assert "choose seeds 0-19" in lines[0] and "report seeds 1000-1001" in lines[0]
    rows = [line.split() for line in lines if line.split()[:1] in (["random"], ["auto"])]
    assert [r[:2] for r in rows] == [["random", "study"], ["auto", "study"],
                                     ["random", "single"], ["auto", "single"]]
    assert all(len(r) == 8 for r in rows)  # within 2%, gain, right at 10 and at 20
    oracle = next(line.split() for line in lines if line.startswith("oracle"))
    assert len(oracle) == 5  # gain and right at 10 and at 20
    # random search runs on to 40 (--random-to), on its own line under each of its rows
    assert sum("and on: @40 " in line and "device-s" in line for line in lines) == 2
    assert sum("matching: random search does as well as auto" in line for line in lines) == 2
    assert sum(line.startswith("floor: auto's confirmation alone spends") for line in lines) == 2
    result = subprocess.run(args + ["--json"], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    doc = json.loads(result.stdout)
    assert doc["checkpoints"] == [10, 20] and doc["confirm"] == [3, 2, 48]
    assert doc["random_checkpoints"] == [40]
    assert doc["fresh"] is False
    [table] = doc["tables"]
    assert set(table["oracle"]) == {"10", "20"}
    entries = table["results"]
    assert [(e["sampler"], e["rule"]) for e in entries] == [
        ("random", "study"), ("auto", "study"), ("random", "single"), ("auto", "single")]
    for entry in entries:
        beside_random = {"matching", "random_matching", "confirmation_floor"} \
            if entry["sampler"] != "random" else set()
        assert set(entry) == {"sampler", "rule", "resolved", "within", "device_seconds",
                              "search_seconds", "confirmation_seconds",
                              "captured_gain", "slower", "right", "kept", "sound", "timed",
                              "of_oracle", "served", "reused", "exhausted"} | beside_random
        if beside_random:  # every seed keeps the (right) defaults, as random does: at 10
            assert entry["matching"]["at"] == 10 and entry["matching"]["reference_at"] == 20
            back = entry["random_matching"]  # random keeps them on every seed by 20 too
            assert back["method_at"] == 20 and back["at"] in (10, 20) and back["last"] == 40
            floor = entry["confirmation_floor"]
            assert floor["confirmation_seconds"] == entry["confirmation_seconds"]["20"]
            rand = next(e for e in entries if e["sampler"] == "random"
                        and e["rule"] == entry["rule"])
            assert floor["reference_device_seconds"] == rand["device_seconds"]["20"]
            assert 0 < floor["floor"] < 1
        marks = {"10", "20"} | ({"40"} if entry["sampler"] == "random" else set())
        assert set(entry["within"]) == {"1%", "2%", "5%"}
        assert set(entry["within"]["2%"]) == set(entry["device_seconds"]) == marks
        assert set(entry["of_oracle"]) == {"10", "20"}
        assert all(0 <= f <= 1 for f in entry["within"]["2%"].values())
        assert all(entry["device_seconds"][k] > 0 for k in ("10", "20"))  # confirmation too
        assert all(0 < entry[part][k] < entry["device_seconds"][k]
                   for part in ("search_seconds", "confirmation_seconds") for k in ("10", "20"))
        assert all(entry["timed"][k] <= int(k) for k in ("10", "20"))
        # mlp-dp's "optimum" 11% faster than the defaults was one lucky configuration:
        # pinned (its 11 leading programs 12 more processes each) the defaults' program is
        # the best, and every seed keeps the defaults, which is right
        assert entry["slower"]["20"] == 0 and entry["kept"]["20"] == 1
        assert entry["right"]["20"] == 1
    assert [e["resolved"]["10"] for e in entries[:2]] == ["random", "tpe"]


def test_the_search_efficiency_benchmark_scores_the_baseline_by_its_true_ratio():
    """The baseline (the empty key, measured first) is an incumbent like any other
    configuration: its true ratio, about 1.0, not infinitely slow."""
    from autotune.launch.replay import ReplayTable

    bench = script("search_efficiency")
    table = ReplayTable.load(MLP)
    truth = table.true_ratio("")
    assert truth is not None and 0.9 < truth < 1.1
    trace = bench.run_study(table, load_space(str(ROOT / table.meta["space"])), "random",
                            1000, 3, load_catalog()).trace
    assert trace.true_ratios[0] == pytest.approx(truth)  # trial 1 is the baseline alone
    assert all(math.isfinite(r) and r <= truth for r in trace.true_ratios)
    assert trace.trials_to(truth) == 1


def test_the_search_efficiency_benchmark_reports_on_seeds_it_did_not_choose_on(capsys):
    bench = script("search_efficiency")
    assert bench.parse_seeds("0-2,7, 9-10") == [0, 1, 2, 7, 9, 10]
    assert bench.seeds_text([0, 1, 2, 7, 9, 10]) == "0-2,7,9-10"
    assert not set(bench.parse_seeds(bench.CHOOSE_SEEDS)) & set(
        bench.parse_seeds(bench.REPORT_SEEDS))
    for bad in ("1-0", "x", "3-", "-1"):
        with pytest.raises(ValueError):
            bench.parse_seeds(bad)
    with pytest.raises(SystemExit) as exit_:
        bench.main([str(MLP), "--choose-seeds", "0-19", "--report-seeds", "15-30"])
    assert exit_.value.code == 2
    assert "share 5 seeds (15-19)" in capsys.readouterr().err


class BudgetLauncher(ModelLauncher):
    """A ModelLauncher that answers `over_budget` (untimed) as the child would, for a
    request whose modelled footprint exceeds the budget it carries."""

    def __init__(self, model: Callable[[Mapping[str, FlagValue]], tuple[float, int]]) -> None:
        super().__init__(model)
        self.budgets: list[int | None] = []

    def launch(self, request: TrialRequest) -> TrialOutcome:
        self.budgets.append(request.job.memory_budget_bytes)
        done = super().launch(request)
        peak = done.measurement.peak_memory_bytes if done.measurement else None
        if request.job.memory_budget_bytes is None or peak is None \
                or peak <= request.job.memory_budget_bytes:
            return done
        untimed = Measurement(step_times_s=(), compile_time_s=0.1, mode=MeasureMode.PAIRED,
                              peak_memory_bytes=peak, memory_source="memory_analysis")
        return TrialOutcome(OutcomeKind.OVER_BUDGET, "not timed", untimed)


def test_the_budget_reaches_every_trial_but_the_baseline_and_untimed_ones_are_not_ranked(
        small_space, tmp_path):
    from autotune.results.ranking import over_budget, ranked

    launcher = BudgetLauncher(tradeoff)
    budget = 170 * MiB  # tradeoff: fast math at levels 2 and 3 needs more than this
    runner, store = study(small_space, tmp_path, launcher, sampler="grid", trials=50, seed=3,
                          memory_budget_bytes=budget)
    runner.run()
    assert launcher.budgets[0] is None and set(launcher.budgets[1:]) == {budget}
    runs = store.runs("s")
    untimed = [r for r in runs if r.outcome.kind is OutcomeKind.OVER_BUDGET]
    assert untimed and all(r.flags.get(FAST) for r in untimed)
    assert all(r.ratio is None for r in untimed)
    assert not any(r.outcome.kind is OutcomeKind.OVER_BUDGET for r in ranked(runs, budget))
    assert over_budget(runs, budget) == len(untimed)


# --- local search: the incumbent's neighbours before the sampler's proposals ----------------

def _key(flags: Mapping[str, FlagValue]) -> str:
    return config_key(effective_config(dict(flags), load_catalog()))


def test_local_search_measures_the_defaults_neighbours_first(small_space, tmp_path, monkeypatch):
    monkeypatch.setattr("autotune.study.search.LOCAL_SEARCH", "on")
    launcher = ModelLauncher(tradeoff)
    runner, _ = study(small_space, tmp_path, launcher, sampler="tpe", trials=5, seed=7)
    runner.run()
    # one decision from XLA's defaults: each level (3 is the default), fast math on
    near = {_key({LEVEL: 0}), _key({LEVEL: 1}), _key({LEVEL: 2}), _key({FAST: True})}
    assert launcher.launched[0] == ""
    assert set(launcher.launched[1:]) == near
    trials = optuna_study(store := Store.open(f"sqlite:///{tmp_path / 'autotune.db'}")).trials
    assert sum(bool(t.user_attrs.get("local")) for t in trials) == 4
    store.close()


def test_local_search_moves_to_the_incumbent_once_racing_backs_it(small_space, tmp_path,
                                                                  monkeypatch):
    monkeypatch.setattr("autotune.study.search.LOCAL_SEARCH", "on")
    launcher = ModelLauncher(tradeoff)
    runner, store = study(small_space, tmp_path, launcher, sampler="tpe", trials=10, seed=7,
                          racing=True)
    runner.run()
    runs = sorted(store.runs("s"), key=lambda r: r.id)
    fast = _key({FAST: True})
    backed_at = [i for i, r in enumerate(runs) if _key(r.flags) == fast][2]  # 3 processes
    after = [r for r in runs[backed_at + 1:] if r.role is Role.SEARCH]
    # fast math (0.8) is the incumbent: next come its neighbours, fast math at each level
    assert len(after) >= 3 and all(r.flags.get(FAST) is True for r in after[:3])
    assert {_key(r.flags) for r in after[:3]} == {_key({FAST: True, LEVEL: v}) for v in (0, 1, 2)}
    local = {t.user_attrs.get("run_id") for t in optuna_study(store).trials
             if t.user_attrs.get("local")}
    assert {r.id for r in after[:3]} <= local  # queued by the local search, not sampled


ONE = """schema_version: 1
name: one
description: one configuration
backend: cpu
params:
  xla_cpu_enable_fast_math: {type: categorical, choices: [true]}
"""


class RacesKilled(ModelLauncher):
    """Answers as `ModelLauncher`, but the first `kills` launches of a configuration
    launched before (the leader's races) end as a child killed by SIGKILL would."""

    def __init__(self, kills: int) -> None:
        super().__init__(tradeoff)
        self.kills = kills

    def launch(self, request: TrialRequest) -> TrialOutcome:
        key = config_key(effective_config(request.flags, self.catalog))
        if key and key in self.launched and self.kills > 0:
            self.kills -= 1
            self.launched.append(key)
            return TrialOutcome(OutcomeKind.CRASHED, "killed by signal 9", duration_s=0.5,
                                signal=9)
        return super().launch(request)


def test_a_race_whose_child_was_killed_is_measured_again_and_the_study_holds_its_trials(
        tmp_path):
    """Found by the fault suite: a race claim is keyed by the leader's processes, which a
    failed race does not change, so the retry met its finished claim; on a space with
    nothing else to measure the study then stopped one short of --trials (issue 31)."""
    path = tmp_path / "one.yaml"
    path.write_text(ONE)
    runner, store = study(load_space(str(path)), tmp_path, RacesKilled(1), sampler="grid",
                          trials=4, seed=1, racing=True)
    runner.run()
    races = [r for r in sorted(store.runs("s"), key=lambda r: r.id) if r.role is Role.RACE]
    assert [r.outcome.kind for r in races] == [OutcomeKind.CRASHED, OutcomeKind.OK]
    assert len([r for r in store.runs("s") if r.role in BUDGET_ROLES]) == 4
    store.close()


def test_a_leader_whose_races_keep_failing_is_left_unbacked_after_its_retries(tmp_path):
    path = tmp_path / "one.yaml"
    path.write_text(ONE)
    runner, store = study(load_space(str(path)), tmp_path, RacesKilled(10**6),
                          sampler="grid", trials=8, seed=1, racing=True)
    runner.run()
    races = [r for r in store.runs("s") if r.role is Role.RACE]
    assert len(races) == 1 + RACE_RETRIES  # then the space has nothing left: the study ends
    store.close()


def test_local_search_off_leaves_the_proposals_to_the_sampler(small_space, tmp_path):
    launcher = ModelLauncher(tradeoff)
    runner, store = study(small_space, tmp_path, launcher, sampler="tpe", trials=5, seed=7)
    runner.run()
    assert not any(t.user_attrs.get("local") for t in optuna_study(store).trials)
