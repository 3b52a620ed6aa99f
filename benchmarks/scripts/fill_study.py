"""Fill a study with thousands of recorded trials that look like a real one; time reading it.

Usage:
    python benchmarks/scripts/fill_study.py --storage sqlite:///big.db --trials 10000 \\
        [--name NAME] [--seed S] [--repeats R] [--in-flight]

`--storage` takes any store URL (`postgresql+psycopg://user@host/db` too).
The study is made the way `autotune study` makes one on the `cpu` space
(paired, transformer small, 8 host devices), from a seeded generator:

- the baseline (XLA's defaults against themselves: the A/A ratio) and one
  recommended configuration;
- `--trials` search runs, each a distinct configuration drawn from the cpu
  space's parameters plus the CPU flags its file lists as leaving the program
  unchanged (XNNPACK, Eigen threads, the ISA, the codegen split count, region
  analysis), so thousands of configurations collapse onto at most 180
  programs. A program timed before is mostly not timed again
  (`same_program_as`, the ratio of the trial that timed it), as compile before
  timing does; some are timed again (another process had it in flight). Ratios
  follow the flags' measured effects (optimisation level 0 about 2x slower)
  with lognormal noise; a run clearly slower than the best so far is
  `pruned` by the study's own rule, and about 2% fail in other ways;
- the confirmation of the top 3 (`ranked`, as `StudyRunner.confirm`
  chooses), 4 rounds each, with the baseline's own confirmation runs;
- the shrinking of the recommendation, run by `autotune.results.shrink`
  itself: it says what to measure next, this script makes it up;
- a DONE claim for every measured run and the shrinking's released claim;
- then the study ends as `study.service.finish` ends one: marked finished, its
  page computed once and kept (`publish_page`), so readers read no run; or,
  with `--in-flight`, two processes still measure it (two RUNNING claims) and
  every reader computes the page from the runs.

A study that already holds runs is not filled again: it is timed as it is.
Then each read is timed `--repeats` times (median and best, in seconds):
`Store.runs`, `autotune best NAME --format json` end to end (a process of its
own, and `Study(name, storage).best()` in this one), `recommend`,
`best_rows`, `study_notes`, `trial_rows`, `export_document`,
`confirmed_order`, and the study page's whole read (runs, rows,
recommendation, notes). The goal of each is under 1 second.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import math
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autotune.api import Study
from autotune.flags.catalog import load_catalog
from autotune.flags.compose import compose_env, config_key, effective_config
from autotune.ground.records import (
    Environment,
    FlagValue,
    Measurement,
    MeasureMode,
    NewRun,
    OutcomeKind,
    Role,
    RunRecord,
    TrialOutcome,
)
from autotune.launch.workloads import resolve_benchmark
from autotune.results.confirmation import needs_confirmation
from autotune.results.export import export_document
from autotune.results.notes import study_notes
from autotune.results.ranking import confirmed_order, ranked, recommend
from autotune.results.shrink import Step, shrink
from autotune.results.table import best_rows, trial_rows
from autotune.spaces import load_space
from autotune.spaces.params import Param
from autotune.spaces.space import Space
from autotune.storage.store import Store
from autotune.study.plan import StudyPlan
from autotune.study.service import publish_page

HOST = "bench-node-1"
OWNERS = ((HOST, 41001), (HOST, 41002))  # two processes ran the study
STEPS = 20
STEP_S = 0.0125  # the baseline's step on this made-up host
MiB = 1 << 20
GOAL_S = 1.0
REPEATS = 4  # confirmation rounds and shrinking repeats, as `autotune study` defaults

#: CPU flags that left the compiled program byte-identical (see search_spaces/cpu.yaml).
INERT = (
    Param("xla_cpu_use_xnnpack", "xla_cpu_use_xnnpack", "bool", choices=(False, True),
          allow_unset=True),
    Param("xla_cpu_multi_thread_eigen", "xla_cpu_multi_thread_eigen", "bool",
          choices=(False, True), allow_unset=True),
    Param("xla_cpu_max_isa", "xla_cpu_max_isa", "categorical", choices=("SSE4_2", "AVX", "AVX2"),
          allow_unset=True),
    Param("xla_cpu_parallel_codegen_split_count", "xla_cpu_parallel_codegen_split_count", "int",
          low=1, high=64, allow_unset=True),
    Param("xla_cpu_copy_insertion_use_region_analysis",
          "xla_cpu_copy_insertion_use_region_analysis", "bool", choices=(False, True),
          allow_unset=True),
)

#: How a tuned sampler leans after a while: optimisation level 0 is rarely proposed again.
WEIGHTS: dict[str, Sequence[float]] = {"xla_backend_optimization_level": (1, 1, 20, 20, 20)}

#: Measured effects of the program's flags on the step (search_spaces/cpu.yaml).
EFFECTS: dict[tuple[str, FlagValue], float] = {
    ("xla_backend_optimization_level", 0): 2.0, ("xla_backend_optimization_level", 1): 1.3,
    ("xla_backend_optimization_level", 2): 0.97, ("xla_cpu_use_fusion_emitters", False): 1.10,
    ("xla_cpu_prefer_vector_width", 128): 1.005, ("xla_cpu_prefer_vector_width", 512): 1.02,
    ("xla_cpu_enable_fast_math", True): 0.985, ("xla_cpu_fast_math_honor_nans", False): 0.996,
    ("xla_cpu_fast_math_honor_infs", False): 0.996,
    ("xla_cpu_fast_math_honor_division", False): 0.99,
    ("xla_cpu_fast_math_honor_functions", False): 0.995,
}

FAILURES: list[tuple[OutcomeKind, str]] = [
    (OutcomeKind.COMPILE_ERROR, "XlaRuntimeError: INTERNAL: Failed to compile the LLVM module: "
                                "instruction selection failed for a vector shuffle"),
    (OutcomeKind.TIMEOUT, "no result within 300 s; the process group was killed"),
    (OutcomeKind.CRASHED, "the child was killed by signal 11 (SIGSEGV)"),
    (OutcomeKind.OOM, "out of memory: RESOURCE_EXHAUSTED: Out of memory while trying to "
                      "allocate 2147483648 bytes."),
    (OutcomeKind.NUMERICS_MISMATCH, "output 0 (float32) differs from the baseline's by 0.0312 "
                                    "relative, over the 0.001 tolerance for float32: this "
                                    "configuration computes something else"),
    (OutcomeKind.NONFINITE, "the candidate's output holds NaN or Inf (the baseline's does not)"),
    (OutcomeKind.INVALID_VALUE, "illegal value '0' for --xla_cpu_parallel_codegen_split_count"),
]


class Draw:
    """A seeded stand-in for an Optuna trial: `Space.sample` asks it for each value."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def suggest_categorical(self, name: str, choices: Sequence[Any]) -> Any:
        weights = WEIGHTS.get(name)
        if weights is not None and len(weights) == len(choices):
            return self.rng.choices(list(choices), weights=list(weights))[0]
        return self.rng.choice(list(choices))

    def suggest_int(self, name: str, low: int, high: int, step: int = 1, log: bool = False) -> int:
        return self.rng.randrange(low, high + 1, step)

    def suggest_float(self, name: str, low: float, high: float, step: float | None = None,
                      log: bool = False) -> float:
        return self.rng.uniform(low, high)


@dataclass
class Filler:
    """The study being made up: its runs in the order they are stored, and its programs."""

    name: str
    space: Space
    catalog: Any
    rng: random.Random
    versions: tuple[str, str]
    runs: list[NewRun] = field(default_factory=list)
    records: list[RunRecord] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)  # configurations measured or claimed
    timed_by: dict[str, int] = field(default_factory=dict)  # program -> trial that timed it
    ratio_of: dict[int, float] = field(default_factory=dict)  # trial -> its ratio
    best: float = 1.0

    # --- the program model ---------------------------------------------------------------

    def program(self, flags: Mapping[str, FlagValue]) -> tuple[tuple[str, FlagValue], ...]:
        """What the compiler sees: the effective values of the cpu space's own flags (the
        fast-math guarantees only with fast math on)."""
        own = {p.flag for p in self.space.params.values()} - {p.flag for p in INERT}
        effective = effective_config(flags, self.catalog)
        if not effective.get("xla_cpu_enable_fast_math"):
            own = {flag for flag in own if not flag.startswith("xla_cpu_fast_math_honor")}
        return tuple(sorted((k, v) for k, v in effective.items() if k in own))

    def fingerprint(self, flags: Mapping[str, FlagValue]) -> str:
        text = config_key(dict(self.program(flags)))
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:32]

    def true_ratio(self, flags: Mapping[str, FlagValue]) -> float:
        """The program's step over the default program's (its unexplained part seeded by it)."""
        program = self.program(flags)
        if not program:
            return 1.0
        ratio = math.prod(EFFECTS.get(item, 1.0) for item in program)
        wobble = random.Random(config_key(dict(program))).lognormvariate(0, 0.01)
        return ratio * wobble

    # --- measurements --------------------------------------------------------------------

    def measurement(self, flags: Mapping[str, FlagValue], reference: float = 1.0,
                    steps: int = STEPS, timed: bool = True,
                    same_program_as: int | None = None) -> Measurement:
        """A PAIRED measurement of `flags` against a reference program of ratio `reference`
        (XLA's defaults: 1.0) in one process; nothing timed unless `timed`."""
        rng, ratio = self.rng, self.true_ratio(flags)
        process = STEP_S * rng.uniform(0.9, 1.3)  # noise is mostly per process
        cand = tuple(process * ratio * rng.lognormvariate(0, 0.02) for _ in range(steps))
        base = tuple(process * reference * rng.lognormvariate(0, 0.02) for _ in range(steps))
        program = self.program(flags)
        instructions = 2400 + 40 * len(program) + rng.randrange(0, 5)
        jax_version, jaxlib_version = self.versions
        return Measurement(
            step_times_s=cand if timed else (), compile_time_s=rng.uniform(1.5, 4.0),
            mode=MeasureMode.PAIRED, baseline_step_times_s=base if timed else (),
            first_step_time_s=process * 9 if timed else None,
            peak_memory_bytes=(96 + 4 * len(program)) * MiB, memory_source="memory_analysis",
            rss_peak_bytes=rng.randrange(900, 1100) * MiB,
            checksum=1234.5, baseline_checksum=1234.5 if timed else None,
            hlo_stats={"all-gather": 4, "all-reduce": 6 + len(program) % 2,
                       "reduce-scatter": 2, "collective-permute": len(program) % 3,
                       "all-to-all": 0, "fusion": 180 + 3 * len(program),
                       "instructions": instructions},
            fingerprint=self.fingerprint(flags), baseline_fingerprint=self.fingerprint({}),
            jax_version=jax_version, jaxlib_version=jaxlib_version, backend="cpu",
            device_kind="cpu", device_count=8,
            warmup_steps=rng.randrange(2, 7) if timed else None,
            warmup_settled=(rng.random() > 0.05) if timed else None,
            warmup_times_s=tuple(process * 2 / (k + 1) for k in range(3)) if timed else (),
            baseline_warmup_times_s=tuple(process * 2 / (k + 1) for k in range(3))
            if timed else (),
            output_dtype="float32", abs_sum=98765.25, numerics_error=2e-7 if timed else None,
            same_program_as=same_program_as,
        )

    def environment(self) -> Environment:
        return Environment(HOST, platform.python_version(), *self.versions, "cpu", "cpu", 8)

    def add(self, trial: int, role: Role, flags: Mapping[str, FlagValue], outcome: TrialOutcome,
            ratio: float | None = None, claim: str | None = None) -> RunRecord:
        """Queue one run (and keep its record, for the read model's own choices)."""
        m = outcome.measurement
        ratio = ratio if ratio is not None else (m.paired_ratio if m is not None else None)
        env = compose_env(flags, {}, self.catalog)
        run = NewRun(trial, role, dict(flags), env, outcome,
                     self.environment() if m is not None else None, ratio, HOST, claim,
                     self.rng.choice(OWNERS))
        record = RunRecord(len(self.records) + 1, self.name, trial, role, dict(flags), env,
                           outcome, datetime.now(UTC), run.environment, ratio, HOST)
        self.runs.append(run)
        self.records.append(record)
        return record

    # --- the phases ----------------------------------------------------------------------

    def key(self, flags: Mapping[str, FlagValue]) -> str:
        return config_key(effective_config(flags, self.catalog))

    def measure(self, trial: int, role: Role, flags: Mapping[str, FlagValue]) -> None:
        """One measured configuration, as `StudyRunner._launch` records it."""
        program = self.fingerprint(flags)
        ok = TrialOutcome(OutcomeKind.OK, "", None, duration_s=self.rng.uniform(8, 20),
                          exit_code=0)
        if role is Role.SEARCH and self.rng.random() < 0.02:
            kind, message = self.rng.choice(FAILURES)
            m = self.measurement(flags) if kind is OutcomeKind.NUMERICS_MISMATCH else None
            self.add(trial, role, flags, replace(ok, kind=kind, message=message, measurement=m,
                                                 exit_code=None if m is None else 0),
                     claim=self.key(flags))
            return
        prior = self.timed_by.get(program)
        if prior is not None and role is not Role.BASELINE and self.rng.random() < 0.95:
            m = self.measurement(flags, timed=False, same_program_as=prior)
            self.add(trial, role, flags, replace(ok, measurement=m), ratio=self.ratio_of[prior],
                     claim=self.key(flags))
            return
        m = self.measurement(flags)
        limit = 1.3 * self.best
        if role is Role.SEARCH and m.paired_ratio is not None and m.paired_ratio > limit:
            short = replace(m, step_times_s=m.step_times_s[:6],
                            baseline_step_times_s=m.baseline_step_times_s[:6])
            message = (f"stopped after 6 paired steps: {short.paired_ratio:.3f}x the baseline's "
                       f"step time, above the {limit:.3f} limit (clearly slower than the best "
                       "so far)")
            self.add(trial, role, flags, replace(ok, kind=OutcomeKind.PRUNED, message=message,
                                                 measurement=short), claim=self.key(flags))
            return
        run = self.add(trial, role, flags, replace(ok, measurement=m), claim=self.key(flags))
        assert run.ratio is not None
        self.timed_by.setdefault(program, trial)
        self.ratio_of[trial] = run.ratio
        if role is not Role.BASELINE:
            self.best = min(self.best, run.ratio)

    def search(self, trials: int, first: int) -> int:
        """`trials` distinct configurations from trial `first` on; returns the next number."""
        self.seen.update(self.key(r.flags) for r in self.records)
        number, made = first, 0
        while made < trials:
            flags, number = self.draw(), number + 1
            if self.key(flags) in self.seen:  # a repeated proposal: told its result only
                continue
            self.seen.add(self.key(flags))
            self.measure(number - 1, Role.SEARCH, flags)
            made += 1
        return number

    def draw(self) -> dict[str, FlagValue]:
        return self.space.sample(Draw(self.rng))  # type: ignore[arg-type]

    def unseen(self) -> dict[str, FlagValue]:
        """A configuration nothing measured nor claimed yet."""
        while self.key(flags := self.draw()) in self.seen:
            pass
        self.seen.add(self.key(flags))
        return flags

    def confirm(self, top: int = 3) -> None:
        """The top configurations, `REPEATS` rounds; each round starts with a process of
        the baseline alone (DIRECT: timed, no ratio), as a DIRECT study's rounds do."""
        targets = [r for r in ranked(self.records) if needs_confirmation(r)][:top]
        for round_ in range(REPEATS):
            alone = replace(self.measurement({}), mode=MeasureMode.DIRECT,
                            baseline_step_times_s=(), baseline_warmup_times_s=(),
                            baseline_checksum=None, baseline_fingerprint=None)
            self.add(0, Role.CONFIRM, {}, TrialOutcome(OutcomeKind.OK, "", alone, 9.0, 0),
                     claim=f"confirm:0:{round_}")
            for target in targets:
                assert target.trial_number is not None
                outcome = TrialOutcome(OutcomeKind.OK, "", self.measurement(target.flags),
                                       duration_s=self.rng.uniform(8, 20), exit_code=0)
                self.add(target.trial_number, Role.CONFIRM, target.flags, outcome,
                         claim=f"confirm:{target.trial_number}:{round_}")

    def shrink(self) -> int | None:
        """The recommendation's shrinking, each step as `results.shrink` asks; its trial."""
        rec = recommend(self.records)
        if rec.run is None:
            return None
        state = shrink(self.records, rec.run, self.catalog, REPEATS)
        while state.next is not None:
            for _ in range(state.next.runs):
                self.shrink_run(state.trial_number, state.next)
            state = shrink(self.records, rec.run, self.catalog, REPEATS)
        return state.trial_number

    def shrink_run(self, number: int, step: Step) -> None:
        reference = 1.0 if step.reference is None else self.true_ratio(step.reference)
        m = self.measurement(step.flags, reference=reference, timed=step.timed)
        if not step.timed:
            m = replace(m, baseline_fingerprint=None, checksum=None)
        self.add(number, step.role, step.flags,
                 TrialOutcome(OutcomeKind.OK, "", m, duration_s=self.rng.uniform(4, 20),
                              exit_code=0))


def study_plan(name: str, trials: int, seed: int) -> StudyPlan:
    return StudyPlan.of(name=name, space=load_space("cpu"),
                     workload=resolve_benchmark("transformer"), preset="small", devices=8,
                     trials=trials, seed=seed)


def fill(store: Store, plan: StudyPlan, seed: int, in_flight: bool = False) -> int:
    """Make the study up and store it; returns how many runs were stored. `in_flight`:
    two processes still measure it (two RUNNING claims); otherwise it finished and its
    page is kept, as `study.service.finish` does."""
    catalog = load_catalog()
    store.ensure_study(plan.name, plan.space_name, plan.workload.name, plan.options.preset,
                       plan.options.devices, plan.mode, space_backend=plan.space.backend,
                       objectives=["time"], plan=plan.recorded())
    wide = replace(plan.space, params={**plan.space.params, **{p.name: p for p in INERT}})
    versions = (_version("jax"), _version("jaxlib"))
    filler = Filler(plan.name, wide, catalog, random.Random(seed), versions)
    started = time.perf_counter()
    filler.measure(0, Role.BASELINE, {})
    filler.measure(1, Role.RECOMMENDED, {"xla_backend_optimization_level": 2,
                                         "xla_cpu_enable_fast_math": True})
    after = filler.search(plan.trials, 2)
    filler.confirm()
    shrunk = filler.shrink()
    made = time.perf_counter() - started
    started = time.perf_counter()
    store.record_runs(plan.name, filler.runs)
    stored = time.perf_counter() - started
    if shrunk is not None:  # the shrinking's claim, released at its end as the runner does
        _, claim = store.claim(plan.name, HOST, f"shrink:{shrunk}", Role.ABLATION, {}, shrunk,
                               OWNERS[0])
        assert claim is not None
        store.release(claim.id)
    if in_flight:
        for offset, owner in enumerate(OWNERS):  # two processes measure right now
            flags = filler.unseen()
            store.claim(plan.name, HOST, filler.key(flags), Role.SEARCH, flags, after + offset,
                        owner)
    else:  # the study ended as `study.service.finish` ends one
        store.mark_finished(plan.name, plan.trials)
        started = time.perf_counter()
        publish_page(store, plan.name)
        kept = time.perf_counter() - started
    print(f"made up {len(filler.runs)} runs in {made:.1f} s, stored them with their claims "
          f"in {stored:.1f} s (shrinking: {'trial ' + str(shrunk) if shrunk else 'none'})"
          + ("; two processes measure now" if in_flight else
             f"; the study finished, its page kept in {kept:.1f} s"))
    return len(filler.runs)


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "0.0"


# --- timing ------------------------------------------------------------------------------


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(median, best) seconds of `repeats` calls."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), min(times)


def _autotune_argv() -> list[str]:
    script = Path(sys.executable).with_name("autotune")
    if script.exists():
        return [str(script)]
    found = shutil.which("autotune")
    return [found] if found else [sys.executable, "-c", "from autotune.cli import main; main()"]


#: What `autotune best` imports and reads before it opens the database.
IMPORTS = ("import autotune.cli, autotune.cli.results, autotune.api, autotune.storage.store, "
           "autotune.results.ranking, autotune.results.notes, autotune.flags.catalog; "
           "autotune.flags.catalog.load_catalog()")


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)


def measure(url: str, name: str, repeats: int) -> list[tuple[str, float, float]]:
    """Every timing of the module docstring: (what, median s, best s)."""
    catalog = load_catalog()
    with Store.open(url, upgrade=False) as store:
        record = store.get_study(name)
        runs = store.runs(name)
        budget, objectives = record.memory_budget_bytes, record.objectives
        rows = best_rows(runs, catalog, memory_budget=budget, objectives=objectives)

        def page() -> None:
            got = store.runs(name)
            shown = best_rows(got, catalog, memory_budget=budget, objectives=objectives)
            recommend(got, objectives, budget)
            study_notes(record, got, shown)

        cases: list[tuple[str, Callable[[], object]]] = [
            (f"Store.runs ({len(runs)} runs)", lambda: store.runs(name)),
            ("recommend", lambda: recommend(runs, objectives, budget)),
            ("best_rows", lambda: best_rows(runs, catalog, memory_budget=budget,
                                            objectives=objectives)),
            ("study_notes", lambda: study_notes(record, runs, rows)),
            ("trial_rows", lambda: trial_rows(runs)),
            ("export_document", lambda: export_document(record, runs, catalog)),
            ("confirmed_order", lambda: confirmed_order(runs, budget)),
            ("study page: runs + best_rows + recommend + notes", page),
            ("Study(name, storage).best() in-process", lambda: Study(name, url).best()),
            ("the kept page, where current (Store.current_view, JSON decoded)",
             lambda: json.loads(store.current_view(name) or "null")),
        ]
        print("the study's kept page is "
              + ("current" if store.current_view(name) else "missing or behind the study"))
        figures = [(what, *timed(fn, repeats)) for what, fn in cases]
    best_argv = [*_autotune_argv(), "best", name, "--storage", url, "--format", "json"]
    figures.append(("`autotune best NAME --format json` (process)",
                    *timed(lambda: _run(best_argv), repeats)))
    figures.append(("`autotune best NAME` (table, process)",
                    *timed(lambda: _run(best_argv[:-2]), repeats)))
    figures.append(("  of which: start-up, imports, catalog (no database)",
                    *timed(lambda: _run([sys.executable, "-c", IMPORTS]), repeats)))
    figures.append(("  of which: python -c pass",
                    *timed(lambda: _run([sys.executable, "-c", "pass"]), repeats)))
    return figures


def report(figures: list[tuple[str, float, float]]) -> None:
    width = max(len(what) for what, _, _ in figures)
    print(f"{'what':<{width}}  {'median s':>9}  {'best s':>8}  goal < {GOAL_S:g} s")
    for what, median, best in figures:
        goal = "" if what.startswith("  ") else ("met" if median < GOAL_S else "NOT met")
        print(f"{what:<{width}}  {median:>9.3f}  {best:>8.3f}  {goal}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--storage", required=True,
                        help="store URL: sqlite:///FILE or postgresql+psycopg://user@host/db")
    parser.add_argument("--trials", type=int, default=10_000, help="search runs to make up")
    parser.add_argument("--name", default="big-cpu-transformer-small")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5, help="timings of each read")
    parser.add_argument("--in-flight", action="store_true",
                        help="leave two processes measuring it (no page kept: readers compute "
                             "it) instead of a finished study")
    args = parser.parse_args()
    with Store.open(args.storage) as store:
        held = (len(store.runs(args.name))
                if args.name in {s.name for s in store.list_studies()} else 0)
        if held:
            print(f"study {args.name!r} holds {held} runs already: timing it as it is")
        else:
            fill(store, study_plan(args.name, args.trials, args.seed), args.seed, args.in_flight)
    report(measure(args.storage, args.name, args.repeats))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
