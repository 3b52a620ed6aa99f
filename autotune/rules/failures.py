"""Failure classification: which taxonomy kind a failed trial is, and the message why.

A bad configuration is a result, not an exception (docs/ARCHITECTURE.md, "Failure
taxonomy"). Three places see a failure, and each asks this module:

- the trial child, which catches what JAX/XLA raised (`classify_exception`);
- the parent, which reads how the child process ended (`classify_exit`);
- the flag probe, which reads XLA's abort messages (`classify_stderr`).

Pure and standard library only (beyond `records`): both sides import it, and
its rules are tested in-process.
"""

from __future__ import annotations

import re
import signal

from autotune.ground.records import OutcomeKind

Classified = tuple[OutcomeKind, str]

_UNKNOWN_FLAG = re.compile(r"Unknown flags? in (?:XLA_FLAGS|LIBTPU_INIT_ARGS): ?(.*)")
_ILLEGAL_VALUE = re.compile(r"Illegal value for (--\S+) ('[^']*')")
_UNINTERPRETABLE = re.compile(r"Couldn't interpret value (\S*) for flag (\S+?)\.?$", re.M)
_OOM = re.compile(r"RESOURCE_EXHAUSTED|Out of memory|std::bad_alloc|MemoryError|Cannot allocate")
#: The dynamic loader's words when mmap fails under RLIMIT_AS (glibc's ld.so, verbatim).
_MAP_FAILURE = re.compile(r"failed to map segment from shared object")
#: The longest OOM line quoted in a message.
OOM_LINE_CHARS = 300
#: A memory limit below this cannot hold a trial child at all: CPython 3.11 holds
#: 8 MiB resident once started, and importing JAX and running one op brings a
#: child to 195 MiB (x86-64, jaxlib 0.10.2, measured with `ru_maxrss`). (When the
#: limit was an address-space one, RLIMIT_AS, the loader failed to map libpython
#: or libc under 8 MiB, and CPython died of MemoryError at 12 MiB.)
STARTUP_FLOOR_BYTES = 64 * 2**20


def classify_stderr(stderr: str) -> Classified | None:
    """XLA's flag-parsing aborts in a process's stderr: an unknown flag or an illegal value.

    Returns None when stderr holds neither.
    """
    if match := _UNKNOWN_FLAG.search(stderr):
        return OutcomeKind.UNKNOWN_FLAG, f"XLA does not know: {match.group(1).strip()}"
    if match := _ILLEGAL_VALUE.search(stderr):
        return OutcomeKind.INVALID_VALUE, f"illegal value {match.group(2)} for {match.group(1)}"
    if match := _UNINTERPRETABLE.search(stderr):
        flag = match.group(2)
        return OutcomeKind.INVALID_VALUE, f"illegal value '{match.group(1)}' for --{flag}"
    return None


def looks_like_oom(stderr: str) -> str | None:
    """The first line of `stderr` that says memory ran out (stripped, at most 300 chars)."""
    for line in stderr.splitlines():
        if _OOM.search(line):
            return line.strip()[:OOM_LINE_CHARS]
    return None


def signal_name(signum: int) -> str:
    """`SIGKILL` for 9; `signal N` for a number that is no signal."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def classify_exception(exc: BaseException) -> Classified:
    """What an exception raised while compiling or running a step means.

    `compiler_options` naming an option XLA lacks is `unknown_flag`; memory
    exhaustion is `oom` (a shared library the loader could not map under the
    trial's memory limit too); an INVALID_ARGUMENT about an option is
    `invalid_value`; anything else is `compile_error`. The message is
    `"TypeName: text"`.
    """
    text = f"{type(exc).__name__}: {exc}"
    if "No such compile option" in text:
        return OutcomeKind.UNKNOWN_FLAG, text
    if ("RESOURCE_EXHAUSTED" in text or "Out of memory" in text or isinstance(exc, MemoryError)
            or _MAP_FAILURE.search(text)):
        return OutcomeKind.OOM, text
    if "INVALID_ARGUMENT" in text and "option" in text.lower():
        return OutcomeKind.INVALID_VALUE, text
    return OutcomeKind.COMPILE_ERROR, text


def classify_exit(returncode: int | None, timed_out: bool, stderr: str,
                  timeout_s: float, memory_limit_bytes: int | None = None) -> Classified | None:
    """How a child process ended, when that alone decides the outcome.

    In order: a timeout; XLA's flag aborts in stderr (whatever the exit code);
    a failed child whose memory limit (`memory_limit_bytes`, None: no
    limit) was too small, see `limit_too_small`; a non-zero exit with an
    out-of-memory line; death by a signal (a negative `returncode`). None
    means the result file decides (or its absence: `crashed`).
    """
    if timed_out:
        return OutcomeKind.TIMEOUT, (f"no result within {timeout_s:g} s; "
                                     "the process group was killed")
    if flagged := classify_stderr(stderr):
        return flagged
    if returncode != 0 and (small := limit_too_small(returncode, stderr, memory_limit_bytes)):
        return OutcomeKind.OOM, small
    if returncode != 0 and (line := looks_like_oom(stderr)):
        return OutcomeKind.OOM, f"out of memory: {line}"
    if returncode is not None and returncode < 0:
        message = f"the child was killed by {signal_name(-returncode)}"
        if -returncode == signal.SIGKILL:
            message += " (the kernel's out-of-memory killer sends this too)"
        return OutcomeKind.CRASHED, message
    return None


def limit_too_small(returncode: int | None, stderr: str, limit: int | None) -> str | None:
    """Why a child that failed could not live within its memory `limit`, or None.

    It could not when the loader failed to map a shared library (whatever the
    limit), or when the limit lies below `STARTUP_FLOOR_BYTES` (the child died
    before it could run: under the smallest limits the kernel kills the exec
    with SIGSEGV and nothing is printed). The message names the limit and says
    which option raises it. None without a limit. The caller has checked that
    the child failed (`returncode` non-zero).
    """
    if limit is None:
        return None
    mapped = next((ln.strip() for ln in stderr.splitlines() if _MAP_FAILURE.search(ln)), None)
    if mapped is None and limit >= STARTUP_FLOOR_BYTES:
        return None
    why = (mapped or looks_like_oom(stderr) or _silent_end(returncode, stderr))[:OOM_LINE_CHARS]
    return (f"the trial memory limit ({size_words(limit)}) is too small for the child to "
            f"start: {why}; raise --trial-memory-limit")


def _silent_end(returncode: int | None, stderr: str) -> str:
    """How a child ended, in words, for a child that printed no out-of-memory line."""
    how = (f"killed by {signal_name(-returncode)}" if returncode is not None and returncode < 0
           else f"exit code {returncode}")
    last = (stderr.strip().splitlines() or [""])[-1].strip()
    return f"{how}, {'last printed: ' + last if last else 'nothing printed'}"


def size_words(n: int) -> str:
    """A byte count as the user would write it: `1 KiB` for 1024, `1500 bytes` for 1500."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} bytes"
