"""`autotune study`: plan, run with a progress display, print the best table."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from autotune.cli._common import (
    DEFAULT_STORAGE,
    StorageOpt,
    fmt_bytes,
    literal,
    one_of,
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
) -> None:
    """Tune the flags of SPACE on a benchmark; re-running the same command continues."""
    from autotune import spaces
    from autotune.launcher import SubprocessLauncher
    from autotune.records import MeasureMode
    from autotune.search import Objective, choose_sampler, parse_objectives
    from autotune.study import StudyPlan, StudyRunner

    loaded = spaces.load_space(space)
    work, argv = _workload(benchmark, script, command)
    objectives = parse_objectives(objective)
    budget = _size(memory_budget, "--memory-budget")
    choose_sampler(sampler, objectives, loaded, trials)  # a bad choice stops before any probe
    checked = _preflight(loaded, drop_unknown, allow_backend_mismatch)
    plan = StudyPlan(
        name=name or f"{loaded.name}-{work.name}-{preset}", space_name=loaded.name,
        space=checked.space,
        workload=work, preset=_preset(preset), devices=devices, trials=trials, sampler=sampler,
        seed=seed, timeout_per_trial=timeout_per_trial, steps=steps, warmup=warmup,
        max_warmup=max_warmup,
        mode=_mode(mode, MeasureMode), base_env=dict(os.environ), command=argv,
        memory_limit_bytes=_size(trial_memory_limit, "--trial-memory-limit"),
        prune_margin=prune_margin if prune else None, objectives=objectives,
        memory_budget_bytes=budget,
    )
    store = open_store(storage, must_exist=False, write=True)
    runner = StudyRunner(plan, store, SubprocessLauncher(), store.url)
    _run_with_progress(runner, plan)
    if confirm and plan.objectives != (Objective.MEMORY,):
        _confirm_with_progress(runner, confirm, confirm_repeats)
        if shrink:
            _shrink_with_progress(runner, confirm_repeats)
    print_best(store, plan.name, limit=10)


def _workload(benchmark: str, script: Path | None, command: str | None) -> tuple[Any, Any]:
    """The workload to tune: a built-in benchmark, the user's file, or the user's program.

    Raises:
        UsageError: both --script and --command; a --command that does not
            parse, is empty, or whose program cannot be run (see `_check_program`).
    """
    from autotune import workloads
    from autotune.errors import UsageError

    if script is not None and command is not None:
        raise UsageError("give --script or --command, not both")
    if script is not None:
        return workloads.resolve_script(str(script)), None
    if command is not None:
        argv = _command_argv(command)
        return workloads.command_info(argv), argv
    return workloads.resolve_benchmark(benchmark), None


def _command_argv(command: str) -> tuple[str, ...]:
    """--command split like a shell would (never run by one), its program checked runnable."""
    import shlex

    from autotune.errors import UsageError

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
    import shlex
    import shutil

    from autotune.errors import UsageError

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


def _size(text: str | None, option: str) -> int | None:
    from autotune.errors import UsageError
    from autotune.spaces import parse_size

    if text is None:
        return None
    try:
        size = parse_size(text)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{option} '{text}' is not a size like 16GiB: {exc}") from None
    if size <= 0:
        raise UsageError(f"{option} '{text}' must be more than 0 bytes")
    return size


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


def _preflight(space: Any, drop_unknown: bool, allow_mismatch: bool) -> Any:
    """Check the space against the installed XLA before any trial (see autotune.preflight)."""
    from autotune import preflight
    from autotune.flags.catalog import load_catalog
    from autotune.flags.probe import probe

    catalog = load_catalog()
    with out.status("checking the space's flags against the installed XLA..."):
        report = probe(catalog, extra=sorted(space.flags()))
    checked = preflight.check(space, catalog, report, drop_unknown=drop_unknown,
                              allow_backend_mismatch=allow_mismatch)
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
    return checked


def _preset(preset: str) -> str:
    from autotune.bench import PRESETS

    return one_of(preset, PRESETS, "preset")


def _mode(mode: str, enum: Any) -> Any:
    """The member of `enum` named by `mode`; UsageError naming the known ones otherwise."""
    return enum(one_of(mode, (m.value for m in enum), "mode"))


def _run_with_progress(runner: Any, plan: Any) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    runner.prepare()
    remaining = runner.remaining()
    if remaining == 0:
        out.print(f"study '{literal(plan.name)}' already holds {plan.trials} trials; "
                  f"pass --trials {plan.trials + 10} to run more")
        return
    choice = runner.choice
    out.print(f"study '{literal(plan.name)}': {literal(plan.workload.name)} ({plan.preset}, "
              f"{plan.devices} devices) on space '{literal(plan.space_name)}', {remaining} trials "
              f"to run, {plan.mode.value} timing; minimising "
              f"{','.join(o.value for o in plan.objectives)} with {choice.name}"
              + (f" ({literal(choice.reason)})" if choice.reason else "")
              + (f", memory budget {fmt_bytes(plan.memory_budget_bytes)}"
                 if plan.memory_budget_bytes else ""), highlight=False)
    if not out.is_terminal:  # logs and pipes: one line per trial instead of a live bar
        summary = runner.run(on_trial=lambda ev: out.print(
            f"trial {ev.done}/{ev.total}: {_last_text(ev)[6:]}, {_best_text(ev)}", highlight=False))
        _print_summary(summary)
        return
    columns = (TextColumn("[bold]trials"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[best]}"), TextColumn("{task.fields[last]}"),
               TimeElapsedColumn())
    with Progress(*columns, console=out, transient=False) as progress:
        task = progress.add_task("study", total=remaining, best="best: -", last="")
        summary = runner.run(on_trial=lambda ev: progress.update(
            task, advance=1, best=_best_text(ev), last=_last_text(ev)))
    _print_summary(summary)


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
