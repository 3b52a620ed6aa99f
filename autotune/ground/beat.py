"""A heartbeat: a daemon thread that calls `beat()` every few seconds for a block.

Two things beat this way: a claim of autotune's (`study.heartbeat.claim_heartbeat`,
`Store.beat`) and an Optuna trial (`storage._optuna.beating`, which replaces Optuna's
own thread: that one ends at the first failed beat). One loop serves both.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from autotune.ground.proc import deferred_interrupt

log = logging.getLogger(__name__)


@contextmanager
def beating(beat: Callable[[], bool | None], every_s: float, what: str, *,
            first_now: bool = False,
            reason: Callable[[BaseException], str] = str) -> Iterator[None]:
    """Call `beat()` every `every_s` seconds for the block (also at once with `first_now`),
    from a daemon thread named after `what` ("claim 7", "trial 3").

    A beat that raises (the database away, locked, restarting) is logged once per run
    of failures, in `reason`'s words, and tried again at the next beat: it never ends
    the block. A beat that returns False ends the thread (nothing is left to keep
    alive). Contract: however the block ends, Ctrl-C included, the thread has stopped
    when this returns; starting and stopping it are shielded from stop signals, which
    are raised once it runs, or once it has stopped.
    """
    stop = threading.Event()
    thread = threading.Thread(target=_loop, args=(beat, every_s, what, first_now, reason, stop),
                              name=f"autotune-{what.replace(' ', '-')}-heartbeat", daemon=True)
    try:
        with deferred_interrupt():
            thread.start()
        yield
    finally:
        with deferred_interrupt():
            stop.set()
            if thread.ident is not None:
                thread.join()


def _loop(beat: Callable[[], bool | None], every_s: float, what: str, first_now: bool,
          reason: Callable[[BaseException], str], stop: threading.Event) -> None:
    failing = False
    if not first_now and stop.wait(every_s):
        return
    while True:
        try:
            alive = beat()
            failing = False
        except Exception as error:  # whatever failed: say so once, keep trying
            if not failing:
                log.warning("cannot record the heartbeat of %s (will keep trying): %s",
                            what, reason(error))
            failing, alive = True, None
        if alive is False or stop.wait(every_s):
            return
