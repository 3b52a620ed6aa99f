"""What every front end asks of a study: its runner, and the sequence after the search.

The CLI (`autotune study`, `worker`, `confirm`) and the Python API
(`autotune.Study.run`) all assemble the runner with `open_runner` and end
the search with `finish`; they differ only in how they show progress, which
reaches them through a `Watcher`.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

from autotune.ground.records import PLAN_FINISHED, Environment
from autotune.launch.launcher import SubprocessLauncher
from autotune.results.shrink import Shrink
from autotune.storage.store import Store
from autotune.study.options import AfterSearch
from autotune.study.pgle import pgle_refusal
from autotune.study.plan import ConfirmEvent, PgleEvent, ShrinkEvent, StudyPlan
from autotune.study.runner import StudyRunner
from autotune.study.samplers import Objective

log = logging.getLogger(__name__)


class Watcher:
    """Told what `finish` does, for progress displays; every method does nothing here."""

    def confirming(self, count: int, repeats: int) -> None:
        """Confirmation starts: the best `count` configurations, `repeats` processes each."""

    def finished_before(self) -> None:
        """The phases after the search ended in an earlier run, as asked now: nothing to do."""

    def nothing_to_confirm(self) -> None:
        """The search measured no configuration beside XLA's defaults: nothing to confirm."""

    def confirmed(self, event: ConfirmEvent) -> None:
        """One confirmation run is stored."""

    def shrinking(self, event: ShrinkEvent) -> None:
        """One run of shrinking is stored."""

    def shrunk(self, state: Shrink | None) -> None:
        """Shrinking ended (None: nothing to shrink in this process)."""

    def pgle_skipped(self, why: str) -> None:
        """The PGLE phase cannot run in this study, for this reason."""

    def pgle_starting(self, top: int, repeats: int) -> None:
        """The PGLE phase starts."""

    def pgle_measured(self, event: PgleEvent) -> None:
        """One PGLE run is stored."""


def open_runner(plan: StudyPlan, store: Store, facts: Environment | None) -> StudyRunner:
    """The runner of `plan` on `store` (its own database for Optuna's side), measuring in
    fresh subprocesses in the environment `facts` (the preflight probe's). With the
    option `keep_trial_files`, each trial's folder (its full stdout and stderr, result,
    artifacts and `flags.json`) is kept there instead of deleted."""
    keep = plan.options.keep_trial_files
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
    launcher = SubprocessLauncher(scratch_root=Path(keep), keep_scratch=True) if keep \
        else SubprocessLauncher()
    return StudyRunner(plan, store, launcher, store.url, facts=facts)


def finish(runner: StudyRunner, after: AfterSearch, watcher: Watcher | None = None, *,
           again: bool = False) -> bool:
    """After the search: confirm the best `after.confirm`, shrink the recommendation and run
    the PGLE phase, as `after` asks (nothing for a study of memory alone); then, when the
    search holds all its trials, note the study finished (`Store.mark_finished`: its
    state is `done` until it is asked for more trials); last, keep its page for readers
    (`publish_page`).

    A study that finished those phases for as many trials, asked the same `after`, is
    left as it is (`Watcher.finished_before`) unless `again` (`autotune confirm`): a
    re-run of the command that finished it measures nothing more. Confirmation's targets
    are the leaders as the runs stand, and its own runs move them, so confirming again
    would measure configurations the finished study did not (a re-run of the quick
    start confirmed a fifth configuration in four new processes). With `again` the
    study keeps the `after` it finished with, so that its own command, run again,
    still finds it done.

    Returns:
        True when the phases ran, False when the study was done as asked.
    """
    watch = watcher or Watcher()
    ran = again or not finished_as(runner, after)
    if ran:
        _after_search(runner, after, watch)
        if runner.remaining() == 0:  # `again` keeps what the study itself was asked
            runner.store.mark_finished(runner.plan.name, runner.plan.trials,
                                       None if again else asdict(after))
    else:
        watch.finished_before()
    publish_page(runner.store, runner.plan.name)
    return ran


def finished_as(runner: StudyRunner, after: AfterSearch) -> bool:
    """Whether the study's phases after the search ended (`Store.mark_finished`) for at least
    its plan's trials, asked `after`: each option kept then equal to `after`'s (an option
    added to `AfterSearch` since, or a study finished before autotune kept `after`, counts
    as asked the same)."""
    finished = (runner.store.get_study(runner.plan.name).plan or {}).get(PLAN_FINISHED) or {}
    trials, kept, asked = finished.get("trials"), finished.get("after") or {}, asdict(after)
    return (isinstance(trials, int) and trials >= runner.plan.trials
            and all(key in asked and asked[key] == value for key, value in kept.items()))


def publish_page(store: Store, name: str) -> bool:
    """Compute the study's page (`results.view.study_page`, the dashboard's, whose `best`
    is `best --format json`) once and keep it with the study's version
    (`Store.save_view`), so that readers of the study as it stands now read no run.

    The version is taken before the runs are read: a run stored meanwhile leaves the
    kept page behind its study, and readers compute their own. Never stops the study:
    a failure to store the page is logged and False returned (readers compute the
    page, as they would without it).
    """
    import json

    from autotune.flags.catalog import load_catalog
    from autotune.results.view import study_page

    try:
        version = store.version(name)
        page = study_page(store.get_study(name), store.runs(name), load_catalog(),
                          store.workers(name), claims=store.claims(name))
        store.save_view(name, version, json.dumps(page))
    except Exception as exc:  # noqa: BLE001 - a page not kept must never stop the study
        log.warning("the study's page was not kept (readers compute it): %s", exc)
        log.debug("why the page was not kept", exc_info=True)
        return False
    return True


def _after_search(runner: StudyRunner, after: AfterSearch, watch: Watcher) -> None:
    if not after.confirm or runner.plan.objectives == (Objective.MEMORY,):
        return
    if not runner.confirm(after.confirm, after.confirm_repeats, on_run=watch.confirmed,
                          cap=after.confirm_max, steps=after.confirm_steps,
                          on_start=lambda count: watch.confirming(count, after.confirm_repeats)):
        watch.nothing_to_confirm()
    if after.shrink:
        watch.shrunk(runner.shrink(after.measure_repeats, on_run=watch.shrinking))
    if not after.pgle:
        return
    if why := pgle_refusal(runner.plan):
        watch.pgle_skipped(why)
        return
    watch.pgle_starting(after.pgle, after.measure_repeats)
    runner.pgle(after.pgle, after.measure_repeats, on_run=watch.pgle_measured)
