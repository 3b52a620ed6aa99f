"""What a signal to `autotune study` leaves behind: trial processes, scratch folders, trials.

For each signal (SIGTERM, SIGHUP, SIGINT, SIGKILL) this starts a real study
whose workload never finishes building and starts a grandchild process
(`tests/workloads/hang.py`), waits until the trial child has run for a second,
signals the study's process, waits 5 seconds and counts:

- trial processes still alive (any process whose environment names the
  study's scratch folder, children of the trial included);
- `autotune-trial-*` scratch folders left in that folder;
- Optuna trials left RUNNING and runs marked `interrupted`, after the next
  start of the same study (which is what marks a SIGKILLed trial).

Usage: python benchmarks/scripts/kill_check.py [SIGNAL ...]

`tests/test_interrupt.py` drives the same functions and asserts that nothing
is left.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HANG = Path(__file__).resolve().parents[2] / "tests" / "workloads" / "hang.py"
STUDY = ["study", "--script", str(HANG), "--preset", "tiny", "--devices", "1",
         "--steps", "5", "--warmup", "1", "--seed", "3", "--confirm", "0",
         "--space", "cpu", "--trials", "3", "--timeout-per-trial", "20"]


@dataclass(frozen=True)
class Leftovers:
    """What one signal left behind, 5 seconds after it was sent."""

    processes: int
    scratch_dirs: int
    exit_code: int | None


def start_study(folder: Path, *extra: str) -> subprocess.Popen[bytes]:
    """`autotune study` in `folder`, its trial scratch folders under `folder/scratch`."""
    scratch = folder / "scratch"
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(scratch), "HANG_PID_FILE": str(folder / "hang.pid")}
    cmd = [sys.executable, "-c", "from autotune.cli import main; main()", *STUDY, *extra]
    return subprocess.Popen(cmd, cwd=folder, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def trial_processes(folder: Path) -> list[int]:
    """Live processes whose environment names `folder`'s scratch folder (zombies left out)."""
    marker = f"TMPDIR={folder / 'scratch'}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in environ.split(b"\0") and state != "Z":
            found.append(int(entry.name))
    return found


def children_of(pid: int, folder: Path) -> list[int]:
    """The trial processes of `folder` other than the study process itself."""
    return [p for p in trial_processes(folder) if p != pid]


def wait_for_trial(proc: subprocess.Popen[bytes], folder: Path, timeout_s: float = 120) -> None:
    """Block until the study's trial child has started its grandchild and runs on."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (folder / "hang.pid").exists() and children_of(proc.pid, folder):
            time.sleep(1.0)
            return
        if proc.poll() is not None:
            raise RuntimeError(f"the study ended early: {proc.stderr.read().decode()[-2000:]}"
                               if proc.stderr else "the study ended early")
        time.sleep(0.2)
    raise TimeoutError("no trial child started in time")


def signal_and_count(proc: subprocess.Popen[bytes], folder: Path, signum: int,
                     wait_s: float = 5.0) -> Leftovers:
    """Send `signum` to the study, count what is left `wait_s` seconds later."""
    counted_at = time.monotonic() + wait_s
    proc.send_signal(signum)
    try:
        proc.wait(timeout=wait_s)  # reap the study as soon as it exits (no zombie counted)
    except subprocess.TimeoutExpired:
        pass
    time.sleep(max(0.0, counted_at - time.monotonic()))
    left = Leftovers(len(children_of(proc.pid, folder)),
                     len(list((folder / "scratch").glob("autotune-trial-*"))), proc.poll())
    for pid in trial_processes(folder):  # leave the machine clean whatever happened
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if proc.poll() is None:
        proc.kill()
    proc.communicate()
    return left


def count_rows(folder: Path, query: str) -> int:
    """One integer from the study's SQLite file (0 while it has no such table)."""
    db = folder / "autotune.db"
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db) as conn:
            return int(conn.execute(query).fetchone()[0])
    except sqlite3.OperationalError:
        return 0


def main(names: list[str]) -> None:
    signals = [signal.Signals[n] for n in names] or [signal.SIGTERM, signal.SIGHUP,
                                                    signal.SIGINT, signal.SIGKILL]
    print(f"{'signal':8} {'exit':>5} {'trial procs':>11} {'scratch':>7} "
          f"{'RUNNING':>7} {'interrupted':>11}")
    for signum in signals:
        with tempfile.TemporaryDirectory(prefix="autotune-kill-") as tmp:
            folder = Path(tmp)
            proc = start_study(folder)
            wait_for_trial(proc, folder)
            left = signal_and_count(proc, folder, signum)
            again = start_study(folder)  # the next start marks a dead trial interrupted
            again.communicate(timeout=300)
            running = count_rows(folder, "select count(*) from trials where state='RUNNING'")
            interrupted = count_rows(folder, "select count(*) from trial_user_attributes "
                                     "where key='outcome' and value_json='\"interrupted\"'")
            print(f"{signum.name:8} {left.exit_code!s:>5} {left.processes:>11} "
                  f"{left.scratch_dirs:>7} {running:>7} {interrupted:>11}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
