"""The models of one catalog entry and one catalog group (pydantic, validated on load).

`catalog.py` re-exports everything here; import from `autotune.flags.catalog`
(or `autotune.flags`), not from this module.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, StrictBool, field_validator, model_validator

from autotune.ground.records import FlagValue


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


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Obsolete(_Frozen):
    """Why a documented flag must not be used any more.

    Attributes:
        since: what can honestly be said about when, e.g. "absent in jaxlib 0.10.2"
            or "001 lists it under 'Previously used XLA Flags'" (no invented releases).
        replaced_by: the catalog flag that does its job now, or None.
        note: what to do instead, in one line.
    """

    since: str
    replaced_by: str | None = None
    note: str


class Deprecated(_Frozen):
    """A name still read today, but only as the old name of another catalog entry.

    Unlike an obsolete flag it still works; a job should move to the new name.

    Attributes:
        since: what can honestly be said about when, e.g. "jaxlib 0.10.2 reads it
            as the deprecated name of XLA_CLIENT_MEM_FRACTION" (no invented releases).
        replaced_by: the catalog entry to use instead (required: a deprecated name
            always has a successor; a flag without one is obsolete or no_effect).
        note: what to do instead, in one line.
        both_fail: setting this name and `replaced_by` together is an error (the
            job fails when its backend starts), rather than one of them winning.
    """

    since: str
    replaced_by: str
    note: str
    both_fail: StrictBool = False


class GroupSpec(_Frozen):
    """Flags a document says must be set together (a catalog `groups:` entry).

    Membership lives here, not on the flags: a flag may belong to several
    groups (`Catalog.groups_of`).

    Attributes:
        flags: the member flags, at least two, each once.
        description: what setting them together achieves.
        source: document file and section.
    """

    flags: tuple[str, ...]
    description: str
    source: str

    @field_validator("flags")
    @classmethod
    def _at_least_two_distinct(cls, flags: tuple[str, ...]) -> tuple[str, ...]:
        if len(flags) < 2:
            raise ValueError("a group needs at least two flags")
        repeated = sorted({name for name in flags if flags.count(name) > 1})
        if repeated:
            raise ValueError(f"flags listed twice: {', '.join(repeated)}")
        return flags


class FlagSpec(_Frozen):
    """One catalog entry.

    Attributes:
        name: the flag name without `--` (or the environment variable's name).
        type: the value type.
        values: allowed names for `enum` and `list` flags.
        default: the value XLA uses when the flag is not given (None: not known).
        recommended: the documented recommended value (None: none documented).
        candidates: the documented candidate values (None: none listed; a
            documented range is given as `min`/`max` instead).
        backend: the backend the flag acts on.
        channel: how the flag is delivered to the process.
        per_compile: whether `compile(compiler_options={...})` accepts it.
        source: where the flag is documented (document file and section).
        help: one line saying what the flag does.
        min: smallest allowed value of an int or float flag, if any.
        max: largest allowed value of an int or float flag, if any.
        allow_empty: for a list flag, whether the empty value is accepted
            (`xla_gpu_enable_command_buffer=` is; `xla_gpu_disable_async_collectives=` aborts).
        overrides: flags this one overrides when it is set to `overrides_when`.
        overrides_when: the value of this flag at which `overrides` applies.
        obsolete: set when the installed XLA no longer accepts the flag or it is retired.
        deprecated: set when the name still works but is the old name of another
            entry (`deprecated.replaced_by`); never together with `obsolete`.
        no_effect: set when the flag is still accepted but does nothing (any
            more), saying why; a flag is never both obsolete and no_effect.
        cataloged: false only for the stand-in of a flag outside the catalog
            (`autotune.flags.open_flags.open_spec`); catalog.yaml never sets it.
        after_hlo: the flag acts after the optimised HLO, on what XLA emits from it
            (CUDA graphs over the thunks): the compiler's dump does not show it, so its
            value is part of a program's fingerprint (`compose.after_hlo_text`).
    """

    name: str
    type: FlagType
    values: tuple[str, ...] | None = None
    default: FlagValue | None = None
    recommended: FlagValue | None = None
    candidates: tuple[FlagValue, ...] | None = None
    backend: Backend
    channel: Channel
    per_compile: StrictBool
    source: str
    help: str
    min: int | float | None = None
    max: int | float | None = None
    allow_empty: StrictBool = True
    overrides: tuple[str, ...] = ()
    overrides_when: FlagValue | None = None
    obsolete: Obsolete | None = None
    deprecated: Deprecated | None = None
    no_effect: str | None = None
    cataloged: StrictBool = True
    after_hlo: StrictBool = False

    @model_validator(mode="after")
    def _check_consistent(self) -> FlagSpec:
        has_names = self.type in (FlagType.ENUM, FlagType.LIST)
        if has_names and not self.values:
            raise ValueError(f"a {self.type} flag needs its allowed 'values'")
        if self.values is not None and not has_names:
            raise ValueError(f"'values' is only for enum and list flags, not {self.type}")
        if not self.allow_empty and self.type is not FlagType.LIST:
            raise ValueError("'allow_empty' is only for list flags")
        if self.obsolete is not None and self.no_effect is not None:
            raise ValueError("a flag is either obsolete (not accepted) or no_effect, not both")
        if self.obsolete is not None and self.deprecated is not None:
            raise ValueError("a flag is either obsolete (not accepted) or deprecated (still "
                             "read under its old name), not both")
        if self.deprecated is not None and self.deprecated.replaced_by == self.name:
            raise ValueError("a deprecated flag cannot be replaced by itself")
        if self.candidates is not None and not self.candidates:
            raise ValueError("'candidates' is empty: leave it out when none are documented")
        self._check_overrides()
        self._check_values()
        return self

    def _check_overrides(self) -> None:
        if bool(self.overrides) != (self.overrides_when is not None):
            raise ValueError("'overrides' and 'overrides_when' go together")
        if self.name in self.overrides:
            raise ValueError("a flag cannot override itself")

    def _check_values(self) -> None:
        labelled = [("default", self.default), ("recommended", self.recommended),
                    ("overrides_when", self.overrides_when)]
        labelled += [(f"candidates[{i}]", v) for i, v in enumerate(self.candidates or ())]
        for label, value in labelled:
            problem = None if value is None else self.check_value(value)
            if problem:
                raise ValueError(f"{label}: {problem}")

    def check_value(self, value: object) -> str | None:
        """Say what is wrong with `value` for this flag.

        Args:
            value: a candidate value (a bool, int, float or string).

        Returns:
            None when the value fits the flag's type and allowed values, else a
            phrase such as "expects true or false, got 3". Always None for the stand-in
            of a flag outside the catalog: only XLA knows what it parses.
        """
        if not self.cataloged:
            return None
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
    if not value:
        return None if spec.allow_empty else (
            f"{spec.name} does not accept an empty list: leave the flag out instead")
    unknown = [item for item in value.split(",") if item not in (spec.values or ())]
    if unknown:
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
