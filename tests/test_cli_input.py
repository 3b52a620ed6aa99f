"""Input the CLI must refuse or show as data: unknown choices, missing programs, hostile names.

Every test drives the CLI as a user types it (typer's CliRunner) and needs no
trial child: studies are built directly in a SQLite file through `Store`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml
from cli_runner import invoke

from autotune.flags.catalog import Backend, Channel
from autotune.ground.records import Measurement, MeasureMode, OutcomeKind, Role, TrialOutcome
from autotune.storage import Store

# --- 1. flags list: an unknown --backend or --channel is a usage error ----------------------


@pytest.mark.parametrize(
    ("option", "known"),
    [("--backend", [b.value for b in Backend]), ("--channel", [c.value for c in Channel])],
)
def test_flags_list_with_an_unknown_choice_exits_2_naming_it_and_the_known_ones(
    tmp_path, option, known
):
    result = invoke("flags", "list", option, "quantum", cwd=tmp_path)

    assert result.exit_code == 2, result.output
    noun = option.removeprefix("--")
    assert result.stderr == (f"error: unknown {noun} 'quantum'. Known {noun}s: "
                             f"{', '.join(known)}\n")
    assert result.stdout == ""  # no empty table


def test_flags_list_with_a_known_backend_lists_only_its_flags(tmp_path):
    result = invoke("flags", "list", "--backend", "cpu", cwd=tmp_path)

    assert result.exit_code == 0, result.output
    details = [line for line in result.stdout.splitlines() if line.startswith("    ")]
    assert details and {line.split(", ")[3] for line in details} == {"cpu"}


# --- 2. study --command: the program must exist and be executable, checked first -------------


def _script(folder: Path, name: str, executable: bool) -> Path:
    path = folder / name
    path.write_text("#!/bin/sh\nexit 0\n")
    mode = path.stat().st_mode
    path.chmod(mode | stat.S_IXUSR if executable else mode & ~0o111)
    return path


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("autotune-no-such-program --size 64",
         "program 'autotune-no-such-program' of --command is not found on PATH: install it, "
         "or give its path"),
        ("./missing.sh --size 64",
         "program './missing.sh' of --command does not exist: check the path, which is "
         "relative to the current folder {cwd}"),
        ("./plain.sh", "program './plain.sh' of --command is not executable: "
                       "make it executable (chmod +x ./plain.sh)"),
        ("sub", "program 'sub' of --command is not found on PATH"),
        ("./sub", "program './sub' of --command is a directory, not a program"),
        ("here.sh", "program 'here.sh' of --command is not found on PATH: install it, or give "
                    "its path; to run the file in this folder, write ./here.sh"),
    ],
)
def test_a_command_whose_program_cannot_run_exits_2_before_anything_is_written(
    tmp_path, command, words
):
    _script(tmp_path, "plain.sh", executable=False)
    _script(tmp_path, "here.sh", executable=True)
    (tmp_path / "sub").mkdir()

    result = invoke("study", "--space", "cpu", "--command", command, cwd=tmp_path)

    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ")
    assert words.format(cwd=tmp_path.resolve()) in result.stderr
    assert result.stderr.count("\n") == 1  # one line
    assert result.stdout == ""
    assert not (tmp_path / "autotune.db").exists()


@pytest.mark.parametrize("command", ["sh -c true", "./here.sh --size 64", "sub/deep.sh"])
def test_a_command_whose_program_can_run_passes_the_check(tmp_path, command):
    _script(tmp_path, "here.sh", executable=True)
    (tmp_path / "sub").mkdir()
    _script(tmp_path / "sub", "deep.sh", executable=True)

    # The next check after --command is the sampler's: reaching it proves the program passed.
    result = invoke("study", "--space", "cpu", "--command", command, "--sampler", "nope",
                    cwd=tmp_path)

    assert result.exit_code == 2, result.output
    assert "unknown sampler 'nope'" in result.stderr and "--command" not in result.stderr


def test_a_command_found_on_path_in_another_folder_passes_the_check(tmp_path, monkeypatch):
    tools = tmp_path / "tools"
    tools.mkdir()
    _script(tools, "mytool", executable=True)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ.get('PATH', '')}")

    result = invoke("study", "--space", "cpu", "--command", "mytool --size 8",
                    "--sampler", "nope", cwd=tmp_path)

    assert result.exit_code == 2, result.output
    assert "unknown sampler 'nope'" in result.stderr


# --- 3. names, flags and child messages are printed as data, never as codes or markup -------

HOSTILE = "a\x1b[31mred [bold]loud[/bold] :smile:"
SHOWN = r"a\x1b[31mred [bold]loud[/bold] :smile:"  # what the terminal must show
VALUE = "/tmp/\x1b[2J[bold]d"
SHOWN_VALUE = r"/tmp/\x1b[2J[bold]d"
MESSAGE = "boom\x1b[31m [bold]red\nsecond line"
SHOWN_MESSAGE = r"boom\x1b[31m [bold]red\nsecond line"


def _paired(ratio: float) -> Measurement:
    base = (1.0e-3, 1.02e-3, 0.98e-3, 1.01e-3, 0.99e-3)
    return Measurement(step_times_s=tuple(t * ratio for t in base), baseline_step_times_s=base,
                       compile_time_s=0.1, mode=MeasureMode.PAIRED,
                       fingerprint=f"cand{ratio}", baseline_fingerprint="base")


@pytest.fixture
def hostile_study(tmp_path) -> Path:
    """A study named HOSTILE whose best trial sets a flag to VALUE; a crashed trial says MESSAGE."""
    store = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}")
    store.ensure_study(HOSTILE, "cpu", "matmul", "tiny", 1, "paired")
    store.record_run(HOSTILE, 0, Role.BASELINE, {}, {},
                     TrialOutcome(OutcomeKind.OK, "ok", _paired(1.0)))
    store.record_run(HOSTILE, 1, Role.SEARCH, {"xla_dump_to": VALUE}, {},
                     TrialOutcome(OutcomeKind.OK, "ok", _paired(0.8)))
    store.record_run(HOSTILE, 2, Role.SEARCH, {"xla_dump_to": "x"}, {},
                     TrialOutcome(OutcomeKind.CRASHED, MESSAGE))
    return tmp_path


def _assert_shown_as_data(output: str, *shown: str) -> None:
    assert "\x1b" not in output  # no raw escape sequence reaches the terminal
    assert "😄" not in output  # nor an emoji code
    for text in shown:
        assert text in output


def test_studies_shows_a_hostile_name_as_data(hostile_study):
    result = invoke("studies", cwd=hostile_study)

    assert result.exit_code == 0, result.output
    _assert_shown_as_data(result.stdout, SHOWN)


def test_best_shows_a_hostile_name_and_flag_value_as_data(hostile_study):
    result = invoke("best", HOSTILE, cwd=hostile_study)

    assert result.exit_code == 0, result.output
    _assert_shown_as_data(result.stdout, f"{SHOWN}: matmul (tiny) on cpu",
                          f"xla_dump_to={SHOWN_VALUE}")


def test_trials_shows_a_child_message_as_data_on_one_line(hostile_study):
    result = invoke("trials", HOSTILE, cwd=hostile_study)

    assert result.exit_code == 0, result.output
    _assert_shown_as_data(result.stdout, SHOWN_MESSAGE, f"xla_dump_to={SHOWN_VALUE}")


def test_an_error_naming_a_hostile_study_shows_it_as_data(hostile_study):
    result = invoke("best", HOSTILE + "?", cwd=hostile_study)

    assert result.exit_code == 2, result.output
    _assert_shown_as_data(result.stderr, f"known studies: {SHOWN}")


def test_export_shows_a_hostile_value_as_data_and_writes_the_exact_strings(hostile_study):
    result = invoke("export", HOSTILE, "--rank", "1", "-o", "best.yaml", cwd=hostile_study)

    assert result.exit_code == 0, result.output
    _assert_shown_as_data(result.stdout, f"--xla_dump_to={SHOWN_VALUE}")
    document = yaml.safe_load((hostile_study / "best.yaml").read_text(encoding="utf-8"))
    assert document["study"] == HOSTILE  # the file keeps the data, unescaped
    assert document["flags"] == {"xla_dump_to": VALUE}


def test_spaces_show_shows_a_hostile_space_file_as_data(tmp_path):
    (tmp_path / "mine.yaml").write_text(
        "schema_version: 1\nname: mine\nbackend: cpu\n"
        'description: "shout \\e[1m[bold]now"\n'
        "params:\n  xla_cpu_enable_fast_math:\n    type: bool\n"
        '    source: "\\e[31m[red]guide"\n')

    result = invoke("spaces", "show", "mine.yaml", cwd=tmp_path)

    assert result.exit_code == 0, result.output
    _assert_shown_as_data(result.stdout, r"shout \x1b[1m[bold]now", r"\x1b[31m[red]guide")


def test_importance_shows_a_hostile_name_as_data(hostile_study):
    import optuna

    optuna.create_study(study_name=HOSTILE, storage=f"sqlite:///{hostile_study / 'autotune.db'}")

    result = invoke("importance", HOSTILE, cwd=hostile_study)

    assert result.exit_code == 0, result.output
    _assert_shown_as_data(result.stdout, "nothing to compare yet: study "
                                         f"'{SHOWN}' has 0 complete search trial(s)")
