"""Turn a flag configuration into environment variables or compiler options.

A configuration maps flag names (as in the catalog) to typed values. Flags on
the `xla_flags` channel become `--name=value` tokens of `XLA_FLAGS`, `libtpu`
flags tokens of `LIBTPU_INIT_ARGS`, and `env` flags variables of their own.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from autotune.flags.catalog import Catalog, Channel, FlagSpec, FlagType
from autotune.ground.errors import UsageError
from autotune.ground.records import FlagValue

#: The variable that carries the tokens of each token channel.
TOKEN_VARIABLES: dict[Channel, str] = {
    Channel.XLA_FLAGS: "XLA_FLAGS",
    Channel.LIBTPU: "LIBTPU_INIT_ARGS",
}

Token = tuple[str, str | None]


def render_value(value: FlagValue | Sequence[str]) -> str:
    """Write a value the way XLA's flag parser reads it.

    Booleans become `true`/`false`, integers decimal, floats their `repr`,
    strings stay as they are and a sequence of names is joined by commas.

    Args:
        value: a typed flag value, or a list of names for a list flag.

    Returns:
        The text that follows `=` in `--name=value`.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return value
    return ",".join(value)


def parse_flag_string(s: str) -> list[Token]:
    """Split an `XLA_FLAGS` (or `LIBTPU_INIT_ARGS`) string into (name, value) pairs.

    Tokens are separated by any whitespace; `--name=value` gives
    `(name, "value")` and `--name` gives `(name, None)`.

    Args:
        s: the flag string, e.g. `"--xla_cpu_enable_fast_math=true  --xla_dump_to=/tmp/d"`.

    Raises:
        UsageError: a token does not start with `--` or has no name.
    """
    tokens: list[Token] = []
    for token in s.split():
        if not token.startswith("--"):
            raise UsageError(
                f"flag string token '{token}' does not start with '--': write each flag "
                "as --name=value (or --name), separated by spaces; values cannot contain spaces"
            )
        name, sep, value = token[2:].partition("=")
        if not name:
            raise UsageError(f"flag string token '{token}' has no flag name after '--'")
        tokens.append((name, value if sep else None))
    return tokens


def format_tokens(tokens: Sequence[Token]) -> str:
    """Join (name, value) pairs back into a flag string (`--name=value --name2`)."""
    return " ".join(f"--{name}" if value is None else f"--{name}={value}" for name, value in tokens)


def xla_flags_string(config: Mapping[str, FlagValue], catalog: Catalog) -> str:
    """Return only the configuration's `XLA_FLAGS` tokens, e.g. for export.

    Raises:
        UnknownFlagError: a flag of the configuration is not in the catalog.
        UsageError: a value contains whitespace, which XLA_FLAGS cannot carry.
    """
    return format_tokens(_channel_tokens(config, catalog, Channel.XLA_FLAGS))


def compose_env(
    config: Mapping[str, FlagValue], base_env: Mapping[str, str], catalog: Catalog
) -> dict[str, str]:
    """Return the environment variables that deliver `config` to a new process.

    Only the variables to set are returned; the caller overlays them on its
    environment. `XLA_FLAGS` and `LIBTPU_INIT_ARGS` keep the user's own tokens
    from `base_env` in their order, except those the configuration sets again
    (the configuration wins), followed by the configuration's tokens. A channel
    the configuration does not use is left out, so an empty configuration
    gives an empty dict.

    Args:
        config: flag name -> typed value.
        base_env: the environment the process would otherwise get.
        catalog: where each flag's channel is looked up.

    Raises:
        UnknownFlagError: a flag of the configuration is not in the catalog.
        UsageError: a value contains whitespace, or the user's flag string is malformed.
    """
    env: dict[str, str] = {}
    for channel, variable in TOKEN_VARIABLES.items():
        tokens = _channel_tokens(config, catalog, channel)
        if tokens:
            env[variable] = _merge(base_env.get(variable, ""), tokens)
    for name, value in config.items():
        if catalog.get(name).channel is Channel.ENV:
            env[name] = render_value(value)
    return env


def compiler_options(
    config: Mapping[str, FlagValue], catalog: Catalog
) -> dict[str, FlagValue] | None:
    """Return the typed options for `compile(compiler_options=...)`, if there are any.

    Args:
        config: flag name -> typed value.
        catalog: where each flag's channel and `per_compile` are looked up.

    Returns:
        The options dict (empty for an empty configuration), or None when some
        flag cannot be given per compilation (it is not `per_compile` or not an
        `XLA_FLAGS` flag): then the configuration must go through the environment.

    Raises:
        UnknownFlagError: a flag of the configuration is not in the catalog.
    """
    options, environment_only = split_per_compile(config, catalog)
    return None if environment_only else options


def split_per_compile(
    config: Mapping[str, FlagValue], catalog: Catalog
) -> tuple[dict[str, FlagValue], dict[str, FlagValue]]:
    """Split a configuration into what one compilation can take and what it cannot.

    Returns:
        (options, environment_only): `options` are the typed
        `compile(compiler_options=...)` entries of the per-compile `XLA_FLAGS`
        flags; `environment_only` maps every other flag (not per-compile, or on
        the `LIBTPU_INIT_ARGS` or env channel) to its value: those reach XLA
        only through the environment of a process that has not started JAX.

    Raises:
        UnknownFlagError: a flag of the configuration is not in the catalog.
    """
    options: dict[str, FlagValue] = {}
    environment_only: dict[str, FlagValue] = {}
    for name, value in config.items():
        spec = catalog.get(name)
        if spec.per_compile and spec.channel is Channel.XLA_FLAGS:
            options[name] = _typed_option(spec, value)
        else:
            environment_only[name] = value
    return options, environment_only


def _typed_option(spec: FlagSpec, value: FlagValue) -> FlagValue:
    # compiler_options wants the proto's enum names for list flags
    # ("ALLREDUCE,ALLGATHER") where XLA_FLAGS takes the documented lower case.
    if spec.type is FlagType.LIST and isinstance(value, str):
        return value.upper()
    return value


def _channel_tokens(
    config: Mapping[str, FlagValue], catalog: Catalog, channel: Channel
) -> list[Token]:
    tokens: list[Token] = []
    for name, value in config.items():
        if catalog.get(name).channel is channel:
            text = render_value(value)
            if any(char.isspace() for char in text):
                raise UsageError(
                    f"the value {text!r} of flag {name} contains whitespace, which "
                    f"{TOKEN_VARIABLES[channel]} cannot carry: use a value without spaces"
                )
            tokens.append((name, text))
    return tokens


def _merge(user_flags: str, tokens: list[Token]) -> str:
    ours = {name for name, _ in tokens}
    kept = [(name, value) for name, value in parse_flag_string(user_flags) if name not in ours]
    return format_tokens(kept + tokens)


def effective_config(flags: Mapping[str, FlagValue], catalog: Catalog) -> dict[str, FlagValue]:
    """The flags of a configuration that change something: those set to XLA's default go.

    Two configurations with the same effective config ask XLA for the same
    thing ("unset" and "=default" alike), so a study measures it once. A flag
    the catalog does not know, or whose default it does not state, is kept.
    """
    out: dict[str, FlagValue] = {}
    for name, value in flags.items():
        default = catalog.get(name).default if name in catalog else None
        if default is None or not _same(value, default):
            out[name] = value
    return out


def after_hlo_text(config: Mapping[str, FlagValue], catalog: Catalog) -> str:
    """The part of `config` a program's fingerprint must add to the compiler's dump: its
    effective flags that act after the optimised HLO (catalog `after_hlo`, e.g. CUDA
    graphs), as `config_key` text; "" where it has none. Two configurations that compile
    to one HLO but differ here run different executables."""
    return config_key({name: value for name, value in effective_config(config, catalog).items()
                       if name in catalog and catalog.get(name).after_hlo})


def config_key(flags: Mapping[str, FlagValue]) -> str:
    """A canonical text of a configuration (sorted `--name=value` tokens), for lookups."""
    return " ".join(f"--{name}={render_value(value)}" for name, value in sorted(flags.items()))


def _same(value: object, default: object) -> bool:
    """Equality that keeps booleans apart from numbers (`True` is not `1`)."""
    return value == default and isinstance(value, bool) == isinstance(default, bool)


#: A name a POSIX shell can assign.
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def shell_exports(env: Mapping[str, str]) -> list[str]:
    """`export NAME='value'` lines a POSIX shell can source, one per variable.

    Every value is quoted with `shlex.quote`, so no value can run a command or
    expand a variable.

    Raises:
        UsageError: a variable name a shell cannot assign.
    """
    for name in env:
        if not _SHELL_NAME.fullmatch(name):
            raise UsageError(f"variable name {name!r} cannot be set by a shell; "
                             "use the YAML or JSON form instead")
    return [f"export {name}={shlex.quote(str(value))}" for name, value in env.items()]
