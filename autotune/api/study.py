"""`Study`: one study in a database, to create and run, or to read."""

# Imports inside the methods are lazy on purpose: the command line imports this package at
# start, and a study's storage, Optuna and read model load only when a method needs them.

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.api.inputs import one_of
from autotune.api.plan import PlannedStudy, plan_study
from autotune.api.results import BestEntry, RecommendationResult
from autotune.api.store import DEFAULT_STORAGE, open_store
from autotune.ground.errors import UsageError
from autotune.results.confirmation import CONFIRM_MAX

if TYPE_CHECKING:
    from autotune.ground.records import RunRecord, StudyRecord
    from autotune.results.shrink import Shrink
    from autotune.storage.store import Store
    from autotune.study.plan import ConfirmEvent, RunSummary, ShrinkEvent, TrialEvent
    from autotune.study.service import Watcher


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
               benchmark: str = "transformer", script: str | Path | None = None,
               command: str | None = None, trials: int = 12, name: str | None = None,
               sampler: str = "auto", seed: int | None = None, objective: str = "time",
               memory_budget: str | None = None, timeout_per_trial: float = 300.0,
               preset: str = "small", devices: int = 8, steps: int = 20, warmup: int = 2,
               max_warmup: int = 30, settle_tolerance: float = 0.05, mode: str = "paired",
               drop_unknown: bool = False, allow_backend_mismatch: bool = False,
               confirm: int = 3, confirm_repeats: int = 2, confirm_max: int = CONFIRM_MAX,
               confirm_steps: int | None = None,
               prune_margin: float | None = 1.3, shrink: bool = True,
               warm_start: bool = True, priority: int = 0,
               keep_trial_files: str | Path | None = None,
               trial_memory_limit: str | None = None, fit: bool = True, racing: bool = True,
               heartbeat_s: int = 30, launcher: str | None = None, pgle: int = 0) -> Study:
        """Plan a study; nothing is measured yet (`run` measures it).

        Every argument is the `autotune study` option of its name (`--heartbeat` for
        `heartbeat_s`; `prune_margin=None` is `--no-prune`), with the same default and
        meaning: see `autotune study --help` or `StudyOptions`, whose fields these are
        (a test keeps the two equal). `confirm`, `confirm_repeats`, `confirm_max`,
        `confirm_steps`, `shrink` and `pgle` are what `run()` does after the search unless
        it is told otherwise. `storage` is the database URL.

        Raises:
            UsageError: a value out of range or unknown (named), as `plan_study` says.
        """
        values = {key: value for key, value in locals().items()
                  if key not in ("cls", "storage")}
        planned = plan_study(**values)
        return cls(planned.plan.name, storage, planned)

    def run(self, *, confirm: int | None = None, confirm_repeats: int | None = None,
            shrink: bool | None = None, pgle: int | None = None,
            confirm_max: int | None = None, confirm_steps: int | None = None,
            on_trial: Callable[[TrialEvent], None] | None = None,
            on_confirm: Callable[[ConfirmEvent], None] | None = None,
            on_shrink: Callable[[ShrinkEvent], None] | None = None,
            again: bool = False) -> RunSummary:
        """Measure the trials still to run, then confirm the best `confirm` configurations
        `confirm_repeats` times each and shrink the recommendation (as `autotune study`;
        a study that finished these phases for its trials, asked the same, measures
        nothing more after its search unless `again`, as `autotune confirm`);
        with `pgle` K, measure the best K again with a PGLE profile each
        (`StudyRunner.pgle`), `confirm_repeats` processes each; `confirm_max` caps
        sequential confirmation (0: off), and `confirm_steps` sets the timed steps of each
        confirmation process. Each of the six left None is what the
        study's options say (`Study.create(confirm=..., ...)`).

        Raises:
            UsageError: this Study was opened for reading (use `Study.create`).
        """
        from autotune.study.options import AfterSearch
        from autotune.study.service import finish, open_runner

        if self.planned is None:
            raise UsageError(f"study {self.name!r} was opened for reading; create it with "
                             "Study.create(space=..., ...) to run trials")
        store = open_store(self.storage, must_exist=False, write=True)
        plan = self.planned.plan
        runner = open_runner(plan, store, self.planned.report.environment)
        try:
            runner.prepare()
            summary = runner.run(on_trial=on_trial)
            after = AfterSearch.of(plan.options, confirm=confirm,
                                   confirm_repeats=confirm_repeats, shrink=shrink, pgle=pgle,
                                   confirm_max=confirm_max, confirm_steps=confirm_steps)
            finish(runner, after, _callbacks(on_confirm, on_shrink), again=again)
        finally:
            runner.close()
        return summary

    def runs(self) -> list[RunRecord]:
        """Every stored run of the study, in the order they were made."""
        return self._read()[1]

    def best(self, limit: int = 10) -> list[BestEntry]:
        """The rows of `autotune best`: the baseline, then the best `limit` (`BestEntry`;
        `.to_json()` is the row of `best --format json`)."""
        from autotune.flags.catalog import load_catalog
        from autotune.results.study_results import StudyResults

        record, runs = self._read()
        results = StudyResults.of(record, runs, load_catalog())
        return [BestEntry.of(row) for row in results.best_json(results.rows(limit))]

    def recommendation(self) -> RecommendationResult:
        """What autotune recommends (`RecommendationResult`: `trial` None means XLA's
        defaults)."""
        from autotune.flags.catalog import load_catalog
        from autotune.results.study_results import StudyResults

        rec = StudyResults.of(*self._read(), load_catalog()).recommendation
        return RecommendationResult(
            rec.recommended, rec.run.trial_number if rec.run is not None else None, rec.reason)

    def shrunk(self) -> Shrink | None:
        """The recommendation's shrinking as stored (None when nothing is recommended)."""
        from autotune.flags.catalog import load_catalog
        from autotune.results.ranking import recommend
        from autotune.results.shrink import shrink
        from autotune.results.study_results import study_catalog

        record, runs = self._read()
        rec = recommend(runs, record.objectives, record.memory_budget_bytes)
        catalog = study_catalog(load_catalog(), record)
        return shrink(runs, rec.run, catalog) if rec.run is not None else None

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
    from autotune.ground.errors import ExportError
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
