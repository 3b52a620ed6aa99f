"""Progress displays shared by the commands that measure a study (`study`, `worker`,
`confirm`): the search's bar, what the preflight found, the phases after the search
(`autotune.study.service.finish`, shown through a `Watcher`), and local workers."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from autotune.cli._common import counted, fmt_bytes, literal, out, say
from autotune.cli.results import print_best
from autotune.ground.errors import AutotuneError
from autotune.ground.proc import raise_if_interrupted
from autotune.results.fitted import summary_text
from autotune.results.shrink import Shrink
from autotune.rules.stopping import free_compiles
from autotune.study import service
from autotune.study.measured import BUDGET_ROLES
from autotune.study.options import AfterSearch
from autotune.study.plan import ConfirmEvent, PgleEvent, ShrinkEvent
from autotune.study.runner import StudyRunner

#: Seconds between looks at the database while local workers run.
WATCH_S = 0.5

#: Seconds a stopped local worker gets to release its claims before it is killed.
STOP_GRACE_S = 30.0


class _Lines(service.Watcher):
    """The phases after the search, one line per run."""

    def confirming(self, count: int, repeats: int) -> None:
        what = "the best configuration" if count == 1 else f"the best {count} configurations"
        say(f"confirming {what}: {repeats} fresh processes each (those the search's races "
            "measured count), interleaved with the baseline")

    def finished_before(self) -> None:
        say("the phases after this study's search have ended: nothing more to measure "
            "(`autotune confirm STUDY` confirms again)")

    def nothing_to_confirm(self) -> None:
        say("nothing to confirm: the search measured no configuration beside XLA's "
            "defaults")

    def confirmed(self, event: ConfirmEvent) -> None:
        if event.cap is None:
            say(f"confirm {event.done}/{event.total}: trial #{event.trial_number} "
                f"{_confirm_text(event)}")
        else:  # sequential: its end is not known beforehand
            say(f"confirm {event.done}: trial #{event.trial_number} "
                f"{_confirm_text(event)} (sequential: its process {event.processes} "
                f"of at most {event.cap})")

    def shrinking(self, event: ShrinkEvent) -> None:
        say(f"shrink: trial #{event.trial_number} {_shrink_text(event)}")

    def shrunk(self, state: Shrink | None) -> None:
        if state is None:
            return
        dropped = [r.flag for r in state.removals if r.dropped]
        say(f"shrunk trial #{state.trial_number} to {len(state.minimal)} of "
            f"{len(state.minimal) + len(dropped)} flags"
            + (f"; dropped {literal(', '.join(dropped))}" if dropped else "")
            + (f" ({literal(state.note)})" if state.note else ""))

    def pgle_skipped(self, why: str) -> None:
        say(f"PGLE skipped: {why}")

    def pgle_starting(self, top: int, repeats: int) -> None:
        say(f"PGLE: the best {top} configurations with a profile each, {repeats} fresh "
            "processes each, timed against the same flags without it")

    def pgle_measured(self, event: PgleEvent) -> None:
        say(f"pgle {event.done}/{event.total}: trial #{event.trial_number} "
            f"{_confirm_text(event)}")


def lines() -> service.Watcher:
    """The watcher that prints one line per run after the search (`autotune audit`)."""
    return _Lines()


def finish(runner: StudyRunner, after: AfterSearch, *, again: bool = False) -> None:
    """After the search: confirm, shrink and PGLE as `after` asks (one line per run; a study
    that finished them as asked measures nothing more unless `again`), then print the best
    table."""
    service.finish(runner, after, _Lines(), again=again)
    print_best(runner.store, runner.plan.name, limit=10)


def _shrink_text(ev: Any) -> str:
    """One run of shrinking in words: what was compiled or timed, and what came of it."""
    what = f"{len(ev.step.flags)} flags" + (
        " compiled" if not ev.step.timed else
        " against the defaults" if ev.step.reference is None else " against the full set")
    return f"{what}: {_confirm_text(ev) if ev.step.timed else ev.outcome.kind.value}"


def _confirm_text(ev: Any) -> str:
    m = ev.outcome.measurement
    if ev.outcome.ok and m is not None and m.paired_ratio:
        return f"×{1 / m.paired_ratio:.3f} in this process"
    return ev.outcome.kind.value


def print_preflight(planned: Any) -> None:
    """What the checks before the first trial changed or warn about
    (see `autotune.study.preflight`)."""
    checked, report, space = planned.preflight, planned.report, planned.plan.space
    if checked.dropped:
        noun = "flag" if len(checked.dropped) == 1 else "flags"
        say(f"left out {len(checked.dropped)} {noun} this XLA (jaxlib "
            f"{report.jaxlib_version}) does not know: "
            f"{literal(', '.join('--' + f for f in checked.dropped))}")
    for flag, values in checked.dropped_values.items():
        say(f"left out values of --{literal(flag)} this XLA rejects: "
            f"{literal(', '.join(map(str, values)))}")
    if checked.backend_mismatch:
        say(f"[yellow]warning:[/] space '{literal(space.name)}' is for "
            f"{literal(space.backend)}, JAX reports {literal(checked.backend)} here: "
            "expect no effect to measure")


def run_with_progress(runner: Any, plan: Any, *, until_done: bool = False,
                       limit: int | None = None, who: str = "") -> None:
    """Run the study's search with a progress bar of the whole study (every process's
    trials), or one line per trial where the output is no terminal. `until_done` waits
    for other processes' trials and takes over those of dead ones
    (`StudyRunner.run_until_done`); `limit` caps this process's launches."""
    runner.prepare()
    runner.on_fit = _print_fit
    remaining = runner.remaining()
    if remaining == 0 and not until_done:
        say(f"study '{literal(plan.name)}' already holds {plan.trials} trials; "
            f"pass --trials {plan.trials + 10} to run more")
        return
    choice = runner.choice
    o = plan.options
    say(f"{who}study '{literal(plan.name)}': {literal(plan.workload.name)} ({o.preset}, "
        f"{counted(o.devices, 'device')}) on space '{literal(plan.space_name)}', "
        f"{remaining} trials to run, {plan.mode.value} timing; minimising "
        f"{','.join(o.value for o in plan.objectives)} with {choice.name}"
        + (f" ({literal(choice.reason)})" if choice.reason else "")
        + (f", memory budget {fmt_bytes(plan.memory_budget_bytes)}"
           if plan.memory_budget_bytes else ""))
    run = runner.run_until_done if until_done else runner.run
    if not out.is_terminal:  # logs and pipes: one line per trial instead of a live bar
        summary = run(on_trial=lambda ev: say(
            f"trial {ev.done}/{ev.total}: {trial_text(ev)}"), limit=limit)
        _print_summary(summary)
        return
    columns = (TextColumn("[bold]trials"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[best]}"), TextColumn("{task.fields[last]}"),
               TimeElapsedColumn())
    with Progress(*columns, console=out, transient=False) as progress:
        task = progress.add_task("study", total=plan.trials, completed=plan.trials - remaining,
                                 best="best: -", last="")
        summary = run(on_trial=lambda ev: progress.update(
            task, completed=ev.done, best=_best_text(ev), last=_last_text(ev)), limit=limit)
    _print_summary(summary)


def _print_fit(fit: Any) -> None:
    """One line when the space is fitted to the workload (`best` lists each change)."""
    say(literal(summary_text(fit)) + ("; `autotune best` says why" if fit.changes
                                      else ""))


def _print_summary(summary: Any) -> None:
    """Say what was not launched: repeated proposals answered from records, an early stop."""
    if summary.reused:
        say(f"{counted(summary.reused, 'proposal')} repeated a configuration already measured "
            "(same effective flags): their results were reused, not re-measured")
    if summary.stopped:
        say(f"stopped early: {literal(summary.stopped)}")


def _best_text(ev: Any) -> str:
    """The study's answer so far (`TrialEvent`): `best: ×1.034 #5` (the incumbent's pooled
    speedup and first trial), `best: defaults` (nothing backed is faster), `best: -`."""
    if not ev.best_speedup:
        return "best: -"
    if ev.best_trial is None:
        return "best: defaults"
    return f"best: ×{ev.best_speedup:.3f} #{ev.best_trial}"


def _last_text(ev: Any) -> str:
    shown = f"×{ev.speedup:.3f}" if ev.speedup else ev.outcome.kind.value
    return f"last: #{ev.number} {ev.role.value} {shown}"


def trial_text(ev: Any) -> str:
    """One trial's line after `trial N/M: ` (where the output is no terminal)."""
    return f"{_last_text(ev)[6:]}, {_best_text(ev)}"


def run_local_workers(store: Any, plan: Any, count: int) -> None:
    """Start `count` local `autotune worker --until-done` processes on the study (already
    prepared: its recipe is stored) and show one progress bar for the whole study until
    every worker has ended; a stop signal stops them all, and they stop by themselves
    when this process dies, SIGKILL included (`worker --leader`). Each worker's output
    goes to a log file, named when it fails.

    Raises:
        AutotuneError: a worker failed (exit 1, after the best table).
    """
    folder = Path(tempfile.mkdtemp(prefix="autotune-workers-"))
    argv = [sys.executable, "-m", "autotune", "worker", "--study", plan.name,
            "--storage", store.url, "--until-done", "--leader", str(os.getpid())]
    logs = [folder / f"worker-{k}.log" for k in range(count)]
    say(f"study '{literal(plan.name)}': starting {count} local workers (logs in "
        f"{literal(folder)})")
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
        say(f"worker {k} exited with code {code}; its log {literal(logs[k])} ends: "
            + literal(" | ".join(tail)))
    print_best(store, plan.name, limit=10)
    if failed:
        raise AutotuneError(f"{len(failed)} of {count} workers failed (see their logs above); "
                            "the trials they finished are kept: run the same command again "
                            "to continue")


def _watch(store: Any, plan: Any, procs: list[subprocess.Popen[bytes]]) -> None:
    """A progress bar of the study's stored search runs while any worker runs (a line
    per change where the output is no terminal)."""
    def state() -> tuple[int, str]:
        done = store.count_runs(plan.name, BUDGET_ROLES, free_compiles(plan.trials))
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
                say(f"trials {min(now[0], plan.trials)}/{plan.trials}: {now[1]}")
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
