"""PGLE as one command and as a phase of a study (issue: the scheduler's turn).

Everything here runs the real trial child on the CPU: the profile run under
jax.profiler, the conversion of the trace, the performance run, the paired
timing. The CPU compiler ignores the profile, so these tests check what was
done and refused, never a speedup. Only the export of a *kept* profile needs a
backend whose scheduler reads it (a GPU); that test stores the PGLE runs a GPU
would report, and says so in its name.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

from autotune import pgle as rules
from autotune.ground.protocol import Job, Phase, ProtocolError

JAXLIB = importlib.metadata.version("jaxlib")
FAST = ["--preset", "tiny", "--steps", "5", "--timeout-per-trial", "240"]


def _autotune(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "autotune", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


# --- the job ----------------------------------------------------------------------------------


def test_a_pgle_job_is_paired_and_its_fields_are_checked():
    job = Job(compiler_options={}, pgle_mode="manual", pgle_profile="/p/profile.pbtxt",
              phases=(Phase.COMPILE, Phase.PROFILE, Phase.MEASURE))
    assert Job.from_json(job.to_json()) == job
    bad = [
        dict(pgle_mode="manual", pgle_profile="p"),  # DIRECT: no compiler_options
        dict(compiler_options={}, pgle_mode="manual"),  # no profile path
        dict(compiler_options={}, pgle_mode="sometimes", pgle_profile="p"),
        dict(compiler_options={}, reference_options={}, pgle_mode="auto"),
        dict(compiler_options={}, phases=(Phase.COMPILE, Phase.PROFILE)),  # not PGLE
        dict(compiler_options={}, pgle_mode="auto", pgle_runs=0),
        dict(compiler_options={}, pgle_mode="auto", pgle_percentile=0.0),
    ]
    for fields in bad:
        with pytest.raises(ProtocolError, match="pgle|phases"):
            Job(**fields)  # type: ignore[arg-type]


# --- autotune pgle ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """`autotune pgle --benchmark transformer` (tiny, 8 devices), two processes, as JSON."""
    folder = tmp_path_factory.mktemp("pgle")
    done = _autotune("pgle", "--benchmark", "transformer", *FAST, "--repeats", "2",
                     "--out", str(folder / "out"), "--format", "json", cwd=folder)
    assert done.returncode == 0, done.stdout + done.stderr
    return folder, json.loads(done.stdout)


@pytest.mark.slow
def test_pgle_on_cpu_writes_a_profile_of_the_programs_instructions(collected):
    folder, body = collected
    profile = folder / "out" / "profile.pbtxt"
    assert body["profile"] == str(profile.resolve())
    costs, meta = rules.read_profile(str(profile))
    assert costs and all(c.cost_us > 0 for c in costs)
    assert body["profile_costs"] == len(costs) and body["profile_source"] == "trace-events"
    # the child counted the profile's names in the performance run's compiled HLO
    assert body["names_in_program"] == len(costs)
    assert meta.xla_version == JAXLIB and meta.backend == "cpu"
    assert meta.flags == {rules.LHS_FLAG: True}  # the performance run without its profile
    assert meta.model.startswith("transformer/tiny/8 devices/sha256:")
    assert meta.fingerprint and meta.fingerprint == body["profile_fingerprint"]
    assert meta.runs == 3 and meta.source == "trace-events"


@pytest.mark.slow
def test_pgle_on_cpu_reports_the_paired_runs_and_says_no_speedup_is_expected(collected):
    _, body = collected
    assert body["runs"] == 2 and body["failed_runs"] == 0 and body["mode"] == "manual"
    low, high = body["speedup_interval"]
    assert low <= body["speedup"] <= high
    times = body["step_time_s"]
    assert times["with_profile"] > 0 and times["without_profile"] > 0
    assert "CPU compiler does not use" in body["note"]
    # XLA:CPU ignores the scheduler flag and the profile: the very same program
    assert body["same_program"] is True and body["verdict"] == "no measurable gain"
    assert body["keep"] is False and body["failure"] is None


@pytest.mark.slow
def test_a_fresh_profile_is_used_again_without_collecting(collected, tmp_path):
    folder, _ = collected
    profile = folder / "out" / "profile.pbtxt"
    before = profile.read_bytes()
    done = _autotune("pgle", "--benchmark", "transformer", *FAST, "--repeats", "1",
                     "--profile", str(profile), "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    body = json.loads(done.stdout)
    assert body["profile_collected"] is False and body["runs"] == 1
    assert profile.read_bytes() == before


def _stale_copy(folder: Path, tmp_path: Path, **changes: object) -> Path:
    source = folder / "out" / "profile.pbtxt"
    target = tmp_path / "stale.pbtxt"
    target.write_bytes(source.read_bytes())
    meta = json.loads(Path(str(source) + rules.META_SUFFIX).read_text())
    Path(str(target) + rules.META_SUFFIX).write_text(json.dumps({**meta, **changes}))
    return target


@pytest.mark.slow
@pytest.mark.parametrize(("changes", "words"), [
    ({"xla_version": "0.9.0"}, ["0.9.0", JAXLIB]),
    ({"fingerprint": "0123456789abcdef"}, ["0123456789abcdef"]),
    ({"flags": {"xla_cpu_enable_fast_math": True}}, ["xla_cpu_enable_fast_math"]),
])
def test_a_stale_profile_is_refused_with_the_reason(collected, tmp_path, changes, words):
    folder, _ = collected
    stale = _stale_copy(folder, tmp_path, **changes)
    done = _autotune("pgle", "--benchmark", "transformer", *FAST, "--repeats", "2",
                     "--profile", str(stale), cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "stale" in said and "no PGLE run was timed" in said
    for word in words:
        assert word in said
    assert "step time" not in done.stdout  # nothing was timed, nothing is claimed


@pytest.mark.slow
def test_a_profile_of_another_model_is_refused(collected, tmp_path):
    folder, _ = collected
    done = _autotune("pgle", "--benchmark", "transformer", "--preset", "small", "--steps", "5",
                     "--repeats", "1", "--profile", str(folder / "out" / "profile.pbtxt"),
                     "--format", "json", cwd=tmp_path)
    assert done.returncode == 1
    body = json.loads(done.stdout)
    assert body["failure"].startswith("invalid_value: PGLE profile")
    assert "transformer/tiny" in body["failure"] and "transformer/small" in body["failure"]


@pytest.mark.slow
def test_auto_mode_lets_jax_profile_and_is_timed_the_same_way(tmp_path):
    done = _autotune("pgle", "--benchmark", "matmul", *FAST, "--devices", "1", "--repeats", "2",
                     "--mode", "auto", "--profile-runs", "2", "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    body = json.loads(done.stdout)
    assert body["mode"] == "auto" and body["profile"] is None
    assert body["profile_source"] == "jax-auto" and body["runs"] == 2
    assert body["speedup"] is not None and "CPU compiler" in body["note"]
    assert not (tmp_path / "autotune-pgle").exists()


@pytest.mark.parametrize(("args", "words"), [
    (["--mode", "sometimes"], "unknown mode 'sometimes'"),
    (["--mode", "auto", "--profile", "p.pbtxt"], "--profile is for --mode manual"),
    (["--profile", "missing.pbtxt"], "missing.pbtxt"),
    (["--percentile", "0"], "--percentile 0.0 must lie in (0, 100]"),
    (["--benchmark", "nope"], "nope"),
    (["--config", "missing.yaml"], "missing.yaml: no such file"),
])
def test_bad_input_is_one_message_and_exit_2(tmp_path, args, words):
    done = _autotune("pgle", *args, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert words in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_configuration_file_is_profiled_and_its_profile_refused_for_other_flags(tmp_path):
    """`--config best.yaml`: the profile records the file's flags, and the same profile used
    for XLA's defaults (other flags, another program) is refused."""
    import yaml

    from autotune.results.export import EXPORT_SCHEMA_VERSION

    fusion = "xla_cpu_use_fusion_emitters"
    config = tmp_path / "best.yaml"
    config.write_text(yaml.safe_dump({
        "schema_version": EXPORT_SCHEMA_VERSION, "study": "s", "recommended": True,
        "reason": "r", "trial": 1, "flags": {fusion: False},
        "measured_on": {"backend": "cpu"}}))
    done = _autotune("pgle", "--benchmark", "matmul", *FAST, "--devices", "1", "--repeats",
                     "1", "--config", str(config), "--out", "p", "--format", "json",
                     cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    body = json.loads(done.stdout)
    assert body["flags"] == {fusion: False} and body["runs"] == 1
    _, meta = rules.read_profile(str(tmp_path / "p" / "profile.pbtxt"))
    assert meta.flags == {fusion: False, rules.LHS_FLAG: True}
    again = _autotune("pgle", "--benchmark", "matmul", *FAST, "--devices", "1", "--repeats",
                      "1", "--profile", "p/profile.pbtxt", "--format", "json", cwd=tmp_path)
    assert again.returncode == 1
    assert fusion in json.loads(again.stdout)["failure"]


@pytest.mark.slow
def test_a_users_script_is_profiled_like_a_benchmark(tmp_path, workloads_dir):
    done = _autotune("pgle", "--script", str(workloads_dir / "toy.py"), *FAST, "--devices", "1",
                     "--repeats", "1", "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    body = json.loads(done.stdout)
    assert body["workload"] == "toy" and body["profile_costs"] > 0
    assert (tmp_path / "autotune-pgle" / "toy-tiny" / "profile.pbtxt").exists()


def test_flags_that_act_only_through_the_environment_are_refused(tmp_path):
    import yaml

    from autotune.results.export import EXPORT_SCHEMA_VERSION

    config = tmp_path / "best.yaml"
    config.write_text(yaml.safe_dump({
        "schema_version": EXPORT_SCHEMA_VERSION, "study": "s", "recommended": True,
        "reason": "r", "trial": 1, "flags": {"XLA_PYTHON_CLIENT_MEM_FRACTION": 0.9},
        "measured_on": {"backend": "gpu"}}))
    done = _autotune("pgle", "--benchmark", "matmul", "--config", str(config), cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" in said and "environment" in said
    assert "Traceback" not in done.stderr


def test_a_study_says_why_its_pgle_phase_cannot_run():
    from types import SimpleNamespace

    from autotune.ground.records import MeasureMode
    from autotune.study.pgle import pgle_refusal

    def plan(mode: MeasureMode, launcher: str | None) -> object:
        return SimpleNamespace(mode=mode, options=SimpleNamespace(launcher=launcher))

    assert pgle_refusal(plan(MeasureMode.PAIRED, None)) is None  # type: ignore[arg-type]
    assert "--mode paired" in str(pgle_refusal(plan(MeasureMode.DIRECT, None)))  # type: ignore[arg-type]
    assert "--launcher" in str(pgle_refusal(plan(MeasureMode.PAIRED, "mpirun -n 2 {cmd}")))  # type: ignore[arg-type]


def test_the_reference_is_the_performance_run_without_its_profile():
    """A configuration with the scheduler off is compared with the scheduler on: the
    figure is the profile's alone, and the profile records those flags."""
    config = {rules.LHS_FLAG: False, "xla_gpu_enable_triton_gemm": False,
              rules.PROFILE_PATH_FLAG: "/old.pbtxt"}
    reference = rules.reference_options(config)
    assert reference == {rules.LHS_FLAG: True, "xla_gpu_enable_triton_gemm": False}
    assert rules.without_profile(rules.performance_options(config, "/p")) == reference


@pytest.mark.slow
def test_a_users_program_is_profiled_through_bench_report(tmp_path):
    program = Path(__file__).resolve().parents[1] / "benchmarks" / "examples" / "my_program.py"
    done = _autotune("pgle", "--command", f"{sys.executable} {program} --size 64",
                     "--devices", "1", "--steps", "5", "--repeats", "2", "--format", "json",
                     cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    body = json.loads(done.stdout)
    assert body["profile_costs"] > 0 and body["runs"] == 2 and body["failed_runs"] == 0
    _, meta = rules.read_profile(body["profile"])
    assert meta.model.startswith("my_program/")
    other = _autotune("pgle", "--command", f"{sys.executable} {program} --size 32",
                      "--devices", "1", "--steps", "5", "--repeats", "1", "--profile",
                      body["profile"], "--format", "json", cwd=tmp_path)
    assert other.returncode == 1  # the command's words are part of the model
    assert "model" in json.loads(other.stdout)["failure"]


def test_the_report_fits_80_columns_and_keeps_a_long_path_whole(capsys):
    from autotune.cli.pgle import _print

    path = "/a/very/long/folder/" + "x" * 90 + "/profile.pbtxt"
    _print({"workload": "scan-transformer", "preset": "small", "devices": 8, "mode": "manual",
            "profile": path, "profile_costs": 243, "profile_source": "trace-events",
            "names_in_program": 243, "step_time_s": {"with_profile": 0.031,
                                                     "without_profile": 0.030},
            "runs": 4, "speedup": 0.97, "speedup_interval": [0.9, 1.05],
            "verdict": "no measurable gain", "same_program": True, "keep": False,
            "note": "the CPU compiler does not use a PGLE profile (its scheduler has no "
                    "latency estimator to feed), so no speedup is expected here"})
    lines = capsys.readouterr().out.splitlines()
    assert f"profile       {path}" in lines  # whole, after its label
    assert all(len(line) <= 80 for line in lines if path not in line), lines
    assert any(line.startswith("note") for line in lines)
    assert "expected here" in lines[-1]
