"""Shared pieces of the command line: consoles, error mapping, storage option, formatting.

The `autotune.cli` package is the only place that imports typer.
"""

# Imports inside the commands are lazy on purpose: `autotune --help` and every command's
# start load only what that command needs (no Optuna, SQLAlchemy, numpy or jinja2).

from __future__ import annotations

import contextlib
import functools
import signal
import sys
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from autotune.api import (  # noqa: F401  (re-exported for the commands)
    DEFAULT_STORAGE,
    one_of,
    open_store,
    require_database,
    sqlite_file,
)
from autotune.ground.errors import AutotuneError

# Piped output (CI logs, files) gets a wide table instead of rich's 80 columns. No emoji
# codes: ":smile:" in a study name or flag value is text, not a picture.
out = Console(width=None if sys.stdout.isatty() else 160, emoji=False)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160, emoji=False)

StorageOpt = Annotated[str, typer.Option(
    "--storage", envvar="AUTOTUNE_STORAGE",
    help="Database URL: sqlite:///file.db (default ./autotune.db) or postgresql://...")]


def literal(value: object) -> str:
    """`str(value)` made safe to print through rich: the terminal shows its characters as data.

    Every non-printable character (ESC, newline, tab, other control and format
    characters) becomes its Python escape (`\\x1b`, `\\n`, `\\u200b`), so nothing
    in it can colour the terminal, move the cursor or break a line; rich markup
    (`[bold]`) is escaped, so it prints as written. Printable text is otherwise
    unchanged. Apply it once, where a value that came from outside (a study or
    space name, a flag name or value, a path, a trial child's message, an
    error's message) enters text for `out`/`err`, and never to its result again:
    a second pass would show the markup escapes. Data written to files (export
    YAML) stays raw.
    """
    text = str(value)
    visible = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    return escape(visible)


#: Tables and reports fit a terminal of this width; flag names and paths are never cut.
TABLE_WIDTH = 80


def print_record(name: str, facts: str) -> None:
    """One entry of a listing (already made safe with `literal`): its whole name on a line
    of its own, never cut whatever the width, and under it its facts, indented and
    wrapped within `TABLE_WIDTH` at spaces only (a flag name or a path stays whole on its
    line). A table would cut a long name to fit 80 columns (`studies`: `cpu-tra…`)."""
    out.print(name, highlight=False, soft_wrap=True)
    print_wrapped(facts, hanging="      ")


def print_wrapped(text: str, hanging: str) -> None:
    """`text` (already made safe with `literal`) indented by four spaces and wrapped within
    `TABLE_WIDTH` at spaces only, its later lines indented by `hanging`: a word longer
    than the line (a flag name, a path) stays whole, whatever the width."""
    import textwrap

    for line in textwrap.wrap(text, TABLE_WIDTH, initial_indent="    ",
                              subsequent_indent=hanging, break_long_words=False,
                              break_on_hyphens=False):
        out.print(line, highlight=False, soft_wrap=True)


def prose_width() -> int | None:
    """The width prose wraps at: `TABLE_WIDTH` on a terminal; None (no wrapping: one line
    per paragraph) where the output goes to a file, a log or another program."""
    return TABLE_WIDTH if out.is_terminal else None


def say(text: str) -> None:
    """Print one paragraph of prose (already made safe with `literal`): wrapped at
    `TABLE_WIDTH` on a terminal, never wrapped when piped (`prose_width`)."""
    width = prose_width()
    out.print(text, highlight=False, width=width, soft_wrap=width is None)


class OutputFormat(StrEnum):
    """How a reading command prints: a table for people, or JSON with stable keys."""

    TABLE = "table"
    JSON = "json"


FormatOpt = Annotated[OutputFormat, typer.Option(
    "--format", help="table (for people) or json (stable keys, for scripts)")]


def print_json(value: Any) -> None:
    """Write `value` as JSON on stdout: plain text, no markup, no wrapping."""
    import json

    typer.echo(json.dumps(value, indent=1))


def friendly(func: Callable[..., None]) -> Callable[..., None]:
    """Turn AutotuneError into one line on stderr and its exit code; a stop signal into
    128 + its number (Ctrl-C 130, SIGHUP 129, SIGTERM 143), as shells report them, also
    when the cleanup after the signal failed on top of it (`_stop_signal_under`).

    The message is printed through `literal`: messages name studies, flags and
    paths as given, and a newline in one shows as `\\n`.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        from autotune.ground.proc import interrupt_latch

        try:
            with interrupt_latch():
                func(*args, **kwargs)
        except BaseException as exc:
            if isinstance(exc, typer.Exit | SystemExit):
                raise
            stop = _stop_signal_under(exc)
            if stop is not None:
                _say_interrupted(stop, exc)
                raise typer.Exit(128 + stop) from None
            if isinstance(exc, AutotuneError):
                _say_error(exc)
                raise typer.Exit(exc.exit_code) from None
            failure = _database_failure(exc, kwargs.get("storage")) \
                if isinstance(exc, Exception) else None
            if failure is None:
                raise
            _say_error(failure)
            raise typer.Exit(failure.exit_code) from None

    return wrapper


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and the exceptions it was raised from or while handling, newest first."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def _stop_signal_under(exc: BaseException) -> int | None:
    """The stop signal (its number) that `exc` is, or that was being handled when `exc`
    was raised; None when neither.

    Cleanup after Ctrl-C can fail on top of it (alembic drops its half-made table on a
    connection that SQLAlchemy closed when the signal landed inside a migration): the
    user's stop is still what ended the command, and it is answered as one.
    """
    for link in _chain(exc):
        if isinstance(link, KeyboardInterrupt):
            return int(getattr(link, "signum", signal.SIGINT))
    return None


def _say_error(exc: AutotuneError) -> None:
    err.print(f"[bold red]error:[/] {literal(exc.message)}", highlight=False, soft_wrap=True)


def _say_interrupted(signum: int, exc: BaseException) -> None:
    """The line a stop signal ends a command with; a failure in the cleanup after it
    (`exc`, when it is not the stop itself) is named in the driver's words."""
    line = (f"interrupted ({signal.Signals(signum).name}): every finished trial is kept; "
            "run the same command to continue")
    if not isinstance(exc, KeyboardInterrupt):
        failure = exc if isinstance(exc, AutotuneError) else _database_failure(exc)
        reason = failure.message if failure is not None else f"{type(exc).__name__}: {exc}"
        line += (f" (cleaning up after the stop failed: {literal(reason)}; what it left "
                 "open is taken back when the study runs again)")
    with contextlib.suppress(OSError):  # SIGHUP: the terminal may be gone
        err.print(line, highlight=False, soft_wrap=True)


def _database_failure(exc: BaseException, storage: object = None) -> AutotuneError | None:
    """One clear error for a database failure that reached the command raw (Optuna's
    storage calls SQLAlchemy itself: a full disk or a server gone mid-study, and cleanup
    that failed again on top of it): an AutotuneError in the exception's chain where there
    is one (autotune's own words), else the chain's first error of the database driver
    (Optuna's wrapper only without one), as `storage.engine.database_failure` words it,
    naming `storage` (the command's `--storage` URL, password hidden) where it is one;
    None when the chain holds neither."""
    chain = _chain(exc)
    for link in chain:
        if isinstance(link, AutotuneError):
            return link
    # Optuna's StorageInternalError blames "invalid data"; the driver's error under it says
    # what happened (a full disk, a server gone): the driver's words first.
    found = [link for link in chain if type(link).__module__.startswith(
        ("sqlalchemy", "sqlite3", "psycopg"))] or [
        link for link in chain if type(link).__module__.startswith("optuna.exceptions")]
    if not found:
        return None
    from autotune.storage.engine import database_failure, mask_url

    return database_failure(found[0], mask_url(storage) if isinstance(storage, str) else "")


def counted(n: int, noun: str) -> str:
    """`n` and `noun`, plural unless `n` is 1: "1 device", "8 devices"."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def fmt_bytes(n: int | None) -> str:
    """Bytes as the read model writes them (`results.notes.size_text`)."""
    from autotune.results.notes import size_text

    return size_text(n)


def fmt_flags(flags: dict[str, Any], sep: str = "\n") -> str:
    """`name=value` per flag, sorted, joined by `sep` ("(defaults)" when empty).

    Names and values go through `literal`: the result is ready to print, not to escape again.
    """
    from autotune.flags.compose import render_value

    return sep.join(f"{literal(k)}={literal(render_value(v))}"
                    for k, v in sorted(flags.items())) or "(defaults)"
