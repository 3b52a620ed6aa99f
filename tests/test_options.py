"""`StudyOptions`: one record of a study's options, from which the rest is derived."""

from __future__ import annotations

import inspect
from dataclasses import fields

import pytest

from autotune.cli.pgle import pgle as pgle_command
from autotune.cli.study import study as study_command
from autotune.ground.errors import UsageError
from autotune.ground.protocol import Job
from autotune.launch.workloads import resolve_benchmark
from autotune.spaces import load_space
from autotune.study.options import (
    JOB_FIELDS,
    NOT_RECORDED,
    AfterSearch,
    PgleOptions,
    StudyOptions,
)
from autotune.study.plan import StudyPlan


def test_every_option_is_a_parameter_of_the_study_command_with_the_same_default():
    """The command makes one option of each field: its default, its bounds and its help."""
    parameters = inspect.signature(study_command).parameters
    for name, info in StudyOptions.model_fields.items():
        assert name in parameters, f"`autotune study` has no option for {name!r}"
        if not info.is_required():
            assert parameters[name].default == info.default, name
    assert {"storage", "workers", "prune"} <= set(parameters)  # the command's own


def test_an_option_out_of_the_fields_bounds_is_refused_by_the_command(tmp_path):
    from cli_runner import invoke

    done = invoke("study", "--space", "cpu", "--steps", "2", cwd=tmp_path)
    assert done.exit_code == 2 and "--steps" in done.output
    assert "greater than or equal to 3" in " ".join(done.output.split())
    done = invoke("study", "--space", "cpu", "--heartbeat", "0", cwd=tmp_path)
    assert done.exit_code == 2 and "--heartbeat" in done.output
    assert not (tmp_path / "autotune.db").exists()


def test_the_pgle_command_is_made_from_its_record_as_well():
    parameters = inspect.signature(pgle_command).parameters
    assert set(parameters) == set(PgleOptions.model_fields) | {"fmt"}
    assert all(parameters[name].default == info.default
               for name, info in PgleOptions.model_fields.items())
    with pytest.raises(UsageError, match="pgle options refused: repeats: Input should be"):
        PgleOptions.of(repeats=0)


def test_the_job_carries_every_option_named_as_a_job_field():
    options = StudyOptions(space="cpu", steps=7, warmup=3, max_warmup=9)
    job = options.job()
    shared = set(StudyOptions.model_fields) & {f.name for f in fields(Job)}
    assert shared == set(StudyOptions.model_fields) & JOB_FIELDS
    assert {"steps", "warmup", "max_warmup"} <= shared
    assert all(getattr(job, name) == getattr(options, name) for name in shared)
    assert job.compiler_options is None and job.phases == Job().phases


def test_a_plan_records_its_file_hashes_and_every_option_a_rerun_must_match():
    plan = StudyPlan.of(name="s", space=load_space("cpu"), workload=resolve_benchmark("matmul"),
                        trials=5, seed=3, steps=9, prune_margin=None)
    recorded = plan.recorded()
    assert {"space_sha256", "workload_sha256", "command", "memory_limit_bytes", "steps",
            "warmup", "max_warmup", "sampler", "prune_margin", "timeout_per_trial", "fit",
            "launcher"} <= set(recorded)
    assert not set(recorded) & (NOT_RECORDED - {"command"})  # trials and seed may change
    assert recorded["steps"] == 9 and recorded["prune_margin"] is None
    assert plan.settings().job.steps == 9 and plan.trials == 5


@pytest.mark.parametrize(("values", "words"), [
    ({"space": "cpu", "trails": 3}, "trails: Extra inputs are not permitted"),
    ({"space": "cpu", "trials": 0}, "trials: Input should be greater than or equal to 1"),
    ({"trials": 3}, "space: Field required"),
])
def test_a_bad_option_is_refused_naming_it(values, words):
    with pytest.raises(UsageError, match="study options refused: .*" + words):
        StudyOptions.of(**values)


def test_what_happens_after_the_search_comes_from_the_options():
    options = StudyOptions(space="cpu", confirm=2, confirm_repeats=5, shrink=False, pgle=1)
    assert AfterSearch.of(options) == AfterSearch(2, 5, False, 1)
    # Study.run's arguments override what is given, and leave the rest to the options
    assert AfterSearch.of(options, confirm=0, shrink=None, pgle=None) == AfterSearch(
        0, 5, False, 1)
    # confirmation's processes time the search's steps unless --confirm-steps says more
    assert AfterSearch.of(options).confirm_steps is None
    longer = StudyOptions(space="cpu", confirm_steps=160)
    assert AfterSearch.of(longer).confirm_steps == 160
    assert AfterSearch.of(longer, confirm_steps=40).confirm_steps == 40
