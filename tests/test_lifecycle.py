"""A study's lifecycle (issue 32): delete one, or start it over with `study --restart`."""

from __future__ import annotations

import pytest
from cli_runner import invoke

from autotune.ground.records import Measurement, OutcomeKind, Role, TrialOutcome
from autotune.storage import Store

STUDY = ["study", "--benchmark", "matmul", "--preset", "tiny", "--devices", "1",
         "--steps", "5", "--warmup", "1", "--seed", "3", "--confirm", "0", "--no-fit",
         "--no-racing", "--space", "cpu"]


def _two_studies(url: str) -> None:
    """Studies `s` and `other`, each with a run and Optuna's study of the same name."""
    import optuna

    from autotune.storage._optuna import rdb_storage

    store = Store.open(url)
    ok = TrialOutcome(OutcomeKind.OK, "", Measurement((0.01,) * 5, 0.1))
    for name in ("s", "other"):
        store.ensure_study(name, "cpu", "matmul", "tiny", 1, "paired")
        store.record_run(name, 0, Role.BASELINE, {}, {}, ok)
        _, claim = store.claim(name, "env", f"k-{name}", Role.SEARCH, {}, 1, ("h", 1))
        assert claim is not None
    store.close()
    storage = rdb_storage(url, create=True)
    for name in ("s", "other"):
        optuna.create_study(study_name=name, storage=storage)
    storage.engine.dispose()


def _optuna_names(url: str) -> list[str]:
    import optuna

    from autotune.storage._optuna import rdb_storage

    return sorted(optuna.get_all_study_names(rdb_storage(url, create=False)))


def test_delete_removes_the_study_and_optunas_and_leaves_the_others(url, tmp_path):
    _two_studies(url)
    done = invoke("delete", "s", "--yes", "--storage", url, cwd=tmp_path)
    assert done.exit_code == 0, done.output
    assert "deleted study 's' and its 1 runs" in done.output
    with Store.open(url) as store:
        assert [s.name for s in store.list_studies()] == ["other"]
        assert len(store.runs("other")) == 1 and len(store.claims("other")) == 1
    assert _optuna_names(url) == ["other"]


def test_delete_without_yes_where_no_one_can_answer_deletes_nothing(sqlite_url, tmp_path):
    _two_studies(sqlite_url)
    done = invoke("delete", "s", "--storage", sqlite_url, cwd=tmp_path)
    assert done.exit_code == 2
    assert "needs --yes" in done.output and "nothing was deleted" in done.output
    with Store.open(sqlite_url) as store:
        assert [s.name for s in store.list_studies()] == ["s", "other"]


def test_deleting_a_study_that_is_not_there_names_the_known_ones(sqlite_url, tmp_path):
    _two_studies(sqlite_url)
    done = invoke("delete", "nope", "--yes", "--storage", sqlite_url, cwd=tmp_path)
    assert done.exit_code == 2
    assert "no study named 'nope'" in done.output and "other" in done.output


@pytest.mark.slow
def test_a_fixed_workload_starts_over_with_restart(tmp_path, monkeypatch):
    """The baseline failed (a flag this XLA lacks in XLA_FLAGS); the message says how to
    start over; fixed, `--restart` deletes the failed study and measures anew."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_bogus_flag=1")
    failed = invoke(*STUDY, "--trials", "2", cwd=tmp_path)
    assert failed.exit_code == 1
    assert "run the same command with --restart" in failed.output
    monkeypatch.delenv("XLA_FLAGS")
    again = invoke(*STUDY, "--trials", "2", "--restart", cwd=tmp_path)
    assert again.exit_code == 0, again.output
    assert "--restart: deleted study 'cpu-matmul-tiny-1dev' and its 1 runs" in again.output
    with Store.open(f"sqlite:///{tmp_path / 'autotune.db'}") as store:
        runs = store.runs("cpu-matmul-tiny-1dev")
    baseline = [r for r in runs if r.role is Role.BASELINE]
    assert len(baseline) == 1 and baseline[0].outcome.ok


@pytest.mark.slow
def test_keep_trial_files_keeps_every_trials_folder_with_its_full_logs(tmp_path):
    import json

    kept = tmp_path / "kept"
    done = invoke(*STUDY, "--trials", "2", "--keep-trial-files", str(kept), cwd=tmp_path)
    assert done.exit_code == 0, done.output
    folders = sorted(kept.glob("autotune-trial-*"))
    with Store.open(f"sqlite:///{tmp_path / 'autotune.db'}") as store:
        runs = store.runs("cpu-matmul-tiny-1dev")
    assert len(folders) == len(runs) >= 2
    for folder in folders:
        assert {"stdout.txt", "stderr.txt", "result.json", "flags.json"} <= {
            p.name for p in folder.iterdir()}
    measured = sorted(json.dumps(json.loads((f / "flags.json").read_text())["flags"],
                                 sort_keys=True) for f in folders)
    assert measured == sorted(json.dumps(dict(r.flags), sort_keys=True) for r in runs)
