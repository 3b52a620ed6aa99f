"""Flags: the catalog of known flags and the composer that delivers a configuration.

`load_catalog()` reads the packaged `catalog.yaml`; `compose_env`,
`compiler_options` and `xla_flags_string` turn a configuration (flag name ->
typed value) into what a trial process needs. Importing this package imports
neither jax nor optuna.
"""

from autotune.flags.catalog import (
    Backend,
    Catalog,
    Channel,
    FlagSpec,
    FlagType,
    UnknownFlagError,
    load_catalog,
    parse_catalog,
)
from autotune.flags.compose import (
    compiler_options,
    compose_env,
    format_tokens,
    parse_flag_string,
    render_value,
    xla_flags_string,
)

__all__ = [
    "Backend",
    "Catalog",
    "Channel",
    "FlagSpec",
    "FlagType",
    "UnknownFlagError",
    "compiler_options",
    "compose_env",
    "format_tokens",
    "load_catalog",
    "parse_catalog",
    "parse_flag_string",
    "render_value",
    "xla_flags_string",
]
