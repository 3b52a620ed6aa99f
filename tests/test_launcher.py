"""Real trial subprocesses: success, XLA flag rejections, timeout, crash, NaN."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from autotune.launcher import SubprocessLauncher, TrialRequest, classify_stderr
from autotune.records import MeasureMode, OutcomeKind

pytestmark = pytest.mark.slow


def launch(workload: Path, **kwargs) -> object:
    request = TrialRequest(workload=workload, preset="tiny", steps=5, warmup=1, **kwargs)
    return SubprocessLauncher().launch(request)


def test_paired_trial_measures_baseline_and_candidate_in_one_process(workloads_dir):
    outcome = launch(workloads_dir / "toy.py", compiler_options={"xla_cpu_enable_fast_math": True})
    assert outcome.kind is OutcomeKind.OK, outcome.message + outcome.stderr_tail
    m = outcome.measurement
    assert m.mode is MeasureMode.PAIRED
    assert len(m.step_times_s) == 5 and len(m.baseline_step_times_s) == 5
    assert 0.2 < m.paired_ratio < 5
    assert m.backend == "cpu" and m.device_count == 1
    assert m.peak_memory_bytes > 0 and m.memory_source == "memory_analysis"
    assert m.rss_peak_bytes > m.peak_memory_bytes
    # fast math changes the generated code, so the programs differ
    assert m.fingerprint and m.baseline_fingerprint and m.fingerprint != m.baseline_fingerprint


def test_same_flags_through_xla_flags_and_compiler_options_give_one_program(workloads_dir):
    direct = launch(workloads_dir / "toy.py", env={"XLA_FLAGS": "--xla_cpu_enable_fast_math=true"})
    paired = launch(workloads_dir / "toy.py", compiler_options={"xla_cpu_enable_fast_math": True})
    assert direct.measurement.mode is MeasureMode.DIRECT
    assert direct.measurement.fingerprint == paired.measurement.fingerprint


def test_default_configuration_paired_with_itself_is_the_same_program(workloads_dir):
    m = launch(workloads_dir / "toy.py", compiler_options={}).measurement
    assert m.same_program_as_baseline is True


def test_flag_unknown_to_xla_flags_is_an_unknown_flag_outcome(workloads_dir):
    outcome = launch(workloads_dir / "toy.py", env={"XLA_FLAGS": "--xla_gpu_graph_level=0"})
    assert outcome.kind is OutcomeKind.UNKNOWN_FLAG
    assert "--xla_gpu_graph_level=0" in outcome.message
    assert outcome.measurement is None


def test_flag_unknown_to_compiler_options_is_an_unknown_flag_outcome(workloads_dir):
    outcome = launch(workloads_dir / "toy.py", compiler_options={"xla_no_such_flag": True})
    assert outcome.kind is OutcomeKind.UNKNOWN_FLAG
    assert "xla_no_such_flag" in outcome.message


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        ("--xla_cpu_enable_fast_math=maybe", "'maybe' for --xla_cpu_enable_fast_math"),
        ("--xla_gpu_enable_command_buffer=0", "'0' for --xla_gpu_enable_command_buffer"),
    ],
)
def test_value_xla_rejects_is_an_invalid_value_outcome(workloads_dir, flags, words):
    outcome = launch(workloads_dir / "toy.py", env={"XLA_FLAGS": flags})
    assert outcome.kind is OutcomeKind.INVALID_VALUE
    assert words in outcome.message


def test_hung_trial_is_killed_with_its_whole_process_group(workloads_dir, tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    start = time.monotonic()
    outcome = launch(workloads_dir / "hang.py", env={"HANG_PID_FILE": str(pid_file)},
                     timeout_s=3)
    assert outcome.kind is OutcomeKind.TIMEOUT
    assert time.monotonic() - start < 15
    grandchild = int(pid_file.read_text())
    time.sleep(0.2)
    assert not _alive(grandchild)


def _alive(pid: int) -> bool:
    """True if `pid` runs (a killed zombie nobody has reaped yet counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text())


def test_child_killed_by_a_signal_is_a_crashed_outcome(workloads_dir):
    outcome = launch(workloads_dir / "crash.py")
    assert outcome.kind is OutcomeKind.CRASHED
    assert outcome.signal == signal.SIGSEGV
    assert "SIGSEGV" in outcome.message


def test_step_producing_nan_is_a_nonfinite_outcome(workloads_dir):
    outcome = launch(workloads_dir / "nan.py")
    assert outcome.kind is OutcomeKind.NONFINITE


def test_workload_file_without_workload_function_is_reported_not_raised(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n")
    outcome = launch(bad)
    assert outcome.kind is OutcomeKind.COMPILE_ERROR
    assert "defines no function `workload(preset)`" in outcome.message


def test_classify_stderr_ignores_ordinary_logs():
    assert classify_stderr("W1122 some warning\nall fine\n") is None
