"""Find, read and validate search space files.

Every problem becomes a `SpaceValidationError` whose message reads
`<file>:<line>: <key.path>: <what is wrong>. <what to do>`.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from autotune.flags.catalog import Catalog, load_catalog
from autotune.ground.errors import AutotuneError, SpaceValidationError, UnknownSpaceError
from autotune.ground.resources import data_dir
from autotune.launch.workloads import list_benchmarks
from autotune.spaces._yaml import (
    LineDict,
    LineList,
    YamlSyntaxError,
    format_path,
    line_of,
    load_with_lines,
)
from autotune.spaces.checks import (
    Problem,
    check_exercised_by,
    check_fixed,
    check_params,
    flag_values,
)
from autotune.spaces.params import Param
from autotune.spaces.relations import check_conditions, check_groups, check_recommended
from autotune.spaces.schema import SCHEMA_VERSION, SpaceFile, allowed_keys
from autotune.spaces.space import Group, Space


def spaces_dir() -> Path:
    """The folder of the built-in search spaces."""
    try:
        return data_dir("search_spaces")
    except FileNotFoundError as exc:
        raise AutotuneError(str(exc)) from exc


def _example_hint() -> str:
    """Where a complete space file is: the built-in gpu-collectives, as installed."""
    try:
        return f"See {spaces_dir() / 'gpu-collectives.yaml'} for a complete example."
    except AutotuneError:
        return "`autotune spaces show gpu-collectives` shows a complete space."


def list_spaces() -> list[str]:
    """Names of the built-in search spaces (the stems of `search_spaces/*.yaml`), sorted."""
    return sorted(path.stem for path in spaces_dir().glob("*.yaml"))


def load_space(name_or_path: str, catalog: Catalog | None = None) -> Space:
    """Load and validate a built-in space by name, or a space file by path.

    Args:
        name_or_path: a name from `list_spaces()`, or a path to a `.yaml` file.
        catalog: the flag catalog to check against (default: the packaged one).

    Raises:
        UnknownSpaceError: no built-in space has that name and no such file exists.
        SpaceValidationError: the file is malformed; the message names file, line and key.
    """
    path = _resolve(name_or_path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SpaceValidationError(f"{path}:1: (top level): the file is not UTF-8 text "
                                   f"({exc.reason}). Save it as UTF-8.") from exc
    except OSError as exc:
        raise UnknownSpaceError(f"cannot read search space file {path}: {exc.strerror}. "
                                "Check the path and its permissions.") from exc
    return load_space_text(text, source=str(path), catalog=catalog, path=path)


def _resolve(name_or_path: str) -> Path:
    known = list_spaces()
    if name_or_path in known:
        return spaces_dir() / f"{name_or_path}.yaml"
    candidate = Path(name_or_path)
    looks_like_path = candidate.suffix in (".yaml", ".yml") or len(candidate.parts) > 1
    if candidate.is_file():
        return candidate
    if looks_like_path:
        raise UnknownSpaceError(f"no search space file '{name_or_path}'. Check the path, or "
                                f"use a built-in space: {', '.join(known)}.")
    close = difflib.get_close_matches(name_or_path, known, n=1)
    guess = f"Did you mean '{close[0]}'? " if close else ""
    raise UnknownSpaceError(
        f"unknown search space '{name_or_path}'. {guess}Known spaces: {', '.join(known)}. "
        "A path to a space .yaml file works too."
    )


def load_space_text(text: str, source: str = "<string>", catalog: Catalog | None = None,
                    path: Path | None = None) -> Space:
    """Validate the YAML text of a search space and build the space.

    Args:
        text: the file's content.
        source: the file name used in error messages.
        catalog: the flag catalog to check against (default: the packaged one).
        path: the file the text came from, kept on the space.

    Raises:
        SpaceValidationError: the text is malformed; the message names source, line and key.
    """
    catalog = catalog if catalog is not None else load_catalog()
    try:
        data = load_with_lines(text)
    except YamlSyntaxError as exc:
        if exc.line is None:  # nothing to point at: the whole document (e.g. its aliases)
            raise SpaceValidationError(f"{source}: (yaml): {exc.message}.") from exc
        raise SpaceValidationError(f"{source}:{exc.line}: (yaml): {exc.message}. Fix the "
                                   "YAML syntax at that line.") from exc
    model = _validate_shape(data, source)
    catalog = catalog.covering(flag_values(model))
    _raise_first(source, data, check_params(model, catalog) + check_fixed(model, catalog))
    _raise_first(source, data, check_exercised_by(model, _benchmark_names))
    _raise_first(source, data, check_groups(model, catalog))
    params = {name: Param.from_spec(name, spec) for name, spec in model.params.items()}
    groups = {name: Group(name, tuple(g.params), dict(g.values), g.description,
                          {v: dict(values) for v, values in g.variants.items()})
              for name, g in model.groups.items()}
    _raise_first(source, data, check_conditions(model, params, groups))
    space = Space(
        name=model.name, description=model.description, backend=model.backend, params=params,
        groups=groups, conditions={c.param: dict(c.when) for c in model.conditions},
        fixed=dict(model.fixed), recommended=dict(model.recommended),
        sources=tuple((s.document, s.section) for s in model.sources), path=path,
    )
    _raise_first(source, data, check_recommended(space))
    return space


@functools.cache
def _benchmark_names() -> list[str]:
    """The built-in benchmarks' names (what a param's `exercised_by` may name), read
    once per process."""
    return [info.name for info in list_benchmarks()]


def _validate_shape(data: Any, source: str) -> SpaceFile:
    if not isinstance(data, LineDict):
        what = "empty" if data is None else f"{_shape_name(data)}, not a mapping"
        raise SpaceValidationError(
            f"{source}:1: (top level): the file is {what}. A search space is a mapping that "
            f"starts with schema_version: {SCHEMA_VERSION}. {_example_hint()}")
    _raise_first(source, data, list(_duplicates(data, ())))
    _raise_first(source, data, _check_version(data))
    try:
        return SpaceFile.model_validate(data)
    except ValidationError as exc:
        _raise_first(source, data, [_from_pydantic(error) for error in exc.errors()])
        raise  # unreachable: _raise_first raised


def _shape_name(data: Any) -> str:
    return "a list" if isinstance(data, LineList) else f"a single {type(data).__name__} value"


def _duplicates(node: Any, path: tuple[Any, ...]) -> Iterator[Problem]:
    if isinstance(node, LineDict):
        for key, _line in node.duplicates:
            yield Problem((*path, key), f"key '{key}' appears twice", "Keep only one of them.")
        for key, value in node.items():
            yield from _duplicates(value, (*path, key))
    elif isinstance(node, LineList):
        for i, item in enumerate(node):
            yield from _duplicates(item, (*path, i))


def _check_version(data: LineDict) -> list[Problem]:
    hint = f"This autotune reads schema_version: {SCHEMA_VERSION}."
    if "schema_version" not in data:
        return [Problem((), "schema_version is missing", f"Add it at the top. {hint}")]
    version = data["schema_version"]
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        return [Problem(("schema_version",), f"schema_version {version!r} is not supported",
                        f"{hint} Convert the file, or use the autotune that wrote it.")]
    return []


def _from_pydantic(error: Any) -> Problem:
    loc = tuple(error["loc"])
    kind = error["type"]
    if kind == "extra_forbidden":
        allowed = allowed_keys(loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        guess = f"Did you mean '{close[0]}'? " if close else ""
        return Problem(loc, f"unknown key '{loc[-1]}'",
                       f"{guess}Allowed keys here: {', '.join(allowed)}.")
    if kind == "missing":
        return Problem(loc, f"required key '{loc[-1]}' is missing", _example_hint(), rank=1)
    if loc and loc[-1] == "[key]":
        return Problem(loc[:-1], f"the key {loc[-2]!r} must be a string", "Quote it.")
    message = str(error["msg"]).removeprefix("Value error, ")
    if kind != "value_error":
        message += f", got {_short(error.get('input'))}"
    return Problem(loc, message, _example_hint())


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _raise_first(source: str, data: Any, problems: Sequence[Problem]) -> None:
    if not problems:
        return
    first = min(problems, key=lambda p: (p.rank, line_of(data, p.path)))
    more = len(problems) - 1
    tail = f" ({more} more problem{'s' if more > 1 else ''} after this one.)" if more else ""
    raise SpaceValidationError(
        f"{source}:{line_of(data, first.path)}: {format_path(first.path)}: "
        f"{first.message}. {first.hint}{tail}"
    )
