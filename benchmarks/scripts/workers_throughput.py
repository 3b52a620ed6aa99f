"""Trials per second of K workers on one PostgreSQL study, against one worker.

    AUTOTUNE_TEST_POSTGRES_URL=postgresql+psycopg://postgres@127.0.0.1:5432/test \\
        python benchmarks/scripts/workers_throughput.py --workers 4 --trials 400

Each worker is its own process running a real `autotune.study.runner.StudyRunner` (claims,
Optuna's RDB storage with heartbeats, the sampler, racing, the fitted space) on one
study in a schema of its own in the PostgreSQL at `--storage` (default the test URL),
exactly as `autotune worker` does (the space searched whole, not fitted, on the grid by
default: the table has 720 configurations, and a sampler that repeats measured ones
would measure its own repeats); only the trial child is replaced: each trial is
answered from a table recorded on a real machine (`benchmarks/tables/`,
`replay.TableLauncher`) after holding its "device" for `--device-s` seconds (a
compile-only answer for a fifth of that), the time a real trial spends on the
accelerator, during which a worker uses no CPU of its own. The figure is the wall time
for the study to hold `--trials` trials (or to run out of distinct configurations: the
recorded tables have 288), 1 worker against K, as trials stored per second; then the
counts that show
nothing was lost or measured twice: runs counted by `--trials`, configurations measured
more than once in the environment, claims left running, Optuna trials left RUNNING.

On a machine with fewer cores than workers the workers' own CPU (sampling, reading the
study) competes: the script prints the CPU count beside the figure.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def _schema_url(base: str) -> tuple[str, str]:
    """A new schema in the database at `base`, and the URL whose search path is it."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    schema = f"autotune_bench_{uuid.uuid4().hex[:10]}"
    engine = create_engine(base)
    with engine.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    engine.dispose()
    url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
    return schema, url.render_as_string(hide_password=False)


def _drop(base: str, schema: str) -> None:
    from sqlalchemy import create_engine, text

    engine = create_engine(base)
    with engine.begin() as connection:
        connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    engine.dispose()


def _plan(table_path: str, trials: int, sampler: str = "grid"):
    from autotune.launch.replay import ReplayTable
    from autotune.spaces import load_space
    from autotune.study.plan import StudyPlan

    table = ReplayTable.load(table_path)
    space = load_space(str(ROOT / table.meta["space"]))
    return table, StudyPlan.of(name="throughput", space=space,
                            workload=table.workload(ROOT),
                            trials=trials, heartbeat_s=10, sampler=sampler, fit=False)


def _worker(url: str, table_path: str, trials: int, seed: int, device_s: float,
            sampler: str) -> int:
    """One worker process: run the study until it holds its trials; return launches."""
    from autotune.flags.catalog import load_catalog
    from autotune.launch.replay import TableLauncher
    from autotune.storage.store import Store
    from autotune.study.runner import StudyRunner

    table, plan = _plan(table_path, trials, sampler)

    class Device(TableLauncher):
        def launch(self, request):  # the trial holds the device, then answers as recorded
            time.sleep(device_s if request.timed else device_s / 5)
            return super().launch(request)

    with Store.open(url) as store:
        plan = plan.__class__(**{**plan.__dict__, "seed": seed})
        runner = StudyRunner(plan, store, Device(table, load_catalog(), seed=seed), url)
        return runner.run().launched


def _measure(base: str, table_path: str, trials: int, workers: int, device_s: float,
             sampler: str) -> dict[str, object]:
    """Wall time of one study run by `workers` processes, and its counts."""
    from sqlalchemy import create_engine, text

    from autotune.storage.store import Store
    from autotune.study.runner import StudyRunner

    schema, url = _schema_url(base)
    try:
        _, plan = _plan(table_path, trials, sampler)
        with Store.open(url) as store:
            StudyRunner(plan, store, None, url).prepare()  # type: ignore[arg-type]
        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            start = time.perf_counter()
            launched = pool.starmap(_worker, [(url, table_path, trials, 100 + k, device_s,
                                               sampler) for k in range(workers)])
            wall = time.perf_counter() - start
        engine = create_engine(url)
        with engine.connect() as connection:
            roles = Counter(r for (r,) in connection.execute(text(
                "select role from autotune_runs")))
            flags = [json.dumps(f, sort_keys=True) for (f,) in connection.execute(text(
                "select flags from autotune_runs where role in "
                "('baseline', 'search', 'recommended')"))]
            running = connection.execute(text(
                "select count(*) from autotune_claims where state = 'running'")).scalar_one()
            open_trials = connection.execute(text(
                "select count(*) from trials where state = 'RUNNING'")).scalar_one()
        engine.dispose()
        counted = sum(roles[r] for r in ("baseline", "search", "recommended", "race"))
        return {"workers": workers, "trials": trials, "wall_s": round(wall, 2),
                "trials_per_s": round(counted / wall, 3), "launched": launched,
                "counted": counted, "measured_twice": sum(c > 1 for c in Counter(flags).values()),
                "claims_running": running, "optuna_running": open_trials}
    finally:
        _drop(base, schema)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--storage", default=os.environ.get("AUTOTUNE_TEST_POSTGRES_URL"),
                        help="a PostgreSQL URL (default: $AUTOTUNE_TEST_POSTGRES_URL)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--device-s", type=float, default=1.0,
                        help="seconds each timed trial holds the device (default 1.0)")
    parser.add_argument("--sampler", default="grid",
                        help="grid (default: every proposal is new, so the figure is the "
                             "workers' and not the sampler's repeats) or tpe, random")
    parser.add_argument("--table", default=str(ROOT / "benchmarks/tables/norm-act-small.json"))
    args = parser.parse_args()
    if not args.storage:
        parser.error("give --storage postgresql+psycopg://... or set AUTOTUNE_TEST_POSTGRES_URL")
    print(f"# {args.trials} trials on {Path(args.table).name}, {args.device_s} s per timed "
          f"trial, sampler {args.sampler}, {os.cpu_count()} CPUs")
    results = [_measure(args.storage, args.table, args.trials, k, args.device_s, args.sampler)
               for k in (1, args.workers)]
    for r in results:
        print(json.dumps(r))
    one, many = results
    for r in results:
        if r["counted"] < args.trials:
            print(f"note: with {r['workers']} worker(s) the study stopped at {r['counted']} "
                  f"trials: the table's space has no more distinct configurations")
    print(f"{args.workers} workers: x{many['trials_per_s'] / one['trials_per_s']:.2f} the "
          f"trials per second of 1 (goal x3.5); counted {many['counted']} of {args.trials}, "
          "measured "
          f"twice {many['measured_twice']}, claims left running {many['claims_running']}, "
          f"Optuna trials left RUNNING {many['optuna_running']}")


if __name__ == "__main__":
    main()
