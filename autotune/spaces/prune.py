"""Remove flags or values from a space (unknown to this XLA, or rejected by it)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from autotune.ground.records import FlagValue
from autotune.spaces.params import Param, same_value
from autotune.spaces.space import Group, Space


def without_flags(space: Space, flags: Iterable[str]) -> Space:
    """A copy of `space` that never sets `flags`.

    Params setting those flags go, and so do params whose condition reads a
    removed param (their condition could never hold any more). Groups lose
    the removed members (a group left empty goes), and so do their variants;
    a variant left setting what the group's values or an earlier variant set
    goes, so no configuration is counted twice. The recommended
    configuration is dropped when it named a removed flag: what remains is no
    longer the documented configuration.
    """
    drop = set(flags)
    removed = {name for name, p in space.params.items() if p.flag in drop}
    while True:
        more = {name for name, when in space.conditions.items()
                if name not in removed and removed.intersection(when)}
        if not more:
            break
        removed |= more
    gone = drop | {space.params[name].flag for name in removed}
    return replace(
        space,
        params={n: p for n, p in space.params.items() if n not in removed},
        groups=_groups_without(space.groups.values(), removed),
        conditions={n: w for n, w in space.conditions.items() if n not in removed},
        fixed={f: v for f, v in space.fixed.items() if f not in gone},
        recommended={} if gone.intersection(space.recommended) else dict(space.recommended),
    )


def _groups_without(groups: Iterable[Group], removed: set[str]) -> dict[str, Group]:
    out: dict[str, Group] = {}
    for group in groups:
        members = tuple(m for m in group.params if m not in removed)
        if members:
            values = {m: v for m, v in group.values.items() if m in members}
            variants = {name: {m: v for m, v in chosen.items() if m in members}
                        for name, chosen in group.variants.items()}
            out[group.name] = _distinct_variants(
                replace(group, params=members, values=values, variants=variants))
    return out


def _distinct_variants(group: Group) -> Group:
    """`group` without the variants that set what `values` or an earlier variant sets."""
    kept: dict[str, Mapping[str, FlagValue]] = {}
    for name, chosen in group.variants.items():
        if all(not _same(chosen, other) for other in (group.values, *kept.values())):
            kept[name] = chosen
    return replace(group, variants=kept)


def _same(a: Mapping[str, FlagValue], b: Mapping[str, FlagValue]) -> bool:
    return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)


def _without_rejected_variants(group: Group, space: Space,
                               rejected: Mapping[str, Iterable[FlagValue]]) -> Group:
    """`group` without the variants that set a member's flag to a rejected value."""
    def bad(member: str, value: FlagValue) -> bool:
        return any(same_value(value, b) for b in rejected.get(space.params[member].flag, ()))

    kept = {name: chosen for name, chosen in group.variants.items()
            if not any(bad(m, v) for m, v in chosen.items())}
    return replace(group, variants=kept)


def without_values(space: Space, rejected: Mapping[str, Iterable[FlagValue]]) -> Space:
    """A copy of `space` whose params never propose the `rejected` values of their flags.

    Only candidates listed as choices (bool, categorical, pow2_bytes) are
    removed; a param left with no candidate at all goes, like `without_flags`.
    A group's variants that set a rejected value go (its own `values` stay).
    The recommended configuration is dropped when it uses a removed value.
    """
    params: dict[str, Param] = {}
    emptied: list[str] = []
    for name, param in space.params.items():
        bad = list(rejected.get(param.flag, ()))
        if param.choices is None or not bad:
            params[name] = param
            continue
        kept = tuple(c for c in param.choices if not any(same_value(c, b) for b in bad))
        if kept or param.allow_unset:
            params[name] = replace(param, choices=kept)
        else:
            emptied.append(param.flag)
    groups = {name: _without_rejected_variants(g, space, rejected)
              for name, g in space.groups.items()}
    pruned = replace(space, params=params, groups=groups)
    uses_bad = any(any(same_value(v, b) for b in rejected.get(f, ()))
                   for f, v in space.recommended.items())
    if uses_bad:
        pruned = replace(pruned, recommended={})
    return without_flags(pruned, emptied) if emptied else pruned
