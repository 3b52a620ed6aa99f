"""The Python API (`autotune.Study`): the same answers as the command line, for notebooks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import autotune
from autotune.cli import app
from autotune.ground.errors import StudyNotFoundError, UsageError
from autotune.ground.records import MeasureMode, OutcomeKind, Role, TrialOutcome
from autotune.storage import Store


@pytest.mark.slow
def test_a_study_created_and_run_from_python_reads_as_the_cli_does(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'api.db'}"
    trials: list[int] = []
    study = autotune.Study.create(space="cpu", benchmark="matmul", preset="tiny", devices=1,
                                  trials=3, steps=5, warmup=1, seed=3, storage=url)
    assert study.name == "cpu-matmul-tiny-1dev"
    summary = study.run(confirm=1, confirm_repeats=2, confirm_max=0,
                        on_trial=lambda ev: trials.append(ev.done))
    assert trials == [1, 2, 3] and summary.launched >= 1

    reader = autotune.Study("cpu-matmul-tiny-1dev", storage=url)
    rows = CliRunner().invoke(app, ["best", "cpu-matmul-tiny-1dev", "--format", "json",
                                    "--storage", url])
    best = reader.best()
    assert [entry.to_json() for entry in best] == json.loads(rows.output)
    assert best[0].rank is None and best[0].trial == 0  # typed: the baseline first
    measured = [r.role for r in reader.runs() if r.role is not Role.FINGERPRINT]  # fit's
    # the baseline, then a search trial and either another or a race of the leader
    assert measured[:2] == [Role.BASELINE, Role.SEARCH]
    assert measured[2] in (Role.SEARCH, Role.RACE)
    document = reader.export(tmp_path / "best.yaml")
    written = yaml.safe_load((tmp_path / "best.yaml").read_text())
    cli = yaml.safe_load(CliRunner().invoke(app, ["export", "cpu-matmul-tiny-1dev", "-o", "-",
                                                  "--storage", url]).output)
    for doc in (document, written, cli):
        doc.pop("exported_at")
    assert document == written == cli
    rec = reader.recommendation()
    assert rec.recommended == document["recommended"]
    assert rec.trial == document["trial"] and rec.reason == document["reason"]


def stored_study(tmp_path: Path) -> str:
    from autotune.ground.records import Measurement

    url = f"sqlite:///{tmp_path / 'autotune.db'}"
    store = Store.open(url)
    store.ensure_study("s", "cpu", "matmul", "tiny", 1, MeasureMode.PAIRED, "cpu")
    m = Measurement((1e-3,) * 4, 0.5, mode=MeasureMode.PAIRED, baseline_step_times_s=(1e-3,) * 4,
                    fingerprint="base", baseline_fingerprint="base")
    store.record_run("s", 0, Role.BASELINE, {}, {}, TrialOutcome(OutcomeKind.OK, "", m))
    return url


def test_reading_a_study_never_runs_it(tmp_path):
    study = autotune.Study("s", storage=stored_study(tmp_path))
    assert study.recommendation().to_json() == {"recommended": False, "trial": None, "reason": (
        "no configuration beside XLA's defaults was measured: keep XLA's defaults")}
    [baseline] = study.best()
    assert (baseline.rank, baseline.trial, baseline.recommended) == (None, 0, False)
    assert study.shrunk() is None
    with pytest.raises(UsageError, match="opened for reading"):
        study.run()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"fmt": "toml"}, "unknown export format 'toml'"),
    ({"rank": 1, "trial": 1}, "give --rank or --trial, not both"),
])
def test_a_bad_export_request_is_a_usage_error(tmp_path, kwargs, message):
    with pytest.raises(UsageError, match=message):
        autotune.Study("s", storage=stored_study(tmp_path)).export(**kwargs)


def test_a_missing_study_or_database_says_what_to_do(tmp_path):
    with pytest.raises(StudyNotFoundError, match="no database at"):
        autotune.Study("s", storage=f"sqlite:///{tmp_path / 'none.db'}").best()
    with pytest.raises(StudyNotFoundError, match="nosuch"):
        autotune.Study("nosuch", storage=stored_study(tmp_path)).best()


@pytest.mark.parametrize(("options", "message"), [
    ({"space": "nosuch"}, "nosuch"),
    ({"space": "cpu", "preset": "huge"}, "unknown preset 'huge'"),
    ({"space": "cpu", "mode": "both"}, "unknown mode 'both'"),
    ({"space": "cpu", "memory_budget": "lots"}, "--memory-budget 'lots' is not a size"),
    ({"space": "cpu", "script": "a.py", "command": "b"}, "give --script or --command"),
])
def test_a_bad_plan_is_refused_before_anything_runs(options, message):
    with pytest.raises(UsageError, match=message):
        autotune.Study.create(**options)


def test_create_takes_every_study_option_by_name_with_its_default():
    """Typed keyword arguments, not **options (issue 32), kept equal to StudyOptions."""
    import inspect

    from autotune.study.options import StudyOptions

    params = dict(inspect.signature(autotune.Study.create).parameters)
    params.pop("storage")
    fields = StudyOptions.model_fields
    assert list(params) == list(fields)
    for name, param in params.items():
        assert param.kind is inspect.Parameter.KEYWORD_ONLY
        assert param.annotation is not inspect.Parameter.empty, name
        default = fields[name].default
        expected = inspect.Parameter.empty if fields[name].is_required() else default
        assert param.default == expected, name


def test_a_mistyped_argument_is_named_at_the_users_call():
    with pytest.raises(TypeError, match=r"Study.create\(\) got an unexpected keyword "
                                        r"argument 'trails'"):
        autotune.Study.create(space="cpu", trails=3)  # type: ignore[call-arg]
