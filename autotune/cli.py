"""The `autotune` command line: the only module that imports typer.

Every AutotuneError ends here: one line on stderr and its exit code.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from autotune.errors import AutotuneError, StudyNotFoundError

DEFAULT_STORAGE = "sqlite:///autotune.db"
app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Find the best XLA flags for a JAX workload, measured honestly.")
spaces_app = typer.Typer(no_args_is_help=True, help="Search spaces.")
benchmarks_app = typer.Typer(no_args_is_help=True, help="Built-in benchmark workloads.")
db_app = typer.Typer(no_args_is_help=True, help="The results database.")
app.add_typer(spaces_app, name="spaces")
app.add_typer(benchmarks_app, name="benchmarks")
app.add_typer(db_app, name="db")
# Piped output (CI logs, files) gets a wide table instead of rich's 80 columns.
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)

StorageOpt = Annotated[str, typer.Option(
    "--storage", envvar="AUTOTUNE_STORAGE",
    help="Database URL: sqlite:///file.db (default ./autotune.db) or postgresql://...")]


def _sqlite_file(url: str) -> Path | None:
    prefix = "sqlite:///"
    return Path(url[len(prefix):]) if url.startswith(prefix) and url != prefix else None


def open_store(url: str, must_exist: bool) -> Any:
    """Open (and migrate) the store; for read commands a missing SQLite file is an error."""
    from autotune.storage.store import Store

    file = _sqlite_file(url)
    if must_exist and file is not None and not file.exists():
        raise StudyNotFoundError(
            f"no database at {file}: run `autotune study ...` first, or pass --storage URL"
        )
    return Store.open(url)


def main() -> None:
    """Console entry point."""
    app()


def friendly(func: Callable[..., None]) -> Callable[..., None]:
    """Turn AutotuneError into one line on stderr and its exit code; Ctrl-C into 130."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            func(*args, **kwargs)
        except AutotuneError as exc:
            err.print(f"[bold red]error:[/] {exc.message}", highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            err.print("interrupted: every finished trial is kept; "
                      "run the same command to continue")
            raise typer.Exit(130) from None

    return wrapper


def _base_env() -> dict[str, str]:
    return dict(os.environ)


@app.command()
@friendly
def study(
    space: Annotated[str, typer.Option(help="Search space name or YAML file.")],
    benchmark: Annotated[str, typer.Option(help="Built-in benchmark to tune.")] = "transformer",
    trials: Annotated[int, typer.Option(min=1, help="Trials the study should hold in all.")] = 12,
    storage: StorageOpt = DEFAULT_STORAGE,
    name: Annotated[str | None, typer.Option(help="Study name (default SPACE-BENCHMARK-PRESET).")]
    = None,
    sampler: Annotated[str, typer.Option(help="tpe or random.")] = "tpe",
    seed: Annotated[int | None, typer.Option(help="Seed of the sampler.")] = None,
    timeout_per_trial: Annotated[float, typer.Option(min=1, help="Seconds per trial.")] = 300.0,
    preset: Annotated[str, typer.Option(help="Workload size: tiny, small or large.")] = "small",
    devices: Annotated[int, typer.Option(min=1, help="CPU devices for sharded workloads.")] = 8,
    steps: Annotated[int, typer.Option(min=3, help="Timed steps per trial.")] = 20,
    warmup: Annotated[int, typer.Option(min=1, help="Warm-up steps per trial.")] = 3,
    mode: Annotated[str, typer.Option(help="paired (in-process vs baseline) or direct.")]
    = "paired",
) -> None:
    """Tune the flags of SPACE on a benchmark; re-running the same command continues."""
    from autotune import spaces, workloads
    from autotune.launcher import SubprocessLauncher
    from autotune.records import MeasureMode
    from autotune.study import StudyPlan, StudyRunner, make_sampler

    loaded = spaces.load_space(space)
    work = workloads.resolve_benchmark(benchmark)
    make_sampler(sampler, seed)
    plan = StudyPlan(
        name=name or f"{loaded.name}-{work.name}-{preset}", space_name=loaded.name, space=loaded,
        workload=work, preset=_preset(preset), devices=devices, trials=trials, sampler=sampler,
        seed=seed, timeout_per_trial=timeout_per_trial, steps=steps, warmup=warmup,
        mode=_mode(mode, MeasureMode), base_env=_base_env(),
    )
    store = open_store(storage, must_exist=False)
    runner = StudyRunner(plan, store, SubprocessLauncher(), storage)
    _run_with_progress(runner, plan)
    _print_best(store, plan.name, limit=10)


def _preset(preset: str) -> str:
    from autotune.bench import PRESETS
    from autotune.errors import UsageError

    if preset not in PRESETS:
        raise UsageError(f"unknown preset '{preset}'. Known presets: {', '.join(PRESETS)}")
    return preset


def _mode(mode: str, enum: Any) -> Any:
    from autotune.errors import UsageError

    try:
        return enum(mode)
    except ValueError:
        raise UsageError(f"unknown mode '{mode}'. Known modes: paired, direct") from None


def _run_with_progress(runner: Any, plan: Any) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    runner.prepare()
    remaining = runner.remaining()
    if remaining == 0:
        out.print(f"study '{plan.name}' already holds {plan.trials} trials; "
                  f"pass --trials {plan.trials + 10} to run more")
        return
    out.print(f"study '{plan.name}': {plan.workload.name} ({plan.preset}, {plan.devices} devices) "
              f"on space '{plan.space_name}', {remaining} trials to run, {plan.mode.value} timing")
    if not out.is_terminal:  # logs and pipes: one line per trial instead of a live bar
        runner.run(on_trial=lambda ev: out.print(
            f"trial {ev.done}/{ev.total}: {_last_text(ev)[6:]}, {_best_text(ev)}", highlight=False))
        return
    columns = (TextColumn("[bold]trials"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[best]}"), TextColumn("{task.fields[last]}"),
               TimeElapsedColumn())
    with Progress(*columns, console=out, transient=False) as progress:
        task = progress.add_task("study", total=remaining, best="best: -", last="")
        runner.run(on_trial=lambda ev: progress.update(
            task, advance=1, best=_best_text(ev), last=_last_text(ev)))


def _best_text(ev: Any) -> str:
    return f"best: ×{ev.best_speedup:.3f}" if ev.best_speedup else "best: -"


def _last_text(ev: Any) -> str:
    shown = f"×{ev.speedup:.3f}" if ev.speedup else ev.outcome.kind.value
    return f"last: #{ev.number} {ev.role.value} {shown}"


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{n} B"


def _fmt_flags(flags: dict[str, Any]) -> str:
    from autotune.flags.compose import render_value

    return "\n".join(f"{k}={render_value(v)}" for k, v in sorted(flags.items())) or "(defaults)"


def _print_best(store: Any, study_name: str, limit: int) -> None:
    from rich.table import Table

    from autotune.analysis import best_rows, outcome_counts
    from autotune.flags.catalog import load_catalog

    record = store.get_study(study_name)
    runs = store.runs(study_name)
    table = Table(title=f"{study_name}: {record.benchmark} ({record.preset}) on {record.space}")
    for col in ("rank", "trial", "median step", "speedup", "peak memory", "same program"):
        table.add_column(col, no_wrap=True)
    table.add_column("flags changed from defaults", overflow="fold")
    for row in best_rows(runs, load_catalog(), limit=limit):
        speed = f"×{row.speedup:.3f}" if row.speedup else "-"
        table.add_row(
            "baseline" if row.rank is None else str(row.rank), str(row.run.trial_number),
            f"{row.median_s * 1e3:.2f} ms" if row.median_s else "-",
            speed + (" (A/A)" if row.rank is None else ""),
            _fmt_bytes(row.peak_memory_bytes),
            {True: "yes", False: "no", None: "-"}[row.same_program],
            "-" if row.rank is None else _fmt_flags(dict(row.changed)),
        )
    out.print(table)
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(outcome_counts(runs).items()))
    sources = sorted({r.outcome.measurement.memory_source for r in runs
                      if r.outcome.measurement is not None})
    out.print(f"runs by outcome: {counts or 'none'}", highlight=False)
    out.print("speedup = baseline median step time / trial median step time; paired trials time "
              "both in one process (the baseline row is default vs default, the noise floor). "
              "Not yet confirmed by re-measurement.", highlight=False)
    out.print(f"peak memory from: {', '.join(sources) or '-'}", highlight=False)
    _print_noise_note(best_rows(runs, load_catalog(), limit=1))


def _print_noise_note(rows: list[Any]) -> None:
    """Say when the best speedup is not outside the baseline's own A/A spread."""
    base = next((r for r in rows if r.rank is None and r.speedup), None)
    top = next((r for r in rows if r.rank == 1 and r.speedup), None)
    if base is None or top is None:
        return
    noise = abs(base.speedup - 1)
    if abs(top.speedup - 1) <= noise:
        out.print(f"note: the best speedup ×{top.speedup:.3f} is within this study's noise floor "
                  f"(baseline vs itself: ×{base.speedup:.3f}); no measurable gain on this "
                  "workload so far.", highlight=False)


@app.command()
@friendly
def best(
    study_name: Annotated[str, typer.Argument(metavar="STUDY", help="Study name.")],
    storage: StorageOpt = DEFAULT_STORAGE,
    top: Annotated[int, typer.Option(min=1, help="How many configurations to show.")] = 10,
) -> None:
    """Show the best configurations of a study against its baseline."""
    store = open_store(storage, must_exist=True)
    _print_best(store, study_name, limit=top)


@app.command()
@friendly
def export(
    study_name: Annotated[str, typer.Argument(metavar="STUDY", help="Study name.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="YAML file to write.")]
    = Path("best.yaml"),
    rank: Annotated[int, typer.Option(min=1, help="Which configuration (1 = best).")] = 1,
    storage: StorageOpt = DEFAULT_STORAGE,
) -> None:
    """Write the best configuration, how it was measured and on what, as YAML."""
    from autotune.export import export_document, write_export
    from autotune.flags.catalog import load_catalog

    store = open_store(storage, must_exist=True)
    record = store.get_study(study_name)
    document = export_document(record, store.runs(study_name), load_catalog(), rank=rank)
    write_export(document, output)
    speed = document["measured"]["speedup"]
    out.print(f"wrote {output}: trial {document['trial']}, ×{speed:.3f} vs baseline")
    out.print(f"XLA_FLAGS additions: {document['xla_flags'] or '(none)'}", highlight=False)


@app.command()
@friendly
def studies(storage: StorageOpt = DEFAULT_STORAGE) -> None:
    """List the studies in the database."""
    from rich.table import Table

    store = open_store(storage, must_exist=True)
    table = Table("study", "space", "benchmark", "preset", "devices", "runs", "created")
    for rec in store.list_studies():
        table.add_row(rec.name, rec.space, rec.benchmark, rec.preset, str(rec.devices),
                      str(len(store.runs(rec.name))), rec.created_at.strftime("%Y-%m-%d %H:%M"))
    out.print(table)


@spaces_app.command("list")
@friendly
def spaces_list() -> None:
    """List the built-in search spaces."""
    from rich.table import Table

    from autotune import spaces

    table = Table("space", "backend", "parameters", "configurations", "description")
    for space_name in spaces.list_spaces():
        sp = spaces.load_space(space_name)
        size = sp.size()
        table.add_row(sp.name, sp.backend, str(len(sp.params)), "-" if size is None else str(size),
                      sp.description.strip().splitlines()[0] if sp.description else "")
    out.print(table)


@benchmarks_app.command("list")
@friendly
def benchmarks_list() -> None:
    """List the built-in benchmarks."""
    from rich.table import Table

    from autotune.workloads import list_benchmarks

    table = Table("benchmark", "description", "file")
    for info in list_benchmarks():
        table.add_row(info.name, info.description, str(info.path))
    out.print(table)


@db_app.command("upgrade")
@friendly
def db_upgrade(storage: StorageOpt = DEFAULT_STORAGE) -> None:
    """Migrate autotune's tables to the newest schema."""
    store = open_store(storage, must_exist=False)
    out.print(f"database at revision {store.current_revision()}")
