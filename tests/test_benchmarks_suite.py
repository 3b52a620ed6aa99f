"""The multi-device benchmark suite: each workload compiles to the collective it is for.

Every benchmark in ``benchmarks/`` that exists to exercise a collective is built
at its ``tiny`` preset on 4 CPU devices in a subprocess (``XLA_FLAGS`` must be set
before jax starts), compiled, and run for one step; the optimised HLO must hold
the collective the benchmark is named for and the outputs must be finite. Each
one is also measured once by the real trial child, ``python -m autotune.bench``.
The contract checks (presets, description, errors) run in-process and never
start jax's backend.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from child_env import cpu_child_env, load_benchmark

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
DEVICES = 4

# Benchmark -> the collectives its compiled step must contain (HLO op names; the
# async "-start" forms count too). matmul is the single-device control: none.
# The transformer is left to test_benchmarks.py: building and compiling it takes
# as long as the four new ones together.
EXPECTED: dict[str, tuple[str, ...]] = {
    "sharded-matmul": ("all-reduce",),
    "mlp-dp": ("all-reduce",),
    "collective-matmul": ("all-gather", "reduce-scatter"),
    "pipeline": ("collective-permute",),
    "matmul": (),
    "norm-act": (),  # row-parallel on every device, nothing to communicate
}
NEW = ("sharded-matmul", "mlp-dp", "collective-matmul", "pipeline", "norm-act")
COMMUNICATING = ("sharded-matmul", "mlp-dp", "collective-matmul", "pipeline")
SINGLE_DEVICE = ("matmul",)
COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "collective-permute", "all-to-all")

# One child builds, compiles and steps every benchmark's tiny workload (one jax
# start for all of them) and prints {name: facts} as the last line of stdout.
TINY_CHILD = r"""
import importlib.util, json, re, sys
import jax, numpy as np

COLLECTIVES = {collectives!r}


def counts(hlo):
    return {{op: len(re.findall(r"\s" + op + r"(?:-start)?\(", hlo)) for op in COLLECTIVES}}


def gather_feeds_dot(hlo):
    # Does an all-gather's result (through -done/bitcast/copy) feed a dot or a dot fusion?
    bodies = dict(re.findall(r"^(?:ENTRY )?%(\S+) [^\n]*\{{\n(.*?)\n\}}", hlo, re.M | re.S))
    defs = re.findall(r"^\s*(?:ROOT )?%(\S+) = \S+ ([\w-]+)\((.*)$", hlo, re.M)
    frontier = [name for name, op, _ in defs if op in ("all-gather", "all-gather-start")]
    seen = set()
    while frontier:
        value = frontier.pop()
        seen.add(value)
        for name, op, rest in defs:
            if not re.search("%" + re.escape(value) + r"[,)]", rest) or name in seen:
                continue
            called = re.search(r"calls=%([\w.-]+)", rest)
            if op == "dot" or (called and " dot(" in bodies.get(called.group(1), "")):
                return True
            if op in ("all-gather-done", "bitcast", "copy"):
                frontier.append(name)
    return False


facts = {{}}
for name, path in {paths!r}.items():
    spec = importlib.util.spec_from_file_location("bench_" + name.replace("-", "_"), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    work = module.workload("tiny")
    compiled = work.step.lower(*work.args).compile()
    hlo = compiled.as_text()
    out = jax.block_until_ready(compiled(*work.args))
    leaves = jax.tree.leaves(out)
    facts[name] = {{
        "counts": counts(hlo),
        "gather_feeds_dot": gather_feeds_dot(hlo),
        "finite": all(bool(np.isfinite(np.asarray(x, dtype=np.float64)).all()) for x in leaves),
        "outputs": len(leaves),
        "devices": len(jax.devices()),
        "meta_devices": work.meta.get("device_count"),
    }}
print(json.dumps(facts))
"""


def run_tiny(names: tuple[str, ...], devices: int) -> dict[str, dict]:
    """Build, compile and step the tiny preset of ``names`` in one child; its facts by name."""
    paths = {name: str(BENCHMARKS / f"{name}.py") for name in names}
    code = TINY_CHILD.format(collectives=COLLECTIVES, paths=paths)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=cpu_child_env(devices),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def tiny_facts() -> dict[str, dict]:
    """Every benchmark's tiny step on ``DEVICES`` devices, from one child."""
    return run_tiny(tuple(EXPECTED), DEVICES)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXPECTED))
def test_tiny_step_is_finite_and_has_its_collective(tiny_facts, name: str) -> None:
    """The tiny step runs on 4 devices, its outputs are finite, its collective is compiled in."""
    facts = tiny_facts[name]
    assert facts["devices"] == DEVICES
    assert facts["finite"] and facts["outputs"] > 0
    assert facts["meta_devices"] == (1 if name in SINGLE_DEVICE else DEVICES)
    for op in EXPECTED[name]:
        assert facts["counts"][op] > 0, facts["counts"]
    if not EXPECTED[name]:
        assert sum(facts["counts"].values()) == 0, facts["counts"]


@pytest.mark.slow
def test_collective_matmul_gathers_into_a_dot(tiny_facts) -> None:
    """The all-gather feeds a matmul: the pattern XLA's windowed einsum rewrites."""
    assert tiny_facts["collective-matmul"]["gather_feeds_dot"]


@pytest.mark.slow
def test_two_devices_still_build_and_communicate() -> None:
    """On two devices (the XLA document's 1 x 2 mesh) each new benchmark keeps its collective."""
    facts = run_tiny(COMMUNICATING, 2)
    for name in COMMUNICATING:
        assert facts[name]["devices"] == 2 and facts[name]["finite"], (name, facts[name])
        for op in EXPECTED[name]:
            assert facts[name]["counts"][op] > 0, (name, facts[name]["counts"])


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXPECTED))
def test_measurement_child_reports_ok_with_the_collective(name: str) -> None:
    """``python -m autotune.bench FILE --preset tiny`` measures it and counts the collective."""
    env = cpu_child_env(DEVICES)
    env["AUTOTUNE_JOB"] = json.dumps(
        {"schema_version": 1, "steps": 3, "warmup": 1, "compiler_options": {}})
    path = str(BENCHMARKS / f"{name}.py")
    proc = subprocess.run(
        [sys.executable, "-m", "autotune.bench", path, "--preset", "tiny"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout)
    assert result["status"] == "ok", result.get("message")
    assert result["device_count"] == DEVICES
    for op in EXPECTED[name]:
        assert result["hlo_stats"][op] > 0, result["hlo_stats"]
    if not EXPECTED[name]:
        assert all(result["hlo_stats"][op] == 0 for op in COLLECTIVES), result["hlo_stats"]
    assert len(result["step_times_s"]) == 3
    assert result["checksum"] == result["baseline_checksum"]


@pytest.mark.parametrize("name", NEW)
def test_module_contract(name: str) -> None:
    """Presets, a one-line description, a docstring naming the collective, a workload()."""
    module = load_benchmark(name)
    assert module.PRESETS == ("tiny", "small", "large")
    assert isinstance(module.DESCRIPTION, str) and module.DESCRIPTION
    assert "\n" not in module.DESCRIPTION
    assert module.__doc__ and all(op in module.__doc__ for op in EXPECTED[name])
    assert callable(module.workload)


@pytest.mark.parametrize("name", NEW)
def test_unknown_preset_raises(name: str) -> None:
    """An unknown preset raises ValueError naming the known presets (before jax starts)."""
    module = load_benchmark(name)
    with pytest.raises(ValueError, match="known presets: tiny, small, large"):
        module.workload("enormous")


@pytest.mark.parametrize(
    ("name", "small_on_eight"),
    [
        ("sharded-matmul", (1024, 512, 2048)),  # (M, K, N)
        ("mlp-dp", dict(features=256, hidden=512, layers=3, classes=16, batch=256)),
        ("collective-matmul", dict(tokens=512, d_model=256, d_ff=1024, layers=2)),
        ("norm-act", dict(rows=2048, width=1024)),
    ],
)
def test_device_count_that_does_not_fit_raises(name: str, small_on_eight: object) -> None:
    """Three devices do not divide the small sizes: the error lists the counts that work."""
    module = load_benchmark(name)
    with pytest.raises(ValueError, match=r"3 devices.*device counts that work.*: 1, 2, 4, 8"):
        module.resolve_config("small", 3)
    assert module.resolve_config("small", 8) == small_on_eight  # eight do: the small sizes


def test_a_per_device_batch_grows_with_the_devices() -> None:
    """mlp-dp large gives 2048 examples to each device, whatever their count."""
    module = load_benchmark("mlp-dp")
    assert module.resolve_config("large", 8) == dict(
        features=4096, hidden=8192, layers=8, classes=1024, batch=16384)
    assert module.resolve_config("large", 3)["batch"] == 6144
