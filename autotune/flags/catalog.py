"""The flag catalog: every flag autotune knows, its type, documented values and channel.

The catalog is `catalog.yaml` next to this module, read with `importlib.resources`
so it is found both in a source checkout and in an installed wheel. Nothing is
registered by importing a module: `load_catalog()` reads the file once and keeps
the result.

Besides the flags, the file holds `groups:` (flags a document says must be
set together). Group membership lives only in the group lists, because a flag
may belong to more than one group (`xla_tpu_enable_async_collective_fusion`
is in both v5e async groups of the TPU guide): ask `Catalog.groups_of(name)`.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from autotune.flags._schema import (
    Backend,
    Channel,
    Deprecated,
    FlagSpec,
    FlagType,
    GroupSpec,
    Obsolete,
)
from autotune.flags.open_flags import is_xla_name, open_spec
from autotune.ground.errors import AutotuneError, UsageError
from autotune.ground.records import FlagValue
from autotune.ground.yaml_bound import YamlTooLargeError, bounded_load

__all__ = [
    "CATALOG_SCHEMA_VERSION",
    "Backend",
    "Catalog",
    "Channel",
    "Deprecated",
    "FlagSpec",
    "FlagType",
    "GroupSpec",
    "Obsolete",
    "UnknownFlagError",
    "UnknownGroupError",
    "load_catalog",
    "parse_catalog",
    "source_text",
]

CATALOG_SCHEMA_VERSION = 1
_CATALOG_FILE = "catalog.yaml"


class UnknownFlagError(UsageError):
    """A flag name the catalog does not hold."""


class UnknownGroupError(UsageError):
    """A group name the catalog does not hold."""


class Catalog:
    """The flags autotune knows, looked up by name, and the groups they form.

    Args:
        flags: the entries; names must be unique.
        groups: group name -> the flags that must be set together.

    Raises:
        ValueError: two entries share a name, or a group member, an `overrides`
            name or an `obsolete.replaced_by` or `deprecated.replaced_by` name is
            not an entry.
    """

    def __init__(self, flags: Iterable[FlagSpec],
                 groups: Mapping[str, GroupSpec] | None = None) -> None:
        self._flags: dict[str, FlagSpec] = {}
        for spec in flags:
            if spec.name in self._flags:
                raise ValueError(f"flag {spec.name!r} is in the catalog twice")
            self._flags[spec.name] = spec
        self._groups: dict[str, GroupSpec] = dict(groups or {})
        self._check_references()

    def _check_references(self) -> None:
        for group, members in self._groups.items():
            self._require(members.flags, f"group {group!r} lists")
        for spec in self._flags.values():
            self._require(spec.overrides, f"flag {spec.name!r} overrides")
            if spec.obsolete is not None and spec.obsolete.replaced_by is not None:
                self._require((spec.obsolete.replaced_by,), f"flag {spec.name!r} is replaced by")
            if spec.deprecated is not None:
                self._require((spec.deprecated.replaced_by,), f"flag {spec.name!r} is replaced by")

    def _require(self, names: Iterable[str], what: str) -> None:
        missing = [name for name in names if name not in self._flags]
        if missing:
            raise ValueError(f"{what} {', '.join(map(repr, missing))}, not in the catalog")

    def get(self, name: str) -> FlagSpec:
        """Return the entry of flag `name` (without the leading `--`); for a name the
        catalog does not hold but spelled like an XLA flag, an untyped stand-in
        (`open_flags.open_spec`: `cataloged` false; `name in catalog` stays false).

        Raises:
            UnknownFlagError: the catalog does not hold the flag and it is not spelled
                like an XLA flag; the message suggests the closest known name.
        """
        spec = self._flags.get(name)
        if spec is not None:
            return spec
        if is_xla_name(name):
            return open_spec(name)
        raise UnknownFlagError(_unknown_flag_message(name, self.closest(name)))

    def with_flags(self, specs: Iterable[FlagSpec]) -> Catalog:
        """A new catalog: these entries and `specs` (new names only), the same groups."""
        return Catalog([*self._flags.values(), *specs], self._groups)

    def covering(self, flags: Mapping[str, Iterable[FlagValue]]) -> Catalog:
        """This catalog with a stand-in (`open_flags.open_spec`, typed by its values) for
        each flag of `flags` (name -> values) it does not hold that is spelled like an XLA
        flag; this catalog itself when there is none. Other unknown names stay unknown."""
        extra = [open_spec(name, values) for name, values in flags.items()
                 if name not in self._flags and is_xla_name(name)]
        return self.with_flags(extra) if extra else self

    def covering_configs(self, configs: Iterable[Mapping[str, FlagValue]]) -> Catalog:
        """`covering` for configurations (flag -> value each), e.g. a study's runs."""
        values: dict[str, list[FlagValue]] = {}
        for config in configs:
            for name, value in config.items():
                values.setdefault(name, []).append(value)
        return self.covering(values)

    def per_compiling(self, names: Iterable[str]) -> Catalog:
        """This catalog with the open flags `names` (outside it) given per compilation: the
        study recorded them (`plan["per_compile_open"]`, `open_flags.per_compile_open`),
        so its runner and every reader of its runs split configurations alike."""
        extra = [open_spec(name, per_compile=True) for name in sorted(set(names))
                 if name not in self._flags and is_xla_name(name)]
        return self.with_flags(extra) if extra else self

    def names(self) -> list[str]:
        """All flag names, sorted."""
        return sorted(self._flags)

    def closest(self, name: str) -> str | None:
        """The cataloged flag name nearest to `name`, or None when nothing is close."""
        known = [n for n, spec in self._flags.items() if spec.cataloged]
        matches = difflib.get_close_matches(name.lstrip("-"), known, n=1, cutoff=0.6)
        return matches[0] if matches else None

    def groups(self) -> dict[str, GroupSpec]:
        """Group name -> group, in file order (a copy: changing it changes nothing here)."""
        return dict(self._groups)

    def group_members(self, group: str) -> tuple[str, ...]:
        """The flags of group `group`, in the order the catalog lists them.

        Raises:
            UnknownGroupError: no group has that name.
        """
        try:
            return self._groups[group].flags
        except KeyError:
            known = ", ".join(self._groups) or "none"
            raise UnknownGroupError(
                f"unknown flag group '{group}'. Known groups: {known}.") from None

    def groups_of(self, name: str) -> list[str]:
        """The names of the groups flag `name` belongs to (empty when none), in file order."""
        return [group for group, spec in self._groups.items() if name in spec.flags]

    def __contains__(self, name: object) -> bool:
        return name in self._flags

    def __iter__(self) -> Iterator[FlagSpec]:
        return iter(self._flags.values())

    def __len__(self) -> int:
        return len(self._flags)


#: The reference documents the catalog and the spaces cite, by number (their `source`
#: keys write `001_ea83b282a245b705.txt: section` or `001: section`).
DOCUMENTS = {
    "000": "a curated XLA flag guide (Korean)",
    "001": "GPU performance tips for LLMs with JAX/XLA",
    "002": "how XLA compiles a JAX program (Russian)",
    "003": "the PGLE workflow",
}
_CITED = re.compile(r"(\d{3})(?:_[0-9a-f]{16}\.txt)?: ")


def source_text(source: str) -> str:
    """A `source` as a reader wants it: each cited document by its title and number
    (`GPU performance tips for LLMs with JAX/XLA (001): section`), not its file name."""
    def title(match: re.Match[str]) -> str:
        number = match.group(1)
        name = DOCUMENTS.get(number)
        return f"{name} ({number}): " if name else match.group(0)

    return _CITED.sub(title, source)


def _unknown_flag_message(name: str, closest: str | None) -> str:
    hint = f"Did you mean '{closest}'?" if closest else "Check the spelling."
    return (
        f"unknown flag '{name}': it is neither in autotune's flag catalog nor spelled like "
        f"an XLA flag (xla_...). {hint} `autotune flags list` shows the catalog."
    )


#: libyaml's safe loader where PyYAML was built with it (ten times quicker on the catalog,
#: which every command reads), else PyYAML's own; both build the same document.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _load_yaml(text: str) -> Any:
    """The YAML document of `text`; a malformed one raises PyYAML's own error and words, one
    whose aliases expand too far `ground.yaml_bound.YamlTooLargeError`."""
    try:
        return bounded_load(text, _SAFE_LOADER)  # safe: a SafeLoader either way
    except YamlTooLargeError:
        raise
    except yaml.YAMLError:
        return bounded_load(text)  # raises again, worded as it always was


class _CatalogFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    schema_version: Literal[1]
    flags: list[dict[str, Any]]
    groups: dict[str, dict[str, Any]] = {}


def parse_catalog(text: str, origin: str = _CATALOG_FILE) -> Catalog:
    """Build a catalog from the text of a catalog YAML file.

    Args:
        text: the YAML text (`schema_version: 1`, `flags: [...]`, optional `groups: {...}`).
        origin: the file name used in error messages.

    Raises:
        AutotuneError: the file is malformed; the message names the entry and key.
    """
    try:
        document = _CatalogFile.model_validate(_load_yaml(text))
        flags = [_parse_entry(i, entry) for i, entry in enumerate(document.flags)]
        groups = {name: _parse_group(name, group) for name, group in document.groups.items()}
        return Catalog(flags, groups)
    except (yaml.YAMLError, ValidationError, ValueError) as exc:
        raise AutotuneError(
            f"{origin}: the flag catalog is malformed: {exc}. This is a bug in autotune's "
            "packaged catalog (or your edit of it): fix the entry named above."
        ) from exc


def _parse_entry(index: int, entry: dict[str, Any]) -> FlagSpec:
    if "cataloged" in entry:  # only a stand-in for a flag outside the catalog has it
        raise ValueError(f"flags[{index}] ({entry.get('name', '?')}): 'cataloged' is not a "
                         "catalog key")
    try:
        return FlagSpec.model_validate(entry)
    except ValidationError as exc:
        label = entry.get("name", "?")
        raise ValueError(f"flags[{index}] ({label}): {exc}") from exc


def _parse_group(name: str, group: dict[str, Any]) -> GroupSpec:
    try:
        return GroupSpec.model_validate(group)
    except ValidationError as exc:
        raise ValueError(f"groups.{name}: {exc}") from exc


@functools.cache
def load_catalog() -> Catalog:
    """Return the packaged flag catalog (read once, then cached).

    Raises:
        AutotuneError: the packaged catalog file is malformed.
    """
    text = resources.files("autotune.flags").joinpath(_CATALOG_FILE).read_text(encoding="utf-8")
    return parse_catalog(text)
