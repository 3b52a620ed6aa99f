"""Record an exhaustive table of a small space: every distinct configuration, measured.

The tables under `benchmarks/tables/` feed the replay launcher
(`autotune.launch.replay.ReplayTable`) in tests and in the search-efficiency benchmark:

    python benchmarks/scripts/record_table.py --benchmark transformer --preset small \\
        --space benchmarks/tables/cpu-table.yaml --repeats 3 \\
        -o benchmarks/tables/transformer-small.json

A workload of the corpus (`benchmarks/corpus/`, not a built-in benchmark) is
named by its file, and a table whose name ends in `.gz` is written compressed:

    python benchmarks/scripts/record_table.py --script benchmarks/corpus/attention.py \\
        --preset small --devices 1 --repeats 3 -o benchmarks/tables/attention-small.json.gz

How it measures. Every configuration of the space is enumerated and reduced to
its effective flags (values equal to XLA's defaults removed); each distinct
one is measured once per repeat. A repeat is one fresh process that compiles
the baseline once and then, for each configuration in a shuffled order,
compiles it with `compiler_options` and alternates its steps with the
baseline's (the same paired timing as a study's trial, `autotune.bench`), then
compares outputs (numerics guard), reads the memory analysis and fingerprints
the compiled program (`autotune.child.program.program_fingerprint`: configurations
with one fingerprint run the same code, and the replay pools their repeats
into one truth; see `autotune.launch.replay.ReplayTable.true_ratio`). Repeats are
separate processes, so the spread across them is the per-process noise a
study meets. A repeat writes one JSON line per configuration as it goes and is
resumed if interrupted.

A table's leading programs can be pinned with more processes, so its optimum
is a program's median over many processes, not the luckiest of three
(`--pin`): the defaults' program and the `--top` best programs by the table's
truth, one configuration each, measured in `--repeats` more fresh processes
the same way; the runs join their entries and `pinned` in the table says so:

    python benchmarks/scripts/record_table.py --pin benchmarks/tables/attention-small.json.gz \
        --top 8 --repeats 8

A confirmation measures its few leaders in longer processes than the search's
(`autotune study --confirm-steps`). The table's `--top` best programs (not the
defaults') get `--repeats` processes of `--long` steps each, in each entry's
`long_runs`; the replay serves a confirmation request of up to that many steps from
them (`autotune.launch.replay.TableLauncher`):

    python benchmarks/scripts/record_table.py --long-for benchmarks/tables/lj-md-small.json.gz \
        --top 3 --repeats 6 --long 160

A table recorded before fingerprints were kept gets them without measuring
again (one process compiles every configuration):

    python benchmarks/scripts/record_table.py --add-programs benchmarks/tables/mlp-dp-small.json

The GPU tables (`*-gpu.json.gz`, over `gpu-table.yaml`) were recorded on a lent H200 by
`benchmarks/scripts/gpu_check.sh` and its pin step, before fingerprints hashed the flags
that act after the optimised HLO (CUDA graphs); `--amend-after-hlo TABLE` added them:

    python benchmarks/scripts/record_table.py --amend-after-hlo \
        benchmarks/tables/gated-mlp-small-gpu.json.gz
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def distinct_configs(space_path: str) -> tuple[list[dict[str, Any]], int]:
    """The space's distinct effective configurations (sorted by key) and its raw size."""
    import optuna

    from autotune.flags.catalog import load_catalog
    from autotune.flags.compose import config_key, effective_config
    from autotune.spaces import load_space

    space, catalog = load_space(space_path), load_catalog()
    grid = space.grid()
    configs = {}
    for params in grid:
        config = effective_config(space.sample(optuna.trial.FixedTrial(params)), catalog)
        configs[config_key(config)] = config
    return [configs[k] for k in sorted(configs)], len(grid)


def _child_env(devices: int) -> dict[str, str]:
    """A child's environment: this checkout first on the caller's `PYTHONPATH` (which may
    hold packages carried to a device machine), `devices` host devices."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
                    [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
                XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")


def run_child(args: argparse.Namespace, configs_file: Path, out: Path, seed: int) -> None:
    """One repeat in a fresh process (resumes from the lines already in `out`)."""
    env = _child_env(args.devices)
    cmd = [sys.executable, __file__, "--child", str(configs_file), "--out", str(out),
           "--seed", str(seed), "--benchmark", args.benchmark, "--preset", args.preset,
           "--steps", str(args.steps)] + (["--script", args.script] if args.script else [])
    subprocess.run(cmd, env=env, check=True)


def _lowered(benchmark: str, preset: str, script: str | None = None) -> tuple[Any, Any]:
    """The workload (a built-in benchmark, or the file `script`) and its lowered step (in the
    child: imports jax)."""
    import jax

    from autotune.child.workload import build_workload
    from autotune.launch.workloads import resolve_benchmark

    path = str(ROOT / script) if script else str(resolve_benchmark(benchmark).path)
    work = build_workload(path, preset)
    step = work.step if hasattr(work.step, "lower") else jax.jit(work.step)
    return work, step.lower(*work.args)


def _compile_fingerprinted(lowered: Any, options: dict[str, Any],
                           after_hlo: str) -> tuple[Any, float, str | None]:
    """Compile with a throw-away dump folder: (executable, seconds, program fingerprint,
    `after_hlo` the flags hashed with the dump, `compose.after_hlo_text`)."""
    from autotune.child.program import program_fingerprint
    from autotune.child.timing import compile_lowered

    with tempfile.TemporaryDirectory(prefix="autotune-table-") as dump:
        compiled, seconds = compile_lowered(lowered, options, dump)
        return compiled, seconds, program_fingerprint(dump, after_hlo)


def _catalog_for(configs: list[dict[str, Any]]) -> Any:
    """The catalog, with the flags of `configs` outside it given per compilation (a table's
    space names only flags that one compilation takes: `gpu-table.yaml`)."""
    from autotune.flags.catalog import load_catalog

    return load_catalog().per_compiling({name for config in configs for name in config})


def child(args: argparse.Namespace) -> None:
    """Measure every configuration of the file against one baseline executable."""
    import jax

    from autotune.child.failure import Failure
    from autotune.child.program import memory_figures
    from autotune.child.timing import compile_lowered, numerics_facts, time_paired
    from autotune.flags.compose import after_hlo_text, compiler_options, config_key
    from autotune.ground.protocol import Job

    configs = json.loads(Path(args.child).read_text())
    out = Path(args.out)
    done = {json.loads(line)["key"] for line in out.read_text().splitlines()} \
        if out.exists() else set()
    random.Random(args.seed).shuffle(configs)
    work, lowered = _lowered(args.benchmark, args.preset, args.script)
    base, _ = compile_lowered(lowered, {}, None)
    job = Job(steps=args.steps, warmup=2, max_warmup=10, compiler_options={})
    catalog = _catalog_for(configs)
    device = jax.devices()[0].device_kind
    for i, config in enumerate(configs):
        key = config_key(config)
        if key in done:
            continue
        row: dict[str, Any] = {"key": key, "status": "ok", "message": "",
                               "device": device}
        try:
            cand, row["compile_time_s"], row["program"] = _compile_fingerprinted(
                lowered, compiler_options(config, catalog), after_hlo_text(config, catalog))
            timed = time_paired(base, cand, work.args, job)
            row["step_times_s"] = [round(t, 7) for t in timed["step_times_s"]]
            row["baseline_step_times_s"] = [round(t, 7) for t in timed["baseline_step_times_s"]]
            numerics = numerics_facts(cand, base, work.args)
            row.update({k: numerics[k] for k in ("status", "message") if k in numerics})
            memory = memory_figures(cand, direct=False)
            row["peak_memory_bytes"] = memory.get("peak_memory_bytes")
            row["memory_source"] = memory.get("memory_source", "unknown")
        except Failure as failure:
            row.update(status=failure.kind, message=str(failure)[-300:])
        with out.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        print(f"[seed {args.seed}] {i + 1}/{len(configs)} {row['status']} {key}", flush=True)


def assemble(args: argparse.Namespace, configs: list[dict[str, Any]], raw: int,
             parts: list[Path]) -> dict[str, Any]:
    """The table document: how it was made, then each configuration with its repeats."""
    import jax
    import jaxlib

    from autotune.flags.compose import config_key

    runs: dict[str, list[dict[str, Any]]] = {config_key(c): [] for c in configs}
    programs: dict[str, set[str | None]] = {config_key(c): set() for c in configs}
    devices: set[str] = set()
    for part in parts:
        for line in part.read_text().splitlines():
            row = json.loads(line)
            key = row.pop("key")
            devices.add(row.pop("device", "unknown"))
            programs[key].add(row.pop("program", None))
            runs[key].append(row)
    return {
        "schema_version": 1,
        "kind": "autotune-replay-table",
        "benchmark": args.benchmark, "preset": args.preset, "devices": args.devices,
        **({"script": args.script} if args.script else {}),
        "space": os.path.relpath(args.space, ROOT),
        "configurations": raw, "distinct": len(configs), "repeats": args.repeats,
        "steps": args.steps,
        "made_by": " ".join(["python", "benchmarks/scripts/record_table.py", *sys.argv[1:]]),
        "made_on": {"jax": jax.__version__, "jaxlib": jaxlib.__version__,
                    "machine": platform.machine(), "cpus": os.cpu_count(),
                    "vector_isa": _vector_isa(),
                    "device": ", ".join(sorted(devices)),
                    "date": dt.date.today().isoformat()},
        "entries": [_entry(c, runs[config_key(c)], programs[config_key(c)]) for c in configs],
    }


def _vector_isa() -> str:
    """The widest x86 vector extension of this CPU ("avx512f", "avx2", ...), or "unknown".

    XLA:CPU's `xla_cpu_prefer_vector_width=512` pays only where the CPU has AVX-512, so a
    table records it beside the machine: two tables of one workload differ on it.
    """
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        return "unknown"
    return next((isa for isa in ("avx512f", "avx2", "avx", "sse4_2") if isa in flags), "unknown")


def _entry(flags: dict[str, Any], runs: list[dict[str, Any]],
           programs: set[str | None]) -> dict[str, Any]:
    """A table entry; its program only where every repeat compiled to the same one."""
    entry: dict[str, Any] = {"flags": flags, "runs": runs}
    if len(programs) == 1 and None not in programs:
        entry["program"] = programs.pop()
    return entry


def programs_child(table: Path) -> None:
    """Print {key: program fingerprint} of every entry of `table` (compiles, never times)."""
    from autotune.flags.compose import after_hlo_text, compiler_options, config_key

    doc = _read(table)
    _, lowered = _lowered(doc["benchmark"], doc["preset"], doc.get("script"))
    catalog = _catalog_for([entry["flags"] for entry in doc["entries"]])
    found = {}
    for i, entry in enumerate(doc["entries"]):
        _, _, program = _compile_fingerprinted(lowered, compiler_options(entry["flags"], catalog),
                                               after_hlo_text(entry["flags"], catalog))
        found[config_key(entry["flags"])] = program
        print(f"{i + 1}/{len(doc['entries'])}", file=sys.stderr, flush=True)
    print(json.dumps(found))


def add_programs(table: Path) -> None:
    """Fingerprint the programs of a table recorded without them, in a fresh process."""
    from autotune.flags.compose import config_key

    doc = _read(table)
    env = _child_env(doc["devices"])
    done = subprocess.run([sys.executable, __file__, "--programs-child", str(table)], env=env,
                          check=True, stdout=subprocess.PIPE, text=True)
    found = json.loads(done.stdout.splitlines()[-1])
    for entry in doc["entries"]:
        entry["program"] = found[config_key(entry["flags"])]
    doc["programs_added_by"] = " ".join(
        ["python", "benchmarks/scripts/record_table.py", *sys.argv[1:]])
    _write(table, json.dumps(doc) + "\n")
    print(f"{table}: {len(doc['entries'])} configurations, "
          f"{len(set(found.values()))} distinct programs")


def amend_after_hlo(table: Path) -> None:
    """Give the program of every entry its after-HLO flags (`compose.after_hlo_text`), for a
    table recorded before fingerprints hashed them: such an entry's program becomes
    `PROGRAM|FLAGS`, so entries that compiled to one HLO but run other executables (CUDA
    graphs on or off) are no longer pooled as one program. Measures nothing."""
    from autotune.flags.compose import after_hlo_text

    doc = _read(table)
    catalog = _catalog_for([entry["flags"] for entry in doc["entries"]])
    amended = 0
    for entry in doc["entries"]:
        extra = after_hlo_text(entry["flags"], catalog)
        if not extra:
            continue
        for holder in [entry, *entry["runs"]]:
            if holder.get("program"):
                holder["program"] = f"{holder['program']}|{extra}"
        amended += 1
    doc["programs_amended_by"] = " ".join(
        ["python", "benchmarks/scripts/record_table.py", *sys.argv[1:]])
    _write(table, json.dumps(doc) + "\n")
    print(f"{table}: {amended} entries' programs carry their after-HLO flags")


def pinned_configs(table: Path, top: int) -> list[dict[str, Any]]:
    """One configuration of the defaults' program and of each of the `top` programs with
    the lowest true ratio (`ReplayTable.true_ratio`), the defaults first; the
    configuration chosen for a program is its first by key (`ReplayTable.members`)."""
    from autotune.launch.replay import ReplayTable

    replay = ReplayTable.load(table)
    ratios = replay.ratios()
    keys = [""] if "" in replay.flags else []
    seen = {replay.programs.get("", "")}
    for key in sorted(ratios, key=lambda k: (ratios[k], k)):
        program = replay.programs.get(key, key)
        if program in seen:
            continue
        seen.add(program)
        keys.append(key)
        if len(keys) > top:
            break
    return [dict(replay.flags[k]) for k in keys]


def _measure_leaders(args: argparse.Namespace, table: Path, doc: dict[str, Any],
                     configs: list[dict[str, Any]], kind: str,
                     seed_base: int) -> dict[str, list[dict[str, Any]]]:
    """Measure `configs` in `args.repeats` fresh processes of `args.steps` steps each (the
    recording's workload, preset and devices); key -> its runs. Resumable: the parts
    are kept in `TABLE.KIND.parts` beside the table until the table is written."""
    from autotune.flags.compose import config_key

    args.benchmark, args.preset, args.devices = doc["benchmark"], doc["preset"], doc["devices"]
    args.script = doc.get("script")
    work = table.with_name(table.name.split(".")[0] + f".{kind}.parts")
    work.mkdir(parents=True, exist_ok=True)
    configs_file = work / "configs.json"
    if not configs_file.exists():
        configs_file.write_text(json.dumps(configs))
    configs = json.loads(configs_file.read_text())
    print(f"{table}: {kind}: {len(configs)} programs, {args.repeats} processes of "
          f"{args.steps} steps", flush=True)
    parts = [work / f"repeat-{r}.jsonl" for r in range(args.repeats)]
    for r, part in enumerate(parts):
        run_child(args, configs_file, part, seed=seed_base + r)
    runs: dict[str, list[dict[str, Any]]] = {config_key(c): [] for c in configs}
    for part in parts:
        for line in part.read_text().splitlines():
            row = json.loads(line)
            row.pop("device", None)
            runs[row.pop("key")].append(row)
    return runs


def _record_of(args: argparse.Namespace, configs: list[dict[str, Any]]) -> dict[str, Any]:
    """What a `--pin` or `--long` step adds to the table's `pinned` or `long` list."""
    from autotune.flags.compose import config_key

    return {"configurations": [config_key(c) for c in configs], "repeats": args.repeats,
            "by": " ".join(["python", "benchmarks/scripts/record_table.py", *sys.argv[1:]]),
            "date": dt.date.today().isoformat(), "vector_isa": _vector_isa()}


def pin(args: argparse.Namespace) -> None:
    """Measure the table's leading programs in `args.repeats` more processes; append the
    runs to their entries (a run that compiled to another program says so)."""
    from autotune.flags.compose import config_key

    table: Path = args.pin
    doc = _read(table)
    args.steps = doc["steps"]
    configs = pinned_configs(table, args.top)
    measured = _measure_leaders(args, table, doc, configs, "pin", seed_base=1000)
    entries = {config_key(e["flags"]): e for e in doc["entries"]}
    for key, runs in measured.items():
        entry = entries[key]
        for row in runs:
            program = row.pop("program", None)
            if entry.get("program") not in (None, program):
                row["program"] = program  # compiled otherwise this time: kept, and visible
            entry["runs"].append(row)
    doc.setdefault("pinned", []).append(_record_of(args, configs))
    _write(table, json.dumps(doc) + "\n")
    print(f"{table}: {len(configs)} programs pinned with {args.repeats} more processes each")


def lengthen(args: argparse.Namespace) -> None:
    """Measure the table's `--top` best programs (not the defaults': confirmation never
    measures the baseline's own program against itself) in `args.repeats` fresh processes
    of `--long` steps each, as a confirmation of that length would; the runs go to each
    entry's `long_runs`, and the table's `long` list records how (`ReplayTable.long_runs`
    serves a confirmation request of up to that many steps from them)."""
    from autotune.flags.compose import config_key

    table: Path = args.long_for
    doc = _read(table)
    args.steps = args.long
    configs = [c for c in pinned_configs(table, args.top) if c]
    measured = _measure_leaders(args, table, doc, configs, f"long{args.long}", seed_base=2000)
    entries = {config_key(e["flags"]): e for e in doc["entries"]}
    for key, runs in measured.items():
        entries[key].setdefault("long_runs", []).extend(runs)
    doc.setdefault("long", []).append({**_record_of(args, configs), "steps": args.long})
    _write(table, json.dumps(doc) + "\n")
    print(f"{table}: {len(configs)} programs measured in {args.repeats} processes of "
          f"{args.long} steps")


def _read(table: Path) -> dict[str, Any]:
    """A table document, gzip-compressed where its name ends in `.gz`."""
    raw = table.read_bytes()
    return json.loads(gzip.decompress(raw) if table.suffix == ".gz" else raw)


def _write(table: Path, text: str) -> None:
    """Write a table, compressed where its name ends in `.gz` (compact in the repository;
    `ReplayTable.load` reads either)."""
    if table.suffix == ".gz":
        table.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        table.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--benchmark", default="transformer")
    parser.add_argument("--script", metavar="FILE",
                        help="a workload file (relative to the checkout), e.g. one of "
                             "benchmarks/corpus/, instead of a built-in --benchmark")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--space", default=str(ROOT / "benchmarks/tables/cpu-table.yaml"))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("-o", "--output", type=Path)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--add-programs", type=Path, metavar="TABLE",
                        help="fingerprint the programs of a table recorded without them")
    parser.add_argument("--programs-child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--amend-after-hlo", type=Path, metavar="TABLE",
                        help="add the after-HLO flags to the programs of a table recorded "
                             "before fingerprints hashed them (measures nothing)")
    parser.add_argument("--pin", type=Path, metavar="TABLE",
                        help="measure the defaults' and the --top best programs of TABLE in "
                             "--repeats more processes")
    parser.add_argument("--top", type=int, default=8)
    parser.add_argument("--long-for", type=Path, metavar="TABLE",
                        help="measure the --top best programs of TABLE (not the defaults') in "
                             "--repeats processes of --long steps: confirmation-length runs")
    parser.add_argument("--long", type=int, default=160, metavar="STEPS")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.programs_child:
        programs_child(args.programs_child)
        return
    if args.add_programs:
        add_programs(args.add_programs)
        return
    if args.amend_after_hlo:
        amend_after_hlo(args.amend_after_hlo)
        return
    if args.pin:
        pin(args)
        return
    if args.long_for:
        lengthen(args)
        return
    if args.script:
        args.script = os.path.relpath(Path(args.script).resolve(), ROOT)
        args.benchmark = Path(args.script).stem
    output = args.output or ROOT / f"benchmarks/tables/{args.benchmark}-{args.preset}.json.gz"
    configs, raw = distinct_configs(args.space)
    print(f"{raw} configurations, {len(configs)} distinct; {args.repeats} repeats", flush=True)
    work = output.with_suffix(".parts")
    work.mkdir(parents=True, exist_ok=True)
    configs_file = work / "configs.json"
    configs_file.write_text(json.dumps(configs))
    parts = [work / f"repeat-{r}.jsonl" for r in range(args.repeats)]
    for r, part in enumerate(parts):
        run_child(args, configs_file, part, seed=r)
    _write(output, json.dumps(assemble(args, configs, raw, parts), indent=None) + "\n")
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
