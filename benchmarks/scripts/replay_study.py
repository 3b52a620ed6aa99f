"""Seeded studies on a recorded table, as the search benchmarks run them.

A sibling module of `search_efficiency.py` (the scripts are no package; each
script puts this folder on `sys.path`). A study here is a real
`autotune.study.runner.StudyRunner` whose trials `TableLauncher` answers from
a table recorded on a real machine (`benchmarks/tables/`, see
`record_table.py`). It is planned with the budget a user gives (`--trials B`,
so `auto` resolves as it does for them), stopped once B processes have timed
something, and then, as `autotune study` does by default, confirmed (the best
`CONFIRM_TOP` configurations, `CONFIRM_REPEATS` fresh processes each, then
sequentially up to `CONFIRM_MAX` processes for the leader). Its
`Answer` is what the user is left with: the search's incumbent after each
timed process (`Trace`), the final recommendation (`recommend`) and every
device-second the study spent.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

from autotune.launch.launcher import Launcher
from autotune.study.options import AfterSearch

ROOT = Path(__file__).resolve().parents[2]
#: what `autotune study` confirms by default (`AfterSearch`'s defaults): the best 3, 2
#: fresh processes each, then sequentially up to 48 processes per configuration
#: (`--confirm-max`). A benchmark tunes the cap here (`replay_study:CONFIRM_MAX=...`):
#: `autotune.results.confirmation.CONFIRM_MAX` is read once, as the options' default
CONFIRM_TOP, CONFIRM_REPEATS, CONFIRM_MAX = (AfterSearch.confirm, AfterSearch.confirm_repeats,
                                             AfterSearch.confirm_max)
#: timed steps of each confirmation process (`--confirm-steps`); None: the search's, which
#: here are the table's own (`meta["steps"]`). More are served from the table's runs of
#: confirmation length (`record_table.py --long-for`), else from its runs joined end to end
CONFIRM_STEPS: int | None = None


@dataclass
class Trace:
    """One seeded study: after each timed process, the incumbent's true ratio and the
    device-seconds spent so far (every compile and every timed process)."""

    true_ratios: list[float]
    device_seconds: list[float] = field(default_factory=list)

    def trials_to(self, target: float) -> float:
        """First count of timed processes at which the incumbent is within `target`, else
        infinity."""
        for n, ratio in enumerate(self.true_ratios, start=1):
            if ratio <= target:
                return n
        return math.inf

    def at(self, n: int) -> float:
        return self.true_ratios[min(n, len(self.true_ratios)) - 1]

    def seconds_at(self, n: int) -> float:
        return self.device_seconds[min(n, len(self.device_seconds)) - 1]


@dataclass
class Answer:
    """What one seeded study leaves its user with.

    `recommended`: the key (`config_key` of the effective flags) of the final
    recommendation, "" for XLA's defaults; `true_ratio`: its true ratio on the
    table; `device_seconds`: the whole study's, confirmation included (0 where
    confirmation was not run); `search_seconds`: the search's alone (every compile and
    process before confirmation), so that `device_seconds - search_seconds` is what
    confirmation spent; `timed`: processes the search timed (a user's
    `--trials B` may time fewer than B: a trial whose program was timed
    already only compiles).
    """

    trace: Trace
    recommended: str | None = None
    true_ratio: float | None = None
    device_seconds: float = 0.0
    search_seconds: float = 0.0
    timed: int = 0
    #: confirmation processes longer than the table's runs, by how the replay served them
    #: ("long": one recorded run of confirmation length, "joined": runs joined end to end),
    #: and "reused": draws of a recorded process a second time (`TableLauncher.reused`)
    served: dict[str, int] = field(default_factory=dict)
    #: the recommendation's program had a recorded process drawn a second time: its
    #: interval counts that process twice, so it is narrower than the table supports
    reused: bool = False
    #: the study asked for more processes of a program than the table holds (`fresh`)
    #: and stopped there: its answer is what it had measured by then
    exhausted: bool = False


def parse_seeds(text: str) -> list[int]:
    """`0-19`, `1000-1199` or `1,2,5-7` as a sorted list of distinct seeds.

    Raises:
        ValueError: an item that is not a seed or a range of them, or no seed at all.
    """
    seeds: set[int] = set()
    for item in (part.strip() for part in text.split(",")):
        first, sep, last = item.partition("-")
        try:
            low, high = int(first), int(last) if sep else int(first)
        except ValueError:
            raise ValueError(f"'{item}' is not a seed or a range of seeds (e.g. 1000-1099)"
                             ) from None
        if low < 0 or high < low:
            raise ValueError(f"'{item}' is not a range of non-negative seeds, low-high")
        seeds.update(range(low, high + 1))
    if not seeds:
        raise ValueError("no seeds given")
    return sorted(seeds)


def seeds_text(seeds: Sequence[int]) -> str:
    """The seeds as ranges: [0, 1, 2, 7] -> '0-2,7'."""
    parts, start = [], None
    for i, seed in enumerate(seeds):
        if start is None:
            start = seed
        if i + 1 == len(seeds) or seeds[i + 1] != seed + 1:
            parts.append(str(seed) if seed == start else f"{start}-{seed}")
            start = None
    return ",".join(parts)


class Enough(Exception):
    """Raised by `Counting` at the launch after the last timed process a search may use."""


class Counting(Launcher):
    """A launcher that stops the search once `goal` processes have timed something (a
    series, `launch_all`, goes one `launch` at a time, as the base class does)."""

    def __init__(self, inner: Any, goal: float) -> None:
        self.inner, self.goal, self.timed = inner, goal, 0

    def launch(self, request: Any) -> Any:
        if self.timed >= self.goal:
            raise Enough
        outcome = self.inner.launch(request)
        m = outcome.measurement
        self.timed += bool(m is not None and m.step_times_s)
        return outcome


def run_study(table, space, sampler: str, seed: int, timed: int, catalog, *,
              rule: str = "study", trials: int | None = None, confirm: bool = False,
              fresh: bool = False) -> Answer:
    """One seeded study on the table: a search planned with `trials` (default `timed`, the
    budget a user gives) until `timed` processes have timed something, then, with
    `confirm`, the default confirmation and the recommendation.

    `rule` "study": the study as built (the space fitted to the workload, racing
    on) and its own incumbent rule (`autotune.results.evidence.incumbent`: the
    best pooled program backed by enough processes, else XLA's defaults).
    "single": the study before pooling (no fitting, no racing), and the
    incumbent is the configuration with the best single observed ratio (the
    baseline, no flags, scored by its in-process A/A ratio like any other).

    `fresh`: never serve a recorded process twice (`TableLauncher`'s `reuse` off);
    a study that asks for more processes of a program than the table holds stops
    there, its search or its confirmation (`Answer.exhausted`), and is judged on what
    it measured by then: a pessimistic bound, where the default is an optimistic one.
    """
    import optuna

    from autotune.launch.replay import TableExhausted, TableLauncher
    from autotune.storage.store import Store
    from autotune.study.plan import StudyPlan
    from autotune.study.runner import StudyRunner

    plan = StudyPlan.of(name=f"{sampler}-{seed}", space=space, workload=table.workload(ROOT),
                        trials=trials or timed, sampler=sampler, seed=seed,
                        racing=rule == "study", fit=rule == "study",
                        steps=table.meta["steps"])
    store = Store.open("sqlite://")
    replay = TableLauncher(table, catalog, seed=seed, long_after=table.meta["steps"],
                           reuse=not fresh)
    launcher = Counting(replay, timed)
    runner = StudyRunner(plan, store, launcher, optuna.storages.InMemoryStorage())
    exhausted = False
    try:
        runner.run()
    except Enough:
        pass
    except TableExhausted:
        exhausted = True
    searched = sorted(store.runs(plan.name), key=lambda r: r.id)
    answer = Answer(_trace(table, searched, catalog, rule), timed=launcher.timed,
                    exhausted=exhausted,
                    search_seconds=sum(r.outcome.duration_s for r in searched))
    if confirm:
        launcher.goal = math.inf  # confirmation is not part of the search's budget
        try:
            if not exhausted:
                runner.confirm(CONFIRM_TOP, CONFIRM_REPEATS, cap=CONFIRM_MAX,
                               steps=CONFIRM_STEPS)
        except TableExhausted:
            answer.exhausted = True
        _judge(answer, table, store.runs(plan.name), catalog)
        answer.served = dict(replay.served)
        answer.reused = (table.programs.get(answer.recommended) or answer.recommended) \
            in replay.reused if answer.recommended else False
    store.close()
    return answer


def _judge(answer: Answer, table, runs, catalog) -> None:
    """Fill the answer's recommendation, its true ratio and the study's device-seconds."""
    from autotune.flags.compose import config_key, effective_config
    from autotune.results.ranking import recommend

    rec = recommend(runs)
    answer.recommended = "" if rec.run is None else config_key(
        effective_config(rec.run.flags, catalog))
    answer.true_ratio = table.true_ratio(answer.recommended)
    answer.device_seconds = sum(r.outcome.duration_s for r in runs)


def _trace(table, runs, catalog, rule: str) -> Trace:
    """The incumbent's true ratio and the device-seconds after each timed process."""
    from autotune.flags.compose import config_key, effective_config
    from autotune.results.evidence import incumbent, pooled

    truths: list[float] = []
    seconds: list[float] = []
    spent, best_seen, best_key = 0.0, math.inf, None
    for i, run in enumerate(runs):
        spent += run.outcome.duration_s
        m = run.outcome.measurement
        if m is None or not m.step_times_s:
            continue
        key = config_key(effective_config(run.flags, catalog))
        if rule == "single":
            if run.ratio is not None and run.ratio < best_seen:
                best_seen, best_key = run.ratio, key
        else:
            chosen = incumbent(pooled(runs[:i + 1]))
            best_key = "" if chosen is None else config_key(
                effective_config(chosen.first.flags, catalog))
        truth = table.true_ratio(best_key) if best_key is not None else None
        truths.append(math.inf if truth is None else truth)
        seconds.append(spent)
    return Trace(truths, seconds)


def committed_tables() -> list[Path]:
    """Every table in `benchmarks/tables/` (`.json` or `.json.gz`; not the `.parts` folders
    of a recording under way), sorted by name."""
    folder = ROOT / "benchmarks/tables"
    return sorted(p for pattern in ("*.json", "*.json.gz") for p in folder.glob(pattern)
                  if p.is_file())


@cache
def loaded(path: str) -> tuple[Any, Any, Any]:
    """The table, its space and the catalog, read once per process."""
    from autotune.flags.catalog import load_catalog
    from autotune.launch.replay import ReplayTable
    from autotune.spaces import load_space

    table = ReplayTable.load(path)
    return table, load_space(str(ROOT / table.meta["space"])), load_catalog()


#: a tuned constant set for one study: (module, attribute, value), e.g.
#: ("autotune.study.samplers", "TPE_STARTUP", 8); it must be read when used, not bound early
Setting = tuple[str, str, Any]


def parse_tune(text: str) -> list[Setting]:
    """`module:ATTRIBUTE=v1,v2` as the settings it tries (`_value`: JSON, a Python
    literal such as False, else text).

    Raises:
        ValueError: not of that form.
    """
    name, sep, values = text.partition("=")
    module, colon, attribute = name.partition(":")
    if not (sep and colon and module and attribute and values):
        raise ValueError(f"'{text}' is not module:ATTRIBUTE=value,value")
    return [(module, attribute, _value(v)) for v in values.split(",")]


def _value(text: str) -> Any:
    """One value of a setting: JSON (2, 0.05, false), else a Python literal (False, None,
    which JSON does not read: as text, "False" was true), else the text itself ("cap")."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def confirm_budget(settings: Sequence[Setting] = ()) -> int:
    """The processes confirmation may spend on one configuration, at most (the oracle's
    share): by `CONFIRM_MAX` as it is now, or as `settings` set it."""
    cap = next((value for module, attribute, value in settings
                if (module, attribute) == ("replay_study", "CONFIRM_MAX")), CONFIRM_MAX)
    return max(CONFIRM_TOP * CONFIRM_REPEATS, cap)


@contextmanager
def patched(settings: Sequence[Setting]) -> Iterator[None]:
    """The constants set to the given values for the block, then restored."""
    import importlib

    saved = []
    for module_name, attribute, value in settings:
        module = importlib.import_module(module_name)
        saved.append((module, attribute, getattr(module, attribute)))
        setattr(module, attribute, value)
    try:
        yield
    finally:
        for module, attribute, value in reversed(saved):
            setattr(module, attribute, value)


def memoised_ratios() -> None:
    """Make every `autotune` module that bound `autotune.rules.stats.paired_ratio` call one
    that remembers its answers (in this process, 4096 of them), so that a replayed study
    pays once for each bootstrap.

    `paired_ratio` is a pure function of its step times (its resampling is seeded), and
    sequential confirmation asks it again, each round, for every target whose processes
    did not change: a real study pays milliseconds for that beside processes of seconds,
    a replayed one most of its time. The answers are the same; only the time changes.
    The remembered answer is keyed by `stats`' numeric constants too (a job may set one,
    e.g. `STEPS_RESAMPLED_BELOW`).
    """
    import importlib

    from autotune.rules import stats

    original = stats.paired_ratio
    if getattr(original, "memoised", False):
        return

    @lru_cache(maxsize=4096)
    def remembered(candidate: tuple[tuple[float, ...], ...],
                   baseline: tuple[tuple[float, ...], ...], options: tuple[Any, ...],
                   constants: tuple[Any, ...]) -> Any:
        return original(candidate, baseline, **dict(options))

    def paired_ratio(candidate: Sequence[Sequence[float]], baseline: Sequence[Sequence[float]],
                     **options: Any) -> Any:
        # the answer depends on the module's constants too, which a job may patch
        constants = tuple((k, v) for k, v in vars(stats).items()
                          if k.isupper() and isinstance(v, int | float))
        return remembered(tuple(map(tuple, candidate)), tuple(map(tuple, baseline)),
                          tuple(sorted(options.items())), constants)

    paired_ratio.memoised = True  # type: ignore[attr-defined]
    for name in ("autotune.rules.stats", "autotune.results.confirmation",
                 "autotune.results.evidence", "autotune.results.shrink",
                 "autotune.results.pgle", "autotune.study.trials"):
        module = importlib.import_module(name)
        if getattr(module, "paired_ratio", None) is original:
            module.paired_ratio = paired_ratio  # type: ignore[attr-defined]


def _answer_job(job: tuple[str, str, int, int, tuple[Setting, ...], str, bool, int | None,
                           bool]) -> Answer:
    """One study of a job (table path, sampler, seed, timed processes, settings, rule,
    confirm, planned trials or None, fresh)."""
    memoised_ratios()
    path, sampler, seed, timed, settings, rule, confirm, trials, fresh = job
    table, space, catalog = loaded(path)
    with patched(settings):
        return run_study(table, space, sampler, seed, timed, catalog, rule=rule,
                         trials=trials, confirm=confirm, fresh=fresh)


def _shipped(setting: Setting) -> bool:
    """Whether the constant already has this value as the code ships it."""
    import importlib

    module, attribute, value = setting
    current = getattr(importlib.import_module(module), attribute)
    return type(current) is type(value) and current == value


class Runner:
    """Runs studies in `jobs` processes (in this one for 1), results in order; with `fresh`,
    each on the table's fresh recorded processes alone (`run_study`)."""

    def __init__(self, jobs: int, fresh: bool = False) -> None:
        self.pool = ProcessPoolExecutor(jobs) if jobs > 1 else None
        self.fresh = fresh
        self._done: dict[tuple[Any, ...], Answer] = {}

    def answers(self, path: Path, sampler: str, seeds: Sequence[int], timed: int, *,
                settings: Sequence[Setting] = (), rule: str = "study", confirm: bool = True,
                trials: int | None = None) -> list[Answer]:
        """One answer per seed (see `run_study`), with the constants `settings` set.

        A study is run once per runner: asked again (the same table, seed and
        settings, a setting that equals the shipped value counting as unset), the
        answer already found is returned, since a seeded study is deterministic.
        """
        changed = tuple(s for s in settings if not _shipped(s))
        jobs = [(str(path), sampler, seed, timed, changed, rule, confirm, trials, self.fresh)
                for seed in seeds]
        new = [job for job in dict.fromkeys(jobs) if job not in self._done]
        done = self.pool.map(_answer_job, new) if self.pool else map(_answer_job, new)
        self._done.update(zip(new, done, strict=True))
        return [self._done[job] for job in jobs]

    def traces(self, path: Path, sampler: str, seeds: Sequence[int], timed: int,
               startup: int | None = None, rule: str = "study") -> list[Trace]:
        """The search's traces only (no confirmation), planned with `timed` trials."""
        settings = () if startup is None else (
            ("autotune.study.samplers", "TPE_STARTUP", startup),)
        return [a.trace for a in self.answers(path, sampler, seeds, timed, settings=settings,
                                              rule=rule, confirm=False)]

    def close(self) -> None:
        if self.pool:
            self.pool.shutdown()
