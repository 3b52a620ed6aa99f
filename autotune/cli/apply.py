"""`autotune apply CONFIG -- CMD`: run a command with an exported configuration.

The configuration is checked against the installed XLA first (as `flags check`
does: unknown, obsolete, wrong-channel flags and values XLA rejects are
refused unless `--force`), and against this machine (another backend is
refused unless `--force`; another device kind or count, jax or jaxlib version
is a warning). It is merged with the user's own `XLA_FLAGS` (the
configuration wins; each conflict is listed on stderr), then the command
replaces this process (`os.execvpe`), so its signals and exit code are the
job's own. `--print` writes the variables as `export NAME='value'` lines
instead, for `eval "$(autotune apply best.yaml --print)"`.
"""

# Imports inside the commands are lazy on purpose: `autotune --help` and every command's
# start load only what that command needs (no Optuna, SQLAlchemy, numpy or jinja2).

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from autotune.cli._common import err, literal

if TYPE_CHECKING:
    from autotune.api.config import Config, MeasuredOn
    from autotune.flags.catalog import Catalog
    from autotune.flags.lint import Finding, FlagUse
    from autotune.flags.probe import ProbeReport

#: The host platform's device count flag: on a CPU the job chooses its device count.
_DEVICE_COUNT_FLAG = "xla_force_host_platform_device_count"


def apply(
    config: Annotated[Path, typer.Argument(
        metavar="CONFIG", help="A file `autotune export` wrote (YAML or JSON).")],
    command: Annotated[list[str] | None, typer.Argument(
        metavar="CMD", help="The command to run (after --) and its arguments.")] = None,
    print_env: Annotated[bool, typer.Option(
        "--print", help="Print `export NAME='value'` lines for a shell to eval, run nothing.")
    ] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Run even with flags this XLA refuses, or on another backend.")] = False,
) -> None:
    """Run CMD with an exported configuration, merged with your own XLA_FLAGS.

    `autotune apply best.yaml -- python train.py`, or in a shell
    `eval "$(autotune apply best.yaml --print)"`. Exit codes: CMD's own; 2 for a bad
    file, a refused configuration or no CMD; 127 when CMD cannot be run.
    """
    from autotune.api.config import load_config

    loaded = load_config(config, check=False)  # asked below, where --force can overrule it
    argv = _command(command, print_env, config)
    env = _merged(loaded)
    _check_against_this_xla(loaded, env, force)
    for conflict in loaded.conflicts(os.environ):
        shown = "--" + conflict.name if conflict.name != conflict.variable else conflict.name
        _warn(f"your {conflict.variable} sets {shown}={conflict.user_value or 'true'}; "
              f"the configuration's {shown}={conflict.config_value} wins")
    if print_env:
        typer.echo(exports(env), nl=False)
        return
    _exec(argv, {**os.environ, **env})


def _merged(loaded: Config) -> dict[str, str]:
    """The variables to set, merged with this shell's; its flag strings must parse."""
    from autotune.ground.errors import ConfigRefusedError, UsageError

    try:
        return loaded.environ(os.environ)
    except UsageError as exc:
        raise ConfigRefusedError(f"your own XLA_FLAGS or LIBTPU_INIT_ARGS cannot be merged "
                                 f"with {loaded.path}: {exc.message}") from None


def _command(command: list[str] | None, print_env: bool, config: Path) -> list[str]:
    """The command to run; none with --print, one without it."""
    from autotune.ground.errors import ConfigRefusedError

    if print_env and command:
        raise ConfigRefusedError("give either --print or a command to run, not both")
    if not print_env and not command:
        raise ConfigRefusedError(
            f"no command to run: write it after --, e.g. autotune apply {config} -- python "
            f"train.py, or print the variables with autotune apply {config} --print")
    return command or []


def exports(env: Mapping[str, str]) -> str:
    """`export NAME='value'` lines a POSIX shell can source (`compose.shell_exports`)."""
    from autotune.flags.compose import shell_exports

    if not env:
        return "# autotune apply: nothing to set (the configuration is XLA's defaults)\n"
    return "".join(line + "\n" for line in shell_exports(env))


def _check_against_this_xla(loaded: Config, env: Mapping[str, str], force: bool) -> None:
    """Probe the installed XLA; refuse what the job would abort on and another backend."""
    from autotune.flags.catalog import load_catalog
    from autotune.flags.lint import lint, probe_extra
    from autotune.flags.probe import probe

    catalog = loaded.catalog()
    uses = job_uses(loaded, {**os.environ, **env}, catalog)
    with err.status("asking the installed XLA..."):
        report = probe(load_catalog(), extra=probe_extra(uses, load_catalog()))
    findings = lint(uses, catalog, report)
    bad = refused(findings)
    _refuse_or_warn(loaded, bad, report.jaxlib_version, force)
    for finding in (f for f in findings if f not in bad):
        _warn(f"{finding.message} ({finding.fix})")
    _compare_machine(loaded, report, {**os.environ, **env}, force)


def job_uses(loaded: Config, job_env: Mapping[str, str], catalog: Catalog) -> list[FlagUse]:
    """Every flag the job will get: the merged token variables, then env-channel flags."""
    from autotune.flags.catalog import Channel
    from autotune.flags.compose import render_value
    from autotune.flags.lint import FlagUse, parse_uses

    uses = parse_uses(job_env.get("XLA_FLAGS", ""), job_env.get("LIBTPU_INIT_ARGS", ""))
    uses += [FlagUse(name, render_value(value), Channel.ENV) for name, value in
             loaded.flags.items() if catalog.get(name).channel is Channel.ENV]
    return uses


def refused(findings: list[Finding]) -> list[Finding]:
    """The findings `apply` refuses: unknown, obsolete, on the wrong channel, or aborting."""
    from autotune.flags.lint import FindingKind

    kinds = (FindingKind.UNKNOWN, FindingKind.OBSOLETE, FindingKind.WRONG_CHANNEL)
    return [f for f in findings if f.would_abort or f.kind in kinds]


def _refuse_or_warn(loaded: Config, bad: list[Finding], jaxlib: str, force: bool) -> None:
    from autotune.ground.errors import ConfigRefusedError

    if not bad:
        return
    what = "; ".join(f.message.rstrip(".") for f in bad)
    if force:
        _warn(f"--force: running anyway although {what}")
        return
    raise ConfigRefusedError(
        f"{loaded.path} cannot run as it is on this XLA (jaxlib {jaxlib}): {what}. Fix the "
        "file (or your own XLA_FLAGS), or pass --force to run it anyway")


def _compare_machine(loaded: Config, report: ProbeReport, job_env: Mapping[str, str],
                     force: bool) -> None:
    """Refuse another backend (unless `force`); warn once per other difference."""
    on = loaded.measured_on
    _check_backend(loaded, report.backend, force)
    here = {"device kind": report.device_kind,
            "device count": _device_count(report, job_env),
            "jax": report.jax_version, "jaxlib": report.jaxlib_version}
    there = {"device kind": on.device_kind, "device count": on.device_count,
             "jax": on.jax, "jaxlib": on.jaxlib}
    for fact, value in there.items():
        if value is not None and here[fact] is not None and str(value) != str(here[fact]):
            _warn(f"measured with {fact} {value}, this machine has {here[fact]}: "
                  "the measured speedup may not hold here"
                  + (f" (a CPU's devices are what XLA_FLAGS gives the job: "
                     f"--{_DEVICE_COUNT_FLAG}={value} as the study had)"
                     if fact == "device count" and report.backend == "cpu" else ""))


def _check_backend(loaded: Config, backend: str, force: bool) -> None:
    from autotune.ground.errors import BackendMismatchError

    other = _other_backend(loaded.measured_on, backend)
    if other is None:
        return
    message = (f"{loaded.path} was {other}, but JAX reports {backend} here: its flags "
               "would not act as measured")
    if force:
        _warn(f"--force: running anyway although {message}")
        return
    raise BackendMismatchError(f"{message}. Apply it where JAX sees that backend, or pass "
                               "--force to run it anyway")


def _other_backend(on: MeasuredOn, backend: str) -> str | None:
    """How the configuration's backend differs from `backend`, or None when it does not."""
    if on.backend not in (None, backend):
        return f"measured on {on.backend}"
    if on.space_backend not in (None, "any", backend):
        return f"made for {on.space_backend} (space {on.space})"
    return None


def _device_count(report: ProbeReport, job_env: Mapping[str, str]) -> int | None:
    """The job's device count: on a CPU the one its XLA_FLAGS force, else the probe's."""
    from autotune.flags.compose import parse_flag_string

    if report.backend == "cpu":
        forced = dict(parse_flag_string(job_env.get("XLA_FLAGS", ""))).get(_DEVICE_COUNT_FLAG)
        if forced is not None and forced.isdigit():
            return int(forced)
    return report.device_count


def _warn(text: str) -> None:
    """One line on stderr; `text` is outside text (flag values, file names)."""
    err.print(f"warning: {literal(text)}", highlight=False, soft_wrap=True)


def _exec(argv: list[str], env: dict[str, str]) -> None:
    """Replace this process by `argv` (searched on PATH) with `env`.

    Raises:
        CommandNotFoundError: the program is not found or cannot be executed.
    """
    from autotune.ground.errors import CommandNotFoundError

    sys.stdout.flush()
    sys.stderr.flush()
    # Python ignores SIGPIPE and SIGXFSZ; the job must not inherit that. A failed exec puts
    # them back, so this process (a test runner calling the CLI in-process, say) is not
    # killed later by a write to a closed socket.
    ignored = [getattr(signal, n) for n in ("SIGPIPE", "SIGXFSZ") if hasattr(signal, n)]
    before = {sig: signal.signal(sig, signal.SIG_DFL) for sig in ignored}
    try:
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError:
        where = "does not exist" if os.sep in argv[0] else "is not found on PATH"
        raise CommandNotFoundError(f"command '{argv[0]}' {where}: install it, or give its "
                                   "path") from None
    except OSError as exc:
        raise CommandNotFoundError(f"command '{argv[0]}' cannot be run: {exc.strerror}; "
                                   "check that it is an executable program") from None
    finally:  # reached only when the exec failed
        for sig, handler in before.items():
            signal.signal(sig, handler)
