"""The Python API: a `Study` to create, run and read from a notebook or a script.

The `autotune` command line is a thin layer over this module: `autotune study`
builds its plan with `plan_study` and runs it as `Study.run` does; `best` and
`export` read what `Study.best` and `Study.export` return. Nothing here prints
or imports typer or rich; progress reaches the caller through callbacks.

    from autotune import Study

    study = Study.create(space="cpu", benchmark="matmul", preset="tiny", devices=1,
                         trials=8, storage="sqlite:///autotune.db")
    study.run(confirm=2, confirm_repeats=3)
    study.recommendation()      # {"recommended": False, "trial": None, "reason": "..."}
    study.best()                # the rows of `autotune best --format json`
    study.export("best.yaml")   # the document `autotune export` writes

    Study("cpu-matmul-tiny").best()   # an existing study, read only
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import StudyNotFoundError, UsageError

if TYPE_CHECKING:
    from autotune.flags.probe import ProbeReport
    from autotune.records import RunRecord, StudyRecord
    from autotune.results.shrink import Shrink
    from autotune.storage.store import Store
    from autotune.study.plan import ConfirmEvent, RunSummary, ShrinkEvent, StudyPlan, TrialEvent
    from autotune.study.preflight import Preflight
    from autotune.study.service import AfterSearch, Watcher
    from autotune.workloads import WorkloadInfo

#: Where studies are kept unless told otherwise: ./autotune.db.
DEFAULT_STORAGE = "sqlite:///autotune.db"


def sqlite_file(url: str) -> Path | None:
    """The file of a `sqlite:///FILE` URL (None for any other URL)."""
    prefix = "sqlite:///"
    return Path(url[len(prefix):]) if url.startswith(prefix) and url != prefix else None


def require_database(url: str) -> None:
    """A reader's SQLite file must exist (opening it would create an empty one).

    Raises:
        StudyNotFoundError: there is no such file.
    """
    file = sqlite_file(url)
    if file is not None and not file.exists():
        raise StudyNotFoundError(
            f"no database at {file}: run `autotune study ...` first, or pass --storage URL")


def open_store(url: str, must_exist: bool, write: bool = False) -> Store:
    """Open the store. Reading never writes: only `write=True` creates or migrates tables.

    For readers (`must_exist`) a missing SQLite file is an error, and a
    database that is not autotune's or not at the code's schema revision is
    refused with what to do (`Store.open(upgrade=False)`).
    """
    from autotune.storage.store import Store

    if must_exist:
        require_database(url)
    return Store.open(url, upgrade=write)


@dataclass(frozen=True)
class PlannedStudy:
    """A study's plan and what the checks before its first trial found."""

    plan: StudyPlan
    preflight: Preflight
    report: ProbeReport

    @property
    def recipe(self) -> Mapping[str, Any]:
        """How a worker rebuilds this plan (`join_study`): stored with the study."""
        assert self.plan.recipe is not None, "a joined plan carries no recipe"
        return self.plan.recipe


#: `plan_study`'s arguments a recipe keeps (the name is the study's own).
PLAN_ARGS = ("space", "benchmark", "script", "command", "trials", "sampler", "objective",
             "memory_budget", "timeout_per_trial", "preset", "devices", "steps", "warmup",
             "max_warmup", "mode", "drop_unknown", "allow_backend_mismatch", "prune_margin",
             "trial_memory_limit", "fit", "racing", "heartbeat_s", "launcher")

#: Variables of the creator's environment a worker measures with too: they shape what XLA
#: compiles and runs (the baseline included). A launcher's own (process ids, coordinator)
#: are the worker's.
BASE_ENV_PREFIXES = ("XLA_", "JAX_", "LIBTPU_", "TPU_")
OWN_ENV = frozenset({"JAX_PROCESS_ID", "JAX_NUM_PROCESSES", "JAX_COORDINATOR_ADDRESS"})


@dataclass(frozen=True)
class Joined:
    """A worker's view of a study made elsewhere (`join_study`)."""

    planned: PlannedStudy
    store: Store
    after: AfterSearch


def plan_study(*, space: str, benchmark: str = "transformer", script: str | Path | None = None,
               command: str | None = None, name: str | None = None, trials: int = 12,
               sampler: str = "auto", seed: int | None = None, objective: str = "time",
               memory_budget: str | None = None, timeout_per_trial: float = 300.0,
               preset: str = "small", devices: int = 8, steps: int = 20, warmup: int = 2,
               max_warmup: int = 30, mode: str = "paired", drop_unknown: bool = False,
               allow_backend_mismatch: bool = False, prune_margin: float | None = 1.3,
               trial_memory_limit: str | None = None,
               base_env: Mapping[str, str] | None = None, fit: bool = True,
               racing: bool = True, heartbeat_s: int = 30, launcher: str | None = None,
               confirm: int = 3, confirm_repeats: int = 4,
               shrink: bool = True, pgle: int = 0) -> PlannedStudy:
    """Validate what the user asked for and check the space against the installed XLA.

    The arguments are `autotune study`'s options (sizes as text like `12GiB`;
    `prune_margin` None never prunes; `fit` False searches the space as
    documented instead of fitting it to the workload, `autotune.spaces.fit`;
    `racing` False never measures the search's leader again, `autotune.results.evidence`;
    `heartbeat_s` how often a worker says it is alive; `launcher` a cluster launcher
    template for multi-host trials; `confirm`, `confirm_repeats`, `shrink` and `pgle`
    (the best K configurations measured again with a PGLE profile) what a worker that
    ends the search does next). Nothing touches the database. The plan
    carries its `recipe`: these arguments as JSON, with files as absolute paths, the
    creator's XLA and JAX variables and this autotune's version and source digest.

    Raises:
        UsageError (and its kinds): an unknown space, benchmark, sampler,
            objective, preset or mode; a bad size; a launcher template that does
            not parse or lacks `{cmd}`; `script` and `command` both;
            a command that cannot run; a space with flags this XLA does not
            know (unless `drop_unknown`) or for another backend (unless
            `allow_backend_mismatch`).
    """
    from autotune import spaces
    from autotune.bench import PRESETS
    from autotune.flags.catalog import load_catalog
    from autotune.flags.probe import probe
    from autotune.records import MeasureMode
    from autotune.study import preflight
    from autotune.study.plan import StudyPlan
    from autotune.study.samplers import choose_sampler, parse_objectives

    loaded = spaces.load_space(space)
    work, argv = _workload(benchmark, script, command)
    objectives = parse_objectives(objective)
    choose_sampler(sampler, objectives, loaded, trials)  # a bad choice stops before any probe
    one_of(preset, PRESETS, "preset")
    measure_mode = MeasureMode(one_of(mode, [m.value for m in MeasureMode], "mode"))
    if launcher is not None:
        from autotune.launcher import parse_template

        parse_template(launcher)  # a template without {cmd} stops here
    budget = _size(memory_budget, "--memory-budget")
    limit = _size(trial_memory_limit, "--trial-memory-limit")
    catalog = load_catalog()
    report = probe(catalog, extra=sorted(loaded.flags()), env=base_env, devices=devices)
    checked = preflight.check(loaded, catalog, report, drop_unknown=drop_unknown,
                              allow_backend_mismatch=allow_backend_mismatch)
    plan = StudyPlan(
        name=name or f"{loaded.name}-{work.name}-{preset}", space_name=loaded.name,
        space=checked.space, workload=work, preset=preset, devices=devices, trials=trials,
        sampler=sampler, seed=seed, timeout_per_trial=timeout_per_trial, steps=steps,
        warmup=warmup, max_warmup=max_warmup, mode=measure_mode,
        base_env=dict(os.environ if base_env is None else base_env), command=argv,
        memory_limit_bytes=limit, prune_margin=prune_margin, objectives=objectives,
        memory_budget_bytes=budget, fit=fit, racing=racing, heartbeat_s=heartbeat_s,
        launcher=launcher)
    arguments = {**locals(), "space": _source(space), "script": _source(script)}  # the args
    recipe = {key: arguments[key] for key in PLAN_ARGS} | {
        "workdir": str(Path.cwd()) if command is not None else None,
        "base_env": {k: v for k, v in plan.base_env.items()
                     if k.startswith(BASE_ENV_PREFIXES) and k not in OWN_ENV},
        "confirm": confirm, "confirm_repeats": confirm_repeats, "shrink": shrink,
        "pgle": pgle,
        "autotune": _identity()}
    return PlannedStudy(replace(plan, recipe=recipe), checked, report)


def join_study(name: str, storage: str, *, trials: int | None = None) -> Joined:
    """Rebuild the plan of study `name`, made by `autotune study` on any machine, to work
    on it from here (`autotune worker`, `autotune confirm`).

    Reads the study's recipe, checks that this machine's autotune (version and source
    digest) and files (space, script) are those the study was made with, changes the
    working folder to the study's when it tunes a `--command`, and plans the study as
    `plan_study` does (the preflight probe included) with the creator's XLA and JAX
    variables in place of this process's own. `trials` raises or lowers the study's
    target. Nothing is written: the store is opened without migrating.

    Raises:
        StorageError: a bad URL, an unreachable database, another schema revision.
        StudyNotFoundError: no such study (naming the known ones).
        StudyMismatchError: another autotune, space or workload file than the study's.
        UsageError: a study with no recipe (made before workers existed), or a
            command study whose folder this machine lacks.
    """
    from autotune.errors import StudyMismatchError
    from autotune.study.service import AfterSearch

    store = open_store(storage, must_exist=True)
    record = store.get_study(name)
    stored = dict(record.plan or {})
    recipe = stored.pop("recipe", None)
    if not isinstance(recipe, Mapping):
        raise UsageError(f"study {name!r} holds no recipe for workers (it was made by an "
                         "older autotune or through the Python API): run its `autotune "
                         "study ...` command once with this autotune, then start workers")
    _check_identity(name, recipe.get("autotune") or {})
    if recipe.get("workdir") and recipe.get("command"):
        _enter(name, Path(recipe["workdir"]))
    args = {k: recipe[k] for k in PLAN_ARGS if k in recipe}
    if trials is not None:
        args["trials"] = trials
    own = {k: v for k, v in os.environ.items()  # the creator's XLA variables, not ours
           if not k.startswith(BASE_ENV_PREFIXES) or k in OWN_ENV}
    planned = plan_study(name=name, base_env={**own, **recipe.get("base_env", {})}, **args)
    mine = planned.plan.recorded()
    differences = [f"{key} {stored.get(key)!r} in the study, {mine[key]!r} here"
                   for key in mine if key in stored and stored[key] != mine[key]]
    if differences:
        raise StudyMismatchError(
            f"this worker would not measure study {name!r} as it was made: "
            f"{'; '.join(differences)} (file hashes cover the space and workload files): "
            "give every worker the same files and autotune")
    after = AfterSearch(int(recipe.get("confirm", 3)), int(recipe.get("confirm_repeats", 4)),
                        bool(recipe.get("shrink", True)), int(recipe.get("pgle", 0)))
    return Joined(replace(planned, plan=replace(planned.plan, recipe=None)), store, after)


def _identity() -> dict[str, str]:
    """This autotune: its version and the digest of its sources."""
    from autotune._resources import VERSION, source_digest

    return {"version": VERSION, "source": source_digest()}


def _check_identity(name: str, theirs: Mapping[str, Any]) -> None:
    """Refuse to work on a study made by another autotune (version or sources)."""
    from autotune.errors import StudyMismatchError

    mine = _identity()
    if theirs and dict(theirs) != mine:
        raise StudyMismatchError(
            f"study {name!r} was made by autotune {theirs.get('version')} (sources "
            f"{theirs.get('source')}); this is autotune {mine['version']} (sources "
            f"{mine['source']}): install the same autotune on every worker, or run "
            "`autotune study ...` again with this one to re-make its recipe")


def _enter(name: str, folder: Path) -> None:
    """Work in the folder where study `name`'s command runs."""
    if not folder.is_dir():
        raise UsageError(f"study {name!r} runs its command in {folder}, which this machine "
                         "does not have: mount the same folder on every worker")
    os.chdir(folder)


def _source(value: str | Path | None) -> str | None:
    """A space or script argument as a worker can find it: a file as its absolute path,
    anything else (a built-in name) as given."""
    if value is None:
        return None
    path = Path(value)
    return str(path.resolve()) if path.is_file() else str(value)


class Study:
    """One study in a database: read it, or (made by `create`) run it.

    `Study(name, storage)` opens an existing study for reading; its methods
    never write. `Study.create(...)` plans a new study (or the continuation of
    one: the same plan with more trials) that `run` measures.
    """

    def __init__(self, name: str, storage: str = DEFAULT_STORAGE,
                 planned: PlannedStudy | None = None) -> None:
        self.name = name
        self.storage = storage
        self.planned = planned

    @classmethod
    def create(cls, *, space: str, storage: str = DEFAULT_STORAGE,
               **options: Any) -> Study:
        """Plan a study (see `plan_study` for the options); nothing is measured yet."""
        planned = plan_study(space=space, **options)
        return cls(planned.plan.name, storage, planned)

    def run(self, *, confirm: int = 3, confirm_repeats: int = 4, shrink: bool = True,
            pgle: int = 0, on_trial: Callable[[TrialEvent], None] | None = None,
            on_confirm: Callable[[ConfirmEvent], None] | None = None,
            on_shrink: Callable[[ShrinkEvent], None] | None = None) -> RunSummary:
        """Measure the trials still to run, then confirm the best `confirm` configurations
        `confirm_repeats` times each and shrink the recommendation (as `autotune study`);
        with `pgle` K, measure the best K again with a PGLE profile each
        (`StudyRunner.pgle`), `confirm_repeats` processes each.

        Raises:
            UsageError: this Study was opened for reading (use `Study.create`).
        """
        from autotune.study.service import AfterSearch, finish, open_runner

        if self.planned is None:
            raise UsageError(f"study {self.name!r} was opened for reading; create it with "
                             "Study.create(space=..., ...) to run trials")
        store = open_store(self.storage, must_exist=False, write=True)
        runner = open_runner(self.planned.plan, store, self.planned.report.environment)
        runner.prepare()
        summary = runner.run(on_trial=on_trial)
        finish(runner, AfterSearch(confirm, confirm_repeats, shrink, pgle),
               _callbacks(on_confirm, on_shrink))
        return summary

    def runs(self) -> list[RunRecord]:
        """Every stored run of the study, in the order they were made."""
        return self._read()[1]

    def best(self, limit: int = 10) -> list[dict[str, Any]]:
        """The rows of `autotune best --format json`: the baseline, then the best `limit`."""
        from autotune.flags.catalog import load_catalog
        from autotune.results.fitted import with_fit
        from autotune.results.ranking import best_row_json, best_rows

        record, runs = self._read()
        rows = best_rows(runs, load_catalog(), limit=limit,
                         memory_budget=record.memory_budget_bytes, objectives=record.objectives)
        return with_fit([best_row_json(row) for row in rows], record)

    def recommendation(self) -> dict[str, Any]:
        """What autotune recommends: `{recommended, trial, reason}` (trial None: XLA's
        defaults)."""
        from autotune.results.ranking import recommend

        record, runs = self._read()
        rec = recommend(runs, record.objectives, record.memory_budget_bytes)
        return {"recommended": rec.recommended,
                "trial": rec.run.trial_number if rec.run is not None else None,
                "reason": rec.reason}

    def shrunk(self) -> Shrink | None:
        """The recommendation's shrinking as stored (None when nothing is recommended)."""
        from autotune.flags.catalog import load_catalog
        from autotune.results.ranking import recommend
        from autotune.results.shrink import shrink

        record, runs = self._read()
        rec = recommend(runs, record.objectives, record.memory_budget_bytes)
        return shrink(runs, rec.run, load_catalog()) if rec.run is not None else None

    def export(self, path: str | Path | None = None, *, fmt: str = "yaml",
               rank: int | None = None, trial: int | None = None) -> dict[str, Any]:
        """The export document (see `autotune export`); written to `path` in `fmt` if given.

        Raises:
            ExportError: no such rank or trial, or nothing measured.
            UsageError: an unknown format, or both `rank` and `trial`.
        """
        from autotune.flags.catalog import load_catalog
        from autotune.results.export import ExportFormat, export_document, write_export

        form = ExportFormat(one_of(fmt, [f.value for f in ExportFormat], "export format"))
        if rank is not None and trial is not None:
            raise UsageError("give --rank or --trial, not both")
        store = open_store(self.storage, must_exist=True)
        record, runs = store.get_study(self.name), store.runs(self.name)
        catalog = load_catalog()
        document = export_document(record, runs, catalog, rank=rank, trial=trial)
        if path is None:
            return document
        if profile := _write_profile(store, document, runs, Path(path)):
            document = export_document(record, runs, catalog, rank=rank, trial=trial,
                                       pgle_profile=str(profile))
        write_export(document, Path(path), form)
        return document

    def _read(self) -> tuple[StudyRecord, list[RunRecord]]:
        """The study's record and runs, from one read-only open of the store.

        Raises:
            StudyNotFoundError: no database, or no such study (naming the known ones).
        """
        store = open_store(self.storage, must_exist=True)
        return store.get_study(self.name), store.runs(self.name)


def _callbacks(on_confirm: Callable[[ConfirmEvent], None] | None,
               on_shrink: Callable[[ShrinkEvent], None] | None) -> Watcher:
    """A watcher of `finish` that passes confirmation and shrinking runs to the callbacks."""
    from autotune.study.service import Watcher

    class Callbacks(Watcher):
        def confirmed(self, event: ConfirmEvent) -> None:
            if on_confirm is not None:
                on_confirm(event)

        def shrinking(self, event: ShrinkEvent) -> None:
            if on_shrink is not None:
                on_shrink(event)

    return Callbacks()


def _write_profile(store: Store, document: Mapping[str, Any], runs: list[RunRecord],
                   path: Path) -> Path | None:
    """Write the PGLE profile the export keeps (`document["pgle"]["keep"]`) beside `path`
    as `STEM.pgle.pbtxt` with its record; returns its absolute path (None: none kept).

    Raises:
        ExportError: the profile is not stored, unreadable, or cannot be written.
    """
    from autotune import pgle as rules
    from autotune.errors import ExportError
    from autotune.results.pgle import kept_profile_key, profile_kind
    from autotune.results.ranking import main_runs

    section = document.get("pgle")
    if not section or not section.get("keep"):
        return None
    key = kept_profile_key(main_runs(runs), document["trial"], document["flags"])
    found = None if key is None else store.artifact(document["study"], key[0], key[1],
                                                     profile_kind(document["flags"]))
    if found is None:
        raise ExportError(f"study {document['study']!r} keeps a PGLE profile for these flags "
                          "but does not hold it; run the study again with --pgle")
    target = path.with_name(path.stem + ".pgle.pbtxt").resolve()
    try:
        rules.write_profile(str(target), rules.parse_pbtxt(found.content),
                            rules.ProfileMeta.from_json(json.dumps(dict(found.meta))))
    except ValueError as exc:
        raise ExportError(f"the stored PGLE profile of study {document['study']!r} is not "
                          f"readable ({exc}); run the study again with --pgle") from exc
    except OSError as exc:
        raise ExportError(f"cannot write {target}: {exc.strerror}; choose another -o path") \
            from exc
    return target


def one_of(value: str, choices: Any, noun: str) -> str:
    """`value` if it is one of `choices`; UsageError naming every choice otherwise."""
    known = list(choices)
    if value not in known:
        raise UsageError(f"unknown {noun} '{value}'. Known {noun}s: {', '.join(known)}")
    return value


def _workload(benchmark: str, script: str | Path | None,
              command: str | None) -> tuple[WorkloadInfo, tuple[str, ...] | None]:
    """The workload to tune: a built-in benchmark, the user's file, or the user's program.

    Raises:
        UsageError: both `script` and `command`; a command that does not
            parse, is empty, or whose program cannot be run (see `_check_program`).
    """
    from autotune import workloads

    if script is not None and command is not None:
        raise UsageError("give --script or --command, not both")
    if script is not None:
        return workloads.resolve_script(str(script)), None
    if command is not None:
        argv = _command_argv(command)
        return workloads.command_info(argv), argv
    return workloads.resolve_benchmark(benchmark), None


def _command_argv(command: str) -> tuple[str, ...]:
    """The command split like a shell would (never run by one), its program checked runnable."""
    try:
        argv = tuple(shlex.split(command))
    except ValueError as exc:
        raise UsageError(f"--command does not parse: {exc}") from None
    if not argv:
        raise UsageError("--command is empty; give the program to run")
    _check_program(argv[0])
    return argv


def _check_program(program: str) -> None:
    """Return if the launcher can execute `program`, else raise UsageError saying what to do.

    It is resolved as the launcher's exec will: a bare name on PATH, a name with
    a slash as a path relative to the current folder (each trial runs there).
    Only whether it can start is checked, not what it does; nothing is written.
    """
    if shutil.which(program) is not None:
        return
    head = f"program '{program}' of --command"
    path = Path(program)
    if os.sep not in program and (os.altsep is None or os.altsep not in program):
        here = f"; to run the file in this folder, write ./{program}" if path.is_file() else ""
        raise UsageError(f"{head} is not found on PATH: install it, or give its path{here}")
    if not path.exists():
        raise UsageError(f"{head} does not exist: check the path, which is relative to the "
                         f"current folder {Path.cwd()}")
    if path.is_dir():
        raise UsageError(f"{head} is a directory, not a program: give the program's path")
    raise UsageError(f"{head} is not executable: make it executable (chmod +x "
                     f"{shlex.quote(program)}), or put its interpreter first in --command")


def _size(text: str | None, option: str) -> int | None:
    """A size option (`12GiB`) in bytes; None stays None.

    Raises:
        UsageError: not a size, or not above 0 bytes.
    """
    from autotune.spaces import parse_size

    if text is None:
        return None
    try:
        size = parse_size(text)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{option} '{text}' is not a size like 16GiB: {exc}") from None
    if size <= 0:
        raise UsageError(f"{option} '{text}' must be more than 0 bytes")
    return size


@dataclass(frozen=True)
class PgleResult:
    """What `pgle` measured: the plan, each run's outcome and their verdict
    (`autotune.results.pgle`)."""

    plan: Any  # autotune.study.pgle.PglePlan
    workload: str
    outcomes: list[Any]
    verdict: Any  # autotune.results.pgle.PgleVerdict


def pgle(*, benchmark: str = "transformer", script: str | Path | None = None,
         command: str | None = None, config: str | Path | None = None,
         preset: str = "small", devices: int = 8, steps: int = 20, warmup: int = 2,
         max_warmup: int = 30, timeout_per_trial: float = 300.0, mode: str = "manual",
         profile_runs: int = 3, percentile: float = 50.0, repeats: int = 4,
         out: str | Path | None = None, profile: str | Path | None = None,
         base_env: Mapping[str, str] | None = None,
         progress: Callable[[int, int, Any], None] | None = None) -> PgleResult:
    """`autotune pgle`: profile a configuration, then time its PGLE performance run
    against the same configuration without the profile in `repeats` fresh processes.

    `config` is a file `autotune export` wrote (XLA's defaults when None); its
    own profile path, if any, is left out. Manual mode collects the profile
    into `out` (default `autotune-pgle/NAME-PRESET/`) as `profile.pbtxt`, or
    reads the existing `profile` (never rewritten; each run refuses it where it
    is stale); auto mode lets JAX profile (`jax_enable_pgle`).

    Raises:
        UsageError: an unknown benchmark, preset or mode; a bad config file; a
            `profile` with auto mode, or one that is missing or has no record
            beside it; repeats, profile runs or percentile out of range.
    """
    from autotune import pgle as rules
    from autotune.bench import PRESETS
    from autotune.config import load_config
    from autotune.flags.catalog import load_catalog
    from autotune.launcher import SubprocessLauncher
    from autotune.protocol import PGLE_MODES
    from autotune.records import MeasureMode
    from autotune.results.pgle import pgle_verdict
    from autotune.study.pgle import PglePlan, model_identity, run_pgle
    from autotune.study.trials import RequestSettings, with_device_count

    work, argv = _workload(benchmark, script, command)
    one_of(preset, PRESETS, "preset")
    one_of(mode, PGLE_MODES, "mode")
    _pgle_ranges(repeats, profile_runs, percentile)
    flags = (rules.without_profile(load_config(config, profile=False).flags)
             if config is not None else {})
    path = _pgle_profile(mode, profile, out, f"{work.name}-{preset}")
    env = dict(os.environ if base_env is None else base_env)
    settings = RequestSettings(
        workload=work.path, preset=preset, mode=MeasureMode.PAIRED,
        base_env=with_device_count(env, devices), steps=steps, warmup=warmup,
        max_warmup=max_warmup, timeout_s=timeout_per_trial, command=argv)
    plan = PglePlan(settings, flags, mode, path, mode == "manual" and profile is None,
                    profile_runs, percentile, repeats,
                    model_identity(work, preset, devices, argv))
    outcomes = run_pgle(plan, load_catalog(), SubprocessLauncher(), progress)
    return PgleResult(plan, work.name, outcomes, pgle_verdict(outcomes, flags))


def _pgle_ranges(repeats: int, profile_runs: int, percentile: float) -> None:
    if repeats < 1 or profile_runs < 1:
        raise UsageError("--repeats and --profile-runs must be 1 or more")
    if not 0 < percentile <= 100:
        raise UsageError(f"--percentile {percentile} must lie in (0, 100]")


def _pgle_profile(mode: str, profile: str | Path | None, out: str | Path | None,
                  default: str) -> Path | None:
    """Where manual mode writes (or, given `profile`, reads) the profile; None in auto."""
    from autotune import pgle as rules

    if mode == "auto":
        if profile is not None:
            raise UsageError("--profile is for --mode manual: auto mode lets JAX profile")
        return None
    if profile is None:
        return (Path(out) if out is not None else Path("autotune-pgle") / default).resolve() \
            / "profile.pbtxt"
    try:
        rules.read_profile(str(profile))
    except ValueError as exc:
        raise UsageError(f"--profile {profile}: {exc}") from None
    return Path(profile).resolve()
