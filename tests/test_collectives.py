"""Reading the collectives of a compiled program (`autotune.rules.collectives`), and carrying
them from the trial child to the parent.

The rule is tested in-process on HLO text: a hand-written module with every
form it reads, then (marked slow) the optimised HLO of the repository's
transformer and mlp-dp benchmarks compiled on 8 host devices in a fresh
process (the device count must be set before jax starts, so not in this one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_fit import TPU_SPACE

from autotune.child.program import hlo_stats
from autotune.ground.protocol import SCHEMA_VERSION, Job, Phase, ProtocolError, parse_result
from autotune.ground.records import CollectiveStats
from autotune.rules.collectives import (
    KINDS,
    array_sizes,
    collective_profile,
    dtype_bits,
    profile_from_json,
    profile_json,
)
from autotune.rules.measurement import measurement_from_result
from autotune.spaces import load_space, load_space_text
from autotune.spaces.fit import Action, collective_changes

ROOT = Path(__file__).resolve().parents[1]
MiB = 1 << 20

#: Every form the reader meets: a combined (tuple) all-reduce with an index comment, an
#: asynchronous all-gather and collective-permute (start/done), a while loop whose body
#: calls the computation holding an all-to-all, tiled layouts, a dynamic dimension.
HLO = """\
HloModule jit_step, is_scheduled=true, entry_computation_layout={(f32[1024]{0})->f32[1024]{0}}

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(f32[] %x, f32[] %y)
}

%inner (p: bf16[8,128]) -> bf16[64,128] {
  %p = bf16[8,128]{1,0} parameter(0)
  ROOT %a2a = bf16[64,128]{1,0:T(8,128)(2,1)} all-to-all(bf16[8,128]{1,0} %p), dimensions={0}
}

%body (state: (s32[], f32[256])) -> (s32[], f32[256]) {
  %state = (s32[], f32[256]{0}) parameter(0)
  %x = f32[256]{0} get-tuple-element(%state), index=1
  %t = bf16[8,128]{1,0} constant({...})
  %c = bf16[64,128]{1,0} call(%t), to_apply=%inner
  %cp-start = (f32[256]{0}, f32[256]{0}, u32[], u32[]) collective-permute-start(%x), channel_id=3
  %cp-done = f32[256]{0} collective-permute-done(%cp-start)
  %i = s32[] get-tuple-element(%state), index=0
  ROOT %next = (s32[], f32[256]{0}) tuple(%i, %cp-done)
}

%cond (state: (s32[], f32[256])) -> pred[] {
  %state = (s32[], f32[256]{0}) parameter(0)
  %i = s32[] get-tuple-element(%state), index=0
  %n = s32[] constant(4)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

ENTRY %main (a: f32[1024], b: pred[3], c: s4[10], z: f8e4m3fn[128,4]) -> f32[1024] {
  %a = f32[1024]{0} parameter(0)
  %b = pred[3]{0} parameter(1)
  %c = s4[10]{0} parameter(2)
  %z = f8e4m3fn[128,4]{1,0} parameter(3)
  %ar = (f32[1024]{0}, pred[3]{0}, /*index=2*/s4[10]{0}) all-reduce(%a, %b, %c), to_apply=%add
  %ag-start = (f32[128]{0}, f32[1024]{0}) all-gather-start(%a), channel_id=2, dimensions={0}
  %ag-done = f32[1024]{0} all-gather-done(%ag-start)
  %rs = f8e4m3fn[<=16,4]{1,0} reduce-scatter(%z), channel_id=4, dimensions={0}, to_apply=%add
  %init = (s32[], f32[256]{0}) tuple(%zero, %slice)
  %w = (s32[], f32[256]{0}) while(%init), condition=%cond, body=%body
  ROOT %out = f32[1024]{0} add(%ag-done, %a)
}
"""

EXPECTED = {
    "all-reduce": CollectiveStats(count=1, bytes=4096 + 3 + 5, smallest_bytes=3,
                                  largest_bytes=4104),
    "all-gather": CollectiveStats(count=1, bytes=4096, smallest_bytes=4096, largest_bytes=4096),
    "reduce-scatter": CollectiveStats(count=1, bytes=64, smallest_bytes=64, largest_bytes=64),
    "collective-permute": CollectiveStats(count=1, bytes=1024, loop_count=1, loop_bytes=1024,
                                          smallest_bytes=1024, largest_bytes=1024),
    "all-to-all": CollectiveStats(count=1, bytes=16384, loop_count=1, loop_bytes=16384,
                                  smallest_bytes=16384, largest_bytes=16384),
}


class Compiled:
    """What `hlo_stats` reads of a compiled program: its text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def as_text(self) -> str:
        return self.text


@pytest.mark.parametrize(("dtype", "bits"), [
    ("f32", 32), ("bf16", 16), ("f16", 16), ("s8", 8), ("u64", 64), ("pred", 8),
    ("f8e4m3fn", 8), ("f8e5m2", 8), ("s4", 4), ("f4e2m1fn", 4), ("c64", 64), ("c128", 128),
    ("token", 0), ("opaque", 0),
])
def test_element_sizes(dtype, bits):
    assert dtype_bits(dtype) == bits


@pytest.mark.parametrize(("shape", "sizes"), [
    ("f32[1024,512]{1,0}", [2 * MiB]),
    ("f32[]", [4]),
    ("(f32[2]{0}, bf16[4,4]{1,0}, /*index=2*/pred[3]{0})", [8, 32, 3]),
    ("bf16[64,128]{1,0:T(8,128)(2,1)}", [16384]),
    ("s4[3]{0}", [2]),  # 12 bits round up to 2 bytes
    ("f32[<=10,2]{1,0}", [80]),
    ("(f32[256]{0}, f32[256]{0}, u32[], u32[])", [1024, 1024, 4, 4]),
    ("token[]", [0]),
])
def test_array_sizes_of_shapes(shape, sizes):
    assert array_sizes(shape) == sizes


def test_every_form_of_collective_is_read_with_its_size_and_loop():
    assert collective_profile(HLO) == EXPECTED


def test_hlo_printed_without_percent_signs_reads_the_same():
    assert collective_profile(HLO.replace("%", "")) == EXPECTED


def test_the_counts_agree_with_the_hlo_statistics():
    stats = hlo_stats(Compiled(HLO))
    assert {kind: stats[kind] for kind in KINDS} == {
        kind: p.count for kind, p in collective_profile(HLO).items()}


def test_a_program_without_collectives_has_an_empty_profile():
    assert collective_profile("HloModule m\n\nENTRY %main () -> f32[] {\n"
                              "  ROOT %c = f32[] constant(1)\n}\n") == {}
    assert collective_profile("") == {}


# --- through the result document ----------------------------------------------------------


def result(**fields: Any) -> str:
    return json.dumps({"schema_version": SCHEMA_VERSION, "status": "ok", "message": "",
                       "fingerprint": "abc", **fields})


def test_the_result_document_carries_the_profile_to_the_measurement():
    body = parse_result(result(collectives=profile_json(EXPECTED), step_times_s=[0.1]))
    assert measurement_from_result(body).collectives == EXPECTED
    old = parse_result(result(step_times_s=[0.1]))  # a child from before the field
    assert measurement_from_result(old).collectives is None
    assert profile_from_json({"all-reduce": {"count": 2, "bytes": 8, "later": 1}}) == {
        "all-reduce": CollectiveStats(count=2, bytes=8)}


@pytest.mark.parametrize(("value", "message"), [
    ([1], "result field 'collectives': expected an object, got [1]"),
    ({"all-reduce": 3}, "result field 'collectives.all-reduce': expected an object, got 3"),
    ({"all-reduce": {"count": -1}},
     "result field 'collectives.all-reduce.count': expected a whole number, got -1"),
    ({"all-reduce": {"bytes": 1.5}},
     "result field 'collectives.all-reduce.bytes': expected a whole number, got 1.5"),
    ({"all-reduce": {"count": True}},
     "result field 'collectives.all-reduce.count': expected a whole number, got True"),
])
def test_a_malformed_profile_breaks_the_protocol(value, message):
    with pytest.raises(ProtocolError) as raised:
        parse_result(result(collectives=value))
    assert str(raised.value) == message


# --- real programs (slow: compiled in a fresh process on 8 host devices) ------------------

COMPILE = """
import json, sys
import jax
from autotune.child.workload import build_workload
work = build_workload(sys.argv[1], "small")
step = work.step if hasattr(work.step, "lower") else jax.jit(work.step)
text = step.lower(*work.args).compile().as_text()
json.dump({"hlo": text, "meta": work.meta}, open(sys.argv[2], "w"))
"""



@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """benchmark -> {"hlo": its optimised HLO, "meta": the workload's meta}."""
    pytest.importorskip("jax")
    folder = tmp_path_factory.mktemp("hlo")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
           "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    out = {}
    for name in ("transformer", "mlp-dp"):
        path = folder / f"{name}.json"
        done = subprocess.run([sys.executable, "-c", COMPILE, str(ROOT / "benchmarks" /
                               f"{name}.py"), str(path)], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        out[name] = json.loads(path.read_text())
    return out


@pytest.mark.slow
def test_the_transformer_gathers_every_weight_and_scatters_every_gradient(compiled):
    hlo, meta = compiled["transformer"]["hlo"], compiled["transformer"]["meta"]
    profile = collective_profile(hlo)
    stats = hlo_stats(Compiled(hlo))
    assert {k: v.count for k, v in profile.items()} == {k: stats[k] for k in KINDS if stats[k]}
    layers, d, ff, vocab = meta["layers"], meta["d_model"], meta["d_ff"], meta["vocab"]
    weights = 4 * (vocab * d + layers * (d * 3 * d + d * d + 2 * d * ff))  # f32, all sharded
    assert meta["device_count"] == 8
    assert profile["all-gather"].bytes == weights  # each device gathers whole matrices
    assert profile["reduce-scatter"].bytes == weights // 8  # and keeps its shard of each
    assert profile["all-gather"].count == profile["reduce-scatter"].count == 1 + 4 * layers
    assert {"all-to-all", "collective-permute"}.isdisjoint(profile)
    assert not any(p.in_loop for p in profile.values())


@pytest.mark.slow
def test_the_transformer_clips_combine_thresholds_to_its_sizes(compiled):
    profile = collective_profile(compiled["transformer"]["hlo"])
    changes = {c.param: c for c in collective_changes(load_space("gpu-collectives"), profile)}
    for flag, kind in (("xla_gpu_all_gather_combine_threshold_bytes", "all-gather"),
                       ("xla_gpu_reduce_scatter_combine_threshold_bytes", "reduce-scatter"),
                       ("xla_gpu_all_reduce_combine_threshold_bytes", "all-reduce")):
        change = changes[flag]
        assert change.action is Action.CLIPPED
        assert profile[kind].bytes < 16 * MiB  # every documented value combines all of them
        assert change.new == (16 * MiB,) and len(change.old) == 10
    assert changes["xla_gpu_enable_pipelined_all_gather"].action is Action.DROPPED  # no loop
    bound = {c.param: c for c in collective_changes(load_space("tpu-latency-bound"), profile)}
    assert bound["xla_all_to_all_latency_bound_threshold_in_bytes"].action is Action.DROPPED
    assert bound["xla_all_gather_latency_bound_threshold_in_bytes"].new == (4 * MiB,)


@pytest.mark.slow
def test_mlp_dp_all_reduces_its_gradients_and_drops_all_to_all_params(compiled):
    hlo, meta = compiled["mlp-dp"]["hlo"], compiled["mlp-dp"]["meta"]
    profile = collective_profile(hlo)
    assert set(profile) == {"all-reduce"}
    gradients = 4 * meta["parameter_count"]
    assert gradients <= profile["all-reduce"].bytes <= gradients + 64  # and the loss
    space = load_space_text(TPU_SPACE)  # an all-to-all flag and threshold, an all-reduce one
    changes = {c.param: c.action for c in collective_changes(space, profile)}
    assert changes == {"xla_tpu_enable_async_all_to_all": Action.DROPPED,
                       "xla_all_to_all_latency_bound_threshold_in_bytes": Action.DROPPED,
                       "xla_all_reduce_latency_bound_threshold_in_bytes": Action.CLIPPED}


@pytest.mark.slow
def test_a_real_child_reports_the_collectives_of_its_program(tmp_path: Path):
    from autotune.launch.launcher import SubprocessLauncher, TrialRequest

    pytest.importorskip("jax")
    request = TrialRequest(workload=ROOT / "benchmarks" / "mlp-dp.py", preset="tiny",
                           job=Job(compiler_options={}, phases=(Phase.COMPILE,)),
                           env={"XLA_FLAGS": "--xla_force_host_platform_device_count=8",
                                "JAX_PLATFORMS": "cpu"},
                           timeout_s=300)
    outcome = SubprocessLauncher(scratch_root=tmp_path).launch(request)
    assert outcome.ok, outcome.message + outcome.stderr_tail[-2000:]
    m = outcome.measurement
    assert m is not None and m.fingerprint and not m.step_times_s
    assert m.collectives is not None and set(m.collectives) == {"all-reduce"}
    assert m.collectives["all-reduce"].count == m.hlo_stats["all-reduce"]
