"""The fault-injection suite: one process killed at each phase, the database cut away, a new
database crowded; each case resumed with the same command and checked (issue 31).

Every case runs real `autotune` processes on a real database (a SQLite file, or a
schema of its own in the PostgreSQL of `--postgres URL`), measuring the tiny matmul
benchmark on the `cpu` space, with confirmation, racing, shrinking and a PGLE phase (the
race and shrink cases measure `tests/workloads/wide_vectors.py`, which a flag makes
faster on an AVX-512 host: racing starts only from a leader faster than the defaults,
shrinking only from a confirmed recommendation):

- **kill**: `study`, `study --workers 2`, or `study` beside one `autotune worker`
  (mode), one process SIGKILLed (target: the `leader`, that is the study command's
  process; a `worker`; or the trial `child` of the process measuring) as soon as a
  claim of the phase is running (baseline, fit, search, race, confirm, shrink, pgle);
- **outage**: the database (PostgreSQL, through `tcp_proxy.Proxy`) cut away for 3 s
  or 20 s while a trial's child runs (a workload whose build pauses 3 s);
- **crowd**: two or four identical `autotune study` commands started at once on one
  new database.

Then the mode's commands are run again, as a user would, and the case is checked:
`complete` (the commands run again exit 0, the study holds exactly `--trials` budget
runs and no running claim), `lost` (budget runs short of `--trials`), `duplicated`
(search runs of a configuration timed before, and budget runs beyond `--trials`),
`left` (processes of the case still alive once its commands ended) and `tracebacks`
(in every output, workers' logs included). A phase that no process reached before the
study ended is reported `not reached`, never as a pass.

Usage:
    python benchmarks/scripts/fault_check.py [--backends sqlite,postgresql]
        [--postgres URL] [--modes study,workers,worker] [--targets leader,worker,child]
        [--phases baseline,fit,search,race,confirm,shrink,pgle] [--outages 3,20]
        [--crowds 2,4] [--json]

The fast part runs in the tests (`tests/test_faults.py`), which call `run_case`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kill_check import trial_processes  # a sibling script: the same scratch-folder marker

ROOT = Path(__file__).resolve().parents[2]
SLOW_BUILD = ROOT / "tests" / "workloads" / "slow_build.py"
NAME = "fault"
TRIALS = 4
STUDY = ["--space", "cpu", "--benchmark", "matmul", "--preset", "tiny", "--devices", "1",
         "--steps", "5", "--warmup", "1", "--max-warmup", "3", "--trials", str(TRIALS),
         "--confirm", "2", "--confirm-repeats", "2", "--confirm-max", "3", "--pgle", "1",
         "--heartbeat", "2", "--timeout-per-trial", "120", "--seed", "7", "--name", NAME]
#: The race and shrink cases' study: the same, on a workload that 512-bit vectors make
#: about 0.6x as slow on an AVX-512 host, with 20 steps a process and up to 6 confirmation
#: processes (5 steps and 3 did not confirm it on a loaded machine), so that it races its
#: leader, confirms a recommendation and shrinks it.
WINNING_PHASES = ("race", "shrink")
WINNING_STUDY = [*STUDY[:STUDY.index("--space")],
                "--space", str(ROOT / "tests" / "workloads" / "wide-vectors.yaml"),
                "--script", str(ROOT / "tests" / "workloads" / "wide_vectors.py"),
                *STUDY[STUDY.index("--preset"):]]
WINNING_STUDY[WINNING_STUDY.index("--steps") + 1] = "20"
WINNING_STUDY[WINNING_STUDY.index("--confirm-max") + 1] = "6"
PHASES = ("baseline", "fit", "search", "race", "confirm", "shrink", "pgle")
MODES = ("study", "workers", "worker")
TARGETS = {"study": ("leader", "child"), "workers": ("leader", "worker", "child"),
           "worker": ("leader", "worker", "child")}
#: how long a case may take, at most, before its processes are killed and it fails
CASE_TIMEOUT_S = 600


@dataclass(frozen=True)
class Case:
    """One fault: `kind` kill (mode, target, phase), outage (seconds) or crowd (processes)."""

    kind: str
    backend: str
    mode: str = "study"
    target: str = ""
    phase: str = ""
    seconds: float = 0.0
    processes: int = 1

    @property
    def label(self) -> str:
        if self.kind == "kill":
            return f"kill {self.target} at {self.phase}, {self.mode}"
        if self.kind == "outage":
            return f"database away {self.seconds:g} s during a trial, {self.mode}"
        return f"{self.processes} studies at once on a new database"


@dataclass
class Result:
    """What a case left: see the module docstring. `reached` False: the phase never came."""

    case: Case
    reached: bool = True
    complete: bool = False
    lost: int = 0
    duplicated: int = 0
    left: int = 0
    tracebacks: int = 0
    seconds: float = 0.0
    note: str = ""
    outputs: list[str] = field(default_factory=list, repr=False)

    @property
    def ok(self) -> bool:
        return self.reached and self.complete and not (
            self.lost or self.duplicated or self.left or self.tracebacks)


# --- the database of a case --------------------------------------------------------------


@contextmanager
def database(backend: str, folder: Path, postgres: str | None) -> Iterator[str]:
    """A new, empty database for one case: a SQLite file in `folder`, or a schema of its
    own in the PostgreSQL at `postgres`, dropped afterwards."""
    if backend == "sqlite":
        yield f"sqlite:///{folder / 'autotune.db'}"
        return
    if not postgres:
        raise SystemExit("PostgreSQL cases need --postgres URL (or AUTOTUNE_TEST_POSTGRES_URL)")
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    schema = f"autotune_fault_{uuid.uuid4().hex[:12]}"
    admin = create_engine(postgres)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield make_url(postgres).update_query_dict(
            {"options": f"-csearch_path={schema}"}).render_as_string(hide_password=False)
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


# --- processes ---------------------------------------------------------------------------


class Processes:
    """The case's `autotune` processes, their outputs kept; every process started here
    carries the case's scratch folder as TMPDIR, so whatever they leave can be found."""

    def __init__(self, folder: Path, extra_env: dict[str, str] | None = None) -> None:
        self.folder = folder
        self.scratch = folder / "scratch"
        self.scratch.mkdir(exist_ok=True)
        self.env = {**os.environ, "TMPDIR": str(self.scratch), "COLUMNS": "100",
                    **(extra_env or {})}
        self.procs: list[subprocess.Popen[str]] = []
        self.outputs: list[str] = []

    def start(self, argv: list[str]) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-m", "autotune", *argv], cwd=self.folder,
                                env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True,
                                stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc

    def finish(self, procs: list[subprocess.Popen[str]], timeout: float) -> list[int]:
        """Wait for `procs` (killing those still running at `timeout`); their exit codes."""
        deadline = time.monotonic() + timeout
        codes = []
        for proc in procs:
            try:
                out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
                out += "\n[fault_check: killed at the case's time limit]"
            self.outputs.append(out)
            codes.append(proc.returncode)
        return codes

    def alive(self) -> list[int]:
        """Live processes (not zombies) whose environment names this case's scratch folder."""
        return trial_processes(self.folder)

    def clean_up(self) -> None:
        for pid in self.alive():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()

    def tracebacks(self) -> int:
        """'Traceback' in every output, and in the local workers' logs."""
        logs = [log.read_text(errors="replace")
                for log in self.scratch.glob("autotune-workers-*/*.log")]
        return sum(text.count("Traceback") for text in [*self.outputs, *logs])


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid`, from /proc (children first)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


# --- the cases ---------------------------------------------------------------------------


def phase_of(claim: object) -> str | None:
    """The phase a running claim belongs to."""
    role, key = str(getattr(claim, "role", "")), str(getattr(claim, "key", ""))
    if key == "fit:space":
        return "fit"
    if key == "warm:prior":  # a warm start's evidence given to the sampler: no phase
        return None
    if key.startswith("shrink") or role in ("ablation", "minimal") or role == "fingerprint":
        return "shrink"
    return {"baseline": "baseline", "search": "search", "recommended": "search",
            "race": "race", "confirm": "confirm", "pgle": "pgle"}.get(role)


def study_argv(case: Case | None = None) -> list[str]:
    """The study a case runs: the tiny matmul's (`STUDY`); an outage's, whose every child
    pauses in its build; a race or shrink kill's (`WINNING_STUDY`), whose workload a flag
    makes measurably faster: on this CPU no configuration of the tiny matmul is
    confirmed, and shrinking starts only from a recommendation; racing only from a
    search leader faster than the defaults on its first process."""
    if case is not None and case.kind == "outage":
        return _outage_study()
    if case is not None and case.kind == "kill" and case.phase in WINNING_PHASES:
        return list(WINNING_STUDY)
    return list(STUDY)


def commands(mode: str, url: str, case: Case | None = None) -> list[list[str]]:
    """The commands a user runs for a mode (and runs again to resume), with the case's
    study (`study_argv`)."""
    study = ["study", *study_argv(case), "--storage", url]
    if mode == "workers":
        return [[*study, "--workers", "2"]]
    if mode == "worker":
        return [study, ["worker", "--study", NAME, "--storage", url, "--until-done"]]
    return [study]


def resume_commands(case: Case, url: str) -> list[list[str]]:
    """What a user runs again after the fault: the case's own commands (an outage's study,
    its slow-building workload, straight to the server)."""
    return commands(case.mode if case.kind == "kill" else "study", url, case)


def start_mode(procs: Processes, case: Case, url: str, deadline: float
               ) -> list[subprocess.Popen[str]]:
    """Start the commands of the case's mode; a worker once the study exists in the
    database."""
    argvs = commands(case.mode, url, case)
    started = [procs.start(argvs[0])]
    if len(argvs) > 1:
        while not _study_exists(url):
            if time.monotonic() > deadline or started[0].poll() is not None:
                return started
            time.sleep(0.2)
        started.append(procs.start(argvs[1]))
    return started


def victim(case: Case, started: list[subprocess.Popen[str]], claim: object) -> int | None:
    """The pid to kill for the case, given the running claim of its phase."""
    owner = int(getattr(claim, "owner_pid", 0))
    if case.target == "leader":
        return started[0].pid
    if case.target == "worker":
        if case.mode == "worker":
            return started[1].pid if len(started) > 1 else None
        workers = [p for p in descendants(started[0].pid) if " worker " in cmdline(p)]
        return owner if owner in workers else (workers[0] if workers else None)
    children = [p for p in descendants(owner) if "autotune.child" in cmdline(p)]
    return children[-1] if children else None


def run_kill(case: Case, url: str, procs: Processes, result: Result) -> None:
    """Start the mode, SIGKILL the victim at the phase's first running claim, let the rest
    run out."""
    from autotune.ground.records import ClaimState
    from autotune.storage.store import Store

    deadline = time.monotonic() + CASE_TIMEOUT_S
    started = start_mode(procs, case, url, deadline)
    killed = False
    store = None
    while not killed and any(p.poll() is None for p in started):
        if time.monotonic() > deadline:
            break
        if store is None and _study_exists(url):
            store = Store.open(url, upgrade=False)
        if store is not None:
            for claim in _claims(store, ClaimState.RUNNING):
                if phase_of(claim) == case.phase and (pid := victim(case, started, claim)):
                    os.kill(pid, signal.SIGKILL)
                    killed = True
                    break
        time.sleep(0.05)
    if store is not None:
        store.close()
    result.reached = killed
    procs.finish(started, max(1.0, deadline - time.monotonic()))


def run_outage(case: Case, url: str, procs: Processes, result: Result) -> None:
    """Start the study through a proxy; cut the database away for `case.seconds` once a
    search trial's child runs."""
    from sqlalchemy.engine import make_url
    from tcp_proxy import Proxy  # a sibling script

    from autotune.ground.records import ClaimState
    from autotune.storage.store import Store

    parsed = make_url(url)
    with Proxy((parsed.host or "127.0.0.1", parsed.port or 5432)) as proxy:
        study = ["study", *_outage_study(), "--storage", proxy.url(url)]
        deadline = time.monotonic() + CASE_TIMEOUT_S
        started = [procs.start(study)]
        store = None
        cut = False
        while not cut and started[0].poll() is None and time.monotonic() < deadline:
            if store is None and _study_exists(url):
                store = Store.open(url, upgrade=False)
            if store is not None and any(phase_of(c) == "search"
                                         for c in _claims(store, ClaimState.RUNNING)):
                time.sleep(1.0)  # the child pauses in its build; its parent only waits
                proxy.cut()
                threading.Timer(case.seconds, proxy.restore).start()
                cut = True
            time.sleep(0.05)
        if store is not None:
            store.close()
        result.reached = cut
        procs.finish(started, max(1.0, deadline - time.monotonic()))
        out = procs.outputs[-1]
        if cut and "is back after" not in out:
            result.note = "no wait for the database was reported"


def _outage_study() -> list[str]:
    """The study of an outage case: the slow-building toy (every child pauses 3 s)."""
    argv = list(STUDY)
    at = argv.index("--benchmark")
    argv[at:at + 2] = ["--script", str(SLOW_BUILD)]
    return argv


def run_crowd(case: Case, url: str, procs: Processes, result: Result) -> None:
    """`case.processes` identical studies started at once on the new database."""
    started = [procs.start(commands("study", url)[0]) for _ in range(case.processes)]
    codes = procs.finish(started, CASE_TIMEOUT_S)
    if any(codes):
        result.note = f"exit codes {codes}"


def run_case(case: Case, postgres: str | None = None) -> Result:
    """Run one case in a folder of its own, resume it, check it (see the module docstring)."""
    result = Result(case)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="autotune-fault-") as tmp:
        folder = Path(tmp)
        env = {"SLOW_BUILD_S": "3"} if case.kind == "outage" else None
        procs = Processes(folder, env)
        try:
            with database(case.backend, folder, postgres) as url:
                {"kill": run_kill, "outage": run_outage, "crowd": run_crowd}[case.kind](
                    case, url, procs, result)
                resumed = [procs.start(argv) for argv in resume_commands(case, url)]
                codes = procs.finish(resumed, CASE_TIMEOUT_S)
                left = procs.alive()
                result.left = len(left)
                if left:
                    _name_left(result, left, procs)
                _check(result, url, codes)
        finally:
            result.tracebacks = procs.tracebacks()
            result.outputs = procs.outputs
            procs.clean_up()
    result.seconds = round(time.monotonic() - began, 1)
    return result


#: Seconds a process found alive once a case's commands ended is watched again, to tell a
#: slow exit from a process that stays (it counts as left either way).
LEFT_WATCH_S = 15.0


def _name_left(result: Result, pids: list[int], procs: Processes) -> None:
    """Say in the case's note what each left process was (its command line and parent) and
    whether it ended within `LEFT_WATCH_S`: the cause is then in the table, not guessed."""
    seen = {pid: _described(pid) for pid in pids}
    deadline = time.monotonic() + LEFT_WATCH_S
    while time.monotonic() < deadline and set(procs.alive()) & set(pids):
        time.sleep(0.5)
    still = set(procs.alive()) & set(pids)
    words = [f"{text} ({'still alive' if pid in still else 'ended'} after "
             f"{LEFT_WATCH_S:g} s{_stack(pid) if pid in still else ''})"
             for pid, text in seen.items()]
    result.note = "; ".join(filter(None, [result.note, "left: " + "; ".join(words)]))


def _stack(pid: int) -> str:
    """Where a stuck process waits: its Python threads' stacks by `py-spy dump` where
    py-spy is installed (`pip install py-spy`; it needs ptrace rights), else each
    thread's kernel wait channel."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if Path(spy).exists():
        done = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True,
                              text=True, timeout=30, check=False)
        lines = [ln.strip() for ln in (done.stdout or done.stderr).splitlines() if ln.strip()]
        return "; stack: " + " | ".join(lines[:40])
    waits = []
    for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
        try:
            waits.append((task / "wchan").read_text().strip() or "running")
        except OSError:
            continue
    return "; threads waiting in: " + ", ".join(waits)


def _described(pid: int) -> str:
    """`pid`'s command line (cut to 160 characters) and parent, from /proc."""
    try:
        parent = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
    except OSError:
        return f"pid {pid} (gone)"
    return f"pid {pid} of {parent}: {cmdline(pid).strip()[:160]}"


def _check(result: Result, url: str, codes: list[int]) -> None:
    """Fill `complete`, `lost` and `duplicated` from the database."""
    from autotune.ground.records import ClaimState, Role
    from autotune.storage.store import Store
    from autotune.study.measured import BUDGET_ROLES

    with Store.open(url, upgrade=False) as store:
        held = store.held(NAME, BUDGET_ROLES)
        running = _claims(store, ClaimState.RUNNING)
        seen: set[str] = set()
        again = 0
        for run in sorted(store.runs(NAME), key=lambda r: r.id):
            m = run.outcome.measurement
            if run.role is not Role.SEARCH or not run.outcome.ok or m is None or not m.step_times_s:
                continue
            key = json.dumps(dict(run.flags), sort_keys=True, default=str)
            again += key in seen
            seen.add(key)
    result.lost = max(0, TRIALS - held)
    result.duplicated = again + max(0, held - TRIALS)
    result.complete = not any(codes) and held == TRIALS and not running
    if any(codes) and not result.note:
        result.note = f"resumed with exit codes {codes}"


def _study_exists(url: str) -> bool:
    """Whether the case's study is in the database yet (no database, tables or study yet,
    or one being made at this moment: not yet)."""
    from autotune.storage.store import Store

    try:
        with Store.open(url, upgrade=False) as store:
            store.get_study(NAME)
            return True
    except Exception:
        return False


def _claims(store: object, state: object) -> list:
    try:
        return list(store.claims(NAME, [state]))  # type: ignore[attr-defined]
    except Exception:  # the study is not there yet, or a write is under way
        return []


# --- the table ---------------------------------------------------------------------------


def cases(args: argparse.Namespace) -> list[Case]:
    """The cases the arguments select, in table order."""
    found: list[Case] = []
    for backend in args.backends:
        for mode in args.modes:
            for target in TARGETS[mode]:
                if target not in args.targets:
                    continue
                found += [Case("kill", backend, mode, target, phase) for phase in args.phases]
        if backend == "postgresql":
            found += [Case("outage", backend, seconds=s) for s in args.outages]
        found += [Case("crowd", backend, processes=n) for n in args.crowds]
    return found


def row(result: Result) -> str:
    c = result.case
    state = ("not reached" if not result.reached else "complete" if result.complete
             else "INCOMPLETE")
    return (f"{c.backend:10} {c.label:44} {state:11} {result.lost:>4} {result.duplicated:>4} "
            f"{result.left:>4} {result.tracebacks:>5} {result.seconds:>6}"
            + (f"  {result.note}" if result.note else ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    listed = lambda text: [item for item in text.split(",") if item]  # noqa: E731
    parser.add_argument("--backends", type=listed, default=["sqlite", "postgresql"])
    parser.add_argument("--postgres", default=os.environ.get("AUTOTUNE_TEST_POSTGRES_URL"))
    parser.add_argument("--modes", type=listed, default=list(MODES))
    parser.add_argument("--targets", type=listed, default=["leader", "worker", "child"])
    parser.add_argument("--phases", type=listed, default=list(PHASES))
    parser.add_argument("--outages", type=lambda t: [float(s) for s in listed(t)],
                        default=[3.0, 20.0])
    parser.add_argument("--crowds", type=lambda t: [int(s) for s in listed(t)], default=[2, 4])
    parser.add_argument("--json", action="store_true", help="one JSON document at the end")
    args = parser.parse_args(argv)
    results = []
    if not args.json:
        print(f"{'backend':10} {'case':44} {'state':11} {'lost':>4} {'dup':>4} {'left':>4} "
              f"{'trace':>5} {'secs':>6}", flush=True)
    for case in cases(args):
        result = run_case(case, args.postgres)
        results.append(result)
        if not args.json:
            print(row(result), flush=True)
    reached = [r for r in results if r.reached]
    summary = {"cases": len(results), "reached": len(reached),
               "ok": sum(r.ok for r in reached), "not_reached": len(results) - len(reached)}
    if args.json:
        print(json.dumps({"results": [{**asdict(r.case), "label": r.case.label,
                                       **{k: v for k, v in asdict(r).items()
                                          if k not in ("case", "outputs")}, "ok": r.ok}
                                      for r in results], "summary": summary}, indent=1))
    else:
        print(f"{summary['ok']} of {summary['reached']} cases reached ended complete with "
              f"nothing lost, duplicated or left and no traceback; "
              f"{summary['not_reached']} not reached")
    return 0 if summary["ok"] == summary["reached"] else 1


if __name__ == "__main__":
    sys.exit(main())
