"""Checks that relate params to each other: groups, conditions, the recommended point."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from autotune.flags.catalog import Catalog
from autotune.ground.records import FlagValue
from autotune.spaces.checks import (
    Problem,
    allowed_hint,
    check_value_in,
    did_you_mean,
    params_by_flag,
)
from autotune.spaces.params import Param, same_value
from autotune.spaces.schema import GroupSpec, SpaceFile
from autotune.spaces.space import Group, Space, make_units, order_units

_GROUP_HINT = "A group is switched as one: "
#: A variant's name: a word of letters, digits, `-` and `_`, starting with a letter.
_VARIANT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
#: Names a variant cannot take: they are the group's own two choices.
_RESERVED_VARIANTS = ("on", "off")


def check_groups(model: SpaceFile, catalog: Catalog) -> list[Problem]:
    """Members must be params, in one group only, each with a valid value."""
    problems: list[Problem] = []
    owner: dict[str, str] = {}
    for name, spec in model.groups.items():
        base = ("groups", name)
        if not spec.params:
            problems.append(Problem((*base, "params"), "a group needs at least one param",
                                    "List the params it switches."))
        for i, member in enumerate(spec.params):
            path = (*base, "params", i)
            if member not in model.params:
                problems.append(Problem(path, f"'{member}' is not a param of this space",
                                        did_you_mean(member, model.params, "params")))
            elif member in owner:
                problems.append(Problem(path, f"'{member}' is already in group "
                                        f"'{owner[member]}'", "Put a param in one group only."))
            owner.setdefault(member, name)
        problems.extend(_check_member_values((*base, "values"), spec.values, spec, model,
                                             catalog, "when the group is on"))
        problems.extend(_check_variants(base, spec, model, catalog))
    return problems


def _check_member_values(path: tuple[Any, ...], values: Mapping[str, FlagValue],
                         spec: GroupSpec, model: SpaceFile, catalog: Catalog,
                         when: str) -> Iterator[Problem]:
    """`values` (the group's `values` or one variant's) sets every member, each to a
    value its flag takes."""
    for key, value in values.items():
        if key not in spec.params:
            yield Problem((*path, key), f"'{key}' is not a member of the group",
                          "Add it to the group's params, or remove its value.")
        elif key in model.params:
            flag = catalog.get(model.params[key].flag or key)
            if problem := flag.check_value(value):
                yield Problem((*path, key), problem, allowed_hint(flag))
    for member in spec.params:
        if member not in values:
            yield Problem(path, f"no value for member '{member}'",
                          f"Give every member the value it takes {when}.")


def _check_variants(base: tuple[Any, ...], spec: GroupSpec, model: SpaceFile,
                    catalog: Catalog) -> Iterator[Problem]:
    """Each variant: a usable name, a valid value for every member, and a configuration
    of its own (not the group's `values`, nor an earlier variant's)."""
    seen: dict[str, Mapping[str, FlagValue]] = {"the group's values (on)": spec.values}
    for name, values in spec.variants.items():
        path = (*base, "variants", name)
        if name in _RESERVED_VARIANTS:
            yield Problem(path, f"a variant cannot be called '{name}': on is the group's "
                          "values, off leaves its members unset", "Rename the variant.")
        elif not _VARIANT_NAME.match(name):
            yield Problem(path, f"variant name {name!r} is not a word",
                          "Use letters, digits, - and _, starting with a letter (e.g. auto).")
        found = list(_check_member_values(path, values, spec, model, catalog,
                                          f"in variant '{name}'"))
        yield from found
        same = None if found else next(
            (other for other, earlier in seen.items() if _same_when(values, earlier)), None)
        if same is not None:
            yield Problem(path, f"variant '{name}' sets the same values as {same}",
                          "Drop it, or give it values of its own.")
        seen[f"variant '{name}'"] = values


def check_conditions(model: SpaceFile, params: Mapping[str, Param],
                     groups: Mapping[str, Group]) -> list[Problem]:
    """Conditions must name params and reachable values, agree within groups, not loop."""
    group_value = {m: _member_values(g, m) for g in groups.values() for m in g.params}
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for i, cond in enumerate(model.conditions):
        base = ("conditions", i)
        if cond.param not in params:
            problems.append(Problem((*base, "param"), f"'{cond.param}' is not a param of this "
                                    "space", did_you_mean(cond.param, params, "params")))
        elif cond.param in seen:
            problems.append(Problem((*base, "param"), f"'{cond.param}' already has a condition "
                                    f"(conditions[{seen[cond.param]}])",
                                    "Merge both into one `when` mapping (all of it must hold)."))
        seen.setdefault(cond.param, i)
        problems.extend(_check_when(base, cond.param, cond.when, params, group_value))
    if problems:
        return problems
    conditions = {c.param: c.when for c in model.conditions}
    problems.extend(_check_group_conditions(groups, conditions))
    return problems or _check_cycles(params, groups, conditions, seen)


def _member_values(group: Group, member: str) -> list[FlagValue]:
    """The values `member` takes when its group is on, then in each variant."""
    values: list[FlagValue] = []
    for chosen in (group.values, *group.variants.values()):
        if not any(same_value(chosen[member], v) for v in values):
            values.append(chosen[member])
    return values


def _check_when(base: tuple[Any, ...], param: str, when: Mapping[str, FlagValue],
                params: Mapping[str, Param], group_value: Mapping[str, list[FlagValue]]
                ) -> Iterator[Problem]:
    if not when:
        yield Problem((*base, "when"), "when is empty",
                      "Name at least one param and the value it must have.")
    for other, value in when.items():
        path = (*base, "when", other)
        if other not in params:
            yield Problem(path, f"'{other}' is not a param of this space",
                          did_you_mean(other, params, "params"))
        elif other == param:
            yield Problem(path, "a param cannot depend on itself", "Name another param.")
        else:
            yield from check_value_in(path, params[other], value, group_value.get(other))


def _same_when(a: Mapping[str, FlagValue], b: Mapping[str, FlagValue]) -> bool:
    return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)


def _check_group_conditions(groups: Mapping[str, Group],
                            conditions: Mapping[str, Mapping[str, FlagValue]]) -> list[Problem]:
    problems = []
    for name, group in groups.items():
        first = group.params[0]
        for i, member in enumerate(group.params[1:], start=1):
            if not _same_when(conditions.get(member, {}), conditions.get(first, {})):
                problems.append(Problem(
                    ("groups", name, "params", i),
                    f"member '{member}' is conditioned differently from '{first}'",
                    _GROUP_HINT + "give all its members the same condition, or none."))
    return problems


def _check_cycles(params: Mapping[str, Param], groups: Mapping[str, Group],
                  conditions: Mapping[str, Mapping[str, FlagValue]],
                  index: Mapping[str, int]) -> list[Problem]:
    _, cyclic = order_units(make_units(params, groups, conditions))
    if not cyclic:
        return []
    member = next(m for m in cyclic[0].members if m in index)
    names = ", ".join(unit.key for unit in cyclic)
    return [Problem(("conditions", index[member]), f"the conditions form a cycle ({names})",
                    "Make the dependencies one-way.")]


def check_recommended(space: Space) -> list[Problem]:
    """The recommended point must be one configuration that `sample` can return.

    An empty `recommended` means the space has no recommended point: nothing to check.
    """
    if not space.recommended:
        return []
    by_flag = params_by_flag(space.params)
    group_of = {m: g for g in space.groups.values() for m in g.params}
    problems: list[Problem] = []
    for flag, value in space.recommended.items():
        path = ("recommended", flag)
        param = by_flag.get(flag)
        if param is None and flag in space.fixed:
            problems.append(Problem(path, f"flag '{flag}' is fixed", "Fixed flags are always "
                                    "set: leave them out of recommended."))
        elif param is None:
            problems.append(Problem(path, f"flag '{flag}' is not set by any param of this space",
                                    did_you_mean(flag, by_flag, "flags of the params")))
        else:
            group = group_of.get(param.name)
            group_values = _member_values(group, param.name) if group else None
            problems.extend(check_value_in(path, param, value, group_values))
    return problems or _check_recommended_groups(space) or _check_recommended_active(space)


def _check_recommended_groups(space: Space) -> list[Problem]:
    problems = []
    for name, group in space.groups.items():
        flags = [space.params[m].flag for m in group.params]
        given = [flag for flag in flags if flag in space.recommended]
        if given and len(given) < len(flags):
            missing = ", ".join(flag for flag in flags if flag not in given)
            problems.append(Problem(("recommended", given[0]), f"recommended sets only part of "
                                    f"group '{name}' (not {missing})",
                                    _GROUP_HINT + "recommend all its members or none."))
        elif given and group.choice_of({m: space.recommended[space.params[m].flag]
                                        for m in group.params}) is None:
            problems.append(Problem(("recommended", given[0]), f"recommended mixes the values "
                                    f"of group '{name}' and its variants",
                                    _GROUP_HINT + "recommend its values, or one variant's."))
    return problems


def _check_recommended_active(space: Space) -> list[Problem]:
    values = {name: space.recommended.get(p.flag) for name, p in space.params.items()}
    problems = []
    for unit in space.units:
        given = [m for m in unit.members if values[m] is not None]
        if not unit.is_active(values) and given:
            when = ", ".join(f"{k} = {v!r}" for k, v in unit.when.items())
            problems.append(Problem(("recommended", space.params[given[0]].flag),
                                    f"'{given[0]}' is sampled only when {when}",
                                    "Drop it from recommended, or recommend that condition too."))
        elif unit.is_active(values) and not given and unit.group is None \
                and not space.params[unit.key].allow_unset:
            problems.append(Problem(("recommended",), f"recommended leaves out param "
                                    f"'{unit.key}', which cannot be unset",
                                    "Give it a value in recommended, or set allow_unset: true."))
    return problems
