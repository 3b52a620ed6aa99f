"""Multi-process trials through a launcher template: ranks, templates, merged results.

The rules (a process's rank, the template, which process's failure decides
the trial) are tested in-process; the local launcher with plain Python
processes; real trials of the `distributed-mlp` benchmark through
`python -m autotune.ground.local_launch -n 2 -- {cmd}` are marked slow.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from outcomes import trial_request

from autotune.child.ranks import from_words, process_rank, process_total, result_path, to_words
from autotune.ground.errors import UsageError
from autotune.ground.local_launch import parse_args, process_env
from autotune.ground.proc import Finished
from autotune.ground.protocol import JOB_ENV, RESULT_ENV, SCHEMA_VERSION
from autotune.ground.records import MeasureMode, OutcomeKind
from autotune.launch.launcher import (
    LAUNCHER_VARIABLES,
    RankReport,
    SubprocessLauncher,
    TrialRequest,
    deciding_report,
    expand_template,
    parse_template,
    rank_files,
    rank_message,
)

ROOT = Path(__file__).resolve().parents[1]
BENCHMARK = ROOT / "benchmarks" / "distributed-mlp.py"
LOCAL = f"{shlex.quote(sys.executable)} -m autotune.ground.local_launch -n 2 -- {{cmd}}"

# --- a process's rank -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "rank"),
    [
        ({}, 0),
        ({"JAX_PROCESS_ID": "1"}, 1),
        ({"SLURM_PROCID": "3"}, 3),
        ({"PMI_RANK": "2", "SLURM_PROCID": "0"}, 2),
        # mpirun inside a Slurm allocation: the inherited SLURM_PROCID is the same everywhere
        ({"OMPI_COMM_WORLD_RANK": "5", "SLURM_PROCID": "0"}, 5),
        ({"JAX_PROCESS_ID": "1", "OMPI_COMM_WORLD_RANK": "4"}, 1),  # the local launcher's first
        ({"JAX_PROCESS_ID": "x", "PMI_RANK": " 2 "}, 2),  # not a number: passed over
        ({"JAX_PROCESS_ID": "-1"}, 0),
    ],
)
def test_a_process_takes_its_rank_from_the_launchers_variables(environ, rank):
    assert process_rank(environ) == rank


@pytest.mark.parametrize(
    ("environ", "total"),
    [
        ({}, 1),
        ({"JAX_NUM_PROCESSES": "2"}, 2),
        ({"SLURM_NTASKS": "4"}, 4),
        ({"OMPI_COMM_WORLD_SIZE": "8", "SLURM_NTASKS": "1"}, 8),
        ({"PMI_SIZE": "0", "SLURM_NTASKS": "3"}, 3),  # 0 processes is no answer
    ],
)
def test_the_number_of_processes_comes_from_the_same_launchers(environ, total):
    assert process_total(environ) == total


def test_process_0_writes_the_named_file_and_the_others_their_own_beside_it():
    assert result_path({RESULT_ENV: "/shared/r.json"}) == "/shared/r.json"
    assert result_path({RESULT_ENV: "/shared/r.json", "SLURM_PROCID": "2"}) == "/shared/r.json.2"
    assert result_path({"SLURM_PROCID": "2"}) is None  # no file named: the result is printed
    # each rank's own file name: test_protocol.py (in the mutation run's selection)


def test_process_0s_figures_travel_bit_for_bit_as_32_bit_words():
    values = [0.1234567890123456789, 1e-300, 2.0**60 + 1, -1.0, 0.0]
    words = to_words(values)
    assert str(words.dtype) == "int32" and words.size == 2 * len(values)
    assert from_words(words) == values
    assert from_words(words.astype("int64")) == values  # what a psum with x64 would give


# --- the template -------------------------------------------------------------------------------


def test_a_template_is_split_like_a_shell_and_cmd_becomes_the_childs_words():
    words = parse_template("srun -N 2 --ntasks-per-node 1 {cmd}")
    assert words == ("srun", "-N", "2", "--ntasks-per-node", "1", "{cmd}")
    argv = ["/usr/bin/python 3", "-m", "autotune.child", "w.py"]
    assert expand_template(words, argv) == [*words[:-1], *argv]


def test_cmd_inside_a_longer_word_is_the_command_line_quoted_for_a_shell():
    words = parse_template("ssh node1 'cd /work && {cmd}'")
    argv = ["python", "-m", "autotune.child", "my file.py"]
    line = expand_template(words, argv)
    assert line == ["ssh", "node1", "cd /work && python -m autotune.child 'my file.py'"]
    assert shlex.split(line[-1].split("&& ", 1)[1]) == argv


@pytest.mark.parametrize(
    ("template", "words"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        ("mpirun -n 2", "has no {cmd}"),
        ("srun {cmd} {cmd}", "has {cmd} 2 times"),
        ("srun 'unclosed {cmd}", "does not parse"),
    ],
)
def test_a_bad_template_is_a_usage_error_naming_the_problem(template, words):
    with pytest.raises(UsageError) as info:
        parse_template(template)
    assert words in str(info.value) and info.value.exit_code == 2


def test_the_launcher_runs_the_childs_command_line_with_one_environment_for_all(tmp_path):
    launcher = SubprocessLauncher(python="/opt/py")
    request = TrialRequest(Path("/w/bench.py"), "tiny", env={"XLA_FLAGS": "--xla_x=1"},
                           launcher="mpirun -n 2 -x XLA_FLAGS {cmd}")
    assert launcher._argv(request) == ["mpirun", "-n", "2", "-x", "XLA_FLAGS", "/opt/py", "-m",
                                       "autotune.child", "/w/bench.py", "--preset", "tiny"]
    env = launcher._child_env(request, tmp_path)
    assert env["XLA_FLAGS"] == "--xla_x=1" and env[RESULT_ENV] == str(tmp_path / "result.json")
    assert JOB_ENV in env


def test_a_trial_without_a_launcher_drops_inherited_rank_variables(tmp_path, monkeypatch):
    """A worker started by `srun -n 4` must not make its one-process trials believe
    they are rank 3 of 4; with a launcher, the launcher's own variables are kept."""
    for name in LAUNCHER_VARIABLES:
        monkeypatch.setenv(name, "3")
    alone = SubprocessLauncher()._child_env(TrialRequest(Path("w.py"), "tiny"), tmp_path)
    assert not set(LAUNCHER_VARIABLES) & set(alone)
    launched = SubprocessLauncher()._child_env(
        TrialRequest(Path("w.py"), "tiny", launcher="srun {cmd}"), tmp_path)
    assert launched["SLURM_NTASKS"] == "3"


# --- which process's failure decides ------------------------------------------------------------


def report(rank: int, status: str = "ok", at: float | None = 100.0,
           message: str = "") -> RankReport:
    return RankReport(rank, status, message or f"{status} in {rank}", at)


def test_no_failure_leaves_process_0s_result():
    assert deciding_report([report(0), report(1), report(2)]) is None
    assert deciding_report([]) is None


def test_another_process_fails_while_process_0_succeeds_or_wrote_nothing():
    failed = report(2, "compile_error")
    assert deciding_report([report(0), report(1), failed]) == failed
    assert deciding_report([report(1), failed]) == failed  # process 0 wrote no file


def test_the_first_failure_is_the_cause_and_the_others_follow_it():
    cause = report(1, "crashed", at=100.0, message="RuntimeError: a bug in the step")
    echo = report(0, "crashed", at=100.02, message="Gloo all-reduce failed: connection reset")
    assert deciding_report([echo, cause]) == cause
    own = report(0, "compile_error", at=99.0)
    assert deciding_report([own, cause]) == own


def test_ties_go_to_the_lowest_rank_and_a_report_without_a_time_counts_last():
    assert deciding_report([report(2, "oom"), report(1, "oom")]).rank == 1
    assert deciding_report([report(1, "oom", at=None), report(2, "oom", at=500.0)]).rank == 2
    assert deciding_report([report(3, "oom", at=None), report(1, "oom", at=None)]).rank == 1


def test_outcomes_agreed_with_process_0_are_process_0s_alone():
    pruned = [report(0, "pruned", at=100.1), report(1, "pruned", at=100.0)]
    assert deciding_report(pruned).rank == 0
    assert deciding_report([report(0), report(1, "over_budget")]) is None
    assert deciding_report([report(1, "over_budget"), report(2, "nonfinite", at=200.0)]).rank == 2


def test_another_processs_message_names_it():
    assert rank_message(report(3, "oom", message="RESOURCE_EXHAUSTED")) == \
        "process 3: RESOURCE_EXHAUSTED"
    assert rank_message(report(0, "oom", message="RESOURCE_EXHAUSTED")) == "RESOURCE_EXHAUSTED"


def write(path: Path, status: str, message: str = "", at: float = 100.0, **more) -> None:
    body = {"schema_version": SCHEMA_VERSION, "status": status, "message": message,
            "written_at": at, **more}
    path.write_text(json.dumps(body))


def outcome_of(tmp_path: Path, rc: int = 0):
    request = TrialRequest(Path("w.py"), "tiny", launcher="srun {cmd}")
    finished = Finished(returncode=rc, timed_out=False, duration_s=1.0, stdout="",
                        stderr="last words\n")
    return SubprocessLauncher()._outcome(request, finished, tmp_path / "result.json")


def test_the_parent_reads_every_processs_file_and_takes_the_deciding_failure(tmp_path):
    write(tmp_path / "result.json", "ok", step_times_s=[0.1], baseline_step_times_s=[0.1],
          mode="paired")
    write(tmp_path / "result.json.1", "numerics_mismatch", "outputs differ", at=101.0)
    (tmp_path / "result.json.2").write_text("{cut short")  # unreadable: no report
    (tmp_path / "result.json.x").write_text("not a rank")
    assert sorted(rank_files(tmp_path / "result.json")) == [0, 1, 2]
    outcome = outcome_of(tmp_path, rc=1)
    assert outcome.kind is OutcomeKind.NUMERICS_MISMATCH
    assert outcome.message == "process 1: outputs differ"
    assert outcome.measurement.step_times_s == (0.1,)  # process 0's measurement


def test_a_failure_process_0_reported_first_is_the_trials_as_it_stands(tmp_path):
    write(tmp_path / "result.json", "compile_error", "bad flag", at=100.0)
    write(tmp_path / "result.json.1", "crashed", "connection reset", at=100.5)
    outcome = outcome_of(tmp_path, rc=1)
    assert outcome.kind is OutcomeKind.COMPILE_ERROR and outcome.message == "bad flag"


def test_success_of_process_0_with_a_failed_launcher_is_a_crash(tmp_path):
    write(tmp_path / "result.json", "ok", step_times_s=[0.1], mode="direct")
    assert outcome_of(tmp_path).kind is OutcomeKind.OK
    failed = outcome_of(tmp_path, rc=3)
    assert failed.kind is OutcomeKind.CRASHED
    assert "launcher exited with code 3" in failed.message and "last words" in failed.message


# --- the local launcher -------------------------------------------------------------------------


def test_local_launch_arguments():
    assert parse_args(["-n", "2", "--", "python", "x.py"]) == (2, ["python", "x.py"])
    assert parse_args(["-n3", "--", "a"]) == (3, ["a"])
    for bad in (["-n", "0", "--", "a"], ["-n", "2", "--"], ["-n", "two", "--", "a"], ["a"]):
        with pytest.raises(ValueError):
            parse_args(bad)
    env = process_env({"KEEP": "1"}, 4242, 2, 1)
    assert env == {"KEEP": "1", "JAX_COORDINATOR_ADDRESS": "127.0.0.1:4242",
                   "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"}


def local_launch(code: str, n: int = 2, timeout: float = 30) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "autotune.ground.local_launch", "-n", str(n), "--",
            sys.executable, "-c", code]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)


def test_local_launch_starts_n_copies_each_with_its_rank(tmp_path):
    done = local_launch("import os, pathlib\n"
                        "e = os.environ\n"
                        f"pathlib.Path({str(tmp_path)!r}, e['JAX_PROCESS_ID']).write_text(\n"
                        "    e['JAX_NUM_PROCESSES'] + ' ' + e['JAX_COORDINATOR_ADDRESS'])", n=3)
    assert done.returncode == 0, done.stderr
    seen = {p.name: p.read_text().split() for p in tmp_path.iterdir()}
    assert sorted(seen) == ["0", "1", "2"] and {n for n, _ in seen.values()} == {"3"}
    addresses = {address for _, address in seen.values()}
    assert len(addresses) == 1 and addresses.pop().startswith("127.0.0.1:")  # one coordinator


def test_local_launch_ends_as_the_first_failure_and_kills_the_rest():
    start = time.monotonic()
    done = local_launch("import os, sys, time\n"
                        "if os.environ['JAX_PROCESS_ID'] == '1': sys.exit(3)\n"
                        "time.sleep(60)")
    assert done.returncode == 3
    assert time.monotonic() - start < 20


def test_local_launch_dies_by_the_signal_that_killed_a_copy():
    done = local_launch("import os, signal, time\n"
                        "if os.environ['JAX_PROCESS_ID'] == '0': os.kill(os.getpid(), "
                        "signal.SIGSEGV)\n"
                        "time.sleep(60)")
    assert done.returncode == -signal.SIGSEGV


def test_local_launch_takes_its_copies_down_when_it_is_stopped(tmp_path):
    code = ("import os, pathlib, time\n"
            f"pathlib.Path({str(tmp_path)!r}, str(os.getpid())).touch()\n"
            "time.sleep(60)")
    launch = subprocess.Popen([sys.executable, "-m", "autotune.ground.local_launch", "-n", "2",
                               "--", sys.executable, "-c", code],
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
    deadline = time.monotonic() + 20
    while len(list(tmp_path.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    copies = [int(p.name) for p in tmp_path.iterdir()]
    assert len(copies) == 2
    launch.send_signal(signal.SIGTERM)
    assert launch.wait(timeout=10) == 128 + signal.SIGTERM
    for pid in copies:  # killed and reaped: not even a zombie is left
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_command_that_cannot_start_is_exit_code_127():
    argv = [sys.executable, "-m", "autotune.ground.local_launch", "-n", "2", "--",
            "/no/such/program"]
    done = subprocess.run(argv, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 127 and "cannot run /no/such/program" in done.stderr
    usage = subprocess.run([sys.executable, "-m", "autotune.ground.local_launch", "--", "x"],
                           env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                           text=True, timeout=30)
    assert usage.returncode == 2 and "usage" in usage.stderr


# --- real trials --------------------------------------------------------------------------------


def trial(workload: Path, tmp_path: Path, **kwargs):
    """One real trial (scratch kept under `tmp_path`): (outcome, scratch folder, seconds)."""
    kwargs.setdefault("launcher", LOCAL)
    tmp_path.mkdir(parents=True, exist_ok=True)
    request = trial_request(workload, "tiny", steps=6, warmup=1, max_warmup=4,
                            compiler_options={}, timeout_s=90, **kwargs)
    start = time.monotonic()
    outcome = SubprocessLauncher(scratch_root=tmp_path, keep_scratch=True).launch(request)
    scratch = next(tmp_path.glob("autotune-trial-*"))
    return outcome, scratch, time.monotonic() - start


@pytest.mark.slow
def test_a_paired_trial_through_the_local_launcher_runs_two_processes(tmp_path):
    outcome, scratch, seconds = trial(BENCHMARK, tmp_path)
    assert outcome.kind is OutcomeKind.OK, outcome.message + outcome.stderr_tail
    m = outcome.measurement
    assert m.mode is MeasureMode.PAIRED and len(m.step_times_s) == 6
    assert m.device_count == 2  # one CPU device in each of two processes
    zero = json.loads((scratch / "result.json").read_text())
    one = json.loads((scratch / "result.json.1").read_text())
    assert (zero["process_index"], zero["process_count"]) == (0, 2)
    assert (one["process_index"], one["process_count"]) == (1, 2)
    assert m.step_times_s == tuple(zero["step_times_s"])  # the result is process 0's
    assert one["warmup_steps"] == zero["warmup_steps"]  # process 0 decided when warm-up ended
    assert zero["collectives"]["all-reduce"]["count"] >= 1
    assert seconds < 60


@pytest.mark.slow
def test_process_0_decides_pruning_and_known_programs_for_every_process(tmp_path):
    outcome, scratch, _ = trial(BENCHMARK, tmp_path / "a", prune_ratio=1e-3)
    assert outcome.kind is OutcomeKind.PRUNED, outcome.message + outcome.stderr_tail
    assert not outcome.message.startswith("process")  # agreed: process 0's own outcome
    zero = json.loads((scratch / "result.json").read_text())
    one = json.loads((scratch / "result.json.1").read_text())
    assert one["status"] == "pruned" and len(one["step_times_s"]) == len(zero["step_times_s"]) == 6
    known = {zero["fingerprint"]: 7}
    again, _, seconds = trial(BENCHMARK, tmp_path / "b", known_programs=known)
    assert again.kind is OutcomeKind.OK and again.measurement.same_program_as == 7
    assert seconds < 60


@pytest.mark.slow
def test_a_trial_in_which_one_process_fails_is_failed_with_its_message(tmp_path):
    failing = tmp_path / "rank1_fails.py"
    failing.write_text(
        "import importlib.util\n"
        "import jax\n"
        f"spec = importlib.util.spec_from_file_location('dmlp', {str(BENCHMARK)!r})\n"
        "mod = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(mod)\n"
        "def workload(preset):\n"
        "    work = mod.workload(preset)  # both processes joined: process 0 waits for 1\n"
        "    if jax.process_index() == 1:\n"
        "        raise RuntimeError('rank one cannot build its batch')\n"
        "    return work\n")
    outcome, scratch, seconds = trial(failing, tmp_path / "runs")
    assert not outcome.ok
    assert outcome.message.startswith("process 1: ")
    assert "rank one cannot build its batch" in outcome.message
    assert outcome.kind is not OutcomeKind.TIMEOUT and seconds < 60
    assert (scratch / "result.json.1").exists()


@pytest.mark.slow
def test_the_benchmark_alone_is_one_process_even_under_an_inherited_launcher(tmp_path,
                                                                             monkeypatch):
    """No launcher: variables inherited from a launcher of the parent's own are dropped, so
    the benchmark does not wait for processes that will never come."""
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.setenv("SLURM_PROCID", "2")
    outcome, scratch, _ = trial(BENCHMARK, tmp_path, launcher=None)
    assert outcome.kind is OutcomeKind.OK, outcome.message + outcome.stderr_tail
    assert outcome.measurement.device_count == 1
    assert json.loads((scratch / "result.json").read_text())["process_count"] == 1


# --- a study through the launcher, from the command line ---------------------------------


@pytest.mark.slow
def test_a_study_runs_every_trial_through_a_two_process_launcher(tmp_path):
    """`autotune study --launcher`: every trial of the study (baseline, fit, search) is two
    processes of the multi-process benchmark, and process 0's result is stored."""
    import sqlite3

    template = f"{sys.executable} -m autotune.ground.local_launch -n 2 -- {{cmd}}"
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "study", "--space", "cpu", "--benchmark",
         "distributed-mlp", "--preset", "tiny", "--devices", "1", "--trials", "2",
         "--steps", "5", "--warmup", "1", "--max-warmup", "3", "--confirm", "0",
         "--no-shrink", "--launcher", template, "--storage", f"sqlite:///{tmp_path}/l.db"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(tmp_path / "l.db") as db:
        runs = db.execute("select role, kind, device_count from autotune_runs").fetchall()
        plan = json.loads(db.execute("select plan from autotune_studies").fetchone()[0])
    assert {role for role, _, _ in runs} >= {"baseline", "search"}, runs
    assert all(kind == "ok" and count == 2 for _, kind, count in runs), runs  # 2 x 1 device
    assert plan["launcher"] == template and plan["recipe"]["options"]["launcher"] == template


def test_a_launcher_without_cmd_is_refused_before_anything_runs(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "study", "--space", "cpu", "--launcher",
         "srun -N 2", "--storage", f"sqlite:///{tmp_path}/l.db"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "{cmd}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "l.db").exists()
