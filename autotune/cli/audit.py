"""`autotune audit`: does each flag of a set you carry still help here? (`autotune.api.audit`)."""

# Imports inside the command are lazy on purpose: `autotune --help` loads no Optuna or
# SQLAlchemy.

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from autotune.cli._common import (
    DEFAULT_STORAGE,
    FormatOpt,
    OutputFormat,
    StorageOpt,
    literal,
    out,
    print_json,
    say,
)
from autotune.results.confirmation import CONFIRM_MAX
from autotune.study.options import PRESET_CHOICES


def audit(
    flags: Annotated[str | None, typer.Option(
        "--flags", help="The flag set, as XLA_FLAGS holds it: \"--xla_a=1 --xla_b=true\".")
    ] = None,
    from_env: Annotated[bool, typer.Option(
        "--from-env", help="Audit this shell's XLA_FLAGS and LIBTPU_INIT_ARGS.")] = False,
    benchmark: Annotated[str, typer.Option(help="Built-in benchmark to measure on.")
                         ] = "transformer",
    script: Annotated[str | None, typer.Option(
        help="Your own workload file defining workload(preset) instead.")] = None,
    command: Annotated[str | None, typer.Option(
        help="Any program that measures through autotune.bench.report() instead.")] = None,
    preset: Annotated[str, typer.Option(
        help="Workload size: " + ", ".join(PRESET_CHOICES) + ".")] = "small",
    devices: Annotated[int, typer.Option(min=1, help="CPU devices for sharded workloads.")
                       ] = 8,
    steps: Annotated[int, typer.Option(min=3, help="Timed steps per process.")] = 20,
    confirm_repeats: Annotated[int, typer.Option(
        min=2, help="Fresh processes for the whole set, before sequential confirmation.")
    ] = 2,
    confirm_max: Annotated[int, typer.Option(
        min=0, help="At most this many processes for the whole set (0: no sequential "
                    "confirmation).")] = CONFIRM_MAX,
    name: Annotated[str | None, typer.Option(
        help="The audit study's name (default audit-WORKLOAD-PRESET-Ndev-DIGEST).")] = None,
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Write the minimal set as an export (YAML) here.")] = None,
    storage: StorageOpt = DEFAULT_STORAGE,
    fmt: FormatOpt = OutputFormat.TABLE,
) -> None:
    """Lint a flag set against the installed XLA, measure it against XLA's defaults with
    the study's confirmation rules, ablate it flag by flag, and say of each flag: unknown
    or obsolete, no effect on the compiled program, measurably helps, measurably hurts,
    or no measurable effect. Re-running the same command resumes.

    JSON: `{study, jaxlib, flags, whole_set, minimal_set, recommended, note, lint_notes}`,
    each flag `{flag, value, verdict, evidence, ratio_without, interval_without}`.
    """
    from autotune.api.audit import audit_report, measure_audit, plan_audit
    from autotune.cli import _progress
    from autotune.ground.errors import UsageError

    libtpu = ""
    if from_env:
        flags, libtpu = os.environ.get("XLA_FLAGS", ""), os.environ.get("LIBTPU_INIT_ARGS", "")
    if flags is None:
        raise UsageError("give the flags to audit: autotune audit --flags \"--xla_...=...\", "
                         "or --from-env to audit this shell's XLA_FLAGS")
    workload = {k: v for k, v in (("script", script), ("command", command)) if v}
    with out.status("linting the flags against the installed XLA..."):
        plan = plan_audit(flags, libtpu, name=name, devices=devices, preset=preset,
                          steps=steps, confirm_repeats=confirm_repeats,
                          confirm_max=confirm_max,
                          **(workload or {"benchmark": benchmark}))
    if plan.planned is not None:
        quiet = fmt == OutputFormat.JSON
        measure_audit(plan, storage, search=None if quiet else _search,
                      watcher=None if quiet else _progress.lines())
    report = audit_report(plan, storage)
    if output is not None and report.export is not None:
        from autotune.results.export import ExportFormat, write_export

        write_export(report.export, output, ExportFormat.YAML)
    if fmt == OutputFormat.JSON:
        print_json(report.to_json())
        return
    _print(report, output)


def _search(runner: Any, plan: Any) -> None:
    """The audit study's search with the study's progress display; nothing when a
    re-run finds it measured."""
    from autotune.cli import _progress

    runner.prepare()
    if runner.remaining():
        _progress.run_with_progress(runner, plan)


def _print(report: Any, output: Path | None) -> None:
    """Each flag on a line of its own (never cut), its verdict and evidence under it; then
    the whole set's line and the minimal set's."""
    from autotune.results.confirmation import names_its_processes

    say(f"audit of {len(report.flags)} flags on jaxlib {literal(report.jaxlib)}"
        + (f" (study {literal(report.study)})" if report.study else "") + ":")
    for flag in report.flags:
        out.print(literal(flag.flag + ("" if flag.value is None else f"={flag.value}")),
                  highlight=False, soft_wrap=True)
        say(f"    [bold]{literal(flag.verdict.value)}[/]: {literal(flag.evidence)}")
    whole = report.whole_set
    if whole is not None:
        interval, runs = whole.get("speedup_interval"), whole.get("confirmation_runs")
        verdict = str(whole.get("verdict"))  # "slower in 2 processes" names them already
        where = "" if names_its_processes(verdict, runs) else f" in {runs} fresh processes"
        say(f"the whole set against XLA's defaults: {literal(verdict)}"
            + (f", ×{whole['speedup']:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]{where}"
               if interval else ""))
    if report.note:
        say(f"note: {literal(report.note)}")
    if report.export is not None:
        minimal = report.export["flags"]
        say("minimal set: " + (literal(report.export["xla_flags"])
                               if minimal else "none (keep XLA's defaults)")
            + (f"; written to {literal(output)}" if output is not None else ""))
