"""`autotune study --pgle K`: the profile phase of a study, its artifact and its export.

The study runs for real on the CPU (profile run, conversion, performance runs,
the artifact stored in the database). The CPU compiler ignores the profile, so
a profile is never kept here; the export of a kept profile is tested with
PGLE runs stored as a GPU would report them (named so), on a real study.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sql_rows import rows as _rows

from autotune import pgle as rules
from autotune.api import Study, open_store
from autotune.api.config import load_config
from autotune.ground.errors import ConfigFileError
from autotune.ground.records import Measurement, MeasureMode, OutcomeKind, Role, TrialOutcome
from autotune.results.pgle import profile_kind

STUDY = "pgle-study"
SHORT = ["--benchmark", "matmul", "--preset", "tiny", "--devices", "1", "--steps", "5",
         "--warmup", "1", "--max-warmup", "3", "--trials", "3", "--confirm", "1",
         "--confirm-repeats", "2", "--confirm-max", "0", "--no-racing", "--no-shrink"]


@pytest.fixture(scope="module")
def studied(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A short real study with `--pgle 1` on one SQLite file; (folder, url, stdout)."""
    folder = tmp_path_factory.mktemp("pgle-study")
    url = f"sqlite:///{folder}/s.db"
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "study", "--space", "cpu", "--name", STUDY,
         *SHORT, "--pgle", "1", "--storage", url],
        cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return folder, url, done.stdout


@pytest.mark.slow
def test_pgle_measures_what_export_writes_with_a_profile_stored_in_the_database(studied):
    _, url, stdout = studied
    pgle = _rows(url, "select trial_number, kind, extras from autotune_runs "
                      "where role = 'pgle' order by id")
    assert len(pgle) == 4 and {k for _, k, _ in pgle} == {"ok"}  # at least 4 (MEASURE_REPEATS)
    assert len({t for t, _, _ in pgle}) == 1
    facts = [json.loads(e) if isinstance(e, str) else e for _, _, e in pgle]
    assert [f["pgle"]["collected"] for f in facts] == [True, False, False, False]  # round 0
    art = _rows(url, "select trial_number, kind, content, meta from autotune_artifacts")
    flags = _rows(url, "select flags from autotune_runs where role = 'pgle'")[0][0]
    flags = json.loads(flags) if isinstance(flags, str) else flags
    kind = profile_kind(flags)
    assert len(art) == 1 and art[0][0] == pgle[0][0] and art[0][1] == kind
    costs = rules.parse_pbtxt(art[0][2])
    assert costs and facts[0]["pgle"]["costs"] == len(costs)
    meta = json.loads(art[0][3]) if isinstance(art[0][3], str) else art[0][3]
    assert meta["xla_version"] == importlib.metadata.version("jaxlib")
    claims = _rows(url, "select key from autotune_claims where role = 'pgle'")
    digest = kind.split(":")[1]
    assert sorted(k for (k,) in claims) == [f"pgle:{pgle[0][0]}:{digest}:{n}" for n in range(4)]
    said = " ".join(stdout.split())
    assert f"PGLE on trial {pgle[0][0]}'s flags" in said and "not kept" in said


@pytest.mark.slow
def test_pgle_runs_stay_out_of_the_ranking_and_the_export_says_not_kept(studied):
    from autotune.results.evidence import pooled
    from autotune.results.ranking import ranked

    folder, url, _ = studied
    runs = open_store(url, must_exist=True).runs(STUDY)
    without = [r for r in runs if r.role is not Role.PGLE]
    assert len(without) < len(runs)
    # a PGLE run is no evidence about a configuration against XLA's defaults
    assert [r.id for r in ranked(runs)] == [r.id for r in ranked(without)]
    assert [(p.program, p.n, p.ratio) for p in pooled(runs, defaults=True)] == \
        [(p.program, p.n, p.ratio) for p in pooled(without, defaults=True)]
    document = Study(STUDY, url).export(folder / "best.yaml")
    assert document["pgle"]["keep"] is False and document["pgle"]["profile"] is None
    assert document["pgle"]["runs"] == 4
    assert rules.PROFILE_PATH_FLAG not in document["flags"]
    assert not (folder / "best.pgle.pbtxt").exists()


@pytest.mark.slow
def test_running_the_study_again_does_not_measure_pgle_twice(studied):
    folder, url, _ = studied
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "study", "--space", "cpu", "--name", STUDY,
         *SHORT, "--pgle", "1", "--storage", url],
        cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _rows(url, "select count(*) from autotune_runs where role = 'pgle'") == [(4,)]


def _gpu_like_pgle(url: str, folder: Path) -> int:
    """Store four PGLE runs (`MIN_PROCESSES`) of the exported configuration as a GPU would
    report them (the profile's program faster than the same flags without it), with the
    profile."""
    store = open_store(url, must_exist=True, write=True)
    runs = store.runs(STUDY)
    base = next(r for r in runs if r.role is Role.BASELINE)
    assert base.trial_number is not None
    number = base.trial_number
    for i in range(4):
        m = Measurement(step_times_s=(0.009, 0.0091, 0.0092, 0.009),
                        baseline_step_times_s=(0.010, 0.0101, 0.0102, 0.010),
                        compile_time_s=0.1, mode=MeasureMode.PAIRED, fingerprint="aa" * 8,
                        baseline_fingerprint="bb" * 8,
                        pgle={"mode": "manual", "profile": "/x/profile.pbtxt",
                              "collected": i == 0, "costs": 2, "source": "converter",
                              "names_in_program": 2, "profile_fingerprint": "bb" * 8,
                              "note": ""})
        store.record_run(STUDY, number, Role.PGLE, {}, {}, TrialOutcome(OutcomeKind.OK, "", m),
                         base.environment, env_key=base.env_key)
    meta = rules.ProfileMeta(model="m", fingerprint="bb" * 8,
                             xla_version=importlib.metadata.version("jaxlib"), backend="gpu",
                             flags=rules.reference_options({}), source="converter", runs=4,
                             percentile=50.0,
                             created_at=time.time())
    costs = [rules.Cost("all-gather-start.1", 7040.5), rules.Cost("fusion.2", 12.0)]
    store.put_artifact(STUDY, number, base.env_key or "", profile_kind({}),
                       rules.render_pbtxt(costs), json.loads(meta.to_json()))
    return number


@pytest.mark.slow
def test_a_kept_profile_is_exported_beside_the_yaml_gpu_reported_runs(tmp_path):
    folder = tmp_path
    url = f"sqlite:///{folder}/s.db"
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "study", "--space", "cpu", "--name", STUDY,
         *SHORT, "--confirm", "0", "--storage", url],
        cwd=folder, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    _gpu_like_pgle(url, folder)
    shown = Study(STUDY, url).export()  # no file: the verdict, no profile to point at
    assert shown["pgle"]["keep"] is True and shown["pgle"]["profile"] is None
    assert rules.PROFILE_PATH_FLAG not in shown["flags"]
    document = Study(STUDY, url).export(folder / "best.yaml")
    profile = folder / "best.pgle.pbtxt"
    assert document["pgle"]["keep"] is True and document["pgle"]["profile"] == profile.name
    assert document["flags"][rules.LHS_FLAG] is True
    assert document["flags"][rules.PROFILE_PATH_FLAG] == str(profile)
    assert f"--{rules.PROFILE_PATH_FLAG}={profile}" in document["xla_flags"]
    assert [c.name for c in rules.read_profile(str(profile))[0]] == [
        "all-gather-start.1", "fusion.2"]
    # the pair moves together: the path follows the file
    moved = folder / "elsewhere"
    moved.mkdir()
    for name in ("best.yaml", profile.name, profile.name + rules.META_SUFFIX):
        shutil.move(folder / name, moved / name)
    config = load_config(moved / "best.yaml")
    assert config.flags[rules.PROFILE_PATH_FLAG] == str(moved / profile.name)
    # a profile of another XLA is refused when the file is loaded
    meta_file = moved / (profile.name + rules.META_SUFFIX)
    meta_file.write_text(json.dumps({**json.loads(meta_file.read_text()),
                                     "xla_version": "0.1.0"}))
    with pytest.raises(ConfigFileError, match="stale.*0.1.0"):
        load_config(moved / "best.yaml")
    (moved / profile.name).unlink()
    with pytest.raises(ConfigFileError, match="pgle.profile"):
        load_config(moved / "best.yaml")
