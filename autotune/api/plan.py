"""Planning a study (`plan_study`, from `autotune study`'s options) and joining one made
elsewhere (`join_study`, for `autotune worker` and `confirm`) from its stored recipe."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.api.inputs import one_of, resolve_workload, size_option
from autotune.api.store import open_store
from autotune.errors import UsageError

if TYPE_CHECKING:
    from autotune.flags.probe import ProbeReport
    from autotune.storage.store import Store
    from autotune.study.plan import StudyPlan
    from autotune.study.preflight import Preflight
    from autotune.study.service import AfterSearch


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
    work, argv = resolve_workload(benchmark, script, command)
    objectives = parse_objectives(objective)
    choose_sampler(sampler, objectives, loaded, trials)  # a bad choice stops before any probe
    one_of(preset, PRESETS, "preset")
    measure_mode = MeasureMode(one_of(mode, [m.value for m in MeasureMode], "mode"))
    if launcher is not None:
        from autotune.launcher import parse_template

        parse_template(launcher)  # a template without {cmd} stops here
    budget = size_option(memory_budget, "--memory-budget")
    limit = size_option(trial_memory_limit, "--trial-memory-limit")
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
