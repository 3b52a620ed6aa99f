"""The `autotune` command line: the only package that imports typer.

Commands are registered here, explicitly, from the modules that implement
them. Every AutotuneError ends as one line on stderr and its exit code
(see `_common.friendly`).
"""

from __future__ import annotations

from typing import Annotated

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

app.command("study")(friendly(study.study))
app.command("worker")(friendly(worker.worker))
app.command("confirm")(friendly(worker.confirm))
app.command("best")(friendly(results.best))
app.command("export")(friendly(results.export))
app.command("studies")(friendly(results.studies))
app.command("recommend")(friendly(results.recommend))
app.command("delete")(friendly(results.delete))
app.command("trials")(friendly(results.trials))
app.command("importance")(friendly(importance.importance))
app.command("apply")(friendly(apply.apply))
app.command("audit")(friendly(audit.audit))
app.command("pgle")(friendly(pgle.pgle))
app.command("dashboard")(friendly(dashboard.dashboard))
app.command("report")(friendly(dashboard.report))
spaces_app.command("list")(friendly(catalog.spaces_list))
spaces_app.command("show")(friendly(catalog.spaces_show))
spaces_app.command("validate")(friendly(catalog.spaces_validate))
flags_app.command("list")(friendly(catalog.flags_list))
flags_app.command("show")(friendly(catalog.flags_show))
# Flag strings start with "--": let them through as arguments, not options.
flags_app.command("check", context_settings={"ignore_unknown_options": True})(
    friendly(catalog.flags_check))
benchmarks_app.command("list")(friendly(catalog.benchmarks_list))
benchmarks_app.command("example")(friendly(catalog.benchmarks_example))
db_app.command("upgrade")(friendly(results.db_upgrade))
db_app.command("current")(friendly(results.db_current))


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
