"""`autotune study`: plan, run with a progress display, print the best table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from autotune.cli._common import DEFAULT_STORAGE, StorageOpt, open_store, out


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
    settle_tolerance: Annotated[float, typer.Option(
        min=0.001, max=0.5, help="Warm-up ends once the last 5 steps of every executable lie "
                                 "within this fraction of their median (0.05: 5%).")] = 0.05,
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
    heartbeat_s: Annotated[int, typer.Option(
        "--heartbeat", min=1, help="Seconds between a worker's heartbeats; one silent for "
                                   "twice as long is dead, and its trial goes back to the "
                                   "queue.")] = 30,
    launcher: Annotated[str | None, typer.Option(
        help="Run each trial through a cluster launcher, e.g. \"srun -N 2 "
             "--ntasks-per-node 1 {cmd}\" ({cmd} is the trial; process 0 reports).")] = None,
    pgle: Annotated[int, typer.Option(
        min=0, help="After confirmation, measure the best K configurations again with a "
                    "PGLE profile collected for each; `export` carries a profile that is "
                    "confirmed faster (paired mode; 0: off).")] = 0,
) -> None:
    """Tune the flags of SPACE on a benchmark; re-running the same command continues."""
    # Imported when the command runs, so that `autotune --help` loads no Optuna or SQLAlchemy.
    from autotune.api import StudyOptions, plan_study
    from autotune.cli import _progress
    from autotune.study.options import AfterSearch
    from autotune.study.service import open_runner

    # Every option of the study is a parameter of this command named as its field.
    given = {k: v for k, v in locals().items() if k in StudyOptions.model_fields}
    options = StudyOptions.of(**{**given, "prune_margin": prune_margin if prune else None})
    with out.status("checking the space's flags against the installed XLA..."):
        planned = plan_study(options)
    _progress.print_preflight(planned)
    plan = planned.plan
    store = open_store(storage, must_exist=False, write=True)
    runner = open_runner(plan, store, planned.report.environment)
    if workers > 1:
        runner.prepare()  # the study and its recipe stored before any worker reads them
        _progress.run_local_workers(store, plan, workers)
        return
    try:
        _progress.run_with_progress(runner, plan)
        _progress.finish(runner, AfterSearch.of(options))
    finally:
        runner.close()
