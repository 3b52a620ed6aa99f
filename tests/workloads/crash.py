"""A workload whose process dies of a signal while building its step."""

import os
import signal

from autotune.bench import Workload


def workload(preset: str = "small") -> Workload:
    os.kill(os.getpid(), signal.SIGSEGV)
    raise AssertionError("unreachable")
