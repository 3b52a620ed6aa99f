"""benchmarks/scripts/fill_study.py makes a study that reads like a real one.

The script times reading a large study; these tests check, on a small one,
that what it makes up holds together: the read model's own rules chose what it
confirmed and shrank, every measured run has its claim, and either two workers
are live or the study finished and kept its page.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

from autotune.flags.catalog import load_catalog
from autotune.ground.records import PLAN_FINISHED, ClaimState, OutcomeKind, Role
from autotune.results.ranking import recommend
from autotune.results.shrink import SHRINK_ROLES, shrink
from autotune.storage import Store

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "scripts" / "fill_study.py"


def _script() -> ModuleType:
    name = "_autotune_fill_study"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SCRIPT)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.mark.parametrize("in_flight", [True, False])
def test_the_made_up_study_holds_together(tmp_path, in_flight):
    script = _script()
    with Store.open(f"sqlite:///{tmp_path / 'big.db'}") as store:
        made = script.fill(store, script.study_plan("big", 400, 3), 3, in_flight)
        runs, claims = store.runs("big"), store.claims("big")
        kept = store.current_view("big")
        finished = (store.get_study("big").plan or {}).get(PLAN_FINISHED)
    assert len(runs) == made
    roles = Counter(r.role for r in runs)
    assert roles[Role.BASELINE] == roles[Role.RECOMMENDED] == 1 and roles[Role.SEARCH] == 400
    assert roles[Role.CONFIRM] == 4 * 4  # the top 3 and the baseline, 4 rounds
    kinds = Counter(r.outcome.kind for r in runs if r.role is Role.SEARCH)
    assert 0.02 <= 1 - kinds[OutcomeKind.OK] / 400 <= 0.12 and len(kinds) >= 4
    same = [r for r in runs if r.outcome.measurement and r.outcome.measurement.same_program_as]
    assert len(same) > 200 and all(r.ratio for r in same)
    rec = recommend(runs)
    assert rec.run is not None  # confirmed faster: a recommendation, shrunk to the end
    state = shrink(runs, rec.run, load_catalog(), 4)
    assert state.done and any(r.role in SHRINK_ROLES for r in runs)
    states = Counter(c.state for c in claims)
    assert states[ClaimState.DONE] == made - sum(r.role in SHRINK_ROLES for r in runs)
    assert states[ClaimState.INTERRUPTED] == 1  # the shrinking's, released at its end
    running = [c for c in claims if c.state is ClaimState.RUNNING]
    if in_flight:  # two processes measure it now: no page kept, readers compute
        assert len({(c.owner_host, c.owner_pid) for c in running}) == 2 == len(running)
        assert kept is None and finished is None
    else:  # it ended as `study.service.finish` ends a study
        assert running == [] and finished is not None
        assert kept is not None and json.loads(kept)["summary"]["runs"] == made


def test_the_script_fills_then_times_each_read(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--storage", f"sqlite:///{tmp_path / 'big.db'}",
         "--trials", "30", "--repeats", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("made up ") and lines[0].endswith(" s")
    assert "the study finished, its page kept in" in lines[0]
    assert lines[1] == "the study's kept page is current" and "goal < 1 s" in lines[2]
    for what in ("Store.runs", "best_rows", "export_document", "autotune best NAME",
                 "the kept page", "(table, process)"):
        assert any(what in line for line in lines), done.stdout
