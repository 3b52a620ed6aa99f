"""YAML loading that remembers the line of every key and list item.

`load_with_lines` returns plain data whose mappings are `LineDict` and whose
sequences are `LineList`; `line_of(data, path)` then finds the line of a key
path, so an error can say `file.yaml:12: params.foo.low: ...`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import yaml

from autotune.ground.yaml_bound import bounded_load

PathElement = str | int | Any
KeyPath = tuple[PathElement, ...]


class LineDict(dict[Any, Any]):
    """A dict that knows the 1-based line of itself, of each key, and repeated keys."""

    line: int = 1

    def __init__(self) -> None:
        super().__init__()
        self.key_lines: dict[Any, int] = {}
        self.duplicates: list[tuple[Any, int]] = []


class LineList(list[Any]):
    """A list that knows the 1-based line of itself and of each item."""

    line: int = 1

    def __init__(self) -> None:
        super().__init__()
        self.item_lines: list[int] = []


class YamlSyntaxError(Exception):
    """The text is not YAML; `line` is 1-based (None when unknown)."""

    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


class _LineLoader(yaml.SafeLoader):
    """SafeLoader whose mappings and sequences record their lines."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    data = LineDict()
    data.line = node.start_mark.line + 1
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, Hashable):
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value, not a list or mapping",
                key_node.start_mark,
            )
        line = key_node.start_mark.line + 1
        if key in data:
            data.duplicates.append((key, line))
        data[key] = loader.construct_object(value_node, deep=True)
        data.key_lines[key] = line
    return data


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode) -> LineList:
    data = LineList()
    data.line = node.start_mark.line + 1
    for item in node.value:
        data.append(loader.construct_object(item, deep=True))
        data.item_lines.append(item.start_mark.line + 1)
    return data


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def load_with_lines(text: str) -> Any:
    """Parse YAML text into data whose containers remember their lines.

    Raises:
        YamlSyntaxError: the text is not valid YAML (or uses a tag or value that
            the safe loader refuses, or its aliases expand it past
            `ground.yaml_bound.MAX_VALUES`); carries the line when YAML reports one.
    """
    try:
        return bounded_load(text, _LineLoader)  # safe: _LineLoader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise YamlSyntaxError(_describe(exc), line) from exc
    except yaml.YAMLError as exc:
        position = getattr(exc, "position", None)
        line = text.count("\n", 0, position) + 1 if isinstance(position, int) else None
        raise YamlSyntaxError(str(exc).splitlines()[0], line) from exc
    except (ValueError, OverflowError) as exc:  # e.g. the timestamp 2001-02-30
        raise YamlSyntaxError(f"a value cannot be read: {exc}", None) from exc
    except RecursionError as exc:
        raise YamlSyntaxError("the YAML is nested too deeply", None) from exc


def _describe(exc: yaml.MarkedYAMLError) -> str:
    parts = [part for part in (exc.context, exc.problem) if part]
    return ", ".join(parts) or "invalid YAML"


def line_of(data: Any, path: Sequence[PathElement]) -> int:
    """Return the line of the deepest element of `path` found in `data`.

    Path elements that are not found (a missing key, or a label that is not
    a key) are skipped, so a missing key reports the line of its parent.
    """
    line = data.line if isinstance(data, LineDict | LineList) else 1
    node = data
    for element in path:
        if isinstance(node, LineDict) and _has_key(node, element):
            line, node = node.key_lines[element], node[element]
        elif isinstance(node, LineList) and isinstance(element, int) and 0 <= element < len(node):
            line, node = node.item_lines[element], node[element]
    return line


def _has_key(node: LineDict, key: Any) -> bool:
    try:
        return key in node
    except TypeError:
        return False


def format_path(path: Sequence[PathElement]) -> str:
    """Write a key path as `params.foo.choices[2]` (`(top level)` when empty)."""
    text = ""
    for element in path:
        if isinstance(element, int) and not isinstance(element, bool):
            text += f"[{element}]"
        else:
            text += f".{element}" if text else str(element)
    return text or "(top level)"
