"""Where the data folders (search spaces, benchmarks, migrations) are found; the version.

In an installed wheel they live inside the package at `autotune/_data/<name>`
(pyproject's hatch `force-include` copies them there); in a source checkout
they live at the top of the repository. The packaged location is tried first.
"""

from __future__ import annotations

from pathlib import Path

#: This autotune's version (`autotune.__version__`; a worker's recipe compares it).
VERSION = "0.1.0"

#: The name autotune is installed by (`pip install xla-autotune`): the package index's
#: `autotune` is another project. The import package and the command stay `autotune`.
DISTRIBUTION = "xla-autotune"

#: The optional parts: an extra's name -> the modules it brings (pyproject's extras).
EXTRAS = {"dashboard": ("starlette", "uvicorn", "jinja2", "plotly", "matplotlib"),
          "postgres": ("psycopg",)}


def install_line(extra: str) -> str:
    """The pip command that installs autotune with `extra`."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def missing_modules(extra: str, modules: tuple[str, ...] | None = None) -> list[str]:
    """Which of `modules` (default: all of the extra's) cannot be imported here."""
    import importlib.util

    return [name for name in (modules or EXTRAS[extra])
            if importlib.util.find_spec(name) is None]

def usable_cpus(most: int = 8) -> int:
    """The CPUs this process may use (its affinity where the OS tells it), at least 1 and
    at most `most`: how many independent children to run at once."""
    import os

    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(most, cpus))


DATA_DIRS = ("search_spaces", "benchmarks", "alembic")

#: the autotune package (this module lives in `autotune/ground/`)
_PACKAGE = Path(__file__).resolve().parents[1]
_PACKAGE_DATA = _PACKAGE / "_data"
_CHECKOUT_ROOT = _PACKAGE.parent


def cache_root() -> Path:
    """Where autotune caches answers of the installed jaxlib (the flag probe, the flag
    registry, workload inventories, audit spaces): `$AUTOTUNE_CACHE_DIR`, else
    `~/.cache/autotune`."""
    import os

    return Path(os.environ.get("AUTOTUNE_CACHE_DIR", "~/.cache/autotune")).expanduser()


def data_dir(name: str) -> Path:
    """Return the folder holding one kind of bundled data.

    Args:
        name: one of `search_spaces`, `benchmarks` or `alembic`.

    Returns:
        The packaged folder `autotune/_data/<name>` when it exists, else the
        folder `<name>` at the root of the source checkout.

    Raises:
        ValueError: `name` is not one of the known data folders.
        FileNotFoundError: neither location holds the folder.
    """
    if name not in DATA_DIRS:
        raise ValueError(f"unknown data folder {name!r}; expected one of {', '.join(DATA_DIRS)}")
    packaged = _PACKAGE_DATA / name
    if packaged.is_dir():
        return packaged
    checkout = _CHECKOUT_ROOT / name
    # The marker keeps an installed package from picking up an unrelated
    # top-level folder of site-packages (the `alembic` library itself).
    if checkout.is_dir() and (_CHECKOUT_ROOT / "pyproject.toml").is_file():
        return checkout
    raise FileNotFoundError(
        f"autotune's {name!r} folder is missing: looked in {packaged} (installed package) "
        f"and {checkout} (source checkout). Reinstall autotune, or run it from a checkout."
    )


def source_digest() -> str:
    """16 hex digits of SHA-256 over autotune's installed Python sources (each file's path
    relative to the package, then its bytes, in sorted order).

    Two installations that measure the same way give the same digest; workers of one
    study must agree on it (`autotune.api.join_study`). Computed once per process.
    """
    global _DIGEST
    if _DIGEST is None:
        import hashlib

        package = _PACKAGE
        digest = hashlib.sha256()
        for path in sorted(package.rglob("*.py")):
            if "_data" in path.relative_to(package).parts:
                continue
            digest.update(path.relative_to(package).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
        _DIGEST = digest.hexdigest()[:16]
    return _DIGEST


_DIGEST: str | None = None
