"""What every front end asks of a study: its runner, and the sequence after the search.

The CLI (`autotune study`, `worker`, `confirm`) and the Python API
(`autotune.Study.run`) all assemble the runner with `open_runner` and end
the search with `finish`; they differ only in how they show progress, which
reaches them through a `Watcher`.
"""

from __future__ import annotations

from pathlib import Path

from autotune.ground.records import Environment
from autotune.launch.launcher import SubprocessLauncher
from autotune.results.shrink import Shrink
from autotune.storage.store import Store
from autotune.study.options import AfterSearch
from autotune.study.pgle import pgle_refusal
from autotune.study.plan import ConfirmEvent, PgleEvent, ShrinkEvent, StudyPlan
from autotune.study.runner import StudyRunner
from autotune.study.samplers import Objective


class Watcher:
    """Told what `finish` does, for progress displays; every method does nothing here."""

    def confirming(self, count: int, repeats: int) -> None:
        """Confirmation starts: the best `count` configurations, `repeats` processes each."""

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


def finish(runner: StudyRunner, after: AfterSearch, watcher: Watcher | None = None) -> None:
    """After the search: confirm the best `after.confirm`, shrink the recommendation and run
    the PGLE phase, as `after` asks (nothing for a study of memory alone); then, when the
    search holds all its trials, note the study finished (`Store.mark_finished`: its
    state is `done` until it is asked for more trials)."""
    _after_search(runner, after, watcher or Watcher())
    if runner.remaining() == 0:
        runner.store.mark_finished(runner.plan.name, runner.plan.trials)


def _after_search(runner: StudyRunner, after: AfterSearch, watch: Watcher) -> None:
    if not after.confirm or runner.plan.objectives == (Objective.MEMORY,):
        return
    if not runner.confirm(after.confirm, after.confirm_repeats, on_run=watch.confirmed,
                          cap=after.confirm_max,
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
