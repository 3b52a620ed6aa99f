"""CLI basics a user expects (issue 32): choices in `--help`, shell completion."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from cli_runner import invoke

from autotune.study.options import PRESET_CHOICES, SAMPLER_CHOICES
from autotune.study.samplers import NAMES


@pytest.mark.parametrize(("command", "shown"), [
    ("study", "[auto|tpe|random|grid|nsga2|gp]"), ("study", "[tiny|small|large]"),
    ("study", "[paired|direct]"), ("study", "[time|memory|time,memory]"),
    ("pgle", "[manual|auto]"), ("pgle", "[tiny|small|large]")])
def test_help_lists_the_values_an_option_takes(command, shown, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    done = invoke(command, "--help", cwd=tmp_path)
    assert done.exit_code == 0
    assert shown in done.output


def test_the_listed_samplers_are_the_samplers_autotune_knows():
    assert set(SAMPLER_CHOICES) == set(NAMES)
    assert PRESET_CHOICES == ("tiny", "small", "large")


def _complete(words: str) -> list[str]:
    """What bash completion offers for the command line `words` (its last word being typed)."""
    exe = shutil.which("autotune", path=os.path.dirname(sys.executable))
    assert exe, "the autotune command is installed beside this Python"
    env = {**os.environ, "_AUTOTUNE_COMPLETE": "complete_bash", "COMP_WORDS": words,
           "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}
    done = subprocess.run([exe], env=env, capture_output=True, text=True, timeout=60)
    return done.stdout.split()


def test_the_shell_completes_commands_and_an_options_values():
    assert "study" in _complete("autotune stu")
    assert _complete("autotune study --sampler t") == ["tpe"]
    assert set(_complete("autotune study --preset ")) == {"tiny", "small", "large"}


def test_the_completion_script_can_be_shown():
    exe = shutil.which("autotune", path=os.path.dirname(sys.executable))
    assert exe
    done = subprocess.run([exe, "--show-completion", "bash"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0
    assert "_AUTOTUNE_COMPLETE=complete_bash" in done.stdout
