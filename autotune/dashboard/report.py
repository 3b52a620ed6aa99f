"""`autotune report`: a study's page as one file to share (HTML) or to paste (Markdown).

The HTML report is the dashboard's study page rendered with every asset
inlined (style, the page's script) and its two charts drawn as SVG (with
matplotlib, as the Markdown report's PNGs: plotly.js alone is 4.6 MB), so it
opens from a file with no network and a small study's report weighs tens of
kilobytes; links to other pages of the dashboard are left out. The Markdown
report carries the same figures as text, with its two charts as PNG files
beside it. Both lay out `results.view.study_page`, and both say which autotune
wrote them, when, and on which jaxlib the study was measured (`made`).
"""

# Imports inside the functions are lazy on purpose: matplotlib, the templates and the read
# model load only when a report is written, so that importing this module stays light.

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.ground.errors import ExportError

if TYPE_CHECKING:
    from autotune.storage.store import Store


def study_page(store: Store, name: str) -> dict[str, Any]:
    """The study page's figures, as the dashboard computes them, and under `made` what
    wrote the report (`made`)."""
    from autotune.flags.catalog import load_catalog
    from autotune.results.view import study_page as view

    runs = store.runs(name)
    page = view(store.get_study(name), runs, load_catalog(), store.workers(name),
                claims=store.claims(name))
    page["made"] = made(sorted({r.environment.jaxlib_version for r in runs if r.environment}))
    return page


def made(jaxlibs: list[str]) -> dict[str, str]:
    """Who wrote a report and when: `autotune` (its version), `written` (UTC, to the
    minute: now, or `SOURCE_DATE_EPOCH`'s time as `export` takes it) and `jaxlib` (the
    versions the study's runs were measured with, or "unknown")."""
    from datetime import datetime

    from autotune.ground.resources import VERSION
    from autotune.results.export import exported_at

    written = datetime.fromisoformat(exported_at()).strftime("%Y-%m-%d %H:%M UTC")
    return {"autotune": VERSION, "jaxlib": ", ".join(jaxlibs) or "unknown",
            "written": written}


def made_text(page: dict[str, Any]) -> str:
    """The report's line on what wrote it."""
    m = page["made"]
    return (f"written by autotune {m['autotune']} on {m['written']}; "
            f"measured with jaxlib {m['jaxlib']}")


def html_report(page: dict[str, Any]) -> str:
    """The study page as one self-contained HTML document, its charts inline SVG."""
    from autotune.dashboard.render import asset, page_html

    inline = {"style.css": asset("style.css"), "dashboard.js": asset("dashboard.js")}
    charts = {name: _svg(fig) for name, fig in _figures(page)}
    return page_html("study.html", page=page, offline=True, inline=inline, refresh_s=0,
                     poll=None, charts=charts, made=made_text(page))


def write_report(store: Store, name: str, path: Path, fmt: str = "html") -> list[Path]:
    """Write the report of study `name` to `path`; return every file written (the report
    first, then the charts of a Markdown report).

    Raises:
        StudyNotFoundError: no such study.
        ExportError: a file cannot be written.
    """
    page = study_page(store, name)
    try:
        if fmt == "html":
            path.write_text(html_report(page), encoding="utf-8")
            return [path]
        return markdown_report(page, path)
    except OSError as exc:
        raise ExportError(f"cannot write {exc.filename or path}: {exc.strerror}; "
                          "choose another -o path") from exc


def markdown_report(page: dict[str, Any], path: Path) -> list[Path]:
    """Write the Markdown report and its PNG charts (`STEM-progress.png`,
    `STEM-scatter.png` beside `path`); return the files written."""
    charts = _charts(page, path)
    path.write_text(markdown_text(page, [c.name for c in charts]), encoding="utf-8")
    return [path, *charts]


def markdown_text(page: dict[str, Any], charts: list[str]) -> str:
    """The report's Markdown: the recommendation, the best table, notes, contributions,
    failures and the charts' image links."""
    from autotune.dashboard.render import interval_text, ms_text, search_text, speedup_text
    from autotune.flags.compose import render_value
    from autotune.results.notes import size_text

    s, rec = page["study"], page["recommendation"]
    lines = [f"# autotune: {_md(s['name'])}", "", f"_{_md(made_text(page))}_", "",
             f"{_md(s['benchmark'])} ({_md(s['preset'])}) on space {_md(s['space'])}, "
             f"{s['devices']} devices, {s['mode']} mode.", "",
             "**Recommendation:** " + (
                 f"apply trial {rec['trial']}: {speedup_text(rec['speedup'])} "
                 f"{interval_text(rec['interval'])} faster than XLA's defaults"
                 if rec["recommended"] else "defaults: nothing measurably faster"),
             "", _md(rec["reason"]), ""]
    lines += [f"- `{_code(k)}={_code(render_value(v))}`" for k, v in sorted(rec["flags"].items())]
    if rec["xla_flags"]:
        lines += ["", "```bash", f"XLA_FLAGS='{rec['xla_flags']}'", "```"]
    lines += ["", "| rank | trial | own step | search speedup | confirmed speedup (95% CI) "
              "| peak memory | flags changed |", "|---|---|---|---|---|---|---|"]
    for row in page["best"]:
        confirmed = "" if row["rank"] is None else "not confirmed" if row["verdict"] is None \
            else (f"{speedup_text(row['confirmed_speedup'])} "
                  f"{interval_text(row['confirmed_interval'])} {row['verdict']}"
                  + (" (recommended)" if row["recommended"] else ""))
        flags = "<br>".join(f"`{_code(k)}={_code(render_value(v))}`"
                            for k, v in sorted(row["flags_changed"].items()))
        lines.append(f"| {row['rank'] if row['rank'] is not None else 'baseline'} "
                     f"| {row['trial']} | {ms_text(row['median_step_s'])} "
                     f"| {search_text(row)} | {confirmed} "
                     f"| {size_text(row['peak_memory_bytes'])} | {flags} |")
    lines += [""] + [f"- {_md(n['text'])}" for n in page["notes"]] + [""]
    lines += [f"![{name}]({name})" for name in charts]
    lines += ["", "## Failures", ""] + [f"- {f['kind']}: {f['count']}" for f in
                                         page["failures"]] + ["" if page["failures"] else "none"]
    return "\n".join(lines) + "\n"


def _md(text: object) -> str:
    """Outside text made inert in Markdown: HTML and table pipes escaped."""
    import html

    return html.escape(str(text)).replace("|", "\\|").replace("\n", " ")


def _code(text: object) -> str:
    return str(text).replace("`", "'").replace("|", "\\|")


def _charts(page: dict[str, Any], path: Path) -> list[Path]:
    """The best-so-far and step-time/memory charts as PNG files beside `path`."""
    import matplotlib.pyplot as plt

    written = [_save(fig, path.with_name(f"{path.stem}-{name}.png"))
               for name, fig in _figures(page)]
    plt.close("all")
    return written


def _svg(fig: Any) -> str:
    """One figure as an inline SVG element (no XML prolog), then closed."""
    import io

    import matplotlib.pyplot as plt

    fig.tight_layout()
    text = io.StringIO()
    fig.savefig(text, format="svg")
    plt.close(fig)
    return text.getvalue()[text.getvalue().index("<svg"):]


def _figures(page: dict[str, Any]) -> list[tuple[str, Any]]:
    """The best-so-far (`progress`) and step-time/memory (`scatter`) charts as matplotlib
    figures, each where the page has points for it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = []
    points = [p for p in page["best_so_far"] if p["best"] is not None]
    if points:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.scatter([p["n"] for p in page["best_so_far"] if p["speedup"]],
                   [p["speedup"] for p in page["best_so_far"] if p["speedup"]], s=10,
                   c="#9ab", label="each process")
        ax.step([p["n"] for p in points], [p["best"] for p in points], where="post",
                label="best so far (pooled, backed)")
        ax.set(xlabel="processes measured", ylabel="speedup vs defaults")
        ax.legend()
        figures.append(("progress", fig))
    pts = [p for p in page["scatter"]["points"]
           if p["median_step_s"] is not None and p["peak_memory_bytes"] is not None]
    if pts:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.scatter([p["median_step_s"] * 1e3 for p in pts],
                   [p["peak_memory_bytes"] / 2**20 for p in pts], s=14, label="configurations")
        front = [p for p in pts if p["pareto"]]
        if front:
            ax.plot([p["median_step_s"] * 1e3 for p in front],
                    [p["peak_memory_bytes"] / 2**20 for p in front], "o:", mfc="none",
                    color="#d04a4a", label="Pareto front")
        ax.set(xlabel="own-process median step (ms)", ylabel="peak memory (MiB)")
        ax.legend()
        figures.append(("scatter", fig))
    return figures


def _save(fig: Any, target: Path) -> Path:
    fig.tight_layout()
    fig.savefig(target, dpi=100)
    return target
