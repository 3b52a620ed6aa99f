"""The corpus of recorded workloads: its workload files, its compressed tables, and
`record_table.py --script` recording one of them for real."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from child_env import cpu_child_env

from autotune.flags.compose import config_key
from autotune.ground.errors import UnknownBenchmarkError, WorkloadError
from autotune.launch.replay import ReplayTable, TableError

ROOT = Path(__file__).resolve().parents[1]
CORPUS = sorted((ROOT / "benchmarks/corpus").glob("[!_]*.py"))
LEVEL = "xla_backend_optimization_level"


def _doc(**meta: object) -> dict:
    runs = [{"status": "ok", "message": "", "step_times_s": [0.02] * 4,
             "baseline_step_times_s": [0.01] * 4}]
    return {"schema_version": 1, "kind": "autotune-replay-table", "benchmark": "matmul",
            "preset": "tiny", "devices": 1, "space": "benchmarks/tables/cpu-table.yaml",
            "configurations": 1, "distinct": 1, "repeats": 1, **meta,
            "entries": [{"flags": {LEVEL: 0}, "runs": runs, "program": "p"}]}


def test_a_compressed_table_reads_as_the_same_table(tmp_path):
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    plain.write_text(json.dumps(_doc()))
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a, b = ReplayTable.load(plain), ReplayTable.load(packed)
    assert a.meta == b.meta and a.runs == b.runs and a.programs == b.programs
    assert b.true_ratio(config_key({LEVEL: 0})) == pytest.approx(2.0)
    broken = tmp_path / "cut.json.gz"
    broken.write_bytes(packed.read_bytes()[:20])
    with pytest.raises(TableError, match="cannot read the replay table"):
        ReplayTable.load(broken)


def test_a_table_names_its_workload_by_script_or_by_benchmark(tmp_path):
    table = tmp_path / "t.json"
    table.write_text(json.dumps(_doc(script="benchmarks/corpus/attention.py")))
    assert ReplayTable.load(table).workload(ROOT).path == ROOT / "benchmarks/corpus/attention.py"
    table.write_text(json.dumps(_doc()))
    assert ReplayTable.load(table).workload(ROOT).name == "matmul"
    table.write_text(json.dumps(_doc(script="benchmarks/corpus/gone.py")))
    with pytest.raises(WorkloadError, match="does not exist"):
        ReplayTable.load(table).workload(ROOT)
    table.write_text(json.dumps(_doc(benchmark="no-such-benchmark")))
    with pytest.raises(UnknownBenchmarkError):
        ReplayTable.load(table).workload(ROOT)


def test_every_committed_table_loads_and_names_a_workload_that_exists():
    tables = [p for p in sorted((ROOT / "benchmarks/tables").glob("*.json*")) if p.is_file()]
    assert len(tables) >= 3
    for path in tables:
        table = ReplayTable.load(path)
        assert table.workload(ROOT).path.is_file(), path.name
        assert table.meta["made_by"].startswith("python benchmarks/scripts/record_table.py")
        assert len(table.runs) == table.meta["distinct"], path.name


def test_the_corpus_files_follow_the_workload_contract():
    assert {p.stem for p in CORPUS} >= {"attention", "gated-mlp", "norm-residual", "conv",
                                        "embedding", "scan-rnn"}
    for path in CORPUS:
        text = path.read_text()
        assert "def workload(preset" in text and "PRESETS = " in text, path.name
        assert "import optuna" not in text and "sqlalchemy" not in text, path.name


@pytest.mark.slow
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_each_corpus_workload_measures_in_a_real_child(path):
    done = subprocess.run([sys.executable, "-m", "autotune.bench", str(path), "--preset", "tiny"],
                          env=cpu_child_env(1), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["status"] == "ok", result["message"]
    assert len(result["step_times_s"]) == 20


@pytest.mark.slow
def test_record_table_records_a_corpus_workload_compressed(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text("schema_version: 1\nname: two\nbackend: cpu\nparams:\n"
                     f"  {LEVEL}: {{type: categorical, choices: [0, 3]}}\n")
    out = tmp_path / "gated-mlp-tiny.json.gz"
    done = subprocess.run(
        [sys.executable, "benchmarks/scripts/record_table.py", "--script",
         "benchmarks/corpus/gated-mlp.py", "--preset", "tiny", "--devices", "1",
         "--repeats", "2", "--steps", "3", "--space", str(space), "-o", str(out)],
        cwd=ROOT, env=cpu_child_env(1), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    table = ReplayTable.load(out)
    assert table.meta["script"] == "benchmarks/corpus/gated-mlp.py"
    assert table.meta["benchmark"] == "gated-mlp" and table.meta["repeats"] == 2
    assert table.meta["made_on"]["vector_isa"] in {"avx512f", "avx2", "avx", "sse4_2", "unknown"}
    assert "--script benchmarks/corpus/gated-mlp.py" in table.meta["made_by"]
    assert len(table.runs) == 2  # level 0, and level 3 (XLA's default: no flags)
    assert all(len(runs) == 2 and runs[0]["status"] == "ok" for runs in table.runs.values())
    assert table.distinct_programs() == 2
    assert table.workload(ROOT).path == ROOT / "benchmarks/corpus/gated-mlp.py"
    pinned = subprocess.run(  # both programs (the defaults' and the best) two more processes
        [sys.executable, "benchmarks/scripts/record_table.py", "--pin", str(out), "--top", "1",
         "--repeats", "2"], cwd=ROOT, env=cpu_child_env(1), capture_output=True, text=True,
        timeout=600)
    assert pinned.returncode == 0, pinned.stderr[-3000:]
    again = ReplayTable.load(out)
    assert all(len(runs) == 4 and runs[3]["status"] == "ok" for runs in again.runs.values())
    [record] = again.meta["pinned"]
    assert record["repeats"] == 2 and sorted(record["configurations"]) == sorted(again.runs)
    assert record["by"].startswith("python benchmarks/scripts/record_table.py --pin")
    longer = subprocess.run(  # the best program (never the defaults') in a 6-step process
        [sys.executable, "benchmarks/scripts/record_table.py", "--long-for", str(out),
         "--top", "1", "--repeats", "1", "--long", "6"], cwd=ROOT, env=cpu_child_env(1),
        capture_output=True, text=True, timeout=600)
    assert longer.returncode == 0, longer.stderr[-3000:]
    third = ReplayTable.load(out)
    [(key, runs)] = third.long_runs.items()
    assert key == config_key({LEVEL: 0}) and third.runs == again.runs
    assert [(r["status"], len(r["step_times_s"]), len(r["baseline_step_times_s"]))
            for r in runs] == [("ok", 6, 6)]
    [made] = third.meta["long"]
    assert made["steps"] == 6 and made["repeats"] == 1 and made["configurations"] == [key]


def _table_of(tmp_path: Path, ratios: dict[str, tuple[str, float]]) -> Path:
    """A table file of configurations {key: (program, ratio)}, three repeats each."""
    def runs(ratio: float) -> list[dict]:
        return [{"status": "ok", "message": "", "step_times_s": [ratio] * 3,
                 "baseline_step_times_s": [1.0] * 3}] * 3
    entries = [{"flags": {LEVEL: int(key)} if key else {}, "runs": runs(r), "program": p}
               for key, (p, r) in ratios.items()]
    doc = {**_doc(), "entries": entries, "distinct": len(entries)}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    return path


def test_pinning_picks_the_defaults_and_the_best_programs_one_configuration_each(tmp_path):
    from bench_scripts import script

    record = script("record_table")
    table = _table_of(tmp_path, {"": ("d", 1.0), "0": ("a", 0.97), "1": ("a", 0.97),
                                 "2": ("b", 0.99), "3": ("d", 1.0)})
    assert record.pinned_configs(table, 1) == [{}, {LEVEL: 0}]
    assert record.pinned_configs(table, 5) == [{}, {LEVEL: 0}, {LEVEL: 2}]
