"""The trial protocol: jobs and results checked field by field, and the child's phases."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.ground.protocol import (
    JOB_ENV,
    RESULT_ENV,
    SCHEMA_VERSION,
    Job,
    Phase,
    ProtocolError,
    Result,
    case_result_path,
    parse_result,
    rank_result_path,
)

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "tests" / "workloads" / "toy.py"

# --- the job ---------------------------------------------------------------------------------


def test_the_job_carries_the_texts_and_refuses_anything_else():
    cmd = "--xla_gpu_enable_command_buffer="
    assert Job(program_flags=cmd).program_flags == cmd
    assert Job.from_json(Job(program_flags=cmd).to_json()).program_flags == cmd
    with pytest.raises(ProtocolError, match="^job field 'program_flags': expected a text "
                       "of flags, got None$"):
        Job(program_flags=None)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match="reference_program_flags"):
        Job(reference_program_flags=["--x=1"])  # type: ignore[arg-type]


def test_a_job_survives_its_json_round_trip():
    job = Job(steps=7, warmup=1, max_warmup=4, settle_window=3, settle_tolerance=0.1,
              prune_ratio=1.3, prune_after=5, compiler_options={"xla_cpu_enable_fast_math": True},
              phases=(Phase.COMPILE, Phase.MEASURE), known_programs={"abc": 3},
              artifact_dir="/tmp/x", memory_budget_bytes=2**30)
    text = job.to_json()
    assert json.loads(text)["schema_version"] == SCHEMA_VERSION == 1
    assert Job.from_json(text) == job and Job.from_json(text).paired
    assert Job.from_json(None) == Job() and not Job().paired
    assert Job.from_json(Job().to_json()) == Job()  # DIRECT mode: no compiler options
    assert Job().phases == (Phase.COMPILE, Phase.MEASURE) and Job().prune_after == 6


@pytest.mark.parametrize(("body", "words"), [
    ({"steps": 3}, "job field 'schema_version': expected 1, got None"),
    ({"schema_version": 2}, "job field 'schema_version': expected 1, got 2"),
    ({"schema_version": 1, "stepz": 3}, "job: unknown field 'stepz'"),
    ({"schema_version": 1, "steps": 0}, "job field 'steps': expected an integer >= 1, got 0"),
    ({"schema_version": 1, "steps": "20"}, "job field 'steps': expected an integer >= 1, got '20'"),
    ({"schema_version": 1, "warmup": True}, "job field 'warmup': expected an integer >= 0"),
    ({"schema_version": 1, "prune_ratio": -1}, "job field 'prune_ratio': expected a positive"),
    ({"schema_version": 1, "settle_tolerance": "x"}, "job field 'settle_tolerance'"),
    ({"schema_version": 1, "compiler_options": {"a": [1]}}, "job field 'compiler_options'"),
    ({"schema_version": 1, "phases": ["measure"]}, "job field 'phases': expected 'compile' first"),
    ({"schema_version": 1, "phases": ["compile", "measure", "profile"]}, "in that order"),
    ({"schema_version": 1, "phases": ["compile", "bake"]}, "job field 'phases': 'bake'"),
    ({"schema_version": 1, "known_programs": {"abc": "3"}}, "job field 'known_programs'"),
    ({"schema_version": 1, "artifact_dir": 3}, "job field 'artifact_dir'"),
    ({"schema_version": 1, "memory_budget_bytes": 0}, "job field 'memory_budget_bytes': "
     "expected a positive integer or null, got 0"),
    ({"schema_version": 1, "memory_budget_bytes": 1.5}, "job field 'memory_budget_bytes'"),
    ({"schema_version": 1, "prune_curve": "1.2"}, "job field 'prune_curve': expected a list of "
     "positive numbers or nulls, or null, got '1.2'"),
    ({"schema_version": 1, "prune_curve": {"6": 1.2}}, "job field 'prune_curve': expected a list"),
    ({"schema_version": 1, "prune_curve": [1.2, -1]}, "job field 'prune_curve[1]': expected a "
     "positive number or null, got -1"),
    ({"schema_version": 1, "prune_curve": [None, 0]}, "job field 'prune_curve[1]'"),
    ({"schema_version": 1, "prune_curve": [True]}, "job field 'prune_curve[0]'"),
    ({"schema_version": 1, "prune_curve": ["1.2"]}, "job field 'prune_curve[0]'"),
    ({"schema_version": 1, "prune_curve": [[1.2]]}, "job field 'prune_curve[0]'"),
])
def test_a_bad_job_names_its_field(body, words):
    with pytest.raises(ProtocolError) as info:
        Job.from_json(json.dumps(body))
    assert words in str(info.value)


def test_a_jobs_prune_curve_survives_its_round_trip_and_may_be_absent():
    job = Job(prune_ratio=1.3, prune_curve=(None, None, 1.25, 0.5), compiler_options={})
    body = json.loads(job.to_json())
    assert body["prune_curve"] == [None, None, 1.25, 0.5]
    assert Job.from_json(job.to_json()) == job
    assert Job.from_json(job.to_json()).prune_curve == (None, None, 1.25, 0.5)
    assert Job(prune_curve=[1.5, None]).prune_curve == (1.5, None)  # a list is kept as a tuple
    assert Job.from_json(json.dumps({"schema_version": 1, "steps": 3})).prune_curve is None
    assert Job.from_json(json.dumps({"schema_version": 1, "prune_curve": None})) == Job()
    assert Job.from_json(json.dumps({"schema_version": 1, "prune_curve": []})).prune_curve == ()
    with pytest.raises(ProtocolError, match=r"^job field 'prune_curve\[0\]': expected a positive "
                                            r"number or null, got nan$"):
        Job.from_json('{"schema_version": 1, "prune_curve": [NaN]}')


def test_the_smallest_values_of_each_bound_are_accepted():
    job = Job(steps=1, warmup=0, max_warmup=0, settle_window=1, prune_after=1, prune_ratio=0.5,
              memory_budget_bytes=1)
    assert Job.from_json(job.to_json()) == job
    with pytest.raises(ProtocolError, match="^job field 'prune_ratio': expected a positive "
                                            "number or null, got 0$"):
        Job(prune_ratio=0)


@pytest.mark.parametrize(("job", "message"), [
    (dict(compiler_options={"a": [1]}), "job field 'compiler_options': expected an object of "
     "names to booleans, numbers or strings, got {'a': [1]}"),
    (dict(phases=(Phase.COMPILE, Phase.MEASURE, Phase.PROFILE)), "job field 'phases': expected "
     "'compile' first, then 'profile' and/or 'measure' in that order, got ['compile', "
     "'measure', 'profile']"),
    (dict(known_programs={"abc": "3"}), "job field 'known_programs': expected an object of "
     "fingerprints to trial numbers, got {'abc': '3'}"),
    # PGLE's fields (`_check_pgle`): each bound, type and combination, word for word
    (dict(pgle_runs=0), "job field 'pgle_runs': expected an integer >= 1, got 0"),
    (dict(pgle_runs=True), "job field 'pgle_runs': expected an integer >= 1, got True"),
    (dict(pgle_runs=1.0), "job field 'pgle_runs': expected an integer >= 1, got 1.0"),
    (dict(pgle_percentile=0), "job field 'pgle_percentile': expected a number in (0, 100], "
     "got 0"),
    (dict(pgle_percentile=100.5), "job field 'pgle_percentile': expected a number in "
     "(0, 100], got 100.5"),
    (dict(pgle_percentile="50"), "job field 'pgle_percentile': expected a number in "
     "(0, 100], got '50'"),
    (dict(pgle_profile=3), "job field 'pgle_profile': expected text, got 3"),
    (dict(pgle_model=["m"]), "job field 'pgle_model': expected text, got ['m']"),
    (dict(phases=(Phase.COMPILE, Phase.PROFILE)), "job field 'phases': 'profile' needs a "
     "PGLE job (pgle_mode)"),
    (dict(pgle_mode="sometimes", compiler_options={}), "job field 'pgle_mode': expected one "
     "of ['manual', 'auto'] or null, got 'sometimes'"),
    (dict(pgle_mode="auto"), "job field 'pgle_mode': a PGLE job is PAIRED (compiler_options) "
     "and its reference is the configuration itself (no reference_options)"),
    (dict(pgle_mode="auto", compiler_options={}, reference_options={}), "job field "
     "'pgle_mode': a PGLE job is PAIRED (compiler_options) and its reference is the "
     "configuration itself (no reference_options)"),
    (dict(pgle_mode="manual", compiler_options={}), "job field 'pgle_profile': manual PGLE "
     "needs the profile's path"),
    (dict(pgle_mode="manual", compiler_options={}, pgle_profile=""), "job field "
     "'pgle_profile': manual PGLE needs the profile's path"),
])
def test_a_bad_job_says_what_was_expected_and_what_came(job, message):
    with pytest.raises(ProtocolError) as info:
        Job(**job)
    assert str(info.value) == message


def test_the_edges_of_pgles_bounds_are_accepted():
    for job in (Job(pgle_runs=1, pgle_percentile=100), Job(pgle_percentile=0.001),
                Job(pgle_mode="auto", compiler_options={}, pgle_profile="p", pgle_model="m",
                    phases=(Phase.COMPILE, Phase.PROFILE, Phase.MEASURE)),
                Job(pgle_mode="manual", compiler_options={}, pgle_profile="p.pb")):
        assert Job.from_json(job.to_json()) == job


def test_each_process_of_a_trial_writes_a_result_file_of_its_own():
    assert rank_result_path("/t/result.json", 0) == "/t/result.json"  # one process: process 0
    assert rank_result_path("/t/result.json", 1) == "/t/result.json.1"
    assert rank_result_path("/t/result.json", 12) == "/t/result.json.12"
    with pytest.raises(ValueError, match="^a process rank is 0 or more, got -1$"):
        rank_result_path("/t/result.json", -1)


COMPILE_ONLY = dict(phases=(Phase.COMPILE,), compiler_options={})
CASE = {"compiler_options": {"xla_cpu_enable_fast_math": True}, "program_flags": ""}


def test_a_compile_only_job_carries_more_configurations_through_its_json():
    job = Job(**COMPILE_ONLY, also_compile=(CASE, {"compiler_options": {}, "program_flags": "x"}))
    again = Job.from_json(job.to_json())
    assert again == job and again.also_compile == job.also_compile
    assert isinstance(again.also_compile, tuple) and Job().also_compile == ()
    assert json.loads(Job().to_json())["also_compile"] == []
    # each case's result lies beside the job's own, never where a process's would
    assert case_result_path("/t/result.json", 1) == "/t/result.json.case-1"
    assert case_result_path("/t/result.json", 12) == "/t/result.json.case-12"


@pytest.mark.parametrize(("job", "message"), [
    (dict(also_compile=(CASE,)), "job field 'also_compile': only a compile-only PAIRED job "
     "(phases ['compile'], compiler_options, no PGLE) compiles more configurations"),
    (dict(COMPILE_ONLY, phases=(Phase.COMPILE, Phase.MEASURE), also_compile=(CASE,)),
     "job field 'also_compile': only a compile-only PAIRED job (phases ['compile'], "
     "compiler_options, no PGLE) compiles more configurations"),
    (dict(phases=(Phase.COMPILE,), also_compile=(CASE,)), "job field 'also_compile': only a "
     "compile-only PAIRED job (phases ['compile'], compiler_options, no PGLE) compiles more "
     "configurations"),
    (dict(COMPILE_ONLY, pgle_mode="auto", also_compile=(CASE,)), "job field 'also_compile': "
     "only a compile-only PAIRED job (phases ['compile'], compiler_options, no PGLE) compiles "
     "more configurations"),
    (dict(COMPILE_ONLY, also_compile=({"compiler_options": {}},)), "job field "
     "'also_compile[0]': expected an object of 'compiler_options' and 'program_flags', got "
     "{'compiler_options': {}}"),
    (dict(COMPILE_ONLY, also_compile=(CASE, {**CASE, "steps": 3})), "job field "
     "'also_compile[1]': expected an object of 'compiler_options' and 'program_flags', got "
     "{'compiler_options': {'xla_cpu_enable_fast_math': True}, 'program_flags': '', "
     "'steps': 3}"),
    (dict(COMPILE_ONLY, also_compile=({**CASE, "compiler_options": {"a": [1]}},)),
     "job field 'also_compile[0]': expected an object of 'compiler_options' and "
     "'program_flags', got {'compiler_options': {'a': [1]}, 'program_flags': ''}"),
    (dict(COMPILE_ONLY, also_compile=({**CASE, "program_flags": None},)), "job field "
     "'also_compile[0]': expected an object of 'compiler_options' and 'program_flags', got "
     "{'compiler_options': {'xla_cpu_enable_fast_math': True}, 'program_flags': None}"),
    (dict(COMPILE_ONLY, also_compile=("x",)), "job field 'also_compile[0]': expected an "
     "object of 'compiler_options' and 'program_flags', got 'x'"),
    (dict(COMPILE_ONLY, also_compile={"a": 1}), "job field 'also_compile': expected a list, "
     "got {'a': 1}"),
])
def test_only_a_compile_only_paired_job_compiles_more_and_each_item_is_checked(job, message):
    with pytest.raises(ProtocolError) as info:
        Job(**job)
    assert str(info.value) == message


def test_phases_must_be_a_list():
    with pytest.raises(ProtocolError) as info:
        Job.from_json(json.dumps({"schema_version": 1, "phases": "compile"}))
    assert str(info.value) == "job field 'phases': expected a list, got 'compile'"


def test_a_job_that_is_not_json_says_so():
    with pytest.raises(ProtocolError, match="^job: not JSON"):
        Job.from_json("{steps: 3")
    with pytest.raises(ProtocolError, match="^job: expected a JSON object$"):
        Job.from_json("[1, 2]")


# --- the result ------------------------------------------------------------------------------


def result(**fields: object) -> str:
    return json.dumps({"schema_version": 1, "status": "ok", "message": "", **fields})


def test_a_good_result_comes_back_as_written():
    body = parse_result(result(step_times_s=[0.01, 0.02], compile_time_s=1.5, checksum=-3.0,
                               peak_memory_bytes=1024, fingerprint="ab", same_program_as=2))
    assert body.step_times_s == (0.01, 0.02) and body.checksum == -3.0
    # zero is a valid size, time or trial number (trial 0 is the baseline)
    zeros = parse_result(result(compile_time_s=0.0, abs_sum=0.5, peak_memory_bytes=0,
                                same_program_as=0, warmup_steps=1))
    assert zeros.same_program_as == 0 and zeros.compile_time_s == 0.0


@pytest.mark.parametrize(("text", "words"), [
    (result(step_times_s=[0.01, float("nan")]),
     "result field 'step_times_s[1]': expected a positive finite number of seconds, got nan"),
    (result(step_times_s=[0.0]), "'step_times_s[0]': expected a positive finite number"),
    (result(baseline_step_times_s=[0.01, -0.01]), "'baseline_step_times_s[1]'"),
    (result(step_times_s=["0.01"]), "'step_times_s[0]': expected a positive finite number of "
                                    "seconds, got '0.01'"),
    (result(step_times_s=0.01), "result field 'step_times_s': expected a list, got 0.01"),
    (result(compile_time_s="fast"), "result field 'compile_time_s': expected a finite number"),
    (result(compile_time_s=-1.0), "result field 'compile_time_s'"),
    (result(peak_memory_bytes=1.5), "result field 'peak_memory_bytes': expected a whole number"),
    (result(fingerprint=3), "result field 'fingerprint': expected text, got 3"),
    (json.dumps({"schema_version": 1, "message": ""}),
     "result field 'status': missing or not text (got None)"),
    (json.dumps({"schema_version": 1, "status": 5, "message": ""}),
     "result field 'status': missing or not text (got 5)"),
    (json.dumps({"schema_version": 1, "status": "ok"}), "result field 'message': missing"),
    (json.dumps({"schema_version": 2, "status": "ok", "message": ""}),
     "result field 'schema_version': expected 1, got 2"),
    (result(step_times_s=[0.01, 0.02])[:30], "result: not JSON, or cut short"),
    ("[]", "result: expected a JSON object"),
])
def test_a_bad_result_names_its_field(text, words):
    with pytest.raises(ProtocolError) as info:
        parse_result(text)
    assert words in str(info.value)


def test_a_result_survives_its_json_round_trip_and_leaves_out_its_defaults():
    filled = Result(status="pruned", message="slower", mode="paired", step_times_s=(0.5, 0.25),
                    checksum=-1.5, peak_memory_bytes=0, warmup_settled=False,
                    hlo_stats={"fusion": 3}, numerics={"ok": True, "max_rel_error": 0.0},
                    collectives={"all-reduce": {"count": 2}}, pgle={"mode": "auto"})
    text = filled.to_json()
    assert parse_result(text) == filled
    body = json.loads(text)
    assert body["schema_version"] == SCHEMA_VERSION and body["peak_memory_bytes"] == 0
    assert "baseline_step_times_s" not in body and "fingerprint" not in body  # defaults
    bare = parse_result(Result(status="ok", message="").to_json())
    assert bare == Result("ok", "") and not bare.timed and bare.step_times_s == ()
    assert parse_result(result(step_times_s=[1, 2])).step_times_s == (1.0, 2.0)
    assert isinstance(parse_result(result(step_times_s=[1])).step_times_s[0], float)


def test_the_child_fills_only_the_contracts_fields_and_the_parent_ignores_others():
    with pytest.raises(TypeError):
        Result(status="ok", message="", step_time_s=(0.1,))  # type: ignore[call-arg]
    assert parse_result(result(later_field=[1, 2], fingerprint="ab")) == Result(
        "ok", "", fingerprint="ab")


@pytest.mark.parametrize(("fields", "words"), [
    ({"warmup_settled": "yes"}, "result field 'warmup_settled': expected true or false"),
    ({"hlo_stats": [1]}, "result field 'hlo_stats': expected an object, got [1]"),
    ({"hlo_stats": {"fusion": -1}}, "result field 'hlo_stats.fusion': expected a whole number"),
    ({"numerics": 0.5}, "result field 'numerics': expected an object, got 0.5"),
    ({"checksum": float("inf")}, "result field 'checksum': expected a finite number"),
    ({"abs_sum": -0.5}, "result field 'abs_sum': expected a finite number, got -0.5"),
    ({"pgle": {"costs": True}}, "result field 'pgle.costs': wrong type, got True"),
    ({"pgle": []}, "result field 'pgle': expected an object, got []"),
    ({"same_program_as": -1}, "result field 'same_program_as': expected a whole number"),
    ({"process_index": True}, "result field 'process_index': expected a whole number"),
    ({"collectives": []}, "result field 'collectives': expected an object, got []"),
    ({"collectives": {"all-reduce": 3}}, "result field 'collectives.all-reduce': expected an "
     "object, got 3"),
    ({"collectives": {"all-reduce": {"count": -1}}}, "result field "
     "'collectives.all-reduce.count': expected a whole number, got -1"),
    ({"collectives": {"all-gather": {"count": 1, "bytes": True}}}, "result field "
     "'collectives.all-gather.bytes': expected a whole number, got True"),
])
def test_every_kind_of_result_field_is_checked(fields, words):
    with pytest.raises(ProtocolError) as info:
        parse_result(result(**fields))
    assert words in str(info.value)


def test_collectives_of_zero_and_none_at_all_are_read_back():
    assert parse_result(result(collectives={})).collectives == {}
    assert parse_result(result(collectives={"all-reduce": {"count": 0}})).collectives == {
        "all-reduce": {"count": 0}}


def test_the_child_writes_its_result_indented_as_asked():
    assert Result(status="ok", message="", warmup_steps=3).to_json(indent=1) == (
        '{\n "schema_version": 1,\n "status": "ok",\n "message": "",\n "warmup_steps": 3\n}')
    assert Result(status="ok", message="").to_json() == (
        '{"schema_version": 1, "status": "ok", "message": ""}')


def test_a_pgle_result_of_every_known_key_is_read_back():
    pgle = {"mode": "manual", "profile": "/p/profile.pb", "collected": True, "costs": 12,
            "source": "file", "names_in_program": 0, "profile_fingerprint": None, "note": ""}
    assert parse_result(result(pgle=pgle)).pgle == pgle


def test_the_protocol_imported_afresh_has_the_same_defaults_and_checks():
    """A child imports the module afresh; `Result`'s fields and checks are made then (which
    is also the only time mutation testing can see `_part` and `_typed` at work)."""
    spec = importlib.util.find_spec("autotune.ground.protocol")
    assert spec is not None and spec.loader is not None
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    bare = fresh.Result("ok", "")
    assert bare.step_times_s == () and bare.fingerprint is None
    assert fresh.parse_result(result(fingerprint="ab", warmup_settled=False)) == fresh.Result(
        "ok", "", fingerprint="ab", warmup_settled=False)
    with pytest.raises(fresh.ProtocolError, match="^result field 'fingerprint': expected text, "
                                                  "got 3$"):
        fresh.parse_result(result(fingerprint=3))


# --- the child's phases ----------------------------------------------------------------------


def run_child(job: Job, tmp_path: Path) -> Result:
    env = {k: v for k, v in os.environ.items() if k != RESULT_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env[JOB_ENV] = job.to_json()
    done = subprocess.run([sys.executable, "-m", "autotune.child", str(TOY), "--preset", "tiny"],
                          env=env, capture_output=True, text=True, timeout=300, check=True,
                          cwd=tmp_path)
    return parse_result(done.stdout)


@pytest.mark.slow
def test_compile_only_fingerprints_and_a_known_program_is_not_timed(tmp_path):
    compiled = run_child(Job(phases=(Phase.COMPILE,), compiler_options={},
                             artifact_dir=str(tmp_path / "a")), tmp_path)
    assert compiled.status == "ok" and compiled.compile_time_s > 0
    assert compiled.fingerprint and compiled.step_times_s == ()
    assert compiled.hlo_stats and compiled.peak_memory_bytes > 0

    known = run_child(Job(compiler_options={}, artifact_dir=str(tmp_path / "b"),
                          known_programs={compiled.fingerprint: 4}), tmp_path)
    assert known.status == "ok" and known.same_program_as == 4
    assert known.message == "the same program as trial 4, which measured it"
    assert known.step_times_s == () and known.fingerprint == compiled.fingerprint

    timed = run_child(Job(steps=3, warmup=1, max_warmup=1, compiler_options={},
                          artifact_dir=str(tmp_path / "c"), known_programs={"other": 1},
                          memory_budget_bytes=compiled.peak_memory_bytes),
                      tmp_path)
    assert len(timed.step_times_s) == 3 == len(timed.baseline_step_times_s)
    assert timed.same_program_as is None and timed.status == "ok"  # at the budget: timed

    over = run_child(Job(compiler_options={}, artifact_dir=str(tmp_path / "d"),
                         memory_budget_bytes=compiled.peak_memory_bytes - 1), tmp_path)
    assert over.status == "over_budget" and over.step_times_s == ()
    assert over.message == (f"the compiled program needs {compiled.peak_memory_bytes} "
                            f"bytes, above the memory budget of "
                            f"{compiled.peak_memory_bytes - 1} bytes: not timed")
    assert over.peak_memory_bytes == compiled.peak_memory_bytes


@pytest.mark.slow
def test_one_child_compiles_more_configurations_each_into_its_own_result(tmp_path):
    """`also_compile`: each configuration's result beside the job's, with the fingerprint
    a child of its own gives it; one XLA refuses is that case's failure alone."""
    alone = run_child(Job(**COMPILE_ONLY, artifact_dir=str(tmp_path / "alone")), tmp_path)
    fast = run_child(Job(phases=(Phase.COMPILE,), artifact_dir=str(tmp_path / "fast"),
                         compiler_options=CASE["compiler_options"]), tmp_path)
    assert alone.fingerprint != fast.fingerprint
    path = tmp_path / "result.json"
    env = {k: v for k, v in os.environ.items() if k != RESULT_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env[RESULT_ENV] = str(path)
    env[JOB_ENV] = Job(**COMPILE_ONLY, artifact_dir=str(tmp_path / "batch"), also_compile=(
        CASE, {"compiler_options": {"xla_backend_optimization_level": "high"},
               "program_flags": ""}, {"compiler_options": {}, "program_flags": ""},
    )).to_json()
    subprocess.run([sys.executable, "-m", "autotune.child", str(TOY), "--preset", "tiny"],
                   env=env, capture_output=True, text=True, timeout=300, check=True,
                   cwd=tmp_path)
    first, *cases = (parse_result(Path(p).read_text()) for p in (
        path, *(case_result_path(str(path), i) for i in (1, 2, 3))))
    assert [r.fingerprint for r in (first, cases[0], cases[2])] == [
        alone.fingerprint, fast.fingerprint, alone.fingerprint]
    assert cases[1].status == "invalid_value" and cases[1].fingerprint is None
    assert all(r.step_times_s == () and r.compile_time_s > 0 for r in (first, cases[0]))
    assert cases[0].device_kind == first.device_kind and cases[0].jax_version
    # each case dumps into a folder of its own (the fingerprint reads it)
    assert (tmp_path / "batch" / "case-1" / "dump" / "candidate").is_dir()


@pytest.mark.slow
def test_an_invalid_job_is_reported_in_the_result_file(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != RESULT_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env[JOB_ENV] = json.dumps({"schema_version": 1, "steps": 0})
    done = subprocess.run([sys.executable, "-m", "autotune.child", str(TOY), "--preset", "tiny"],
                          env=env, capture_output=True, text=True, timeout=300, check=True)
    body = parse_result(done.stdout)
    assert body.status == "crashed"
    assert body.message == ("the trial's job is invalid: job field 'steps': expected an "
                            "integer >= 1, got 0")


def test_a_reference_needs_a_paired_job():
    with pytest.raises(ProtocolError) as raised:
        Job(compiler_options=None, reference_options={"xla_cpu_enable_fast_math": True})
    assert str(raised.value) == ("job field 'reference_options': only a PAIRED job (with "
                                 "compiler_options) compiles a reference")
