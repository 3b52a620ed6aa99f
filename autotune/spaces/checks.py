"""Checks of a search space that need the flag catalog or span several sections.

Each check returns `Problem`s (key path, what is wrong, what to do); the loader
turns the first one into a `SpaceValidationError` with file and line.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.flags.catalog import Catalog, FlagSpec, FlagType
from autotune.ground.records import FlagValue
from autotune.spaces.params import MAX_UNSET_RANGE, UNSET, Param, same_value
from autotune.spaces.schema import ParamSpec, SpaceFile

_KEYS_BY_TYPE = {
    "bool": ((), ()),
    "int": (("low", "high"), ("step", "log")),
    "float": (("low", "high"), ("step", "log")),
    "categorical": (("choices",), ()),
    "pow2_bytes": (("min", "max"), ()),
}
_TYPED_KEYS = ("low", "high", "step", "log", "choices", "min", "max")
_PARAM_TYPES_BY_FLAG = {
    FlagType.BOOL: ("bool", "categorical"),
    FlagType.INT: ("int", "pow2_bytes", "categorical"),
    FlagType.FLOAT: ("float", "categorical"),
    FlagType.ENUM: ("categorical",),
    FlagType.STRING: ("categorical",),
    FlagType.LIST: ("categorical",),
}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a space file."""

    path: tuple[Any, ...]
    message: str
    hint: str = ""
    #: Problems of a lower rank are reported first (a missing key is often a
    #: misspelled one, so the unknown key is the better first report).
    rank: int = 0


def did_you_mean(name: object, known: Iterable[str], what: str) -> str:
    """A hint naming the closest known name, or listing the known names."""
    known = sorted(known)
    close = difflib.get_close_matches(str(name), known, n=1, cutoff=0.6)
    if close:
        return f"Did you mean '{close[0]}'?"
    return f"Known {what}: {', '.join(known)}." if known else f"There are no {what}."


def check_flag(path: tuple[Any, ...], name: str, catalog: Catalog,
               backend: str) -> Iterator[Problem]:
    """A flag must be known (in the catalog, or a stand-in for an open flag that
    `Catalog.covering` added) and act on the space's backend."""
    if name not in catalog:
        hint = did_you_mean(name, catalog.names(), "flags")
        yield Problem(path, f"flag '{name}' is neither in the flag catalog nor spelled like "
                      "an XLA flag", f"{hint} A flag outside the catalog must be an XLA flag: "
                      "xla_ then lower-case letters, digits and underscores.")
        return
    flag_backend = catalog.get(name).backend
    if "any" not in (backend, flag_backend) and flag_backend != backend:
        yield Problem(path, f"flag '{name}' acts on {flag_backend}, but this space is for "
                      f"{backend}", "Remove the flag, or set the space's backend to any.")


def flag_values(model: SpaceFile) -> dict[str, list[FlagValue]]:
    """Flag -> the values the file gives it (a param's range ends as its type, its choices,
    fixed values, group values), for typing flags outside the catalog
    (`Catalog.covering`)."""
    values: dict[str, list[FlagValue]] = {}
    for name, spec in model.params.items():
        values.setdefault(spec.flag or name, []).extend(_param_values(spec))
    for group in model.groups.values():
        for key, value in group.values.items():
            if key in model.params:
                values.setdefault(model.params[key].flag or key, []).append(value)
    for flag, value in model.fixed.items():
        values.setdefault(flag, []).append(value)
    return values


def _param_values(spec: ParamSpec) -> list[FlagValue]:
    """Values of a param's type: true and false, its range's ends, its choices."""
    if spec.type == "bool":
        return [True, False]
    ends = [spec.min, spec.max] if spec.type == "pow2_bytes" else [spec.low, spec.high]
    if spec.type == "float":
        return [float(v) for v in ends if v is not None]
    if spec.type in ("int", "pow2_bytes"):
        return [int(v) for v in ends if v is not None]
    return list(spec.choices or [])


def check_params(model: SpaceFile, catalog: Catalog) -> list[Problem]:
    """Check every param on its own, then that no two params set the same flag."""
    problems: list[Problem] = []
    owners: dict[str, str] = {}
    for name, spec in model.params.items():
        problems.extend(_check_param(name, spec, catalog, model.backend))
        flag = spec.flag or name
        if flag in owners:
            problems.append(Problem(_flag_path(name, spec), f"flag '{flag}' is already set by "
                                    f"param '{owners[flag]}'", "Give each flag one param."))
        owners.setdefault(flag, name)
    if not model.params:
        problems.append(Problem(("params",), "the space has no params", "Add at least one."))
    return problems


def _flag_path(name: str, spec: ParamSpec) -> tuple[Any, ...]:
    return ("params", name, "flag") if spec.flag else ("params", name)


def _check_param(name: str, spec: ParamSpec, catalog: Catalog, backend: str) -> list[Problem]:
    """The problems of the first failing stage: flag, keys, range, fit to the flag, unset."""
    base = ("params", name)
    flag = spec.flag or name
    problems = list(check_flag(_flag_path(name, spec), flag, catalog, backend))
    for check in (_check_keys, _check_range):
        problems = problems or list(check(base, spec))
    problems = problems or list(_check_fits_flag(base, spec, catalog.get(flag)))
    return problems or list(_check_unset(base, Param.from_spec(name, spec)))


def _check_keys(base: tuple[Any, ...], spec: ParamSpec) -> Iterator[Problem]:
    required, optional = _KEYS_BY_TYPE[spec.type]
    for key in _TYPED_KEYS:
        if key in spec.model_fields_set and key not in required + optional:
            takes = ", ".join(required + optional) or "no range or choices"
            yield Problem((*base, key), f"'{key}' does not apply to a {spec.type} param",
                          f"Remove it; a {spec.type} param takes {takes}.")
    for key in required:
        if getattr(spec, key) is None:
            yield Problem(base, f"a {spec.type} param needs '{key}'",
                          f"Add {key}: a {spec.type} param takes {', '.join(required)}.")


def _check_range(base: tuple[Any, ...], spec: ParamSpec) -> Iterator[Problem]:
    if spec.type == "int":
        for key in ("low", "high", "step"):
            value = getattr(spec, key)
            if value is not None and not isinstance(value, int):
                yield Problem((*base, key), f"{key} must be an integer for an int param, "
                              f"got {value!r}", "Write a whole number, or make it a float param.")
    if spec.type == "categorical":
        yield from _check_choices(base, spec.choices or [])
    low, high = (spec.min, spec.max) if spec.type == "pow2_bytes" else (spec.low, spec.high)
    names = ("min", "max") if spec.type == "pow2_bytes" else ("low", "high")
    if low is not None and high is not None and low > high:
        yield Problem((*base, names[0]), f"{names[0]} ({low}) is greater than {names[1]} "
                      f"({high})", f"Swap {names[0]} and {names[1]}.")
    yield from _check_step_log(base, spec)


def _check_step_log(base: tuple[Any, ...], spec: ParamSpec) -> Iterator[Problem]:
    if spec.step is not None and spec.step <= 0:
        yield Problem((*base, "step"), f"step must be positive, got {spec.step}",
                      "Use a step greater than 0, or leave it out.")
    if spec.log and spec.low is not None and spec.low <= 0:
        yield Problem((*base, "low"), f"a log-scale range needs low > 0, got {spec.low}",
                      "Raise low above 0, or drop log: true.")
    if spec.log and spec.step is not None and not (spec.type == "int" and spec.step == 1):
        yield Problem((*base, "log"), "log and step cannot be combined",
                      "Optuna samples a log-scale range without a step: drop one of them.")


def _check_choices(base: tuple[Any, ...], choices: list[Any]) -> Iterator[Problem]:
    if not choices:
        yield Problem((*base, "choices"), "choices is empty", "List at least one value.")
    for i, choice in enumerate(choices):
        if isinstance(choice, str) and choice == UNSET:
            yield Problem((*base, "choices", i), f"'{UNSET}' is reserved for XLA's default",
                          "Remove it and set allow_unset: true instead.")
        elif any(choice == earlier for earlier in choices[:i]):
            yield Problem((*base, "choices", i), f"choice {choice!r} is listed twice",
                          "List each value once (Optuna treats 1, 1.0 and true as equal).")


def _check_fits_flag(base: tuple[Any, ...], spec: ParamSpec, flag: FlagSpec) -> Iterator[Problem]:
    if spec.channel is not None and spec.channel != flag.channel:
        yield Problem((*base, "channel"), f"flag '{flag.name}' is delivered through "
                      f"{flag.channel}, not {spec.channel}",
                      f"Write channel: {flag.channel}, or leave channel out.")
    allowed = _PARAM_TYPES_BY_FLAG[flag.type]
    if spec.type not in allowed:
        yield Problem((*base, "type"), f"a {spec.type} param cannot set flag '{flag.name}' of "
                      f"type {flag.type}", f"Use type {' or '.join(allowed)}.")
        return
    required, _ = _KEYS_BY_TYPE[spec.type]
    for key in required:
        value = getattr(spec, key)
        items = list(enumerate(value)) if isinstance(value, list) else [(None, value)]
        for index, item in items:
            problem = flag.check_value(item)
            if problem:
                path = (*base, key) if index is None else (*base, key, index)
                yield Problem(path, problem, allowed_hint(flag))


def allowed_hint(flag: FlagSpec) -> str:
    """What `flag` takes, for a hint: its names, or its type and bounds."""
    if flag.values:
        return f"Allowed: {', '.join(flag.values)}."
    bounds = [f"{word} {v}" for word, v in (("at least", flag.min), ("at most", flag.max))
              if v is not None]
    return f"{flag.name} takes a {flag.type}" + (f", {' and '.join(bounds)}." if bounds else ".")


def _check_unset(base: tuple[Any, ...], param: Param) -> Iterator[Problem]:
    if not param.allow_unset or param.choices is not None:
        return
    count = param.count()
    if count is None:
        yield Problem((*base, "allow_unset"), "allow_unset needs a finite set of values",
                      "Give the float range a step, or use a categorical param.")
    elif count > MAX_UNSET_RANGE:
        yield Problem((*base, "allow_unset"), f"allow_unset on a range of {count - 1} values "
                      "is not supported (it is sampled as one categorical)",
                      f"Narrow the range or add a step (at most {MAX_UNSET_RANGE} values).")


def check_exercised_by(model: SpaceFile, benchmarks: Callable[[], Iterable[str]]) -> list[Problem]:
    """Each param's `exercised_by` names built-in benchmarks, each once. `benchmarks`
    gives their names; it is called only when some param has the key."""
    problems: list[Problem] = []
    known: list[str] | None = None
    for name, spec in model.params.items():
        for i, bench in enumerate(spec.exercised_by or ()):
            known = sorted(benchmarks()) if known is None else known
            path = ("params", name, "exercised_by", i)
            if bench not in known:
                problems.append(Problem(path, f"'{bench}' is not a built-in benchmark",
                                        did_you_mean(bench, known, "benchmarks")))
            elif bench in (spec.exercised_by or [])[:i]:
                problems.append(Problem(path, f"benchmark '{bench}' is listed twice",
                                        "List each benchmark once."))
    return problems


def check_fixed(model: SpaceFile, catalog: Catalog) -> list[Problem]:
    """Fixed flags must be known, take a valid value and not be tuned as well."""
    tuned = {spec.flag or name: name for name, spec in model.params.items()}
    problems: list[Problem] = []
    for flag, value in model.fixed.items():
        path = ("fixed", flag)
        found = list(check_flag(path, flag, catalog, model.backend))
        if not found and (problem := catalog.get(flag).check_value(value)):
            found.append(Problem(path, problem, allowed_hint(catalog.get(flag))))
        if flag in tuned:
            found.append(Problem(path, f"flag '{flag}' is both fixed and tuned by param "
                                 f"'{tuned[flag]}'", "Remove it from fixed or from params."))
        problems.extend(found)
    return problems


def params_by_flag(params: Mapping[str, Param]) -> dict[str, Param]:
    """Param of each flag."""
    return {p.flag: p for p in params.values()}


def check_value_in(path: tuple[Any, ...], param: Param, value: object,
                   group_values: Sequence[FlagValue] | None = None) -> Iterator[Problem]:
    """`value` must be a candidate of `param` (or one of its group's values, for a group
    member: `group_values` lists its value when on, then in each variant)."""
    if group_values is not None:
        if not any(same_value(value, v) for v in group_values):
            one = len(group_values) == 1
            sets = repr(group_values[0]) if one else "one of " + ", ".join(map(repr, group_values))
            yield Problem(path, f"{value!r} is never a value of '{param.name}': its group sets "
                          f"it to {sets}",
                          "Use the group's value." if one else "Use one of the group's values.")
    elif not param.contains(value):
        yield Problem(path, f"{value!r} is not a candidate of param '{param.name}' "
                      f"({param.describe()})", "Use one of the candidates, or widen the param.")
