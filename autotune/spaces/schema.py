"""The shape of a search space file (`schema_version: 1`), as pydantic models.

These models check keys and types only; the checks that need the flag
catalog or span several sections live in `checks.py`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, PlainValidator, field_validator

from autotune.ground.records import FlagValue

SCHEMA_VERSION = 1
ParamType = Literal["bool", "int", "float", "categorical", "pow2_bytes"]
ChannelName = Literal["xla_flags", "libtpu", "env"]
SpaceBackend = Literal["gpu", "tpu", "cpu", "any"]

_UNITS = {
    "": 1, "B": 1,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMGT]i?B|B)?\s*$")


def parse_size(value: object) -> int:
    """Read a byte size: an integer or a string like `16MiB`, `8GiB`, `512KB`.

    Binary units (KiB, MiB, GiB, TiB) are powers of 1024; KB, MB, GB and TB are
    powers of 1000.

    Raises:
        ValueError: the value is not a non-negative size.
    """
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    match = _SIZE.match(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(
            f"{value!r} is not a size: write a number of bytes or a size such as 16MiB or 8GiB"
        )
    return int(match.group(1)) * _UNITS[match.group(2) or ""]


def _pow2_size(value: object) -> int:
    size = parse_size(value)
    if size <= 0 or size & (size - 1):
        hint = " (MB is 10**6 bytes: did you mean MiB?)" if isinstance(value, str) else ""
        raise ValueError(f"{value!r} = {size} bytes is not a power of two{hint}")
    return size


def _scalar(value: object) -> FlagValue:
    if isinstance(value, bool | int | float | str):
        return value
    raise ValueError(f"expected a boolean, number or string, got {_kind(value)}")


def _number(value: object) -> int | float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    raise ValueError(f"expected a number, got {_kind(value)} {value!r}")


def _kind(value: object) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, dict | list):
        return "a mapping" if isinstance(value, dict) else "a list"
    return f"a {type(value).__name__}"


Scalar = Annotated[FlagValue, PlainValidator(_scalar)]
Number = Annotated[int | float, PlainValidator(_number)]
Pow2Size = Annotated[int, PlainValidator(_pow2_size)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class SourceSpec(_Model):
    """Where values come from: a reference document and its section."""

    document: str
    section: str


class ParamSpec(_Model):
    """One tunable parameter. Which keys apply depends on `type` (checked in checks.py).

    `channel` is optional documentation; the catalog decides how a flag is
    delivered, and a `channel` that disagrees with it is an error.
    `exercised_by` names the built-in benchmarks whose compiled program has what
    the flag acts on (checked in checks.py: each must be a built-in benchmark).
    """

    type: ParamType
    flag: str | None = None
    low: Number | None = None
    high: Number | None = None
    step: Number | None = None
    log: bool = False
    choices: list[Scalar] | None = None
    min: Pow2Size | None = None
    max: Pow2Size | None = None
    allow_unset: bool = False
    channel: ChannelName | None = None
    source: str | None = None
    exercised_by: list[str] | None = None


class GroupSpec(_Model):
    """Params switched as one: off (XLA's defaults), on (each to its value in `values`),
    or to one of the named `variants` (each a value for every member, e.g. kAuto
    where `values` says kEnabled)."""

    params: list[str]
    values: dict[str, Scalar]
    variants: dict[str, dict[str, Scalar]] = {}
    description: str = ""

    @field_validator("variants", mode="before")
    @classmethod
    def _empty_when_null(cls, value: Any) -> Any:
        return {} if value is None else value


class ConditionSpec(_Model):
    """`param` is sampled only when every param in `when` has the given value."""

    param: str
    when: dict[str, Scalar]


class SpaceFile(_Model):
    """A whole search space file."""

    schema_version: Literal[1]
    name: str
    description: str = ""
    backend: SpaceBackend
    sources: list[SourceSpec] = []
    params: dict[str, ParamSpec]
    groups: dict[str, GroupSpec] = {}
    conditions: list[ConditionSpec] = []
    fixed: dict[str, Scalar] = {}
    recommended: dict[str, Scalar] = {}

    @field_validator("sources", "groups", "conditions", "fixed", "recommended", mode="before")
    @classmethod
    def _empty_when_null(cls, value: Any, info: Any) -> Any:
        if value is not None:
            return value
        return [] if info.field_name in ("sources", "conditions") else {}


def allowed_keys(path: tuple[Any, ...]) -> list[str]:
    """The keys a mapping at `path` may hold (for "unknown key" hints)."""
    model: type[BaseModel] = SpaceFile
    nested: dict[str, type[BaseModel]] = {
        "sources": SourceSpec, "params": ParamSpec, "groups": GroupSpec,
        "conditions": ConditionSpec,
    }
    if path and path[0] in nested and len(path) >= 2:
        model = nested[path[0]]
    return list(model.model_fields)
