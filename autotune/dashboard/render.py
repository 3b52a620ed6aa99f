"""Templates and the filters that format figures for people (jinja2, autoescaped).

Used by the dashboard's routes and by `autotune report`, which renders the
study page into one file with every asset inlined. Formatting only: each
figure arrives computed by `autotune.results.view`.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2

from autotune.flags.compose import render_value
from autotune.results.notes import size_text

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"


def speedup_text(value: float | None) -> str:
    return "-" if value is None else f"×{value:.3f}"


def search_text(row: dict[str, Any]) -> str:
    """The search figure of a `best` row as every view shows it: the program's pooled
    speedup with its number of processes where more than one timed it (`×1.250 n=4`),
    else the one process's figure."""
    if row["observations"] and row["observations"] > 1:
        return f"{speedup_text(row['pooled_speedup'])} n={row['observations']}"
    return speedup_text(row["search_speedup"])


def interval_text(value: list[float] | None) -> str:
    return "" if not value else f"[{value[0]:.3f}, {value[1]:.3f}]"


def ms_text(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f} ms"


def seconds_text(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _segment(text: object) -> str:
    """One path segment of a URL: a study name with `/`, `?` or `<` stays one segment."""
    return quote(str(text), safe="")


def _when(iso: str | None) -> str:
    return "-" if not iso else iso[:19].replace("T", " ")


@cache
def environment() -> jinja2.Environment:
    """The template environment: package templates, autoescape on, strict undefined. One
    per process: it keeps each template compiled (jinja2 renders from many threads)."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters.update(speedup=speedup_text, interval=interval_text, ms=ms_text,
                       seconds=seconds_text, size=size_text, search=search_text,
                       seg=_segment, when=_when, value=render_value)
    return env


def page_html(template: str, *, offline: bool = False, inline: dict[str, str] | None = None,
              **context: Any) -> str:
    """Render one page. `offline` (the report) inlines `inline`'s assets and drops links
    to pages that a single file cannot hold."""
    return environment().get_template(template).render(
        offline=offline, inline=inline or {}, **context)


def asset(name: str) -> str:
    """The text of one of the dashboard's own static files."""
    return (STATIC / name).read_text(encoding="utf-8")
