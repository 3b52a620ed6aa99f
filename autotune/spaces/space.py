"""A validated search space: how big it is, how to sample it, its recommended point."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.ground.records import FlagValue
from autotune.spaces.params import Param, same_value

if TYPE_CHECKING:
    import optuna

#: Optuna name of a group's switch: `group:<name>`.
GROUP_PREFIX = "group:"
#: A long param's neighbours: this many candidates on each side of its value
#: (`Space.neighbours`).
NEAR = 2

Values = dict[str, FlagValue | None]
#: One choice of a group's switch, as Optuna holds it: False (off: every member
#: unset), True (on: the group's `values`), or the name of one of its variants.
GroupChoice = bool | str


@dataclass(frozen=True)
class Group:
    """Params switched as one: left unset together (off), each set to its value in
    `values` (on), or each set to its value in one of the named `variants`.

    A group without variants is the boolean switch it always was (Optuna choices
    `[False, True]`); each variant adds its name as one more choice.
    """

    name: str
    params: tuple[str, ...]
    values: Mapping[str, FlagValue]
    description: str = ""
    variants: Mapping[str, Mapping[str, FlagValue]] = field(default_factory=dict)

    def choices(self) -> list[GroupChoice]:
        """The Optuna choices of the switch: False (off), True (on), then each variant."""
        return [False, True, *self.variants]

    def values_of(self, choice: GroupChoice) -> Values:
        """Member -> its value under `choice` (None: unset).

        Raises:
            KeyError: `choice` is neither a bool nor the name of a variant.
        """
        if isinstance(choice, bool):
            chosen: Mapping[str, FlagValue | None] = self.values if choice else {}
        else:
            chosen = self.variants[choice]
        return {member: chosen.get(member) for member in self.params}

    def choice_of(self, values: Mapping[str, FlagValue | None]) -> GroupChoice | None:
        """The choice that sets the members to `values` (a missing member is unset),
        or None when no choice does."""
        for choice in self.choices():
            wanted = self.values_of(choice)
            if all(same_value(values.get(m), wanted[m]) for m in self.params):
                return choice
        return None


@dataclass(frozen=True)
class Unit:
    """What one Optuna suggestion decides: a lone param, or a group's switch."""

    key: str
    members: tuple[str, ...]
    when: Mapping[str, FlagValue]
    group: Group | None = None

    def is_active(self, values: Values) -> bool:
        """Whether every param of the condition has its required value in `values`."""
        return all(
            values.get(name) is not None and same_value(values[name], wanted)
            for name, wanted in self.when.items()
        )


def make_units(
    params: Mapping[str, Param], groups: Mapping[str, Group],
    conditions: Mapping[str, Mapping[str, FlagValue]],
) -> list[Unit]:
    """One unit per group and per param outside every group, in file order."""
    grouped = {member: g for g in groups.values() for member in g.params}
    units: list[Unit] = []
    for name in params:
        group = grouped.get(name)
        if group is None:
            units.append(Unit(name, (name,), conditions.get(name, {})))
        elif name == group.params[0]:
            units.append(Unit(GROUP_PREFIX + group.name, group.params,
                              conditions.get(name, {}), group))
    return units


def order_units(units: Sequence[Unit]) -> tuple[list[Unit], list[Unit]]:
    """Sort units so each comes after the units its condition reads.

    Returns:
        The sorted units, and the units left over because their conditions
        form a cycle (empty when there is none).
    """
    owner = {member: unit.key for unit in units for member in unit.members}
    deps = {u.key: {owner[name] for name in u.when if name in owner} for u in units}
    done: set[str] = set()
    ordered: list[Unit] = []
    progress = True
    while progress:
        ready = [u for u in units if u.key not in done and deps[u.key] <= done]
        ordered.extend(ready)
        done.update(u.key for u in ready)
        progress = bool(ready)
    return ordered, [u for u in units if u.key not in done]


@dataclass(frozen=True)
class Space:
    """A validated search space (build it with `load_space`).

    Attributes:
        name, description, backend: from the file.
        params: param name -> Param, in file order.
        groups: group name -> Group.
        conditions: param name -> {other param: value} that must hold for it to be sampled.
        fixed: flag -> value set in every configuration.
        recommended: flag -> value, the documented hand-tuned configuration.
        sources: (document, section) pairs the values come from.
        path: the file it was read from, if any.
    """

    name: str
    description: str
    backend: str
    params: Mapping[str, Param]
    groups: Mapping[str, Group] = field(default_factory=dict)
    conditions: Mapping[str, Mapping[str, FlagValue]] = field(default_factory=dict)
    fixed: Mapping[str, FlagValue] = field(default_factory=dict)
    recommended: Mapping[str, FlagValue] = field(default_factory=dict)
    sources: tuple[tuple[str, str], ...] = ()
    path: Path | None = None

    @functools.cached_property
    def units(self) -> list[Unit]:
        """The suggestions a trial makes, in an order that respects the conditions."""
        ordered, cyclic = order_units(make_units(self.params, self.groups, self.conditions))
        if cyclic:
            raise ValueError(f"conditions form a cycle among {[u.key for u in cyclic]}")
        return ordered

    def flags(self) -> set[str]:
        """Every flag a configuration of this space may set (params and fixed)."""
        return {p.flag for p in self.params.values()} | set(self.fixed)

    def flag_values(self, most: int = 8) -> dict[str, list[FlagValue]]:
        """Flag -> some of the values a configuration may give it: a param's candidates
        (only its range's ends when there are more than `most`), a fixed flag's value."""
        found: dict[str, list[FlagValue]] = {}
        for param in self.params.values():
            values = param.values()
            if values is None or len(values) > most:
                ends = (param.low, param.high) if values is None else (values[0], values[-1])
                values = tuple(v for v in ends if v is not None)
            found[param.flag] = list(values)
        for flag, value in self.fixed.items():
            found.setdefault(flag, []).append(value)
        return found

    def sample(self, trial: optuna.trial.BaseTrial) -> dict[str, FlagValue]:
        """Draw one configuration: flag -> value, unset params left out, fixed merged in.

        Args:
            trial: an Optuna trial; lone params are suggested under their own
                names, groups as the categorical `group:<name>` (False, True and
                the names of its variants, `Group.choices`), and a conditional
                param only when its condition holds.
        """
        values: Values = {}
        for unit in self.units:
            if not unit.is_active(values):
                continue
            if unit.group is None:
                values[unit.key] = self.params[unit.key].suggest(trial)
            else:
                choice = trial.suggest_categorical(unit.key, unit.group.choices())
                assert isinstance(choice, bool | str)  # one of the choices offered
                values.update(unit.group.values_of(choice))
        return self._config(values)

    def _config(self, values: Values) -> dict[str, FlagValue]:
        config = {self.params[name].flag: v for name, v in values.items() if v is not None}
        config.update(self.fixed)
        return config

    def recommended_config(self) -> dict[str, FlagValue] | None:
        """The recommended configuration with the fixed flags, or None when there is none."""
        return {**self.recommended, **self.fixed} if self.recommended else None

    def recommended_params(self) -> dict[str, Any] | None:
        """The Optuna params that make `sample` return `recommended_config()`.

        Returns:
            A dict for `study.enqueue_trial(params)`, or None when the space has
            no recommended configuration.
        """
        if not self.recommended:
            return None
        return self.params_for(self.recommended)

    def params_for(self, config: Mapping[str, FlagValue],
                   default_of: Callable[[str], FlagValue | None] = lambda flag: None
                   ) -> dict[str, Any] | None:
        """The Optuna params that make `sample` set this space's flags as `config` does.

        A flag of the space that `config` leaves out is unset where its param may
        be, and otherwise at `default_of(flag)` (XLA's default) where the param
        takes that value. None when `config` gives a value the space cannot take,
        or sets a group's members in a way none of its choices does. Flags of
        `config` outside the space are ignored: the caller compares what
        `sample` gives with what it wanted.
        """
        grouped = {m for unit in self.units if unit.group for m in unit.group.params}
        values: dict[str, FlagValue | None] = {}
        for name, p in self.params.items():
            value = config.get(p.flag)
            if value is None and name not in grouped and not p.allow_unset:
                default = default_of(p.flag)
                value = default if default is not None and p.contains(default) else None
            elif value is not None and name not in grouped and not p.contains(value):
                return None
            values[name] = value
        params: dict[str, Any] = {}
        for unit in self.units:
            if not unit.is_active(values):
                continue
            if unit.group is None:
                params[unit.key] = self.params[unit.key].to_optuna(values[unit.key])
            elif (choice := unit.group.choice_of(values)) is not None:
                params[unit.key] = choice
            else:
                return None
        return params

    def _recommended_values(self) -> Values:
        return {name: self.recommended.get(p.flag) for name, p in self.params.items()}

    def grid(self) -> list[dict[str, Any]]:
        """Every distinct configuration, as Optuna params for `study.enqueue_trial`.

        In the order of the units (file order); inactive units are left out,
        so no two entries give the same configuration. It builds all `size()`
        points in memory: call it only when `size()` is not None (a continuous
        float range has no grid) and small (see `autotune.study.samplers.GRID_LIMIT`).

        Raises:
            ValueError: a param is a continuous float range.
        """
        return list(_walk(self.units, self.params, {}, {}))

    def neighbours(self, params: Mapping[str, Any], near: int = NEAR) -> list[dict[str, Any]]:
        """The configurations one decision away from `params` (Optuna params, as `grid`
        gives them), without `params` itself and each once.

        One decision is one unit's choice (a lone param or a group's switch): every other
        candidate of it, or for a param of more than `2 * near` candidates the `near` on
        each side of its value. Units the change makes active take each of their choices
        (fast math on brings each of its guarantees' settings); units it makes inactive go.
        A continuous range has no neighbours of its own.
        """
        out: dict[str, dict[str, Any]] = {repr(sorted(params.items())): dict(params)}
        values = self._values_of(params)
        for unit in self.units:
            if unit.key not in params or not unit.is_active(values):
                continue
            for value in _near_options(unit, self.params, params[unit.key], near):
                changed = {**params, unit.key: value}
                for point in _walk(self.units, self.params, {}, {}, changed):
                    out.setdefault(repr(sorted(point.items())), point)
        out.pop(repr(sorted(params.items())))
        return list(out.values())

    def distributions(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The Optuna distribution of each of `params`' names, as `sample` suggests it (a
        group's switch: categorical over `Group.choices`): what `optuna.trial.create_trial`
        needs to add a trial that was not asked.

        Raises:
            KeyError: a name that is no unit of this space.
        """
        from optuna.distributions import CategoricalDistribution

        groups = {unit.key: unit.group for unit in self.units}
        return {name: (self.params[name].distribution() if (group := groups[name]) is None
                       else CategoricalDistribution(group.choices()))
                for name in params}

    def _values_of(self, params: Mapping[str, Any]) -> Values:
        """Param name -> value (None: unset) that `params` gives, as `sample` reads them."""
        from optuna.trial import FixedTrial

        config = self.sample(FixedTrial(dict(params)))
        return {name: config.get(p.flag) for name, p in self.params.items()}

    def size(self) -> int | None:
        """The number of distinct configurations (`len(grid())`), or None when a float
        range is continuous.

        Counted, never enumerated, so it is quick on a space of billions: units
        that no condition links are independent and their counts multiply;
        within linked units only the choices the conditions tell apart are
        walked, each class of alike choices once, weighted by its size.
        """
        counts = {unit.key: _unit_count(unit, self.params) for unit in self.units}
        known = {key: count for key, count in counts.items() if count is not None}
        if len(known) < len(counts):
            return None
        wanted = _wanted_values(self.units)
        return math.prod(_linked_count(part, self.params, known, wanted)
                         for part in _linked_parts(self.units))


def _wanted_values(units: Sequence[Unit]) -> dict[str, list[FlagValue]]:
    """param name -> every value some unit's condition asks of it."""
    wanted: dict[str, list[FlagValue]] = {}
    for unit in units:
        for name, value in unit.when.items():
            wanted.setdefault(name, []).append(value)
    return wanted


def _linked_parts(units: Sequence[Unit]) -> list[list[Unit]]:
    """The units split into parts that no condition links, each in the units' order."""
    owner = {member: unit.key for unit in units for member in unit.members}
    root = {unit.key: unit.key for unit in units}

    def find(key: str) -> str:
        while root[key] != key:
            key = root[key]
        return key

    for unit in units:
        for name in unit.when:
            if name in owner:
                root[find(owner[name])] = find(unit.key)
    parts: dict[str, list[Unit]] = {}
    for unit in units:
        parts.setdefault(find(unit.key), []).append(unit)
    return list(parts.values())


def _linked_count(part: Sequence[Unit], params: Mapping[str, Param], counts: Mapping[str, int],
                  wanted: Mapping[str, list[FlagValue]]) -> int:
    """The distinct configurations of one linked part (`part` in an order conditions respect)."""
    read = {name for unit in part for name in unit.when}
    controllers = [u for u in part if read.intersection(u.members)]
    others = [u for u in part if not read.intersection(u.members)]
    classes = {u.key: _choice_classes(u, params, wanted) for u in controllers}
    return _count(controllers, others, counts, classes, {})


def _count(controllers: Sequence[Unit], others: Sequence[Unit], counts: Mapping[str, int],
           classes: Mapping[str, list[tuple[Values, int]]], values: Values) -> int:
    """Configurations below `values`: the controllers' classes walked, the others multiplied."""
    if not controllers:
        return math.prod(counts[u.key] or 1 for u in others if u.is_active(values))
    unit, rest = controllers[0], controllers[1:]
    if not unit.is_active(values):
        return _count(rest, others, counts, classes, values)
    return sum(weight * _count(rest, others, counts, classes, {**values, **choice})
               for choice, weight in classes[unit.key])


def _choice_classes(unit: Unit, params: Mapping[str, Param],
                    wanted: Mapping[str, list[FlagValue]]) -> list[tuple[Values, int]]:
    """A unit's choices in classes no condition tells apart: (a representative, class size).

    Each value a condition asks for (and the param has) is a class of its own;
    every other value and "unset" satisfy no condition alike, so they form one
    class, represented by "unset" (None). Each choice of a group is a class of its own.
    """
    if unit.group is not None:
        return [(values, 1) for _, values in _unit_options(unit, params)]
    param = params[unit.key]
    told: list[FlagValue] = []
    for value in wanted.get(param.name, []):
        if param.contains(value) and not any(same_value(value, t) for t in told):
            told.append(value)
    rest = (param.count() or 0) - len(told)
    classes: list[tuple[Values, int]] = [({param.name: v}, 1) for v in told]
    return classes + ([({param.name: None}, rest)] if rest else [])


def _walk(units: Sequence[Unit], params: Mapping[str, Param], values: Values,
          chosen: dict[str, Any], pinned: Mapping[str, Any] | None = None
          ) -> Iterator[dict[str, Any]]:
    """Depth-first over the units' choices, skipping inactive units (see `Space.grid`);
    a unit in `pinned` (Optuna values) takes only its pinned value."""
    if not units:
        yield chosen
        return
    unit, rest = units[0], units[1:]
    if not unit.is_active(values):
        yield from _walk(rest, params, values, chosen, pinned)
        return
    options = _unit_options(unit, params)
    if pinned is not None and unit.key in pinned:
        options = [(v, c) for v, c in options if _same_option(v, pinned[unit.key])] or options
    for value, choice in options:
        yield from _walk(rest, params, {**values, **choice}, {**chosen, unit.key: value}, pinned)


def _same_option(a: Any, b: Any) -> bool:
    """Whether two Optuna values of one unit are the same choice (True is not 1)."""
    return type(a) is type(b) and a == b


def _near_options(unit: Unit, params: Mapping[str, Param], current: Any,
                  near: int) -> list[Any]:
    """The Optuna values of `unit` other than `current`: all of them, or for a param of
    more than `2 * near + 1` candidates the `near` on each side of `current` (and "unset");
    from "unset", the `near` at each end of the range."""
    if unit.group is None and params[unit.key].values() is None:
        return []
    options = [v for v, _ in _unit_options(unit, params)]
    at = next((i for i, v in enumerate(options) if _same_option(v, current)), None)
    if at is None:
        return options
    if unit.group is None and len(options) > 2 * near + 1:
        candidates = params[unit.key].values() or ()
        count = len(candidates)
        keep = ({*range(near), *range(count - near, count)} if at >= count
                else set(range(max(0, at - near), min(count, at + near + 1))))
        options = [v for i, v in enumerate(options) if i in keep or i >= count]
    return [v for v in options if not _same_option(v, current)]


def _unit_count(unit: Unit, params: Mapping[str, Param]) -> int | None:
    return len(unit.group.choices()) if unit.group is not None else params[unit.key].count()


def _unit_options(unit: Unit, params: Mapping[str, Param]) -> list[tuple[Any, Values]]:
    """A unit's choices: (the Optuna value, the param values it gives), on before off."""
    if unit.group is not None:
        group = unit.group
        order: list[GroupChoice] = [True, False, *group.variants]
        return [(choice, group.values_of(choice)) for choice in order]
    param = params[unit.key]
    candidates = param.values()
    if candidates is None:
        raise ValueError(f"param '{param.name}' is a continuous range: it has no grid")
    options = [*candidates, *([None] if param.allow_unset else [])]
    return [(param.to_optuna(v), {param.name: v}) for v in options]
