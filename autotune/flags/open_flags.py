"""Flags outside the catalog ("open flags"): any flag the installed XLA accepts.

The catalog is knowledge (documented defaults, types, candidate values, sources),
not a gate. A name it does not hold that is spelled like an XLA flag (`xla_`,
then lower-case letters, digits and underscores) may be named in a space, an
export, `apply` and `load_config`; whether XLA knows it is the probe's answer
(`autotune.flags.probe`), asked by each of those paths, and refused by all of them
with the lint's one message (`autotune.flags.lint`) when XLA does not.

An open flag gets a stand-in catalog entry (`open_spec`): type inferred from
its values, any backend, delivered through `XLA_FLAGS`; per compilation only
where the study's probe found that `compile(compiler_options=...)` takes it with
a bool or number value (`per_compile_open`; the study records the names, and
every reader of its runs builds the same catalog with `Catalog.per_compiling`),
no documented default, and `cataloged` false so every view can say "not in the
catalog"; its values are not checked here (`FlagSpec.check_value`: XLA is the judge).
`Catalog.get` hands out an untyped stand-in for any name spelled like an XLA flag, so
the code that looks flags up (`compose_env`, the views of a study, an export) needs no
second path; `Catalog.covering` puts stand-ins typed by their values into a catalog, for what
asks `name in catalog` or checks a param's type against its flag's (a space's checks).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from autotune.flags._schema import Backend, Channel, FlagSpec, FlagType
from autotune.ground.records import FlagValue

__all__ = ["OPEN_SOURCE", "infer_type", "is_xla_name", "open_spec", "per_compile_open"]

#: What an open flag's `source` says wherever a flag's source is shown.
OPEN_SOURCE = "not in autotune's catalog"

_XLA_NAME = re.compile(r"xla_[a-z0-9_]+")


def is_xla_name(name: str) -> bool:
    """Whether `name` (without `--`) is spelled like an XLA flag: `xla_` then
    lower-case letters, digits and underscores."""
    return _XLA_NAME.fullmatch(name) is not None


def infer_type(values: Iterable[FlagValue]) -> FlagType:
    """The narrowest type all `values` fit: bool, int, float, else string (also for none)."""
    seen = list(values)
    if not seen:
        return FlagType.STRING
    if all(isinstance(v, bool) for v in seen):
        return FlagType.BOOL
    if any(isinstance(v, bool) or not isinstance(v, int | float) for v in seen):
        return FlagType.STRING
    return FlagType.INT if all(isinstance(v, int) for v in seen) else FlagType.FLOAT


def open_spec(name: str, values: Iterable[FlagValue] = (), *,
              per_compile: bool = False) -> FlagSpec:
    """The stand-in entry of open flag `name`, typed by `values` (`infer_type`);
    `per_compile` where the probe found that `compile(compiler_options=...)` takes it
    (`per_compile_open`)."""
    return FlagSpec(
        name=name, type=infer_type(values), backend=Backend.ANY, channel=Channel.XLA_FLAGS,
        per_compile=per_compile, source=OPEN_SOURCE, cataloged=False,
        help="not in autotune's catalog: only the installed XLA's probe vouches for it")


def per_compile_open(values: Mapping[str, Iterable[FlagValue]],
                     per_compile: Mapping[str, bool]) -> frozenset[str]:
    """The flags of `values` (name -> values) outside the catalog that one compilation can
    take: the probe's `per_compile` answer is yes and every value is a bool or a number
    (a string's form for compiler_options, an enum's upper-case name, is not known)."""
    return frozenset(
        name for name, given in values.items() if per_compile.get(name) and
        all(isinstance(v, bool | int | float) for v in given))
