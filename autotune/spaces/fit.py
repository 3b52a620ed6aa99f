"""Fit a search space to the workload: drop what cannot act on its program, clip what
can act only on part of a range.

A space holds the documents' candidates, written for every workload; the
study's baseline says what this one compiles to. Two kinds of evidence:

- **The baseline's collectives** (`autotune.rules.collectives`, per kind: count,
  bytes, inside a while loop or not). `FLAG_USES` is the one place that says
  which kind of collective a flag acts on, and how. A param whose kind the
  program lacks is dropped (or, for a flag that acts only inside while
  loops, whose kind never runs in one); a threshold is clipped to the sizes
  the program's collectives of its kind hold: every threshold below the
  smallest array acts like any other there, and so does every one above the
  kind's total (a combine threshold) or its largest collective (a threshold
  compared with each collective), so the range keeps one value on each side
  and never ends up empty. A space that holds a flag able to create a kind
  (`CREATES`: windowed einsum makes collective-permutes) keeps that kind's params.
- **A compile-only probe** (`probe_cases`, `run_probe`): a per-compile flag
  whose every value compiles to the very program it is compared with (the
  baseline's, or its condition's) is dropped. Flags that reach XLA only
  through the environment are not judged; nor are groups, continuous ranges
  or ranges of more than `PROBE_MAX_VALUES` values.

Only params outside every group are fitted. A param whose condition reads a
dropped param goes too. The recommended configuration follows: dropped flags
leave it, a clipped value moves to the nearest value left (same effect on this
program). Everything here is pure (no jax, no I/O): `StudyRunner.fit_space`
compiles what the probe asks and stores the `SpaceFit`, so every worker and
every resume samples the same space (`apply_fit`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from autotune.flags.compose import compiler_options, config_key, effective_config
from autotune.ground.records import CollectiveStats, FlagValue
from autotune.rules.collectives import profile_from_json, profile_json
from autotune.spaces.params import Param
from autotune.spaces.prune import without_flags
from autotune.spaces.space import Space

#: The version of the stored fit document (`SpaceFit.to_json`).
FIT_SCHEMA_VERSION = 1
#: A param with more values than this is not probed (each value is one compile).
PROBE_MAX_VALUES = 16


class Rule(StrEnum):
    """How a flag acts on its kind of collective."""

    COMBINE = "combine"  # combines collectives of the kind while their bytes stay under it
    PER_OP = "per_op"  # a threshold compared with each collective of the kind
    IN_LOOP = "in_loop"  # acts on collectives of the kind inside while loops only
    PRESENT = "present"  # acts on collectives of the kind


@dataclass(frozen=True)
class FlagUse:
    """What a flag acts on: one kind of collective (`rules.collectives.KINDS`), by `rule`."""

    kind: str
    rule: Rule


#: flag -> the collectives it acts on. A test checks that every catalog flag naming a
#: kind is here (obsolete ones aside) and that every flag here is in the catalog.
FLAG_USES: dict[str, FlagUse] = {
    # GPU (001): combining, pipelining in loops, combining by dimension, send/recv
    "xla_gpu_all_reduce_combine_threshold_bytes": FlagUse("all-reduce", Rule.COMBINE),
    "xla_gpu_all_gather_combine_threshold_bytes": FlagUse("all-gather", Rule.COMBINE),
    "xla_gpu_reduce_scatter_combine_threshold_bytes": FlagUse("reduce-scatter", Rule.COMBINE),
    "xla_gpu_enable_pipelined_all_reduce": FlagUse("all-reduce", Rule.IN_LOOP),
    "xla_gpu_enable_pipelined_all_gather": FlagUse("all-gather", Rule.IN_LOOP),
    "xla_gpu_enable_pipelined_reduce_scatter": FlagUse("reduce-scatter", Rule.IN_LOOP),
    "xla_gpu_enable_all_gather_combine_by_dim": FlagUse("all-gather", Rule.PRESENT),
    "xla_gpu_enable_reduce_scatter_combine_by_dim": FlagUse("reduce-scatter", Rule.PRESENT),
    "xla_gpu_enable_pipelined_p2p": FlagUse("collective-permute", Rule.IN_LOOP),
    "xla_gpu_collective_permute_decomposer_threshold": FlagUse("collective-permute",
                                                               Rule.PER_OP),
    # TPU (000, 002): latency-bound thresholds, asynchronous collectives and their fusion
    "xla_all_reduce_latency_bound_threshold_in_bytes": FlagUse("all-reduce", Rule.PER_OP),
    "xla_all_gather_latency_bound_threshold_in_bytes": FlagUse("all-gather", Rule.PER_OP),
    "xla_collective_permute_latency_bound_threshold_in_bytes": FlagUse("collective-permute",
                                                                       Rule.PER_OP),
    "xla_all_to_all_latency_bound_threshold_in_bytes": FlagUse("all-to-all", Rule.PER_OP),
    "xla_enable_async_all_gather": FlagUse("all-gather", Rule.PRESENT),
    "xla_enable_async_collective_permute": FlagUse("collective-permute", Rule.PRESENT),
    "xla_tpu_enable_async_all_to_all": FlagUse("all-to-all", Rule.PRESENT),
    "xla_tpu_enable_async_collective_fusion_fuse_all_gather": FlagUse("all-gather",
                                                                      Rule.PRESENT),
    "xla_tpu_enable_async_collective_fusion_fuse_all_reduce": FlagUse("all-reduce",
                                                                      Rule.PRESENT),
    "xla_tpu_enable_ici_ag_pipelining": FlagUse("all-gather", Rule.PRESENT),
    "xla_tpu_enable_ag_backward_pipelining": FlagUse("all-gather", Rule.PRESENT),
    "xla_tpu_megacore_fusion_allow_ags": FlagUse("all-gather", Rule.PRESENT),
    "xla_tpu_enable_data_parallel_all_reduce_opt": FlagUse("all-reduce", Rule.PRESENT),
    "xla_tpu_data_parallel_opt_different_sized_ops": FlagUse("all-reduce", Rule.PRESENT),
}

#: flag -> kinds of collective it can create where the baseline has none (windowed
#: einsum turns an all-gather and its dot into a loop of collective-permutes).
CREATES: dict[str, tuple[str, ...]] = {
    "xla_gpu_threshold_for_windowed_einsum_mib": ("collective-permute",),
    "xla_jf_spmd_threshold_for_windowed_einsum_mib": ("collective-permute",),
}


class Action(StrEnum):
    """What the fit did to a param."""

    DROPPED = "dropped"
    CLIPPED = "clipped"


@dataclass(frozen=True)
class FitChange:
    """One param the fit dropped or clipped, and why.

    Attributes:
        param, flag: the param and the flag it sets.
        action: dropped (never sampled) or clipped (fewer candidates).
        reason: why, in one sentence (no markup).
        old: the candidates before ("unset" aside); empty for a continuous range.
        new: the candidates after; empty when dropped.
        evidence: `collectives` (the baseline's collectives), `probe` (compile-only
            runs) or `condition` (the param its condition reads was dropped).
    """

    param: str
    flag: str
    action: Action
    reason: str
    old: tuple[FlagValue, ...] = ()
    new: tuple[FlagValue, ...] = ()
    evidence: str = "collectives"

    def to_json(self) -> dict[str, Any]:
        """The change with stable keys: param, flag, action, reason, old, new, evidence."""
        return {"param": self.param, "flag": self.flag, "action": self.action.value,
                "reason": self.reason, "old": list(self.old), "new": list(self.new),
                "evidence": self.evidence}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> FitChange:
        """Read `to_json`'s document back."""
        return cls(raw["param"], raw["flag"], Action(raw["action"]), raw["reason"],
                   tuple(raw.get("old") or ()), tuple(raw.get("new") or ()),
                   raw.get("evidence", "collectives"))


@dataclass(frozen=True)
class SpaceFit:
    """A study's search space fitted to its workload (see the module docstring).

    Attributes:
        changes: each param dropped or clipped, in the space's order.
        collectives: the baseline's collectives it was fitted to (None: not reported).
        probes: compile-only runs the probe made.
        recommended: flag -> its value in the fitted recommended configuration, for
            each flag whose documented value changed (None: left out).
        skipped: why nothing was fitted (None when it was).
    """

    changes: tuple[FitChange, ...] = ()
    collectives: Mapping[str, CollectiveStats] | None = None
    probes: int = 0
    recommended: Mapping[str, FlagValue | None] = field(default_factory=dict)
    skipped: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The document the study stores (`Store.save_fit`), with `schema_version`."""
        return {"schema_version": FIT_SCHEMA_VERSION,
                "changes": [c.to_json() for c in self.changes],
                "collectives": None if self.collectives is None
                else profile_json(self.collectives),
                "probes": self.probes, "recommended": dict(self.recommended),
                "skipped": self.skipped}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> SpaceFit:
        """Read a stored document.

        Raises:
            ValueError: another schema version (a newer autotune stored it).
        """
        if raw.get("schema_version") != FIT_SCHEMA_VERSION:
            raise ValueError(f"space fit schema_version {raw.get('schema_version')!r} is not "
                             f"{FIT_SCHEMA_VERSION}: read this study with the autotune that "
                             "ran it")
        return cls(tuple(FitChange.from_json(c) for c in raw.get("changes") or ()),
                   profile_from_json(raw.get("collectives")), int(raw.get("probes") or 0),
                   dict(raw.get("recommended") or {}), raw.get("skipped"))


# --- the collectives --------------------------------------------------------------------------


def useful_range(use: FlagUse, stats: CollectiveStats) -> tuple[int, int]:
    """(low, high): every threshold at or below `low` acts like `low` on this program,
    every one at or above `high` like `high`.

    `low` is the largest power of two below the smallest array (no collective is
    that small: nothing combines, every one is over the threshold); 0 when
    arrays of a byte or none exist. `high` is the first power of two above the
    kind's total for a combine threshold (everything combines; the arrays inside
    while loops count twice, since double buffering and pipelining may unroll a
    loop once) or above its largest collective for a per-collective threshold.
    """
    smallest = stats.smallest_bytes
    low = 1 << ((smallest - 1).bit_length() - 1) if smallest >= 2 else 0
    top = stats.bytes + stats.loop_bytes if use.rule is Rule.COMBINE else stats.largest_bytes
    return low, 1 << top.bit_length()


def clip_choices(choices: Sequence[int], low: int, high: int) -> tuple[int, ...]:
    """The sorted `choices` from the largest at or below `low` (else the smallest) to the
    smallest at or above `high` (else the largest): never empty when `choices` is not."""
    ordered = sorted(choices)
    first = max((c for c in ordered if c <= low), default=ordered[0])
    last = min((c for c in ordered if c >= high), default=ordered[-1])
    return tuple(c for c in ordered if first <= c <= last)


def collective_changes(space: Space,
                       profile: Mapping[str, CollectiveStats]) -> list[FitChange]:
    """The params the baseline's collectives drop or clip (lone params only, in order)."""
    grouped = {member for group in space.groups.values() for member in group.params}
    created = {kind for flag in [*(p.flag for p in space.params.values()), *space.fixed]
               for kind in CREATES.get(flag, ())}
    changes = []
    for name, param in space.params.items():
        use = FLAG_USES.get(param.flag)
        if use is None or name in grouped or use.kind in created:
            continue
        change = _judged(param, use, profile.get(use.kind))
        if change is not None:
            changes.append(change)
    return changes


def _judged(param: Param, use: FlagUse, stats: CollectiveStats | None) -> FitChange | None:
    old = param.values() or ()
    if stats is None:
        return FitChange(param.name, param.flag, Action.DROPPED,
                         f"the program has no {use.kind}: nothing for it to act on", old)
    if use.rule is Rule.IN_LOOP and not stats.in_loop:
        return FitChange(param.name, param.flag, Action.DROPPED,
                         f"none of the program's {_count(stats.count, use.kind)} runs inside a "
                         "while loop, the only place it acts", old)
    ints = [c for c in old if isinstance(c, int) and not isinstance(c, bool)]
    if use.rule not in (Rule.COMBINE, Rule.PER_OP) or not ints or len(ints) != len(old):
        return None
    low, high = useful_range(use, stats)
    new = clip_choices(ints, low, high)
    if len(new) == len(old):
        return None
    return FitChange(param.name, param.flag, Action.CLIPPED,
                     _clip_reason(use, stats, ints, new, high), old, new)


def _clip_reason(use: FlagUse, stats: CollectiveStats, old: Sequence[int],
                 new: Sequence[int], high: int) -> str:
    """Why a threshold's range was cut, naming only the ends that were cut."""
    if use.rule is Rule.COMBINE:
        loop = f", {_size(stats.loop_bytes)} of it inside while loops" if stats.loop_bytes else ""
        verb = "holds" if stats.count == 1 else "hold"
        what = f"its {_count(stats.count, use.kind)} {verb} {_size(stats.bytes)} in all{loop}"
        top = f"every threshold from {_size(high)} up combines all of them alike"
    else:
        what = f"its largest {use.kind} holds {_size(stats.largest_bytes)}"
        top = f"every threshold from {_size(high)} up is above each of them alike"
    bottom = (f"every threshold below its smallest array ({_size(stats.smallest_bytes)}) "
              "is below each of them alike")
    cuts = [bottom if min(old) < new[0] else "", top if max(old) > new[-1] else ""]
    return f"{what}: {'; '.join(filter(None, cuts))}"


def _count(n: int, kind: str) -> str:
    return f"{n} {kind}" + ("" if n == 1 else "s")


def _size(n: int) -> str:
    """Bytes in the largest binary unit that keeps a whole number, e.g. `16 MiB`, `1.5 KiB`."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            value = n / scale
            return f"{value:g} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} B"


# --- the compile-only probe -------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeCase:
    """One param to probe: each of `values` is compiled with `reference` and compared with
    `reference` alone (empty: the baseline's program)."""

    param: str
    flag: str
    reference: Mapping[str, FlagValue]
    values: tuple[FlagValue, ...]


#: Configurations -> the fingerprints of their compiled programs, in the same order (None:
#: it did not compile).
CompileMany = Callable[[Sequence[Mapping[str, FlagValue]]], list[str | None]]


def probe_cases(space: Space, catalog: Any,
                limit: int = PROBE_MAX_VALUES) -> list[ProbeCase]:
    """The lone params a compile-only probe can judge, in the space's order.

    Left out: members of groups, continuous ranges and ranges of more than
    `limit` values, and params whose flag (or whose condition's) cannot be
    given per compilation (`compose.compiler_options`). A param's values equal
    to XLA's default are not compiled: they ask XLA for nothing.
    """
    grouped = {member for group in space.groups.values() for member in group.params}
    cases = []
    for name, param in space.params.items():
        values = param.values()
        if name in grouped or values is None or len(values) > limit:
            continue
        reference = {space.params[other].flag: value
                     for other, value in space.conditions.get(name, {}).items()}
        config = {**reference, param.flag: values[0]} if values else reference
        if compiler_options(config, catalog) is None:
            continue
        kept = tuple(v for v in values if effective_config({param.flag: v}, catalog))
        cases.append(ProbeCase(name, param.flag, reference, kept))
    return cases


def run_probe(cases: Sequence[ProbeCase], compile_many: CompileMany) -> list[FitChange]:
    """Drop each probed param whose every value compiles to its reference's program.

    A case's reference is its condition's values alone, or the baseline's
    configuration (`{}`) for a case without a condition. The probe goes in
    rounds, each one call of `compile_many` (one process compiles a round,
    `Launcher.launch_all`): a round compiles the next value of every case
    under way, and the reference and first value of every case that may
    start. A param stops being probed at its first value that compiles to
    another program or not at all (its later values are never compiled); a
    case whose reference did not compile is not judged. A case starts once
    every probed param its condition reads is decided, and is skipped where
    one of them was dropped (it goes with that param). The changes come in
    the cases' order; the caller keeps what it compiled (a configuration
    asked again is not compiled again).
    """
    order = {case.flag: i for i, case in enumerate(cases)}
    by_flag = {case.flag: case for case in cases}
    waiting = list(cases)
    running: dict[str, int] = {}  # flag -> index of its value this round
    references: dict[str, str | None] = {}
    dropped: set[str] = set()
    while waiting or running:
        undecided = {case.flag for case in waiting} | set(running)
        ready = [case for case in waiting if not undecided.intersection(case.reference)]
        for case in ready or waiting:  # a cycle of conditions (none is ready): start them all
            waiting.remove(case)
            if not dropped.intersection(case.reference):
                running[case.flag] = 0
        if not running:  # every case that started was skipped: no round to compile
            continue
        asked = {flag: _probe_configs(by_flag[flag], at, flag not in references)
                 for flag, at in running.items()}
        unique = {config_key(c): c for configs in asked.values() for c in configs}
        got = dict(zip(unique, compile_many(list(unique.values())), strict=True))
        for flag, configs in asked.items():
            case = by_flag[flag]
            if flag not in references:
                references[flag] = got[config_key(configs[0])]
            at, reference = running.pop(flag), references[flag]
            if reference is None or (case.values and got[config_key(configs[-1])] != reference):
                continue  # not judged, or another program: kept
            if at + 1 < len(case.values):
                running[flag] = at + 1
            else:
                dropped.add(flag)
    return [FitChange(by_flag[flag].param, flag, Action.DROPPED,
                      _probe_reason(by_flag[flag]), evidence="probe")
            for flag in sorted(dropped, key=order.__getitem__)]


def _probe_configs(case: ProbeCase, at: int, first: bool) -> list[dict[str, FlagValue]]:
    """What a round compiles for `case`: its reference on its first round, then its value
    number `at` with the reference (nothing more for a case without values)."""
    configs = [dict(case.reference)] if first else []
    if case.values:
        configs.append({**case.reference, case.flag: case.values[at]})
    return configs


def _probe_reason(case: ProbeCase) -> str:
    against = "the baseline's program" if not case.reference else "the program of " + ", ".join(
        f"{flag}={value}" for flag, value in case.reference.items()) + " alone"
    if not case.values:
        return "no effect on the compiled program: each of its values is XLA's default"
    n = len(case.values)
    values = "its value" if n == 1 else f"each of its {n} values"
    return f"no effect on the compiled program: {values} compiled to {against}"


# --- the fitted space -------------------------------------------------------------------------


def settle(space: Space, changes: Sequence[FitChange], *, probes: int = 0,
           collectives: Mapping[str, CollectiveStats] | None = None) -> SpaceFit:
    """The fit of `space` from its changes: the params whose condition reads a dropped
    param are added (dropped, evidence `condition`), the old candidates filled in, and
    the recommended configuration's changed values recorded."""
    by_param: dict[str, FitChange] = {}
    for change in changes:  # a range clipped, then dropped by the probe: one drop, both whys
        before = by_param.get(change.param)
        if before is not None and before.action is Action.CLIPPED:
            change = replace(change, reason=f"{change.reason} (its range was clipped first: "
                             f"{before.reason})")
        by_param[change.param] = change
    fitted = _applied(space, changes)
    full: list[FitChange] = []
    for name, param in space.params.items():
        found = by_param.get(name)
        if found is None and name not in fitted.params:
            when = space.conditions.get(name, {})
            found = FitChange(name, param.flag, Action.DROPPED,
                              f"it is sampled only when {_when_text(when)}, and "
                              f"{' and '.join(when)} was dropped", evidence="condition")
        if found is not None:
            full.append(replace(found, old=param.values() or ()))
    recommended = _fitted_recommended(space, fitted)
    moved = {flag: recommended.get(flag) for flag, value in space.recommended.items()
             if flag not in recommended or recommended[flag] != value}
    return SpaceFit(tuple(full), collectives, probes, moved)


def _when_text(when: Mapping[str, FlagValue]) -> str:
    return " and ".join(f"{name}={str(value).lower() if isinstance(value, bool) else value}"
                        for name, value in when.items())


def apply_fit(space: Space, fit: SpaceFit) -> Space:
    """The effective space: `space` with the fit's changes (deterministic, so every
    process that reads the same fit samples the same space)."""
    fitted = _applied(space, fit.changes)
    return replace(fitted, recommended=_fitted_recommended(space, fitted))


def _applied(space: Space, changes: Sequence[FitChange]) -> Space:
    """`space` with the changes' clipped candidates and without their dropped flags
    (nor the params whose condition reads one; see `prune.without_flags`)."""
    clipped = {c.param: c.new for c in changes if c.action is Action.CLIPPED and c.new}
    params = {name: replace(p, choices=tuple(clipped[name])) if name in clipped else p
              for name, p in space.params.items()}
    dropped = [c.flag for c in changes if c.action is Action.DROPPED]
    return without_flags(replace(space, params=params, recommended={}), dropped)


def _fitted_recommended(space: Space, fitted: Space) -> dict[str, FlagValue]:
    """The documented recommended configuration on the fitted space: flags of params
    that were dropped leave it, values outside a clipped range move to its nearest end."""
    documented = {p.flag: p for p in space.params.values()}
    kept = {p.flag: p for p in fitted.params.values()}
    recommended: dict[str, FlagValue] = {}
    for flag, value in space.recommended.items():
        if flag in kept:
            recommended[flag] = _nearest(kept[flag], value)
        elif flag not in documented:
            recommended[flag] = value
    return recommended


def _nearest(param: Param, value: FlagValue) -> FlagValue:
    if param.contains(value) or not param.choices or isinstance(value, bool) \
            or not isinstance(value, int | float):
        return value
    numbers = [c for c in param.choices if isinstance(c, int | float) and not isinstance(c, bool)]
    return min(numbers, key=lambda c: abs(c - value)) if numbers else value
