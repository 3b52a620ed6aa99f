"""No trial left behind: real signals to a real `autotune study`, real trial processes.

The study's workload never finishes building and starts a grandchild process
(`workloads/hang.py`), so a trial is alive when the signal arrives. The
functions that start, signal and count live in `benchmarks/scripts/kill_check.py`,
which prints the same figures for the README.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from autotune.ground.guard import MEMORY_EXIT, MemoryCgroup
from autotune.ground.proc import run_bounded
from autotune.ground.records import OutcomeKind
from autotune.rules.failures import classify_exit

ROOT = Path(__file__).resolve().parents[1]


def _kill_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "kill_check", ROOT / "benchmarks" / "scripts" / "kill_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["kill_check"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


kill_check = _kill_check()
RUNNING = "select count(*) from trials where state = 'RUNNING'"
INTERRUPTED = ("select count(*) from trial_user_attributes where key = 'outcome' "
               "and value_json = '\"interrupted\"'")


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [
    (signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGHUP, 128 + signal.SIGHUP),
    (signal.SIGINT, 128 + signal.SIGINT)])
def test_a_stop_signal_ends_the_trial_and_marks_it_interrupted_at_once(tmp_path, signum, code):
    proc = kill_check.start_study(tmp_path)
    kill_check.wait_for_trial(proc, tmp_path)
    left = kill_check.signal_and_count(proc, tmp_path, signum)
    assert left == kill_check.Leftovers(processes=0, scratch_dirs=0, exit_code=code)
    assert kill_check.count_rows(tmp_path, RUNNING) == 0
    assert kill_check.count_rows(tmp_path, INTERRUPTED) == 1
    grandchild = int((tmp_path / "hang.pid").read_text())
    assert not Path(f"/proc/{grandchild}").exists()


@pytest.mark.slow
def test_sigkill_of_the_study_takes_its_trial_down_and_the_next_start_marks_it(tmp_path):
    proc = kill_check.start_study(tmp_path)
    kill_check.wait_for_trial(proc, tmp_path)
    left = kill_check.signal_and_count(proc, tmp_path, signal.SIGKILL)
    assert left == kill_check.Leftovers(processes=0, scratch_dirs=0, exit_code=-signal.SIGKILL)
    assert kill_check.count_rows(tmp_path, RUNNING) == 1  # nobody was left to say otherwise
    (tmp_path / "hang.pid").unlink()
    again = kill_check.start_study(tmp_path)  # its own baseline hangs too: stop it in its trial
    kill_check.wait_for_trial(again, tmp_path)
    assert kill_check.count_rows(tmp_path, INTERRUPTED) == 1  # marked before anything ran
    kill_check.signal_and_count(again, tmp_path, signal.SIGTERM, wait_s=2)
    assert kill_check.count_rows(tmp_path, RUNNING) == 0
    assert kill_check.count_rows(tmp_path, INTERRUPTED) == 2  # the dead one, then the stopped


@pytest.mark.slow
def test_local_workers_and_their_trials_die_with_a_sigkilled_leader(tmp_path):
    """`study --workers 2` SIGKILLed: both workers and their trials ran on and finished the
    study in the background (issue 31)."""
    proc = kill_check.start_study(tmp_path, "--workers", "2")
    kill_check.wait_for_trial(proc, tmp_path)
    workers = [p for p in kill_check.children_of(proc.pid, tmp_path)
               if b"\0autotune\0worker\0" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(workers) == 2
    left = kill_check.signal_and_count(proc, tmp_path, signal.SIGKILL, wait_s=10)
    assert left == kill_check.Leftovers(processes=0, scratch_dirs=0, exit_code=-signal.SIGKILL)
    assert kill_check.count_rows(tmp_path, RUNNING) == 0  # each worker marked its own trial


STUCK_WORKER = """
import os, signal, sys, time
from autotune.cli import worker
worker.LEADER_GRACE_S = 1.0
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # its stop never comes (a lost signal, a hang)
worker.follow_leader(os.getppid())
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(120)
"""
LEADER = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', sys.argv[1], "
          "sys.argv[2]], stderr=open(sys.argv[3], 'w')); time.sleep(120)")


def _running(pid: int) -> bool:
    """The process exists and is no zombie."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_a_worker_that_does_not_stop_when_its_leader_dies_is_ended_after_its_grace(tmp_path):
    """A worker left once in about sixty runs of `study --workers 2` with the leader killed
    (issue 31): however the worker's own stop hangs, it ends `LEADER_GRACE_S` after its
    leader, and says where each thread waited."""
    pid_file, err = tmp_path / "worker.pid", tmp_path / "worker.err"
    leader = subprocess.Popen([sys.executable, "-c", LEADER, STUCK_WORKER, str(pid_file),
                               str(err)])
    try:
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline and leader.poll() is None
            time.sleep(0.1)
        stuck = int(pid_file.read_text())
        time.sleep(2.5)  # its leader alive: the watch leaves it be
        assert _running(stuck)
    finally:
        leader.kill()
        leader.wait()
    ended = time.monotonic() + 20
    while _running(stuck) and time.monotonic() < ended:
        time.sleep(0.1)
    assert not _running(stuck)
    said = err.read_text()
    assert "had not stopped; ending it now" in said
    assert 'File "<string>", line 8' in said  # the main thread's stack: where it waited


def test_the_guard_ends_as_its_child_ended(tmp_path):
    code = run_bounded([sys.executable, "-c", "raise SystemExit(7)"], os.environ, tmp_path, 30)
    assert code.returncode == 7
    killed = run_bounded([sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"],
                         os.environ, tmp_path, 30)
    assert killed.returncode == -signal.SIGKILL
    missing = run_bounded([str(tmp_path / "no-such-program")], os.environ, tmp_path, 30)
    assert missing.returncode == 127 and "cannot run" in missing.stderr


def test_the_memory_limit_counts_resident_memory_not_address_space(tmp_path):
    """A 1 GiB --trial-memory-limit aborted a trivial JAX program with std::bad_alloc: it
    limited the address space, of which XLA reserves far more than it uses (issue 31)."""
    jax_step = "import jax.numpy as jnp; print(float((jnp.ones((64, 64)) @ jnp.ones(64)).sum()))"
    done = run_bounded([sys.executable, "-c", jax_step], os.environ, tmp_path, 120,
                       memory_limit_bytes=2**30)
    assert done.returncode == 0, done.stderr
    probe = "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0])"
    unlimited = run_bounded([sys.executable, "-c", probe], os.environ, tmp_path, 30,
                            memory_limit_bytes=2**30)
    assert unlimited.stdout.strip() == str(resource.RLIM_INFINITY)


HOG = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
       "'import time; b = bytearray(400 * 2**20); time.sleep(300)']); time.sleep(300)")


def test_a_trial_over_its_resident_memory_limit_is_killed_with_its_descendants(tmp_path):
    """The resident memory watch, on a machine where no cgroup is made (turned off here)."""
    done = run_bounded([sys.executable, "-c", HOG], {**os.environ, "AUTOTUNE_CGROUP_ROOT": ""},
                       tmp_path, 60, memory_limit_bytes=200 * 2**20)
    assert not done.timed_out and done.returncode == MEMORY_EXIT
    assert "Out of memory: the trial's resident memory reached" in done.stderr
    assert "above its limit of 209715200 bytes (--trial-memory-limit)" in done.stderr
    classified = classify_exit(done.returncode, False, done.stderr, 60, 200 * 2**20)
    assert classified is not None and classified[0] is OutcomeKind.OOM


def test_where_the_machine_allows_a_cgroup_the_kernel_holds_the_memory_limit(tmp_path):
    """The trial runs in a cgroup of its own under the guard's (v2 `memory.max`, or v1 as on
    this project's machines); the kernel's OOM kill ends the whole trial as `oom`, and the
    cgroup is gone afterwards."""
    made = MemoryCgroup.make(200 * 2**20)
    if made is None:
        pytest.skip("this machine allows no cgroup with a memory limit under this process's")
    made.remove()
    done = run_bounded([sys.executable, "-c", HOG], os.environ, tmp_path, 60,
                       memory_limit_bytes=200 * 2**20)
    assert not done.timed_out and done.returncode == MEMORY_EXIT
    assert ("Out of memory: the trial's memory reached its limit of 209715200 bytes "
            "(--trial-memory-limit), and the kernel's cgroup memory controller killed it"
            ) in done.stderr
    classified = classify_exit(done.returncode, False, done.stderr, 60, 200 * 2**20)
    assert classified is not None and classified[0] is OutcomeKind.OOM
    # this process's trial cgroup (named for its maker's pid) is gone; another test
    # worker's trial may hold a cgroup of its own beside it meanwhile
    assert made.path.name == f"autotune-trial-{os.getpid()}" and not made.path.exists()


def test_on_a_fake_cgroup_v2_tree_the_guard_limits_memory_max_and_reads_its_oom_kills(
        tmp_path):
    """cgroup v2 cannot be mounted here (the machine has v1): a folder stands in for the
    hierarchy. The guard makes the trial's cgroup in it with `memory.max` and no swap, and
    an `oom_kill` in its `memory.events` (written here by the child, as the kernel would)
    ends the trial as out of memory."""
    root = tmp_path / "cgroupfs"
    root.mkdir()
    (root / "cgroup.subtree_control").write_text("cpu memory pids\n")
    own = Path("/proc/self/cgroup").read_text()
    v2 = next((ln.split(":", 2)[2] for ln in own.splitlines() if ln.startswith("0::")), None)
    if v2 is None:
        pytest.skip("this process has no cgroup v2 line in /proc/self/cgroup")
    base = root / v2.strip().lstrip("/")
    base.mkdir(parents=True, exist_ok=True)
    (base / "cgroup.subtree_control").write_text("cpu memory pids\n")
    oom = (f"import glob, time; [d] = glob.glob({str(base)!r} + '/autotune-trial-*'); "
           "open(d + '/memory.events', 'a').write('low 0\\noom 1\\noom_kill 1\\n'); "
           "time.sleep(300)")
    done = run_bounded([sys.executable, "-c", oom], {**os.environ, "AUTOTUNE_CGROUP_ROOT":
                                                      str(root)}, tmp_path, 60,
                       memory_limit_bytes=300 * 2**20)
    assert not done.timed_out and done.returncode == MEMORY_EXIT, done.stderr
    assert "the kernel's cgroup memory controller killed it" in done.stderr
    [trial] = base.glob("autotune-trial-*")
    assert (trial / "memory.max").read_text() == str(300 * 2**20)
    assert (trial / "memory.swap.max").read_text() == "0"


def test_the_guard_takes_its_group_down_and_removes_the_scratch_when_its_parent_dies(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    pid_file = tmp_path / "grandchild.pid"
    child = ("import subprocess, time; p = subprocess.Popen(['sleep', '300']); "
             f"open({str(pid_file)!r}, 'w').write(str(p.pid)); time.sleep(300)")
    # A parent that starts the guard and then dies by SIGKILL, as a killed study would.
    parent = subprocess.Popen([sys.executable, "-c", "\n".join([
        "import os, subprocess, sys, time",
        "from autotune.ground.guard import argv_for",
        f"argv = argv_for(os.getpid(), None, {str(scratch)!r}, [sys.executable, '-c', {child!r}])",
        "subprocess.Popen(argv, start_new_session=True)",
        "time.sleep(300)"])])
    deadline = time.monotonic() + 30
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    grandchild = int(pid_file.read_text())
    parent.kill()
    parent.wait()
    # The guard kills the group first and removes the scratch after: wait for both.
    deadline = time.monotonic() + 10
    while ((Path(f"/proc/{grandchild}").exists() or scratch.exists())
           and time.monotonic() < deadline):
        time.sleep(0.1)
    assert not Path(f"/proc/{grandchild}").exists()
    assert not scratch.exists()


DAEMON = ("import subprocess, sys, time; p = subprocess.Popen(['sleep', '300'], "
          "start_new_session=True); open(sys.argv[1], 'w').write(str(p.pid)); "
          "time.sleep(float(sys.argv[2]))")


@pytest.mark.parametrize("child_s", [300, 0.5], ids=["timeout", "child-ended"])
def test_a_grandchild_that_left_the_session_dies_with_the_trial(tmp_path, child_s):
    """A trial's grandchild started with setsid survived the timeout kill (issue 31); one the
    child leaves behind when it ends must not outlive the trial either."""
    pid_file = tmp_path / "daemon.pid"
    done = run_bounded([sys.executable, "-c", DAEMON, str(pid_file), str(child_s)],
                       os.environ, tmp_path, 5)
    assert done.timed_out is (child_s == 300), done.stderr
    daemon = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{daemon}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{daemon}").exists()


def test_nothing_forks_with_preexec_fn():
    """`preexec_fn` is unsafe once another thread (a heartbeat) runs: the guard replaced it."""
    sources = [p for p in (ROOT / "autotune").rglob("*.py") if "preexec_fn=" in p.read_text()]
    assert sources == []
