"""Riding out a database server that goes away for a while: a restart, a failover, a
network that drops for seconds.

A study on PostgreSQL runs for hours; a server restarted under it (or a
network cut) must not end it. Every engine that talks to a server (autotune's
store and Optuna's storage) gets `ride_out_outages`: once the engine has
connected once, a new connection that cannot be made is tried again, with a
growing pause, for up to `patience_s()` seconds, and the study waits where it
stands. Pooled connections that died meanwhile are tested before use
(`pool_pre_ping`) and replaced through the same retry. The first connection
is never retried: a wrong URL, host or password is a mistake to report at
once, not an outage to wait for. A statement whose connection dies while it
runs fails (one line, `database_failure`), unless the store method that ran it
may run twice (a read, a heartbeat: `storage._base.asked_again`), which then
asks again on a new connection, and so waits here.

SQLite files are not served over a network and are left alone.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Engine, event

from autotune.ground.errors import UsageError
from autotune.ground.records import sqlite_file

log = logging.getLogger(__name__)

#: How long a process waits for a database server it reached before and cannot reach now.
DB_PATIENCE_S = 300.0
#: The environment variable that sets that wait, in seconds (0: do not wait).
PATIENCE_ENV = "AUTOTUNE_DB_PATIENCE_S"
#: The first pause between tries, doubled after each failed try up to `MAX_PAUSE_S`.
FIRST_PAUSE_S, MAX_PAUSE_S = 0.5, 8.0

_C = TypeVar("_C")


def patience_s() -> float:
    """The wait for a server that went away: `AUTOTUNE_DB_PATIENCE_S`, else `DB_PATIENCE_S`.

    Raises:
        UsageError: the variable is set to something other than a number of seconds >= 0.
    """
    text = os.environ.get(PATIENCE_ENV, "").strip()
    if not text:
        return DB_PATIENCE_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise UsageError(f"{PATIENCE_ENV}={text!r} is not a number of seconds; set it to how "
                         f"long to wait for a database server that went away (e.g. 300), "
                         f"or 0 not to wait")
    return value


def ride_out_outages(engine: Engine, shown: str, *, reached: bool = False) -> None:
    """Make `engine` wait for its server when it cannot connect again (see the module).

    Does nothing for a SQLite file. `shown` names the database in the messages logged
    (a warning when the server is gone, one when it is back); `reached`: the engine
    has connected already (Optuna's storage connects as it is made), so its next
    connection may already wait. Raises UsageError for a bad `AUTOTUNE_DB_PATIENCE_S`.
    """
    if engine.url.get_backend_name() == "sqlite" or sqlite_file(engine.url):
        return
    patience_s()  # a bad AUTOTUNE_DB_PATIENCE_S is a mistake to report now, not mid-study
    state = {"connected": reached}

    @event.listens_for(engine, "do_connect")
    def _connect(dialect: Any, record: Any, cargs: Any, cparams: Any) -> Any:
        def attempt() -> Any:
            return dialect.connect(*cargs, **cparams)

        if not state["connected"]:
            connection = attempt()  # the first: a mistake is reported at once
            state["connected"] = True
            return connection
        return patiently(attempt, dialect.loaded_dbapi.OperationalError, shown, patience_s())


def patiently(attempt: Callable[[], _C], transient: type[BaseException] | tuple[
        type[BaseException], ...], shown: str, patience: float,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic) -> _C:
    """`attempt()`, tried again after each `transient` error, with pauses from
    `FIRST_PAUSE_S` doubling to `MAX_PAUSE_S`, until `patience` seconds have passed since
    the first failure; then the last error is raised. Logs one warning when the first try
    fails and one when a later try succeeds."""
    started: float | None = None
    pause = FIRST_PAUSE_S
    while True:
        try:
            result = attempt()
        except transient as error:
            now = clock()
            if started is None:
                started = now
                log.warning("the database %s cannot be reached (%s); waiting up to %.0f s for "
                            "it to come back", shown, " ".join(str(error).split()), patience)
            left = started + patience - now
            if left <= 0:
                raise
            sleep(min(pause, left))
            pause = min(2 * pause, MAX_PAUSE_S)
            continue
        if started is not None:
            log.warning("the database %s is back after %.0f s", shown, clock() - started)
        return result
