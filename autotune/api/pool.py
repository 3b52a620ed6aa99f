"""A standing pool of workers: `autotune worker` without `--study` serves every open study.

A `Pool` is one worker's view of a database that many studies share. Each
`serve_one` looks at the studies again, takes the first open one it can
measure (`candidates`: queued, searching or confirming, matching the worker's
pattern; the highest `priority` first, then the one with the fewest trials in
flight, then by name), and does one piece of work on it: one claimed trial of
its search, or, once its search holds all its trials and no other process
searches it, the phases after the search (`study.service.finish`, shared with
any other worker through their claims). Then it looks again.

A study is joined once per pool (`join_study`: the study's recipe, this
autotune's identity, the preflight probe on this machine); one this worker
cannot measure is remembered with the reason (`refused`) and never tried again
by it: another autotune or other files (`StudyMismatchError`), a space for
another backend, a recipe-less study, or a study measured on another device
kind or count than this machine's.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autotune.api.plan import Joined, join_study
from autotune.ground.errors import BaselineFailedError, UsageError
from autotune.ground.records import Environment, RunRecord, StudyRecord
from autotune.results.table import priority, study_state

if TYPE_CHECKING:
    from autotune.storage.store import Store
    from autotune.study.plan import TrialEvent
    from autotune.study.runner import StudyRunner
    from autotune.study.service import Watcher

#: The states in which a study has work for a worker.
OPEN_STATES = frozenset({"queued", "searching", "confirming"})


@dataclass
class _Served:
    """A study this worker has joined: its plan and its runner."""

    joined: Joined
    runner: StudyRunner


@dataclass
class Pool:
    """One worker's share of every open study of the database at `storage` whose name
    matches `pattern` (a shell glob; see the module docstring).

    Attributes:
        refused: study name -> why this worker does not measure it.
    """

    storage: str
    pattern: str = "*"
    refused: dict[str, str] = field(default_factory=dict)
    _store: Store | None = None
    _served: dict[str, _Served] = field(default_factory=dict)

    @property
    def store(self) -> Store:
        """The database, opened on first use (read-only: each study's runner writes)."""
        if self._store is None:
            from autotune.api.store import open_store

            self._store = open_store(self.storage, must_exist=True)
        return self._store

    def candidates(self) -> list[StudyRecord]:
        """The open studies this worker may measure, in the order it serves them."""
        in_flight = Counter(claim.study_name for claim in self.store.live_claims())
        keyed = []
        for record in self.store.list_studies():
            name = record.name
            if not fnmatch.fnmatchcase(name, self.pattern) or name in self.refused:
                continue
            state = study_state(record, self.store.runs(name), in_flight[name] > 0)
            if state in OPEN_STATES:
                keyed.append((-priority(record), in_flight[name], name, record))
        return [record for *_, record in sorted(keyed, key=lambda k: k[:3])]

    def serve_one(self, on_trial: Callable[[str, TrialEvent], None] | None = None,
                  watcher: Watcher | None = None) -> str | None:
        """Do one piece of work on the first candidate that has some for this worker;
        return its name, or None when no study had work for it now."""
        for record in self.candidates():
            served = self._join(record.name)
            if served is not None and self._step(record.name, served, on_trial, watcher):
                return record.name
        return None

    def _join(self, name: str) -> _Served | None:
        """The study joined (once), or None when this worker cannot measure it (`refused`)."""
        if name in self._served:
            return self._served[name]
        from autotune.study.service import open_runner

        try:
            joined = join_study(name, self.storage)
        except UsageError as exc:  # another autotune, files, backend; no recipe
            self.refused[name] = exc.message
            return None
        mine = joined.planned.report.environment
        if (why := other_devices(joined.store.runs(name), mine)) is not None:
            self.refused[name] = why
            joined.store.close()
            return None
        runner = open_runner(joined.planned.plan, joined.store, mine)
        self._served[name] = _Served(joined, runner)
        return self._served[name]

    def _step(self, name: str, served: _Served, on_trial: Callable[[str, TrialEvent], None]
              | None, watcher: Watcher | None) -> bool:
        """One claimed search trial, or the phases after a complete search; False when the
        study has nothing for this worker now (its search is full and another process
        still measures a trial of it)."""
        from autotune.study.service import finish

        runner = served.runner
        runner.prepare()
        if runner.remaining() > 0:
            report = None if on_trial is None else (lambda event: on_trial(name, event))
            try:
                return runner.run(on_trial=report, limit=1).launched > 0
            except BaselineFailedError:
                return True  # measured, and failed: the study's state says so now
        if runner.others_searching():
            return False
        if finish(runner, served.joined.after, watcher):
            return True
        # done as joined, though listed open: its recipe may ask for more trials now, which
        # the plan joined before does not know; join it afresh on the next pass
        self._served.pop(name).runner.close()
        return False

    def close(self) -> None:
        """Close every study's runner and the database."""
        for served in self._served.values():
            served.runner.close()
        if self._store is not None:
            self._store.close()


def other_devices(runs: list[RunRecord], mine: Environment | None) -> str | None:
    """Why a worker with environment `mine` must not measure a study whose `runs` were taken
    on other devices (another backend, device kind or count), or None: it may (a study
    measured nowhere yet may be measured anywhere)."""
    if mine is None:
        return None
    seen = {(e.backend, e.device_kind, e.device_count)
            for e in (run.environment for run in runs) if e is not None}
    here = (mine.backend, mine.device_kind, mine.device_count)
    if not seen or here in seen:
        return None
    theirs = ", ".join(f"{count} {kind} ({backend})" for backend, kind, count in sorted(seen))
    return (f"it is measured on {theirs}; this worker has {here[2]} {here[1]} ({here[0]})")
