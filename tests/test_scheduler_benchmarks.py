"""The benchmarks that give the latency hiding scheduler work: collectives in a loop, all-to-all.

`scan-transformer` runs its layers under `jax.lax.scan` and gathers each layer's
weights inside the loop (FSDP); `moe` dispatches tokens to experts with
all-to-all. Their optimised HLO is read from a real compile on 8 CPU devices
in a subprocess (`XLA_FLAGS` must be set before jax starts), as are the
benchmarks the GPU and TPU spaces name for their flags (`exercised_by`), each
held to what its flag acts on (`autotune.spaces.exercise`). Both new benchmarks
also run in a short real study, and `autotune benchmarks list --format json`
shows their in-loop and all-to-all counts. The checks that need no compile
(the spaces' keys, the table's layout, the module contract) run in-process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from child_env import cpu_child_env, load_benchmark
from cli_runner import invoke

from autotune.ground.errors import SpaceValidationError
from autotune.ground.records import Role
from autotune.launch import inventory
from autotune.launch.workloads import list_benchmarks
from autotune.rules.collectives import profile_from_json
from autotune.spaces import list_spaces, load_space, load_space_text
from autotune.spaces.exercise import needs
from autotune.storage import Store

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
DEVICES = 8
NEW = ("scan-transformer", "moe")
#: The spaces whose flags name the benchmarks that exercise them.
NAMING = [name for name in list_spaces() if name.startswith(("gpu-", "tpu-"))]


def named_benchmarks() -> list[str]:
    """Every benchmark some GPU or TPU space names for a flag."""
    return sorted({bench for space in NAMING for p in load_space(space).params.values()
                   for bench in p.exercised_by})


# One child builds and compiles each workload (one jax start for all of them), reads
# its optimised HLO and runs `steps` steps; prints {"name/preset": facts} last.
CHILD = r"""
import importlib.util, json
import jax, numpy as np
from autotune.rules.collectives import collective_profile, profile_json

facts = {}
for name, preset, steps in CASES:
    spec = importlib.util.spec_from_file_location("bench_" + name.replace("-", "_"),
                                                  f"{BENCHMARKS}/{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    work = module.workload(preset)
    compiled = work.step.lower(*work.args).compile()
    hlo = compiled.as_text()
    args, losses, finite = work.args, [], True
    for _ in range(steps):
        params, loss = jax.block_until_ready(compiled(*args))
        args = (params, *args[1:])
        losses.append(float(loss))
        finite = finite and all(bool(np.isfinite(np.asarray(x)).all())
                                for x in jax.tree.leaves(params))
    facts[f"{name}/{preset}"] = {
        "collectives": profile_json(collective_profile(hlo)),
        "while_loops": hlo.count(" while("), "losses": losses, "finite": finite,
        "devices": len(jax.devices()), "meta": work.meta}
print(json.dumps(facts))
"""


def compile_in_child(cases: list[tuple[str, str, int]]) -> dict[str, dict]:
    """Facts of each (benchmark, preset, steps to run), from one child on 8 devices."""
    code = f"CASES = {cases!r}\nBENCHMARKS = {str(BENCHMARKS)!r}\n" + CHILD
    proc = subprocess.run([sys.executable, "-c", code], env=cpu_child_env(DEVICES),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def compiled() -> dict[str, dict]:
    """The new benchmarks at tiny (three steps) and small (one), and every benchmark a
    space names at tiny (what `benchmarks list` compiles), on 8 devices."""
    cases = [(name, preset, 3 if preset == "tiny" else 1)
             for name in NEW for preset in ("tiny", "small")]
    cases += [(name, "tiny", 1) for name in named_benchmarks() if name not in NEW]
    return compile_in_child(cases)


# --- the compiled programs ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_scan_transformer_gathers_and_scatters_every_layer_inside_the_loop(compiled, preset):
    facts = compiled[f"scan-transformer/{preset}"]
    found = profile_from_json(facts["collectives"])
    assert facts["devices"] == DEVICES and facts["meta"]["device_count"] == DEVICES
    assert facts["while_loops"] >= 2  # the forward scan and its backward
    weights = 4  # wqkv, wo, w1, w2: gathered in the forward and the backward body
    assert found["all-gather"].loop_count >= 2 * weights, facts["collectives"]
    assert found["reduce-scatter"].loop_count >= weights, facts["collectives"]
    # the tied embedding is gathered and its gradient scattered outside the loop
    assert found["all-gather"].count > found["all-gather"].loop_count
    assert found["reduce-scatter"].count > found["reduce-scatter"].loop_count
    assert "all-reduce" in found  # the loss, the replicated vectors' gradients
    assert facts["finite"] and all(0 < loss < 100 for loss in facts["losses"])


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_moe_dispatches_and_combines_with_all_to_all(compiled, preset):
    facts = compiled[f"moe/{preset}"]
    found = profile_from_json(facts["collectives"])
    layers = facts["meta"]["layers"]
    assert facts["meta"]["experts"] == DEVICES * facts["meta"]["experts_per_device"]
    assert found["all-to-all"].count >= 2 * layers, facts["collectives"]  # dispatch, combine
    assert "all-reduce" in found  # the loss, the router's and the head's gradients
    assert facts["finite"] and all(0 < loss < 100 for loss in facts["losses"])


@pytest.mark.slow
@pytest.mark.parametrize("name", NEW)
def test_a_few_steps_lower_the_loss(compiled, name):
    losses = compiled[f"{name}/tiny"]["losses"]
    assert losses[0] > losses[-1], losses


@pytest.mark.slow
def test_every_benchmark_a_space_names_has_what_the_flag_acts_on(compiled):
    """Each `exercised_by` claim of the GPU and TPU spaces, against the real compile."""
    checked = 0
    for space_name in NAMING:
        for param in load_space(space_name).params.values():
            wanted = needs(param.flag)
            for bench in param.exercised_by:
                assert wanted is not None, (space_name, param.flag)
                found = profile_from_json(compiled[f"{bench}/tiny"]["collectives"])
                assert wanted.met_by(found), (
                    f"{space_name}: {param.flag} needs {wanted.describe()}, which {bench} "
                    f"lacks: {compiled[f'{bench}/tiny']['collectives']}")
                checked += 1
    assert checked >= 40


# --- what the spaces say ------------------------------------------------------------------


def test_every_collective_flag_of_the_gpu_and_tpu_spaces_names_a_benchmark():
    """A flag that acts on collectives names who exercises it; one that names a
    benchmark is one autotune knows to act on collectives (so the claim can be checked)."""
    for space_name in NAMING:
        for param in load_space(space_name).params.values():
            assert bool(param.exercised_by) == (needs(param.flag) is not None), (
                space_name, param.flag)


@pytest.mark.parametrize(("flag", "bench"), [
    ("xla_gpu_enable_latency_hiding_scheduler", "scan-transformer"),
    ("xla_gpu_enable_latency_hiding_scheduler", "moe"),
    ("xla_gpu_enable_pipelined_all_gather", "scan-transformer"),
    ("xla_gpu_enable_pipelined_reduce_scatter", "scan-transformer"),
    ("xla_gpu_enable_pipelined_all_reduce", "scan-transformer"),
    ("xla_gpu_enable_while_loop_double_buffering", "scan-transformer"),
    ("xla_gpu_all_gather_combine_threshold_bytes", "scan-transformer"),
    ("xla_gpu_reduce_scatter_combine_threshold_bytes", "scan-transformer"),
    ("xla_tpu_enable_async_all_to_all", "moe"),
    ("xla_all_to_all_latency_bound_threshold_in_bytes", "moe"),
])
def test_the_strongest_flags_are_exercised_by_the_new_benchmarks(flag, bench):
    spaces = [load_space(name) for name in NAMING]
    params = [p for sp in spaces for p in sp.params.values() if p.flag == flag]
    assert params and all(bench in p.exercised_by for p in params)


def test_loop_flags_need_a_loop_and_scheduling_flags_any_collective():
    assert needs("xla_gpu_enable_pipelined_all_gather").in_loop
    assert needs("xla_gpu_enable_while_loop_double_buffering").in_loop
    assert not needs("xla_gpu_all_gather_combine_threshold_bytes").in_loop
    assert needs("xla_tpu_enable_async_all_to_all").kinds == ("all-to-all",)
    assert len(needs("xla_gpu_enable_latency_hiding_scheduler").kinds) == 5
    assert needs("xla_cpu_use_fusion_emitters") is None


SPACE = """\
schema_version: 1
name: t
backend: gpu
params:
  xla_gpu_enable_pipelined_all_gather:
    type: bool
    exercised_by: [scan-transformer, {second}]
"""


@pytest.mark.parametrize(("second", "words"), [
    ("mo", "space.yaml:7: params.xla_gpu_enable_pipelined_all_gather.exercised_by[1]: "
           "'mo' is not a built-in benchmark. Did you mean 'moe'?"),
    ("scan-transformer", "space.yaml:7: params.xla_gpu_enable_pipelined_all_gather."
                         "exercised_by[1]: benchmark 'scan-transformer' is listed twice"),
    ("[moe]", "params.xla_gpu_enable_pipelined_all_gather.exercised_by[1]: Input should be "
              "a valid string"),
])
def test_exercised_by_must_name_built_in_benchmarks(second, words):
    with pytest.raises(SpaceValidationError) as info:
        load_space_text(SPACE.format(second=second), source="space.yaml")
    assert words in str(info.value)


def test_exercised_by_is_kept_on_the_param_and_optional():
    space = load_space_text(SPACE.format(second="moe"), source="space.yaml")
    assert space.params["xla_gpu_enable_pipelined_all_gather"].exercised_by == (
        "scan-transformer", "moe")
    bare = load_space_text(SPACE.replace("    exercised_by: [scan-transformer, {second}]\n",
                                         ""), source="space.yaml")
    assert bare.params["xla_gpu_enable_pipelined_all_gather"].exercised_by == ()


def test_spaces_show_says_which_benchmarks_exercise_each_flag(tmp_path):
    shown = invoke("spaces", "show", "tpu-collectives", cwd=tmp_path)
    assert shown.exit_code == 0, shown.output
    assert "exercised by moe" in shown.output  # async all-to-all
    assert "exercised by scan-transformer" in shown.output  # ICI all-gather pipelining


# --- autotune benchmarks list ---------------------------------------------------------------


def fake_figures(info, devices=8):
    """What `inventory.collectives` returns, without compiling: a loop for one, a long
    failure for another."""
    if info.name == "pipeline":
        return "crashed: " + "a long message from the trial child " * 3
    figures = {kind: {"count": 0, "in_loop": 0} for kind in inventory.COLLECTIVES}
    figures["reduce-scatter"] = {"count": 12, "in_loop": 10}
    figures["all-reduce"] = {"count": 1, "in_loop": 0}
    return figures


def test_the_benchmarks_table_fits_80_columns_and_keeps_every_name_whole(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setattr(inventory, "collectives", fake_figures)
    listed = invoke("benchmarks", "list", cwd=tmp_path)
    assert listed.exit_code == 0, listed.output
    table = [line for line in listed.output.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and max(len(line) for line in table) <= 80
    first_cells = {line.split("│")[1].strip() for line in table if line.startswith("│")}
    assert {info.name for info in list_benchmarks()} <= first_cells
    assert "reduce-scatter 12 (10 in loop)" in listed.output
    assert "all-reduce 1 " in listed.output and "all-reduce 1 (" not in listed.output


def test_benchmarks_list_json_has_stable_keys(tmp_path, monkeypatch):
    monkeypatch.setattr(inventory, "collectives", fake_figures)
    listed = invoke("benchmarks", "list", "transformer", "pipeline", "--format", "json",
                    cwd=tmp_path)
    assert listed.exit_code == 0, listed.output
    rows = json.loads(listed.stdout)
    assert [set(row) for row in rows] == [
        {"benchmark", "description", "presets", "collectives"},
        {"benchmark", "description", "presets", "error"}]
    assert rows[0]["benchmark"] == "transformer" and rows[0]["presets"] == ["tiny", "small",
                                                                            "large"]
    assert set(rows[0]["collectives"]) == set(inventory.COLLECTIVES)
    assert rows[0]["collectives"]["reduce-scatter"] == {"count": 12, "in_loop": 10}
    assert rows[1]["error"].startswith("crashed: ")


def test_an_unknown_benchmark_is_a_usage_error(tmp_path):
    listed = invoke("benchmarks", "list", "moe", "nope", cwd=tmp_path)
    assert listed.exit_code == 2 and "unknown benchmark 'nope'" in listed.output


def test_a_cache_of_another_shape_is_not_read(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({kind: 3 for kind in inventory.COLLECTIVES}))  # the v1 shape
    assert inventory._read_cache(old) is None
    new = {kind: {"count": 3, "in_loop": 1} for kind in inventory.COLLECTIVES}
    old.write_text(json.dumps(new))
    assert inventory._read_cache(old) == new
    assert inventory.CACHE_VERSION in inventory._cache_file(list_benchmarks()[0], 8).name


@pytest.mark.slow
def test_benchmarks_list_json_shows_loops_and_all_to_all(tmp_path):
    listed = invoke("benchmarks", "list", *NEW, "--format", "json", "--devices", "8",
                    cwd=tmp_path)
    assert listed.exit_code == 0, listed.output
    rows = {row["benchmark"]: row for row in json.loads(listed.stdout)}
    scan = rows["scan-transformer"]["collectives"]
    assert scan["all-gather"]["in_loop"] > 0 and scan["reduce-scatter"]["in_loop"] > 0
    assert scan["all-gather"]["count"] > scan["all-gather"]["in_loop"]
    moe = rows["moe"]["collectives"]
    assert moe["all-to-all"]["count"] > 0 and moe["all-gather"]["count"] == 0
    assert rows["moe"]["presets"] == ["tiny", "small", "large"]
    assert "error" not in rows["moe"] and "error" not in rows["scan-transformer"]


# --- a real study ---------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("name", "kind"), [("scan-transformer", "all-gather"),
                                             ("moe", "all-to-all")])
def test_a_short_study_measures_it(tmp_path, name, kind):
    url = f"sqlite:///{tmp_path / 's.db'}"
    result = invoke("study", "--benchmark", name, "--space", "cpu", "--preset", "tiny",
                    "--trials", "2", "--devices", str(DEVICES), "--steps", "5", "--warmup", "1",
                    "--seed", "3", "--confirm", "0", "--no-fit", "--no-racing",
                    "--storage", url, cwd=tmp_path)
    assert result.exit_code == 0, result.output
    runs = Store.open(url).runs(f"cpu-{name}-tiny-{DEVICES}dev")
    assert [r.role for r in runs] == [Role.BASELINE, Role.SEARCH]
    assert all(r.outcome.ok and r.ratio for r in runs), [r.outcome for r in runs]
    baseline = runs[0].outcome.measurement
    assert baseline.device_count == DEVICES
    found = baseline.collectives[kind]
    assert found.count > 0
    assert found.in_loop == (name == "scan-transformer")


# --- the module contract ------------------------------------------------------------------


@pytest.mark.parametrize("name", NEW)
def test_module_contract(name):
    module = load_benchmark(name)
    assert module.PRESETS == ("tiny", "small", "large")
    assert isinstance(module.DESCRIPTION, str) and "\n" not in module.DESCRIPTION
    named = ("all-to-all",) if name == "moe" else ("all-gather", "reduce-scatter", "while")
    assert module.__doc__ and all(word in module.__doc__ for word in named)
    with pytest.raises(ValueError, match="known presets: tiny, small, large"):
        module.workload("enormous")


def test_scan_transformer_sizes_must_divide_over_the_devices():
    module = load_benchmark("scan-transformer")
    assert module.resolve_config("large", 8)["batch"] == 64
    with pytest.raises(ValueError, match="not divisible by 3 devices"):
        module.resolve_config("small", 3)


def test_moe_holds_two_experts_at_least_and_a_capacity_per_device():
    module = load_benchmark("moe")
    assert module.resolve_config("tiny", 1)["experts"] == 2  # top-2 routing on one device
    cfg = module.resolve_config("small", 8)
    assert (cfg["experts"], cfg["tokens"], cfg["capacity"]) == (16, 2048, 40)
