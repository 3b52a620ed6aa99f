"""`python -m autotune.ground.local_launch -n N -- CMD...`: N copies of CMD here, as one job.

The smallest cluster launcher, for multi-process trials on one host
(`--launcher "python -m autotune.ground.local_launch -n 2 -- {cmd}"`) and for
their tests. It picks a free TCP port and starts N copies of CMD (no shell),
copy k with the environment plus JAX_COORDINATOR_ADDRESS=127.0.0.1:PORT,
JAX_NUM_PROCESSES=N and JAX_PROCESS_ID=k, the variables
`jax.distributed.initialize` takes. It waits for all of them and ends as
the first copy that failed ended (its exit code, or death by its signal),
else with 0. Once one copy fails it SIGKILLs the others at once: they would
wait for the failed one in their collectives forever (a JAX process catches
SIGTERM, so nothing softer is sure to work).

The copies stay in the launcher's process group: the trial's guard
(`autotune.ground.guard`) and its timeout kill that whole group, copies included.
On SIGTERM, SIGHUP or SIGINT the launcher SIGKILLs its copies and exits
with 128 + the signal's number.

Standard library only (and `autotune.ground.guard`, which is too).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from collections.abc import Sequence

from autotune.ground.guard import end_as

#: Exit code when the command line is wrong.
USAGE = 2
#: Exit code when CMD cannot be started (as a shell says it).
EXEC_FAILED = 127
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now (the OS's pick; another program may take it
    before the coordinator binds it, which is unlikely)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def parse_args(argv: Sequence[str]) -> tuple[int, list[str]]:
    """`-n N -- CMD...` (also `-nN`, `--nprocs N`) as (N, CMD).

    Raises:
        ValueError: N missing, not a whole number of at least 1, or no CMD after `--`.
    """
    args = list(argv)
    if "--" not in args:
        raise ValueError("expected -n N -- CMD...")
    cut = args.index("--")
    opts, cmd = args[:cut], args[cut + 1:]
    count: str | None = None
    if len(opts) == 2 and opts[0] in ("-n", "--nprocs"):
        count = opts[1]
    elif len(opts) == 1 and opts[0].startswith("-n") and len(opts[0]) > 2:
        count = opts[0][2:]
    if count is None or not count.isdigit() or int(count) < 1:
        raise ValueError(f"expected -n N (a whole number of at least 1) before --, got {opts}")
    if not cmd:
        raise ValueError("no command after --")
    return int(count), cmd


def process_env(base: dict[str, str], port: int, count: int, rank: int) -> dict[str, str]:
    """The environment of copy `rank`: `base` plus the variables of `jax.distributed`."""
    return {**base, "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
            "JAX_NUM_PROCESSES": str(count), "JAX_PROCESS_ID": str(rank)}


def _kill(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def run(count: int, cmd: Sequence[str]) -> int:
    """Start `count` copies of `cmd`, wait for all; the wait status of the first that
    failed (0 when none did). A copy that cannot start counts as exit code 127."""
    port = free_port()
    live: dict[int, int] = {}  # pid -> rank, of the copies not reaped yet

    def stop(signum: int, frame: object) -> None:
        _kill(list(live))
        _reap(live)
        os._exit(128 + signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)
    for rank in range(count):
        try:
            pid = os.posix_spawnp(cmd[0], list(cmd), process_env(dict(os.environ), port,
                                                                 count, rank))
        except OSError as exc:
            sys.stderr.write(f"autotune.ground.local_launch: cannot run {cmd[0]}: {exc}\n")
            _kill(list(live))
            _reap(live)
            return EXEC_FAILED << 8
        live[pid] = rank
    first = 0
    while live:
        pid, status = os.wait()
        if live.pop(pid, None) is None:
            continue
        if status != 0 and first == 0:
            first = status
            _kill(list(live))
    return first


def _reap(live: dict[int, int]) -> None:
    """Wait for every copy in `live` (killed already) so none is left a zombie."""
    with contextlib.suppress(ChildProcessError):
        while live:
            pid, _ = os.wait()
            live.pop(pid, None)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point (see the module docstring); never returns."""
    try:
        count, cmd = parse_args(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        sys.stderr.write(f"usage: python -m autotune.ground.local_launch -n N -- CMD...: {exc}\n")
        sys.stdout.flush()
        os._exit(USAGE)
    end_as(run(count, cmd))


if __name__ == "__main__":
    main()
