"""The flag probe: what the installed XLA says about flags and values, asked in subprocesses."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from autotune.flags import Catalog, FlagSpec
from autotune.flags import _probe_runner as runner
from autotune.flags.probe import (
    FlagStatus,
    ProbeError,
    ProbeReport,
    check_values,
    probe,
)
from autotune.ground.errors import UsageError

# Documented flags the installed XLA (jaxlib 0.10.2) no longer knows (DESIGN.md).
OBSOLETE = [
    "xla_gpu_graph_level",
    "xla_gpu_enable_triton_softmax_fusion",
    "xla_gpu_simplify_all_fp_conversions",
    "xla_gpu_enable_async_all_gather",
    "xla_gpu_enable_pipelined_collectives",
    "xla_gpu_lhs_enable_gpu_async_tracker",
]
COMMAND_BUFFER = "xla_gpu_enable_command_buffer"
TPU_LHS = "xla_tpu_enable_latency_hiding_scheduler"


def flag(name: str, type: str = "bool", channel: str = "xla_flags", **extra: object) -> FlagSpec:
    return FlagSpec.model_validate({
        "name": name, "type": type, "backend": "any", "channel": channel,
        "per_compile": channel == "xla_flags", "source": "test", "help": "test flag", **extra,
    })


# One entry of each kind the probe tells apart; the packaged catalog changes often.
CATALOG = Catalog([
    flag("xla_cpu_enable_fast_math", default=False, recommended=True),
    flag("xla_gpu_enable_latency_hiding_scheduler", default=False, recommended=True),
    flag("xla_gpu_all_reduce_combine_threshold_bytes", type="int", default=31457287,
         recommended=8589934592),
    flag(COMMAND_BUFFER, type="string", default="", recommended="0"),  # XLA rejects '0'
    flag("xla_cpu_max_isa", type="enum", values=["AVX2", "AVX512"]),  # nothing documented
    flag("xla_gpu_graph_level", type="int", recommended=0),  # gone from this XLA
    flag(TPU_LHS, channel="libtpu", recommended=True),
    flag("NCCL_PROTO", type="list", channel="env", values=["SIMPLE", "LL", "LL128"]),
])
TINY = Catalog([flag("xla_cpu_enable_fast_math", default=False)])


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("probe-cache")


@pytest.fixture(scope="module")
def report(cache_dir) -> ProbeReport:
    """One cold probe of CATALOG, with the obsolete flags and a known uncatalogued one."""
    return probe(CATALOG, extra=[*OBSOLETE, "--xla_gpu_enable_cudnn_fmha", TPU_LHS],
                 cache_dir=cache_dir)


def sample_report(**changes: object) -> ProbeReport:
    fields: dict[str, object] = dict(
        jax_version="0.10.2", jaxlib_version="0.10.2", backend="cpu", device_kind="cpu",
        libtpu=False, accepted=frozenset({"xla_a", "xla_b"}), unknown=frozenset({"xla_gone"}),
        rejected_values={"xla_b": {"0": "Illegal value for --xla_b '0'"}},
        checked_values={"xla_a": ("true", "false"), "xla_b": ("", "0")},
        per_compile={"xla_a": True, "xla_gone": False}, usage_defaults={"xla_a": "false"},
        libtpu_flags=frozenset({"xla_tpu_x"}), env_variables=frozenset({"NCCL_PROTO"}),
        runs=3, duration_s=1.5, created_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC),
    )
    return ProbeReport(**(fields | changes))  # type: ignore[arg-type]


# --- the report, without subprocesses ---------------------------------------------------


@pytest.mark.parametrize(("name", "status"), [
    ("xla_a", FlagStatus.ACCEPTED), ("--xla_b", FlagStatus.ACCEPTED),
    ("xla_gone", FlagStatus.UNKNOWN), ("xla_tpu_x", FlagStatus.CANNOT_CHECK),
    ("NCCL_PROTO", FlagStatus.NOT_XLA), ("xla_never_asked", FlagStatus.NOT_PROBED),
])
def test_status_of_each_kind_of_name(name, status):
    assert sample_report().status(name) is status


def test_value_ok_says_accepted_rejected_or_not_tried():
    report = sample_report()
    assert report.value_ok("xla_a", True) is True
    assert report.value_ok("xla_b", "0") is False
    assert report.value_ok("xla_b", "1") is None
    assert report.value_ok("xla_gone", "1") is None


def test_unknown_in_keeps_the_order_given():
    assert sample_report(unknown=frozenset({"xla_x", "xla_y"})).unknown_in(
        ["xla_y", "xla_a", "--xla_x"]) == ["xla_y", "--xla_x"]


def test_report_round_trips_through_json():
    report = sample_report()
    assert ProbeReport.from_json(report.to_json()) == report


def test_usage_table_lines_give_defaults():
    stderr = ('usage: --xla_x=1\nFlags:\n\t--xla_cpu_enable_fast_math=false \tbool\tFast math.\n'
              '\t--xla_dump_hlo_pass_re=""      \tstring\tDump passes.\n  more help\n')
    assert runner._usage_table(stderr) == {
        "xla_cpu_enable_fast_math": "false", "xla_dump_hlo_pass_re": ""}


# Recorded from jaxlib 0.10.2: two named bad values, a fatal line, then the usage table.
BAD_VALUES_STDERR = (
    "E1122 03:47:55.796320   23192 command_line_flags.cc:93] Couldn't interpret value maybe "
    "for flag xla_cpu_enable_fast_math.\n"
    "E1122 03:47:55.796364   23192 debug_options_flags.cc:145] Illegal value for "
    "--xla_gpu_enable_command_buffer '0'\n"
    "F1122 03:47:55.796376   23192 parse_flags_from_env.cc:220] Check failed: "
    "tsl::Flags::Parse(&env_argv->argc, env_argv->argv.data(), flag_list) Flag parsing failed.\n"
    "usage: --xla_cpu_enable_fast_math=maybe --xla_gpu_enable_command_buffer=0\nFlags:\n"
)


def test_named_problems_finds_every_bad_value_and_unknown_names():
    tokens = {"xla_cpu_enable_fast_math": "maybe", "xla_gpu_enable_command_buffer": "0",
              "xla_gone": "1", "xla_other": "1"}
    assert runner._named_problems(BAD_VALUES_STDERR, tokens) == (set(), {
        "xla_cpu_enable_fast_math":
            "Couldn't interpret value maybe for flag xla_cpu_enable_fast_math.",
        "xla_gpu_enable_command_buffer": "Illegal value for --xla_gpu_enable_command_buffer '0'",
    })
    unknown = "F1122 parse_flags_from_env.cc:234] Unknown flags in XLA_FLAGS: --xla_gone=1\n"
    assert runner._named_problems(unknown, tokens) == ({"xla_gone"}, {})


def test_first_error_prefers_the_line_about_flags():
    noisy = "E1122 00:00:00.1 1 cuda.cc:1] Unable to register cuDNN factory\n" + BAD_VALUES_STDERR
    assert runner._first_error(noisy).startswith("Couldn't interpret value maybe")
    assert runner._first_error("Traceback\nModuleNotFoundError: jax\n") == (
        "ModuleNotFoundError: jax")


def test_split_sets_guessed_names_apart_first():
    tokens = {"a": "1", "b": "true", "c": "1", "d": "true"}
    assert runner._split(tokens, {"b", "d"}) == [{"b": "true", "d": "true"}, {"a": "1", "c": "1"}]
    three = {"a": "1", "b": "1", "c": "1"}
    assert runner._split(three, set()) == [{"a": "1"}, {"b": "1", "c": "1"}]


def test_missing_jaxlib_says_to_install_jax(monkeypatch, tmp_path):
    def missing(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    with pytest.raises(ProbeError, match=r"install jax first \(pip install jax\)") as info:
        probe(TINY, cache_dir=tmp_path)
    assert isinstance(info.value, UsageError) and info.value.exit_code == 2


# --- real subprocesses ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["xla_cpu_enable_fast_math",
                                  "xla_gpu_enable_latency_hiding_scheduler",
                                  "xla_gpu_enable_cudnn_fmha", COMMAND_BUFFER])
def test_known_flags_are_accepted(report, name):
    assert report.status(name) is FlagStatus.ACCEPTED


@pytest.mark.slow
def test_obsolete_flags_are_unknown(report):
    assert {name: report.status(name) for name in OBSOLETE} == dict.fromkeys(
        OBSOLETE, FlagStatus.UNKNOWN)
    assert report.unknown == frozenset(OBSOLETE)


@pytest.mark.slow
def test_tpu_flags_cannot_be_checked_and_env_variables_are_not_xla(report):
    assert report.libtpu is False
    assert report.status(TPU_LHS) is FlagStatus.CANNOT_CHECK
    assert report.status("NCCL_PROTO") is FlagStatus.NOT_XLA


@pytest.mark.slow
def test_documented_values_are_tried_and_a_bad_one_recorded(report):
    assert report.checked_values[COMMAND_BUFFER] == ("", "0")
    assert report.rejected_values == {
        COMMAND_BUFFER: {"0": "Illegal value for --xla_gpu_enable_command_buffer '0'"}}
    assert report.value_ok(COMMAND_BUFFER, "0") is False
    assert report.value_ok(COMMAND_BUFFER, "") is True
    assert report.value_ok("xla_gpu_all_reduce_combine_threshold_bytes", 8589934592) is True
    assert report.value_ok("xla_cpu_enable_fast_math", "maybe") is None
    assert "xla_cpu_max_isa" not in report.checked_values  # no documented value to try


@pytest.mark.slow
def test_compiler_options_second_opinion_differs_from_xla_flags(report):
    # DESIGN.md: each route knows a name the other does not.
    assert report.per_compile["xla_gpu_enable_cudnn_fmha"] is False
    assert report.per_compile["xla_gpu_enable_pipelined_collectives"] is True
    assert report.per_compile["xla_cpu_enable_fast_math"] is True
    assert report.per_compile["xla_gpu_graph_level"] is False


@pytest.mark.slow
def test_backend_versions_and_few_subprocesses(report):
    assert (report.backend, report.device_kind) == ("cpu", "cpu")
    assert report.jaxlib_version == importlib.metadata.version("jaxlib")
    assert report.jax_version == importlib.metadata.version("jax")
    # unknown names; the rest starts; second values ('0' rejected); the rest of those again
    assert report.runs == 4


@pytest.mark.slow
def test_second_call_reads_the_cache_without_a_subprocess(report, cache_dir, monkeypatch):
    def no_subprocess(*args: object, **kwargs: object) -> None:
        raise AssertionError("the cached probe started a subprocess")

    monkeypatch.setattr(runner, "run_bounded", no_subprocess)
    again = probe(CATALOG, extra=[TPU_LHS, "xla_gpu_enable_cudnn_fmha", *reversed(OBSOLETE)],
                  cache_dir=cache_dir)
    assert again == report


@pytest.mark.slow
def test_refresh_and_a_corrupt_cache_probe_again(tmp_path):
    first = probe(TINY, cache_dir=tmp_path)
    files = list(tmp_path.glob("probe-*.json"))
    assert len(files) == 1, "the probe's answer is cached"
    cached = files[0]

    def on_disk() -> ProbeReport:
        return ProbeReport.from_json(cached.read_text(encoding="utf-8"))

    assert first.status("xla_cpu_enable_fast_math") is FlagStatus.ACCEPTED and first.runs == 1
    assert on_disk() == first
    # the cached answer comes back as it was, probed at the same moment
    assert probe(TINY, cache_dir=tmp_path) == first
    refreshed = probe(TINY, cache_dir=tmp_path, refresh=True)
    assert refreshed.created_at > first.created_at  # a new probe, not the cache
    assert on_disk() == refreshed and probe(TINY, cache_dir=tmp_path) == refreshed
    cached.write_text('{"jax_version": "0.10.2", "accepted": [', encoding="utf-8")
    recovered = probe(TINY, cache_dir=tmp_path)
    assert recovered.created_at > refreshed.created_at  # the corrupt file was probed anew
    assert recovered.status("xla_cpu_enable_fast_math") is FlagStatus.ACCEPTED
    assert on_disk() == recovered and list(tmp_path.glob("probe-*.json")) == [cached]


@pytest.mark.slow
def test_a_changed_catalog_is_probed_again(tmp_path):
    probe(TINY, cache_dir=tmp_path)
    probe(TINY, cache_dir=tmp_path, extra=["xla_gpu_graph_level"])
    assert len(list(tmp_path.glob("probe-*.json"))) == 2


@pytest.mark.slow
def test_check_values_reports_each_value():
    results = check_values(None, {
        COMMAND_BUFFER: ["0", "fusion,cublas"],
        "xla_gpu_disable_async_collectives": ["foo", "allreduce"],  # XLA names no flag
        "xla_cpu_prefer_vector_width": ["abc", "128"],
        "xla_gpu_graph_level": ["1", "2"],
    })
    assert results[COMMAND_BUFFER] == {
        "0": "Illegal value for --xla_gpu_enable_command_buffer '0'", "fusion,cublas": None}
    assert results["xla_cpu_prefer_vector_width"] == {
        "abc": "Couldn't interpret value abc for flag xla_cpu_prefer_vector_width.", "128": None}
    bad_list = results["xla_gpu_disable_async_collectives"]
    assert bad_list["allreduce"] is None and "Flag parsing failed" in (bad_list["foo"] or "")
    assert results["xla_gpu_graph_level"] == dict.fromkeys(
        ["1", "2"], "Unknown flag in XLA_FLAGS: --xla_gpu_graph_level")


@pytest.mark.slow
def test_a_guessed_value_that_xla_rejects_still_shows_the_name_is_known(tmp_path):
    # An uncatalogued list flag gets the guess "true", which XLA refuses without naming it.
    report = probe(TINY, cache_dir=tmp_path,
                   extra=["xla_gpu_disable_async_collectives", "xla_gpu_graph_level"])
    assert report.status("xla_gpu_disable_async_collectives") is FlagStatus.ACCEPTED
    assert report.status("xla_gpu_graph_level") is FlagStatus.UNKNOWN
    assert "xla_gpu_disable_async_collectives" not in report.rejected_values  # only a guess


@pytest.mark.slow
def test_a_python_that_never_starts_jax_is_an_error_not_a_hang(tmp_path):
    fake = tmp_path / "python"
    fake.write_text('#!/bin/sh\ncase "$2" in *"print(m.version"*) echo 0.10.2;; '
                    '*) sleep 60;; esac\n', encoding="utf-8")
    fake.chmod(0o755)
    with pytest.raises(ProbeError, match="jax does not start .*no answer in 1 s"):
        probe(TINY, python=str(fake), cache_dir=tmp_path, timeout_s=1)


@pytest.mark.slow
def test_the_packaged_catalog_is_probed_without_importing_jax(tmp_path):
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from autotune.flags import load_catalog\n"
        "from autotune.flags.probe import probe\n"
        f"report = probe(load_catalog(), cache_dir=Path({str(tmp_path)!r}))\n"
        "print(json.dumps({'jax': 'jax' in sys.modules, 'runs': report.runs,\n"
        "                  'backend': report.backend}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    assert facts["jax"] is False and facts["backend"] == "cpu"
    assert facts["runs"] <= 12
