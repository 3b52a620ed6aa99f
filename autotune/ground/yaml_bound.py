"""YAML loading with a bound on what its aliases expand to.

An alias (`*name`) repeats an anchored node (`&name`) without copying it, so
a few hundred bytes of nested aliases stand for billions of values (the
"billion laughs"): a 417-byte space file kept `autotune spaces validate`
busy past any patience. `bounded_load` composes the node graph first, counts
the values it expands to (each distinct node once, so the count costs time in
the file's size, not in the expansion) and refuses more than `MAX_VALUES`
before anything is built or walked.
"""

from __future__ import annotations

from typing import Any

import yaml

#: The most values (scalars, sequences and mappings, aliases expanded) one document may
#: stand for: far above any space, catalog or exported configuration autotune reads.
MAX_VALUES = 100_000


class YamlTooLargeError(yaml.YAMLError):
    """The document expands to more than `MAX_VALUES` values, or refers to itself.

    `problem` is the sentence to show (as in PyYAML's marked errors)."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = None


def bounded_load(text: str, loader: type[Any] = yaml.SafeLoader,
                 limit: int = MAX_VALUES) -> Any:
    """`yaml.load(text, Loader=loader)` (a SafeLoader subclass) for one document, refusing a
    document whose aliases expand it past `limit` values or into a cycle.

    Raises:
        YamlTooLargeError: too large when expanded, or recursive.
        yaml.YAMLError: what PyYAML raises for text that is not YAML.
    """
    reader = loader(text)
    try:
        node = reader.get_single_node()
        if node is None:
            return None
        if expanded_size(node, limit) > limit:
            raise YamlTooLargeError(
                f"the YAML stands for more than {limit} values once its aliases (*name) are "
                "expanded: write the values out instead of repeating anchors")
        return reader.construct_document(node)
    finally:
        reader.dispose()


def expanded_size(root: yaml.Node, limit: int) -> int:
    """How many values `root` stands for with every alias expanded, counted up to just past
    `limit` (larger counts stop there); a node that contains itself counts as past it."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = min(limit + 1, 1 + sum(sizes[id(c)] for c in _children(node)))
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            return limit + 1  # recursive: `&a [*a]`
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []
