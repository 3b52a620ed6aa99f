"""`autotune study`: plan, run with a progress display, print the best table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from autotune.cli._common import (
    DEFAULT_STORAGE,
    StorageOpt,
    fmt_bytes,
    literal,
    open_store,
    out,
)
from autotune.cli.results import print_best


def study(
    space: Annotated[str, typer.Option(help="Search space name or YAML file.")],
    benchmark: Annotated[str, typer.Option(help="Built-in benchmark to tune.")] = "transformer",
    script: Annotated[Path | None, typer.Option(
        help="Your own workload file defining workload(preset) (see the README).")] = None,
    command: Annotated[str | None, typer.Option(
        help="Tune any program that measures through autotune.bench.report() "
             "(split like a shell would, never run by one).")] = None,
    trials: Annotated[int, typer.Option(min=1, help="Trials the study should hold in all.")] = 12,
    storage: StorageOpt = DEFAULT_STORAGE,
    name: Annotated[str | None, typer.Option(help="Study name (default SPACE-BENCHMARK-PRESET).")]
    = None,
    sampler: Annotated[str, typer.Option(
        help="auto, tpe, random, grid, nsga2 or gp (auto: grid when the whole space fits in "
             "--trials, else tpe for one objective and nsga2 for two).")] = "auto",
    seed: Annotated[int | None, typer.Option(help="Seed of the sampler.")] = None,
    objective: Annotated[str, typer.Option(
        help="time, memory, or time,memory for a Pareto front of both.")] = "time",
    memory_budget: Annotated[str | None, typer.Option(
        help="Peak memory a configuration may use, e.g. 12GiB: those above it are "
             "infeasible and never reported as the winner.")] = None,
    timeout_per_trial: Annotated[float, typer.Option(min=1, help="Seconds per trial.")] = 300.0,
    preset: Annotated[str, typer.Option(help="Workload size: tiny, small or large.")] = "small",
    devices: Annotated[int, typer.Option(min=1, help="CPU devices for sharded workloads.")] = 8,
    steps: Annotated[int, typer.Option(min=3, help="Timed steps per trial.")] = 20,
    warmup: Annotated[int, typer.Option(
        min=1, help="Minimum warm-up rounds after the first step.")] = 2,
    max_warmup: Annotated[int, typer.Option(
        min=1, help="Warm-up rounds at most, while step times have not settled.")] = 30,
    mode: Annotated[str, typer.Option(help="paired (in-process vs baseline) or direct.")]
    = "paired",
    drop_unknown: Annotated[bool, typer.Option(
        help="Leave out the space's flags this XLA does not know, instead of stopping.")] = False,
    allow_backend_mismatch: Annotated[bool, typer.Option(
        help="Run a space meant for another backend than JAX reports here.")] = False,
    confirm: Annotated[int, typer.Option(
        min=0, help="Re-measure the best K configurations after the search (0: skip).")] = 3,
    confirm_repeats: Annotated[int, typer.Option(
        min=2, help="Fresh processes per confirmed configuration.")] = 4,
    prune_margin: Annotated[float, typer.Option(
        min=1.0, help="Stop a trial once it is this many times slower than the best so far "
                      "(paired mode).")] = 1.3,
    prune: Annotated[bool, typer.Option(help="Stop clearly slower trials early.")] = True,
    shrink: Annotated[bool, typer.Option(
        help="After confirmation, drop the recommended configuration's flags that do not "
             "matter (compile without each, then time without each; paired mode).")] = True,
    trial_memory_limit: Annotated[str | None, typer.Option(
        help="Address-space limit of each trial process, e.g. 16GiB (default: none).")] = None,
    fit: Annotated[bool, typer.Option(
        help="Fit the space to the workload after its baseline: drop flags that cannot act "
             "on its program, clip thresholds to its collectives' sizes (see `best`).")] = True,
    racing: Annotated[bool, typer.Option(
        help="Measure the search's leader again until 3 processes back it, before sampling "
             "more (counted in --trials; paired mode, time objective).")] = True,
    workers: Annotated[int, typer.Option(
        min=1, help="Local worker processes to measure with (1: this process); each is an "
                    "`autotune worker` that can be killed alone.")] = 1,
    heartbeat: Annotated[int, typer.Option(
        min=1, help="Seconds between a worker's heartbeats; one silent for twice as long "
                    "is dead, and its trial goes back to the queue.")] = 30,
    launcher: Annotated[str | None, typer.Option(
        help="Run each trial through a cluster launcher, e.g. \"srun -N 2 "
             "--ntasks-per-node 1 {cmd}\" ({cmd} is the trial; process 0 reports).")] = None,
    pgle: Annotated[int, typer.Option(
        min=0, help="After confirmation, measure the best K configurations again with a "
                    "PGLE profile collected for each; `export` carries a profile that is "
                    "confirmed faster (paired mode; 0: off).")] = 0,
) -> None:
    """Tune the flags of SPACE on a benchmark; re-running the same command continues."""
    from autotune.api import plan_study
    from autotune.launcher import SubprocessLauncher
    from autotune.study import StudyRunner

    with out.status("checking the space's flags against the installed XLA..."):
        planned = plan_study(
            space=space, benchmark=benchmark, script=script, command=command, name=name,
            trials=trials, sampler=sampler, seed=seed, objective=objective,
            memory_budget=memory_budget, timeout_per_trial=timeout_per_trial, preset=preset,
            devices=devices, steps=steps, warmup=warmup, max_warmup=max_warmup, mode=mode,
            drop_unknown=drop_unknown, allow_backend_mismatch=allow_backend_mismatch,
            prune_margin=prune_margin if prune else None,
            trial_memory_limit=trial_memory_limit, fit=fit, racing=racing,
            heartbeat_s=heartbeat, launcher=launcher, confirm=confirm,
            confirm_repeats=confirm_repeats, shrink=shrink, pgle=pgle)
    _print_preflight(planned)
    plan = planned.plan
    store = open_store(storage, must_exist=False, write=True)
    runner = StudyRunner(plan, store, SubprocessLauncher(), store.url,
                         facts=planned.report.environment)
    if workers > 1:
        from autotune.cli.worker import run_local_workers

        runner.prepare()  # the study and its recipe stored before any worker reads them
        run_local_workers(store, plan, workers)
        return
    try:
        _run_with_progress(runner, plan)
        finish(runner, confirm, confirm_repeats, shrink, pgle)
    finally:
        runner.close()


def finish(runner: Any, top: int, repeats: int, shrink: bool, pgle: int) -> None:
    """After the search: confirm the best `top`, shrink the recommendation, PGLE the best
    `pgle` (as asked; none for a study of memory alone), then print the best table."""
    from autotune.search import Objective

    if top and runner.plan.objectives != (Objective.MEMORY,):
        _confirm_with_progress(runner, top, repeats)
        if shrink:
            _shrink_with_progress(runner, repeats)
        if pgle:
            _pgle_with_progress(runner, pgle, repeats)
    print_best(runner.store, runner.plan.name, limit=10)


def _confirm_with_progress(runner: Any, top: int, repeats: int) -> None:
    out.print(f"confirming the best {top} configurations: {repeats} fresh processes each, "
              "interleaved with the baseline")
    runner.confirm(top, repeats, on_run=lambda ev: out.print(
        f"confirm {ev.done}/{ev.total}: trial #{ev.trial_number} {_confirm_text(ev)}",
        highlight=False))


def _shrink_with_progress(runner: Any, repeats: int) -> None:
    """Shrink the recommendation, one line per run (see `StudyRunner.shrink`)."""
    state = runner.shrink(repeats, on_run=lambda ev: out.print(
        f"shrink: trial #{ev.trial_number} {_shrink_text(ev)}", highlight=False))
    if state is None:
        return
    dropped = [r.flag for r in state.removals if r.dropped]
    out.print(f"shrunk trial #{state.trial_number} to {len(state.minimal)} of "
              f"{len(state.minimal) + len(dropped)} flags"
              + (f"; dropped {literal(', '.join(dropped))}" if dropped else "")
              + (f" ({literal(state.note)})" if state.note else ""), highlight=False)


def _pgle_with_progress(runner: Any, top: int, repeats: int) -> None:
    """The PGLE phase, one line per run (see `StudyRunner.pgle`), or why it cannot run."""
    from autotune.guided import pgle_refusal

    if why := pgle_refusal(runner.plan):
        out.print(f"PGLE skipped: {why}", highlight=False)
        return
    out.print(f"PGLE: the best {top} configurations with a profile each, {repeats} fresh "
              "processes each, timed against the same flags without it")
    runner.pgle(top, repeats, on_run=lambda ev: out.print(
        f"pgle {ev.done}/{ev.total}: trial #{ev.trial_number} {_confirm_text(ev)}",
        highlight=False))


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


def _print_preflight(planned: Any) -> None:
    """What the checks before the first trial changed or warn about (see autotune.preflight)."""
    checked, report, space = planned.preflight, planned.report, planned.plan.space
    if checked.dropped:
        noun = "flag" if len(checked.dropped) == 1 else "flags"
        out.print(f"left out {len(checked.dropped)} {noun} this XLA (jaxlib "
                  f"{report.jaxlib_version}) does not know: "
                  f"{literal(', '.join('--' + f for f in checked.dropped))}", highlight=False)
    for flag, values in checked.dropped_values.items():
        out.print(f"left out values of --{literal(flag)} this XLA rejects: "
                  f"{literal(', '.join(map(str, values)))}", highlight=False)
    if checked.backend_mismatch:
        out.print(f"[yellow]warning:[/] space '{literal(space.name)}' is for "
                  f"{literal(space.backend)}, JAX reports {literal(checked.backend)} here: "
                  "expect no effect to measure", highlight=False)


def _run_with_progress(runner: Any, plan: Any, *, until_done: bool = False,
                       limit: int | None = None, who: str = "") -> None:
    """Run the study's search with a progress bar of the whole study (every process's
    trials), or one line per trial where the output is no terminal. `until_done` waits
    for other processes' trials and takes over those of dead ones
    (`StudyRunner.run_until_done`); `limit` caps this process's launches."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    runner.prepare()
    runner.on_fit = _print_fit
    remaining = runner.remaining()
    if remaining == 0 and not until_done:
        out.print(f"study '{literal(plan.name)}' already holds {plan.trials} trials; "
                  f"pass --trials {plan.trials + 10} to run more")
        return
    choice = runner.choice
    out.print(f"{who}study '{literal(plan.name)}': {literal(plan.workload.name)} ({plan.preset}, "
              f"{plan.devices} devices) on space '{literal(plan.space_name)}', {remaining} trials "
              f"to run, {plan.mode.value} timing; minimising "
              f"{','.join(o.value for o in plan.objectives)} with {choice.name}"
              + (f" ({literal(choice.reason)})" if choice.reason else "")
              + (f", memory budget {fmt_bytes(plan.memory_budget_bytes)}"
                 if plan.memory_budget_bytes else ""), highlight=False)
    run = runner.run_until_done if until_done else runner.run
    if not out.is_terminal:  # logs and pipes: one line per trial instead of a live bar
        summary = run(on_trial=lambda ev: out.print(
            f"trial {ev.done}/{ev.total}: {_last_text(ev)[6:]}, {_best_text(ev)}",
            highlight=False), limit=limit)
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
    from autotune.results.fitted import summary_text

    out.print(literal(summary_text(fit)) + ("; `autotune best` says why" if fit.changes
                                            else ""), highlight=False)


def _print_summary(summary: Any) -> None:
    """Say what was not launched: repeated proposals answered from records, an early stop."""
    if summary.reused:
        out.print(f"{summary.reused} proposals repeated a configuration already measured "
                  "(same effective flags): their results were reused, not re-measured",
                  highlight=False)
    if summary.stopped:
        out.print(f"stopped early: {literal(summary.stopped)}", highlight=False)


def _best_text(ev: Any) -> str:
    return f"best: ×{ev.best_speedup:.3f}" if ev.best_speedup else "best: -"


def _last_text(ev: Any) -> str:
    shown = f"×{ev.speedup:.3f}" if ev.speedup else ev.outcome.kind.value
    return f"last: #{ev.number} {ev.role.value} {shown}"
