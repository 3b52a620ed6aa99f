"""The packaged flag catalog: entries, groups, obsolete flags, and the built-in spaces on it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import optuna
import pytest
import yaml

from autotune.flags import Channel, compiler_options, compose_env, load_catalog, parse_catalog
from autotune.flags.catalog import FlagSpec, FlagType, UnknownGroupError
from autotune.ground.errors import AutotuneError, UsageError
from autotune.spaces import list_spaces, load_space

# --- data copied from the reference documents and DESIGN.md ---------------------------

#: Every flag of 003's "Recommended XLA Flags" list (003_90ea6a35a8fd127f.txt).
PGLE_RECOMMENDED = [
    "xla_gpu_enable_latency_hiding_scheduler", "xla_gpu_enable_triton_gemm",
    "xla_gpu_simplify_all_fp_conversions", "xla_gpu_graph_level",
    "xla_gpu_enable_highest_priority_async_stream", "xla_gpu_all_reduce_combine_threshold_bytes",
    "xla_gpu_all_gather_combine_threshold_bytes",
    "xla_gpu_reduce_scatter_combine_threshold_bytes", "xla_gpu_enable_pipelined_all_gather",
    "xla_gpu_enable_pipelined_reduce_scatter", "xla_gpu_enable_pipelined_all_reduce",
    "xla_gpu_enable_while_loop_double_buffering", "xla_gpu_enable_triton_softmax_fusion",
    "xla_gpu_enable_all_gather_combine_by_dim", "xla_gpu_enable_reduce_scatter_combine_by_dim",
    "xla_disable_hlo_passes", "xla_gpu_pgle_profile_file_or_directory_path",
]

#: The other flags and variables the four documents name (002 names none).
DOCUMENTED_ELSEWHERE = [
    # 003: profile run and logging
    "xla_gpu_disable_async_collectives", "TF_CPP_VMODULE", "TF_CPP_MIN_LOG_LEVEL",
    "TF_CPP_MAX_LOG_LEVEL",
    # 001
    "XLA_PYTHON_CLIENT_MEM_FRACTION", "xla_gpu_memory_limit_slop_factor",
    "CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_PROTO", "NCCL_NVLS_ENABLE",
    "xla_gpu_enable_pipelined_collectives", "xla_gpu_enable_pipelined_p2p",
    "xla_gpu_collective_permute_decomposer_threshold", "xla_gpu_lhs_enable_gpu_async_tracker",
    "xla_gpu_multi_streamed_windowed_einsum", "xla_gpu_threshold_for_windowed_einsum_mib",
    "xla_gpu_enable_command_buffer", "xla_gpu_enable_custom_fusions",
    "xla_gpu_enable_address_computation_fusion", "xla_gpu_enable_nccl_user_buffers",
    "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB", "xla_gpu_enable_nccl_comm_splitting",
    "xla_gpu_enable_nccl_per_stream_comms", "xla_gpu_nccl_collective_max_nchannels",
    "xla_gpu_nccl_p2p_max_nchannels", "xla_dump_to", "xla_dump_latency_hiding_schedule",
    "xla_gpu_cudnn_gemm_fusion", "xla_gpu_enable_cudnn_fmha", "xla_gpu_enable_async_reduce_scatter",
    "xla_gpu_enable_async_all_reduce", "xla_gpu_enable_async_all_gather",
    # 000: performance and memory tables, TPU list
    "xla_should_allow_loop_variant_parameter_in_chain", "xla_should_add_loop_invariant_op_in_chain",
    "xla_tpu_enable_ici_ag_pipelining", "xla_enable_async_all_gather",
    "xla_tpu_enable_async_collective_fusion",
    "xla_tpu_enable_async_collective_fusion_fuse_all_gather",
    "xla_tpu_enable_async_collective_fusion_fuse_all_reduce", "xla_tpu_enable_async_all_to_all",
    "xla_all_gather_latency_bound_threshold_in_bytes",
    "xla_all_reduce_latency_bound_threshold_in_bytes",
    "xla_collective_permute_latency_bound_threshold_in_bytes",
    "xla_all_to_all_latency_bound_threshold_in_bytes", "xla_enable_async_collective_permute",
    "xla_latency_hiding_scheduler_rerun", "xla_tpu_rwb_fusion", "xla_memory_scheduler",
    "xla_tpu_enable_latency_hiding_scheduler", "xla_jf_spmd_threshold_for_windowed_einsum_mib",
    "xla_tpu_enable_data_parallel_all_reduce_opt", "xla_tpu_data_parallel_opt_different_sized_ops",
    "xla_tpu_spmd_rng_bit_generator_unsafe", "xla_tpu_megacore_fusion_allow_ags",
    "xla_tpu_enable_ag_backward_pipelining",
]

#: DESIGN.md, "Facts about the installed XLA": documented GPU flags jaxlib 0.10.2 no longer has.
GONE_PER_DESIGN = {
    "xla_gpu_graph_level", "xla_gpu_enable_triton_softmax_fusion",
    "xla_gpu_simplify_all_fp_conversions", "xla_gpu_enable_async_all_gather",
    "xla_gpu_enable_async_all_reduce", "xla_gpu_enable_async_reduce_scatter",
    "xla_gpu_enable_custom_fusions", "xla_gpu_enable_address_computation_fusion",
    "xla_gpu_cudnn_gemm_fusion", "xla_gpu_enable_nccl_per_stream_comms",
    "xla_gpu_enable_pipelined_collectives", "xla_gpu_lhs_enable_gpu_async_tracker",
}

#: DESIGN.md: these names belong to libtpu, not to this XLA.
LIBTPU_NAME = re.compile(
    r"^(xla_tpu_.*|.*_latency_bound_threshold_in_bytes|xla_memory_scheduler"
    r"|xla_latency_hiding_scheduler_rerun|xla_jf_spmd_threshold_for_windowed_einsum_mib"
    r"|xla_should_.*|xla_enable_async_.*)$")
ENV_NAME = re.compile(r"^(NCCL_|CUDA_|XLA_PYTHON_CLIENT_|XLA_CLIENT_|TF_CPP_)")

SPACES = ["cpu", "gpu-collectives", "gpu-fsdp", "gpu-collective-matmul", "gpu-p2p",
          "gpu-runtime", "gpu-pgle", "tpu-collectives", "tpu-latency-bound", "tpu-memory"]

CATALOG = load_catalog()


def entry(name: str, **extra: object) -> dict[str, object]:
    return {"name": name, "type": "bool", "backend": "any", "channel": "xla_flags",
            "per_compile": True, "source": "s", "help": "h", **extra}


def catalog_text(*flags: dict[str, object], groups: str = "") -> str:
    document: dict[str, object] = {"schema_version": 1, "flags": list(flags)}
    return yaml.safe_dump(document) + groups


# --- entries ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", PGLE_RECOMMENDED)
def test_every_flag_of_the_pgle_recommended_list_is_in_the_catalog(name):
    assert name in CATALOG


@pytest.mark.parametrize("name", DOCUMENTED_ELSEWHERE)
def test_every_other_documented_flag_is_in_the_catalog(name):
    assert name in CATALOG


@pytest.mark.parametrize("spec", list(CATALOG), ids=lambda spec: spec.name)
def test_entry_is_complete_and_on_the_right_channel(spec: FlagSpec):
    assert spec.source and spec.help
    if LIBTPU_NAME.match(spec.name):
        assert (spec.channel, spec.backend, spec.per_compile) == (Channel.LIBTPU, "tpu", False)
    elif ENV_NAME.match(spec.name):
        assert (spec.channel, spec.per_compile) == (Channel.ENV, False)
    else:
        assert spec.channel is Channel.XLA_FLAGS and spec.name.startswith("xla_")
    for value in spec.candidates or ():
        assert spec.check_value(value) is None


def test_obsolete_flags_are_exactly_the_ones_design_says_are_gone():
    obsolete = {spec.name for spec in CATALOG if spec.obsolete is not None}
    assert obsolete == GONE_PER_DESIGN


@pytest.mark.parametrize(("name", "replaced_by"), [
    ("xla_gpu_graph_level", "xla_gpu_enable_command_buffer"),
    ("xla_gpu_enable_address_computation_fusion", "xla_gpu_enable_dynamic_slice_fusion"),
    ("xla_gpu_cudnn_gemm_fusion", "xla_gpu_cudnn_gemm_fusion_level"),
    ("xla_gpu_enable_async_all_gather", None),
    ("xla_gpu_lhs_enable_gpu_async_tracker", None),
])
def test_obsolete_flags_name_their_replacement(name, replaced_by):
    obsolete = CATALOG.get(name).obsolete
    assert obsolete is not None and obsolete.since and obsolete.note
    assert obsolete.replaced_by == replaced_by
    if replaced_by is not None:
        assert CATALOG.get(replaced_by).obsolete is None


@pytest.mark.parametrize("name", [
    "xla_gpu_enable_cudnn_fmha", "xla_gpu_enable_highest_priority_async_stream",
    "TF_CPP_MAX_LOG_LEVEL",
])
def test_accepted_flags_that_do_nothing_say_why(name):
    spec = CATALOG.get(name)
    assert spec.obsolete is None and spec.no_effect


def test_the_old_memory_fraction_name_is_deprecated_for_its_replacement():
    old = CATALOG.get("XLA_PYTHON_CLIENT_MEM_FRACTION")
    assert old.obsolete is None and old.deprecated is not None
    assert old.deprecated.replaced_by == "XLA_CLIENT_MEM_FRACTION"
    assert old.deprecated.both_fail and old.deprecated.since and old.deprecated.note
    new = CATALOG.get("XLA_CLIENT_MEM_FRACTION")
    assert new.obsolete is None and new.deprecated is None
    # 001's values carry over to the new name
    assert (new.recommended, new.candidates) == (old.recommended, old.candidates) == (
        0.9, (0.9, 0.8))


def test_deprecated_names_are_exactly_the_memory_fraction():
    assert {spec.name for spec in CATALOG if spec.deprecated is not None} == {
        "XLA_PYTHON_CLIENT_MEM_FRACTION"}


def test_pipelined_collectives_overrides_the_three_per_kind_flags_when_true():
    spec = CATALOG.get("xla_gpu_enable_pipelined_collectives")
    assert spec.overrides_when is True
    assert spec.overrides == ("xla_gpu_enable_pipelined_all_gather",
                              "xla_gpu_enable_pipelined_reduce_scatter",
                              "xla_gpu_enable_pipelined_all_reduce")


def test_every_overridden_flag_exists():
    assert all(name in CATALOG for spec in CATALOG for name in spec.overrides)


@pytest.mark.parametrize(("name", "value", "problem"), [
    ("xla_gpu_disable_async_collectives", "allreduce,allgather", None),
    ("xla_gpu_disable_async_collectives", "", "does not accept an empty list"),
    ("xla_gpu_disable_async_collectives", "ALLREDUCE", "allows only allreduce"),
    ("xla_gpu_enable_command_buffer", "", None),
    ("xla_gpu_enable_command_buffer", "FUSION,CUBLAS", None),
    ("xla_gpu_enable_command_buffer", "0", "allows only FUSION"),
    ("xla_latency_hiding_scheduler_rerun", 11, "is at most 10"),
    ("xla_memory_scheduler", "kBrkga", None),
    ("xla_all_gather_latency_bound_threshold_in_bytes", -1, None),
])
def test_check_value_of_new_entries(name, value, problem):
    found = CATALOG.get(name).check_value(value)
    assert found is None if problem is None else problem in found


# --- groups ----------------------------------------------------------------------------


def test_groups_are_the_three_of_the_tpu_guide():
    assert CATALOG.groups().keys() == {
        "tpu-ici-all-gather-pipelining", "tpu-v5e-async-all-gather", "tpu-v5e-async-all-reduce"}
    assert CATALOG.group_members("tpu-v5e-async-all-reduce") == (
        "xla_tpu_enable_async_collective_fusion",
        "xla_tpu_enable_async_collective_fusion_fuse_all_reduce")


def test_groups_are_consistent():
    for name, group in CATALOG.groups().items():
        assert group.source and group.description
        assert CATALOG.group_members(name) == group.flags
        for member in group.flags:
            assert name in CATALOG.groups_of(member)
            assert CATALOG.get(member).obsolete is None


def test_a_flag_can_be_in_two_groups():
    assert CATALOG.groups_of("xla_tpu_enable_async_collective_fusion") == [
        "tpu-v5e-async-all-gather", "tpu-v5e-async-all-reduce"]
    assert CATALOG.groups_of("xla_gpu_enable_latency_hiding_scheduler") == []


def test_unknown_group_is_a_usage_error():
    with pytest.raises(UnknownGroupError) as info:
        CATALOG.group_members("tpu-nope")
    assert str(info.value).startswith("unknown flag group 'tpu-nope'. Known groups: tpu-ici")
    assert isinstance(info.value, UsageError) and info.value.exit_code == 2


# --- malformed catalogs ----------------------------------------------------------------


@pytest.mark.parametrize(("text", "words"), [
    pytest.param(catalog_text(entry("a"), groups="groups:\n  g: {flags: [a, b], description: d, "
                              "source: s}\n"),
                 "group 'g' lists 'b', not in the catalog", id="group-member-unknown"),
    pytest.param(catalog_text(entry("a"), entry("b"), groups="groups:\n  g: {flags: [a], "
                              "description: d, source: s}\n"),
                 "groups.g", id="group-of-one"),
    pytest.param(catalog_text(entry("a", overrides=["z"], overrides_when=True)),
                 "flag 'a' overrides 'z', not in the catalog", id="override-unknown"),
    pytest.param(catalog_text(entry("a", overrides=["a"], overrides_when=True)),
                 "cannot override itself", id="override-self"),
    pytest.param(catalog_text(entry("a", overrides=["b"]), entry("b")),
                 "'overrides' and 'overrides_when' go together", id="override-without-value"),
    pytest.param(catalog_text(entry("a", obsolete={"since": "s", "replaced_by": "z",
                                                   "note": "n"})),
                 "flag 'a' is replaced by 'z', not in the catalog", id="replacement-unknown"),
    pytest.param(catalog_text(entry("a", obsolete={"since": "s", "note": "n"}, no_effect="x")),
                 "either obsolete", id="obsolete-and-no-effect"),
    pytest.param(catalog_text(entry("a", deprecated={"since": "s", "replaced_by": "z",
                                                     "note": "n"})),
                 "flag 'a' is replaced by 'z', not in the catalog", id="deprecated-for-unknown"),
    pytest.param(catalog_text(entry("a", deprecated={"since": "s", "note": "n"})),
                 "replaced_by", id="deprecated-without-replacement"),
    pytest.param(catalog_text(entry("a", deprecated={"since": "s", "replaced_by": "a",
                                                     "note": "n"})),
                 "cannot be replaced by itself", id="deprecated-for-itself"),
    pytest.param(catalog_text(entry("a", obsolete={"since": "s", "note": "n"},
                                    deprecated={"since": "s", "replaced_by": "b", "note": "n"}),
                              entry("b")),
                 "either obsolete (not accepted) or deprecated", id="obsolete-and-deprecated"),
    pytest.param(catalog_text(entry("a", type="int", candidates=[1, "x"])),
                 "candidates[1]", id="bad-candidate"),
    pytest.param(catalog_text(entry("a", allow_empty=False)), "only for list flags",
                 id="allow-empty-on-bool"),
])
def test_malformed_catalog_entries_are_clear_errors(text, words):
    with pytest.raises(AutotuneError) as info:
        parse_catalog(text, origin="catalog.yaml")
    assert str(info.value).startswith("catalog.yaml: the flag catalog is malformed")
    assert words in str(info.value)


def test_optional_fields_default_to_nothing():
    spec = FlagSpec.model_validate(entry("a"))
    assert (spec.candidates, spec.overrides, spec.overrides_when, spec.obsolete,
            spec.no_effect, spec.allow_empty) == (None, (), None, None, None, True)
    assert spec.type is FlagType.BOOL


# --- the built-in spaces on the catalog ---------------------------------------------------


def test_the_ten_builtin_spaces_are_there():
    assert list_spaces() == sorted(SPACES)


@pytest.mark.parametrize("name", list_spaces())
def test_space_flags_are_catalogued_and_none_is_obsolete_or_deprecated(name):
    space = load_space(name)
    for flag in space.flags():
        spec = CATALOG.get(flag)
        assert spec.obsolete is None, f"{name} uses obsolete {flag}"
        assert spec.deprecated is None, f"{name} uses deprecated {flag}"


@pytest.mark.parametrize("name", list_spaces())
def test_space_has_provenance_and_a_recommended_trial_except_cpu(name):
    space = load_space(name)
    assert space.sources and all(p.source for p in space.params.values())
    first_line = space.description.splitlines()[0]
    assert 0 < len(first_line) <= 90
    if name == "cpu":
        assert space.recommended_config() is None
        return
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.enqueue_trial(space.recommended_params())
    assert space.sample(study.ask()) == space.recommended_config()


@pytest.mark.parametrize(("name", "size"), [
    ("cpu", 180),
    ("gpu-collectives", 3 * 11**3 * 2**6),
    # 6 booleans * 2 thresholds (10 powers of two or unset)
    ("gpu-fsdp", 2**6 * 11**2),
    # multi-streamed on/off * (0 and 1..1024 MiB, 11 powers of two, or unset)
    ("gpu-collective-matmul", 2 * 13),
    # pipelined p2p * (1 KiB..1 GiB, 21 powers of two, or unset)
    ("gpu-p2p", 2 * 22),
    # command buffer 5 * (NVLS 0 | unset | 1 with user buffers on or unset) 4 * triton 2
    # * memory fraction 3 * connections 2 * protocols 8
    ("gpu-runtime", 5 * 4 * 2 * 3 * 2 * 8),
    # 8 booleans * 3 thresholds * remat pass 2 * command buffer 2
    ("gpu-pgle", 2**8 * 11**3 * 2 * 2),
    # ICI group 3 (off, on, auto) * (fusion off | on with AG group 3 (off, on, enabled)
    # * AR group 2) * all-to-all 2 * permute 3
    ("tpu-collectives", 3 * (1 + 3 * 2) * 2 * 3),
    ("tpu-latency-bound", 4**4),
    # rerun 11 * scheduler 5 * rwb 2 * LHS 2 * (8 MiB thresholds, 10..1024, or unset)
    ("tpu-memory", 11 * 5 * 2 * 2 * 9),
])
def test_space_sizes(name, size):
    assert load_space(name).size() == size


#: 000, memory flags / SPMD: xla_jf_spmd_threshold_for_windowed_einsum_mib's recommended
#: range, as the document writes it: "10Mb~1Gb (i.e. 10*1024*1024 ~ 1024*1024*1024)".
WINDOWED_EINSUM_RANGE_BYTES = (10 * 1024 * 1024, 1024 * 1024 * 1024)


def test_tpu_windowed_einsum_threshold_spans_exactly_the_documented_range():
    param = load_space("tpu-memory").params["xla_jf_spmd_threshold_for_windowed_einsum_mib"]
    low, high = (size // 2**20 for size in WINDOWED_EINSUM_RANGE_BYTES)  # the flag is in MiB
    choices = param.values()
    assert choices is not None and (min(choices), max(choices)) == (low, high) == (10, 1024)
    assert list(choices) == sorted(choices) == [10, 16, 32, 64, 128, 256, 512, 1024]
    assert param.allow_unset  # unset: the default, -1 (off)
    spec = CATALOG.get(param.flag)
    assert spec.default == -1 and all(spec.check_value(c) is None for c in choices)


def test_gpu_runtime_sets_the_memory_fraction_under_its_current_name():
    space = load_space("gpu-runtime")
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in space.flags()
    param = space.params["XLA_CLIENT_MEM_FRACTION"]
    assert param.flag == "XLA_CLIENT_MEM_FRACTION" and param.allow_unset
    assert sorted(param.values() or ()) == [0.8, 0.9]  # 001: "typically 0.9 or 0.8"
    assert space.recommended["XLA_CLIENT_MEM_FRACTION"] == 0.9
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" in (param.source or "")  # the document's name
    assert compose_env({"XLA_CLIENT_MEM_FRACTION": 0.9}, {}, CATALOG) == {
        "XLA_CLIENT_MEM_FRACTION": "0.9"}


def test_tpu_collectives_samples_the_v5e_groups_only_with_the_shared_fusion_flag():
    space = load_space("tpu-collectives")
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    grouped = {"xla_enable_async_all_gather",
               "xla_tpu_enable_async_collective_fusion_fuse_all_gather",
               "xla_tpu_enable_async_collective_fusion_fuse_all_reduce"}
    for _ in range(100):
        config = space.sample(study.ask())
        if grouped & set(config):
            assert config["xla_tpu_enable_async_collective_fusion"] is True


# --- against the installed XLA (subprocesses, seconds) -----------------------------------


def _valid_value(spec: FlagSpec) -> object:
    for value in (spec.default, spec.recommended, *(spec.candidates or ())):
        if value is not None:
            return value
    return spec.values[0] if spec.values else False


def _start_jax(config: dict[str, object]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **compose_env(config, {}, CATALOG), "JAX_PLATFORMS": "cpu"}
    return subprocess.run([sys.executable, "-c", "import jax; print(jax.devices())"], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_installed_xla_accepts_every_current_xla_flags_entry():
    pytest.importorskip("jax")
    config = {spec.name: _valid_value(spec) for spec in CATALOG
              if spec.channel is Channel.XLA_FLAGS and spec.obsolete is None}
    config["xla_dump_to"] = ""  # the default, but never dump here
    run = _start_jax(config)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "Unknown flag" not in run.stderr


@pytest.mark.slow
def test_installed_xla_rejects_exactly_the_obsolete_flags():
    pytest.importorskip("jax")
    obsolete = {spec.name: _valid_value(spec) for spec in CATALOG if spec.obsolete is not None}
    run = _start_jax({**obsolete, "xla_cpu_enable_fast_math": False})
    assert run.returncode != 0
    line = next(line for line in run.stderr.splitlines() if "Unknown flags in XLA_FLAGS:" in line)
    named = {token[2:].partition("=")[0] for token in line.split("XLA_FLAGS:")[1].split()}
    assert named == GONE_PER_DESIGN


COMPILE_WITH_OPTIONS = """
import json, sys
import jax, jax.numpy as jnp
options = json.loads(sys.argv[1])
lowered = jax.jit(lambda x: jnp.tanh(x @ x).sum()).lower(jnp.ones((8, 8)))
lowered.compile(compiler_options=options or None)
print("compiled")
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in SPACES if not n.startswith(("cpu", "tpu"))])
def test_installed_xla_takes_each_gpu_recommended_trial_both_ways(name):
    pytest.importorskip("jax")
    config = load_space(name).recommended_config() or {}
    options = compiler_options(config, CATALOG)
    env = {**os.environ, **compose_env(config, {}, CATALOG), "JAX_PLATFORMS": "cpu"}
    run = subprocess.run([sys.executable, "-c", COMPILE_WITH_OPTIONS, json.dumps(options or {})],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "compiled" in run.stdout
