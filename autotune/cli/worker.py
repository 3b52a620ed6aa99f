"""`autotune worker` and `autotune confirm`: work on a study made elsewhere, and the local
workers of `autotune study --workers K`.

A worker reads the study's plan from the database (`autotune.api.join_study`), so it
needs no other argument than the study's name and URL; every worker is an ordinary
process that can be killed alone (its trial is failed and queued again once its
heartbeat stops: `StudyRunner.reap`).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from autotune.cli._common import DEFAULT_STORAGE, StorageOpt, literal, out
from autotune.cli.results import print_best
from autotune.cli.study import finish
from autotune.errors import AutotuneError

#: Seconds between looks at the database while local workers run.
WATCH_S = 0.5

#: Seconds a stopped local worker gets to release its claims before it is killed.
STOP_GRACE_S = 30.0


def worker(
    study: Annotated[str, typer.Option(help="The study to work on (made by `autotune study`).")],
    storage: StorageOpt = DEFAULT_STORAGE,
    trials: Annotated[int | None, typer.Option(
        min=1, help="Launch at most N trials from this worker (default: until the study "
                    "holds its trials).")] = None,
    until_done: Annotated[bool, typer.Option(
        help="Stay until the whole study is done: wait for the other workers' trials, take "
             "over those of workers that died, and share the confirmation.")] = False,
) -> None:
    """Join STUDY from any machine and measure its trials; the last worker to finish
    confirms and shrinks the winner."""
    from autotune.api import join_study
    from autotune.cli.study import _print_preflight, _run_with_progress
    from autotune.launcher import SubprocessLauncher
    from autotune.study import StudyRunner

    with out.status(f"joining study '{literal(study)}'..."):
        joined = join_study(study, storage)
    _print_preflight(joined.planned)
    plan = joined.planned.plan
    runner = StudyRunner(plan, joined.store, SubprocessLauncher(), joined.store.url,
                         facts=joined.planned.report.environment)
    who = f"worker {literal(platform.node())}:{os.getpid()}: "
    _run_with_progress(runner, plan, until_done=until_done, limit=trials, who=who)
    if trials is not None and runner.remaining() > 0 and not until_done:
        out.print(f"{who}launched its {trials} trials; the study wants "
                  f"{runner.remaining()} more", highlight=False)
        return
    if not until_done and runner.others_searching():
        out.print(f"{who}done; other workers are still measuring, and the last to finish "
                  "confirms", highlight=False)
        return
    finish(runner, joined.confirm, joined.confirm_repeats, joined.shrink, joined.pgle)


def confirm(
    name: Annotated[str, typer.Argument(help="The study.")],
    storage: StorageOpt = DEFAULT_STORAGE,
    top: Annotated[int | None, typer.Option(
        "--confirm", min=1, help="Re-measure the best K configurations (default: the "
                                  "study's own setting).")] = None,
    repeats: Annotated[int | None, typer.Option(
        "--confirm-repeats", min=2, help="Fresh processes per configuration (default: the "
                                         "study's).")] = None,
    shrink: Annotated[bool | None, typer.Option(
        "--shrink/--no-shrink", help="Shrink the recommendation afterwards (default: the "
                                     "study's).")] = None,
    pgle: Annotated[int | None, typer.Option(
        min=0, help="Then measure the best K again with a PGLE profile each (default: the "
                    "study's).")] = None,
) -> None:
    """Confirm the best configurations of NAME and shrink the recommendation (what the
    last worker does when the search is done), waiting for running search trials."""
    from autotune.api import join_study
    from autotune.launcher import SubprocessLauncher
    from autotune.study import StudyRunner

    with out.status(f"joining study '{literal(name)}'..."):
        joined = join_study(name, storage)
    runner = StudyRunner(joined.planned.plan, joined.store, SubprocessLauncher(),
                         joined.store.url, facts=joined.planned.report.environment)
    runner.prepare()
    finish(runner, top or joined.confirm or 3, repeats or joined.confirm_repeats,
           joined.shrink if shrink is None else shrink, joined.pgle if pgle is None else pgle)


def run_local_workers(store: Any, plan: Any, count: int) -> None:
    """Start `count` local `autotune worker --until-done` processes on the study (already
    prepared: its recipe is stored) and show one progress bar for the whole study until
    every worker has ended; a stop signal stops them all. Each worker's output goes to a
    log file, named when it fails.

    Raises:
        AutotuneError: a worker failed (exit 1, after the best table).
    """
    folder = Path(tempfile.mkdtemp(prefix="autotune-workers-"))
    argv = [sys.executable, "-m", "autotune", "worker", "--study", plan.name,
            "--storage", store.url, "--until-done"]
    logs = [folder / f"worker-{k}.log" for k in range(count)]
    out.print(f"study '{literal(plan.name)}': starting {count} local workers (logs in "
              f"{literal(folder)})", highlight=False)
    procs = [subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL) for log in logs]
    try:
        _watch(store, plan, procs)
    except BaseException:
        _stop(procs)
        raise
    failed = [(k, p.returncode) for k, p in enumerate(procs) if p.returncode != 0]
    for k, code in failed:
        tail = logs[k].read_text(errors="replace").strip().splitlines()[-3:]
        out.print(f"worker {k} exited with code {code}; its log {literal(logs[k])} ends: "
                  + literal(" | ".join(tail)), highlight=False)
    print_best(store, plan.name, limit=10)
    if failed:
        raise AutotuneError(f"{len(failed)} of {count} workers failed (see their logs above); "
                            "the trials they finished are kept: run the same command again "
                            "to continue")


def _watch(store: Any, plan: Any, procs: list[subprocess.Popen[bytes]]) -> None:
    """A progress bar of the study's stored search runs while any worker runs (a line
    per change where the output is no terminal)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from autotune._proc import raise_if_interrupted
    from autotune.measured import BUDGET_ROLES

    def state() -> tuple[int, str]:
        done = store.count_runs(plan.name, BUDGET_ROLES)
        alive = sum(p.poll() is None for p in procs)
        phase = "searching" if done < plan.trials else "confirming"
        return done, f"{alive} workers {phase}" if alive else "workers done"

    last: tuple[int, str] | None = None
    columns = (TextColumn("[bold]trials"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[phase]}"), TimeElapsedColumn())
    with Progress(*columns, console=out, transient=False,
                  disable=not out.is_terminal) as progress:
        task = progress.add_task("study", total=plan.trials, phase="")
        while True:
            raise_if_interrupted()
            now = state()
            progress.update(task, completed=min(now[0], plan.trials), phase=now[1])
            if now != last and not out.is_terminal:
                out.print(f"trials {min(now[0], plan.trials)}/{plan.trials}: {now[1]}",
                          highlight=False)
            last = now
            if all(p.poll() is not None for p in procs):
                return
            time.sleep(WATCH_S)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM every running worker (each releases its claims and kills its trial), then
    SIGKILL those still running after `STOP_GRACE_S`."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
