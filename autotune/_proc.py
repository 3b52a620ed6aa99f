"""Run a child process safely (bottom layer: no autotune imports).

Used by the trial launcher and by the flag probe. A child runs without a shell,
in its own session, under a hard time limit; on timeout its whole process
group is killed.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

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
                memory_limit_bytes: int | None = None, workdir: Path | None = None) -> Finished:
    """Run `argv` without a shell, in its own session, under a hard time limit.

    On timeout the whole process group is killed with SIGKILL. stdout and stderr
    go to files in `cwd` so a chatty child cannot block on a full pipe.
    `memory_limit_bytes` caps the child's address space (RLIMIT_AS), so a
    configuration that needs too much memory fails alone instead of taking the
    machine down. The logs go to `cwd`; the child runs in `workdir` (default `cwd`).
    """
    out_path, err_path = cwd / "stdout.txt", cwd / "stderr.txt"
    start = time.monotonic()
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            argv, env=dict(env), cwd=workdir or cwd, stdout=out, stderr=err,
            stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=_limit_memory(memory_limit_bytes),
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


def _limit_memory(limit: int | None) -> Callable[[], None] | None:
    if limit is None:
        return None

    def apply() -> None:  # runs in the child between fork and exec
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


#: Set by `interrupt_latch`'s handler: a Ctrl-C was received (raised or not); only
#: that handler sets it, and the latch clears it on both ends.
_interrupted = threading.Event()


@contextlib.contextmanager
def _sigint_handler(handler: Callable[[int, object], None]) -> Iterator[None]:
    """`handler` answers SIGINT for the block (main thread only: elsewhere, nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _latch(signum: int, frame: object) -> None:
    _interrupted.set()
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupt_latch() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt as usual and is also remembered.

    Python drops an exception raised inside a garbage-collection callback
    ("Exception ignored in: ..."); a Ctrl-C that lands there would be lost and
    the study would run on (seen: SQLAlchemy's `_collection_gced`). Long loops
    call `raise_if_interrupted` between trials so such a Ctrl-C still stops
    them. Outside the main thread it does nothing.
    """
    _interrupted.clear()
    try:
        with _sigint_handler(_latch):
            yield
    finally:
        _interrupted.clear()


def raise_if_interrupted() -> None:
    """Raise KeyboardInterrupt if `interrupt_latch` saw a Ctrl-C that was swallowed."""
    if _interrupted.is_set():
        raise KeyboardInterrupt


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold Ctrl-C back until the block ends, then raise KeyboardInterrupt.

    For short bookkeeping (a trial created, a result recorded and told) that
    must not be cut in half. Outside the main thread it does nothing. The
    held Ctrl-C is raised when the block ends, so it is never lost and is not
    remembered by `interrupt_latch` (which would stop a later loop with it).
    """
    received: list[int] = []
    with _sigint_handler(lambda signum, frame: received.append(signum)):
        yield
    if received:
        raise KeyboardInterrupt
