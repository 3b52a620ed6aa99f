"""Load a configuration that `autotune export` wrote, and apply it (`autotune.load_config`).

The Python face of `autotune apply`: a training script can call
`load_config("best.yaml").apply()` before JAX starts, or hand
`.compiler_options()` to one `compile(...)`. The file is validated on load
(`schema_version` first, then the keys this module reads, then every flag
against the catalog); every error is a `ConfigFileError` (exit code 2) that
names the file and the key and says what to do. This module never imports jax:
whether JAX has started a backend is read from `sys.modules`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, ValidationError

from autotune import pgle as rules
from autotune.flags.catalog import Catalog, Channel, load_catalog
from autotune.flags.compose import (
    TOKEN_VARIABLES,
    compose_env,
    parse_flag_string,
    render_value,
    split_per_compile,
)
from autotune.ground.errors import BackendStartedError, ConfigFileError, UsageError
from autotune.ground.records import FlagValue
from autotune.ground.yaml_bound import bounded_load
from autotune.results.export import EXPORT_SCHEMA_VERSION

__all__ = ["Config", "Conflict", "MeasuredOn", "jax_backend_started", "load_config"]

_EXPORT_HINT = "write one with `autotune export STUDY -o best.yaml`"


class MeasuredOn(BaseModel):
    """Where the configuration was measured (the export's `measured_on`; None: not known)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    backend: str | None = None
    device_kind: str | None = None
    device_count: StrictInt | None = None
    jax: str | None = None
    jaxlib: str | None = None
    host: str | None = None
    benchmark: str | None = None
    preset: str | None = None
    space: str | None = None
    space_backend: str | None = None


class _Document(BaseModel):
    """The keys of an export this module reads; the others are allowed and ignored."""

    model_config = ConfigDict(extra="allow")

    study: str
    recommended: StrictBool
    reason: str
    trial: StrictInt | None
    flags: dict[str, FlagValue]
    measured_on: MeasuredOn


@dataclass(frozen=True)
class Conflict:
    """A flag of the user's environment that the configuration sets to another value.

    Attributes:
        name: the flag (or variable) name, without `--`.
        variable: the variable that carries it (`XLA_FLAGS`, `LIBTPU_INIT_ARGS`, or `name`).
        user_value: the user's value (None for a bare `--name`).
        config_value: the configuration's value, which wins.
    """

    name: str
    variable: str
    user_value: str | None
    config_value: str


@dataclass(frozen=True)
class Config:
    """One exported configuration, validated (build it with `load_config`).

    Attributes:
        path: the file it was read from.
        study, trial: the study and its trial (None when the file holds XLA's defaults).
        recommended, reason: whether `autotune export` recommends it, and why (not).
        flags: flag name -> typed value; empty means XLA's defaults.
        measured_on: where it was measured.
    """

    path: Path
    study: str
    trial: int | None
    recommended: bool
    reason: str
    flags: Mapping[str, FlagValue]
    measured_on: MeasuredOn

    def environ(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """The variables to set so that a new process gets this configuration.

        `XLA_FLAGS` and `LIBTPU_INIT_ARGS` keep the tokens of `base` (default
        `os.environ`) that the configuration does not set, in their order, and
        end with the configuration's; env-channel flags are variables of their
        own. A variable the configuration does not touch is left out.

        Raises:
            UsageError: a flag string of `base` is malformed (a token without `--`).
        """
        return compose_env(self.flags, os.environ if base is None else base, self.catalog())

    def conflicts(self, base: Mapping[str, str] | None = None) -> list[Conflict]:
        """The flags of `base` (default `os.environ`) that the configuration sets otherwise.

        A bare `--name` counts as `true`; a flag set to the same value is no conflict.

        Raises:
            UsageError: a flag string of `base` is malformed (a token without `--`).
        """
        base = os.environ if base is None else base
        catalog = self.catalog()
        found = []
        for name, value in self.flags.items():
            variable = _variable_of(name, catalog)
            given, mine = _user_value(base, variable, name, catalog)
            ours = render_value(value)
            if given and (mine or "true") != ours:
                found.append(Conflict(name, variable, mine, ours))
        return found

    def compiler_options(self) -> dict[str, FlagValue]:
        """Typed options for `jax.jit(f).lower(...).compile(compiler_options=...)`.

        Only the per-compile `XLA_FLAGS` flags; the others are in `env_only()`.
        """
        return split_per_compile(self.flags, self.catalog())[0]

    def env_only(self) -> dict[str, FlagValue]:
        """The flags that only the environment of a process that has not started JAX carries."""
        return split_per_compile(self.flags, self.catalog())[1]

    def catalog(self) -> Catalog:
        """The packaged catalog with a stand-in for each flag of this file outside it
        (`autotune.flags.open_flags`)."""
        return load_catalog().covering_configs([self.flags])

    def apply(self) -> dict[str, str]:
        """Set `environ()` in `os.environ` for this process's JAX, and return what was set.

        Raises:
            BackendStartedError: JAX has already started a backend here, so XLA
                has read its flags and setting them now would change nothing.
        """
        if jax_backend_started():
            raise BackendStartedError(
                f"JAX has already started its backend in this process, so setting the flags "
                f"of {self.path} now would change nothing: call apply() before the first JAX "
                "computation (jax.devices(), jnp.ones, ...), pass .compiler_options() to "
                "compile(), or run your program with `autotune apply "
                f"{self.path} -- python ...`")
        env = self.environ()
        os.environ.update(env)
        return env


def _variable_of(name: str, catalog: Catalog) -> str:
    return TOKEN_VARIABLES.get(catalog.get(name).channel, name)


def _user_value(base: Mapping[str, str], variable: str, name: str,
                catalog: Catalog) -> tuple[bool, str | None]:
    """Whether the user's environment sets flag `name`, and to what (the last token wins)."""
    if catalog.get(name).channel is Channel.ENV:
        return name in base, base.get(name)
    tokens = dict(parse_flag_string(base.get(variable, "")))
    return name in tokens, tokens.get(name)


def jax_backend_started() -> bool:
    """Whether JAX has started a backend in this process (XLA has then read its flags).

    Never imports jax: a process that has not imported jax has not started it.
    """
    bridge = sys.modules.get("jax._src.xla_bridge")
    if bridge is None:
        return False
    started = getattr(bridge, "backends_are_initialized", None)
    if callable(started):
        return bool(started())
    return bool(getattr(bridge, "_backends", None))


def load_config(path: str | os.PathLike[str], *, profile: bool = True,
                check: bool = True) -> Config:
    """Read and validate a file that `autotune export` wrote (YAML or JSON).

    Every flag must be in the catalog or spelled like an XLA flag (`xla_...`, a flag
    outside the catalog); with `check` (the default) the installed XLA is then asked
    whether it knows each `XLA_FLAGS` flag (`autotune.flags.probe`, a child process,
    its answer cached per jaxlib), and a flag it does not know is refused with the same
    words as `autotune flags check`, `autotune apply` and `autotune spaces validate`
    (a job with it would abort at start). `check=False` skips that question
    (`autotune apply` asks it itself, to honour `--force`).

    A file that carries a PGLE profile (`pgle.profile`, beside it) gets the profile's
    path resolved there and checked fresh (`_with_profile`); `profile=False` leaves
    the `pgle` key alone (what `autotune pgle --config` does to collect a new one).

    Raises:
        ConfigFileError: the file is missing or unreadable, is neither YAML nor
            JSON, is not an export, holds another schema version than this
            autotune reads, sets a flag that is neither in the catalog nor spelled
            like an XLA flag, a value the catalog does not allow, or (with
            `check`) a flag the installed XLA does not know; the message names the
            file and the key.
        ProbeError: with `check`, jax cannot be started to answer.
    """
    file = Path(path)
    data = _parse(file, _read(file))
    document = _validate(file, data)
    catalog = load_catalog().covering_configs([document.flags])
    _check_flags(file, document.flags, catalog)
    if check:
        _check_against_xla(file, document.flags, catalog)
    return Config(path=file, study=document.study, trial=document.trial,
                  recommended=document.recommended, reason=document.reason,
                  flags=_with_profile(file, dict(document.flags),
                                      (document.model_extra or {}).get("pgle"))
                  if profile else dict(document.flags),
                  measured_on=document.measured_on)


def _with_profile(file: Path, flags: dict[str, FlagValue], section: object) -> dict[str, FlagValue]:
    """The flags with the PGLE profile's path taken from the file's `pgle.profile`
    (beside the export, wherever the pair was moved), the profile checked fresh for the
    installed XLA and these flags (`autotune.pgle.stale_reasons`; the program cannot be
    compared without compiling). Flags without a kept profile are returned unchanged.

    Raises:
        ConfigFileError: the profile is missing, unreadable or stale (every reason named).
    """
    import importlib.metadata

    name = section.get("profile") if isinstance(section, dict) else None
    if not name:
        return flags
    profile = (file.parent / str(name)).resolve()
    try:
        _, meta = rules.read_profile(str(profile))
    except ValueError as exc:
        raise ConfigFileError(f"{file}: key pgle.profile: {exc}; export the study again "
                              "to write the profile beside the file") from None
    try:
        xla = importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        xla = meta.xla_version  # no jaxlib here: the job's own machine is where it counts
    if reasons := rules.stale_reasons(meta, xla_version=xla, backend=meta.backend,
                                      fingerprint=None, flags=rules.reference_options(flags)):
        raise ConfigFileError(f"{file}: the PGLE profile {profile} is stale: "
                              + "; ".join(reasons) + ". Collect a new one: `autotune pgle "
                              f"--config {file}` (it reads the flags, not the profile) or "
                              "the study again with --pgle")
    return {**flags, rules.PROFILE_PATH_FLAG: str(profile)}


def _read(file: Path) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigFileError(f"{file}: no such file: give the path of a file that "
                              f"`autotune export` wrote ({_EXPORT_HINT})") from None
    except IsADirectoryError:
        raise ConfigFileError(f"{file} is a folder, not an export file: give the file "
                              "`autotune export` wrote") from None
    except UnicodeDecodeError:
        raise ConfigFileError(f"{file} is not text (UTF-8): give the YAML or JSON file "
                              "`autotune export` wrote") from None
    except OSError as exc:
        raise ConfigFileError(f"{file}: cannot read it: {exc.strerror}; check the path "
                              "and its permissions") from None


def _parse(file: Path, text: str) -> object:
    """YAML or JSON (JSON is read as YAML, of which it is a subset)."""
    try:
        return bounded_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{file}:{mark.line + 1}" if mark is not None else str(file)
        problem = getattr(exc, "problem", None) or "unreadable"
        raise ConfigFileError(f"{where}: neither YAML nor JSON ({problem}): give the file "
                              "`autotune export` wrote, unchanged") from None


def _validate(file: Path, data: object) -> _Document:
    if not isinstance(data, dict):
        raise ConfigFileError(f"{file} is not an autotune export: it holds "
                              f"{_kind(data)}, not keys and values; {_EXPORT_HINT}")
    if "schema_version" not in data or not {"study", "flags"} <= data.keys():
        raise ConfigFileError(f"{file} is not an autotune export: it has no "
                              f"{_missing(data, ('schema_version', 'study', 'flags'))} "
                              f"key; {_EXPORT_HINT}")
    _check_version(file, data["schema_version"], data["study"])
    try:
        return _Document.model_validate(data)
    except ValidationError as exc:
        raise ConfigFileError(f"{file}: {_errors(exc)}; the file does not follow export "
                              f"schema version {EXPORT_SCHEMA_VERSION}: {_EXPORT_HINT}") from None


def _kind(data: object) -> str:
    if data is None:
        return "nothing"
    return "a list" if isinstance(data, list) else f"a single {type(data).__name__} value"


def _missing(data: Mapping[str, Any], keys: tuple[str, ...]) -> str:
    return " or ".join(f"'{key}'" for key in keys if key not in data)


def _check_version(file: Path, version: object, study: object) -> None:
    if isinstance(version, bool) or not isinstance(version, int):
        raise ConfigFileError(f"{file}: schema_version is {version!r}, not a whole number; "
                              f"{_EXPORT_HINT}")
    if version == EXPORT_SCHEMA_VERSION:
        return
    newer = "a newer" if version > EXPORT_SCHEMA_VERSION else "an older"
    raise ConfigFileError(
        f"{file} is an export of schema version {version} ({newer} autotune wrote it); this "
        f"autotune reads version {EXPORT_SCHEMA_VERSION}: re-export it with this autotune "
        f"(`autotune export {study} -o {file.name}`)")


def _errors(exc: ValidationError) -> str:
    """pydantic's errors as `missing keys a, b` and `key.path: problem`."""
    missing, problems = [], []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"])
        if error["type"] == "missing":
            missing.append(where)
        else:
            problems.append(f"{where}: {error['msg']}")
    if missing:
        problems.insert(0, f"missing key{'s' if len(missing) > 1 else ''} {', '.join(missing)}")
    return "; ".join(problems)


def _check_against_xla(file: Path, flags: Mapping[str, FlagValue], catalog: Catalog) -> None:
    """Refuse the first `XLA_FLAGS` flag the installed XLA does not know (`lint.xla_refusals`)."""
    from autotune.flags.lint import xla_refusals

    for finding in xla_refusals({name: [value] for name, value in flags.items()}, catalog):
        raise ConfigFileError(f"{file}: flags.{finding.flag}: {finding.message} ({finding.fix})")


def _check_flags(file: Path, flags: Mapping[str, FlagValue], catalog: Catalog) -> None:
    """Every flag is in the catalog (or stands in for an open one), with a value it allows
    that its variable can carry."""
    for name, value in flags.items():
        if name not in catalog:
            close = catalog.closest(name)
            hint = f" (did you mean {close}?)" if close else ""
            raise ConfigFileError(
                f"{file}: flags.{name}: neither in autotune's flag catalog nor spelled like "
                f"an XLA flag (xla_...){hint}: remove the flag, or fix its name")
        problem = catalog.get(name).check_value(value)
        if problem:
            raise ConfigFileError(f"{file}: flags.{name}: {problem}; re-export the study "
                                  "or fix the value")
    try:
        compose_env(flags, {}, catalog)
    except UsageError as exc:
        raise ConfigFileError(f"{file}: flags: {exc.message}") from None
