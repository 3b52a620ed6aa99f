"""Remove flags from a space (for `autotune study --drop-unknown`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from autotune.spaces.space import Group, Space


def without_flags(space: Space, flags: Iterable[str]) -> Space:
    """A copy of `space` that never sets `flags`.

    Params setting those flags go, and so do params whose condition reads a
    removed param (their condition could never hold any more). Groups lose
    the removed members (a group left empty goes). The recommended
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
            out[group.name] = replace(group, params=members, values=values)
    return out
