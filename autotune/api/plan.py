"""Planning a study (`plan_study`, from `autotune study`'s options) and joining one made
elsewhere (`join_study`, for `autotune worker` and `confirm`) from its stored recipe."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune import spaces
from autotune.api.inputs import one_of, resolve_workload, size_option
from autotune.api.store import open_store
from autotune.bench import PRESETS
from autotune.flags.catalog import load_catalog
from autotune.flags.open_flags import per_compile_open
from autotune.flags.probe import ProbeReport, probe
from autotune.ground.errors import StudyMismatchError, UsageError
from autotune.ground.records import MeasureMode
from autotune.ground.resources import VERSION, source_digest
from autotune.launch.launcher import parse_template
from autotune.launch.workloads import WorkloadInfo
from autotune.study import preflight
from autotune.study.options import AfterSearch, StudyOptions
from autotune.study.plan import StudyPlan
from autotune.study.samplers import Objective, choose_sampler, parse_objectives

if TYPE_CHECKING:
    from autotune.storage.store import Store
    from autotune.study.preflight import Preflight


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


def plan_study(options: StudyOptions | None = None, *,
               base_env: Mapping[str, str] | None = None, **values: Any) -> PlannedStudy:
    """Validate what the user asked for and check the space against the installed XLA.

    `options` (or the `StudyOptions` fields in `values`) are `autotune study`'s
    options (sizes as text like `12GiB`; `prune_margin` None never prunes; see
    `StudyOptions`); `base_env` the environment trials start from (default:
    this process's). Nothing touches the database. The plan carries its
    `recipe`: the options as JSON, with files as absolute paths, the creator's
    XLA and JAX variables and this autotune's version and source digest.

    Raises:
        UsageError (and its kinds): an unknown option, space, benchmark, sampler,
            objective, preset or mode; a bad size; a launcher template that does
            not parse or lacks `{cmd}`; `script` and `command` both;
            a command that cannot run; a space with flags this XLA does not
            know (unless `drop_unknown`) or for another backend (unless
            `allow_backend_mismatch`).
    """
    o = options if options is not None else StudyOptions.of(**values)
    i = _Inputs.of(o)
    loaded, work, argv, objectives = i.space, i.workload, i.argv, i.objectives
    catalog = load_catalog()
    # the values of flags outside the catalog are tried too: preflight leaves out those
    # this XLA cannot parse, as it does the catalog's documented values it rejects
    extra = {f: ([] if f in catalog else v) for f, v in loaded.flag_values().items()}
    report = probe(catalog, extra=extra, env=base_env, devices=o.devices)
    checked = preflight.check(loaded, catalog, report, drop_unknown=o.drop_unknown,
                              allow_backend_mismatch=o.allow_backend_mismatch)
    env = dict(os.environ if base_env is None else base_env)
    open_values = {f: v for f, v in extra.items() if f not in catalog}
    plan = StudyPlan(
        name=o.name or default_name(loaded.name, work.name, o.preset,
                                    report.device_count or o.devices),
        space_name=loaded.name,
        space=checked.space, workload=work, options=o, mode=i.mode, objectives=objectives,
        base_env=env, command=argv, memory_limit_bytes=i.limit, memory_budget_bytes=i.budget,
        per_compile_open=per_compile_open(open_values, report.per_compile))
    return PlannedStudy(replace(plan, recipe=_recipe(o, env)), checked, report)


@dataclass(frozen=True)
class _Inputs:
    """The user's options checked and resolved, before anything is probed."""

    space: spaces.Space
    workload: WorkloadInfo
    argv: tuple[str, ...] | None
    objectives: tuple[Objective, ...]
    mode: MeasureMode
    budget: int | None
    limit: int | None

    @classmethod
    def of(cls, o: StudyOptions) -> _Inputs:
        """Load the space, find the workload, parse every choice and size (see `plan_study`
        for what raises)."""
        loaded = spaces.load_space(o.space)
        work, argv = resolve_workload(o.benchmark, o.script, o.command)
        objectives = parse_objectives(o.objective)
        choose_sampler(o.sampler, objectives, loaded, o.trials)  # a bad choice: before a probe
        one_of(o.preset, PRESETS, "preset")
        mode = MeasureMode(one_of(o.mode, [m.value for m in MeasureMode], "mode"))
        if o.launcher is not None:
            parse_template(o.launcher)  # a template without {cmd} stops here
        return cls(loaded, work, argv, objectives, mode,
                   size_option(o.memory_budget, "--memory-budget"),
                   size_option(o.trial_memory_limit, "--trial-memory-limit"))


def _recipe(o: StudyOptions, env: Mapping[str, str]) -> dict[str, Any]:
    """How a worker rebuilds the plan of a study of options `o` made in environment `env`
    (`join_study`): the options with files as absolute paths, the folder of a command,
    the creator's XLA and JAX variables, this autotune's identity."""
    return {
        "options": o.model_copy(update={"space": _source(o.space),
                                        "script": _source(o.script)}).model_dump(mode="json"),
        "workdir": str(Path.cwd()) if o.command is not None else None,
        "base_env": {k: v for k, v in env.items()
                     if k.startswith(BASE_ENV_PREFIXES) and k not in OWN_ENV},
        "autotune": _identity()}


@dataclass(frozen=True)
class Submitted:
    """A study `submit_study` stored: its name, and the runs `restart` deleted (None: it
    deleted nothing)."""

    name: str
    deleted: int | None = None


def submit_study(storage: str, options: StudyOptions | None = None, *, restart: bool = False,
                 **values: Any) -> Submitted:
    """Store a study for a standing pool of workers to measure (`autotune study --submit`)
    and return its name; nothing is measured or probed here.

    The options are checked as `plan_study` checks them, but the preflight probe runs
    where the workload will run: on the first worker that takes the study (`join_study`),
    which then stores the plan it made. The default name counts `devices` (the probe
    would count the devices JAX sees). Submitting a study that exists updates its recipe
    (a new `priority`, say); `restart` deletes it first, its runs too.

    Raises:
        UsageError (and its kinds): as `plan_study`, before the probe.
        StorageError: a bad URL or an unreachable database.
        StudyMismatchError: a study of that name exists with other settings.
    """
    o = options if options is not None else StudyOptions.of(**values)
    i = _Inputs.of(o)
    name = o.name or default_name(i.space.name, i.workload.name, o.preset, o.devices)
    deleted = None
    with open_store(storage, must_exist=False, write=True) as store:
        if restart and name in {s.name for s in store.list_studies()}:
            from autotune.api.store import delete_study

            deleted = delete_study(storage, name)
        store.submit_study(name, i.space.name, i.workload.name, o.preset, o.devices, i.mode,
                           _recipe(o, os.environ), objectives=[x.value for x in i.objectives],
                           memory_budget_bytes=i.budget)
    return Submitted(name, deleted)


def default_name(space: str, workload: str, preset: str, devices: int) -> str:
    """A study's name when none is given: SPACE-WORKLOAD-PRESET-Ndev, N the devices JAX
    sees in the study's environment (`--devices` on a CPU), so the same workload on
    another device count is another study."""
    return f"{space}-{workload}-{preset}-{devices}dev"


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
    options = StudyOptions.of(**{**recipe.get("options", {}), "name": name,
                                 **({} if trials is None else {"trials": trials})})
    own = {k: v for k, v in os.environ.items()  # the creator's XLA variables, not ours
           if not k.startswith(BASE_ENV_PREFIXES) or k in OWN_ENV}
    planned = plan_study(options, base_env={**own, **recipe.get("base_env", {})})
    mine = planned.plan.recorded()
    differences = [f"{key} {stored.get(key)!r} in the study, {mine[key]!r} here"
                   for key in mine if key in stored and stored[key] != mine[key]]
    if differences:
        raise StudyMismatchError(
            f"this worker would not measure study {name!r} as it was made: "
            f"{'; '.join(differences)} (file hashes cover the space and workload files): "
            "give every worker the same files and autotune")
    return Joined(replace(planned, plan=replace(planned.plan, recipe=None)), store,
                  AfterSearch.of(options))


def _identity() -> dict[str, str]:
    """This autotune: its version and the digest of its sources."""
    return {"version": VERSION, "source": source_digest()}


def _check_identity(name: str, theirs: Mapping[str, Any]) -> None:
    """Refuse to work on a study made by another autotune (version or sources)."""

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
