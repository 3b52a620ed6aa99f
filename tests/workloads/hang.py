"""A workload that never finishes building (for the time limit).

It starts a grandchild process and writes its pid to $HANG_PID_FILE, so a test
can check that the whole process group was killed, not only the child.
"""

import os
import subprocess
import time

from autotune.bench import Workload


def workload(preset: str = "small") -> Workload:
    grandchild = subprocess.Popen(["sleep", "3600"])
    with open(os.environ["HANG_PID_FILE"], "w") as fh:
        fh.write(str(grandchild.pid))
    time.sleep(3600)
    raise AssertionError("unreachable")
