"""The flag probe's child (see `autotune.flags.probe`); it imports jax, the parent never does.

The parent runs this file's source with `python -c` in a fresh interpreter whose
`XLA_FLAGS` hold the flags under test, in a scratch working directory. Starting
the backend makes XLA parse the flags (and abort on a bad one). The child then
writes `probe.json`: versions, backend, device kind and count, the host, Python's
version, the backend's platform version (on CUDA it names the CUDA version), whether
libtpu is installed and, when `options.json` (name -> typed value) is present, which
names `compile(compiler_options=...)` knows.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
from typing import Any


def known_options(lowered: Any, pending: dict[str, Any]) -> dict[str, bool]:
    """Name -> whether compiler_options knows it: all at once, dropping each name an error
    names; one at a time for what is left if an error names none."""
    found: dict[str, bool] = {}
    while pending:
        try:
            lowered.compile(compiler_options=pending)
            return found | dict.fromkeys(pending, True)
        except Exception as exc:  # any error is an answer here
            text = str(exc)
            hit = [n for n in pending if f"option: '{n}'" in text or f"option {n}," in text]
            if not hit:
                break
            found[hit[0]] = "No such compile option" not in text
            del pending[hit[0]]
    for name, value in pending.items():
        try:
            lowered.compile(compiler_options={name: value})
            found[name] = True
        except Exception as exc:
            found[name] = "No such compile option" not in str(exc)
    return found


def main() -> None:
    import jax
    import jax.numpy as jnp

    device = jax.devices()[0]
    info: dict[str, Any] = {
        "jax_version": jax.__version__,
        "jaxlib_version": importlib.metadata.version("jaxlib"),
        "backend": jax.default_backend(),
        "device_kind": device.device_kind,
        "device_count": jax.device_count(),
        "libtpu": importlib.util.find_spec("libtpu") is not None,
        "host": platform.node(),
        "python_version": platform.python_version(),
        "platform_version": str(getattr(getattr(device, "client", None), "platform_version",
                                        "") or ""),
    }
    if os.path.exists("options.json"):
        with open("options.json", encoding="utf-8") as fh:
            options = json.load(fh)
        lowered = jax.jit(lambda x: x + 1).lower(jnp.ones(2))
        info["per_compile"] = known_options(lowered, options)
    with open("probe.json", "w", encoding="utf-8") as fh:
        json.dump(info, fh)


if __name__ == "__main__":
    main()
