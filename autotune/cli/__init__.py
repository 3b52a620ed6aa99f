"""The `autotune` command line: the only package that imports typer.

Commands are registered here, explicitly, from the modules that implement
them. Every AutotuneError ends as one line on stderr and its exit code
(see `_common.friendly`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any

import typer

from autotune.cli import (
    apply,
    audit,
    catalog,
    dashboard,
    importance,
    pgle,
    results,
    study,
    worker,
)
from autotune.cli._common import friendly, out
from autotune.ground.resources import DISTRIBUTION, VERSION

app = typer.Typer(add_completion=True, no_args_is_help=True,
                  help="Find the best XLA flags for a JAX workload, measured honestly.")
spaces_app = typer.Typer(no_args_is_help=True, help="Search spaces.")
benchmarks_app = typer.Typer(no_args_is_help=True, help="Built-in benchmark workloads.")
db_app = typer.Typer(no_args_is_help=True, help="The results database.")
flags_app = typer.Typer(no_args_is_help=True, help="The flag catalog, checked against this XLA.")
app.add_typer(flags_app, name="flags")
app.add_typer(spaces_app, name="spaces")
app.add_typer(benchmarks_app, name="benchmarks")
app.add_typer(db_app, name="db")


def _command(group: typer.Typer, name: str, function: Callable[..., Any],
             **settings: Any) -> None:
    """Register `function` as `name` of `group`, with its docstring's first paragraph as
    the one-line summary the command lists show: rich keeps a docstring's line breaks,
    which cut a summary wrapped at 90 columns into ragged lines (`autotune --help`)."""
    paragraph = inspect.cleandoc(function.__doc__ or "").split("\n\n")[0]
    group.command(name, short_help=" ".join(paragraph.split()), **settings)(friendly(function))


_command(app, "study", study.study)
_command(app, "worker", worker.worker)
_command(app, "confirm", worker.confirm)
_command(app, "best", results.best)
_command(app, "export", results.export)
_command(app, "studies", results.studies)
_command(app, "recommend", results.recommend)
_command(app, "delete", results.delete)
_command(app, "trials", results.trials)
_command(app, "importance", importance.importance)
_command(app, "apply", apply.apply)
_command(app, "audit", audit.audit)
_command(app, "pgle", pgle.pgle)
_command(app, "dashboard", dashboard.dashboard)
_command(app, "report", dashboard.report)
_command(spaces_app, "list", catalog.spaces_list)
_command(spaces_app, "show", catalog.spaces_show)
_command(spaces_app, "validate", catalog.spaces_validate)
_command(flags_app, "list", catalog.flags_list)
_command(flags_app, "show", catalog.flags_show)
# Flag strings start with "--": let them through as arguments, not options.
_command(flags_app, "check", catalog.flags_check,
         context_settings={"ignore_unknown_options": True})
_command(benchmarks_app, "list", catalog.benchmarks_list)
_command(benchmarks_app, "example", catalog.benchmarks_example)
_command(db_app, "upgrade", results.db_upgrade)
_command(db_app, "current", results.db_current)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"autotune {VERSION} ({DISTRIBUTION})")
        raise typer.Exit()


@app.callback()
def _root(_version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_show_version,
        help="Print autotune's version and exit.")] = False,
          verbose: Annotated[int, typer.Option(
              "--verbose", "-v", count=True,
              help="Say more: -v logs what autotune notes as it goes, -vv debug too.")] = 0,
          quiet: Annotated[bool, typer.Option(
              "--quiet", "-q", help="Print nothing but errors (the exit code says how it "
                                    "went).")] = False) -> None:
    """Find the best XLA flags for a JAX workload, measured honestly."""
    set_verbosity(-1 if quiet else verbose)


def set_verbosity(level: int) -> None:
    """-1: errors only (`out` silent, logging at ERROR); 0: as usual (warnings logged);
    1: notes too (INFO); 2 or more: debug. Set on every command, so one run's choice
    never outlives it in a process that runs several (tests)."""
    import logging

    out.quiet = level < 0
    logger = logging.getLogger("autotune")
    logger.setLevel({-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO}.get(
        level, logging.DEBUG))
    if level > 0 and not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("autotune %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)


def main() -> None:
    """Console entry point."""
    app()
