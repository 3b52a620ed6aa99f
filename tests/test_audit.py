"""`autotune audit`: a flag set linted against the installed XLA, measured against XLA's
defaults with the study's confirmation, and ablated flag by flag (`autotune.api.audit`).

Real jaxlib (the probe's children), real trial processes on the CPU, a real SQLite file.
"""

from __future__ import annotations

import json
import re
import sqlite3

import pytest
from cli_runner import invoke

import autotune
from autotune.api.audit import Verdict, _typed
from autotune.flags.catalog import Channel, load_catalog
from autotune.flags.lint import FlagUse

OPT0 = "--xla_backend_optimization_level=0"  # on the CPU: several times slower (README)
LHS = "--xla_gpu_enable_latency_hiding_scheduler=true"  # a GPU flag: the CPU program is the same
OBSOLETE = "--xla_gpu_graph_level=0"
UNKNOWN = "--xla_bogus_zz=1"
FAST_MATH = "--xla_cpu_enable_fast_math=true"
QUICK = ["--benchmark", "norm-act", "--preset", "tiny", "--devices", "1", "--steps", "10",
         "--confirm-repeats", "2"]


def test_flags_xla_would_abort_on_are_reported_and_nothing_is_measured(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    done = invoke("audit", "--flags", f"{UNKNOWN} {OBSOLETE} --xla_cpu_enable_fast_math=maybe",
                  "--storage", url, "--format", "json", cwd=tmp_path)

    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert [(f["flag"], f["verdict"]) for f in report["flags"]] == [
        ("xla_bogus_zz", "unknown to this XLA"), ("xla_gpu_graph_level", "obsolete"),
        ("xla_cpu_enable_fast_math", "refused")]
    assert "a job with it aborts at start" in report["flags"][0]["evidence"]
    assert report["study"] is None and report["whole_set"] is None
    assert not (tmp_path / "a.db").exists()  # nothing to measure, nothing stored


def test_an_audit_without_flags_is_a_usage_error(tmp_path, monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.delenv("LIBTPU_INIT_ARGS", raising=False)
    for args in (["audit"], ["audit", "--from-env"]):
        done = invoke(*args, cwd=tmp_path)
        assert done.exit_code == 2 and "flags" in done.stderr


@pytest.mark.parametrize(("text", "typed"), [
    (None, True), ("true", True), ("FALSE", False), ("12", 12), ("0.5", 0.5), ("a,b", "a,b")])
def test_a_value_outside_the_catalog_is_typed_as_it_reads(text, typed):
    value = _typed(FlagUse("xla_llvm_disable_expensive_passes", text, Channel.XLA_FLAGS),
                   load_catalog())
    assert value == typed and type(value) is type(typed)


@pytest.mark.slow
def test_a_real_audit_says_of_each_flag_what_it_does_and_resumes(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    flags = f"{OPT0} {FAST_MATH} {LHS} {OBSOLETE} {UNKNOWN}"
    first = invoke("audit", "--flags", flags, *QUICK, "--storage", url, "-o",
                   str(tmp_path / "min.yaml"), "--format", "json", cwd=tmp_path)
    assert first.exit_code == 0, first.output
    report = json.loads(first.stdout)
    verdicts = {f["flag"]: f["verdict"] for f in report["flags"]}

    assert list(verdicts) == ["xla_backend_optimization_level", "xla_cpu_enable_fast_math",
                              "xla_gpu_enable_latency_hiding_scheduler", "xla_gpu_graph_level",
                              "xla_bogus_zz"]  # the order given
    assert verdicts["xla_backend_optimization_level"] == Verdict.HURTS  # ~5x slower with it
    opt = report["flags"][0]
    assert opt["ratio_without"] < 1 and opt["interval_without"][1] < 1
    assert verdicts["xla_gpu_enable_latency_hiding_scheduler"] == Verdict.NO_PROGRAM_CHANGE
    # fast math alone: a real measurement either way, never "not measured"
    assert verdicts["xla_cpu_enable_fast_math"] in (Verdict.HELPS, Verdict.NO_MEASURABLE_EFFECT)
    assert (verdicts["xla_gpu_graph_level"], verdicts["xla_bogus_zz"]) == (
        Verdict.OBSOLETE, Verdict.UNKNOWN)
    assert report["whole_set"]["verdict"] == "slower in 2 processes"  # --confirm-repeats 2
    exported = autotune.load_config(tmp_path / "min.yaml")
    assert dict(exported.flags) == report["minimal_set"]
    assert "xla_backend_optimization_level" not in exported.flags  # never what hurts

    with sqlite3.connect(tmp_path / "a.db") as db:
        before = db.execute("select count(*) from autotune_runs").fetchone()[0]
    again = invoke("audit", "--flags", flags, *QUICK, "--storage", url, cwd=tmp_path)
    with sqlite3.connect(tmp_path / "a.db") as db:
        after = db.execute("select count(*) from autotune_runs").fetchone()[0]
    assert again.exit_code == 0 and after == before  # resumed: nothing measured twice
    assert "xla_gpu_enable_latency_hiding_scheduler=true\n    no effect on the compiled " \
           "program" in again.stdout  # a flag name on a line of its own, never cut
    [line] = [x for x in again.stdout.splitlines() if x.startswith("the whole set against")]
    assert re.fullmatch(r"the whole set against XLA's defaults: slower in 2 processes, "
                        r"×0\.\d{3} \[0\.\d{3}, 0\.\d{3}\]", line), line  # its processes once
