"""The CLI as a user types it: real studies on a tiny benchmark, real SQLite files."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import outcomes
import pytest
import yaml
from cli_runner import invoke

from autotune.flags.compose import config_key
from autotune.ground.records import Measurement, OutcomeKind, Role, TrialOutcome
from autotune.results.confirmation import Confirmations, sequential_next
from autotune.results.ranking import recommend
from autotune.results.shrink import SHRINK_ROLES
from autotune.storage import Store

# --no-fit: these tests read the documented space's trials (test_fit_study fits one)
STUDY = ["study", "--benchmark", "matmul", "--preset", "tiny", "--devices", "1",
         "--steps", "5", "--warmup", "1", "--seed", "3", "--confirm", "0", "--no-fit",
         "--no-racing"]  # racing: tests/test_evidence.py and test_racing_* below


@pytest.fixture(scope="module")
def finished_study(tmp_path_factory) -> Path:
    """A 3-trial cpu study on matmul tiny, run once for the tests that read it."""
    folder = tmp_path_factory.mktemp("study")
    result = invoke(*STUDY, "--space", "cpu", "--trials", "3", cwd=folder)
    assert result.exit_code == 0, result.output
    return folder


@pytest.mark.slow
def test_study_measures_baseline_first_then_samples(finished_study):
    store = Store.open(f"sqlite:///{finished_study / 'autotune.db'}")
    runs = store.runs("cpu-matmul-tiny-1dev")
    assert [r.trial_number for r in runs] == [0, 1, 2]
    assert runs[0].role is Role.BASELINE and runs[0].flags == {}
    assert all(r.role is Role.SEARCH for r in runs[1:])
    assert all(r.outcome.ok and r.ratio and r.outcome.measurement for r in runs)
    assert runs[0].outcome.measurement.same_program_as_baseline is True


def table_rows(output: str) -> list[list[str]]:
    """The body rows of the tables in `output`, each as its stripped cells.

    A cell wrapped over several lines continues in lines whose first cell is empty;
    their text is joined to the row's cells with a space.
    """
    rows: list[list[str]] = []
    for line in output.splitlines():
        if not line.startswith("│"):
            continue
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if cells[0] or not rows:
            rows.append(cells)
        else:
            rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells, strict=True)]
    return rows


def flags_under(output: str) -> dict[str, list[str]]:
    """`best`'s "flags changed from defaults" section: label -> its `name=value` lines."""
    listed: dict[str, list[str]] = {}
    label = None
    for line in output.splitlines():
        if line.startswith("  #"):
            label = line.strip().rstrip(":")
            listed[label] = []
        elif line.startswith("    ") and label is not None:
            listed[label].append(line.strip())
        elif not line.startswith(" "):
            label = None
    return listed


@pytest.mark.slow
@pytest.mark.slow
def test_a_finished_study_keeps_the_page_its_readers_would_compute(finished_study, tmp_path):
    """The study's last process keeps its page (`study.service.publish_page`); `best
    --format json` shows the kept rows while the study is unchanged, and computes its own
    once a run is stored (issue 33's fast reads)."""
    import inspect
    import shutil

    from autotune.cli.results import PAGE_ROWS
    from autotune.flags.catalog import load_catalog
    from autotune.results.view import study_page

    assert PAGE_ROWS == inspect.signature(study_page).parameters["limit"].default
    shutil.copy(finished_study / "autotune.db", tmp_path / "autotune.db")
    name = "cpu-matmul-tiny-1dev"
    with Store.open(f"sqlite:///{tmp_path / 'autotune.db'}") as store:
        kept = json.loads(store.current_view(name) or "null")
        computed = study_page(store.get_study(name), store.runs(name), load_catalog(),
                              store.workers(name), claims=store.claims(name))
        assert kept == json.loads(json.dumps(computed))
        shown = json.loads(invoke("best", name, "--format", "json", cwd=tmp_path).output)
        assert shown == kept["best"]
        table = invoke("best", name, cwd=tmp_path).output
        version = store.version(name)
        store.save_view(name, "another version", json.dumps(kept))  # behind: computed
        assert invoke("best", name, cwd=tmp_path).output == table
        marked = [{**row, "kept": True} for row in kept["best"]]  # which path printed it
        notes = [*kept["notes"], {"kind": "info", "text": "a note only the kept page has"}]
        store.save_view(name, version, json.dumps({**kept, "best": marked, "notes": notes}))
        shown = json.loads(invoke("best", name, "--format", "json", cwd=tmp_path).output)
        assert shown == marked
        assert "a note only the kept page has" in invoke("best", name, cwd=tmp_path).output
        top = json.loads(invoke("best", name, "--format", "json", "--top", "1",
                                cwd=tmp_path).output)
        assert not any("kept" in row for row in top)  # another --top: computed
        last = store.runs(name)[-1]
        store.record_run(name, last.trial_number, last.role, last.flags, last.env,
                         last.outcome, last.environment, ratio=last.ratio)
        shown = json.loads(invoke("best", name, "--format", "json", cwd=tmp_path).output)
        assert not any("kept" in row for row in shown)
        assert "a note only the kept page has" not in invoke("best", name, cwd=tmp_path).output


def test_best_prints_ranked_table_with_baseline(finished_study):
    result = invoke("best", "cpu-matmul-tiny-1dev", cwd=finished_study)
    assert result.exit_code == 0, result.output
    store = Store.open(f"sqlite:///{finished_study / 'autotune.db'}")
    search = [r for r in store.runs("cpu-matmul-tiny-1dev") if r.role is Role.SEARCH]
    fastest_first = sorted(search, key=lambda r: r.ratio)
    # seed 3 samples two different configurations; nothing was confirmed (--confirm 0)
    assert len({tuple(sorted(r.flags.items())) for r in search}) == 2
    rows = table_rows(result.output)
    # the baseline row on top, then rank 1 = the smallest time ratio (largest speedup)
    assert [(row[0], row[1]) for row in rows] == [
        ("baseline", "0"),
        ("1", str(fastest_first[0].trial_number)),
        ("2", str(fastest_first[1].trial_number)),
    ]
    assert rows[0][3].endswith("(A/A)")
    assert [row[3] for row in rows[1:]] == [f"×{1 / r.ratio:.3f}" for r in fastest_first]
    assert [row[5] for row in rows[1:]] == ["not confirmed", "not confirmed"]
    listed = flags_under(result.output)
    for rank, run in enumerate(fastest_first, start=1):
        [line] = listed[f"#{rank} (trial {run.trial_number})"]
        name, _, value = line.partition("=")
        assert str(run.flags[name]).lower() == value  # each rank lists its own trial's flags
    assert "runs by outcome: ok: 3" in result.output


def paired(ratio: float) -> Measurement:
    """A PAIRED measurement whose candidate steps are `ratio` times the baseline's."""
    return outcomes.paired(ratio, fingerprint=f"cand{ratio}", baseline_fingerprint="base")


def test_best_ranks_what_the_confirmation_upheld_above_a_lucky_search_trial(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}")
    store.ensure_study("cpu-matmul-tiny", "cpu", "matmul", "tiny", 1, "paired")

    def record(trial: int, role: Role, flags: dict, ratio: float) -> None:
        store.record_run("cpu-matmul-tiny", trial, role, flags, {},
                         TrialOutcome(OutcomeKind.OK, "ok", paired(ratio)))

    lucky = {"xla_cpu_use_fusion_emitters": False}
    upheld = {"xla_backend_optimization_level": 2}
    record(0, Role.BASELINE, {}, 1.0)
    record(1, Role.SEARCH, lucky, 0.80)  # the search's best: x1.250
    record(2, Role.SEARCH, upheld, 0.85)  # x1.176
    record(3, Role.SEARCH, {"xla_cpu_prefer_vector_width": 128}, 0.95)  # x1.053, not confirmed
    for _ in range(2):
        record(1, Role.CONFIRM, lucky, 1.0)  # re-measured: no gain
        record(2, Role.CONFIRM, upheld, 0.90)  # re-measured: x1.111, a gain all the same

    result = invoke("best", "cpu-matmul-tiny", cwd=tmp_path)

    assert result.exit_code == 0, result.output
    rows = table_rows(result.output)
    # confirmed first, fastest confirmed first; then the unconfirmed in the search's order.
    # The search column pools every process of the program: the search run and its two
    # confirmation runs (trial 2: 0.85, 0.90, 0.90 -> x1.111; trial 1: 0.80, 1.0, 1.0 -> x1.000)
    assert [(row[0], row[1], row[3]) for row in rows] == [
        ("baseline", "0", "×1.000 (A/A)"),
        ("1", "2", "×1.111 n=3"),
        ("2", "1", "×1.000 n=3"),
        ("3", "3", "×1.053"),
    ]
    assert rows[1][5].startswith("×1.111 [") and "no measurable gain" not in rows[1][5]
    assert rows[2][5].startswith("×1.000 [") and rows[2][5].endswith("no measurable gain")
    assert rows[3][5] == "not confirmed"
    assert flags_under(result.output) == {
        "#1 (trial 2)": ["xla_backend_optimization_level=2"],
        "#2 (trial 1)": ["xla_cpu_use_fusion_emitters=false"],
        "#3 (trial 3)": ["xla_cpu_prefer_vector_width=128"]}
    assert "runs by outcome: ok: 8" in result.output


def test_the_best_table_fits_80_columns_and_lists_every_flag_name_whole(tmp_path):
    store = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}")
    store.ensure_study("a-study-with-a-rather-long-name", "gpu-collectives", "transformer",
                       "small", 8, "paired")
    long_flags = {"xla_collective_permute_latency_bound_threshold_in_bytes": 4294967296,
                  "xla_tpu_enable_async_collective_fusion_fuse_all_gather": False,
                  "xla_gpu_enable_latency_hiding_scheduler": True}
    store.record_run("a-study-with-a-rather-long-name", 0, Role.BASELINE, {}, {},
                     TrialOutcome(OutcomeKind.OK, "", paired(1.0)))
    store.record_run("a-study-with-a-rather-long-name", 1, Role.SEARCH, long_flags, {},
                     TrialOutcome(OutcomeKind.OK, "", paired(0.9)))
    for _ in range(2):
        store.record_run("a-study-with-a-rather-long-name", 1, Role.CONFIRM, long_flags, {},
                         TrialOutcome(OutcomeKind.OK, "", paired(0.93)))
    as_baseline = replace(paired(1.01), fingerprint="base")  # a flag that changed nothing
    store.record_run("a-study-with-a-rather-long-name", 2, Role.SEARCH,
                     {"xla_gpu_enable_latency_hiding_scheduler": True}, {},
                     TrialOutcome(OutcomeKind.OK, "", as_baseline))

    result = invoke("best", "a-study-with-a-rather-long-name", cwd=tmp_path)

    assert result.exit_code == 0, result.output
    table = [line for line in result.output.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and max(len(line) for line in table) <= 80
    assert flags_under(result.output) == {"#1 (trial 1)": [
        "xla_collective_permute_latency_bound_threshold_in_bytes=4294967296",
        "xla_gpu_enable_latency_hiding_scheduler=true",
        "xla_tpu_enable_async_collective_fusion_fuse_all_gather=false"],
        "#2 (trial 2, the baseline's program)": ["xla_gpu_enable_latency_hiding_scheduler=true"]}
    assert all(len(line) <= 80 for line in result.output.splitlines() if line.startswith("  "))
    assert table_rows(result.output)[1][5].startswith("×1.075 [")


@pytest.mark.slow
def test_an_unconfirmed_study_exports_xlas_defaults_with_its_candidates(finished_study, tmp_path):
    target = tmp_path / "best.yaml"
    result = invoke("export", "cpu-matmul-tiny-1dev", "-o", str(target), cwd=finished_study)
    assert result.exit_code == 0, result.output
    assert "XLA's defaults (nothing to set)" in result.output
    assert "not recommended: no configuration was confirmed" in result.output
    doc = yaml.safe_load(target.read_text())
    assert doc["schema_version"] == 2 and doc["recommended"] is False
    assert (doc["trial"], doc["flags"], doc["xla_flags"], doc["env"]) == (None, {}, "", {})
    assert doc["measured"]["verdict"] == "no measurable gain"
    assert doc["measured_on"]["backend"] == "cpu" and doc["measured_on"]["space"] == "cpu"
    store = Store.open(f"sqlite:///{finished_study / 'autotune.db'}")
    searched = {r.trial_number for r in store.runs("cpu-matmul-tiny-1dev") if r.role is Role.SEARCH}
    assert {c["trial"] for c in doc["candidates"]} <= searched and doc["candidates"]
    assert all(c["verdict"] is None and not c["recommended"] for c in doc["candidates"])


@pytest.mark.slow
def test_a_study_whose_flags_never_change_the_program_exports_xlas_defaults(tmp_path):
    """GPU flags on the CPU compiler: every configuration compiles to the default program."""
    result = invoke("study", "--space", "gpu-collectives", "--benchmark", "matmul", "--preset",
                    "tiny", "--devices", "1", "--steps", "5", "--warmup", "1", "--trials", "3",
                    "--seed", "1", "--allow-backend-mismatch", "--confirm", "2",
                    "--confirm-repeats", "2", "--confirm-max", "0", "--no-fit",
                    cwd=tmp_path)  # fitting drops them all
    assert result.exit_code == 0, result.output
    store = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}")
    tried = [r for r in store.runs("gpu-collectives-matmul-tiny-1dev")
             if r.role is not Role.BASELINE]
    assert len(tried) == 2 and all(r.flags for r in tried)
    assert all(r.outcome.measurement.same_program_as == 0 for r in tried)  # the premise
    exported = invoke("export", "gpu-collectives-matmul-tiny-1dev", "-o", "-", cwd=tmp_path)
    doc = yaml.safe_load(exported.stdout)
    assert (doc["recommended"], doc["flags"], doc["xla_flags"]) == (False, {}, "")
    assert doc["measured"]["verdict"] == "no measurable gain"
    assert "compiled to XLA's default program" in doc["reason"]


@pytest.mark.slow
def test_export_rank_writes_an_explicit_pick_marked_not_recommended(finished_study, tmp_path):
    target = tmp_path / "pick.yaml"
    result = invoke("export", "cpu-matmul-tiny-1dev", "--rank", "1", "-o", str(target),
                    cwd=finished_study)
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(target.read_text())
    store = Store.open(f"sqlite:///{finished_study / 'autotune.db'}")
    fastest = min((r for r in store.runs("cpu-matmul-tiny-1dev") if r.role is Role.SEARCH),
                  key=lambda r: r.ratio)
    assert doc["trial"] == fastest.trial_number and doc["rank"] == 1
    assert doc["recommended"] is False and doc["reason"].startswith("explicit pick: not ")
    assert doc["flags"] == dict(fastest.flags)
    assert doc["measured"]["speedup"] == pytest.approx(1 / fastest.ratio)
    for name, value in fastest.flags.items():
        rendered = str(value).lower() if isinstance(value, bool) else str(value)
        assert f"--{name}={rendered}" in doc["xla_flags"]
    by_trial = invoke("export", "cpu-matmul-tiny-1dev", "--trial", str(fastest.trial_number),
                      "-o", "-", cwd=finished_study)
    assert yaml.safe_load(by_trial.stdout)["flags"] == doc["flags"]


@pytest.mark.slow
def test_rerunning_the_same_command_continues_the_study(finished_study, tmp_path):
    import shutil

    # a copy: the other tests read the fixture's three trials, in whatever order they run
    shutil.copy(finished_study / "autotune.db", tmp_path / "autotune.db")
    again = invoke(*STUDY, "--space", "cpu", "--trials", "3", cwd=tmp_path)
    assert again.exit_code == 0 and "already holds 3 trials" in again.output
    more = invoke(*STUDY, "--space", "cpu", "--trials", "4", cwd=tmp_path)
    assert more.exit_code == 0, more.output
    store = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}")
    runs = store.runs("cpu-matmul-tiny-1dev", roles=[Role.BASELINE, Role.SEARCH])
    numbers = [r.trial_number for r in runs]
    # one more launch; Optuna trials between may be repeats answered from the records
    assert numbers[:3] == [0, 1, 2] and len(numbers) == 4 and numbers[3] >= 3
    assert sum(r.role is Role.BASELINE for r in runs) == 1


@pytest.mark.slow
def test_recommended_configuration_is_the_second_trial(tmp_path):
    result = invoke(*STUDY, "--space", "gpu-collectives", "--trials", "2",
                    "--allow-backend-mismatch", cwd=tmp_path)
    assert result.exit_code == 0, result.output
    assert "expect no effect to measure" in result.output
    assert "holds gpu flags but the trials ran on cpu" in result.output
    runs = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}").runs(
        "gpu-collectives-matmul-tiny-1dev")
    assert [r.role for r in runs] == [Role.BASELINE, Role.RECOMMENDED]
    assert runs[1].flags["xla_gpu_all_gather_combine_threshold_bytes"] == 8589934592
    assert runs[1].flags["xla_gpu_enable_latency_hiding_scheduler"] is True
    # The CPU compiler ignores GPU flags: the fingerprint shows nothing changed.
    assert runs[1].outcome.measurement.same_program_as_baseline is True
    assert "--xla_gpu_enable_latency_hiding_scheduler=true" in runs[1].env["XLA_FLAGS"]


@pytest.mark.slow
def test_a_study_with_nothing_left_to_search_confirms_nothing_and_says_so(tmp_path):
    """Seen on an H200 (gpu-collectives on one device: no collectives to act on): the
    study announced a confirmation of three and the answer blamed failed runs."""
    result = invoke("study", "--space", "gpu-collectives", "--benchmark", "matmul",
                    *QUICK, "--trials", "4", "--allow-backend-mismatch", cwd=tmp_path)
    assert result.exit_code == 0, result.output
    assert "nothing to confirm: the search measured no configuration beside XLA's defaults" \
        in result.output
    assert "confirming" not in result.output and "ran successfully" not in result.output
    best = invoke("export", "gpu-collectives-matmul-tiny-1dev", "-o", "-", "--format", "json",
                  cwd=tmp_path)
    assert best.exit_code == 0, best.output
    assert json.loads(best.output)["reason"] == (
        "no configuration beside XLA's defaults was measured: keep XLA's defaults")


def test_studies_lists_what_the_database_holds(finished_study):
    """Each study whole on a line of its own (a table of nine columns cut it to `cpu-tra…`
    on an 80-column terminal), its facts under it within 80 columns."""
    result = invoke("studies", cwd=finished_study)
    lines = result.stdout.splitlines()
    assert result.exit_code == 0 and "cpu-matmul-tiny-1dev" in lines
    assert lines[lines.index("cpu-matmul-tiny-1dev") + 1].startswith("    done; space cpu, ")
    assert max(map(len, lines)) <= 80


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["study", "--space", "nope"], "unknown search space 'nope'. Known spaces: cpu"),
        (["study", "--space", "cpu", "--benchmark", "nope"],
         "unknown benchmark 'nope'. Known benchmarks: collective-matmul, distributed-mlp, matmul"),
        (["study", "--space", "cpu", "--sampler", "nope"], "unknown sampler 'nope'"),
        (["study", "--space", "cpu", "--preset", "huge"], "unknown preset 'huge'"),
        (["study", "--space", "cpu", "--storage", "foo://x"], "unknown database kind 'foo'"),
        (["study", "--space", "cpu", "--storage", "notaurl"], "notaurl"),
        (["study", "--space", "cpu", "--storage", "postgresql://nobody@127.0.0.1:1/x"],
         "cannot"),
        (["best", "nosuch"], "no study named 'nosuch'"),
        (["export", "nosuch"], "no study named 'nosuch'"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_leaves_the_database_alone(
    finished_study, args, words
):
    db = finished_study / "autotune.db"
    before = (db.stat().st_size, db.stat().st_mtime_ns)
    result = invoke(*args, cwd=finished_study)
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert "Traceback" not in result.output
    assert (db.stat().st_size, db.stat().st_mtime_ns) == before


def test_malformed_space_file_names_file_and_line(tmp_path):
    space = tmp_path / "mine.yaml"
    space.write_text("schema_version: 1\nname: mine\nparams:\n  x: [unclosed\n")
    result = invoke("study", "--space", str(space), cwd=tmp_path)
    assert result.exit_code == 2
    assert "mine.yaml:" in result.output
    assert not (tmp_path / "autotune.db").exists()


def test_read_commands_do_not_create_a_database(tmp_path):
    result = invoke("best", "x", cwd=tmp_path)
    assert result.exit_code == 2 and "no database at autotune.db" in result.output
    assert not (tmp_path / "autotune.db").exists()


def test_list_commands(tmp_path):
    spaces = invoke("spaces", "list", cwd=tmp_path)
    assert spaces.exit_code == 0 and "gpu-collectives" in spaces.output and "cpu" in spaces.output
    upgrade = invoke("db", "upgrade", "--storage", f"sqlite:///{tmp_path}/new.db", cwd=tmp_path)
    assert upgrade.exit_code == 0 and "at revision" in upgrade.output


@pytest.mark.slow
def test_ctrl_c_keeps_finished_trials_and_the_study_resumes(tmp_path):
    db = tmp_path / "autotune.db"
    cmd = [sys.executable, "-c", "from autotune.cli import main; main()", *STUDY,
           "--space", "cpu", "--trials", "40"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and _count_runs(db) < 2 and proc.poll() is None:
        time.sleep(0.3)
    running = proc.poll() is None
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert running, f"the study ended before the signal: {stderr.decode()}"
    assert proc.returncode == 130, stderr.decode()
    assert b"every finished trial is kept" in stderr
    kept = _count_runs(db)
    assert kept >= 2
    with sqlite3.connect(db) as conn:
        states = [s for (s,) in conn.execute("select state from trials")]
    assert "RUNNING" not in states
    resumed = invoke(*STUDY, "--space", "cpu", "--trials", str(kept + 1), cwd=tmp_path)
    assert resumed.exit_code == 0, resumed.output
    assert _count_runs(db) == kept + 1


def _count_runs(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db) as conn:
            return conn.execute("select count(*) from autotune_runs").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


@pytest.mark.slow
def test_baseline_that_fails_stops_the_study_and_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_bogus_flag=1")
    result = invoke(*STUDY, "--space", "cpu", "--trials", "5", cwd=tmp_path)
    assert result.exit_code == 1
    assert "the baseline (XLA's defaults, no flags) ended as unknown_flag" in result.output
    assert "--xla_bogus_flag=1" in result.output
    runs = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}").runs("cpu-matmul-tiny-1dev")
    assert len(runs) == 1 and runs[0].outcome.kind.value == "unknown_flag"


def test_space_for_another_backend_is_refused_before_any_trial(tmp_path):
    result = invoke(*STUDY, "--space", "gpu-collectives", cwd=tmp_path)
    assert result.exit_code == 2
    assert "space 'gpu-collectives' is for gpu but JAX reports cpu here" in result.output
    assert "--allow-backend-mismatch" in result.output
    assert not (tmp_path / "autotune.db").exists()


OLD_GUIDE = """schema_version: 1
name: old-guide
description: flags copied from an old guide
backend: any
params:
  xla_cpu_enable_fast_math:
    type: bool
    source: test
  xla_gpu_enable_pipelined_collectives:
    type: bool
    source: "001: overrides the per-collective pipelining flags"
"""


def test_space_with_a_flag_this_xla_lacks_stops_before_its_first_trial(tmp_path):
    (tmp_path / "old.yaml").write_text(OLD_GUIDE)
    result = invoke(*STUDY, "--space", "old.yaml", "--trials", "2", cwd=tmp_path)
    assert result.exit_code == 2
    assert "does not know: --xla_gpu_enable_pipelined_collectives (obsolete)" in result.output
    assert "--drop-unknown" in result.output
    assert not (tmp_path / "autotune.db").exists()


@pytest.mark.slow
def test_drop_unknown_leaves_the_flag_out_and_says_so(tmp_path):
    (tmp_path / "old.yaml").write_text(OLD_GUIDE)
    result = invoke(*STUDY, "--space", "old.yaml", "--trials", "3", "--drop-unknown",
                    cwd=tmp_path)
    assert result.exit_code == 0, result.output
    assert "left out 1 flag this XLA" in result.output
    runs = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}").runs("old-guide-matmul-tiny-1dev")
    # what is left (fast math on or off) fits in 3 trials: auto measured both, then stopped
    assert len(runs) == 2 and {tuple(r.flags.items()) for r in runs} == {
        (), (("xla_cpu_enable_fast_math", True),)}
    assert "every configuration of the space has been measured" in result.output
    assert all("xla_gpu_enable_pipelined_collectives" not in r.flags for r in runs)
    assert all(r.outcome.ok for r in runs)


def test_spaces_show_and_validate(tmp_path):
    shown = invoke("spaces", "show", "tpu-memory", cwd=tmp_path)
    assert shown.exit_code == 0
    assert "xla_memory_scheduler" in shown.output and "recommended:" in shown.output
    (tmp_path / "old.yaml").write_text(OLD_GUIDE)
    valid = invoke("spaces", "validate", "old.yaml", "--no-xla", cwd=tmp_path)
    assert valid.exit_code == 0 and "valid space 'old-guide'" in valid.output
    # asked of this XLA (the default), its obsolete flag stops it, as it stops a study
    refused = invoke("spaces", "validate", "old.yaml", cwd=tmp_path)
    assert refused.exit_code == 2
    assert "--xla_gpu_enable_pipelined_collectives is obsolete" in refused.output
    (tmp_path / "bad.yaml").write_text(OLD_GUIDE.replace("type: bool\n    source: test",
                                                         "type: boolean\n    source: test"))
    invalid = invoke("spaces", "validate", "bad.yaml", cwd=tmp_path)
    assert invalid.exit_code == 2 and "bad.yaml:7" in invalid.output


def test_all_ten_spaces_are_listed(tmp_path):
    listed = invoke("spaces", "list", cwd=tmp_path)
    for name in ("cpu", "gpu-collectives", "gpu-fsdp", "gpu-collective-matmul", "gpu-p2p",
                 "gpu-runtime", "gpu-pgle", "tpu-collectives", "tpu-latency-bound", "tpu-memory"):
        assert name in listed.stdout.splitlines()  # whole, on a line of its own
    assert max(map(len, listed.stdout.splitlines())) <= 80


EXAMPLES = Path(__file__).resolve().parents[1] / "benchmarks" / "examples"
QUICK = ["--preset", "tiny", "--devices", "1", "--steps", "5", "--warmup", "1", "--seed", "3"]


@pytest.mark.slow
@pytest.mark.oldest
def test_script_example_tunes_end_to_end_with_confirmation(tmp_path):
    result = invoke("study", "--space", "cpu", "--script", str(EXAMPLES / "my_step.py"),
                    "--trials", "3", "--confirm", "1", "--confirm-repeats", "2",
                    "--confirm-max", "4", "--confirm-steps", "9", *QUICK,
                    "--no-fit", "--no-racing", cwd=tmp_path)
    assert result.exit_code == 0, result.output
    assert "confirming the best configuration:" in result.output
    stored = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}").runs("cpu-my_step-tiny-1dev")
    runs = [r for r in stored if r.role not in SHRINK_ROLES]
    roles = [r.role for r in runs]
    assert roles[:3] == [Role.BASELINE, Role.SEARCH, Role.SEARCH]
    assert roles[3:] == [Role.CONFIRM] * len(roles[3:])
    # a configuration confirmed faster (noise decides, on this machine) is shrunk
    shrunk = [r for r in stored if r.role in SHRINK_ROLES]
    assert bool(shrunk) == recommend(stored).recommended
    if shrunk:
        exported = yaml.safe_load(invoke("export", "cpu-my_step-tiny-1dev", "-o", "-",
                                         cwd=tmp_path).stdout)
        rec = recommend(stored).run  # the faster search trial, or the other taken on after it
        assert rec is not None and rec.role is Role.SEARCH
        assert exported["recommended"] and exported["flags"].items() <= rec.flags.items()
    search = runs[1:3]
    # seed 3 samples two configurations that both change the compiled program, so the
    # faster of the two must be re-measured: --confirm-repeats 2 fresh processes, and up to
    # --confirm-max 4 while its interval still holds 1.0
    assert [r.outcome.measurement.same_program_as_baseline for r in search] == [False, False]
    best = min(search, key=lambda r: r.ratio)
    confirm = runs[3:]
    first = [r for r in confirm if r.trial_number == best.trial_number]
    assert 2 <= len(first) <= 4 and confirm[:len(first)] == first
    assert {config_key(r.flags) for r in first} == {config_key(best.flags)}
    assert sequential_next(stored, [best], cap=4) is None  # it stopped where the rule says
    # closed without a recommendation, the other is taken on (`CONFIRM_MORE`), rounds first
    other = next(r for r in search if r is not best)
    more = confirm[len(first):]
    assert all(r.trial_number == other.trial_number for r in more)
    closed = Confirmations.of(stored).of_run(best)
    assert not more or (len(more) >= 2 and closed is not None and not closed.recommendable)
    assert all(r.outcome.ok and r.outcome.measurement.step_times_s for r in confirm)
    # the search timed --steps 5 per process, each confirmation process --confirm-steps 9
    assert {len(r.outcome.measurement.step_times_s) for r in search} == {5}
    assert {len(r.outcome.measurement.step_times_s) for r in confirm} == {9}
    assert {len(r.outcome.measurement.baseline_step_times_s) for r in confirm} == {9}
    assert f"confirm 1/2: trial #{best.trial_number} " in result.output
    assert f"confirm 2/2: trial #{best.trial_number} " in result.output
    shown = invoke("trials", "cpu-my_step-tiny-1dev", cwd=tmp_path)
    assert shown.exit_code == 0 and "(95% CI)" in shown.output
    assert "(baseline)" in shown.output
    heads = [line.split() for line in shown.output.splitlines() if line.startswith("run ")]
    assert [(head[3], head[4]) for head in heads] == [
        ("0", "baseline"), (str(search[0].trial_number), "search"),
        (str(search[1].trial_number), "search"),
        *[(str(r.trial_number), "confirm") for r in confirm]]
    rows = json.loads(invoke("trials", "cpu-my_step-tiny-1dev", "--format", "json",
                             cwd=tmp_path).stdout)
    for row, head in zip(rows, heads, strict=True):  # the figures shown are the JSON's
        assert row["median_ci_s"][0] <= row["median_step_s"] <= row["median_ci_s"][1]
        assert f"median step {row['median_step_s'] * 1e3:.2f} ms" in shown.output
        assert head[1] == str(row["run"]) and row["compile_time_s"] > 0


@pytest.mark.slow
def test_command_example_tunes_end_to_end(tmp_path):
    program = EXAMPLES / "my_program.py"
    result = invoke("study", "--space", "cpu", "--command",
                    f"{sys.executable} {program} --size 64", "--trials", "2", "--confirm", "0",
                    *QUICK, cwd=tmp_path)
    assert result.exit_code == 0, result.output
    stored = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}").runs("cpu-my_program-tiny-1dev")
    runs = [r for r in stored if r.role is not Role.FINGERPRINT]
    assert len(runs) == 2 and all(r.outcome.ok for r in runs)
    # the space was fitted by compiling through the command too (compile-only jobs)
    probes = [r for r in stored if r.role is Role.FINGERPRINT]
    assert probes and all(r.outcome.ok and r.outcome.measurement.fingerprint for r in probes)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--script", "missing.py"], "workload file missing.py does not exist"),
        (["--script", "x.py", "--command", "python x.py"], "give --script or --command"),
        (["--command", "python 'unclosed"], "--command does not parse"),
        (["--trial-memory-limit", "lots"], "--trial-memory-limit 'lots' is not a size"),
    ],
)
def test_bad_workload_options_are_usage_errors(tmp_path, args, words):
    result = invoke("study", "--space", "cpu", *args, cwd=tmp_path)
    assert result.exit_code == 2, result.output
    assert words in result.output
    assert not (tmp_path / "autotune.db").exists()


@pytest.mark.slow
@pytest.mark.oldest
def test_benchmarks_list_shows_the_collectives_from_the_compiled_hlo(tmp_path):
    listed = invoke("benchmarks", "list", "--devices", "4", cwd=tmp_path)
    assert listed.exit_code == 0, listed.output
    rows = {row[0]: " ".join(row) for row in table_rows(listed.output)}  # cells span lines
    assert "all-gather" in rows["transformer"] and "reduce-scatter" in rows["transformer"]
    assert "all-reduce" in rows["mlp-dp"]
    assert "all-gather" in rows["collective-matmul"]
    assert "collective-permute" in rows["pipeline"]
    assert "none" in rows["matmul"]


def test_benchmarks_list_compiles_the_benchmarks_side_by_side_in_their_order(
        tmp_path, monkeypatch):
    """Each benchmark's child is independent: `benchmarks list` runs a CPU's worth at once
    (10 benchmarks, 21 s one after another, 12 s two at a time on 2 cores), the rows
    still in the benchmarks' order. Here each "child" waits 0.5 s and says when."""
    from autotune.ground import resources
    from autotune.launch import inventory

    spans: dict[str, tuple[float, float]] = {}

    def found(info, devices):
        start = time.monotonic()
        time.sleep(0.5)
        spans[info.name] = (start, time.monotonic())
        return {kind: {"count": len(info.name) if kind == "all-gather" else 0, "in_loop": 0}
                for kind in inventory.COLLECTIVES}

    monkeypatch.setattr(inventory, "collectives", found)
    monkeypatch.setattr(resources, "usable_cpus", lambda most=8: 2)
    listed = invoke("benchmarks", "list", "matmul", "transformer", "mlp-dp", "--format", "json",
                    cwd=tmp_path)
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert [(r["benchmark"], r["collectives"]["all-gather"]["count"]) for r in rows] == [
        ("matmul", 6), ("transformer", 11), ("mlp-dp", 6)]
    (a, b, c) = sorted(spans.values())
    assert b[0] < a[1] and c[0] >= min(a[1], b[1]) - 0.01  # two at a time, then the third


@pytest.mark.slow
def test_a_program_measured_already_is_not_timed_again(tmp_path):
    """A/A: GPU flags change nothing on a CPU, so every trial compiles to the baseline's
    program and only the baseline is timed; the others carry its measurement."""
    result = invoke("study", "--space", "gpu-collectives", "--benchmark", "matmul",
                    "--preset", "tiny", "--devices", "1", "--trials", "4", "--confirm", "0",
                    "--steps", "5", "--allow-backend-mismatch", "--no-fit",
                    cwd=tmp_path)  # fitting would drop every flag before a trial
    assert result.exit_code == 0, result.output
    runs = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}").runs(
        "gpu-collectives-matmul-tiny-1dev")
    assert [r.role for r in runs] == [Role.BASELINE, Role.RECOMMENDED, Role.SEARCH, Role.SEARCH]
    baseline, *others = runs
    assert baseline.outcome.measurement.timed_steps == 5
    for run in others:
        m = run.outcome.measurement
        assert run.outcome.kind is OutcomeKind.OK and m.timed_steps == 0
        assert m.same_program_as == 0 and m.fingerprint == baseline.outcome.measurement.fingerprint
        assert run.ratio == baseline.ratio  # the baseline program's own measurement
        assert m.same_program_as_baseline is True
        assert run.outcome.message == "the same program as trial 0, which measured it"
    best = invoke("best", "gpu-collectives-matmul-tiny-1dev", cwd=tmp_path).output
    assert [row[0] for row in table_rows(best)] == ["baseline"]  # one program to rank
    assert "3 trials compiled to a program another trial had timed: not timed again" in best


TINY_SPACE = """schema_version: 1
name: tiny
description: one CPU flag
backend: cpu
params:
  xla_cpu_enable_fast_math: {type: bool}
"""


@pytest.mark.slow
def test_a_rerun_with_another_plan_exits_2_naming_each_field_and_writes_nothing(tmp_path):
    space = tmp_path / "tiny.yaml"
    space.write_text(TINY_SPACE)
    first = ["study", "--space", str(space), "--benchmark", "matmul", "--preset", "tiny",
             "--devices", "1", "--trials", "1", "--confirm", "0", "--steps", "5"]
    assert invoke(*first, cwd=tmp_path).exit_code == 0
    db = tmp_path / "autotune.db"
    runs_before = len(Store.open(f"sqlite:///{db}").runs("tiny-matmul-tiny-1dev"))

    other_steps = invoke(*first[:-1], "7", cwd=tmp_path)
    assert other_steps.exit_code == 2, other_steps.output
    assert "study 'tiny-matmul-tiny-1dev' was created with steps 5 (asked for 7): resume it " \
           "with its original settings" in " ".join(other_steps.output.split())

    space.write_text(TINY_SPACE.replace("one CPU flag", "one CPU flag, edited"))
    edited = invoke(*first, cwd=tmp_path)
    assert edited.exit_code == 2 and "space_sha256" in edited.output
    assert len(Store.open(f"sqlite:///{db}").runs("tiny-matmul-tiny-1dev")) == runs_before

    space.write_text(TINY_SPACE)
    again = invoke(*first[:9], "--trials", "2", *first[11:], cwd=tmp_path)  # more trials: fine
    assert again.exit_code == 0, again.output
