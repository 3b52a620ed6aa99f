"""The export document and its forms: what is recommended, and each form read back for real.

Studies are stored by hand (a fake measurement, so the verdict is known), the
commands run through the real CLI, and each form is read back by what a user
would use: `sh` sources the env form, `yaml`/`json` load the others.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import outcomes
import pytest
import yaml
from typer.testing import CliRunner

from autotune.cli import app
from autotune.ground.records import Measurement, OutcomeKind, Role, TrialOutcome
from autotune.storage import Store

FAST = "xla_cpu_enable_fast_math"
DUMP = "xla_dump_to"
VMODULE = "TF_CPP_VMODULE"
#: A value for a string flag that would run commands or expand variables if the
#: env form quoted it naively (XLA_FLAGS tokens cannot hold whitespace).
DUMP_VALUE = "/tmp/it's$(touch${IFS}pwned)`touch${IFS}pwned2`;$HOME\"x\\"
#: An environment variable's value may hold anything but NUL, newlines included.
VMODULE_VALUE = "a'b\"c $(touch pwned3) `touch pwned4`; ${HOME} \\ \n second line *"


def paired(ratio: float, fingerprint: str, steps: int = 6) -> Measurement:
    """Constant steps: a point interval at `ratio`, so the verdict is known exactly."""
    return outcomes.paired(ratio, baseline=(1e-3,) * steps, compile_time_s=0.5,
                           fingerprint=fingerprint, baseline_fingerprint="base",
                           peak_memory_bytes=1 << 20, memory_source="memory_stats")


def ok(m: Measurement) -> TrialOutcome:
    return TrialOutcome(OutcomeKind.OK, "", m)


def make_study(url: str, *, confirmed: float | None, flags: dict | None = None) -> None:
    """Baseline, one search trial (ratio 0.8) with `flags`, and four confirm runs of it
    at `confirmed` (none when None)."""
    flags = flags if flags is not None else {FAST: True}
    store = Store.open(url)
    store.ensure_study("s", "cpu", "matmul", "tiny", 1, "paired", "cpu")
    store.record_run("s", 0, Role.BASELINE, {}, {}, ok(paired(1.0, "base")), ratio=1.0)
    store.record_run("s", 1, Role.SEARCH, flags, {}, ok(paired(0.8, "fast")), ratio=0.8)
    store.record_run("s", 2, Role.SEARCH, {"xla_backend_optimization_level": 2}, {},
                     ok(paired(0.9, "o2")), ratio=0.9)
    for _ in range(4 if confirmed is not None else 0):
        store.record_run("s", 1, Role.CONFIRM, flags, {}, ok(paired(confirmed or 1, "fast")),
                         ratio=confirmed)


def export(url: str, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["export", "s", *args, "--storage", url])
    return result.exit_code, result.output


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'autotune.db'}"


def test_a_confirmed_gain_is_exported_as_recommended_with_its_interval(db, tmp_path):
    make_study(db, confirmed=0.8)
    code, output = export(db, "-o", str(tmp_path / "best.yaml"))
    assert code == 0, output
    doc = yaml.safe_load((tmp_path / "best.yaml").read_text())
    assert doc["recommended"] is True and doc["trial"] == 1 and doc["flags"] == {FAST: True}
    assert doc["reason"].startswith("confirmed ×1.250 [1.250, 1.250] faster")
    assert doc["measured"]["verdict"] == "faster"
    assert doc["measured"]["speedup_interval"] == pytest.approx([1.25, 1.25])
    assert doc["xla_flags"] == f"--{FAST}=true"
    assert [c["trial"] for c in doc["candidates"]] == [1, 2]
    assert [c["recommended"] for c in doc["candidates"]] == [True, False]
    assert "recommended: confirmed ×1.250" in output


@pytest.mark.parametrize("confirmed", [None, 1.0, 1.25])
def test_without_a_confirmed_gain_export_writes_xlas_defaults(db, tmp_path, confirmed):
    make_study(db, confirmed=confirmed)
    code, output = export(db, "-o", str(tmp_path / "best.yaml"))
    assert code == 0, output
    doc = yaml.safe_load((tmp_path / "best.yaml").read_text())
    assert (doc["recommended"], doc["trial"], doc["rank"]) == (False, None, None)
    assert (doc["flags"], doc["xla_flags"], doc["env"]) == ({}, "", {})
    assert doc["jax"] == {"compiler_options": {}, "env": {}}
    assert doc["measured"]["verdict"] == "no measurable gain"
    assert doc["measured"]["speedup"] == 1.0 and doc["measured"]["memory_source"]
    assert "keep XLA's defaults" in doc["reason"]
    assert {c["trial"] for c in doc["candidates"]} == {1, 2}  # the evidence
    assert "XLA's defaults (nothing to set)" in output and "not recommended" in output


def test_an_explicit_pick_is_exported_marked_not_recommended(db):
    make_study(db, confirmed=0.8)
    code, output = export(db, "--trial", "2", "-o", "-")
    assert code == 0, output
    doc = yaml.safe_load(output)
    assert doc["trial"] == 2 and doc["rank"] == 2 and doc["recommended"] is False
    assert doc["reason"] == ("explicit pick: not confirmed; not recommended over XLA's "
                             "defaults")
    assert yaml.safe_load(export(db, "--rank", "1", "-o", "-")[1])["recommended"] is True


@pytest.mark.parametrize(("args", "message"), [
    (["--trial", "7"], "has no ranked trial 7"),
    (["--rank", "3"], "has 2 successful configurations, no rank 3"),
    (["--rank", "1", "--trial", "1"], "give --rank or --trial, not both"),
])
def test_a_pick_that_does_not_exist_is_refused(db, args, message):
    make_study(db, confirmed=0.8)
    code, output = export(db, *args)
    assert code == 2 and message in output


def test_a_study_without_a_successful_baseline_has_nothing_to_export(db):
    store = Store.open(db)
    store.ensure_study("s", "cpu", "matmul", "tiny", 1, "paired", "cpu")
    store.record_run("s", 0, Role.BASELINE, {}, {}, TrialOutcome(OutcomeKind.CRASHED, "boom"))
    code, output = export(db)
    assert code != 0 and "no successful baseline run" in output


def source(tmp_path: Path, env_file: Path, *names: str) -> list[str]:
    """Each variable's value after a real `sh` sourced `env_file` (NUL-separated)."""
    script = ". ./" + env_file.name + "".join(f'; printf "%s\\0" "${name}"' for name in names)
    done = subprocess.run(["sh", "-c", script], cwd=tmp_path, capture_output=True, check=True)
    return done.stdout.decode().split("\0")[:-1]


def test_the_env_form_is_sourced_by_sh_byte_exact_and_runs_nothing(db, tmp_path):
    make_study(db, confirmed=0.8, flags={DUMP: DUMP_VALUE, VMODULE: VMODULE_VALUE})
    code, output = export(db, "--format", "env", "-o", str(tmp_path / "best.env"))
    assert code == 0, output
    xla_flags, vmodule = source(tmp_path, tmp_path / "best.env", "XLA_FLAGS", VMODULE)
    assert xla_flags == f"--{DUMP}={DUMP_VALUE}" and vmodule == VMODULE_VALUE
    assert not list(tmp_path.glob("pwned*"))  # nothing inside a value ran


def test_the_env_form_of_the_defaults_sets_nothing(db, tmp_path):
    make_study(db, confirmed=None)
    code, output = export(db, "--format", "env", "-o", str(tmp_path / "best.env"))
    assert code == 0, output
    text = (tmp_path / "best.env").read_text()
    assert all(line.startswith("#") for line in text.splitlines())
    assert "XLA's defaults, nothing to set" in text
    assert source(tmp_path, tmp_path / "best.env", "XLA_FLAGS") == [""]


def test_the_jax_form_keeps_per_compile_flags_apart_from_environment_only_ones(db):
    make_study(db, confirmed=0.8, flags={FAST: True, VMODULE: "x=1"})
    code, output = export(db, "--format", "jax", "-o", "-")
    assert code == 0, output
    doc = json.loads(output)
    assert doc["compiler_options"] == {FAST: True}
    assert doc["environment"] == {VMODULE: "x=1"}
    assert doc["recommended"] is True and "compile(compiler_options=" in doc["usage"]


def test_every_form_is_written_to_best_dot_its_name_by_default(db, tmp_path, monkeypatch):
    make_study(db, confirmed=0.8)
    monkeypatch.chdir(tmp_path)
    for form in ("yaml", "json", "env", "jax"):
        assert export(db, "--format", form)[0] == 0
        assert (tmp_path / f"best.{form}").stat().st_size > 0


@pytest.mark.parametrize(("confirmed", "first"), [
    (0.8, "recommended: trial 1, confirmed ×1.250 [1.250, 1.250] faster"),
    (1.0, "recommended: XLA's defaults; no configuration was confirmed at least 2.0% faster"),
])
def test_best_says_what_it_recommends_in_one_line_above_its_table(db, confirmed, first):
    make_study(db, confirmed=confirmed)
    result = CliRunner().invoke(app, ["best", "s", "--storage", db])
    assert result.exit_code == 0, result.output
    above, table = result.output.split("┏", 1)  # the sentence, then the table
    # piped (no terminal): the sentence is one line, never wrapped; the table fits 80 columns
    assert [line for line in above.splitlines() if line.strip()][0].startswith(first)
    assert len([line for line in above.splitlines() if line.strip()]) == 2  # and the title
    assert max(len(line) for line in ("┏" + table).splitlines()
               if line[:1] in "┏┃┡│└") <= 80
    rows = json.loads(CliRunner().invoke(app, ["best", "s", "--format", "json",
                                               "--storage", db]).output)
    assert [row["recommended"] for row in rows] == [False, confirmed == 0.8, False]
