"""Real trial subprocesses: success, XLA flag rejections, timeout, crash, NaN."""

from __future__ import annotations

import os
import signal
import sys
import time
import weakref
from pathlib import Path

import pytest
from outcomes import trial_request

from autotune.ground.proc import deferred_interrupt, interrupt_latch, raise_if_interrupted
from autotune.ground.protocol import Job
from autotune.ground.records import MeasureMode, OutcomeKind
from autotune.launch.launcher import SubprocessLauncher, TrialRequest

pytestmark = pytest.mark.slow


def launch(workload: Path, **kwargs) -> object:
    """Launch `workload` (tiny, 5 steps); `kwargs` are the job's fields or the request's."""
    return SubprocessLauncher().launch(trial_request(workload, "tiny", **{
        "steps": 5, "warmup": 1, **kwargs}))


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


def test_a_reference_configuration_is_what_the_candidate_is_timed_against(workloads_dir):
    fast = {"xla_cpu_enable_fast_math": True}
    alone = launch(workloads_dir / "toy.py", compiler_options=fast).measurement
    against_itself = launch(workloads_dir / "toy.py", compiler_options=fast,
                            reference_options=fast).measurement
    # the in-process reference is compiled with the reference options: the same program
    assert against_itself.same_program_as_baseline is True
    assert against_itself.baseline_fingerprint == alone.fingerprint != alone.baseline_fingerprint
    assert len(against_itself.baseline_step_times_s) == 5


def test_a_compile_only_request_fingerprints_and_times_nothing(workloads_dir):
    fast = {"xla_cpu_enable_fast_math": True}
    outcome = launch(workloads_dir / "toy.py", compiler_options=fast, timed=False)
    assert outcome.kind is OutcomeKind.OK, outcome.message + outcome.stderr_tail
    m = outcome.measurement
    assert m.fingerprint and m.step_times_s == () and m.baseline_step_times_s == ()
    timed = launch(workloads_dir / "toy.py", compiler_options=fast).measurement
    assert m.fingerprint == timed.fingerprint


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


def test_fast_math_that_changes_the_result_is_a_numerics_mismatch(workloads_dir):
    relaxed = {"xla_cpu_enable_fast_math": True, "xla_cpu_fast_math_honor_nans": False}
    outcome = launch(workloads_dir / "nan_count.py", compiler_options=relaxed)
    assert outcome.kind is OutcomeKind.NUMERICS_MISMATCH
    assert "tolerance for float32" in outcome.message
    assert outcome.measurement is not None  # timed all the same, kept in the record
    assert outcome.measurement.numerics_error > 0.5


def test_fast_math_that_keeps_the_result_passes_the_guard(workloads_dir):
    outcome = launch(workloads_dir / "nan_count.py",
                     compiler_options={"xla_cpu_enable_fast_math": True})
    assert outcome.kind is OutcomeKind.OK
    assert outcome.measurement.numerics_error == 0.0
    assert outcome.measurement.output_dtype == "float32"


def test_workload_over_the_memory_limit_is_an_oom_outcome(workloads_dir):
    outcome = SubprocessLauncher().launch(TrialRequest(workloads_dir / "big.py", "small",
                                                       job=Job(steps=3, warmup=1,
                                                               compiler_options={}),
                                                       memory_limit_bytes=1_500_000_000))
    assert outcome.kind is OutcomeKind.OOM, outcome.message
    assert "RESOURCE_EXHAUSTED" in outcome.message or "memory" in outcome.message.lower()


def test_step_that_does_not_compile_is_a_compile_error_outcome(workloads_dir):
    outcome = launch(workloads_dir / "bad_shapes.py")
    assert outcome.kind is OutcomeKind.COMPILE_ERROR
    assert "dot_general" in outcome.message or "shape" in outcome.message.lower()


def test_the_requests_warm_up_bounds_reach_the_child(workloads_dir):
    """Minimum and cap equal: exactly that many warm-up rounds, settled or not.

    Settling itself is tested in-process (test_stopping.py) and through a child
    with a forced tolerance (test_stats.py).
    """
    outcome = SubprocessLauncher().launch(TrialRequest(workloads_dir / "toy.py", "small",
                                                       job=Job(steps=5, warmup=3, max_warmup=3,
                                                               compiler_options={})))
    m = outcome.measurement
    assert m.warmup_steps == 3 and len(m.warmup_times_s) == len(m.baseline_warmup_times_s) == 3
    assert len(m.step_times_s) == 5 == len(m.baseline_step_times_s)
    assert m.first_step_time_s is not None and m.compile_time_s > 0


def test_command_reporting_through_autotune_bench_is_measured(tmp_path):
    program = Path(__file__).resolve().parents[1] / "benchmarks" / "examples" / "my_program.py"
    request = TrialRequest(program, "tiny", job=Job(steps=3, warmup=1, compiler_options={}),
                           command=(sys.executable, str(program), "--size", "64"))
    outcome = SubprocessLauncher().launch(request)
    assert outcome.kind is OutcomeKind.OK, outcome.message + outcome.stderr_tail
    assert outcome.measurement.mode is MeasureMode.PAIRED


def test_command_that_never_reports_is_a_crash_with_a_hint(tmp_path):
    request = TrialRequest(Path("x"), "tiny", command=(sys.executable, "-c", "print('hi')"))
    outcome = SubprocessLauncher().launch(request)
    assert outcome.kind is OutcomeKind.CRASHED
    assert "wrote no result" in outcome.message and "autotune.bench.report()" in outcome.message


def test_clearly_slower_candidate_is_pruned_after_a_few_steps(workloads_dir):
    request = TrialRequest(workloads_dir / "toy.py", "tiny",
                           job=Job(steps=20, warmup=1, max_warmup=2, prune_ratio=0.5,
                                   compiler_options={}))
    outcome = SubprocessLauncher().launch(request)
    assert outcome.kind is OutcomeKind.PRUNED
    assert "above the 0.500 limit" in outcome.message
    # stopped at the first check (6 pairs), or a little later when a loaded machine's noise
    # hid it for a step or two; never all 20
    assert 6 <= len(outcome.measurement.step_times_s) < 20


def test_a_ctrl_c_that_python_swallows_in_a_gc_callback_still_stops_the_loop():
    """Seen in CI: SIGINT landed in SQLAlchemy's weakref callback, Python printed
    "Exception ignored" and the study ran on. The latch remembers it."""

    class Thing:
        pass

    def ctrl_c_inside_the_callback(_ref: object) -> None:
        signal.raise_signal(signal.SIGINT)  # the handler raises here, inside the callback

    with interrupt_latch():
        thing = Thing()
        ref = weakref.ref(thing, ctrl_c_inside_the_callback)
        del thing  # runs the callback; its KeyboardInterrupt is "ignored" by Python
        assert ref() is None
        with pytest.raises(KeyboardInterrupt):
            raise_if_interrupted()
    raise_if_interrupted()  # outside the latch: nothing is remembered


def test_a_ctrl_c_held_back_and_raised_is_not_remembered_for_a_later_loop():
    """A Ctrl-C held by `deferred_interrupt` is raised at the end of its block; once handled,
    it must not stop the next study run in the same process (library use, tests)."""
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupt():
            signal.raise_signal(signal.SIGINT)
    raise_if_interrupted()  # raises if the handled Ctrl-C was remembered


def test_a_child_that_writes_a_bad_result_is_a_failed_trial_naming_the_field(tmp_path):
    writer = ("import json, os\n"
              "body = {'schema_version': 1, 'status': 'ok', 'message': '', 'mode': 'direct',\n"
              "        'step_times_s': [0.01, float('nan')], 'compile_time_s': 1.0}\n"
              "open(os.environ['AUTOTUNE_RESULT'], 'w').write(json.dumps(body))\n")
    request = TrialRequest(Path("x"), "tiny", command=(sys.executable, "-c", writer))
    outcome = SubprocessLauncher().launch(request)
    assert outcome.kind is OutcomeKind.CRASHED and outcome.measurement is None
    assert outcome.message == (
        "the child's result breaks the protocol: result field 'step_times_s[1]': expected a "
        "positive finite number of seconds, got nan")


def test_a_memory_limit_too_small_to_start_python_is_an_oom_naming_the_limit(workloads_dir):
    outcome = SubprocessLauncher().launch(TrialRequest(workloads_dir / "toy.py", "tiny",
                                                       memory_limit_bytes=1024, timeout_s=60))
    assert outcome.kind is OutcomeKind.OOM, (outcome.message, outcome.stderr_tail)
    assert outcome.message.startswith(
        "the trial memory limit (1 KiB) is too small for the child to start: ")
    assert outcome.measurement is None


# --- a series of compile-only requests in one child (`launch_all`) -------------------------

#: A child that writes the job's own result (its compiler options' one value as the
#: fingerprint) and the first case's, never the second's; each start adds a line to `runs`.
SERIES_WRITER = (
    "import json, os, sys\n"
    "job = json.loads(os.environ['AUTOTUNE_JOB'])\n"
    "open(sys.argv[1], 'a').write(str(len(job['also_compile'])) + '\\n')\n"
    "def body(options):\n"
    "    return {'schema_version': 1, 'status': 'ok', 'message': '', 'mode': 'paired',\n"
    "            'compile_time_s': 0.5, 'fingerprint': str(options.get('x', 'none'))}\n"
    "path = os.environ['AUTOTUNE_RESULT']\n"
    "open(path, 'w').write(json.dumps(body(job['compiler_options'])))\n"
    "if job['also_compile']:\n"
    "    case = job['also_compile'][0]['compiler_options']\n"
    "    open(path + '.case-1', 'w').write(json.dumps(body(case)))\n"
)


def series(runs: Path, *values: int, **fields: object) -> list[TrialRequest]:
    command = (sys.executable, "-c", SERIES_WRITER, str(runs))
    return [trial_request(Path("x"), "tiny", timed=False, command=command, flags={"x": v},
                          compiler_options={"x": v}, **fields) for v in values]


def test_one_child_answers_a_series_and_a_request_it_left_unanswered_runs_alone(tmp_path):
    runs = tmp_path / "runs"
    outcomes = SubprocessLauncher().launch_all(series(runs, 1, 2, 3))
    assert [o.measurement.fingerprint for o in outcomes if o.measurement] == ["1", "2", "3"]
    assert all(o.ok for o in outcomes)
    # one child for the series (two more cases in its job), then the third alone
    assert runs.read_text().splitlines() == ["2", "0"]
    assert outcomes[0].duration_s == outcomes[1].duration_s  # a share of the one child


def test_requests_one_child_cannot_share_go_one_child_each(tmp_path):
    runs = tmp_path / "runs"
    timed = [r.with_job(phases=(Job().phases)) for r in series(runs, 1, 2)]
    SubprocessLauncher().launch_all(timed)  # timed: each its own process
    other = series(runs, 1, 2)
    other[1] = other[1].with_job(steps=3)  # differs in more than its configuration
    SubprocessLauncher().launch_all(other)
    SubprocessLauncher().launch_all(series(runs, 5))
    assert runs.read_text().splitlines() == ["0"] * 5
