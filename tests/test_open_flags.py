"""Flags outside the catalog ("open flags", `autotune.flags.open_flags`).

A flag the installed XLA knows but autotune's catalog does not validates, runs a
real study, exports and applies; one this XLA does not know is refused by
`spaces validate`, `flags check`, `apply` and `load_config` with the same words;
a value this XLA cannot parse likewise. Every answer comes from the real jaxlib
(the probe's children), every command is a real process or the CLI in-process.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cli_runner import invoke
from test_apply import export_fixture

import autotune
from autotune.flags.catalog import load_catalog
from autotune.ground.errors import ConfigFileError

#: In this jaxlib's XLA (it prints it in its usage table) but not in autotune's catalog.
OPEN = "xla_llvm_disable_expensive_passes"
#: Spelled like an XLA flag, known to no XLA.
TYPO = "xla_llvm_disable_expensive_passez"
#: What every path says of TYPO (`lint.xla_refusals`).
REFUSED = f"this XLA does not know --{TYPO}: a job with it aborts at start"

SPACE = """\
schema_version: 1
name: open-cpu
backend: cpu
params:
  cheap_llvm:
    type: bool
    flag: {flag}
  fast_min_max:
    type: bool
    flag: xla_cpu_enable_fast_min_max
"""


def _space(folder: Path, flag: str) -> Path:
    path = folder / "open.yaml"
    path.write_text(SPACE.format(flag=flag), encoding="utf-8")
    return path


def test_the_open_flag_is_outside_the_catalog_and_known_to_this_xla():
    assert OPEN not in load_catalog() and TYPO not in load_catalog()
    done = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"],
                          env={"XLA_FLAGS": f"--{OPEN}=true", "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr  # XLA itself accepts it


def test_a_space_with_an_open_flag_validates_and_shows_it_outside_the_catalog(tmp_path):
    path = _space(tmp_path, OPEN)

    valid = invoke("spaces", "validate", str(path), cwd=tmp_path)
    shown = invoke("spaces", "show", str(path), "--format", "json", cwd=tmp_path)

    assert valid.exit_code == 0, valid.output
    assert "valid space 'open-cpu' (cpu), 2 parameters, 4 configurations" in valid.output
    params = {p["flag"]: p for p in json.loads(shown.stdout)["params"]}
    assert params[OPEN]["in_catalog"] is False
    assert params["xla_cpu_enable_fast_min_max"]["in_catalog"] is False
    flag = invoke("flags", "show", OPEN, "--format", "json", cwd=tmp_path)
    assert flag.exit_code == 0
    assert json.loads(flag.stdout)["cataloged"] is False
    assert json.loads(flag.stdout)["this_xla"]["status"] == "accepted"


def test_a_flag_this_xla_does_not_know_is_refused_by_all_four_paths_in_the_same_words(tmp_path):
    space = invoke("spaces", "validate", str(_space(tmp_path, TYPO)), cwd=tmp_path)
    check = invoke("flags", "check", f"--{TYPO}=true", "--format", "json", cwd=tmp_path)
    export = export_fixture(tmp_path, {TYPO: True})
    apply = invoke("apply", str(export), "--", "true", cwd=tmp_path)
    with pytest.raises(ConfigFileError) as loaded:
        autotune.load_config(export)

    assert space.exit_code == 2 and REFUSED in space.stderr, space.output
    assert check.exit_code == 1, check.output
    assert [REFUSED in f["message"] for f in json.loads(check.stdout)["findings"]] == [True]
    assert apply.exit_code == 2 and REFUSED in apply.stderr, apply.output
    assert REFUSED in str(loaded.value) and f"flags.{TYPO}" in str(loaded.value)
    assert invoke("flags", "show", TYPO, cwd=tmp_path).exit_code == 2
    # the file check alone (no XLA) lets it through: only the XLA knows
    assert invoke("spaces", "validate", str(_space(tmp_path, TYPO)), "--no-xla",
                  cwd=tmp_path).exit_code == 0
    assert autotune.load_config(export, check=False).flags == {TYPO: True}


def test_a_value_this_xla_cannot_parse_is_refused_for_an_open_flag(tmp_path):
    words = f"this XLA rejects --{OPEN}=maybe"
    check = invoke("flags", "check", f"--{OPEN}=maybe", "--format", "json", cwd=tmp_path)
    with pytest.raises(ConfigFileError, match=f"this XLA rejects --{OPEN}=maybe"):
        autotune.load_config(export_fixture(tmp_path, {OPEN: "maybe"}))

    found = json.loads(check.stdout)["findings"]
    assert check.exit_code == 1 and [f["kind"] for f in found] == ["bad_value"]
    assert words in found[0]["message"] and found[0]["would_abort"] is True


def test_an_export_with_an_open_flag_loads_and_applies(tmp_path, monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    export = export_fixture(tmp_path, {OPEN: True, "xla_cpu_enable_fast_math": True})

    config = autotune.load_config(export)
    printed = invoke("apply", str(export), "--print", cwd=tmp_path)

    assert sorted(config.environ({})["XLA_FLAGS"].split()) == [
        "--xla_cpu_enable_fast_math=true", f"--{OPEN}=true"]
    assert config.compiler_options() == {"xla_cpu_enable_fast_math": True}  # the open one: env
    assert printed.exit_code == 0, printed.output
    assert f"--{OPEN}=true" in printed.stdout


@pytest.mark.slow
def test_a_real_study_tunes_an_open_flag_and_exports_it(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    short = ["--benchmark", "matmul", "--preset", "tiny", "--devices", "1", "--steps", "5",
             "--warmup", "1", "--max-warmup", "3", "--trials", "4", "--confirm", "1",
             "--confirm-repeats", "2", "--confirm-max", "0", "--no-racing", "--no-shrink"]
    # direct and unfitted: each configuration in processes of its own, through XLA_FLAGS
    # (the fit, and a paired trial, compile these LLVM-level flags per compilation, where
    # the CPU's optimised HLO is the same for every value: nothing would be ranked)
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "study", "--space", str(_space(tmp_path, OPEN)),
         "--name", "open", "--sampler", "grid", "--mode", "direct", "--no-fit", *short,
         "--storage", url],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr

    with sqlite3.connect(tmp_path / "s.db") as db:
        rows = db.execute("select trial_number, flags from autotune_runs "
                          "where role = 'search' and kind = 'ok'").fetchall()
    tried = {number: json.loads(flags) for number, flags in rows}
    assert {flags.get(OPEN) for flags in tried.values()} == {True, False}  # the grid, both ways
    best = subprocess.run([sys.executable, "-m", "autotune", "best", "open", "--format", "json",
                           "--storage", url], capture_output=True, text=True, timeout=120)
    ranked = [row for row in json.loads(best.stdout) if row["rank"] is not None]
    # no documented default: any value of an open flag is a change from XLA's defaults
    assert ranked and all(OPEN in row["flags_changed"] for row in ranked)
    number = ranked[0]["trial"]
    exported = subprocess.run(
        [sys.executable, "-m", "autotune", "export", "open", "--trial", str(number), "-o",
         str(tmp_path / "t.yaml"), "--storage", url], capture_output=True, text=True,
        timeout=120)
    assert exported.returncode == 0, exported.stderr
    document = yaml.safe_load((tmp_path / "t.yaml").read_text(encoding="utf-8"))
    assert document["flags"][OPEN] == tried[number][OPEN]
    assert OPEN in document["not_in_catalog"]  # marked: no documented default, no type
    assert f"--{OPEN}={str(tried[number][OPEN]).lower()}" in document["xla_flags"].split()
    assert document["measured"]["mode"] == "direct"
    assert autotune.load_config(tmp_path / "t.yaml").flags == document["flags"]


# --- every flag this XLA knows (`flags list --all`, `autotune.flags.registry`) -------------


def test_the_registry_sorts_candidates_by_what_xla_says():
    from autotune.flags.registry import known_flags

    found = known_flags(candidates=[
        OPEN,  # a bool outside the catalog: `1` parses
        "xla_cpu_enable_fast_math",  # a catalog flag
        "xla_fuel",  # XLA names it: "Illegal value for --xla_fuel. Saw 1"
        "xla_step_marker_location",  # an enum whose parser refuses `1` without a word
        TYPO, "xla_nope_zz"])  # listed as unknown
    assert found.names == tuple(sorted([OPEN, "xla_cpu_enable_fast_math", "xla_fuel",
                                        "xla_step_marker_location"]))
    assert found.candidates == 6 and found.runs >= 3


def test_xlas_list_of_unknown_names_proves_the_rest_known_in_one_answer():
    """XLA lists the names it does not know only once every other value parsed, so one
    child settles a batch of known flags and typos."""
    from autotune.flags.registry import known_flags

    found = known_flags(candidates=[OPEN, "xla_cpu_enable_fast_math", TYPO, "xla_nope_zz"])
    assert (found.names, found.runs) == (tuple(sorted([OPEN, "xla_cpu_enable_fast_math"])), 1)


def _logging_python(tmp_path: Path, log: Path) -> Path:
    """An interpreter that waits 1 s, then runs this one, and logs when it ran."""
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nstart=$(date +%s.%N)\nsleep 1\n{sys.executable} \"$@\"\n"
                      f"rc=$?\necho \"$start $(date +%s.%N)\" >> {log}\nexit $rc\n")
    python.chmod(0o755)
    return python


#: Three flags XLA takes with `1` and one whose parser refuses `1` without naming it, so
#: XLA's answers take halvings: more batches than rounds.
_SILENT_AMONG = ["xla_step_marker_location", OPEN, "xla_cpu_enable_fast_math",
                 "xla_cpu_use_thunk_runtime"]


def test_each_round_is_one_child_that_forks_a_parse_per_batch(tmp_path):
    """XLA parses `XLA_FLAGS` once a process; a child that loaded jaxlib's extension
    forks a parse per batch, so a round costs one start of Python, not one per batch
    (`flags list --all` on 2 CPUs: 200 batches in 11 rounds, 3 s instead of 30 s)."""
    from autotune.flags import registry

    log = tmp_path / "children.log"
    found = registry.known_flags(str(_logging_python(tmp_path, log)),
                                 candidates=[*_SILENT_AMONG, TYPO])
    assert found.names == tuple(sorted(_SILENT_AMONG))
    rounds = len(log.read_text().splitlines()) - 1  # the first child tells jaxlib's version
    assert found.runs > rounds >= 3, (found.runs, rounds)


@pytest.mark.parametrize("round_child", [
    "import sys; sys.exit(NO_FORKS)", "print('[{}]')", "import os; os.abort()",
    "print('[{\"returncode\": -14, \"stderr\": \"\"}]')"])  # a fork's alarm went off
def test_without_forks_the_batches_of_one_round_run_side_by_side(tmp_path, monkeypatch,
                                                                  round_child):
    """Where the round's child cannot fork after loading jaxlib's extension, or gives no
    answers, each batch gets a child of its own, and a round's children run side by side.
    Each child here waits 1 s first, so side by side they overlap."""
    from autotune.flags import registry

    log = tmp_path / "children.log"
    monkeypatch.setattr(registry, "_parallel", lambda: 2)
    monkeypatch.setattr(registry, "_ROUND",
                        round_child.replace("NO_FORKS", str(registry._NO_FORKS)))
    found = registry.known_flags(str(_logging_python(tmp_path, log)),
                                 candidates=_SILENT_AMONG)
    assert found.names == tuple(sorted(_SILENT_AMONG)) and found.runs >= 3
    spans = sorted(tuple(map(float, line.split())) for line in log.read_text().splitlines())
    # jaxlib's version, the first round's try to fork, then a child a batch
    assert len(spans) == 2 + found.runs
    assert any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans)), spans


@pytest.mark.slow
def test_flags_list_all_shows_what_this_xla_knows_beside_the_catalog(tmp_path):
    from autotune.flags.catalog import Channel

    listed = invoke("flags", "list", "--all", "--format", "json", cwd=tmp_path)
    assert listed.exit_code == 0, listed.output
    rows = {row["flag"]: row for row in json.loads(listed.stdout)}
    assert rows[OPEN] | {} == {"flag": OPEN, "type": None, "default": None,
                               "recommended": None, "backend": "any", "channel": "xla_flags",
                               "status": "not in the catalog", "in_catalog": False,
                               "known_to_xla": True}
    assert TYPO not in rows
    # the discovery agrees with the catalog's own facts: of its XLA_FLAGS flags, exactly
    # the obsolete ones are unknown to this jaxlib
    flags = [spec for spec in load_catalog() if spec.channel is Channel.XLA_FLAGS]
    assert {s.name for s in flags if not rows[s.name]["known_to_xla"]} == {
        s.name for s in flags if s.obsolete is not None}
    assert len([r for r in rows.values() if not r["in_catalog"]]) > 100
    assert rows["xla_gpu_enable_triton_gemm"]["backend"] == "gpu"
    # the text: every flag's whole name on a line of its own, every line within 80 columns
    # (a long default value, or an obsolete flag's replacement, goes to a line of its own)
    text = invoke("flags", "list", "--all", cwd=tmp_path).stdout.splitlines()
    assert set(rows) <= set(text)
    assert max(map(len, text)) <= 80, max(text, key=len)
    assert "      xla_gpu_enable_dynamic_slice_fusion" in text  # a replacement, whole


def test_a_paired_study_gives_an_open_flag_per_compilation_where_the_probe_says_so(tmp_path):
    """The preflight probe asks `compile(compiler_options=...)` about each flag outside the
    catalog; those it takes, with bool or number values, go per compilation (paired, in
    one process with the baseline), and the plan records them for every reader."""
    from autotune.api import plan_study
    from autotune.flags.compose import compiler_options, split_per_compile
    from autotune.results.study_results import study_catalog

    planned = plan_study(space=str(_space(tmp_path, OPEN)), benchmark="matmul", preset="tiny",
                         devices=1)
    plan = planned.plan
    assert plan.per_compile_open == {OPEN, "xla_cpu_enable_fast_min_max"}
    assert plan.recorded()["per_compile_open"] == sorted(plan.per_compile_open)
    config = {OPEN: True, "xla_cpu_enable_fast_min_max": False}
    assert compiler_options(config, plan.catalog()) == config
    record = type("Record", (), {"plan": plan.recorded()})()  # what a reader has
    assert split_per_compile(config, study_catalog(load_catalog(), record)) == (config, {})
    assert split_per_compile(config, load_catalog()) == ({}, config)  # without the record


def test_the_library_scan_takes_whole_words_only_from_large_jax_and_xla_libraries(tmp_path):
    """The scan of jaxlib's libraries (`registry._SCAN`) does the look-behind by hand: a
    candidate is `xla_` and two or more name characters where no word character comes
    before it. Run in an interpreter whose `jaxlib` is a folder of made-up libraries."""
    from autotune.flags import registry

    package = tmp_path / "site" / "jaxlib"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    pad = b"\0" * (1 << 20)  # the scan reads libraries of 1 MiB or more
    (package / "xla_extension.so").write_bytes(
        b"xla_at_the_start\0--xla_gpu_whole=true " + pad + b" Axla_glued _xla_glued 9xla_glued"
        b" xla_x xla_UPPER (xla_cpu_last)")
    (package / "libjax_small.so").write_bytes(b"xla_too_small ")  # under 1 MiB: not read
    (package / "other.so").write_bytes(b"xla_not_jax_named " + pad)  # neither jax nor xla
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run([sys.executable, "-c", registry._SCAN], cwd=work, check=True, timeout=60,
                   env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"})
    found = json.loads((work / "candidates.json").read_text())
    assert found == ["xla_at_the_start", "xla_cpu_last", "xla_gpu_whole"]
