"""autotune: find the best XLA compiler flags for a JAX workload.

Importing this package is cheap: it never imports jax, optuna or sqlalchemy.
Heavy modules are imported by the commands that need them.

Apply an exported configuration from Python with `load_config`:

    import autotune
    autotune.load_config("best.yaml").apply()   # before JAX starts its backend

Create, run and read studies with `Study` (see `autotune.api`):

    study = autotune.Study.create(space="cpu", benchmark="matmul", preset="tiny")
    study.run()
    study.export("best.yaml")
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.api import Study
    from autotune.api.config import Config

from autotune.ground.resources import VERSION as __version__

__all__ = ["Study", "__version__", "load_config"]


def __getattr__(name: str) -> type[Study]:
    """`autotune.Study`, imported on first use so that `import autotune` stays light."""
    if name == "Study":
        from autotune.api import Study

        return Study
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")


def load_config(path: str | os.PathLike[str], *, check: bool = True) -> Config:
    """Read and validate a file that `autotune export` wrote (see `autotune.api.config`).

    With `check` (the default) the installed XLA is asked whether it knows each
    `XLA_FLAGS` flag (a probe child, cached per jaxlib and flag set); `check=False`
    reads the file alone.

    Raises:
        autotune.ground.errors.ConfigFileError: the file is missing or unreadable, is
            neither YAML nor JSON, is not an export, holds another schema version, sets a
            flag that is neither in the catalog nor spelled like an XLA flag or a value
            the catalog does not allow, or (with `check`) a flag or value the installed
            XLA does not accept.
        autotune.flags.probe.ProbeError: with `check`, jax cannot be started to answer.
    """
    from autotune.api.config import load_config as load

    return load(path, check=check)
