"""The flag catalog: every flag autotune knows, its type, documented values and channel.

The catalog is `catalog.yaml` next to this module, read with `importlib.resources`
so it is found both in a source checkout and in an installed wheel. Nothing is
registered by importing a module: `load_catalog()` reads the file once and keeps
the result.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable, Iterator
from enum import StrEnum
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, StrictBool, ValidationError, model_validator

from autotune.errors import AutotuneError, UsageError
from autotune.records import FlagValue

CATALOG_SCHEMA_VERSION = 1
_CATALOG_FILE = "catalog.yaml"


class UnknownFlagError(UsageError):
    """A flag name the catalog does not hold."""


class FlagType(StrEnum):
    """The type of a flag's value, as XLA (or the variable's reader) parses it."""

    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    ENUM = "enum"
    STRING = "string"
    LIST = "list"


class Backend(StrEnum):
    """The backend a flag acts on (`any`: every backend)."""

    GPU = "gpu"
    TPU = "tpu"
    CPU = "cpu"
    ANY = "any"


class Channel(StrEnum):
    """How a flag reaches the process: `XLA_FLAGS`, `LIBTPU_INIT_ARGS` or its own variable."""

    XLA_FLAGS = "xla_flags"
    LIBTPU = "libtpu"
    ENV = "env"


class FlagSpec(BaseModel):
    """One catalog entry.

    Attributes:
        name: the flag name without `--` (or the environment variable's name).
        type: the value type.
        values: allowed names for `enum` and `list` flags.
        default: the value XLA uses when the flag is not given (None: not documented).
        recommended: the documented recommended value (None: none documented).
        backend: the backend the flag acts on.
        channel: how the flag is delivered to the process.
        per_compile: whether `compile(compiler_options={...})` accepts it.
        source: where the flag is documented (document file and section).
        help: one line saying what the flag does.
        min: smallest documented value of an int or float flag, if any.
        max: largest documented value of an int or float flag, if any.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    type: FlagType
    values: tuple[str, ...] | None = None
    default: FlagValue | None = None
    recommended: FlagValue | None = None
    backend: Backend
    channel: Channel
    per_compile: StrictBool
    source: str
    help: str
    min: int | float | None = None
    max: int | float | None = None

    @model_validator(mode="after")
    def _check_consistent(self) -> FlagSpec:
        has_names = self.type in (FlagType.ENUM, FlagType.LIST)
        if has_names and not self.values:
            raise ValueError(f"a {self.type} flag needs its allowed 'values'")
        if self.values is not None and not has_names:
            raise ValueError(f"'values' is only for enum and list flags, not {self.type}")
        for label, value in (("default", self.default), ("recommended", self.recommended)):
            problem = None if value is None else self.check_value(value)
            if problem:
                raise ValueError(f"{label}: {problem}")
        return self

    def check_value(self, value: object) -> str | None:
        """Say what is wrong with `value` for this flag.

        Args:
            value: a candidate value (a bool, int, float or string).

        Returns:
            None when the value fits the flag's type and allowed values, else a
            phrase such as "expects true or false, got 3".
        """
        return _TYPE_CHECKS[self.type](self, value) or self._check_bounds(value)

    def _check_bounds(self, value: object) -> str | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        if self.min is not None and value < self.min:
            return f"{self.name} is at least {self.min}, got {value!r}"
        if self.max is not None and value > self.max:
            return f"{self.name} is at most {self.max}, got {value!r}"
        return None


def _check_bool(spec: FlagSpec, value: object) -> str | None:
    return None if isinstance(value, bool) else f"{spec.name} expects true or false, got {value!r}"


def _check_int(spec: FlagSpec, value: object) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return None
    return f"{spec.name} expects an integer, got {value!r}"


def _check_float(spec: FlagSpec, value: object) -> str | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return None
    return f"{spec.name} expects a number, got {value!r}"


def _check_string(spec: FlagSpec, value: object) -> str | None:
    return None if isinstance(value, str) else f"{spec.name} expects a string, got {value!r}"


def _check_enum(spec: FlagSpec, value: object) -> str | None:
    if isinstance(value, str) and value in (spec.values or ()):
        return None
    return f"{spec.name} expects one of {', '.join(spec.values or ())}, got {value!r}"


def _check_list(spec: FlagSpec, value: object) -> str | None:
    if not isinstance(value, str):
        return f"{spec.name} expects a comma-separated list of names, got {value!r}"
    unknown = [item for item in value.split(",") if item not in (spec.values or ())]
    if value and unknown:
        allowed = ", ".join(spec.values or ())
        return f"{spec.name} allows only {allowed} in its list, got {', '.join(unknown)!s}"
    return None


_TYPE_CHECKS = {
    FlagType.BOOL: _check_bool,
    FlagType.INT: _check_int,
    FlagType.FLOAT: _check_float,
    FlagType.STRING: _check_string,
    FlagType.ENUM: _check_enum,
    FlagType.LIST: _check_list,
}


class Catalog:
    """The flags autotune knows, looked up by name.

    Args:
        flags: the entries; names must be unique.

    Raises:
        ValueError: two entries share a name.
    """

    def __init__(self, flags: Iterable[FlagSpec]) -> None:
        self._flags: dict[str, FlagSpec] = {}
        for spec in flags:
            if spec.name in self._flags:
                raise ValueError(f"flag {spec.name!r} is in the catalog twice")
            self._flags[spec.name] = spec

    def get(self, name: str) -> FlagSpec:
        """Return the entry of flag `name` (without the leading `--`).

        Raises:
            UnknownFlagError: the catalog does not hold the flag; the message
                suggests the closest known name.
        """
        try:
            return self._flags[name]
        except KeyError:
            raise UnknownFlagError(_unknown_flag_message(name, self.closest(name))) from None

    def names(self) -> list[str]:
        """All flag names, sorted."""
        return sorted(self._flags)

    def closest(self, name: str) -> str | None:
        """The known flag name nearest to `name`, or None when nothing is close."""
        matches = difflib.get_close_matches(name.lstrip("-"), self._flags, n=1, cutoff=0.6)
        return matches[0] if matches else None

    def __contains__(self, name: object) -> bool:
        return name in self._flags

    def __iter__(self) -> Iterator[FlagSpec]:
        return iter(self._flags.values())

    def __len__(self) -> int:
        return len(self._flags)


def _unknown_flag_message(name: str, closest: str | None) -> str:
    hint = f"Did you mean '{closest}'?" if closest else "Check the spelling."
    return (
        f"unknown flag '{name}': it is not in autotune's flag catalog. {hint} "
        "The known flags are listed in autotune/flags/catalog.yaml."
    )


class _CatalogFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    schema_version: Literal[1]
    flags: list[dict[str, Any]]


def parse_catalog(text: str, origin: str = _CATALOG_FILE) -> Catalog:
    """Build a catalog from the text of a catalog YAML file.

    Args:
        text: the YAML text (`schema_version: 1`, `flags: [...]`).
        origin: the file name used in error messages.

    Raises:
        AutotuneError: the file is malformed; the message names the entry and key.
    """
    try:
        document = _CatalogFile.model_validate(yaml.safe_load(text))
        return Catalog(_parse_entry(i, entry) for i, entry in enumerate(document.flags))
    except (yaml.YAMLError, ValidationError, ValueError) as exc:
        raise AutotuneError(
            f"{origin}: the flag catalog is malformed: {exc}. This is a bug in autotune's "
            "packaged catalog (or your edit of it): fix the entry named above."
        ) from exc


def _parse_entry(index: int, entry: dict[str, Any]) -> FlagSpec:
    try:
        return FlagSpec.model_validate(entry)
    except ValidationError as exc:
        label = entry.get("name", "?")
        raise ValueError(f"flags[{index}] ({label}): {exc}") from exc


@functools.cache
def load_catalog() -> Catalog:
    """Return the packaged flag catalog (read once, then cached).

    Raises:
        AutotuneError: the packaged catalog file is malformed.
    """
    text = resources.files("autotune.flags").joinpath(_CATALOG_FILE).read_text(encoding="utf-8")
    return parse_catalog(text)
