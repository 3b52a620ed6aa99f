"""`autotune spaces`, `flags` and `benchmarks`: what can be tuned, checked against this XLA."""

# Imports inside the commands are lazy on purpose: `autotune --help` and every command's
# start load only what that command needs (no Optuna, SQLAlchemy, numpy or jinja2).

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from autotune.cli._common import (
    TABLE_WIDTH,
    FormatOpt,
    OutputFormat,
    counted,
    fmt_bytes,
    fmt_flags,
    literal,
    one_of,
    out,
    print_json,
    print_record,
    say,
)


def spaces_list(fmt: FormatOpt = OutputFormat.TABLE) -> None:
    """List the built-in search spaces.

    JSON: a list of `{space, backend, parameters, configurations, description}`
    (`configurations` null for a continuous space; `description` its first line).
    """
    from autotune import spaces

    rows = [_space_summary(spaces.load_space(name)) for name in spaces.list_spaces()]
    if fmt == OutputFormat.JSON:
        print_json(rows)
        return
    for row in rows:
        count = "-" if row["configurations"] is None else str(row["configurations"])
        print_record(literal(row["space"]), f"{literal(row['backend'])}, {row['parameters']} "
                     f"parameters, {count} configurations: {literal(row['description'])}")


def _space_summary(sp: Any) -> dict[str, Any]:
    """A space's line of `spaces list` (and the head of `spaces show`), JSON-ready."""
    return {"space": sp.name, "backend": sp.backend, "parameters": len(sp.params),
            "configurations": sp.size(),
            "description": sp.description.strip().splitlines()[0] if sp.description else ""}


def benchmarks_list(
    names: Annotated[list[str] | None, typer.Argument(
        metavar="[NAME]...", help="Only these benchmarks (default: all).")] = None,
    devices: Annotated[int, typer.Option(min=1, help="Devices to compile for.")] = 8,
    fmt: FormatOpt = OutputFormat.TABLE,
) -> None:
    """List the built-in benchmarks and the collectives each compiles to.

    Each kind's count is followed by how many of them run inside a while loop
    (what pipelining and double buffering act on). JSON: a list of
    `{benchmark, description, presets, collectives: {kind: {count, in_loop}}}`,
    with `error` in place of `collectives` where the benchmark did not compile.
    """
    from concurrent.futures import ThreadPoolExecutor

    from rich.table import Table

    from autotune.ground.resources import usable_cpus
    from autotune.launch.inventory import collectives, describe, entry
    from autotune.launch.workloads import list_benchmarks, resolve_benchmark

    infos = [resolve_benchmark(n) for n in names] if names else list_benchmarks()
    with out.status("compiling each benchmark once (cached afterwards)..."), \
            ThreadPoolExecutor(max_workers=usable_cpus()) as pool:  # a child each, side by side
        rows = list(zip(infos, pool.map(lambda info: collectives(info, devices), infos),
                        strict=True))
    if fmt == OutputFormat.JSON:
        print_json([entry(info, found) for info, found in rows])
        return
    table = Table(width=TABLE_WIDTH)
    table.add_column("benchmark", no_wrap=True,  # never cut a name
                     min_width=max((len(info.name) for info in infos), default=9))
    table.add_column(f"collectives (tiny, {counted(devices, 'device')})", overflow="fold")
    table.add_column("description", overflow="fold", ratio=1)
    for info, found in rows:
        shown = literal(found) if isinstance(found, str) else "\n".join(
            literal(line) for line in describe(found).splitlines())
        table.add_row(literal(info.name), shown, literal(info.description))
    out.print(table)


def benchmarks_example(
    which: Annotated[str, typer.Argument(
        help="step (a workload file, for --script) or program (for --command).")] = "step",
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="File to write (default my_step.py or my_program.py here).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a file that exists.")] = False,
) -> None:
    """Write the README's example workload where you are, to edit into your own."""
    import shutil

    from autotune.ground.errors import UsageError
    from autotune.ground.resources import data_dir

    one_of(which, ["step", "program"], "example")
    source = data_dir("benchmarks") / "examples" / f"my_{which}.py"
    target = output or Path(source.name)
    if target.exists() and not force:
        raise UsageError(f"{target} exists: pass --force to replace it, or -o another file")
    shutil.copyfile(source, target)
    use = (f"autotune study --space cpu --script {target} --preset small" if which == "step"
           else f'autotune study --space cpu --command "python {target} --size 256"')
    out.print(f"wrote {literal(target)}; try: {literal(use)}", highlight=False, soft_wrap=True)


def spaces_show(name: Annotated[str, typer.Argument(help="Space name or YAML file.")],
                fmt: FormatOpt = OutputFormat.TABLE) -> None:
    """Show a space's parameters, their candidates and where each comes from.

    JSON: `spaces list`'s keys (the whole description), `params` (each `{name, flag, in_catalog,
    type, candidates, unset_allowed, source, only_when, group, exercised_by}`;
    `candidates` null for a continuous range, then `low`/`high`/`step`), `groups`
    (each `{name, params, description, choices: {label: flags}}`), `fixed` and
    `recommended` (flag: value).
    """

    from autotune import spaces
    from autotune.flags.catalog import source_text

    sp = spaces.load_space(name)
    if fmt == OutputFormat.JSON:
        print_json(_space_json(sp))
        return
    size = sp.size()
    out.print(f"[bold]{literal(sp.name)}[/] ({literal(sp.backend)}, {len(sp.params)} parameters, "
              f"{'continuous' if size is None else f'{size} configurations'})")
    for line in sp.description.strip().splitlines():
        out.print(literal(line), highlight=False)
    group_of = {m: g.name for g in sp.groups.values() for m in g.params}
    for param in sp.params.values():  # the flag's whole name on its own line, never cut
        out.print(f"[bold]{literal(param.flag)}[/]", highlight=False, soft_wrap=True)
        say(f"    {literal(param.describe())}")
        cond = sp.conditions.get(param.name)
        if cond:
            say(f"    only when {_fmt_when(cond)}")
        if param.name in group_of:
            say(f"    set by group {literal(group_of[param.name])} (below)")
        if param.exercised_by:
            say(f"    exercised by {literal(', '.join(param.exercised_by))}")
        source = param.source or _outside(param.flag)
        if source:
            say(f"    source: {literal(source_text(source))}")
    for group in sp.groups.values():
        _print_group(sp, group)
    if sp.fixed:
        out.print(f"fixed: {fmt_flags(dict(sp.fixed), ' ')}", highlight=False)
    rec = sp.recommended_config()
    out.print(f"recommended: {fmt_flags(rec, ' ') if rec else '(none documented)'}",
              highlight=False)


def _outside(flag: str) -> str | None:
    """"not in the catalog" for a flag outside it (`autotune.flags.open_flags`), else None."""
    from autotune.flags.catalog import load_catalog

    return None if flag in load_catalog() else "not in the catalog"


def _space_json(sp: Any) -> dict[str, Any]:
    """`spaces show --format json` (see there)."""
    group_of = {m: g.name for g in sp.groups.values() for m in g.params}
    params = []
    for param in sp.params.values():
        values = param.values()
        entry: dict[str, Any] = {
            "name": param.name, "flag": param.flag, "type": param.type,
            "candidates": None if values is None else list(values),
            "unset_allowed": param.allow_unset, "source": param.source,
            "in_catalog": _outside(param.flag) is None,
            "only_when": dict(sp.conditions.get(param.name) or {}) or None,
            "group": group_of.get(param.name), "exercised_by": list(param.exercised_by)}
        if values is None:
            entry.update(low=param.low, high=param.high, step=param.step)
        params.append(entry)
    groups = [{"name": g.name, "params": list(g.params), "description": g.description,
               "choices": {label: {sp.params[m].flag: v for m, v in g.values_of(choice).items()
                                   if v is not None}
                           for label, choice in _group_choices(g)}}
              for g in sp.groups.values()]
    return {**_space_summary(sp), "description": sp.description.strip(), "params": params,
            "groups": groups, "fixed": dict(sp.fixed), "recommended": sp.recommended_config()}


def _group_choices(group: Any) -> list[tuple[str, Any]]:
    """A group switch's choices with their labels: on, each variant, off."""
    return [("on", True), *((name, name) for name in group.variants), ("off", False)]


def _print_group(sp: Any, group: Any) -> None:
    """A group's line, then one line per choice of its switch: on, each variant, off."""
    out.print(f"group {literal(group.name)}: {literal(', '.join(group.params))} switched "
              f"together ({literal(group.description)})", highlight=False)
    for label, choice in _group_choices(group):
        values = {sp.params[m].flag: v for m, v in group.values_of(choice).items()
                  if v is not None}
        shown = fmt_flags(values, " ") if values else "XLA's defaults (every member unset)"
        out.print(f"  {literal(label)}: {shown}", highlight=False)


def _fmt_when(cond: Any) -> str:
    """A parameter's condition as `name=value and ...`, ready to print."""
    return " and ".join(f"{literal(k)}={literal(v)}" for k, v in cond.items())


def spaces_validate(file: Annotated[Path, typer.Argument(help="A space YAML file.")],
                    xla: Annotated[bool, typer.Option(
                        "--xla/--no-xla", help="Ask the installed XLA whether it knows each "
                        "flag (and parses the values of flags outside the catalog).")] = True,
                    fmt: FormatOpt = OutputFormat.TABLE) -> None:
    """Validate a space file (yours or a built-in one) against the schema, the catalog
    and the installed XLA.

    A flag outside the catalog must be one this XLA knows, with values it parses; a
    catalog flag must be one it knows (its values it rejects are left out of a study).
    JSON (a valid file): `{file, valid: true}` and `spaces list`'s keys. An invalid
    file is an error either way (one line on stderr, exit 2).
    """
    from autotune import spaces

    sp = spaces.load_space(str(file))
    if xla:
        _check_space_against_xla(sp, file)
    if fmt == OutputFormat.JSON:
        print_json({"file": str(file), "valid": True, **_space_summary(sp)})
        return
    size = sp.size()
    out.print(f"{literal(file)}: valid space '{literal(sp.name)}' ({literal(sp.backend)}), "
              f"{len(sp.params)} parameters, "
              f"{'continuous' if size is None else f'{size} configurations'}", highlight=False)


def _check_space_against_xla(sp: Any, file: Path) -> None:
    """Refuse a space with a flag this XLA does not know, or a value of a flag outside
    the catalog that it cannot parse (`lint.xla_refusals`, the words `flags check` uses)."""
    from autotune.flags.catalog import load_catalog
    from autotune.flags.lint import xla_refusals
    from autotune.ground.errors import SpaceValidationError

    catalog = load_catalog()
    values = {f: (v if f not in catalog else []) for f, v in sp.flag_values().items()}
    with out.status("asking the installed XLA..."):
        refused = xla_refusals(values, catalog.covering(values))
    if refused:
        raise SpaceValidationError(f"{file}: " + "; ".join(
            f"{finding.message} ({finding.fix})" for finding in refused))


def flags_list(
    backend: Annotated[str | None, typer.Option(help="gpu, tpu, cpu or any.")] = None,
    channel: Annotated[str | None, typer.Option(help="xla_flags, libtpu or env.")] = None,
    space: Annotated[str | None, typer.Option(help="Only the flags of this space.")] = None,
    every: Annotated[bool, typer.Option(
        "--all", help="Also every flag the installed XLA knows that the catalog does not "
        "(asked of jaxlib once per version, cached; the first time takes a minute).")] = False,
    fmt: FormatOpt = OutputFormat.TABLE,
) -> None:
    """List the flags autotune knows, with documented default and recommended values.

    With --all, also every flag the installed XLA's `XLA_FLAGS` knows outside the
    catalog (status "not in the catalog"; backend from its name: xla_gpu_ is gpu...),
    and catalog flags this XLA does not know say so. An unknown --backend or --channel
    is a UsageError (exit 2) naming the known ones, raised before anything is printed.
    JSON: a list of `{flag, type, default, recommended, backend, channel, status,
    in_catalog, known_to_xla}` (values as JSON; `status` "" for a current flag, else
    obsolete, deprecated, no effect or not in the catalog; `known_to_xla` null
    without --all).
    """
    from autotune import spaces
    from autotune.flags.catalog import Backend, Channel, load_catalog

    if backend is not None:
        one_of(backend, (b.value for b in Backend), "backend")
    if channel is not None:
        one_of(channel, (c.value for c in Channel), "channel")
    catalog = load_catalog()
    known = _known_to_xla() if every else None
    only = spaces.load_space(space).flags() if space else None
    rows = [_flag_row(spec, known) for spec in catalog]
    rows += [_open_row(name) for name in sorted(set(known or ()) - set(catalog.names()))]
    rows = [row for row in rows if backend in (None, row["backend"])
            and channel in (None, row["channel"]) and (only is None or row["flag"] in only)]
    if fmt == OutputFormat.JSON:
        print_json(rows)
        return
    _print_flags(rows)


def _known_to_xla() -> frozenset[str]:
    """Every flag the installed XLA's XLA_FLAGS knows (`flags.registry`)."""
    from autotune.flags.registry import known_flags

    with out.status("asking the installed XLA which flags it knows..."):
        return frozenset(known_flags().names)


def _flag_row(spec: Any, known: frozenset[str] | None) -> dict[str, Any]:
    """A catalog entry's row of `flags list`; `known`: what this XLA knows (or None)."""
    from autotune.flags.catalog import Channel

    knows = None if known is None or spec.channel is not Channel.XLA_FLAGS \
        else spec.name in known
    status = _status(spec)
    if knows is False and not status.startswith("obsolete"):
        status = ", ".join(filter(None, [status, "not known to this XLA"]))
    return {"flag": spec.name, "type": spec.type.value, "default": spec.default,
            "recommended": spec.recommended, "backend": spec.backend.value,
            "channel": spec.channel.value, "status": status, "in_catalog": True,
            "known_to_xla": knows}


def _open_row(name: str) -> dict[str, Any]:
    """The row of a flag this XLA knows outside the catalog (its backend from its name)."""
    backend = next((b for b in ("gpu", "cpu", "tpu") if name.startswith(f"xla_{b}_")), "any")
    return {"flag": name, "type": None, "default": None, "recommended": None,
            "backend": backend, "channel": "xla_flags", "status": "not in the catalog",
            "in_catalog": False, "known_to_xla": True}


def _print_flags(rows: list[dict[str, Any]]) -> None:
    """Each flag's whole name on a line of its own (never cut, whatever the width), and
    under it its type, documented default and recommended value, backend, channel and
    status, wrapped within `TABLE_WIDTH` at spaces only (a value such as a list of
    command-buffer kinds, or a replacement's flag name, stays whole on its line)."""
    for row in rows:
        facts = [row["type"] or "type not known", f"default {_show(row['default'])}",
                 f"recommended {_show(row['recommended'])}", row["backend"], row["channel"]]
        print_record(literal(row["flag"]), ", ".join(facts)
                     + (f"; {literal(row['status'])}" if row["status"] else ""))
    out.print(f"{len(rows)} flags", highlight=False)


def _show(value: Any) -> str:
    from autotune.flags.compose import render_value

    return "-" if value is None else literal(render_value(value))


def _status(spec: Any) -> str:
    """The flag's state in words, plain text: obsolete or deprecated (and what replaces
    it), no effect, or "" for a current flag."""
    if spec.obsolete is not None:
        replaced = spec.obsolete.replaced_by
        return "obsolete" + (f" → {replaced}" if replaced else "")
    if spec.deprecated is not None:
        return f"deprecated → {spec.deprecated.replaced_by}"
    return "no effect" if spec.no_effect else ""


def flags_show(name: Annotated[str, typer.Argument(help="Flag or variable name.")],
               fmt: FormatOpt = OutputFormat.TABLE) -> None:
    """Everything the catalog knows about one flag, and what the installed XLA says.

    A flag outside the catalog shows only its name, channel and `cataloged: false`,
    and is an error (exit 2) when this XLA does not know it either.

    JSON: the catalog's fields (as JSON, absent ones left out) and `this_xla`:
    `{status, jaxlib, rejects, words}` (`status` accepted, unknown, cannot_check,
    not_xla or not_probed).
    """
    from autotune.flags.catalog import UnknownFlagError, load_catalog
    from autotune.flags.probe import FlagStatus, probe

    catalog = load_catalog()
    spec = catalog.get(name.removeprefix("--"))
    with out.status("asking the installed XLA..."):
        report = probe(catalog, extra=[spec.name])
    if not spec.cataloged and report.status(spec.name) is FlagStatus.UNKNOWN:
        close = catalog.closest(spec.name)
        raise UnknownFlagError(
            f"unknown flag '{spec.name}': neither in autotune's flag catalog nor known to this "
            f"XLA (jaxlib {report.jaxlib_version}). "
            + (f"Did you mean '{close}'?" if close else "Check the spelling."))
    # a flag outside the catalog: what the catalog would say of it is not known
    known = None if spec.cataloged else {"name", "channel", "source", "cataloged"}
    if fmt == OutputFormat.JSON:
        print_json({**spec.model_dump(mode="json", exclude_none=True, include=known),
                    "this_xla": {
            "status": report.status(spec.name).value, "jaxlib": report.jaxlib_version,
            "rejects": list(report.rejected_values.get(spec.name) or []),
            "words": _probe_words(report, spec)}})
        return
    for key, value in spec.model_dump(exclude_none=True, include=known).items():
        text = _field_text(spec, key, value)
        if text is not None:
            out.print(f"{key:>14}: {literal(text)}", highlight=False)
    out.print(f"{'this XLA':>14}: {literal(_probe_words(report, spec))}", highlight=False)


def _field_text(spec: Any, key: str, value: Any) -> str | None:
    """A catalog field as `flags show` prints it: values as a flag string writes them, a
    byte count of a `_bytes` flag with its size (8589934592 (8 GiB)), lists joined, and
    None for what says nothing (an empty list, `allow_empty` of a flag that is no list,
    `cataloged` of a catalog entry, `after_hlo` of a flag the compiler's dump shows)."""
    from autotune.flags.compose import render_value

    if key == "allow_empty" and spec.type.value != "list" or key == "cataloged" and value \
            or key == "after_hlo" and not value:
        return None
    if isinstance(value, list | tuple):
        return ", ".join(_value_text(spec, v) for v in value) or None
    if isinstance(value, dict):
        return "; ".join(f"{k}: {v}" for k, v in value.items())
    if key in ("default", "recommended", "overrides_when", "min", "max"):
        return _value_text(spec, value)
    if key == "source":
        from autotune.flags.catalog import source_text

        return source_text(str(value))
    return render_value(value) if isinstance(value, bool) else str(value)


def _value_text(spec: Any, value: Any) -> str:
    from autotune.flags.compose import render_value

    text = render_value(value) if isinstance(value, bool | int | float | str) else str(value)
    sized = spec.name.endswith("_bytes") and isinstance(value, int) and \
        not isinstance(value, bool) and value >= 1024
    return f"{text} ({fmt_bytes(value)})" if sized else text


def _probe_words(report: Any, spec: Any) -> str:
    from autotune.flags.probe import FlagStatus

    status = report.status(spec.name)
    words = {
        FlagStatus.ACCEPTED: f"accepted by XLA_FLAGS (jaxlib {report.jaxlib_version})",
        FlagStatus.UNKNOWN: f"unknown to jaxlib {report.jaxlib_version}: a job with it aborts",
        FlagStatus.CANNOT_CHECK: "cannot be checked here (libtpu is not installed)",
        FlagStatus.NOT_XLA: "an environment variable, not an XLA flag: not checked",
        FlagStatus.NOT_PROBED: "not probed",
    }[status]
    rejected = report.rejected_values.get(spec.name)
    if rejected:
        words += f"; rejects {', '.join(repr(v) for v in rejected)}"
    if status is FlagStatus.ACCEPTED and spec.no_effect:
        words += f"; but does nothing any more: {spec.no_effect}"
    return words


def flags_check(
    flag_string: Annotated[list[str] | None, typer.Argument(
        metavar="FLAGS", help="An XLA_FLAGS string, e.g. \"--xla_gpu_graph_level=0\".")] = None,
    libtpu: Annotated[str, typer.Option(help="A LIBTPU_INIT_ARGS string.")] = "",
    env: Annotated[bool, typer.Option(
        "--env", help="Check $XLA_FLAGS, $LIBTPU_INIT_ARGS and the catalog's environment "
        "variables (NCCL_*, XLA_CLIENT_MEM_FRACTION...) set in this shell.")] = False,
    fmt: FormatOpt = OutputFormat.TABLE,
) -> None:
    """Lint a flag string against the catalog and the installed XLA; exit 1 on findings.

    JSON: `{jaxlib, checked, findings, aborting, unchecked}`, each finding `{flag, kind,
    would_abort, message, fix}`, `unchecked` the flags that cannot be checked here.
    """
    from autotune.flags.catalog import load_catalog
    from autotune.flags.lint import lint, parse_uses, probe_extra
    from autotune.flags.probe import probe
    from autotune.ground.errors import UsageError

    text = " ".join(flag_string) if flag_string else None
    if env:
        text, libtpu = os.environ.get("XLA_FLAGS", ""), os.environ.get("LIBTPU_INIT_ARGS", "")
    if text is None and libtpu:
        text = ""
    if text is None:
        raise UsageError("give a flag string to check, e.g. autotune flags check "
                         "\"--xla_gpu_graph_level=0\", or --env to check $XLA_FLAGS")
    uses = parse_uses(text, libtpu)
    catalog = load_catalog()
    if env:
        uses += _env_uses(catalog)
    with out.status("asking the installed XLA..."):
        report = probe(catalog, extra=probe_extra(uses, catalog))
    findings = lint(uses, catalog, report)
    if fmt == OutputFormat.JSON:
        print_json({"jaxlib": report.jaxlib_version, "checked": len(uses),
                    "findings": [{"flag": f.flag, "kind": f.kind.value,
                                  "would_abort": f.would_abort, "message": f.message,
                                  "fix": f.fix} for f in findings],
                    "aborting": sum(f.would_abort for f in findings),
                    "unchecked": _unchecked(uses, report)})
    else:
        _print_findings(findings, len(uses), report.jaxlib_version)
        _print_unchecked(uses, report)
    if findings:
        raise typer.Exit(1)


def _env_uses(catalog: Any) -> list[Any]:
    """The catalog's environment variables set in this shell, as flag uses."""
    from autotune.flags.catalog import Channel
    from autotune.flags.lint import FlagUse

    return [FlagUse(spec.name, os.environ[spec.name], Channel.ENV) for spec in catalog
            if spec.channel is Channel.ENV and spec.name in os.environ]


def _unchecked(uses: list[Any], report: Any) -> list[str]:
    """The flags used that cannot be checked here (libtpu's, without libtpu)."""
    from autotune.flags.probe import FlagStatus

    return sorted({u.name for u in uses if report.status(u.name) is FlagStatus.CANNOT_CHECK})


def _print_unchecked(uses: list[Any], report: Any) -> None:
    tpu = _unchecked(uses, report)
    if tpu:
        out.print(f"cannot be checked here (libtpu is not installed): "
                  f"{literal(', '.join('--' + n for n in tpu))}", highlight=False)


def _print_findings(findings: list[Any], count: int, jaxlib: str) -> None:
    """Each finding: its flag's whole name and kind on a line (never cut), what is wrong
    and the fix under it; then one line: flags checked, findings, how many abort a job
    (`Finding.would_abort`: unknown flags, values XLA rejects, wrong-channel flags...)."""
    checked = counted(count, "flag") + f" checked against jaxlib {jaxlib}"
    if not findings:
        out.print(f"{checked}: no findings", highlight=False)
        return
    for f in findings:
        kind = f.kind.value + (" (aborts)" if f.would_abort else "")
        out.print(f"{literal(f.flag)}: {kind}", highlight=False, soft_wrap=True)
        say(f"    {literal(f.message)}")
        say(f"    fix: {literal(f.fix)}")
    aborting = sum(f.would_abort for f in findings)  # wrong-channel flags included
    out.print(f"{checked}: {counted(len(findings), 'finding')}, {aborting} of which would "
              "abort the job at start", highlight=False)
