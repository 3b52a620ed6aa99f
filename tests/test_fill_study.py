"""benchmarks/scripts/fill_study.py makes a study that reads like a real one.

The script times reading a large study; these tests check, on a small one,
that what it makes up holds together: the read model's own rules chose what it
confirmed and shrank, every measured run has its claim, two workers are live.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import ModuleType

from autotune.flags.catalog import load_catalog
from autotune.ground.records import ClaimState, OutcomeKind, Role
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


def test_the_made_up_study_holds_together(tmp_path):
    script = _script()
    with Store.open(f"sqlite:///{tmp_path / 'big.db'}") as store:
        made = script.fill(store, script.study_plan("big", 400, 3), 3)
        runs, claims = store.runs("big"), store.claims("big")
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
    assert len({(c.owner_host, c.owner_pid) for c in running}) == 2 == len(running)


def test_the_script_fills_then_times_each_read(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--storage", f"sqlite:///{tmp_path / 'big.db'}",
         "--trials", "30", "--repeats", "1"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("made up ") and "goal < 1 s" in lines[1]
    for what in ("Store.runs", "best_rows", "export_document", "autotune best NAME"):
        assert any(what in line for line in lines), done.stdout
