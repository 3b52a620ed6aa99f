"""`autotune importance`: which flags mattered, on real SQLite studies built by hand (no JAX)."""

from __future__ import annotations

import itertools
from pathlib import Path

import optuna
import outcomes
import pytest
import typer
from optuna.distributions import CategoricalDistribution
from typer.testing import CliRunner

from autotune.cli._common import friendly
from autotune.cli.importance import importance
from autotune.ground.records import Measurement, OutcomeKind, Role, TrialOutcome
from autotune.results.importance import (
    FlagEffect,
    compared_trials,
    flag_effects,
    noise_level,
)
from autotune.storage._optuna import load_trials
from autotune.storage.store import Store

runner = CliRunner()
app = typer.Typer()
app.command()(friendly(importance))

LEVEL = "xla_backend_optimization_level"
FAST_MATH = "xla_cpu_enable_fast_math"
HONOR_NANS = "xla_cpu_fast_math_honor_nans"  # only read (and sampled) when fast math is on
DISTRIBUTIONS = {
    LEVEL: CategoricalDistribution([0, 1, 2, 3, "unset"]),
    FAST_MATH: CategoricalDistribution([False, True]),
    HONOR_NANS: CategoricalDistribution([False, True]),
}
# Trial-to-trial noise of about ±1%, as a search on a quiet machine sees it.
JITTER = (-0.01, 0.004, 0.009, -0.006, 0.0, 0.007, -0.003)
# Steps spread ±3% around 1 ms: each run's ratio is known to about ±2.3%.
SPREAD = (-1, 0.5, 1, -0.5, 0, 0.8, -0.8, 0.2, -0.2, 0.3)


def paired(spread: float, shift: int = 3) -> Measurement:
    """A PAIRED measurement whose candidate and baseline steps scatter by ±`spread`."""
    steps = tuple(1e-3 * (1 + spread * x) for x in SPREAD)
    return outcomes.paired(steps=steps, baseline=steps[shift:] + steps[:shift])


def ok(measurement: Measurement | None) -> TrialOutcome:
    return TrialOutcome(OutcomeKind.OK, "", measurement)


class StudyBuilder:
    """A study in a temp SQLite file: autotune's rows and Optuna's trials, as `study` writes."""

    def __init__(self, tmp_path: Path, name: str = "cpu-matmul",
                 objectives: tuple[str, ...] = ("time",)):
        self.url, self.name = f"sqlite:///{tmp_path}/a.db", name
        self.store = Store.open(self.url)
        self.store.ensure_study(name, "cpu", "matmul", "tiny", 1, "paired", objectives=objectives)
        self.optuna = optuna.create_study(study_name=name, storage=self.url,
                                          directions=["minimize"] * len(objectives))
        self.baseline(len(objectives))

    def baseline(self, n_objectives: int) -> None:
        self.trial({}, *[1.0] * n_objectives, role=Role.BASELINE)
        self.store.record_run(self.name, 0, Role.BASELINE, {}, {}, ok(paired(0.03)))

    def trial(self, params: dict, *values: float, role: Role = Role.SEARCH,
              state: optuna.trial.TrialState = optuna.trial.TrialState.COMPLETE, **attrs) -> None:
        self.optuna.add_trial(optuna.trial.create_trial(
            params=params, distributions={k: DISTRIBUTIONS[k] for k in params},
            values=list(values) if state is optuna.trial.TrialState.COMPLETE else None,
            state=state, user_attrs={"role": role.value, **attrs}))

    def search_run(self, spread: float = 0.03) -> None:
        self.store.record_run(self.name, None, Role.SEARCH, {}, {}, ok(paired(spread)))


def level_matters(study: StudyBuilder, repeats: int = 2, honor_nans: bool = False) -> None:
    """Level 0 doubles the step time; fast math costs 0.5%, within the noise; ~1% jitter."""
    grid = itertools.product(range(repeats), [0, 1, 2, 3, "unset"], [False, True])
    for i, (_, level, fast) in enumerate(grid):
        params = {LEVEL: level, FAST_MATH: fast}
        if fast and honor_nans:
            params[HONOR_NANS] = i % 4 == 1
        ratio = (2.0 if level == 0 else 1.0) * (1.005 if fast else 1.0)
        study.trial(params, ratio * (1 + JITTER[i % len(JITTER)]))
    study.trial({LEVEL: 2}, 1.0, state=optuna.trial.TrialState.FAIL)
    study.trial({LEVEL: 1}, 1.0, state=optuna.trial.TrialState.PRUNED)
    study.search_run()


def run_cli(study: StudyBuilder, name: str | None = None):
    return runner.invoke(app, [name or study.name, "--storage", study.url])


def by_param(effects: list[FlagEffect]) -> dict[str, FlagEffect]:
    return {e.param: e for e in effects}


def test_a_flag_that_doubles_the_step_is_ranked_first_and_one_that_does_nothing_is_not(tmp_path):
    study = StudyBuilder(tmp_path)
    level_matters(study)

    result = run_cli(study)

    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # lines wrap at 80 columns
    level = text.split(f"1. {LEVEL} ")[1].split(f" {FAST_MATH} ")[0]
    assert "×2.0" in level and "slower at 0 than at" in level
    assert "above the noise (confounded: not a gain)" in level
    fast = text.split(f"- {FAST_MATH} ")[1]  # not ranked
    noise = noise_level(study.store.runs(study.name))
    assert noise is not None and 0.015 < noise < 0.03
    assert f"within the ±{noise:.1%} noise" in fast.split("noise:")[0] + "noise"
    assert f"noise: ±{noise:.1%} per trial ratio" in result.output
    assert "from 20 complete search trials" in " ".join(result.output.split())
    # no paired ablation was made: "measurable" is never said of the search's figures
    assert "measurable" not in result.output.replace("no measurable gain", "")
    assert "share of variance in the search (not a gain)" in result.output


def test_effects_name_the_worst_and_best_values_with_their_median_ratios(tmp_path):
    study = StudyBuilder(tmp_path)
    level_matters(study)
    trials = load_trials(study.url, study.name)

    effects = flag_effects(trials, noise_level(study.store.runs(study.name)))

    assert [e.param for e in effects] == [LEVEL, FAST_MATH]
    level, fast = effects
    assert level.above_noise and level.importance is not None and level.importance > 0.5
    assert level.worst_value == 0 and level.worst_ratio == pytest.approx(2.0, rel=0.02)
    assert level.effect == pytest.approx(1.0, abs=0.05)
    assert level.values_tried == 5 and level.trials == 20
    assert not fast.above_noise and 0 < fast.effect < 0.015
    assert (fast.worst_value, fast.best_value) == (True, False)


def test_a_conditional_param_gets_an_effect_but_no_importance(tmp_path):
    study = StudyBuilder(tmp_path)
    level_matters(study, honor_nans=True)
    trials = load_trials(study.url, study.name)

    effects = by_param(flag_effects(trials, noise=0.023))

    assert effects[HONOR_NANS].importance is None
    assert effects[HONOR_NANS].trials == 10 and effects[HONOR_NANS].values_tried == 2
    assert effects[LEVEL].importance is not None and effects[FAST_MATH].importance is not None
    result = run_cli(study)
    assert result.exit_code == 0, result.output
    assert f"- {HONOR_NANS} variance share -;" in " ".join(result.output.split())


def test_a_missing_study_is_an_error_that_names_the_known_ones(tmp_path):
    study = StudyBuilder(tmp_path)

    result = run_cli(study, "nope")

    assert result.exit_code == 2
    assert "no study named 'nope'" in result.output and "cpu-matmul" in result.output
    assert "Traceback" not in result.output


def test_too_few_trials_says_there_is_nothing_to_compare_yet(tmp_path):
    study = StudyBuilder(tmp_path)
    study.trial({LEVEL: 0, FAST_MATH: True}, 2.0)
    study.trial({LEVEL: 1, FAST_MATH: False}, 1.0, state=optuna.trial.TrialState.FAIL)

    result = run_cli(study)

    assert result.exit_code == 0, result.output
    assert "nothing to compare yet" in result.output and "run more trials" in result.output
    assert "has 1 complete search trial(s)" in result.output


def test_one_trial_or_one_value_tried_gives_a_clear_result_without_importance(tmp_path):
    study = StudyBuilder(tmp_path)
    study.trial({LEVEL: 0, FAST_MATH: True}, 2.0)
    study.trial({LEVEL: 1, FAST_MATH: True}, 1.0)
    trials = load_trials(study.url, study.name)

    effects = by_param(flag_effects(trials, noise=0.01))

    assert effects[FAST_MATH].values_tried == 1 and not effects[FAST_MATH].above_noise
    assert effects[FAST_MATH].effect == 0.0
    assert effects[LEVEL].above_noise and effects[LEVEL].importance is None
    assert "only true tried" in run_cli(study).output


def test_a_multi_objective_study_is_judged_on_the_time_ratio(tmp_path):
    study = StudyBuilder(tmp_path, objectives=("time", "memory"))
    for i, (level, fast) in enumerate(itertools.product([0, 1, 2, 3], [False, True])):
        memory = 1e6 if fast else 9e6  # fast math "saves" memory, never time
        study.trial({LEVEL: level, FAST_MATH: fast},
                    (2.0 if level == 0 else 1.0) * (1 + JITTER[i % len(JITTER)]), memory)
    trials = load_trials(study.url, study.name)

    on_time = by_param(flag_effects(trials, noise=0.02))
    on_memory = by_param(flag_effects(trials, noise=0.02, objective_index=1))

    assert on_time[LEVEL].above_noise and on_time[LEVEL].worst_value == 0
    assert not on_time[FAST_MATH].above_noise
    assert on_memory[FAST_MATH].above_noise and on_memory[FAST_MATH].worst_value is False
    result = run_cli(study)
    assert result.exit_code == 0, result.output
    assert "slower at 0 than at" in result.output


def test_the_time_ratio_is_found_where_the_study_put_it(tmp_path):
    study = StudyBuilder(tmp_path, objectives=("memory", "time"))  # --objective memory,time
    for i, (level, fast) in enumerate(itertools.product([0, 1, 2, 3], [False, True])):
        memory = 1e6 if fast else 9e6  # fast math "saves" memory, never time
        study.trial({LEVEL: level, FAST_MATH: fast},
                    memory, (2.0 if level == 0 else 1.0) * (1 + JITTER[i % len(JITTER)]))

    result = run_cli(study)

    assert result.exit_code == 0, result.output
    assert "slower at 0 than at" in result.output
    assert "(+800.0%)" not in result.output  # 9e6 / 1e6 bytes: memory read as time


def test_a_memory_only_study_is_refused_with_what_to_do(tmp_path):
    study = StudyBuilder(tmp_path, objectives=("memory",))
    level_matters(study)

    result = run_cli(study)

    assert result.exit_code == 2
    assert "minimises peak memory only" in result.output
    assert "--objective time" in result.output


def test_only_complete_search_trials_count_and_a_reused_measurement_counts_once(tmp_path):
    study = StudyBuilder(tmp_path)
    study.trial({LEVEL: 0}, 2.0)
    study.trial({LEVEL: 0}, 2.0, reused_run_id=1)
    study.trial({LEVEL: 1}, 1.0, role=Role.RECOMMENDED)
    study.trial({LEVEL: 2}, 1.0, state=optuna.trial.TrialState.PRUNED)

    kept = compared_trials(load_trials(study.url, study.name))

    assert [(t.params, t.user_attrs["role"]) for t in kept] == [
        ({LEVEL: 0}, "search"), ({LEVEL: 1}, "recommended")]


def two_valued(spread: float) -> Measurement:
    """A PAIRED run whose arms both step at 1 ms × (1 ± `spread`), five times each.

    Its ratio is 1. A resample's median is the low value, the high one or their
    mean, and each extreme is drawn often (about 38% per arm), so the 95%
    bootstrap interval runs from (1 - s) / (1 + s) to (1 + s) / (1 - s): the
    relative half-width is 2s / (1 - s²).
    """
    steps = tuple(1e-3 * (1 + spread * x) for x in (-1, 1, -1, 1, -1, 1, -1, 1, -1, 1))
    return outcomes.paired(steps=steps, baseline=steps[1:] + steps[:1])


def test_noise_level_is_the_median_relative_half_width_of_paired_runs(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path}/a.db")
    store.ensure_study("s", "cpu", "matmul", "tiny", 1, "paired")
    counted = [(Role.BASELINE, 0.03), (Role.SEARCH, 0.01), (Role.RECOMMENDED, 0.08)]
    for role, spread in counted:  # half-widths 0.0600540, 0.0200020, 0.1605136
        store.record_run("s", None, role, {}, {}, ok(two_valued(spread)))
    # not counted: a confirmation run, a failed run, a DIRECT run (no baseline steps)
    store.record_run("s", None, Role.CONFIRM, {}, {}, ok(two_valued(0.5)))
    store.record_run("s", None, Role.SEARCH, {}, {},
                     TrialOutcome(OutcomeKind.OOM, "out of memory", two_valued(0.5)))
    direct = Measurement(step_times_s=(1e-3,) * 5, compile_time_s=0.1)
    store.record_run("s", None, Role.SEARCH, {}, {}, ok(direct), ratio=1.0)

    noise = noise_level(store.runs("s"))

    assert noise == pytest.approx(2 * 0.03 / (1 - 0.03**2))  # the middle of the three
    assert noise_level(store.runs("s", roles=[Role.SEARCH])) == pytest.approx(
        2 * 0.01 / (1 - 0.01**2))  # the one OK paired search run
    assert noise_level(store.runs("s", roles=[Role.CONFIRM])) is None
    assert noise_level([]) is None
