"""`autotune study`: plan, run with a progress display, print the best table.

The command has one option per field of `StudyOptions`, made from the field
(`cli._options.option_parameters`): adding a field adds the option. Only what is not a
study option is written here: the storage, local workers, and `--no-prune`.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any

import typer

from autotune.cli._common import DEFAULT_STORAGE, StorageOpt, literal, open_store, out, say
from autotune.cli._options import option_parameters
from autotune.study.options import StudyOptions


def study(*, storage: str, workers: int, prune: bool, restart: bool, submit: bool,
          **values: Any) -> None:
    """Tune the flags of SPACE on a benchmark; re-running the same command continues."""
    # Imported when the command runs, so that `autotune --help` loads no Optuna or SQLAlchemy.
    from autotune.api import plan_study
    from autotune.cli import _progress
    from autotune.study.options import AfterSearch
    from autotune.study.service import open_runner

    if not prune:
        values["prune_margin"] = None
    options = StudyOptions.of(**values)
    if submit:
        _submit(options, storage, workers, restart)
        return
    with out.status("checking the space's flags against the installed XLA..."):
        planned = plan_study(options)
    _progress.print_preflight(planned)
    plan = planned.plan
    store = open_store(storage, must_exist=False, write=True)
    if restart and plan.name in {s.name for s in store.list_studies()}:
        from autotune.api.store import delete_study

        runs = delete_study(storage, plan.name)
        say(f"--restart: deleted study '{literal(plan.name)}' and its {runs} runs")
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


def _submit(options: StudyOptions, storage: str, workers: int, restart: bool) -> None:
    """`--submit`: store the study for a standing pool of workers, measure nothing."""
    from autotune.api.plan import submit_study
    from autotune.ground.errors import UsageError

    if workers > 1:
        raise UsageError("--submit queues the study for a standing pool and measures nothing "
                         "here: drop --workers, and start `autotune worker --storage URL` "
                         "on the machines that measure")
    done = submit_study(storage, options, restart=restart)
    if done.deleted is not None:
        say(f"--restart: deleted study '{literal(done.name)}' and its {done.deleted} runs")
    say(f"submitted study '{literal(done.name)}': nothing is measured here. A standing "
        f"pool measures it: `autotune worker --storage {literal(storage)}` on each "
        "machine; `autotune studies` shows its state")


def _own_parameters() -> list[inspect.Parameter]:
    """The options of `autotune study` that are not study options."""
    def option(name: str, annotation: Any, default: Any) -> inspect.Parameter:
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                 annotation=annotation)
    return [
        option("storage", StorageOpt, DEFAULT_STORAGE),
        option("workers", Annotated[int, typer.Option(
            min=1, help="Local worker processes to measure with (1: this process); each is "
                        "an `autotune worker` that can be killed alone.")], 1),
        option("prune", Annotated[bool, typer.Option(
            help="Stop clearly slower trials early (--no-prune: never).")], True),
        option("restart", Annotated[bool, typer.Option(
            "--restart", help="Delete the study of this name first (its runs too) and start "
                              "over: a workload fixed after its baseline failed.")], False),
        option("submit", Annotated[bool, typer.Option(
            "--submit", help="Store the study for a standing pool of workers (`autotune "
                             "worker` without --study) and exit; nothing is measured or "
                             "probed here.")], False),
    ]


# typer reads the command's options from its signature: the study's, then its own.
study.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [*option_parameters(StudyOptions), *_own_parameters()])
