"""Check a flag string against the catalog and the installed XLA (`autotune flags check`).

A finding is something a user should act on before the flags reach a job:
a flag this XLA does not know (the job would abort at start), an obsolete flag
and what replaces it, a deprecated name and its new name (and both names set
where that is an error), a flag that does nothing any more, a flag on the wrong
channel, a value XLA rejects or the catalog's type does not allow, a group
set only partly, a flag overridden by another, a flag given twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from autotune.flags.catalog import Catalog, Channel, FlagSpec, FlagType
from autotune.flags.compose import parse_flag_string, render_value
from autotune.ground.records import FlagValue

if TYPE_CHECKING:
    from autotune.flags.probe import ProbeReport


class FindingKind(StrEnum):
    """What is wrong with a flag."""

    UNKNOWN = "unknown"
    OBSOLETE = "obsolete"
    DEPRECATED = "deprecated"
    NO_EFFECT = "no_effect"
    WRONG_CHANNEL = "wrong_channel"
    BAD_VALUE = "bad_value"
    PARTIAL_GROUP = "partial_group"
    OVERRIDDEN = "overridden"
    DUPLICATE = "duplicate"


@dataclass(frozen=True)
class Finding:
    """One problem with one flag, and what to do about it.

    `would_abort` is True when the installed XLA refuses the flag or its value
    at start-up: a job given this string would not run.
    """

    kind: FindingKind
    flag: str
    message: str
    fix: str
    would_abort: bool = False


@dataclass(frozen=True)
class FlagUse:
    """One `--name[=value]` token and the variable it was read from."""

    name: str
    value: str | None
    channel: Channel


def parse_uses(xla_flags: str, libtpu_args: str = "") -> list[FlagUse]:
    """The tokens of both strings, in order (raises the parser's error on junk)."""
    uses = [FlagUse(n, v, Channel.XLA_FLAGS) for n, v in parse_flag_string(xla_flags)]
    uses += [FlagUse(n, v, Channel.LIBTPU) for n, v in parse_flag_string(libtpu_args)]
    return uses


def typed_value(spec: FlagSpec, text: str | None) -> Any:
    """The flag-string value as the catalog's type (a bare bool flag means true)."""
    if text is None:
        return True if spec.type is FlagType.BOOL else ""
    try:
        if spec.type is FlagType.BOOL:
            return {"true": True, "false": False, "1": True, "0": False}.get(text.lower(), text)
        if spec.type is FlagType.INT:
            return int(text)
        if spec.type is FlagType.FLOAT:
            return float(text)
    except ValueError:
        return text
    return text


def lint(uses: list[FlagUse], catalog: Catalog, report: ProbeReport | None) -> list[Finding]:
    """Every finding for `uses`, in the order of the tokens, then group and override checks."""
    findings: list[Finding] = []
    seen: dict[str, FlagUse] = {}
    for use in uses:
        if use.name in seen:
            findings.append(_duplicate(use, seen[use.name]))
        seen[use.name] = use
        findings.extend(_check_one(use, catalog, report))
    findings.extend(_both_names(seen, catalog))
    findings.extend(_partial_groups(seen, catalog))
    findings.extend(_overridden(seen, catalog, _dropped(findings)))
    return findings


def probe_extra(uses: Iterable[FlagUse], catalog: Catalog) -> dict[str, list[str]]:
    """The probe's `extra` for `uses`: every name, with the values given to the
    `XLA_FLAGS` flags outside the catalog (so the probe says whether XLA parses them)."""
    extra: dict[str, list[str]] = {}
    for use in uses:
        values = extra.setdefault(use.name, [])
        if use.name not in catalog and use.value is not None and \
                use.channel is Channel.XLA_FLAGS:
            values.append(use.value)
    return extra


def xla_refusals(flags: Mapping[str, Iterable[FlagValue]], catalog: Catalog,
                 report: ProbeReport | None = None) -> list[Finding]:
    """What refuses a flag of `flags` (name -> the values to check, none for the name
    alone) on the `XLA_FLAGS` channel: the installed XLA does not know it (UNKNOWN, or
    OBSOLETE where XLA aborts on it), or cannot parse a value given. The one verdict
    `spaces validate`, `flags check`, `apply` and `load_config` share, in `lint`'s words.

    `catalog` must hold every name (`Catalog.covering` adds flags outside it). With no
    `report`, the installed XLA is probed for these names and values (a child process,
    its answer cached per jaxlib; raises ProbeError when jax cannot start).
    """
    values = {n: list(v) for n, v in flags.items()
              if catalog.get(n).channel is Channel.XLA_FLAGS}
    if not values:
        return []
    if report is None:
        from autotune.flags.probe import probe

        report = probe(Catalog([]), extra=values)
    found: list[Finding] = []
    for name, given in values.items():
        uses = [FlagUse(name, render_value(v), Channel.XLA_FLAGS) for v in given]
        for use in uses or [FlagUse(name, None, Channel.XLA_FLAGS)]:
            refusing = (FindingKind.UNKNOWN, FindingKind.OBSOLETE) + \
                ((FindingKind.BAD_VALUE,) if use.value is not None else ())  # name alone
            found += [f for f in _check_one(use, catalog, report)
                      if f.kind in refusing and f.would_abort and f not in found]
    return found


def _dropped(findings: Iterable[Finding]) -> set[str]:
    """Flags a finding tells the user to drop or replace: unknown or obsolete ones."""
    return {f.flag for f in findings if f.kind in (FindingKind.UNKNOWN, FindingKind.OBSOLETE)}


def _duplicate(use: FlagUse, first: FlagUse) -> Finding:
    return Finding(
        FindingKind.DUPLICATE, use.name,
        f"--{use.name} is given twice ({first.value!s} then {use.value!s}); the last one wins",
        f"keep one --{use.name}",
    )


def _check_one(use: FlagUse, catalog: Catalog, report: ProbeReport | None) -> list[Finding]:
    spec = catalog.get(use.name) if use.name in catalog else None
    if spec is None or not spec.cataloged:  # outside the catalog: only XLA's answers count
        return _uncatalogued(use, catalog, report) or _xla_value(use, report)
    if spec.obsolete is not None:
        return [_obsolete(use, spec, report)]
    found = _channel(use, spec)
    found += _value(use, spec, report)
    if spec.deprecated is not None:
        found.append(_deprecated(use, spec, catalog))
    if spec.no_effect:
        found.append(Finding(FindingKind.NO_EFFECT, use.name,
                             f"--{use.name} is accepted but does nothing any more: "
                             f"{spec.no_effect}", f"remove --{use.name}"))
    return found


def _unknown_to_xla(use: FlagUse, report: ProbeReport | None) -> bool:
    return (report is not None and use.channel is Channel.XLA_FLAGS
            and use.name in report.unknown)


def _uncatalogued(use: FlagUse, catalog: Catalog, report: ProbeReport | None) -> list[Finding]:
    if not _unknown_to_xla(use, report):
        return []  # accepted by this XLA (or not checkable): nothing to say
    close = catalog.closest(use.name)
    hint = f"; did you mean --{close}?" if close else ""
    return [Finding(FindingKind.UNKNOWN, use.name,
                    f"this XLA does not know --{use.name}: a job with it aborts at start{hint}",
                    f"remove --{use.name}", would_abort=True)]


def _obsolete(use: FlagUse, spec: FlagSpec, report: ProbeReport | None) -> Finding:
    assert spec.obsolete is not None
    old = spec.obsolete
    replaced = f"; use --{old.replaced_by} instead" if old.replaced_by else ""
    aborts = _unknown_to_xla(use, report)
    tail = " This XLA does not know it: a job with it aborts at start." if aborts else ""
    return Finding(
        FindingKind.OBSOLETE, use.name,
        f"--{use.name} is obsolete ({old.since}): {old.note}{replaced}.{tail}",
        f"replace it with --{old.replaced_by}" if old.replaced_by else f"remove --{use.name}",
        would_abort=aborts,
    )


def _shown(name: str, channel: Channel) -> str:
    """A flag as the user writes it: `--name` in a flag string, `NAME` as a variable."""
    return name if channel is Channel.ENV else f"--{name}"


def _deprecated(use: FlagUse, spec: FlagSpec, catalog: Catalog) -> Finding:
    assert spec.deprecated is not None
    old = spec.deprecated
    new = _shown(old.replaced_by, catalog.get(old.replaced_by).channel)
    return Finding(
        FindingKind.DEPRECATED, use.name,
        f"{_shown(use.name, use.channel)} is deprecated ({old.since}): {old.note}; "
        f"use {new} instead",
        f"replace it with {new}",
    )


def _both_names(seen: dict[str, FlagUse], catalog: Catalog) -> Iterable[Finding]:
    """A deprecated name given together with its new name, where that is an error."""
    for use in seen.values():
        spec = catalog.get(use.name) if use.name in catalog else None
        old = spec.deprecated if spec is not None else None
        if old is None or not old.both_fail or old.replaced_by not in seen:
            continue
        new = seen[old.replaced_by]
        yield Finding(
            FindingKind.DEPRECATED, use.name,
            f"{_shown(use.name, use.channel)} and its new name "
            f"{_shown(new.name, new.channel)} are both set: the job fails when its backend "
            "starts (setting both is an error)", f"remove {_shown(use.name, use.channel)}",
            would_abort=True,
        )


#: How a message names a flag of each token channel, with its article.
_CHANNEL_FLAG = {Channel.XLA_FLAGS: "an XLA_FLAGS flag", Channel.LIBTPU: "a LIBTPU_INIT_ARGS flag"}


def _channel(use: FlagUse, spec: FlagSpec) -> list[Finding]:
    """A flag in the wrong variable: the parser of that variable does not know the name
    and aborts at start, so every such finding would abort the job."""
    if spec.channel is use.channel:
        return []
    if spec.channel is Channel.ENV:
        where, fix = "an environment variable", f"export {use.name}=..."
    elif spec.channel is Channel.LIBTPU:
        where, fix = "a libtpu flag", f"move --{use.name} to LIBTPU_INIT_ARGS"
    else:
        return []  # libtpu also parses XLA's own flags
    return [Finding(FindingKind.WRONG_CHANNEL, use.name,
                    f"--{use.name} is {where}, not {_CHANNEL_FLAG[use.channel]}: "
                    "a job with it aborts at start", fix, would_abort=True)]


def _value(use: FlagUse, spec: FlagSpec, report: ProbeReport | None) -> list[Finding]:
    if use.value is None and spec.type is not FlagType.BOOL:
        return [Finding(FindingKind.BAD_VALUE, use.name,
                        f"--{use.name} has no value; XLA reads a bare --{use.name} as an "
                        "unknown flag and aborts", f"write --{use.name}=VALUE",
                        would_abort=True)]
    rejected = report.rejected_values.get(use.name, {}) if report else {}
    if use.value is not None and use.value in rejected:
        return [Finding(FindingKind.BAD_VALUE, use.name,
                        f"this XLA rejects --{use.name}={use.value}: {rejected[use.value]}",
                        _value_fix(spec), would_abort=True)]
    problem = spec.check_value(typed_value(spec, use.value))
    if problem:
        return [Finding(FindingKind.BAD_VALUE, use.name, f"--{use.name}: {problem}",
                        _value_fix(spec))]
    return []


def _xla_value(use: FlagUse, report: ProbeReport | None) -> list[Finding]:
    """A value XLA could not parse, for a flag the catalog has no type for."""
    rejected = report.rejected_values.get(use.name, {}) if report else {}
    if use.value is None or use.value not in rejected:
        return []
    return [Finding(FindingKind.BAD_VALUE, use.name,
                    f"this XLA rejects --{use.name}={use.value}: {rejected[use.value]}",
                    f"give --{use.name} a value XLA parses", would_abort=True)]


def _value_fix(spec: FlagSpec) -> str:
    if spec.values:
        return f"use one of: {', '.join(spec.values)}"
    return f"give {_article(spec.type.value)} {spec.type.value} value"


def _article(word: str) -> str:
    """`an` before a vowel (`an int`, `an enum`), else `a` (`a bool`, `a float`)."""
    return "an" if word[:1].lower() in "aeiou" else "a"


def _partial_groups(seen: dict[str, FlagUse], catalog: Catalog) -> Iterable[Finding]:
    for name, group in catalog.groups().items():
        members = tuple(group.flags)
        given = [m for m in members if m in seen]
        if given and len(given) < len(members):
            missing = [m for m in members if m not in seen]
            yield Finding(
                FindingKind.PARTIAL_GROUP, given[0],
                f"group '{name}' ({group.description}) is set only partly: "
                f"missing {', '.join('--' + m for m in missing)}",
                "set all of the group's flags together, or none",
            )


def _overridden(seen: dict[str, FlagUse], catalog: Catalog,
                dropped: set[str]) -> Iterable[Finding]:
    """A flag overridden by another one given; not by a flag that is itself unknown or
    obsolete (`dropped`): the user is told to remove that one, and then nothing overrides."""
    for use in seen.values():
        spec = catalog.get(use.name) if use.name in catalog else None
        if spec is None or not spec.overrides or use.name in dropped:
            continue
        if spec.overrides_when is not None and typed_value(spec, use.value) != spec.overrides_when:
            continue
        for victim in spec.overrides:
            if victim in seen:
                yield Finding(
                    FindingKind.OVERRIDDEN, victim,
                    f"--{victim} is overridden by --{use.name}={use.value or 'true'}",
                    f"drop one of --{victim} and --{use.name}",
                )
