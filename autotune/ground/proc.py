"""Run a child process safely (bottom layer: imports only `autotune.ground.guard`).

Used by the trial launcher and by the flag probe. A child runs without a shell,
in its own session, under a hard time limit, behind a guard (`autotune.ground.guard`)
that takes it down when this process dies, however it dies; on timeout its
whole process group is killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from autotune.ground.guard import KILL_SIGNAL, argv_for

TAIL_BYTES = 4000


def _tail(path: Path) -> str:
    data = path.read_bytes() if path.exists() else b""
    return data[-TAIL_BYTES:].decode("utf-8", errors="replace")


def _head(path: Path, size: int = 64_000) -> str:
    with open(path, "rb") as fh:
        return fh.read(size).decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Finished:
    returncode: int | None
    timed_out: bool
    duration_s: float
    stdout: str
    stderr: str
    stderr_head: str = ""


def run_bounded(argv: list[str], env: Mapping[str, str], cwd: Path, timeout_s: float,
                memory_limit_bytes: int | None = None, workdir: Path | None = None,
                scratch: Path | None = None) -> Finished:
    """Run `argv` without a shell, in its own session, under a hard time limit.

    On timeout the guard kills the child's group and every descendant
    (`_kill_group`). stdout and stderr go to files in `cwd` so a chatty child
    cannot block on a full pipe.
    `memory_limit_bytes` caps the resident memory of the child and its
    descendants (the guard watches it and kills them above it), so a
    configuration that needs too much memory fails alone instead of taking the
    machine down. The logs go to `cwd`; the child runs in `workdir` (default `cwd`).

    The child runs behind `autotune.ground.guard`: if this process dies (SIGKILL
    included) the guard kills the child's whole group and removes `scratch`.
    The kernel ties that to the thread that forks, so call this from a thread
    that outlives the child (the main thread). Nothing here uses `preexec_fn`,
    which is unsafe once another thread (a heartbeat) runs.
    """
    out_path, err_path = cwd / "stdout.txt", cwd / "stderr.txt"
    start = time.monotonic()
    guarded = argv_for(os.getpid(), memory_limit_bytes, scratch, argv)
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            guarded, env=dict(env), cwd=workdir or cwd, stdout=out, stderr=err,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
        except BaseException:  # Ctrl-C in the parent: take the child down too
            _kill_group(proc)
            raise
    return Finished(
        returncode=None if timed_out else proc.returncode,
        timed_out=timed_out,
        duration_s=time.monotonic() - start,
        stdout=_tail(out_path),
        stderr=_tail(err_path),
        stderr_head=_head(err_path),
    )


def process_alive(pid: int) -> bool:
    """Whether process `pid` of this machine runs (a zombie, dead but not reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc (not Linux): kill(0) said it exists
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


#: Seconds the guard gets to kill its child's group and descendants before its whole group
#: is killed (the guard with it).
GUARD_GRACE_S = 5.0


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop a guarded child: `guard.KILL_SIGNAL` to the guard, which kills the child's group
    and every descendant (also one that left the group with `setsid`), leaving the logs;
    then, after `GUARD_GRACE_S` at most, SIGKILL to whatever is left of the group."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, KILL_SIGNAL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=GUARD_GRACE_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


#: The signals that stop a study the way Ctrl-C does.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A stop signal (SIGINT, SIGTERM or SIGHUP), raised like Ctrl-C; `signum` says which.

    A KeyboardInterrupt, so every `except BaseException` that cleans up after
    Ctrl-C (kill the trial's process group, mark the trial interrupted)
    cleans up after SIGTERM and SIGHUP too.
    """

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


#: The stop signal that `interrupt_latch`'s handler received (raised or not), None
#: when none; only that handler sets it, and the latch clears it on both ends.
_received: list[int] = []


@contextlib.contextmanager
def _stop_handler(handler: Callable[[int, object], None]) -> Iterator[None]:
    """`handler` answers every stop signal for the block (main thread only: elsewhere,
    nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def _latch(signum: int, frame: object) -> None:
    _received.append(signum)
    raise Interrupted(signum)


@contextlib.contextmanager
def interrupt_latch() -> Iterator[None]:
    """A stop signal raises `Interrupted` (a KeyboardInterrupt) and is also remembered.

    Python drops an exception raised inside a garbage-collection callback
    ("Exception ignored in: ..."); a Ctrl-C that lands there would be lost and
    the study would run on (seen: SQLAlchemy's `_collection_gced`). Long loops
    call `raise_if_interrupted` between trials so such a signal still stops
    them. Outside the main thread it does nothing.
    """
    _received.clear()
    try:
        with _stop_handler(_latch):
            yield
    finally:
        _received.clear()


def raise_if_interrupted() -> None:
    """Raise `Interrupted` if `interrupt_latch` saw a stop signal that was swallowed."""
    if _received:
        raise Interrupted(_received[0])


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold stop signals back until the block ends, then raise `Interrupted`.

    For short bookkeeping (a trial created, a result recorded and told) that
    must not be cut in half. Outside the main thread it does nothing. The
    held signal is raised when the block ends, so it is never lost and is not
    remembered by `interrupt_latch` (which would stop a later loop with it).
    """
    received: list[int] = []
    with _stop_handler(lambda signum, frame: received.append(signum)):
        yield
    if received:
        raise Interrupted(received[0])
