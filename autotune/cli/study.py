"""`autotune study`: plan, run with a progress display, print the best table."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer

from autotune.cli._common import DEFAULT_STORAGE, StorageOpt, open_store, out
from autotune.cli.results import print_best


def study(
    space: Annotated[str, typer.Option(help="Search space name or YAML file.")],
    benchmark: Annotated[str, typer.Option(help="Built-in benchmark to tune.")] = "transformer",
    trials: Annotated[int, typer.Option(min=1, help="Trials the study should hold in all.")] = 12,
    storage: StorageOpt = DEFAULT_STORAGE,
    name: Annotated[str | None, typer.Option(help="Study name (default SPACE-BENCHMARK-PRESET).")]
    = None,
    sampler: Annotated[str, typer.Option(help="tpe or random.")] = "tpe",
    seed: Annotated[int | None, typer.Option(help="Seed of the sampler.")] = None,
    timeout_per_trial: Annotated[float, typer.Option(min=1, help="Seconds per trial.")] = 300.0,
    preset: Annotated[str, typer.Option(help="Workload size: tiny, small or large.")] = "small",
    devices: Annotated[int, typer.Option(min=1, help="CPU devices for sharded workloads.")] = 8,
    steps: Annotated[int, typer.Option(min=3, help="Timed steps per trial.")] = 20,
    warmup: Annotated[int, typer.Option(min=1, help="Warm-up steps per trial.")] = 3,
    mode: Annotated[str, typer.Option(help="paired (in-process vs baseline) or direct.")]
    = "paired",
    drop_unknown: Annotated[bool, typer.Option(
        help="Leave out the space's flags this XLA does not know, instead of stopping.")] = False,
    allow_backend_mismatch: Annotated[bool, typer.Option(
        help="Run a space meant for another backend than JAX reports here.")] = False,
) -> None:
    """Tune the flags of SPACE on a benchmark; re-running the same command continues."""
    from autotune import spaces, workloads
    from autotune.launcher import SubprocessLauncher
    from autotune.records import MeasureMode
    from autotune.study import StudyPlan, StudyRunner, make_sampler

    loaded = spaces.load_space(space)
    work = workloads.resolve_benchmark(benchmark)
    make_sampler(sampler, seed)
    checked = _preflight(loaded, drop_unknown, allow_backend_mismatch)
    plan = StudyPlan(
        name=name or f"{loaded.name}-{work.name}-{preset}", space_name=loaded.name,
        space=checked.space,
        workload=work, preset=_preset(preset), devices=devices, trials=trials, sampler=sampler,
        seed=seed, timeout_per_trial=timeout_per_trial, steps=steps, warmup=warmup,
        mode=_mode(mode, MeasureMode), base_env=dict(os.environ),
    )
    store = open_store(storage, must_exist=False)
    runner = StudyRunner(plan, store, SubprocessLauncher(), store.url)
    _run_with_progress(runner, plan)
    print_best(store, plan.name, limit=10)


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
                  f"{', '.join('--' + f for f in checked.dropped)}", highlight=False)
    if checked.backend_mismatch:
        out.print(f"[yellow]warning:[/] space '{space.name}' is for {space.backend}, JAX reports "
                  f"{checked.backend} here: expect no effect to measure", highlight=False)
    return checked


def _preset(preset: str) -> str:
    from autotune.bench import PRESETS
    from autotune.errors import UsageError

    if preset not in PRESETS:
        raise UsageError(f"unknown preset '{preset}'. Known presets: {', '.join(PRESETS)}")
    return preset


def _mode(mode: str, enum: Any) -> Any:
    from autotune.errors import UsageError

    try:
        return enum(mode)
    except ValueError:
        raise UsageError(f"unknown mode '{mode}'. Known modes: paired, direct") from None


def _run_with_progress(runner: Any, plan: Any) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    runner.prepare()
    remaining = runner.remaining()
    if remaining == 0:
        out.print(f"study '{plan.name}' already holds {plan.trials} trials; "
                  f"pass --trials {plan.trials + 10} to run more")
        return
    out.print(f"study '{plan.name}': {plan.workload.name} ({plan.preset}, {plan.devices} devices) "
              f"on space '{plan.space_name}', {remaining} trials to run, {plan.mode.value} timing")
    if not out.is_terminal:  # logs and pipes: one line per trial instead of a live bar
        runner.run(on_trial=lambda ev: out.print(
            f"trial {ev.done}/{ev.total}: {_last_text(ev)[6:]}, {_best_text(ev)}", highlight=False))
        return
    columns = (TextColumn("[bold]trials"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[best]}"), TextColumn("{task.fields[last]}"),
               TimeElapsedColumn())
    with Progress(*columns, console=out, transient=False) as progress:
        task = progress.add_task("study", total=remaining, best="best: -", last="")
        runner.run(on_trial=lambda ev: progress.update(
            task, advance=1, best=_best_text(ev), last=_last_text(ev)))


def _best_text(ev: Any) -> str:
    return f"best: ×{ev.best_speedup:.3f}" if ev.best_speedup else "best: -"


def _last_text(ev: Any) -> str:
    shown = f"×{ev.speedup:.3f}" if ev.speedup else ev.outcome.kind.value
    return f"last: #{ev.number} {ev.role.value} {shown}"
