"""Profile-guided latency estimation: the profile's rules and record (`autotune.pgle`), and
the child's profile phase (`autotune.child.profile`) on a real CPU trace."""

from __future__ import annotations

import gzip
import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.child.failure import Failure
from autotune.child.profile import trace_event_costs, trace_files
from autotune.pgle import (
    ALL_ASYNC,
    ASYNC_OFF_FLAG,
    CPU_TRACE_FLAG,
    LHS_FLAG,
    META_SUFFIX,
    PROFILE_PATH_FLAG,
    Cost,
    ProfileMeta,
    aggregate,
    costs_from_trace_events,
    decode_profiled_instructions,
    hlo_instruction_names,
    parse_pbtxt,
    performance_options,
    profile_run_options,
    read_profile,
    render_pbtxt,
    stale_reasons,
    without_profile,
    write_profile,
)

ROOT = Path(__file__).resolve().parents[1]


def meta(**changes: object) -> ProfileMeta:
    base = dict(model="mlp/small", fingerprint="1a2b3c4d", xla_version="0.10.2",
                backend="gpu", flags={"xla_gpu_enable_triton_gemm": False}, source="converter",
                runs=5, percentile=50.0, created_at=1_700_000_000.0)
    return ProfileMeta(**{**base, **changes})  # type: ignore[arg-type]


# --- the two runs -------------------------------------------------------------------------------

def test_the_profile_run_turns_the_scheduler_and_async_collectives_off_and_keeps_the_rest():
    options = {"xla_gpu_enable_triton_gemm": False, LHS_FLAG: True,
               PROFILE_PATH_FLAG: "/old.pbtxt", "xla_gpu_graph_level": 0}
    assert profile_run_options("gpu", options) == {
        "xla_gpu_enable_triton_gemm": False, "xla_gpu_graph_level": 0,
        LHS_FLAG: False, ASYNC_OFF_FLAG: ALL_ASYNC}
    assert profile_run_options("cpu", {}) == {
        LHS_FLAG: False, ASYNC_OFF_FLAG: ALL_ASYNC, CPU_TRACE_FLAG: True}
    assert CPU_TRACE_FLAG not in profile_run_options("tpu", {})
    assert options[PROFILE_PATH_FLAG] == "/old.pbtxt"  # the caller's mapping is untouched
    assert ALL_ASYNC.split(",") == ["ALLREDUCE", "ALLGATHER", "REDUCESCATTER",
                                    "COLLECTIVEBROADCAST", "ALLTOALL", "COLLECTIVEPERMUTE"]
    with pytest.raises(ValueError, match="'cuda'"):
        profile_run_options("cuda", {})


def test_the_performance_run_turns_the_scheduler_on_and_names_the_profile():
    options = {"xla_gpu_enable_triton_gemm": False, LHS_FLAG: False,
               PROFILE_PATH_FLAG: "/old.pbtxt"}
    assert performance_options(options, "/p/profile.pbtxt") == {
        "xla_gpu_enable_triton_gemm": False, LHS_FLAG: True,
        PROFILE_PATH_FLAG: "/p/profile.pbtxt"}
    assert without_profile(performance_options({"a": 1}, "/p")) == {"a": 1, LHS_FLAG: True}


# --- costs from what was measured ---------------------------------------------------------------

HLO = """HloModule jit_mlp, entry_computation_layout={(f32[64,64]{1,0})->f32[]}

%wrapped_tanh_computation (param_0.2: f32[32,64]) -> f32[32,64] {
  %param_0.2 = f32[32,64]{1,0} parameter(0)
  ROOT %tanh.0 = f32[32,64]{1,0} tanh(%param_0.2), metadata={op_name="jit(mlp)/tanh"}
}

ENTRY %main.2 (w1.1: f32[64,64]) -> f32[] {
  %w1.1 = f32[64,64]{1,0} parameter(0), metadata={op_name="w1"}
  %ynn_fusion.1 = f32[32,64]{1,0} fusion(%w1.1), kind=kCustom, calls=%fused_computation.1
  ROOT %wrapped_reduce-window = f32[1,2]{1,0} fusion(%ynn_fusion.1), kind=kLoop
}

FileNames
1 "/tmp/x.py"

StackFrames
1 {file_location_id=1 parent_frame_id=1}
"""


def test_every_instruction_of_every_computation_is_named_with_or_without_the_percent():
    names = {"param_0.2", "tanh.0", "w1.1", "ynn_fusion.1", "wrapped_reduce-window"}
    assert hlo_instruction_names(HLO) == names
    assert hlo_instruction_names(HLO.replace("%", "")) == names


def test_a_percentile_interpolates_between_ranks_and_keeps_positive_costs_sorted_by_name():
    samples = {"b": [4.0, 1.0, 3.0, 2.0], "a": [10.0], "zero": [0.0, 0.0], "empty": [],
               "odd": [1.0, math.nan, 3.0, math.inf], "negative": [-1.0]}
    assert aggregate(samples, 50) == [Cost("a", 10.0), Cost("b", 2.5), Cost("odd", 2.0)]
    assert aggregate(samples, 0)[1] == Cost("b", 1.0)
    assert aggregate(samples, 100)[1] == Cost("b", 4.0)
    assert aggregate(samples, 25)[1] == Cost("b", 1.75)  # rank 0.75 between 1 and 2
    for bad in (-1, 100.5):
        with pytest.raises(ValueError, match="percentile"):
            aggregate(samples, bad)


def test_trace_events_count_only_complete_events_named_as_instructions():
    events = [
        {"ph": "X", "name": "ynn_fusion.1", "dur": 8.0},
        {"ph": "X", "name": "ynn_fusion.1", "dur": 6.0},
        {"ph": "X", "name": "ynn_fusion.1", "dur": 7.0},
        {"ph": "X", "name": "end: ynn_fusion.1", "dur": 0.3},
        {"ph": "X", "name": "PjitFunction(jit(mlp))", "dur": 90.0},
        {"ph": "i", "name": "tanh.0", "dur": 50.0},      # not a complete event
        {"ph": "X", "name": "tanh.0"},                    # no duration
        {"ph": "X", "name": "tanh.0", "dur": True},       # not a number
        {"ph": "X", "name": ["tanh.0"], "dur": 1.0},      # not a name
        {"ph": "X", "name": "wrapped_reduce-window", "dur": 2},
    ]
    assert costs_from_trace_events(events, hlo_instruction_names(HLO), 50) == [
        Cost("wrapped_reduce-window", 2.0), Cost("ynn_fusion.1", 7.0)]


# --- ProfiledInstructionsProto's wire format ----------------------------------------------------

def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def length_field(number: int, body: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(body)) + body


def instruction_cost(name: str, cost_us: float) -> bytes:
    return length_field(1, name.encode()) + bytes([2 << 3 | 1]) + struct.pack("<d", cost_us)


def test_the_wire_format_gives_the_costs_in_order_and_skips_latencies_and_unknown_fields():
    one = bytes.fromhex("0a 01 61 11") + struct.pack("<d", 1.5)  # name "a", cost_us 1.5
    assert decode_profiled_instructions(length_field(1, one)) == [Cost("a", 1.5)]
    latency = length_field(1, b"src") + length_field(2, b"dst") + bytes([3 << 3 | 1]) + bytes(8)
    unknown = (varint(7 << 3 | 0) + varint(300) + bytes([8 << 3 | 5]) + bytes(4)
               + length_field(9, b"zz"))
    long_name = "fusion." + "x" * 200  # a length above 127: a two-byte varint
    data = (length_field(1, instruction_cost("all-gather-start.1", 7040.5215))
            + length_field(2, latency) + unknown
            + length_field(1, instruction_cost(long_name, 2.0) + unknown)
            + length_field(1, b""))  # an empty message: proto3's defaults
    assert decode_profiled_instructions(data) == [
        Cost("all-gather-start.1", 7040.5215), Cost(long_name, 2.0), Cost("", 0.0)]
    assert decode_profiled_instructions(b"") == []


@pytest.mark.parametrize("data, why", [
    (length_field(1, instruction_cost("fusion", 3.0))[:-3], "truncated"),  # message cut short
    (length_field(1, instruction_cost("fusion", 3.0)[:-3]), "truncated"),  # cost cut short
    (bytes([1 << 3 | 2]), "truncated varint"),                              # no length
    (bytes([1 << 3 | 2, 0x80]), "truncated varint"),                        # length cut short
    (bytes([1 << 3 | 3]), "wire type 3"),                                   # a group
    (bytes([0 << 3 | 0, 0]), "field number 0"),
    (length_field(1, length_field(1, b"\xff")), "UTF-8"),
])
def test_malformed_wire_data_is_a_value_error(data, why):
    with pytest.raises(ValueError, match=why):
        decode_profiled_instructions(data)


# --- the text proto -----------------------------------------------------------------------------

def test_the_text_proto_is_the_guides_form_and_reads_back_with_escaped_names():
    costs = [Cost("all-gather-start.1", 7040.5215), Cost("wrapped_transpose", 2.192),
             Cost('say "hi"\\now', 1e-05), Cost("tab\there\nline\x01", 3.0),
             Cost("unicode-é", 12.0)]
    text = render_pbtxt(costs)
    lines = text.splitlines()
    assert lines[0] == 'costs { name: "all-gather-start.1" cost_us: 7040.5215 }'
    assert lines[2] == 'costs { name: "say \\"hi\\"\\\\now" cost_us: 1e-05 }'
    assert lines[3] == 'costs { name: "tab\\there\\nline\\001" cost_us: 3.0 }'
    assert len(lines) == len(costs) and text.endswith("\n")
    assert parse_pbtxt(text) == costs
    assert render_pbtxt([]) == "" and parse_pbtxt("") == []
    with pytest.raises(ValueError, match="not finite"):
        render_pbtxt([Cost("x", math.inf)])


def test_the_text_proto_reader_takes_comments_spacing_and_the_other_escapes():
    text = ('# a profile\n\n  costs {name: "a\\x41\\101\\\'" cost_us: 12. }\n'
            'costs { name: "\\303\\251" cost_us: .5e1 }\n')
    assert parse_pbtxt(text) == [Cost("aAA'", 12.0), Cost("é", 5.0)]


@pytest.mark.parametrize("line, why", [
    ('costs { name: "a" cost_us: 1.0 } extra', "expected costs"),
    ('costs { name: "a" }', "expected costs"),
    ('costs { name: "a" cost_us: inf }', "expected costs"),
    ('latencies { source: "a" target: "b" latency_us: 1.0 }', "expected costs"),
    ('costs { name: "a"b" cost_us: 1.0 }', "expected costs"),
    ('costs { name: "a\\q" cost_us: 1.0 }', "unknown escape"),
    ('costs { name: "a\\777" cost_us: 1.0 }', "above one byte"),
    ('costs { name: "a\\377" cost_us: 1.0 }', "not UTF-8"),
])
def test_any_other_line_is_refused_by_its_number(line, why):
    text = 'costs { name: "ok" cost_us: 1.0 }\n\n' + line + "\n"
    with pytest.raises(ValueError, match=f"^line 3: .*{why}") as caught:
        parse_pbtxt(text)
    assert repr(line) in str(caught.value)


# --- the record and the files -------------------------------------------------------------------

def test_the_record_survives_its_json_round_trip():
    record = meta(flags={"a": True, "b": 3, "c": 2.5, "d": "x"}, fingerprint=None)
    assert ProfileMeta.from_json(record.to_json()) == record
    body = json.loads(record.to_json())
    assert ProfileMeta.from_json(json.dumps({**body, "later": 1})) == record


@pytest.mark.parametrize("field, value", [
    ("model", 3), ("fingerprint", 7), ("xla_version", None), ("backend", "cuda"),
    ("flags", {"a": None}), ("flags", []), ("source", "nsys"), ("runs", 0), ("runs", True),
    ("percentile", 101), ("created_at", "now"),
])
def test_a_bad_record_names_its_field(field, value):
    body = {**json.loads(meta().to_json()), field: value}
    with pytest.raises(ValueError, match=f"field '{field}'"):
        ProfileMeta.from_json(json.dumps(body))
    del body[field]
    with pytest.raises(ValueError, match=f"field '{field}': missing"):
        ProfileMeta.from_json(json.dumps(body))


def test_a_record_that_is_not_a_json_object_is_refused():
    for text in ("{", "[1]"):
        with pytest.raises(ValueError, match="profile record"):
            ProfileMeta.from_json(text)


def test_a_profile_and_its_record_are_written_whole_and_read_back(tmp_path):
    path = str(tmp_path / "new" / "profile.pbtxt")
    costs = [Cost("fusion.1", 12.5), Cost('odd "name"', 0.25)]
    write_profile(path, costs, meta())
    assert read_profile(path) == (costs, meta())
    assert sorted(os.listdir(tmp_path / "new")) == ["profile.pbtxt", "profile.pbtxt" + META_SUFFIX]
    assert Path(path).read_text() == render_pbtxt(costs)
    write_profile(path, costs[:1], meta(runs=2))  # replaced in place
    assert read_profile(path) == (costs[:1], meta(runs=2))


def test_reading_a_profile_says_what_is_wrong(tmp_path):
    path = str(tmp_path / "profile.pbtxt")
    with pytest.raises(ValueError, match="no profile at .*profile.pbtxt"):
        read_profile(path)
    Path(path).write_text('costs { name: "a" cost_us: 1.0 }\n')
    with pytest.raises(ValueError, match=r"no record beside it \(.*profile.pbtxt.meta.json"):
        read_profile(path)
    Path(path + META_SUFFIX).write_text(meta().to_json())
    assert read_profile(path) == ([Cost("a", 1.0)], meta())
    Path(path).write_text('costs { name: "a" cost_us: 1.0 }\nnonsense\n')
    with pytest.raises(ValueError, match="profile.pbtxt: line 2"):
        read_profile(path)
    Path(path).write_text("")
    Path(path + META_SUFFIX).write_text("{}")
    with pytest.raises(ValueError, match="meta.json: profile record field 'model'"):
        read_profile(path)


# --- does a profile belong here -----------------------------------------------------------------

HERE = dict(xla_version="0.10.2", backend="gpu", fingerprint="1a2b3c4d",
            flags={"xla_gpu_enable_triton_gemm": False}, model="mlp/small")


def test_a_profile_of_this_model_program_version_backend_and_flags_is_fresh():
    assert stale_reasons(meta(), **HERE) == []
    with_path = {**HERE, "flags": {"xla_gpu_enable_triton_gemm": False,
                                   PROFILE_PATH_FLAG: "/p.pbtxt"}}
    assert stale_reasons(meta(flags={**meta().flags, PROFILE_PATH_FLAG: "/q"}),
                         **with_path) == []
    unknown = {**HERE, "fingerprint": None, "model": None}
    assert stale_reasons(meta(), **unknown) == []
    assert stale_reasons(meta(fingerprint=None), **HERE) == []


@pytest.mark.parametrize("change, reason", [
    ({"xla_version": "0.10.1"},
     "the profile was recorded with XLA (jaxlib) 0.10.1, this is 0.10.2"),
    ({"backend": "cpu"}, "the profile was recorded on the cpu backend, this is gpu"),
    ({"model": "mlp/large"}, "the profile was recorded for model 'mlp/large', this is 'mlp/small'"),
    ({"fingerprint": "3c4d5e6f"},
     "the profile was recorded for program 3c4d5e6f, this configuration compiles to 1a2b3c4d"),
    ({"flags": {"xla_gpu_enable_triton_gemm": False, "xla_gpu_x": 1}},
     "the profile was recorded with other flags: xla_gpu_x=1 there, unset here"),
    ({"flags": {}},
     "the profile was recorded with other flags: xla_gpu_enable_triton_gemm=unset there, "
     "false here"),
    ({"flags": {"xla_gpu_enable_triton_gemm": True, "xla_s": "1"}},
     "the profile was recorded with other flags: xla_gpu_enable_triton_gemm=true there, "
     "false here; xla_s=\"1\" there, unset here"),
])
def test_each_difference_is_a_reason_naming_both_values(change, reason):
    assert stale_reasons(meta(**change), **HERE) == [reason]


def test_flags_of_another_kind_differ_and_every_reason_is_given():
    assert stale_reasons(meta(flags={"a": 1}), **{**HERE, "flags": {"a": True}}) == [
        "the profile was recorded with other flags: a=1 there, true here"]
    assert stale_reasons(meta(flags={"a": 1}), **{**HERE, "flags": {"a": 1.0}}) == []
    everything = meta(model="m", backend="cpu", xla_version="0.9", fingerprint="ff", flags={})
    assert len(stale_reasons(everything, **HERE)) == 5


# --- the child's trace reading, on hand-made trace files ----------------------------------------

def write_trace(folder: Path, events: list[dict[str, object]]) -> Path:
    folder.mkdir(parents=True)
    path = folder / "vm.trace.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        json.dump({"displayTimeUnit": "ns", "traceEvents": events}, fh)
    return path


def test_a_trace_gives_the_costs_of_its_newest_run(tmp_path):
    old = write_trace(tmp_path / "plugins/profile/2026_01_01_00_00_00",
                      [{"ph": "X", "name": "tanh.0", "dur": 100.0}])
    new = write_trace(tmp_path / "plugins/profile/2026_01_01_00_00_01",
                      [{"ph": "X", "name": "tanh.0", "dur": d} for d in (1.0, 2.0, 9.0)])
    os.utime(old.parent, (1, 1))
    assert trace_files(str(tmp_path)) == [new]
    assert trace_event_costs(str(tmp_path), HLO, 50) == [Cost("tanh.0", 2.0)]


def test_no_trace_or_no_matching_event_is_a_crash_that_says_which(tmp_path):
    with pytest.raises(Failure, match="no trace file") as caught:
        trace_event_costs(str(tmp_path), HLO, 50)
    assert caught.value.kind == "crashed"
    write_trace(tmp_path / "plugins/profile/x", [{"ph": "X", "name": "other", "dur": 1.0}])
    with pytest.raises(Failure, match="no event of the trace .1 events.* 5 HLO instructions"):
        trace_event_costs(str(tmp_path), HLO, 50)
    (tmp_path / "plugins/profile/x/vm.trace.json.gz").write_bytes(b"not gzip")
    with pytest.raises(Failure, match="cannot be read"):
        trace_event_costs(str(tmp_path), HLO, 50)


# --- a real CPU trace (a subprocess: JAX's profiler is global to a process) ---------------------

PROFILE_A_STEP = """
import json, sys
import jax, jax.numpy as jnp
from jax.experimental.profiler import get_profiled_instructions_proto
from autotune.child.profile import collect_profile
from autotune.pgle import profile_run_options

def mlp(w1, w2, x):
    return jnp.tanh(jnp.tanh(x @ w1) @ w2).sum()

args = (jnp.full((64, 64), 0.01), jnp.full((64, 64), 0.02), jnp.ones((32, 64)))
compiled = jax.jit(mlp).lower(*args).compile(compiler_options=profile_run_options("cpu", {}))
hlo = compiled.as_text()
costs, source = collect_profile(compiled, args, runs=3, percentile=50.0,
                                trace_dir=sys.argv[1], hlo_text=hlo)
converter = get_profiled_instructions_proto(sys.argv[1])
json.dump({"hlo": hlo, "costs": [[c.name, c.cost_us] for c in costs], "source": source,
           "converter_bytes": len(converter)}, open(sys.argv[2], "w"))
"""


@pytest.fixture(scope="module")
def cpu_profile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The profile of a 2-layer tanh MLP traced on CPU in a child process."""
    pytest.importorskip("jax")
    folder = tmp_path_factory.mktemp("pgle")
    out = folder / "profile.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", PROFILE_A_STEP, str(folder / "trace"),
                           str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(out.read_text()))


@pytest.mark.slow
@pytest.mark.oldest
def test_a_cpu_trace_gives_a_positive_cost_per_executed_instruction(cpu_profile, tmp_path):
    costs = [Cost(name, cost) for name, cost in cpu_profile["costs"]]
    assert cpu_profile["source"] == "trace-events"
    assert costs and {c.name for c in costs} <= hlo_instruction_names(cpu_profile["hlo"])
    assert all(math.isfinite(c.cost_us) and c.cost_us > 0 for c in costs)
    # a fused instruction is costed: by its opcode, not its name (XLA names CPU fusions
    # `fusion.N` now, `wrapped_tanh` in jaxlib 0.8.0)
    fusions = {line.split("=", 1)[0].strip().lstrip("%").removeprefix("ROOT ").lstrip("%")
               for line in cpu_profile["hlo"].splitlines()
               if "=" in line and " fusion(" in line.split("=", 1)[1]}
    assert fusions & {c.name for c in costs}
    record = meta(backend="cpu", source="trace-events", runs=3, flags={})
    write_profile(str(tmp_path / "profile.pbtxt"), costs, record)
    assert read_profile(str(tmp_path / "profile.pbtxt")) == (costs, record)


@pytest.mark.slow
def test_jax_converter_gives_nothing_for_a_cpu_trace(cpu_profile):
    """Measured with jaxlib 0.10.2 on CPU: `get_profiled_instructions_proto` returns b''
    for a CPU trace (it reads GPU traces), so the costs come from the trace's events."""
    assert cpu_profile["converter_bytes"] == 0
