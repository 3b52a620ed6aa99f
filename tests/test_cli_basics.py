"""CLI basics a user expects (issue 32): choices in `--help`, shell completion."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

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


def _json(*args: str, cwd) -> object:
    import json

    done = invoke(*args, "--format", "json", cwd=cwd)
    assert done.exit_code in (0, 1), done.output
    return json.loads(done.stdout)


def test_spaces_list_show_and_validate_speak_json(tmp_path):
    listed = _json("spaces", "list", cwd=tmp_path)
    cpu = next(row for row in listed if row["space"] == "cpu")
    assert set(cpu) == {"space", "backend", "parameters", "configurations", "description"}
    assert (cpu["backend"], cpu["parameters"], cpu["configurations"]) == ("cpu", 8, 180)
    shown = _json("spaces", "show", "cpu", cwd=tmp_path)
    assert shown["configurations"] == 180 and len(shown["params"]) == 8
    level = next(p for p in shown["params"] if p["name"] == "xla_backend_optimization_level")
    assert level["candidates"] == [0, 1, 2, 3] and level["unset_allowed"] is True
    nans = next(p for p in shown["params"] if p["name"] == "xla_cpu_fast_math_honor_nans")
    assert nans["only_when"] == {"xla_cpu_enable_fast_math": True}
    assert nans["group"] == "fast-math-relaxed"
    [group] = shown["groups"]
    assert group["choices"]["on"]["xla_cpu_fast_math_honor_nans"] is False
    assert group["choices"]["off"] == {}
    root = Path(__file__).resolve().parents[1]
    valid = _json("spaces", "validate", str(root / "search_spaces/cpu.yaml"), cwd=tmp_path)
    assert valid["valid"] is True and valid["space"] == "cpu"


def test_flags_list_show_and_check_speak_json(tmp_path):
    listed = _json("flags", "list", "--space", "cpu", cwd=tmp_path)
    fast = next(row for row in listed if row["flag"] == "xla_cpu_enable_fast_math")
    assert fast == {"flag": "xla_cpu_enable_fast_math", "type": "bool", "default": False,
                    "recommended": None, "backend": "cpu", "channel": "xla_flags",
                    "status": "", "in_catalog": True, "known_to_xla": None}  # None: no --all
    shown = _json("flags", "show", "xla_cpu_enable_fast_math", cwd=tmp_path)
    assert shown["name"] == "xla_cpu_enable_fast_math"
    assert shown["this_xla"]["status"] == "accepted"
    checked = _json("flags", "check", "--xla_cpu_enable_fast_math=true --xla_bogus_flag=1",
                    cwd=tmp_path)
    assert checked["checked"] == 2 and checked["aborting"] == 1
    [finding] = checked["findings"]
    assert (finding["flag"], finding["kind"], finding["would_abort"]) == (
        "xla_bogus_flag", "unknown", True)


def _bench(path: str, tmp_path) -> tuple[int, dict]:
    import json

    from child_env import cpu_child_env

    env = cpu_child_env(1)
    env["AUTOTUNE_JOB"] = json.dumps({"schema_version": 1, "steps": 3, "warmup": 1,
                                      "compiler_options": {}})
    done = subprocess.run([sys.executable, "-m", "autotune.bench", path, "--preset", "tiny"],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    return done.returncode, json.loads(done.stdout)


@pytest.mark.slow
def test_a_workload_may_return_a_plain_step_and_its_arguments(tmp_path):
    code, result = _bench(str(Path(__file__).parent / "workloads" / "pair.py"), tmp_path)
    assert code == 0 and result["status"] == "ok", result.get("message")
    assert len(result["step_times_s"]) == 3


def test_measuring_a_missing_file_by_hand_fails_and_says_so(tmp_path):
    code, result = _bench(str(tmp_path / "missing.py"), tmp_path)
    assert code == 1
    assert result["status"] == "compile_error"
    assert "no workload file" in result["message"]


def test_the_example_workload_is_written_where_the_user_is(tmp_path):
    done = invoke("benchmarks", "example", cwd=tmp_path)
    assert done.exit_code == 0, done.output
    written = tmp_path / "my_step.py"
    root = Path(__file__).resolve().parents[1]
    assert written.read_text() == (root / "benchmarks/examples/my_step.py").read_text()
    assert "--script my_step.py" in done.output
    again = invoke("benchmarks", "example", cwd=tmp_path)
    assert again.exit_code == 2 and "exists: pass --force" in again.output
    program = invoke("benchmarks", "example", "program", "-o", "p.py", cwd=tmp_path)
    assert program.exit_code == 0
    assert (tmp_path / "p.py").read_text() == (
        root / "benchmarks/examples/my_program.py").read_text()


def test_an_event_prints_as_one_short_line():
    """Printing a `TrialEvent` dumped every step time (issue 32)."""
    from autotune.ground.records import (
        Measurement,
        MeasureMode,
        OutcomeKind,
        Role,
        TrialOutcome,
    )
    from autotune.study.plan import TrialEvent

    m = Measurement(tuple(0.01 + i * 1e-5 for i in range(500)), 0.5, mode=MeasureMode.PAIRED,
                    baseline_step_times_s=(0.0105,) * 500, fingerprint="f" * 64)
    event = TrialEvent(3, Role.SEARCH, TrialOutcome(OutcomeKind.OK, "", m, 2.0,
                                                     stderr_tail="x" * 4000),
                       0.95, 0.95, 3, 12)
    text = repr(event)
    assert len(text) < 400, text
    assert "500 steps" in text and "ratio 1.190" in text and "program ffffffffffff" in text


def test_quiet_prints_nothing_but_errors_and_verbose_logs_notes(tmp_path):
    import logging

    quiet = invoke("-q", "spaces", "list", cwd=tmp_path)
    assert quiet.exit_code == 0 and quiet.output == ""
    wrong = invoke("-q", "spaces", "show", "nope", cwd=tmp_path)
    assert wrong.exit_code == 2 and "unknown search space 'nope'" in wrong.output
    asked = invoke("-q", "spaces", "list", "--format", "json", cwd=tmp_path)
    assert '"space": "cpu"' in asked.output  # what a script asked for still comes
    again = invoke("spaces", "list", cwd=tmp_path)
    assert "cpu" in again.output  # one run's -q does not outlive it
    assert invoke("-vv", "spaces", "list", cwd=tmp_path).exit_code == 0
    assert logging.getLogger("autotune").getEffectiveLevel() == logging.DEBUG
    invoke("-v", "spaces", "list", cwd=tmp_path)
    assert logging.getLogger("autotune").getEffectiveLevel() == logging.INFO
    invoke("spaces", "list", cwd=tmp_path)
    assert logging.getLogger("autotune").getEffectiveLevel() == logging.WARNING


def test_prose_wraps_on_a_terminal_only(monkeypatch):
    """Prose was hard-wrapped at 80 columns even when piped (issue 32)."""
    from autotune.cli import _common

    assert _common.prose_width() is None  # pytest's output is no terminal
    with _common.out.capture() as piped:
        _common.say("word " * 40)
    assert len(piped.get().strip().splitlines()) == 1
    monkeypatch.setattr(type(_common.out), "is_terminal", property(lambda self: True))
    assert _common.prose_width() == _common.TABLE_WIDTH
    with _common.out.capture() as shown:
        _common.say("word " * 40)
    lines = shown.get().strip().splitlines()
    assert len(lines) > 1 and max(map(len, lines)) <= 80


def test_flag_names_are_never_cut_in_lists_spaces_and_findings(tmp_path):
    """The brief: a table fits 80 columns without cutting a flag name. `flags list`,
    `spaces show` and `flags check` give each flag's whole name a line of its own."""
    from autotune.flags.catalog import load_catalog
    from autotune.spaces import load_space

    listed = invoke("flags", "list", "--backend", "gpu", cwd=tmp_path).stdout.splitlines()
    gpu = [s.name for s in load_catalog() if s.backend.value == "gpu"]
    assert gpu and all(name in listed for name in gpu)
    assert max(map(len, listed)) <= 80, max(listed, key=len)
    shown = invoke("spaces", "show", "gpu-collectives", cwd=tmp_path).stdout.splitlines()
    assert all(p.flag in shown for p in load_space("gpu-collectives").params.values())
    checked = invoke("flags", "check", "--xla_gpu_enable_latency_hiding_schedulerr=true",
                     cwd=tmp_path).stdout.splitlines()
    assert "xla_gpu_enable_latency_hiding_schedulerr: unknown (aborts)" in checked


def test_flags_show_writes_values_as_flags_do_with_sizes_and_no_python_reprs(tmp_path):
    shown = invoke("flags", "show", "xla_gpu_all_reduce_combine_threshold_bytes",
                   cwd=tmp_path).stdout
    lines = [line.strip() for line in shown.splitlines()]
    assert "default: 31457287 (30.0 MiB)" in lines
    assert "recommended: 8589934592 (8.0 GiB)" in lines
    assert "per_compile: true" in lines
    assert not any(line.endswith(("()", "True", "False")) for line in lines)
    assert not any(line.startswith(("overrides:", "allow_empty:", "cataloged:", "after_hlo:"))
                   for line in lines)  # nothing to say: left out
    graphs = invoke("flags", "show", "xla_gpu_enable_command_buffer", cwd=tmp_path).stdout
    assert "after_hlo: true" in [line.strip() for line in graphs.splitlines()]
    # the document by its title, not the reference file's internal name
    assert any(line.startswith("source: GPU performance tips for LLMs with JAX/XLA (001): ")
               for line in lines)
    spaces = invoke("spaces", "show", "gpu-collectives", cwd=tmp_path).stdout
    assert "_ea83b282a245b705" not in shown + spaces
    assert "source: GPU performance tips for LLMs with JAX/XLA (001): " in spaces


def test_trials_names_every_run_whole_with_the_figures_of_its_json(tmp_path):
    """Issue 33: `trials` cut flag names and printed None as a trial number."""
    from autotune.ground.records import Measurement, MeasureMode, OutcomeKind, Role, TrialOutcome
    from autotune.storage import Store

    url = f"sqlite:///{tmp_path / 't.db'}"
    flag = "xla_gpu_all_reduce_combine_threshold_bytes"
    with Store.open(url) as store:
        store.ensure_study("s", "cpu", "matmul", "tiny", 1, MeasureMode.PAIRED, "cpu")
        m = Measurement((1e-3, 2e-3, 1.5e-3, 1.2e-3), 0.5, mode=MeasureMode.PAIRED,
                        baseline_step_times_s=(1e-3,) * 4, fingerprint="f")
        store.record_run("s", 0, Role.BASELINE, {}, {}, TrialOutcome(OutcomeKind.OK, "", m))
        store.record_run("s", None, Role.FINGERPRINT, {flag: 8589934592}, {},
                         TrialOutcome(OutcomeKind.OK, "", m))
    shown = invoke("trials", "s", "--storage", url, cwd=tmp_path).stdout.splitlines()
    rows = json.loads(invoke("trials", "s", "--storage", url, "--format", "json",
                             cwd=tmp_path).stdout)

    assert [line for line in shown if line.startswith("run ")] == [
        f"run {rows[0]['run']}  trial 0  baseline  ok",
        f"run {rows[1]['run']}  trial -  fingerprint  ok"]  # no "None"
    assert f"    {flag}=8589934592" in shown  # the whole name=value
    assert any(line.startswith("    median step ") for line in shown)
    assert max(map(len, shown)) <= 80, max(shown, key=len)
    assert rows[1]["trial"] is None and rows[1]["compile_time_s"] == 0.5
    assert rows[0]["iqr_s"] > 0 and 0 < rows[0]["cv"] < 1 and rows[0]["outliers"] == 0
    assert "CV" in shown[2] and f"CV {rows[0]['cv']:.1%}" in shown[2]


def test_the_progress_best_is_the_incumbent_the_defaults_or_nothing_yet():
    from autotune.cli._progress import trial_text
    from autotune.ground.records import OutcomeKind, Role, TrialOutcome
    from autotune.study.plan import TrialEvent

    ok = TrialOutcome(OutcomeKind.OK, "")
    assert trial_text(TrialEvent(0, Role.BASELINE, ok, 1.0, None, 1, 9)).endswith(", best: -")
    assert trial_text(TrialEvent(1, Role.SEARCH, ok, 1.2, 1.0, 2, 9)).endswith(
        ", best: defaults")  # one process at ×1.2 is not yet believed
    assert trial_text(TrialEvent(2, Role.RACE, ok, 1.1, 1.15, 3, 9, best_trial=1)).endswith(
        ", best: ×1.150 #1")


def test_the_command_lists_wrap_each_summary_only_where_the_line_is_full(tmp_path):
    """`autotune --help` listed a summary with the docstring's own line breaks ("the last
    worker to finish" / "confirms and shrinks..."): ragged lines in an 80-column panel.
    Every line of a summary but its last must be full: the next line's first word would
    not have fitted on it."""
    for group in ([], ["flags"], ["spaces"], ["benchmarks"], ["db"]):
        shown = invoke(*group, "--help", cwd=tmp_path).stdout.splitlines()
        top = next(i for i, line in enumerate(shown) if "Commands" in line)
        rows = [line.strip("│").rstrip() for line in shown[top + 1:]
                if line.startswith("│")]
        rows = rows[:next((i for i, r in enumerate(rows) if "╰" in r), len(rows))]
        start = len(rows[0]) - len(rows[0].split("  ", 1)[1].lstrip()) if rows else 0
        width = len(shown[top]) - 2 - start - 1  # inside the panel, less the right margin
        summaries: list[list[str]] = []
        for row in rows:
            name, text = row[:start].strip(), row[start:].strip()
            if name:
                summaries.append([])
            summaries[-1].append(text)
        assert len(summaries) >= 2
        for lines in summaries:
            for line, after in zip(lines, lines[1:], strict=False):
                assert len(line) + 1 + len(after.split()[0]) > width, (group, lines)


def test_a_studys_progress_lines_are_never_cut_when_piped():
    """The study's lines (its plan, the fit, what was reused or stopped, confirmation) went
    through a console 160 columns wide when piped, so a long one broke mid-sentence ("(one
    objective, 180" / "configurations > 12 trials)"). They are prose: one line each in a
    log, wrapped at 80 columns on a terminal only."""
    from types import SimpleNamespace

    from autotune.cli import _common, _progress

    why = "the study stopped because " + "every remaining proposal was measured " * 6
    with _common.out.capture() as piped:
        _progress._print_summary(SimpleNamespace(reused=3, stopped=why))
    lines = piped.get().splitlines()
    assert len(lines) == 2 and lines[1] == f"stopped early: {why}"


def test_studies_on_a_database_without_one_says_so(tmp_path):
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    assert invoke("db", "upgrade", "--storage", url, cwd=tmp_path).exit_code == 0
    listed = invoke("studies", "--storage", url, cwd=tmp_path)
    assert listed.exit_code == 0 and listed.stdout == "no studies in this database yet\n"
