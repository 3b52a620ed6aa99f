"""How fast the dashboard answers on a large study: the study page, cold and warm.

Usage:
    python benchmarks/scripts/fill_study.py --storage sqlite:///big.db --trials 10000
    python benchmarks/scripts/dashboard_speed.py --storage sqlite:///big.db \\
        [--name big-cpu-transformer-small] [--repeats 10]

Starts a real `autotune dashboard` process on a free port of 127.0.0.1 and
times, over HTTP:

1. the study page asked for the moment the server listens: it waits for the
   server's first reading of the study (the page its last process kept, where
   the study has not changed since; else every run, then the page computed);
2. `--repeats` more (the page is kept until the study changes: each costs the
   version query and the template), and likewise the studies page, the
   version poll every open page makes, a trial page and the study's JSON;
3. the study page after one more run is stored (a copy of the last search run
   under a new trial number, written through the store, as a running study
   would): the server reads only the new run and computes the page again.

Prints each figure (seconds: the first, then median and worst of the repeats)
and whether it meets the goal of an answer under 1 second. Step 3 writes to
the database: point it at a benchmark's database, not a study you keep.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from urllib.parse import quote

GOAL_S = 1.0


def fetch(url: str) -> tuple[float, int]:
    """(seconds, bytes) of one GET."""
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        body = response.read()
    return time.perf_counter() - start, len(body)


def serve(storage: str) -> tuple[subprocess.Popen[str], str]:
    """`autotune dashboard` on a free port; its process and base URL."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "from autotune.cli import main; main()", "dashboard",
         "--storage", storage, "--port", "0", "--refresh", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
    if found is None:
        proc.kill()
        raise SystemExit(f"the dashboard did not start: {line}{proc.stdout.read()}")
    return proc, f"http://127.0.0.1:{found.group(1)}"


def show(label: str, first: float, again: list[float], size: int) -> None:
    worst = max([first, *again])
    print(f"{label[-48:]:<48} {first:8.3f} {statistics.median(again):8.3f} "
          f"{worst:8.3f} {size:10d}  {'met' if worst < GOAL_S else 'MISSED'}")


def append_run(storage: str, name: str) -> None:
    """Store one more run: the last search run again, under a new trial number."""
    from autotune.ground.records import Role
    from autotune.storage.store import Store

    with Store.open(storage) as store:
        runs = store.runs(name)
        last = next(r for r in reversed(runs) if r.role is Role.SEARCH)
        number = max(r.trial_number or 0 for r in runs) + 1
        store.record_run(name, number, last.role, last.flags, last.env, last.outcome,
                         last.environment, ratio=last.ratio, env_key=last.env_key)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--storage", required=True)
    parser.add_argument("--name", default="big-cpu-transformer-small")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--trial", type=int, default=1, help="the trial page to time")
    args = parser.parse_args()
    proc, base = serve(args.storage)
    study = f"/study/{quote(args.name, safe='')}"
    paths = [study, "/", f"/api/study/{quote(args.name, safe='')}/version",
             f"{study}/trial/{args.trial}", f"/api/study/{quote(args.name, safe='')}"]
    try:
        print(f"{'GET':<48} {'first':>8} {'median':>8} {'worst':>8} {'bytes':>10}  goal < 1 s")
        for path in paths:
            first, size = fetch(base + path)
            again = [fetch(base + path)[0] for _ in range(args.repeats)]
            show(path, first, again, size)
        append_run(args.storage, args.name)
        first, size = fetch(base + study)
        again = [fetch(base + study)[0] for _ in range(args.repeats)]
        show(f"{study} (1 run more)", first, again, size)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
