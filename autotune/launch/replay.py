"""Launchers that answer from recorded outcomes instead of running JAX.

The double for hardware and time we do not have. `ReplayLauncher` hands out
outcomes given in code, in order and cycled (tests of confirmation, ranking,
failures). `TableLauncher` answers from a `ReplayTable`, an exhaustive table
measured on a real machine and kept under `benchmarks/tables/`, drawing each
answer from the recorded repeats so the search sees the real noise: the
search benchmark and the search tests run on it without JAX.
"""

from __future__ import annotations

import gzip
import json
import random
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import cycle
from pathlib import Path
from typing import Any

from autotune.flags import compose
from autotune.ground.protocol import PRUNE_AFTER, result_of
from autotune.ground.records import FlagValue, Measurement, MeasureMode, OutcomeKind, TrialOutcome
from autotune.launch.launcher import Launcher, TrialRequest
from autotune.launch.workloads import WorkloadInfo, resolve_benchmark, resolve_script
from autotune.rules.measurement import measurement_from_result
from autotune.rules.stats import paired_ratio
from autotune.rules.stopping import prune_point, prune_verdict

TABLE_KIND = "autotune-replay-table"
TABLE_SCHEMA_VERSION = 1

ConfigKey = frozenset[tuple[str, FlagValue]]


def config_key(flags: Mapping[str, FlagValue]) -> ConfigKey:
    """A hashable key of a configuration."""
    return frozenset(flags.items())


class ReplayLauncher(Launcher):
    """Replays recorded outcomes per configuration (see the module docstring).

    Args:
        table: configuration key -> the outcomes recorded for it, in order.
        default: outcomes for configurations missing from the table; None makes
            a missing configuration a CRASHED outcome that names it.
    """

    def __init__(self, table: Mapping[ConfigKey, Sequence[TrialOutcome]],
                 default: Sequence[TrialOutcome] | None = None) -> None:
        self._streams: dict[ConfigKey, Iterator[TrialOutcome]] = {
            key: cycle(list(outcomes)) for key, outcomes in table.items() if outcomes}
        self._default = cycle(list(default)) if default else None
        self.launched: list[Mapping[str, FlagValue]] = []

    def launch(self, request: TrialRequest) -> TrialOutcome:
        self.launched.append(dict(request.flags))
        stream = self._streams.get(config_key(request.flags), self._default)
        if stream is None:
            return TrialOutcome(OutcomeKind.CRASHED,
                                f"no recorded outcome for {dict(request.flags)}")
        return next(stream)


class TableError(ValueError):
    """A recorded table file that is missing, malformed or of another schema version."""


@dataclass(frozen=True)
class ReplayTable:
    """An exhaustive recorded table (see `benchmarks/scripts/record_table.py`).

    Attributes:
        path: the file it was read from.
        meta: how it was made (benchmark, preset, space, repeats, versions, command).
        flags: key -> the effective configuration (`config_key` of it is the key).
        runs: key -> the recorded runs of that configuration, one per repeat
            (result bodies as the trial child writes them: status, step times...).
        programs: key -> the program fingerprint XLA compiled the configuration
            to (`autotune.child.program.program_fingerprint`), where the table has it.
        long_runs: key -> runs of confirmation length (`record_table.py --long-for`: more
            steps per process than `meta["steps"]`), for the few leading programs that have
            them.
    """

    path: Path
    meta: Mapping[str, Any]
    flags: Mapping[str, Mapping[str, FlagValue]]
    runs: Mapping[str, Sequence[Mapping[str, Any]]]
    programs: Mapping[str, str] = field(default_factory=dict)
    long_runs: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | str) -> ReplayTable:
        """Read and check a table file (gzip-compressed where its name ends in `.gz`).

        Raises:
            TableError: unreadable, not JSON, not a replay table, or another schema version.
        """
        file = Path(path)
        try:
            raw = file.read_bytes()
            doc = json.loads(gzip.decompress(raw) if file.suffix == ".gz" else raw)
        except (OSError, EOFError, ValueError) as exc:  # EOFError: a cut gzip stream
            raise TableError(f"cannot read the replay table {file}: {exc}") from None
        if not isinstance(doc, dict) or doc.get("kind") != TABLE_KIND:
            raise TableError(f"{file} is not a replay table (kind: {TABLE_KIND})")
        if doc.get("schema_version") != TABLE_SCHEMA_VERSION:
            raise TableError(f"{file}: schema_version {doc.get('schema_version')!r} is not "
                             f"{TABLE_SCHEMA_VERSION}; record the table again")
        entries = doc.get("entries", [])
        flags = {compose.config_key(e["flags"]): e["flags"] for e in entries}
        runs = {compose.config_key(e["flags"]): e["runs"] for e in entries}
        programs = {compose.config_key(e["flags"]): e["program"] for e in entries
                    if e.get("program")}
        long_runs = {compose.config_key(e["flags"]): e["long_runs"] for e in entries
                     if e.get("long_runs")}
        meta = {k: v for k, v in doc.items() if k != "entries"}
        return cls(file, meta, flags, runs, programs, long_runs)

    @cached_property
    def long_comparable(self) -> bool:
        """The runs of confirmation length were recorded on the kind of machine the table's
        own runs were: every `long` record's `vector_isa` is the table's (`made_on`), both
        known. One program's ratio differs between CPUs (norm-act's table on a CPU with
        AVX-512 and its table without), so runs from another kind would confirm another
        machine's gain: the launcher then joins the table's own runs instead."""
        isa = (self.meta.get("made_on") or {}).get("vector_isa")
        records = self.meta.get("long") or []
        return bool(isa and records) and all(r.get("vector_isa") == isa for r in records)

    def workload(self, root: Path) -> WorkloadInfo:
        """The workload the table was recorded on: its `script` (a path relative to the
        checkout `root`, e.g. a corpus file) or else its built-in `benchmark`.

        Raises:
            WorkloadError: the script is gone; UnknownBenchmarkError: no built-in has the name.
        """
        script = self.meta.get("script")
        if script:
            return resolve_script(str(root / script))
        return resolve_benchmark(self.meta["benchmark"])

    def true_ratio(self, key: str) -> float | None:
        """The configuration's time ratio: the median of its program's OK repeats (None if none).

        Configurations that XLA compiled to the same program (same fingerprint)
        run the same code, so their repeats are pooled: one program measured 20
        times is a better estimate than four of them measured 5 times each, and
        the table's best is then no longer just the luckiest of several equal
        programs. Without fingerprints, a configuration's own repeats. The
        median, not the mean: one disturbed process among the repeats (seen
        here: a 0.75 among repeats near 0.95) must not make a configuration the
        table's best.
        """
        return self._truth.get(key)

    def pooled_repeats(self, key: str) -> list[float]:
        """The OK repeats' ratios of every configuration compiled to `key`'s program."""
        return self._pools.get(self._program_of(key), [])

    @cached_property
    def _pools(self) -> dict[tuple[str, str], list[float]]:
        """Program (or, without a fingerprint, the configuration) -> its repeats' ratios."""
        pools: dict[tuple[str, str], list[float]] = defaultdict(list)
        for key in self.runs:
            pools[self._program_of(key)].extend(self.repeat_ratios(key))
        return dict(pools)

    @cached_property
    def _truth(self) -> dict[str, float]:
        """key -> `true_ratio`, computed once for the whole table (linear in its repeats)."""
        return {key: statistics.median(pool) for key in self.runs
                if (pool := self.pooled_repeats(key))}

    def _program_of(self, key: str) -> tuple[str, str]:
        program = self.programs.get(key)
        return ("program", program) if program else ("configuration", key)

    def program_runs(self, key: str, long: bool = False) -> list[Mapping[str, Any]]:
        """The recorded runs of every configuration compiled to `key`'s program (without a
        fingerprint, the configuration's own): its ordinary runs, or with `long` its runs
        of confirmation length."""
        program = self.programs.get(key)
        members = [key] if program is None else self.members(program)
        recorded = self.long_runs if long else self.runs
        return [run for k in members for run in recorded.get(k, ())]

    def members(self, program: str) -> list[str]:
        """The keys of the configurations compiled to `program`, sorted."""
        return self._members.get(program, [])

    @cached_property
    def _members(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = defaultdict(list)
        for key in sorted(self.runs):
            if key in self.programs:
                out[self.programs[key]].append(key)
        return dict(out)

    def distinct_programs(self) -> int | None:
        """How many distinct programs the table's configurations compiled to (None if unknown)."""
        return len(set(self.programs.values())) if self.programs else None

    def repeat_ratios(self, key: str) -> list[float]:
        """The time ratio of each OK repeat of the configuration (failures left out)."""
        return [r for r in (_run_ratio(run) for run in self.runs.get(key, ())) if r]

    def ratios(self) -> dict[str, float]:
        """key -> `true_ratio` of every configuration with an OK repeat."""
        return dict(self._truth)

    def flatness(self, within: float) -> float:
        """The share of configurations whose ratio is within `within` (0.02: 2%) of the best."""
        ratios = self.ratios()
        best = min(ratios.values())
        return sum(r <= best * (1 + within) for r in ratios.values()) / len(ratios)


class TableExhausted(Exception):
    """A `TableLauncher` that may not serve a recorded process twice was asked for one
    more process of a program than the table holds (`reuse=False`)."""


class TableLauncher(Launcher):
    """Answers each trial from a `ReplayTable`, the noise drawn from the recorded repeats.

    A request is looked up by its effective configuration and answered as a
    real child would: a timed answer is one recorded process of the
    configuration's program (`_draw`: the repeats of every configuration
    compiled to it, without replacement, seeded), failures included, with the
    table's fingerprints of the program and of the baseline's; a program in
    the request's `known_programs`, or a compile-only request (`timed=False`),
    is compiled only (`_compiled_only`). With `prune_ratio` or `prune_curve`
    set, the child's pruning rules (`autotune.rules.stopping`) are applied to the
    recorded steps, so pruned trials come out as they would have.

    With `long_after` set (the table's own steps, as the search benchmarks set it), a
    request for more steps than that (a confirmation of `--confirm-steps`) is answered by
    `_long`: one recorded run of confirmation length of the program where the table has
    them from its own kind of machine (`ReplayTable.long_runs`, `long_comparable`), cut
    to the steps asked for, else recorded processes of the program joined end to end.
    `served` counts
    the answers of each kind ("long", "joined"), so a benchmark can say how many of its
    long answers were measured as such.

    A table holds a finite number of recorded processes of each program. Once a study has
    drawn all of them, the next draw starts another round of the same processes, which
    the study's statistics then count as new, independent ones: its intervals come out
    narrower than the table can support. `served["reused"]` counts such draws and
    `reused` names the programs drawn so; with `reuse` False the launcher raises
    `TableExhausted` instead, so a benchmark can say what a study gets from the table's
    fresh processes alone.

    Args:
        table: the recorded table.
        catalog: the flag catalog (XLA's defaults, to find the effective configuration).
        seed: seed of the draws.
        long_after: requests of more steps than this are served by `_long`; None: every
            request from the table's runs, whatever its steps.
        reuse: serve a program's recorded processes again once all were drawn (True),
            or raise `TableExhausted` (False).
    """

    def __init__(self, table: ReplayTable, catalog: Any, seed: int | None = None,
                 long_after: int | None = None, reuse: bool = True) -> None:
        self.table = table
        self.long_after = long_after
        self.catalog = catalog
        self.rng = random.Random(seed)
        self.launched: list[str] = []
        self._rounds: dict[tuple[str, ...], list[Mapping[str, Any]]] = {}
        self.served: Counter[str] = Counter()
        self.reuse = reuse
        self._filled: Counter[tuple[str, ...]] = Counter()  # rounds begun, per pool
        #: the programs (configuration keys, where a table has no fingerprints) of which a
        #: recorded process was drawn a second time
        self.reused: set[str] = set()

    def launch(self, request: TrialRequest) -> TrialOutcome:
        key = compose.config_key(compose.effective_config(request.flags, self.catalog))
        self.launched.append(key)
        runs = self.table.runs.get(key)
        if not runs:
            return TrialOutcome(OutcomeKind.CRASHED, f"the replay table has no entry {key!r}")
        program = self.table.programs.get(key)
        known = request.job.known_programs.get(program) if program else None
        if known is not None or not request.timed:
            return self._compiled_only(runs, program, known)
        steps = request.job.steps
        long_ = self.long_after is not None and steps > self.long_after
        run = self._long(key, steps) if long_ else self._draw(key)
        outcome = _outcome(run, request.job.prune_ratio, request.job.prune_curve)
        return self._fingerprinted(outcome, program)

    def _draw(self, key: str, source: str = "runs") -> Mapping[str, Any]:
        """One recorded process of the configuration's program, drawn without replacement
        (a shuffled round of its pooled repeats, then the next round): two re-measurements
        are two distinct recorded processes, as two real ones would be, and one lucky
        process is not drawn again until every other repeat has been (a draw of a later
        round is counted in `served["reused"]`, or refused under `reuse` False). `source`
        "long_runs" draws from the runs of confirmation length (there must be some).

        Raises:
            TableExhausted: `reuse` is False and every recorded process was drawn.
        """
        program = self.table.programs.get(key)
        pool = (source, *(("program", program) if program else ("configuration", key)))
        stack = self._rounds.setdefault(pool, [])
        if not stack:
            if self._filled[pool] and not self.reuse:
                raise TableExhausted(f"the table holds no further recorded process of {key!r}")
            stack.extend(self.table.program_runs(key, long=source == "long_runs"))
            self.rng.shuffle(stack)
            self._filled[pool] += 1
        if self._filled[pool] > 1:
            self.served["reused"] += 1
            self.reused.add(program or key)
        return stack.pop()

    def _has_long(self, key: str) -> bool:
        """The program has runs of confirmation length from the table's kind of machine."""
        return self.table.long_comparable and bool(self.table.program_runs(key, long=True))

    def _long(self, key: str, steps: int) -> Mapping[str, Any]:
        """A process of `steps` steps: the program's runs of confirmation length where the
        table has them, else its ordinary runs, drawn (`_draw`) and joined end to end until
        there are `steps` pairs, then cut to them; a failed draw is the answer as it is.
        Joined runs average out what a process shares across its steps (where it lands in
        memory, its neighbours), so they are kinder than one real long process: `served`
        says how many answers were joined."""
        source = "long_runs" if self._has_long(key) else "runs"
        pieces: list[Mapping[str, Any]] = []
        while sum(len(p.get("step_times_s") or ()) for p in pieces) < steps:
            piece = self._draw(key, source)
            if piece.get("status") != "ok" or not piece.get("step_times_s"):
                return piece
            pieces.append(piece)
        self.served["long" if len(pieces) == 1 and source == "long_runs" else "joined"] += 1
        first = pieces[0]
        return {**first,
                "step_times_s": [t for p in pieces for t in p["step_times_s"]][:steps],
                "baseline_step_times_s": [t for p in pieces
                                          for t in p["baseline_step_times_s"]][:steps]}

    def _fingerprinted(self, outcome: TrialOutcome, program: str | None) -> TrialOutcome:
        """The outcome with the table's fingerprints of its program and of the baseline's,
        as a real child reports them."""
        if outcome.measurement is None or program is None:
            return outcome
        measurement = replace(outcome.measurement, fingerprint=program,
                              baseline_fingerprint=self.table.programs.get(""))
        return replace(outcome, measurement=measurement)

    def _compiled_only(self, runs: Sequence[Mapping[str, Any]], program: str | None,
                       known: int | None) -> TrialOutcome:
        """What a real child answers when it only compiles: a compile-only request
        (`timed=False`), or a program another trial timed (`known_programs`; the
        result names that trial). The time is a recorded compile time."""
        compile_s = statistics.median(float(r.get("compile_time_s") or 0.0) for r in runs)
        measurement = Measurement(
            step_times_s=(), compile_time_s=compile_s, mode=MeasureMode.PAIRED,
            fingerprint=program, baseline_fingerprint=self.table.programs.get(""),
            backend="cpu", same_program_as=known)
        return TrialOutcome(OutcomeKind.OK, "", measurement, duration_s=compile_s)


def _run_ratio(run: Mapping[str, Any]) -> float | None:
    if run.get("status") != "ok" or not run.get("step_times_s"):
        return None
    return paired_ratio([run["step_times_s"]], [run["baseline_step_times_s"]], n_boot=1).ratio


def _outcome(run: Mapping[str, Any], prune_ratio: float | None,
             prune_curve: Sequence[float | None] | None = None) -> TrialOutcome:
    """A recorded run as the outcome of a PAIRED trial, pruned where the child's rules
    (the margin `prune_ratio` and the median `prune_curve`, `autotune.rules.stopping.prune_verdict`)
    would have stopped it: its steps cut there, its message the child's."""
    body = {"mode": "paired", "backend": "cpu", **run}
    kind = OutcomeKind(body.get("status", "ok"))
    if kind is OutcomeKind.OK and (prune_ratio is not None or prune_curve is not None):
        cand, base = body["step_times_s"], body["baseline_step_times_s"]
        k = prune_point(cand, base, prune_ratio, PRUNE_AFTER, prune_curve)
        if k is not None:
            body.update(status="pruned", message=prune_verdict(cand[:k], base[:k], prune_ratio,
                                                               PRUNE_AFTER, prune_curve),
                        step_times_s=cand[:k], baseline_step_times_s=base[:k])
            kind = OutcomeKind.PRUNED
    measurement = (measurement_from_result(result_of({"status": "ok", "message": "", **body}))
                   if body.get("step_times_s") else None)
    duration = body.get("compile_time_s", 0.0) + sum(body.get("step_times_s", ())) \
        + sum(body.get("baseline_step_times_s", ()))
    return TrialOutcome(kind, body.get("message", ""), measurement, duration_s=duration)
