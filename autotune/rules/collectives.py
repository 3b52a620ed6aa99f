"""The collectives of a compiled program, read from its optimised HLO text.

`collective_profile(text)` is what the trial child reports as `collectives`
(`compiled.as_text()` of the candidate) and what `autotune.spaces.fit` fits a
search space to. Per kind (`KINDS`): how many instructions, the bytes their
results hold, how many of them run inside a while loop and how large the
smallest array and the largest instruction are. Standard library only: the
child imports it before jax, and the rule is tested in-process on HLO text.

An asynchronous collective (`all-gather-start` ... `all-gather-done`) counts
once, with the shape of its `-done` (the result); one wrapped in an
`async-start` counts by the synchronous instruction in its wrapped
computation. Combined collectives hold a tuple: its arrays add up, and each
is a candidate for the smallest array.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from autotune.ground.records import CollectiveStats

#: The collective kinds, as HLO names their instructions.
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")

#: The JSON keys of one kind's figures (`CollectiveStats`' fields).
STATS_KEYS = ("count", "bytes", "loop_count", "loop_bytes", "smallest_bytes", "largest_bytes")

_COMMENT = re.compile(r"/\*.*?\*/")
_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?[^\s=]+\s*=\s*(?P<shape>.*?)\s(?P<op>[a-z][a-z0-9\-]*)\((?P<rest>.*)$")
_HEADER = re.compile(r"^(?:ENTRY\s+)?%?(?P<name>[^\s(]+)")
_CALLS = re.compile(r"\b(?P<attr>calls|to_apply|body|condition|true_computation|"
                    r"false_computation|branch_computations)=(?P<names>\{[^}]*\}|%?[\w.\-]+)")
_ARRAY = re.compile(r"\b(?P<dtype>[a-z][a-z0-9]*)\[(?P<dims>[^\]]*)\]")
_BITS = re.compile(r"^(?:bf|f|s|u|c)(?P<bits>\d+)")


def dtype_bits(dtype: str) -> int:
    """Bits of one element of an HLO element type (`f32` 32, `bf16` 16, `pred` 8,
    `f8e4m3fn` 8, `s4` 4, `c64` 64); 0 for `token`, `opaque` and unknown names."""
    if dtype == "pred":
        return 8
    match = _BITS.match(dtype)
    return int(match.group("bits")) if match else 0


def array_sizes(shape: str) -> list[int]:
    """The bytes of each array of an HLO shape: one for `f32[1024,512]{1,0}`, one per
    element of a tuple `(f32[8]{0}, bf16[4,4]{1,0})`; a dynamic dimension (`<=10`)
    counts at its bound. Layouts and `/*index=N*/` comments are ignored."""
    sizes = []
    for match in _ARRAY.finditer(_COMMENT.sub("", shape)):
        elements = 1
        for dim in filter(None, (d.strip().lstrip("<=") for d in match.group("dims").split(","))):
            elements *= int(dim) if dim.isdigit() else 0
        sizes.append((elements * dtype_bits(match.group("dtype")) + 7) // 8)
    return sizes


@dataclass
class _Seen:
    """One collective instruction: its kind, computation and result arrays."""

    kind: str
    computation: str
    sizes: list[int] = field(default_factory=list)


def _kind_of(op: str) -> str | None:
    """The kind of a sync collective or of an async one's `-done`; None otherwise
    (`-start` is counted by its `-done`)."""
    base = op.removesuffix("-done")
    return base if base in KINDS else None


def _called(rest: str) -> tuple[list[str], list[str]]:
    """(computations an instruction calls, those it runs as a loop: a while's body and
    condition)."""
    called, looped = [], []
    for match in _CALLS.finditer(rest):
        names = [n.strip().lstrip("%") for n in match.group("names").strip("{}").split(",")]
        called += [n for n in names if n]
        if match.group("attr") in ("body", "condition"):
            looped += [n for n in names if n]
    return called, looped


def _scan(text: str) -> tuple[list[_Seen], dict[str, list[str]], list[str]]:
    """One pass over the text: the collectives, the call graph and the loops' computations."""
    seen: list[_Seen] = []
    calls: dict[str, list[str]] = {}
    loops: list[str] = []
    computation = ""
    for line in text.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith("{"):
            header = _HEADER.match(line)
            computation = header.group("name") if header else ""
            continue
        match = _INSTRUCTION.match(line)
        if match is None:
            continue
        called, looped = _called(match.group("rest"))
        calls.setdefault(computation, []).extend(called)
        if match.group("op") == "while":
            loops += looped
        kind = _kind_of(match.group("op"))
        if kind is not None:
            seen.append(_Seen(kind, computation, array_sizes(match.group("shape"))))
    return seen, calls, loops


def _reachable(roots: Iterable[str], calls: Mapping[str, list[str]]) -> set[str]:
    """The computations `roots` are or call, directly or not."""
    found: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo += calls.get(name, [])
    return found


def collective_profile(text: str) -> dict[str, CollectiveStats]:
    """kind -> its collectives in the optimised HLO `text` (kinds it lacks are left out).

    A collective is inside a loop when its computation is a while loop's body
    or condition, or is called from one (directly or through other calls).
    """
    seen, calls, loops = _scan(text)
    in_loop = _reachable(loops, calls)
    profile: dict[str, CollectiveStats] = {}
    for kind in KINDS:
        mine = [s for s in seen if s.kind == kind]
        if not mine:
            continue
        looped = [s for s in mine if s.computation in in_loop]
        arrays = [size for s in mine for size in s.sizes]
        profile[kind] = CollectiveStats(
            count=len(mine), bytes=sum(arrays), loop_count=len(looped),
            loop_bytes=sum(sum(s.sizes) for s in looped),
            smallest_bytes=min(arrays, default=0),
            largest_bytes=max((sum(s.sizes) for s in mine), default=0))
    return profile


def profile_json(profile: Mapping[str, CollectiveStats]) -> dict[str, dict[str, int]]:
    """The profile as the result document and the database hold it."""
    return {kind: {key: getattr(stats, key) for key in STATS_KEYS}
            for kind, stats in profile.items()}


def profile_from_json(raw: Any) -> dict[str, CollectiveStats] | None:
    """A profile from its JSON (`profile_json`), None for None. Keys it does not know
    are ignored; a missing figure is 0. The shape is checked by `protocol.parse_result`
    before a result gets here."""
    if raw is None:
        return None
    return {kind: CollectiveStats(**{key: int(figures.get(key) or 0) for key in STATS_KEYS})
            for kind, figures in raw.items()}
