"""The guard of one child process: it runs the child and takes it down with the parent.

`_proc.run_bounded` starts `python -m autotune.ground.guard PARENT LIMIT SCRATCH -- ARGV...`
as the leader of a new process group, in place of ARGV. The guard

- asks the kernel for SIGTERM when the parent dies (Linux `PR_SET_PDEATHSIG`),
  so even a SIGKILLed `autotune study` leaves no trial behind; it exits at
  once if the parent is gone already;
- becomes a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`): a descendant that
  left the group and the session (`setsid`) and lost its parent is adopted by
  the guard, not by init, so it is still found among the guard's descendants;
- forks ARGV and waits for it, watching the resident memory of the child and
  its descendants against LIMIT (bytes, or `-`): above it, everything is killed
  and the guard exits `MEMORY_EXIT` with an "Out of memory" line on stderr (an
  `oom` outcome). Resident memory, not address space: XLA reserves far more
  address space than it uses (an address-space limit of 1 GiB aborted a
  trivial JAX program with std::bad_alloc). Where the machine allows it, the
  kernel counts it too: the child runs in a cgroup of its own made under the
  guard's (`MemoryCgroup`: cgroup v2 `memory.max`, else v1
  `memory.limit_in_bytes`), and an OOM kill there ends the trial the same way;
  the cgroup's processes are killed with the rest and the cgroup removed;
- on SIGTERM, SIGHUP or SIGINT kills every other process of its group and every
  descendant with SIGKILL, removes SCRATCH (a folder, or `-`) and exits; on
  `KILL_SIGNAL` (the parent's timeout: it reads the logs in SCRATCH and cleans
  up itself) the same, leaving SCRATCH;
- otherwise kills what ARGV left running (descendants that outlived it) and
  ends as ARGV ended: the same exit code, or death by the same signal, so the
  parent classifies the child and never the guard.

Standard library only: it starts before anything else and must stay small.
"""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import os
import resource
import shutil
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

PR_SET_PDEATHSIG = 1
"""prctl(2) option: the signal this process gets when its parent thread exits."""

PR_SET_CHILD_SUBREAPER = 36
"""prctl(2) option: orphaned descendants are reparented to this process, not to init."""

#: Signals on which the guard takes its group down and cleans up.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)

#: The signal with which a live parent asks the guard to kill everything and leave SCRATCH.
KILL_SIGNAL = signal.SIGUSR1

#: Exit code of a guard that killed its child for using more memory than its limit.
MEMORY_EXIT = 125

#: Seconds between two looks at the child's resident memory (with a limit).
MEMORY_POLL_S = 0.1

#: Where a cgroup holds the limit, the resident watch is a backstop above it: it trips at
#: the limit plus this share of it. The kernel charges a page shared by two processes
#: once and the resident sum counts it in each, so at the limit itself the watch could
#: fire first (seen: 210,894,848 resident bytes against a 200 MiB cgroup that had not
#: killed yet: two Pythons' shared libraries counted twice).
CGROUP_BACKSTOP = 0.25

#: Exit code when ARGV cannot be executed at all (as a shell says it).
EXEC_FAILED = 127

#: Where the kernel's cgroup hierarchies are mounted; the variable `AUTOTUNE_CGROUP_ROOT`
#: names another place (a test's), and set empty it turns the cgroup off (the resident
#: memory watch alone then).
CGROUP_ROOT = "/sys/fs/cgroup"


class MemoryCgroup:
    """A cgroup of the trial's own, under the guard's, whose memory the kernel limits.

    Made with `make` where the machine allows it: a cgroup v2 hierarchy whose
    memory controller is enabled for the guard's cgroup's children (it is in
    `cgroup.subtree_control`, as in a container's own cgroup namespace or a
    delegated systemd unit), or a writable cgroup v1 memory hierarchy. Elsewhere
    (no permission, no controller, not Linux) `make` gives None and the resident
    memory watch alone holds the limit.
    """

    def __init__(self, path: Path, version: int) -> None:
        self.path, self.version = path, version

    @classmethod
    def make(cls, limit: int) -> MemoryCgroup | None:
        """A new cgroup limited to `limit` bytes (swap not counted where it can say so), or
        None where no cgroup can be made."""
        root = os.environ.get("AUTOTUNE_CGROUP_ROOT", CGROUP_ROOT)
        if not root:
            return None
        for version, base in _own_cgroups(Path(root)):
            path = base / f"autotune-trial-{os.getpid()}"
            try:
                path.mkdir()
            except OSError:
                continue
            made = cls(path, version)
            try:
                made._limit(limit)
            except OSError:
                made.remove()
                continue
            return made
        return None

    def _limit(self, limit: int) -> None:
        if self.version == 2:
            (self.path / "memory.max").write_text(str(limit))
            with contextlib.suppress(OSError):  # no swap accounting: nothing to turn off
                (self.path / "memory.swap.max").write_text("0")
        else:
            (self.path / "memory.limit_in_bytes").write_text(str(limit))

    def enter(self) -> None:
        """Move the calling process into the cgroup (the forked child, before it execs:
        system calls only). A refusal leaves it where it was, under the memory watch."""
        with contextlib.suppress(OSError):
            fd = os.open(self.path / "cgroup.procs", os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

    def members(self) -> list[int]:
        """The processes in the cgroup now."""
        with contextlib.suppress(OSError, ValueError):
            return [int(line) for line in (self.path / "cgroup.procs").read_text().split()]
        return []

    def oom_kills(self) -> int:
        """How many processes the kernel killed in the cgroup for its memory limit."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        with contextlib.suppress(OSError, ValueError):
            for line in (self.path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def remove(self) -> None:
        """Remove the cgroup (the kernel refuses while a process is in it: then it stays)."""
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.02)


def _own_cgroups(root: Path) -> list[tuple[int, Path]]:
    """Where this process's own cgroups are, per hierarchy whose memory controller a child
    cgroup can use: (2, the v2 folder) when `memory` is in its `cgroup.subtree_control`,
    then (1, the v1 memory folder) when it exists."""
    found: list[tuple[int, Path]] = []
    with contextlib.suppress(OSError):
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        for line in lines:
            _, controllers, path = line.split(":", 2)
            if controllers == "":
                base = root / path.lstrip("/")
                with contextlib.suppress(OSError):
                    if "memory" in (base / "cgroup.subtree_control").read_text().split():
                        found.insert(0, (2, base))
            elif "memory" in controllers.split(","):
                base = root / "memory" / path.lstrip("/")
                if base.is_dir():
                    found.append((1, base))
    return found


def argv_for(parent: int, limit: int | None, scratch: Path | None,
             argv: Sequence[str]) -> list[str]:
    """The command line that runs `argv` under a guard for `parent` (see the module docstring).

    `-P`: the child's working folder (a user's, for `--command`) is not put on
    `sys.path`, so a folder there named `autotune` cannot stand in for this package.
    """
    return [sys.executable, "-P", "-m", "autotune.ground.guard", str(parent),
            "-" if limit is None else str(limit), "-" if scratch is None else str(scratch),
            "--", *argv]


def _prctl(option: int, value: int) -> None:
    """prctl(2) on Linux; nothing elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def die_with_parent(signum: int) -> None:
    """Ask Linux to send `signum` to this process when its parent exits (elsewhere: nothing)."""
    _prctl(PR_SET_PDEATHSIG, int(signum))


def end_after_parent(parent: int, grace_s: float, poll_s: float = 1.0) -> threading.Thread:
    """Start a daemon thread that ends this process `grace_s` seconds after process `parent`
    stopped being its parent, should it still run then: a bound on a stop that hangs, which
    the signal of `die_with_parent` alone does not give (a main thread stuck where the
    signal's exception is lost or a lock never comes free). It writes one line and every
    thread's stack to stderr (where it waited), then exits with status 1 at once
    (`os._exit`: no clean-up runs; children that `die_with_parent` follow)."""
    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        time.sleep(grace_s)
        sys.stderr.write(f"autotune: the process {parent} that started this one ended "
                         f"{grace_s:g} s ago and this one had not stopped; ending it now, "
                         "where each thread waited:\n")
        sys.stderr.flush()
        faulthandler.dump_traceback(all_threads=True)
        os._exit(1)

    thread = threading.Thread(target=watch, name="autotune-parent-watch", daemon=True)
    thread.start()
    return thread


def become_subreaper() -> None:
    """Adopt this process's orphaned descendants (Linux; elsewhere nothing)."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def descendants(root: int) -> list[int]:
    """Every live process whose chain of parents leads to `root` (read from /proc)."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{entry.name}/stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def group_members(pgid: int) -> list[int]:
    """Processes of the group `pgid` other than this one (read from /proc)."""
    me, members = os.getpid(), []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit() and int(entry.name) != me:
                with contextlib.suppress(OSError):
                    if os.getpgid(int(entry.name)) == pgid:
                        members.append(int(entry.name))
    return members


def kill_group_but_me(child: int | None, cgroup: MemoryCgroup | None = None) -> None:
    """SIGKILL the child, every other process of this group and every descendant (one that
    left the group with `setsid` too) and of the trial's `cgroup`, until none is left
    (≤ 2 s)."""
    if child is not None and child > 0:  # never os.kill(-1, ...): that is every process
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    pgid, me = os.getpgid(0), os.getpid()
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        members = set(group_members(pgid)) | set(descendants(me))
        if cgroup is not None:
            members |= set(cgroup.members())
        members.discard(me)
        if not members:
            return
        for pid in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:  # reap ours so they leave /proc
                pass
        time.sleep(0.02)


def resident_bytes(pids: Sequence[int]) -> int:
    """The resident memory of `pids` together, in bytes (processes gone meanwhile: 0)."""
    page, total = os.sysconf("SC_PAGE_SIZE"), 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError, IndexError):
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
    return total


def wait_within(child: int, limit: int | None, cgroup: MemoryCgroup | None = None) -> int:
    """Wait for `child` and return its wait status; with a `limit`, watch the resident
    memory of the child and every descendant meanwhile, and the OOM kills of its `cgroup`
    (where it has one): past either, kill them all and exit `MEMORY_EXIT`, saying so on
    stderr. With a cgroup the kernel holds the limit and the resident watch trips only
    `CGROUP_BACKSTOP` above it."""
    if limit is None:
        return os.waitpid(child, 0)[1]  # retried on EINTR (PEP 475)
    me = os.getpid()
    watched = limit if cgroup is None else int(limit * (1 + CGROUP_BACKSTOP))
    while True:
        pid, status = os.waitpid(child, os.WNOHANG)
        if cgroup is not None and cgroup.oom_kills():
            _out_of_memory(child, cgroup, f"the trial's memory reached its limit of {limit} "
                           "bytes (--trial-memory-limit), and the kernel's cgroup memory "
                           "controller killed it")
        if pid:
            return status
        used = resident_bytes(descendants(me))
        if used > watched:
            _out_of_memory(child, cgroup, f"the trial's resident memory reached {used} bytes, "
                           f"above its limit of {limit} bytes (--trial-memory-limit); it was "
                           "killed")
        time.sleep(MEMORY_POLL_S)


def _out_of_memory(child: int, cgroup: MemoryCgroup | None, why: str) -> None:
    """Kill the trial's processes, say why on stderr and exit `MEMORY_EXIT`."""
    kill_group_but_me(child, cgroup)
    if cgroup is not None:
        cgroup.remove()
    with contextlib.suppress(OSError):
        os.write(2, f"autotune: Out of memory: {why}\n".encode())
    os._exit(MEMORY_EXIT)


def run_child(argv: Sequence[str], cgroup: MemoryCgroup | None = None) -> int:
    """Fork and exec `argv` (dying with the guard, in `cgroup` where given); return its pid."""
    pid = os.fork()
    if pid:
        return pid
    try:  # the forked child: only async-signal-safe work from here to exec
        for signum in (*STOP_SIGNALS, KILL_SIGNAL):
            signal.signal(signum, signal.SIG_DFL)
        die_with_parent(signal.SIGKILL)
        if cgroup is not None:
            cgroup.enter()
        os.execvp(argv[0], list(argv))
    except BaseException as exc:  # noqa: BLE001 - report anything, never return into the guard
        with contextlib.suppress(OSError):
            os.write(2, f"autotune: cannot run {argv[0]}: {exc}\n".encode())
    os._exit(EXEC_FAILED)


def end_as(status: int) -> None:
    """Exit the way a child with wait `status` ended: its code, or death by its signal."""
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file of the guard
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        time.sleep(1)  # the signal is pending; this line is not reached for fatal ones
    os._exit(os.waitstatus_to_exitcode(status) if not os.WIFSIGNALED(status) else 1)


def main(args: Sequence[str]) -> None:
    """Entry point: `PARENT LIMIT SCRATCH -- ARGV...` (see the module docstring)."""
    if len(args) < 5 or args[3] != "--":
        sys.stderr.write("usage: python -m autotune.ground.guard PARENT LIMIT SCRATCH -- ARGV...\n")
        os._exit(2)
    parent, limit = int(args[0]), None if args[1] == "-" else int(args[1])
    scratch = None if args[2] == "-" else Path(args[2])
    die_with_parent(signal.SIGTERM)
    if os.getppid() != parent:  # the parent died before the request above took effect
        os._exit(1)
    child: int | None = None
    cgroup = MemoryCgroup.make(limit) if limit is not None else None

    def stop(signum: int, frame: object) -> None:
        kill_group_but_me(child, cgroup)
        if cgroup is not None:
            cgroup.remove()
        if scratch is not None and signum != KILL_SIGNAL:
            shutil.rmtree(scratch, ignore_errors=True)
        os._exit(128 + signum)

    for signum in (*STOP_SIGNALS, KILL_SIGNAL):
        signal.signal(signum, stop)
    become_subreaper()
    child = run_child(args[4:], cgroup)
    status = wait_within(child, limit, cgroup)
    kill_group_but_me(None, cgroup)  # what the child left running (a daemon it started) too
    if cgroup is not None:
        cgroup.remove()
    end_as(status)


if __name__ == "__main__":
    main(sys.argv[1:])
