"""`autotune pgle`: 003's profile run, conversion and performance run as one command.

Its options are made from `PgleOptions` (`cli._options.option_parameters`), as
`autotune study`'s are from `StudyOptions`."""

# Imports inside the commands are lazy on purpose: `autotune --help` and every command's
# start load only what that command needs (no Optuna, SQLAlchemy, numpy or jinja2).

from __future__ import annotations

import inspect
from typing import Any

from autotune.cli._common import (
    TABLE_WIDTH,
    FormatOpt,
    OutputFormat,
    counted,
    err,
    literal,
    out,
    print_json,
)
from autotune.cli._options import option_parameters
from autotune.ground.errors import AutotuneError
from autotune.study.options import PgleOptions


class PgleFailedError(AutotuneError):
    """No PGLE run timed anything (a stale or unreadable profile, a failing workload)."""


def pgle(*, fmt: str, **values: Any) -> None:
    """Profile a configuration with PGLE and measure whether the profile speeds it up."""
    from autotune.api import pgle as run
    from autotune.results.pgle import failed_everywhere, pgle_json

    options = PgleOptions.of(**values)
    with _progress(options.repeats) as tick:
        result = run(options, progress=tick)
    body = {"workload": result.workload, "preset": options.preset, "devices": options.devices,
            "config": options.config, "flags": dict(result.plan.config),
            **pgle_json(result.verdict)}
    if fmt == OutputFormat.JSON:
        print_json(body)
    else:
        _print(body)
    if failed_everywhere(result.verdict):
        raise PgleFailedError(f"no PGLE run was timed: {body['failure']}")


# typer reads the command's options from its signature: PgleOptions', then --format.
pgle.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
    *option_parameters(PgleOptions),
    inspect.Parameter("fmt", inspect.Parameter.KEYWORD_ONLY, default=OutputFormat.TABLE,
                      annotation=FormatOpt)])


class _progress:
    """A progress bar of the runs on stderr (it vanishes when done; stdout stays the
    report or the JSON alone)."""

    def __init__(self, total: int) -> None:
        from rich.progress import Progress

        self.bar = Progress(console=err, transient=True)
        self.total = total

    def __enter__(self) -> Any:
        self.bar.start()
        task = self.bar.add_task("PGLE: profile run, then performance runs", total=self.total)

        def tick(done: int, total: int, outcome: Any) -> None:
            self.bar.update(task, completed=done, description=f"PGLE run {done}/{total}: "
                            f"{outcome.kind.value}")
        return tick

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()


def _print(body: dict[str, Any]) -> None:
    """The verdict as labelled lines wrapped to 80 columns (a path or a flag name longer
    than a line is kept whole on its own line, never cut)."""
    import textwrap

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1e3:.3f} ms"

    times, runs = body["step_time_s"], body["runs"]
    devices = counted(body["devices"], "device")
    rows = [("workload", f"{body['workload']} ({body['preset']}, {devices})"),
            ("mode", str(body["mode"])),
            ("profile", body["profile"] or "(JAX keeps it)")]
    if body["profile_costs"] is not None:
        rows.append(("costs", f"{body['profile_costs']} instructions from "
                              f"{body['profile_source']}; {body['names_in_program']} named in "
                              "the performance run's program"))
    if body["speedup"] is not None:
        low, high = body["speedup_interval"]
        rows += [("step time", f"{ms(times['with_profile'])} with the profile, "
                               f"{ms(times['without_profile'])} without (median of {runs} "
                               f"process{'es' if runs != 1 else ''})"),
                 ("speedup", f"x{body['speedup']:.3f} [{low:.3f}, {high:.3f}]: "
                             f"{body['verdict']}" + (" (the same compiled program)"
                                                     if body["same_program"] else ""))]
    rows.append(("keep it", "yes: apply the profile with the configuration" if body["keep"]
                 else "no"))
    if body["note"]:
        rows.append(("note", body["note"]))
    for label, text in rows:
        for line in textwrap.wrap(text, width=TABLE_WIDTH, initial_indent=label.ljust(14),
                                  subsequent_indent=" " * 14, break_long_words=False,
                                  break_on_hyphens=False):
            out.print(literal(line), highlight=False, soft_wrap=True)
