"""`autotune dashboard` (serve the studies of a database) and `autotune report` (one file)."""

# Imports inside the commands are lazy on purpose: `autotune --help` and every command's
# start load only what that command needs (no Optuna, SQLAlchemy, numpy or jinja2).

from __future__ import annotations

import contextlib
import errno
import socket
from pathlib import Path
from typing import Annotated

import typer

from autotune.cli._common import DEFAULT_STORAGE, StorageOpt, literal, open_store, out
from autotune.ground.errors import UsageError
from autotune.ground.resources import install_line, missing_modules


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port), or one clear error when it cannot be had.

    Raises:
        UsageError: the port is taken, or the address is not one of this machine's.
    """
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise UsageError(f"cannot listen on host {host!r}: {exc.strerror}; "
                         "give --host 127.0.0.1 or an address of this machine") from exc
    sock = socket.socket(info[0], socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(info[4])
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(f"port {port} on {host} is in use (another dashboard?): "
                             "pass --port P with a free port, or --port 0 for any") from exc
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}; "
                         "give --host 127.0.0.1 or another --port") from exc
    sock.listen(128)
    return sock


#: The names of this machine's loopback interface: a dashboard on one of them answers to all.
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def served_hosts(host: str, extra: list[str]) -> list[str]:
    """The host names a dashboard listening on `host` answers to: that address (every
    loopback name for a loopback address; this machine's names and addresses for a
    wildcard one, 0.0.0.0 or ::), and each of `extra` (`--allow-host`, for a proxy or a
    DNS name of the machine)."""
    if host in LOOPBACK:
        names = list(LOOPBACK)
    elif host in ("0.0.0.0", "::", ""):
        names = [*LOOPBACK, socket.gethostname(), socket.getfqdn()]
        with contextlib.suppress(OSError):
            names += [str(i[4][0]) for i in socket.getaddrinfo(socket.gethostname(), None)]
    else:
        names = [host]
    names = [n.lower() for n in [*names, *extra] if n]
    # A Host header writes an IPv6 address in brackets ("[::1]:8080"), and so is compared.
    return list(dict.fromkeys([*names, *(f"[{n}]" for n in names if ":" in n)]))


def dashboard(
    storage: StorageOpt = DEFAULT_STORAGE,
    port: Annotated[int, typer.Option(min=0, max=65535,
                                      help="Port to serve on (0: any free one).")] = 8080,
    host: Annotated[str, typer.Option(
        help="Address to listen on. The default serves this machine only; the dashboard has "
             "no login, so think before you open it to a network.")] = "127.0.0.1",
    refresh: Annotated[float, typer.Option(
        min=0, help="Seconds between checks for new results (pages reload when their "
                    "study changed; 0: never).")] = 5.0,
    allow_host: Annotated[list[str] | None, typer.Option(
        "--allow-host", help="Also answer requests for this host name (repeatable): the "
        "name a proxy or a DNS entry gives the dashboard. Others are refused.")] = None,
) -> None:
    """Serve a read-only web dashboard of the studies in the database.

    Pages: the studies, each study's recommendation, best trials, charts,
    flag contributions, failures and progress, each trial, comparisons of
    two trials or two studies, and the export of any trial. It never writes
    to the database, and needs no internet (every asset is served locally).
    """
    needs_extra("autotune dashboard", ("starlette", "uvicorn", "jinja2", "plotly"))
    import uvicorn

    from autotune.dashboard.app import create_app

    store = open_store(storage, must_exist=True)
    sock = bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    out.print(f"autotune dashboard at http://{literal(shown)}:{bound}/ (Ctrl-C stops it)",
              highlight=False, soft_wrap=True)
    app = create_app(store, refresh_s=refresh, warm=True,
                     allowed_hosts=served_hosts(host, allow_host or []))
    config = uvicorn.Config(app, log_level="warning", lifespan="off")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn shut down cleanly, then passed the signal on
        out.print("dashboard stopped", highlight=False)
    finally:
        sock.close()
        store.close()


def needs_extra(what: str, modules: tuple[str, ...]) -> None:
    """Refuse `what` by name when modules of the `dashboard` extra are not installed.

    Raises:
        UsageError: naming the missing modules and the install line.
    """
    missing = missing_modules("dashboard", modules)
    if missing:
        raise UsageError(f"{what} needs the dashboard extra ({', '.join(missing)} not "
                         f"installed): {install_line('dashboard')}")


def default_report_path(study_name: str, fmt: str) -> Path:
    """STUDY.FMT in the current folder, whatever the name holds: a `/`, `..`, a leading
    dot or a character a file name should not carry becomes `_` (a study named
    `../../x` writes `_.._x.html` here, never outside it)."""
    import re

    safe = re.sub(r"[^A-Za-z0-9._-]", "_", study_name).lstrip(".") or "study"
    return Path(f"{safe}.{fmt}")


def report(
    study_name: Annotated[str, typer.Argument(metavar="STUDY", help="Study name.")],
    output: Annotated[Path | None, typer.Option(
        "-o", "--output", help="File to write (default STUDY.html, or STUDY.md).")] = None,
    storage: StorageOpt = DEFAULT_STORAGE,
    fmt: Annotated[str, typer.Option(
        "--format", help="html (one self-contained file that opens offline) or md "
                         "(Markdown with PNG charts beside it, for a pull request).")] = "html",
) -> None:
    """Write a study's page as one file to share: the recommendation, best trials, charts,
    flag contributions, failures and progress, exactly as the dashboard shows them."""
    from autotune.api import one_of

    one_of(fmt, ["html", "md"], "report format")
    needs_extra(f"autotune report --format {fmt}", ("jinja2", "matplotlib"))  # charts
    from autotune.dashboard.report import write_report

    store = open_store(storage, must_exist=True)
    target = output or default_report_path(study_name, fmt)
    written = write_report(store, study_name, target, fmt)
    out.print(f"wrote {literal(target)}" + (f" and {len(written) - 1} chart(s) beside it"
                                            if len(written) > 1 else ""), highlight=False)
