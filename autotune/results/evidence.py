"""Evidence pooled by compiled program: what every timed process says about a program.

Configurations collapse onto few compiled programs, and a program run again
costs one more process, not another search step. So the unit a study judges
is the *program* (its fingerprint; a run without one is its own configuration),
not the configuration, and not one measurement:

- every timed observation of a program counts toward its estimate, whichever
  configuration produced it and whichever phase made it (search, racing,
  confirmation): one ratio per process, combined by the median of their
  logarithms, as `autotune.rules.stats.paired_ratio` combines processes;
- the **incumbent** is the program with the best pooled estimate among those
  backed by at least `BACKED_BY` observations, and only when that estimate is
  below 1.0 (else XLA's defaults stand);
- **racing** (`race_target`): while the leader by pooled estimate has fewer
  than `BACKED_BY` observations, it is the next thing to measure again, so a
  lucky single measurement is re-timed before it is believed. Under the
  `lucb` rule (`RACE_RULE`) racing goes on past that, LUCB-style: while the
  leader's upper confidence bound and its strongest challenger's lower bound
  are more than `RACE_EPSILON` apart, the one of the two with fewer
  observations is measured again, with at most as many racing processes as
  search processes.

Pure: works on the plain `RunRecord`s storage hands out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from autotune.flags.compose import config_key
from autotune.ground.records import MeasureMode, OutcomeKind, Role, RunRecord
from autotune.rules.stats import RatioEstimate, paired_ratio

#: Observations (timed processes) a program needs before it may be called best.
#: Three: the median of three processes is the smallest sample whose median
#: one lucky process cannot set. Chosen on the choose seeds of
#: `benchmarks/scripts/search_efficiency.py`, and kept when chosen again leave one
#: workload out from 2, 3 and 5 (docs/SEARCH_EVIDENCE.md, the racing bar, again).
BACKED_BY = 3

#: How the search races: "backed" (the leader until it has `BACKED_BY` observations) or
#: "lucb" (then on, while the leader and its strongest challenger overlap). Left out
#: (benchmarks/scripts/leave_one_out.py, the README's Search section), "lucb" gave the
#: same final answers on every table, better search incumbents on four, and up to 12%
#: more device-seconds: no held-out reason to change what ships.
RACE_RULE = "backed"

#: The lucb rule's stop: a leader whose upper bound is within this (in log ratio) of every
#: challenger's lower bound is told apart well enough (2%: "right" means within 2%).
RACE_EPSILON = math.log(1.02)

#: The lucb rule's bounds: the pooled log estimate +- RACE_Z * noise / sqrt(n).
RACE_Z = 1.64

#: Per-process noise (the standard deviation of one process's log ratio) the lucb rule
#: assumes until the study has measured some program twice.
RACE_PRIOR_NOISE = 0.05

#: Roles whose timed runs are observations of their program against XLA's defaults.
EVIDENCE_ROLES = frozenset({Role.SEARCH, Role.RECOMMENDED, Role.RACE, Role.CONFIRM})


@dataclass
class ProgramEvidence:
    """Every timed observation of one compiled program, and the configurations behind it.

    Attributes:
        program: the program's fingerprint, or `config:KEY` for runs without one.
        runs: the runs that timed it (one process each), in the order they ran.
        members: the runs of every configuration compiled to it, timed or not
            (a configuration whose program was timed already is compiled only).
    """

    program: str
    runs: list[RunRecord] = field(default_factory=list)
    members: list[RunRecord] = field(default_factory=list)

    def observe(self, run: RunRecord) -> None:
        """Add one timed process of the program (its estimates computed afresh)."""
        self.runs.append(run)
        for cached in ("ratios", "ratio"):
            self.__dict__.pop(cached, None)

    @property
    def first(self) -> RunRecord:
        """The run that first timed the program: its row in `best`."""
        return self.runs[0]

    @property
    def n(self) -> int:
        """Observations: processes that timed the program."""
        return len(self.runs)

    @cached_property
    def ratios(self) -> list[float]:
        """One time ratio (candidate/baseline) per timed process."""
        return [r for r in map(run_ratio, self.runs) if r is not None]

    @cached_property
    def ratio(self) -> float:
        """The pooled estimate: the median of the processes' log ratios (below 1 is faster)."""
        logs = sorted(math.log(r) for r in self.ratios)
        mid = len(logs) // 2
        log = logs[mid] if len(logs) % 2 else (logs[mid - 1] + logs[mid]) / 2
        return math.exp(log)

    def estimate(self) -> RatioEstimate | None:
        """The pooled estimate with its bootstrap interval over every PAIRED process (None
        without two paired processes: one process's interval says nothing of the next)."""
        pairs = [(m.step_times_s, m.baseline_step_times_s) for m in
                 (r.outcome.measurement for r in self.runs)
                 if m is not None and m.mode is MeasureMode.PAIRED and m.baseline_step_times_s]
        if len(pairs) < 2:
            return None
        return paired_ratio([list(c) for c, _ in pairs], [list(b) for _, b in pairs])

    @property
    def trials(self) -> list[int]:
        """The trial numbers of the configurations compiled to this program, in order."""
        numbers = {r.trial_number for r in self.members if r.trial_number is not None}
        return sorted(numbers)

    @property
    def backed(self) -> bool:
        """At least `BACKED_BY` observations: it may be called best."""
        return self.n >= BACKED_BY


def run_ratio(run: RunRecord) -> float | None:
    """A run's time ratio against XLA's defaults, None when it has none of its own (failed,
    or its program timed by another trial: `same_program_as`): the stored ratio, else the
    one of its PAIRED steps."""
    m = run.outcome.measurement
    if not run.outcome.ok or (m is not None and m.same_program_as is not None):
        return None
    if run.ratio:
        return run.ratio
    if m is None or not m.step_times_s or not m.baseline_step_times_s:
        return None
    return paired_ratio([list(m.step_times_s)], [list(m.baseline_step_times_s)], n_boot=1).ratio


def program_of(run: RunRecord) -> str:
    """The program a run compiled to: its fingerprint, or `config:KEY` without one."""
    m = run.outcome.measurement
    return m.fingerprint if m is not None and m.fingerprint else f"config:{config_key(run.flags)}"


def pooled(runs: Iterable[RunRecord], keep: Callable[[RunRecord], bool] | None = None,
           *, defaults: bool = False) -> list[ProgramEvidence]:
    """The programs of a study's runs, best pooled estimate first (ties: first timed first).

    Only successful runs of `EVIDENCE_ROLES` count. The baseline's program
    (XLA's defaults, the ratio's reference) is left out unless `defaults`. A
    run that timed nothing (its program was timed by another trial:
    `same_program_as`) adds its configuration to the program, not an
    observation. `keep(run)`, when given, must be true for a run to count
    (e.g. a memory budget).
    """
    runs = sorted(runs, key=lambda r: r.id)
    pool = Pool(runs, keep, defaults=defaults)
    for run in runs:
        pool.add(run)
    return pool.ranked()


class Pool:
    """`pooled`, one run at a time: the programs so far after each `add`, and the
    incumbent so far (`incumbent`, without sorting every program again).

    Args:
        runs: every run of the study (its baseline's fingerprints say which program is
            XLA's defaults, whenever the baseline ran); `add` them in id order.
        keep, defaults: as `pooled`'s.
    """

    def __init__(self, runs: Iterable[RunRecord],
                 keep: Callable[[RunRecord], bool] | None = None, *,
                 defaults: bool = False) -> None:
        self.keep, self.defaults = keep, defaults
        self.baseline = {m.fingerprint for r in runs if r.role is Role.BASELINE
                         and (m := r.outcome.measurement) is not None and m.fingerprint}
        self.programs: dict[str, ProgramEvidence] = {}
        self._names = _Programs()
        self._backed: set[str] = set()
        self._broken: set[str] = set()

    def add(self, run: RunRecord) -> ProgramEvidence | None:
        """Count `run` (see `pooled`); the program it counted toward, or None. A run that
        broke the numerics guard makes its program no answer of `incumbent` from then on."""
        if run.role in EVIDENCE_ROLES and run.outcome.kind is OutcomeKind.NUMERICS_MISMATCH:
            self._broken.add(self._names.of(run))
            self._backed -= self._broken
        if run.role not in EVIDENCE_ROLES or not run.outcome.ok:
            return None
        if self.keep is not None and not self.keep(run):
            return None
        key = self._names.of(run)
        m = run.outcome.measurement
        if not self.defaults and (key in self.baseline
                                  or (m is not None and m.same_program_as_baseline)):
            return None
        evidence = self.programs.setdefault(key, ProgramEvidence(key))
        if run.role is not Role.CONFIRM and run.role is not Role.RACE:
            evidence.members.append(run)
        if run_ratio(run) is not None:
            evidence.observe(run)
            if evidence.backed and key not in self._broken:
                self._backed.add(key)
        return evidence

    def ranked(self) -> list[ProgramEvidence]:
        """The timed programs so far, best pooled estimate first (ties: first timed first)."""
        timed = [p for p in self.programs.values() if p.runs]
        return sorted(timed, key=_rank)

    def incumbent(self) -> ProgramEvidence | None:
        """`incumbent(self.ranked())`, from the backed programs alone, leaving out those
        that broke the numerics guard."""
        best = min((self.programs[key] for key in self._backed), key=_rank, default=None)
        return incumbent([] if best is None else [best])


def _rank(p: ProgramEvidence) -> tuple[float, int]:
    return p.ratio, p.first.id


class _Programs:
    """Names each run's program, consistently: a configuration is one program (its first
    fingerprint), and a re-measurement (racing, confirmation) is of its trial's program."""

    def __init__(self) -> None:
        self.of_config: dict[str, str] = {}
        self.of_trial: dict[int, str] = {}

    def of(self, run: RunRecord) -> str:
        if run.role in (Role.CONFIRM, Role.RACE) and run.trial_number in self.of_trial:
            return self.of_trial[run.trial_number]
        key = self.of_config.setdefault(config_key(run.flags), program_of(run))
        if run.trial_number is not None:
            self.of_trial.setdefault(run.trial_number, key)
        return key


def incumbent(programs: Sequence[ProgramEvidence]) -> ProgramEvidence | None:
    """The program the study calls best now: the best pooled estimate among programs with
    at least `BACKED_BY` observations, when below 1.0; None means XLA's defaults.

    `programs` is `pooled(...)`'s order (best first).
    """
    best = next((p for p in programs if p.backed), None)
    return best if best is not None and best.ratio < 1.0 else None


def answer_speedup(leader: ProgramEvidence | None, baseline_ran: bool) -> float | None:
    """The study's answer at some point as a speedup, as every progress view shows it (the
    dashboard's best-so-far chart, the study's progress line): the incumbent's pooled
    speedup (`leader`, `incumbent(...)`), else 1.0 (XLA's defaults) once a baseline ran,
    else None."""
    if leader is not None:
        return 1 / leader.ratio
    return 1.0 if baseline_ran else None


def race_target(programs: Sequence[ProgramEvidence]) -> ProgramEvidence | None:
    """The program to measure again now, or None: the leader by pooled estimate while it
    has fewer than `BACKED_BY` observations and beats XLA's defaults on what it has; past
    that, under `RACE_RULE` "lucb", `challenged(programs)`.

    A leader at or above 1.0 is not raced: it could not become the incumbent.
    """
    leader = programs[0] if programs else None
    if leader is None or leader.ratio >= 1.0 or leader.first.trial_number is None:
        return None
    if not leader.backed:
        return leader
    return challenged(programs) if RACE_RULE == "lucb" else None


def challenged(programs: Sequence[ProgramEvidence]) -> ProgramEvidence | None:
    """The lucb rule past `BACKED_BY`: of the leader (`programs[0]`) and the challenger
    with the lowest lower bound, the one with fewer observations (the leader on a tie), while
    the leader's upper bound is more than `RACE_EPSILON` above that lower bound and racing
    has spent fewer processes than the search; else None.
    """
    leader, rivals = programs[0], [p for p in programs[1:] if p.first.trial_number is not None]
    if not rivals or _raced(programs) >= _searched(programs):
        return None
    noise = process_noise(programs)

    def bound(p: ProgramEvidence, sign: int) -> float:
        return math.log(p.ratio) + sign * RACE_Z * noise / math.sqrt(p.n)

    rival = min(rivals, key=lambda p: bound(p, -1))
    if bound(leader, +1) - bound(rival, -1) <= RACE_EPSILON:
        return None
    return rival if rival.n < leader.n else leader


def process_noise(programs: Sequence[ProgramEvidence]) -> float:
    """The pooled within-program standard deviation of one process's log ratio, over the
    programs timed at least twice; `RACE_PRIOR_NOISE` without two degrees of freedom."""
    found = within_noise(p.ratios for p in programs)
    return RACE_PRIOR_NOISE if found is None else found


def within_noise(groups: Iterable[Sequence[float]]) -> float | None:
    """The pooled within-group standard deviation of the log of each group's ratios (a
    group: one program's processes), over the groups of at least two; None without two
    degrees of freedom."""
    squares, freedom = 0.0, 0
    for ratios in groups:
        logs = [math.log(r) for r in ratios]
        if len(logs) < 2:
            continue
        mean = sum(logs) / len(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        freedom += len(logs) - 1
    return math.sqrt(squares / freedom) if freedom >= 2 else None


def _raced(programs: Sequence[ProgramEvidence]) -> int:
    return sum(1 for p in programs for r in p.runs if r.role is Role.RACE)


def _searched(programs: Sequence[ProgramEvidence]) -> int:
    return sum(1 for p in programs for r in p.runs if r.role is Role.SEARCH)
