"""Choosing the sampler by the space's size: counted, never enumerated (no JAX, no trials).

A space of 2 * 10**9 points once made `--sampler auto` pick grid and build the
whole grid (24 GB, killed). Here such spaces are counted with the enumerations
(`Space.grid`, `Param.values`) made to fail, so a test that passes proves
nothing was listed.
"""

from __future__ import annotations

import time
from pathlib import Path

import optuna
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autotune.cli import app
from autotune.ground.errors import UsageError
from autotune.spaces import Param, Space, load_space, load_space_text
from autotune.study.samplers import GRID_LIMIT, Objective, choose_sampler, grid_order

ONE, TWO = (Objective.TIME,), (Objective.TIME, Objective.MEMORY)
AR = "xla_gpu_all_reduce_combine_threshold_bytes"
AG = "xla_gpu_all_gather_combine_threshold_bytes"
RS = "xla_gpu_reduce_scatter_combine_threshold_bytes"
PERMUTE = "xla_gpu_collective_permute_decomposer_threshold"
BOOLS = ("xla_gpu_enable_latency_hiding_scheduler", "xla_gpu_enable_pipelined_all_gather",
         "xla_gpu_enable_pipelined_all_reduce", "xla_gpu_enable_while_loop_double_buffering")
#: 10**6 * 2 * 10**3 points: two wide int ranges, nothing conditional.
HUGE = f"""schema_version: 1
name: huge
description: two wide thresholds
backend: gpu
params:
  {AR}: {{type: int, low: 0, high: 999999}}
  {AG}: {{type: int, low: 0, high: 1999}}
"""
HUGE_SIZE = 2_000_000_000


@pytest.fixture
def huge_file(tmp_path: Path) -> Path:
    path = tmp_path / "huge.yaml"
    path.write_text(HUGE)
    return path


@pytest.fixture
def no_enumeration(monkeypatch: pytest.MonkeyPatch) -> None:
    """Listing a grid or a range's values fails the test."""
    def listed(*args: object) -> None:
        raise AssertionError("enumerated")

    monkeypatch.setattr(Space, "grid", listed)
    monkeypatch.setattr(Param, "values", listed)


def one_range(size: int) -> Space:
    return load_space_text(f"schema_version: 1\nname: r\nbackend: gpu\nparams:\n"
                           f"  {AR}: {{type: int, low: 1, high: {size}}}\n")


# --- auto ------------------------------------------------------------------------------------


@pytest.mark.usefixtures("no_enumeration")
def test_auto_counts_a_huge_space_and_never_picks_grid_for_it(huge_file):
    huge = load_space(str(huge_file))
    start = time.perf_counter()
    assert huge.size() == HUGE_SIZE
    for trials in (12, 3_000_000_000):  # even a budget the whole space fits in
        choice = choose_sampler("auto", ONE, huge, trials)
        assert choice.name == "tpe"
        assert f"{HUGE_SIZE} configurations" in choice.reason
        assert choose_sampler("auto", TWO, huge, trials).name == "nsga2"
    assert time.perf_counter() - start < 0.5


@pytest.mark.usefixtures("no_enumeration")
def test_auto_picks_grid_up_to_the_limit_and_never_past_it():
    assert choose_sampler("auto", ONE, one_range(GRID_LIMIT), 10**6).name == "grid"
    past = choose_sampler("auto", ONE, one_range(GRID_LIMIT + 1), 10**6)
    assert past.name == "tpe"
    assert past.reason == f"one objective, {GRID_LIMIT + 1} configurations > {GRID_LIMIT} " \
                          "that grid enumerates"
    assert choose_sampler("auto", ONE, one_range(50), 49).name == "tpe"  # the budget still counts


# --- explicit grid ---------------------------------------------------------------------------

REFUSAL = (f"space 'huge' has {HUGE_SIZE} configurations, more than grid enumerates "
           f"({GRID_LIMIT}): use --sampler tpe, random or auto, or shrink the space")


@pytest.mark.usefixtures("no_enumeration")
def test_explicit_grid_on_a_huge_space_is_refused_with_the_count(huge_file):
    with pytest.raises(UsageError) as refused:
        choose_sampler("grid", ONE, load_space(str(huge_file)), 12)
    assert REFUSAL in str(refused.value)


@pytest.mark.usefixtures("no_enumeration")
def test_grid_order_refuses_a_huge_space_before_building_a_point(huge_file):
    with pytest.raises(UsageError, match=f"has {HUGE_SIZE} configurations"):
        grid_order(load_space(str(huge_file)), seed=0)


def test_the_study_command_refuses_grid_on_a_huge_space_before_writing(huge_file, tmp_path):
    db = tmp_path / "a.db"
    result = CliRunner().invoke(app, [
        "study", "--space", str(huge_file), "--benchmark", "matmul", "--sampler", "grid",
        "--storage", f"sqlite:///{db}"])
    assert result.exit_code == 2, result.output
    assert REFUSAL in " ".join(result.output.split())
    assert not db.exists()


# --- counting conditional spaces -------------------------------------------------------------


@pytest.mark.usefixtures("no_enumeration")
def test_a_conditional_space_is_counted_without_listing_its_ranges():
    # three independent parts: a wide int range, and a bool read only at one of its values
    params = {flag: {"type": "int", "low": 0, "high": 999_999} for flag in (AR, AG, RS)}
    params |= {b: {"type": "bool"} for b in BOOLS[:3]}
    conditions = [{"param": b, "when": {flag: 1024}}
                  for b, flag in zip(BOOLS[:3], (AR, AG, RS), strict=True)]
    space = load_space_text(yaml.safe_dump({
        "schema_version": 1, "name": "c", "backend": "gpu", "params": params,
        "conditions": conditions}))
    start = time.perf_counter()
    assert space.size() == (999_999 + 2) ** 3  # a walk of the values would take hours
    assert time.perf_counter() - start < 0.5


@st.composite
def conditional_spaces(draw: st.DrawFn) -> dict:
    """Spaces of 1-5 params (bools, a small int range, unset allowed), maybe a group,
    conditions on values the params have (some chained)."""
    names = draw(st.lists(st.sampled_from([*BOOLS, PERMUTE]), min_size=1, max_size=5,
                          unique=True))
    value = {n: st.integers(0, 3) if n == PERMUTE else st.booleans() for n in names}
    pick = st.sampled_from(names)
    members = draw(st.lists(pick, max_size=2, unique=True))
    conditioned = draw(st.lists(pick, max_size=3, unique=True))

    def others(name: str) -> st.SearchStrategy[str]:
        return st.sampled_from([n for n in names if n != name] or names)

    return {
        "schema_version": 1, "name": "s", "backend": "gpu",
        "params": {n: {"type": "int", "low": 0, "high": 3} if n == PERMUTE else {"type": "bool"}
                   for n in names} | {n: {"type": "bool", "allow_unset": True} for n in draw(
                       st.lists(st.sampled_from(names), unique=True)) if n != PERMUTE},
        "groups": {"g": {"params": members, "values": {m: draw(value[m]) for m in members}}}
        if members else {},
        "conditions": [{"param": n, "when": {(o := draw(others(n))): draw(value[o])}}
                       for n in conditioned],
    }


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conditional_spaces())
def test_the_count_is_the_number_of_distinct_grid_configurations(data):
    from autotune.ground.errors import SpaceValidationError

    try:
        space = load_space_text(yaml.safe_dump(data, sort_keys=False))
    except SpaceValidationError:
        return
    points = space.grid()
    configs = {tuple(sorted(space.sample(optuna.trial.FixedTrial(p)).items())) for p in points}
    assert space.size() == len(points) == len(configs)
