"""Warm start (issue 34) as a user runs it: two real studies in one SQLite file.

`tests/test_warm_start.py` replays recorded tables through `StudyRunner`; here the
whole path runs for real: `autotune study` launches JAX children, the sibling's
recommendation is confirmed and shrunk from what they measured, and a second
`autotune study` of another size of the same workload, on the documented cpu space,
finds it in the database, measures it first, confirms it itself and says so in
`best` and `export`. The workload (`tests/workloads/wide_vectors.py`) is one that
512-bit vectors make about 0.6x as slow on an AVX-512 host; on another CPU the
sibling has nothing to lend, so the test skips there.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from bench_scripts import script
from cli_runner import invoke

from autotune.ground.records import PLAN_WARM, Role
from autotune.storage import Store

WORKLOADS = Path(__file__).resolve().parent / "workloads"
COMMON = ["--script", str(WORKLOADS / "wide_vectors.py"), "--devices", "1", "--steps", "20",
          "--warmup", "1", "--max-warmup", "3", "--confirm-max", "6", "--seed", "7"]
WIDE = {"xla_cpu_prefer_vector_width": 512}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(script("record_table")._vector_isa() != "avx512f",
                       reason="wide_vectors.py is faster at 512-bit vectors only on an "
                              "AVX-512 host: elsewhere the sibling confirms nothing to lend"),
]


def _studies(folder: Path) -> None:
    """The sibling (tiny, its one-configuration space: 512-bit vectors and fast math),
    then the new study (small, the cpu space, `--trials 2`: the baseline and one more) and
    a cold one (`--no-warm-start`), all in the folder's ./autotune.db."""
    for name, extra in (
            ("sib", ["--space", str(WORKLOADS / "wide-vectors.yaml"), "--preset", "tiny"]),
            ("new", ["--space", "cpu", "--preset", "small"]),
            ("cold", ["--space", "cpu", "--preset", "small", "--no-warm-start"])):
        result = invoke("study", *extra, *COMMON, "--trials", "2", "--name", name, cwd=folder)
        assert result.exit_code == 0, result.output


def test_a_study_of_another_size_measures_and_confirms_its_siblings_shrunk_winner(
        tmp_path: Path):
    """One test, not three over a module fixture: the test runners would split them and
    run the three studies once on each."""
    _studies(tmp_path)
    with Store.open(f"sqlite:///{tmp_path / 'autotune.db'}") as store:
        sibling = json.loads(invoke("best", "sib", "--format", "json", cwd=tmp_path).stdout)
        assert [row["trial"] for row in sibling if row["recommended"]] == [1]  # the premise
        plan = store.get_study("new").plan or {}
        assert [(d["study"], d["trial"], d["confirmed"]) for d in plan[PLAN_WARM]] == [
            ("sib", 1, True)]
        searched = [r for r in store.runs("new") if r.role is Role.SEARCH]
        assert len(searched) == 1  # --trials 2: the baseline and the lent configuration
        # the sibling's minimal set (fast math shrunk away there), mapped onto the cpu
        # space: its other flags at the values that leave them as XLA has them
        assert {k: v for k, v in searched[0].flags.items() if k in WIDE} == WIDE
        assert searched[0].flags.get("xla_cpu_enable_fast_math") in (None, False)
        assert PLAN_WARM not in (store.get_study("cold").plan or {})

    best = invoke("best", "new", cwd=tmp_path)
    assert best.exit_code == 0, best.output
    text = " ".join(best.output.split())
    assert ("warm start: the search began with the confirmed configurations of 'sib' "
            "trial 1") in text
    rows = json.loads(invoke("best", "new", "--format", "json", cwd=tmp_path).stdout)
    recommended = [row for row in rows if row["recommended"]]
    assert len(recommended) == 1 and recommended[0]["flags_changed"] == WIDE
    assert recommended[0]["confirmed_interval"][0] > 1.0  # confirmed in this study's runs
    exported = invoke("export", "new", "-o", "-", cwd=tmp_path)
    doc = yaml.safe_load(exported.stdout)
    assert doc["recommended"] is True and doc["flags"] == WIDE
    assert "--xla_cpu_prefer_vector_width=512" in doc["xla_flags"]

    cold = invoke("best", "cold", cwd=tmp_path)  # --no-warm-start says nothing of one
    assert cold.exit_code == 0 and "warm start" not in cold.output
