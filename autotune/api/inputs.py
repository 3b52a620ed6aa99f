"""The user's words checked before a study is planned: a choice among names, the workload
(a benchmark, a file or a command), and a size option."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.ground.errors import UsageError

if TYPE_CHECKING:
    from autotune.launch.workloads import WorkloadInfo


def one_of(value: str, choices: Any, noun: str) -> str:
    """`value` if it is one of `choices`; UsageError naming every choice otherwise."""
    known = list(choices)
    if value not in known:
        raise UsageError(f"unknown {noun} '{value}'. Known {noun}s: {', '.join(known)}")
    return value


def resolve_workload(benchmark: str, script: str | Path | None,
              command: str | None) -> tuple[WorkloadInfo, tuple[str, ...] | None]:
    """The workload to tune: a built-in benchmark, the user's file, or the user's program.

    Raises:
        UsageError: both `script` and `command`; a command that does not
            parse, is empty, or whose program cannot be run (see `_check_program`).
    """
    from autotune.launch import workloads

    if script is not None and command is not None:
        raise UsageError("give --script or --command, not both")
    if script is not None:
        return workloads.resolve_script(str(script)), None
    if command is not None:
        argv = _command_argv(command)
        return workloads.command_info(argv), argv
    return workloads.resolve_benchmark(benchmark), None


def _command_argv(command: str) -> tuple[str, ...]:
    """The command split like a shell would (never run by one), its program checked runnable."""
    try:
        argv = tuple(shlex.split(command))
    except ValueError as exc:
        raise UsageError(f"--command does not parse: {exc}") from None
    if not argv:
        raise UsageError("--command is empty; give the program to run")
    _check_program(argv[0])
    return argv


def _check_program(program: str) -> None:
    """Return if the launcher can execute `program`, else raise UsageError saying what to do.

    It is resolved as the launcher's exec will: a bare name on PATH, a name with
    a slash as a path relative to the current folder (each trial runs there).
    Only whether it can start is checked, not what it does; nothing is written.
    """
    if shutil.which(program) is not None:
        return
    head = f"program '{program}' of --command"
    path = Path(program)
    if os.sep not in program and (os.altsep is None or os.altsep not in program):
        here = f"; to run the file in this folder, write ./{program}" if path.is_file() else ""
        raise UsageError(f"{head} is not found on PATH: install it, or give its path{here}")
    if not path.exists():
        raise UsageError(f"{head} does not exist: check the path, which is relative to the "
                         f"current folder {Path.cwd()}")
    if path.is_dir():
        raise UsageError(f"{head} is a directory, not a program: give the program's path")
    raise UsageError(f"{head} is not executable: make it executable (chmod +x "
                     f"{shlex.quote(program)}), or put its interpreter first in --command")


def size_option(text: str | None, option: str) -> int | None:
    """A size option (`12GiB`) in bytes; None stays None.

    Raises:
        UsageError: not a size, or not above 0 bytes.
    """
    from autotune.spaces import parse_size  # here: the CLI imports this module at start

    if text is None:
        return None
    try:
        size = parse_size(text)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{option} '{text}' is not a size like 16GiB: {exc}") from None
    if size <= 0:
        raise UsageError(f"{option} '{text}' must be more than 0 bytes")
    return size
