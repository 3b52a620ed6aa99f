"""The minimal winning configuration, and each flag's paired contribution to it.

After confirmation, the recommended configuration W is shrunk, one flag at a
time, in the catalog's order of names:

1. **Program.** Compile W without the flag (no timing). When the program's
   fingerprint is the one W's flags compile to, the flag has no effect on the
   compiled program: it goes.
2. **Time.** For each flag left, time "without the flag" against "with it" in
   the same process, `repeats` fresh processes. When the interval of that
   ratio lies wholly above 1.0, removing the flag measurably slows the
   program: it stays, and the interval is its contribution. Otherwise it goes.
3. **Check.** When step 2 dropped a flag, the smaller set compiles to another
   program than the one confirmation measured: it is measured against XLA's
   defaults `repeats` times, like a confirmation. Only when that interval
   lies wholly above 1.0 is the smaller set what autotune recommends;
   otherwise the configuration as confirmed is.

Each step removes from what is left, so two flags that do the same work are
not both dropped. This module only decides: `shrink` replays the stored
`ABLATION` and `MINIMAL` runs of the configuration and says what was found
and what to measure next (`Shrink.next`); the study runner runs that and asks
again. Flags at XLA's documented default go first, unmeasured; a
configuration holding a flag that cannot be given per compilation is not
shrunk (it cannot be compared with itself in one process).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from autotune.flags.compose import compiler_options, effective_config
from autotune.ground.records import FlagValue, Role, RunRecord
from autotune.results import confirmation
from autotune.results.confirmation import worth_applying
from autotune.rules.stats import RatioEstimate, paired_ratio

#: The roles of the runs this module replays.
SHRINK_ROLES = frozenset({Role.FINGERPRINT, Role.ABLATION, Role.MINIMAL})


class Effect(StrEnum):
    """Why a flag was dropped or kept."""

    DEFAULT = "XLA's default value"  # asks XLA for nothing
    NO_PROGRAM_CHANGE = "no effect on the compiled program"
    NOT_SLOWER = "removing it did not measurably slow the configuration"
    SLOWER = "removing it measurably slows the configuration"
    FAILED = "removing it failed"


@dataclass(frozen=True)
class Removal:
    """What removing one flag from the configuration did.

    `estimate` is the paired ratio (without the flag / with it; above 1:
    slower without it) over the timed processes, None where nothing was
    timed. `dropped` is whether the minimal configuration leaves it out.
    """

    flag: str
    value: FlagValue
    effect: Effect
    dropped: bool
    estimate: RatioEstimate | None = None

    def reason(self) -> str:
        """One sentence for the export and `importance`."""
        if self.estimate is None:
            return str(self.effect)
        low, high = self.estimate.low, self.estimate.high
        return f"{self.effect}: ×{self.estimate.ratio:.3f} [{low:.3f}, {high:.3f}] without it"


@dataclass(frozen=True)
class Step:
    """A measurement to make next, `runs` more times: `flags` compiled only (role
    FINGERPRINT), or timed against `reference` in one process (ABLATION; MINIMAL
    against XLA's defaults, `reference` None)."""

    flags: Mapping[str, FlagValue]
    role: Role
    reference: Mapping[str, FlagValue] | None = None
    runs: int = 1

    @property
    def timed(self) -> bool:
        """False for a compile-only step."""
        return self.role is not Role.FINGERPRINT


@dataclass(frozen=True)
class Shrink:
    """The state of one configuration's shrinking.

    Attributes:
        trial_number: the trial whose configuration is shrunk.
        full: its changed flags (XLA's defaults left out).
        minimal: what to apply; the full set until the check (step 3) holds.
        removals: one per flag examined so far, in order.
        check: the smaller set against XLA's defaults (step 3), when that
            held; the minimal set's own figures then. None otherwise.
        next: what to measure next; None once done (or not shrinkable).
        note: why nothing was shrunk, when that is so.
    """

    trial_number: int
    full: dict[str, FlagValue]
    minimal: dict[str, FlagValue]
    removals: list[Removal] = field(default_factory=list)
    check: RatioEstimate | None = None
    next: Step | None = None
    note: str | None = None

    @property
    def done(self) -> bool:
        return self.next is None


def shrink(runs: Sequence[RunRecord], source: RunRecord, catalog: object,
           repeats: int | None = None) -> Shrink:
    """Replay the shrinking of `source`'s configuration from stored runs (module docstring).

    Args:
        runs: the study's runs (any order; only `source`'s trial's ABLATION and
            MINIMAL runs are read, in id order).
        source: the run of the recommended configuration.
        catalog: the flag catalog (defaults, per-compile support).
        repeats: timed processes per step-2 removal and for the step-3 check;
            None reads what is stored (a step with any run counts as measured),
            as readers do, who do not plan more runs.
    """
    assert source.trial_number is not None
    full = effective_config(source.flags, catalog)  # type: ignore[arg-type]
    defaults = [Removal(name, value, Effect.DEFAULT, True) for name, value in source.flags.items()
                if name not in full]
    base = Shrink(source.trial_number, dict(full), dict(full), defaults)
    if compiler_options(full, catalog) is None:  # type: ignore[arg-type]
        return _with(base, note="not shrunk: a flag that only the environment carries cannot "
                                "be compared with the rest in one process")
    if len(full) < 2:  # one flag: without it is XLA's defaults, which confirmation measured
        return _with(base, note=None if full else "nothing to shrink")
    mine = sorted((r for r in runs if r.trial_number == source.trial_number
                   and r.role in SHRINK_ROLES), key=lambda r: r.id)
    return _replay(base, mine, repeats or 1)


def _with(state: Shrink, **changes: object) -> Shrink:
    from dataclasses import replace

    return replace(state, **changes)  # type: ignore[arg-type]


def _replay(state: Shrink, mine: list[RunRecord], repeats: int) -> Shrink:
    current = dict(state.full)
    removals = list(state.removals)
    reference = _matching(mine, current, Role.FINGERPRINT)
    if not reference:
        return _with(state, next=Step(dict(current), Role.FINGERPRINT))
    fingerprint = _fingerprint(reference[0])
    for name in sorted(state.full):  # step 1: compile without each flag
        without = {k: v for k, v in current.items() if k != name}
        compiled = _matching(mine, without, Role.FINGERPRINT)
        if not compiled:
            return _with(state, removals=removals, next=Step(without, Role.FINGERPRINT))
        if fingerprint is not None and _fingerprint(compiled[0]) == fingerprint:
            removals.append(Removal(name, current[name], Effect.NO_PROGRAM_CHANGE, True))
            current = without
    program_only = dict(current)
    for name in sorted(program_only):  # step 2: time without each flag left
        if len(current) == 1:
            break
        without = {k: v for k, v in current.items() if k != name}
        timed = _matching(mine, without, Role.ABLATION)
        if len(timed) < repeats:
            return _with(state, removals=removals,
                         next=Step(without, Role.ABLATION, dict(current), repeats - len(timed)))
        removal = _timed_removal(name, current[name], timed)
        removals.append(removal)
        if removal.dropped:
            current = without
    return _check(state, removals, current, program_only, mine, repeats)


def _check(state: Shrink, removals: list[Removal], current: dict[str, FlagValue],
           program_only: dict[str, FlagValue], mine: list[RunRecord], repeats: int) -> Shrink:
    """Step 3: a set that step 2 made smaller is recommended only once confirmed on its own."""
    if current == program_only:  # the confirmed program itself: its confirmation holds
        return _with(state, removals=removals, minimal=current)
    checks = _matching(mine, current, Role.MINIMAL)
    if len(checks) < repeats:
        return _with(state, removals=removals,
                     next=Step(dict(current), Role.MINIMAL, None, repeats - len(checks)))
    estimate = paired_estimate(checks)
    if worth_applying(estimate):
        return _with(state, removals=removals, minimal=current, check=estimate)
    kept = [Removal(r.flag, r.value, r.effect, r.effect is not Effect.NOT_SLOWER, r.estimate)
            for r in removals]
    return _with(state, removals=kept, minimal=program_only,
                 note=f"the smaller set was not confirmed {confirmation.floor_text()} than "
                      "XLA's defaults on its own: the flags whose removal did not measurably "
                      "slow it stay")


def _timed_removal(name: str, value: FlagValue, timed: list[RunRecord]) -> Removal:
    estimate = paired_estimate(timed)
    if estimate is None:
        return Removal(name, value, Effect.FAILED, False)
    slower = not estimate.includes_one and estimate.ratio > 1
    return Removal(name, value, Effect.SLOWER if slower else Effect.NOT_SLOWER, not slower,
                   estimate)


def paired_estimate(timed: list[RunRecord]) -> RatioEstimate | None:
    """The paired ratio over the runs; None when any failed (a removal that breaks the
    program, or the numerics guard, is not evidence that the flag is unneeded)."""
    ms = [r.outcome.measurement for r in timed]
    if not all(r.outcome.ok for r in timed) or any(
            m is None or not m.step_times_s or not m.baseline_step_times_s for m in ms):
        return None
    return paired_ratio([list(m.step_times_s) for m in ms if m is not None],
                        [list(m.baseline_step_times_s) for m in ms if m is not None])


def _matching(mine: list[RunRecord], flags: Mapping[str, FlagValue],
              role: Role) -> list[RunRecord]:
    """The runs of `role` that measured exactly `flags`."""
    return [r for r in mine if r.role is role and dict(r.flags) == dict(flags)]


def _fingerprint(run: RunRecord) -> str | None:
    m = run.outcome.measurement
    return m.fingerprint if run.outcome.ok and m is not None else None
