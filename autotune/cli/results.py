"""`autotune best`, `export`, `studies`, `trials` and `db`: reading what studies measured."""

# Imports inside the commands are lazy on purpose: `autotune --help` and every command's
# start load only what that command needs (no Optuna, SQLAlchemy, numpy or jinja2).

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from autotune.cli._common import (
    DEFAULT_STORAGE,
    TABLE_WIDTH,
    FormatOpt,
    OutputFormat,
    StorageOpt,
    counted,
    fmt_bytes,
    fmt_flags,
    literal,
    open_store,
    out,
    print_json,
    print_record,
    print_wrapped,
    require_database,
    say,
)


def print_best(store: Any, study_name: str, limit: int, fmt: str = "table",
               environment: str | None = None) -> None:
    """The best table of a study and the notes that qualify it (or its rows as JSON).

    A study measured in several environments gets a table per environment under a
    one-line header, the main one (the recommendation's) first; `environment` (a key,
    or a prefix naming one) shows that environment alone, as if it were the study's
    only one. The table is drawn from the rows `--format json` prints. A study of
    one environment and one objective, unchanged since its last process kept its
    page (`Store.current_view`), is shown from that page: no run is read.

    Raises:
        UsageError: no environment, or several, match `environment`.
    """
    if environment is None and limit == PAGE_ROWS and _print_kept(store, study_name, fmt):
        return
    from autotune.flags.catalog import load_catalog
    from autotune.results.notes import environment_header, study_notes
    from autotune.results.ranking import environments
    from autotune.results.study_results import StudyResults

    record = store.get_study(study_name)
    runs = store.runs(study_name)
    if environment is not None:
        runs = _environment_runs(study_name, runs, environment)
    results = StudyResults.of(record, runs, load_catalog())
    shown = results.rows(limit)
    rows = results.best_json(shown)
    if fmt == OutputFormat.JSON:
        print_json(rows)
        return
    rec = results.recommendation
    _say_recommended(rec.run.trial_number if rec.run is not None else None, rec.reason)
    title = (f"{literal(study_name)}: {literal(record.benchmark)} "
             f"({literal(record.preset)}) on {literal(record.space)}")
    groups = environments(runs)
    for i, group in enumerate(groups):
        if len(groups) > 1:  # one line: cut to the table's width
            out.print(literal(environment_header(group)), highlight=False, width=TABLE_WIDTH,
                      no_wrap=True, overflow="ellipsis", crop=True)
        _print_rows([row for row in rows if row["environment"] == group.key
                     or len(groups) == 1], title if i == 0 else None)
    if record.multi_objective:
        _print_pareto(record, runs)
    for note in study_notes(record, runs, shown):
        say(literal(note.text))


#: The rows the study's kept page holds (`results.view.study_page`'s default `limit`).
PAGE_ROWS = 10


def _print_kept(store: Any, study_name: str, fmt: str) -> bool:
    """Print `best` from the study's kept page where it is current and says all a table
    would (one environment, time alone); False where the caller must compute."""
    text = store.current_view(study_name)  # what the study's writer computed and kept
    if text is None:
        return False
    import json

    page = json.loads(text)
    rows, study = page["best"], page["study"]
    if fmt == OutputFormat.JSON:
        print_json(rows)
        return True
    if len({row["environment"] for row in rows}) > 1 or study["objectives"] != ["time"]:
        return False  # an environment's header, the Pareto front: from the runs
    rec = page["recommendation"]
    _say_recommended(rec["trial"] if rec["recommended"] else None, rec["reason"])
    _print_rows(rows, f"{literal(study_name)}: {literal(study['benchmark'])} "
                      f"({literal(study['preset'])}) on {literal(study['space'])}")
    for note in page["notes"]:
        say(literal(note["text"]))
    return True


def _say_recommended(trial: int | None, reason: str) -> None:
    """The first line of `best`: what autotune recommends and why."""
    say(literal(f"recommended: trial {trial}, {reason}" if trial is not None
                else f"recommended: XLA's defaults; {reason}"))


def _environment_runs(study_name: str, runs: list[Any], key: str) -> list[Any]:
    """The runs of the environment `key` names (`ranking.find_environment`)."""
    from autotune.ground.errors import UsageError
    from autotune.results.ranking import environments, find_environment

    group = find_environment(runs, key)
    if group is None:
        known = ", ".join(g.key for g in environments(runs) if g.key is not None) or "none"
        raise UsageError(f"study {study_name!r} has no single environment {key!r} "
                         f"(its environments: {known})")
    return group.runs


def _print_rows(rows: list[dict[str, Any]], title: str | None) -> None:
    """One environment's best table from its `best --format json` rows, and the flags of
    its ranked rows."""
    from rich.table import Table

    table = Table(title=title, width=TABLE_WIDTH)
    for col, least in (("rank", 8), ("trial", 5), ("own step", 8), ("search speedup", 8),
                       ("peak memory", 8)):  # search speedup: pooled over n processes
        table.add_column(col, overflow="fold", width=least)
    table.add_column("confirmed speedup (95% CI)", overflow="fold", ratio=1)
    base_source = next((row["memory_source"] for row in rows if row["rank"] is None), None)
    for row in rows:
        peak = row["peak_memory_bytes"]
        table.add_row(
            "baseline" if row["rank"] is None else str(row["rank"]), str(row["trial"]),
            f"{row['median_step_s'] * 1e3:.2f} ms" if row["median_step_s"] else "-",
            _search_figure(row),
            fmt_bytes(peak) + ("*" if peak is not None and base_source is not None
                               and row["memory_source"] != base_source else ""),
            "" if row["rank"] is None else row["confirmation_text"]
            + (" (recommended)" if row["recommended"] else ""),
        )
    out.print(table)
    _print_flags([(f"#{row['rank']} (trial {row['trial']}"
                   + (", the baseline's program" if row["same_program"] else "")
                   + _program_trials(row) + ")", row["flags_changed"])
                  for row in rows if row["rank"] is not None])


def _search_figure(row: dict[str, Any]) -> str:
    """The search's speedup: the baseline's A/A figure, a program's pooled figure over its
    `observations` processes (`results.evidence`), or the one run's."""
    speedup = row["search_speedup"]
    if row["rank"] is None:
        return f"×{speedup:.3f} (A/A)" if speedup else "-"
    if (row["observations"] or 0) > 1:
        return f"×{row['pooled_speedup']:.3f} n={row['observations']}"
    return f"×{speedup:.3f}" if speedup else "-"


def _program_trials(row: dict[str, Any]) -> str:
    """'; same program: trials 7, 12' when other trials' configurations compiled to the
    row's program."""
    others = [n for n in row["program_trials"] or [] if n != row["trial"]]
    return f"; same program: trials {', '.join(map(str, others))}" if others else ""


def _print_pareto(record: Any, runs: list[Any]) -> None:
    """The time/memory Pareto front: no configuration beats one of these on both."""
    from rich.table import Table

    from autotune.flags.catalog import load_catalog
    from autotune.ground.records import Role
    from autotune.results.confirmation import Confirmations
    from autotune.results.ranking import main_runs, pareto_front, peak_memory, verdict_text
    from autotune.results.table import changed_flags

    catalog = load_catalog()
    table = Table(title=f"Pareto front of {literal(record.name)}: time vs peak memory "
                        "(none of these is beaten on both)", width=TABLE_WIDTH)
    for col, least in (("trial", 5), ("search speedup", 8), ("peak memory", 8)):
        table.add_column(col, overflow="fold", width=least)
    table.add_column("confirmed speedup (95% CI)", overflow="fold", ratio=1)
    front = pareto_front(runs, record.memory_budget_bytes)
    confirmations = Confirmations.of(main_runs(runs))  # as `pareto_front` reads them
    for run in front:
        baseline = run.role is Role.BASELINE
        table.add_row(str(run.trial_number), f"×{run.speedup:.3f}", fmt_bytes(peak_memory(run)),
                      "(baseline)" if baseline else verdict_text(confirmations.of_run(run)))
    out.print(table)
    _print_flags([(f"trial {run.trial_number}", changed_flags(run.flags, catalog))
                  for run in front if run.role is not Role.BASELINE])


def _print_flags(entries: list[tuple[str, Any]]) -> None:
    """Each ranked configuration's changed flags, one full `name=value` a line, under a
    label line: flag names are never cut, and each line stays within `TABLE_WIDTH` (the
    longest catalog name and value take about 70 columns)."""
    if not entries:
        return
    out.print("flags changed from defaults:", highlight=False)
    for label, flags in entries:
        out.print(f"  {label}:", highlight=False)
        for line in fmt_flags(dict(flags)).splitlines():
            out.print(f"    {line}", highlight=False, soft_wrap=True)


def best(
    study_name: Annotated[str, typer.Argument(metavar="STUDY", help="Study name.")],
    storage: StorageOpt = DEFAULT_STORAGE,
    top: Annotated[int, typer.Option(min=1, help="How many configurations to show.")] = 10,
    fmt: FormatOpt = OutputFormat.TABLE,
    environment: Annotated[str | None, typer.Option(
        "--environment", metavar="KEY",
        help="Show this environment alone (its key, or a prefix naming one).")] = None,
) -> None:
    """Show the best configurations of a study against its baseline, and the recommendation.

    Ranked confirmed-faster first (by the confirmed estimate), then no
    measurable gain, then not confirmed; autotune recommends a configuration
    only when confirmation measured it faster and the numerics guard passed.
    A study measured in several environments is ranked in each against its
    own baseline, the one with the most timed runs first (the recommendation's).
    """
    store = open_store(storage, must_exist=True)
    print_best(store, study_name, limit=top, fmt=fmt, environment=environment)


def export(
    study_name: Annotated[str, typer.Argument(metavar="STUDY", help="Study name.")],
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="File to write (default best.FORMAT; - for stdout).")]
    = None,
    rank: Annotated[int | None, typer.Option(
        min=1, help="Export the configuration of this rank in `best` (an explicit pick).")]
    = None,
    trial: Annotated[int | None, typer.Option(
        min=0, help="Export this trial's configuration (an explicit pick).")] = None,
    storage: StorageOpt = DEFAULT_STORAGE,
    fmt: Annotated[str, typer.Option(
        "--format", help="yaml or json (the whole document), env (lines for a POSIX "
                         "shell's `source`) or jax (compiler_options for jax.jit).")] = "yaml",
) -> None:
    """Write the recommended configuration (XLA's defaults unless one was confirmed faster).

    --rank or --trial writes another configuration instead, marked
    `recommended: false` unless it is the recommendation, with the reason.
    """
    from autotune.api import Study
    from autotune.results.export import ExportFormat, render_export

    to_stdout = output == Path("-")
    target = None if to_stdout else output or Path(f"best.{fmt}")
    document = Study(study_name, storage).export(target, fmt=fmt, rank=rank, trial=trial)
    if target is None:
        typer.echo(render_export(document, ExportFormat(fmt)), nl=False)
        return
    _print_exported(target, document)


def recommend(
    device_kind: Annotated[str, typer.Option(
        "--device-kind", help="The device kind of the new workload, as JAX names it (e.g. "
                              "'NVIDIA H100 80GB HBM3', 'TPU v5e', 'cpu').")],
    mesh: Annotated[int | None, typer.Option(
        min=1, help="Its device count (default: any).")] = None,
    collectives: Annotated[str, typer.Option(
        help="Collective kinds its program holds, comma-separated (e.g. "
             "all-gather,reduce-scatter): only studies whose baseline held them all count.")]
    = "",
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="Also write the export document here (yaml or json by its "
                               "suffix) for `autotune apply`.")] = None,
    storage: StorageOpt = DEFAULT_STORAGE,
    fmt: FormatOpt = OutputFormat.TABLE,
) -> None:
    """What this database's confirmed results recommend for a new workload of a shape: the
    flags most of its studies of that device kind confirmed, with the evidence."""
    from autotune.api.learned import recommend_for
    from autotune.results.export import ExportFormat, render_export

    kinds = [k.strip() for k in collectives.split(",") if k.strip()]
    document = recommend_for(storage, device_kind, mesh, kinds)
    if output is not None:
        suffix = ExportFormat.JSON if output.suffix == ".json" else ExportFormat.YAML
        output.write_text(render_export(document, suffix))
    if fmt is OutputFormat.JSON:
        print_json(document)
        return
    say(("recommended: " if document["recommended"] else "not recommended: ")
        + literal(document["reason"]))
    say(f"XLA_FLAGS additions: {literal(document['xla_flags']) or '(none)'}")
    evidence = document["learned"]["evidence"]
    agreeing = set(document["learned"]["agreeing"])
    for e in evidence:  # each study whole on a line of its own (a table cut long names)
        print_record(literal(e["study"]), f"trial {e['trial']} confirmed "
                     f"×{e['speedup']:.3f} [{e['interval'][0]:.3f}, {e['interval'][1]:.3f}] "
                     f"on {e['devices']} {literal(e['device_kind'] or '-')}; agrees: "
                     + ("yes" if e["study"] in agreeing else "no"))
    if output is not None:
        say(f"wrote {literal(output)}")


def _print_exported(output: Path, document: dict[str, Any]) -> None:
    """One line for what was written and whether it is recommended, one for the flags."""
    measured = document["measured"]
    what = ("XLA's defaults (nothing to set)" if document["trial"] is None
            else f"trial {document['trial']}, ×{measured['speedup']:.3f} vs baseline "
                 f"({measured['verdict']})")
    say(f"wrote {literal(output)}: {what}")
    pgle = document.get("pgle") or {}
    if pgle.get("profile"):
        say(f"with the PGLE profile {literal(pgle['profile'])} beside it (x"
            f"{pgle['speedup']:.3f} over the same flags without it): keep the two "
            "files together")
    say(("recommended: " if document["recommended"] else "not recommended: ")
        + literal(document["reason"]))
    say(f"XLA_FLAGS additions: {literal(document['xla_flags']) or '(none)'}")


def studies(storage: StorageOpt = DEFAULT_STORAGE,
            fmt: FormatOpt = OutputFormat.TABLE) -> None:
    """List the studies in the database: each one's state (queued, searching, confirming,
    done, failed), trials measured of those asked for, and runs."""
    from autotune.results.table import study_row

    store = open_store(storage, must_exist=True)
    live = {claim.study_name for claim in store.live_claims()}
    rows = [study_row(rec, store.runs(rec.name), rec.name in live)
            for rec in store.list_studies()]
    if fmt is OutputFormat.JSON:
        print_json(rows)
        return
    for row in rows:  # each study whole on a line of its own (a table cut long names)
        trials = f"{row['counted']}/{row['target']}" if row["target"] else str(row["counted"])
        print_record(literal(row["name"]), f"{row['state']}; space {literal(row['space'])}, "
                     f"{literal(row['benchmark'])} ({literal(row['preset'])}, "
                     f"{counted(row['devices'], 'device')}); trials {trials}, "
                     f"runs {row['runs']}; created {row['created'][:16].replace('T', ' ')}")
    if not rows:
        say("no studies in this database yet")


def delete(
    study_name: Annotated[str, typer.Argument(metavar="STUDY", help="Study name.")],
    storage: StorageOpt = DEFAULT_STORAGE,
    yes: Annotated[bool, typer.Option(
        "--yes", "-y", help="Delete without asking (needed where no one can answer).")] = False,
) -> None:
    """Delete a study and every run of it, so that the same `autotune study` starts over
    (a workload fixed after its baseline failed, or one whose file changed)."""
    from autotune.api.store import delete_study
    from autotune.ground.errors import UsageError

    store = open_store(storage, must_exist=True)
    runs = len(store.runs(study_name))  # also: a missing study is refused before asking
    store.close()
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError(f"deleting study '{study_name}' ({runs} runs) needs --yes where "
                             "no one can answer the question; nothing was deleted")
        if not typer.confirm(f"delete study '{study_name}' and its {runs} runs?"):
            raise typer.Exit(1)
    deleted = delete_study(storage, study_name)
    say(f"deleted study '{literal(study_name)}' and its {deleted} runs")


def db_upgrade(storage: StorageOpt = DEFAULT_STORAGE,
               force: Annotated[bool, typer.Option(
                   "--force", help="Add autotune's tables to a database that holds other "
                   "tables too (refused without it).")] = False) -> None:
    """Create or migrate autotune's tables to the newest schema."""
    store = open_store(storage, must_exist=False, write=True, foreign_ok=force)
    out.print(f"database at revision {store.current_revision()}")


def db_current(storage: StorageOpt = DEFAULT_STORAGE,
               fmt: FormatOpt = OutputFormat.TABLE) -> None:
    """Show the schema revision of the database and the one this autotune needs (reads only)."""
    from autotune.storage.store import HEAD_REVISION, revision_of

    require_database(storage)
    current = revision_of(storage)
    if fmt is OutputFormat.JSON:
        print_json({"current": current, "head": HEAD_REVISION,
                    "up_to_date": current == HEAD_REVISION})
        return
    state = "up to date" if current == HEAD_REVISION else "run `autotune db upgrade`"
    say(f"database at revision {literal(current or 'none')}; this autotune needs "
        f"{HEAD_REVISION} ({state})")


def trials(
    study_name: Annotated[str, typer.Argument(metavar="STUDY", help="Study name.")],
    storage: StorageOpt = DEFAULT_STORAGE,
    fmt: FormatOpt = OutputFormat.TABLE,
) -> None:
    """Every measurement run of a study with its step-time statistics and outcome.

    One block a run: its number, trial, role and outcome; its step-time figures; its
    flags (whole `name=value` tokens, never cut) or failure message. JSON: a list of
    `trial_rows`' keys: `run`, `trial`, `role`, `outcome`, `message`, `flags`,
    `fingerprint`, `same_program_as`, `timed_steps`, `median_step_s`, and every figure
    shown (`median_ci_s`,
    `iqr_s`, `cv`, `outliers`, `compile_time_s`, `first_step_time_s`, `warmup_steps`,
    `warmup_settled`).
    """
    from autotune.results.table import trial_rows

    store = open_store(storage, must_exist=True)
    runs = store.runs(study_name)
    rows = trial_rows(runs)
    if fmt is OutputFormat.JSON:
        print_json(rows)
        return
    for run, row in zip(runs, rows, strict=True):  # the JSON's figures, one block a run
        out.print(f"run {run.id}  trial {_trial_text(run)}  {run.role.value}  "
                  f"{run.outcome.kind.value}", highlight=False)
        for line in _stat_lines(row):
            say(f"    {line}")
        if run.outcome.ok and run.flags:  # whole name=value tokens within 80 columns
            print_wrapped(_run_note(run), hanging="    ")
        else:
            say(f"    {_run_note(run)}")


def _stat_lines(row: dict[str, Any]) -> list[str]:
    """The median with its bootstrap interval, IQR, CV and outliers; compile, first step
    and warm-up: from a `trial_rows` row, so the text shows what the JSON holds."""
    if row["median_ci_s"] is None:
        return []
    ms = 1e3
    low, high = row["median_ci_s"]
    warm = "" if row["warmup_steps"] is None else f", warm-up {row['warmup_steps']}" + (
        "" if row["warmup_settled"] in (None, True) else " (unsettled)")
    first = f", first step {row['first_step_time_s'] * ms:.1f} ms" \
        if row["first_step_time_s"] else ""
    return [f"median step {row['median_step_s'] * ms:.2f} ms [{low * ms:.2f}, "
            f"{high * ms:.2f}] (95% CI)",  # three short lines: each fits 80 columns
            f"IQR {row['iqr_s'] * ms:.2f} ms, CV {row['cv']:.1%}, {row['outliers']} outliers",
            f"compile {row['compile_time_s']:.2f} s{first}{warm}"]


def _trial_text(run: Any) -> str:
    """The run's trial number, or `-` for a run outside the trials (a fit's compile)."""
    return "-" if run.trial_number is None else str(run.trial_number)


def _trial_label(run: Any) -> str:
    return (f"trial {run.trial_number}, " if run.trial_number is not None else "") + \
        run.role.value


def _run_note(run: Any) -> str:
    """A run's flags (whole `name=value` tokens), or the first 160 characters of its
    failure message, ready to print."""
    if not run.outcome.ok:
        return literal(run.outcome.message[:160])
    return fmt_flags(dict(run.flags), " ") if run.flags else "(baseline)"
