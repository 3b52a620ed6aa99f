"""The flag catalog and the composer that turns a configuration into env vars and options."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autotune.flags import (
    Catalog,
    Channel,
    FlagSpec,
    FlagType,
    UnknownFlagError,
    compiler_options,
    compose_env,
    format_tokens,
    load_catalog,
    parse_catalog,
    parse_flag_string,
    render_value,
    xla_flags_string,
)
from autotune.flags.compose import after_hlo_text, config_key, effective_config
from autotune.ground.errors import AutotuneError, UsageError
from autotune.spaces import load_space

FAST_MATH = "xla_cpu_enable_fast_math"
LHS = "xla_gpu_enable_latency_hiding_scheduler"
AR = "xla_gpu_all_reduce_combine_threshold_bytes"


def flag(name: str, type: str = "bool", channel: str = "xla_flags", per_compile: bool = True,
         **extra: object) -> FlagSpec:
    return FlagSpec.model_validate({
        "name": name, "type": type, "backend": "any", "channel": channel,
        "per_compile": per_compile, "source": "test", "help": "test flag", **extra,
    })


# A catalog with the channels and kinds the packaged one does not have yet.
TEST_CATALOG = Catalog([
    flag(FAST_MATH),
    flag("xla_gpu_enable_cudnn_fmha", per_compile=False),
    flag("xla_tpu_enable_async_collective_fusion", channel="libtpu", per_compile=False),
    flag("xla_gpu_disable_async_collectives", type="list",
         values=["allreduce", "allgather", "reducescatter"]),
    flag("xla_dump_to", type="string"),
    flag("NCCL_PROTO", type="list", channel="env", per_compile=False,
         values=["SIMPLE", "LL", "LL128"]),
])


# --- catalog -------------------------------------------------------------------------


def test_catalog_ships_inside_the_package():
    assert resources.files("autotune.flags").joinpath("catalog.yaml").is_file()
    assert load_catalog() is load_catalog()  # read once


def test_catalog_holds_every_flag_of_the_builtin_spaces():
    catalog = load_catalog()
    for name in ("cpu", "gpu-collectives"):
        assert load_space(name).flags() <= set(catalog.names())


@pytest.mark.parametrize(("name", "kind", "default", "recommended", "channel"), [
    (LHS, FlagType.BOOL, False, True, Channel.XLA_FLAGS),
    (AR, FlagType.INT, 31457287, 8589934592, Channel.XLA_FLAGS),
    ("xla_gpu_enable_all_gather_combine_by_dim", FlagType.BOOL, False, False, Channel.XLA_FLAGS),
    (FAST_MATH, FlagType.BOOL, False, None, Channel.XLA_FLAGS),
    ("xla_cpu_fast_math_honor_nans", FlagType.BOOL, True, None, Channel.XLA_FLAGS),
    ("xla_backend_optimization_level", FlagType.INT, 3, None, Channel.XLA_FLAGS),
    ("xla_cpu_prefer_vector_width", FlagType.INT, 256, None, Channel.XLA_FLAGS),
    ("xla_cpu_max_isa", FlagType.ENUM, None, None, Channel.XLA_FLAGS),
    ("NCCL_PROTO", FlagType.LIST, None, None, Channel.ENV),
])
def test_catalog_entries(name, kind, default, recommended, channel):
    spec = load_catalog().get(name)
    assert (spec.type, spec.default, spec.recommended, spec.channel) == (
        kind, default, recommended, channel)
    assert spec.default.__class__ is default.__class__  # True stays a bool, not 1


def test_every_catalog_entry_names_its_source():
    assert all(spec.source and spec.help for spec in load_catalog())


def test_unknown_flag_suggests_the_closest_name():
    with pytest.raises(UnknownFlagError) as info:
        load_catalog().get("xla-cpu-enable-fast-math")
    assert str(info.value).startswith("unknown flag 'xla-cpu-enable-fast-math': it is neither "
                                      "in autotune's flag catalog nor spelled like an XLA flag")
    assert f"Did you mean '{FAST_MATH}'?" in str(info.value)
    assert info.value.exit_code == 2


def test_a_name_spelled_like_an_xla_flag_gets_an_untyped_stand_in_outside_the_catalog():
    catalog = load_catalog()
    spec = catalog.get("xla_llvm_disable_expensive_passes")
    assert "xla_llvm_disable_expensive_passes" not in catalog  # still not a catalog entry
    assert (spec.cataloged, spec.channel, spec.per_compile, spec.default) == (
        False, Channel.XLA_FLAGS, False, None)
    assert spec.check_value("anything") is None and spec.check_value(3) is None  # XLA judges
    assert catalog.closest("xla_llvm_disable_expensive_passes") != spec.name  # never itself


@pytest.mark.parametrize(("name", "value", "problem"), [
    (FAST_MATH, True, None),
    (FAST_MATH, 1, "expects true or false, got 1"),
    ("xla_backend_optimization_level", 2, None),
    ("xla_backend_optimization_level", 4, "is at most 3, got 4"),
    ("xla_backend_optimization_level", True, "expects an integer, got True"),
    ("xla_cpu_max_isa", "AVX2", None),
    ("xla_cpu_max_isa", "avx2", "expects one of SSE4_2"),
    ("NCCL_PROTO", "SIMPLE,LL128", None),
    ("NCCL_PROTO", "SIMPLE,FAST", "allows only SIMPLE, LL, LL128 in its list, got FAST"),
    ("XLA_PYTHON_CLIENT_MEM_FRACTION", 1, None),
    ("XLA_PYTHON_CLIENT_MEM_FRACTION", 1.5, "is at most 1.0"),
])
def test_check_value(name, value, problem):
    found = load_catalog().get(name).check_value(value)
    assert found is None if problem is None else problem in found


@pytest.mark.parametrize(("text", "words"), [
    ("schema_version: 2\nflags: []\n", "schema_version"),
    ("schema_version: 1\nflags:\n  - {name: a, type: bool, default: 3, backend: any, "
     "channel: env, per_compile: false, source: s, help: h}\n",
     "flags[0] (a): 1 validation error"),
    ("schema_version: 1\nflags:\n  - {name: a, type: enum, backend: any, channel: env, "
     "per_compile: false, source: s, help: h}\n", "needs its allowed 'values'"),
])
def test_malformed_catalog_is_a_clear_error(text, words):
    with pytest.raises(AutotuneError) as info:
        parse_catalog(text, origin="catalog.yaml")
    assert str(info.value).startswith("catalog.yaml: the flag catalog is malformed")
    assert words in str(info.value)


def test_duplicate_flag_names_are_refused():
    with pytest.raises(ValueError, match="'a' is in the catalog twice"):
        Catalog([flag("a"), flag("a")])


# --- render_value and parse_flag_string ------------------------------------------------


@pytest.mark.parametrize(("value", "text"), [
    (True, "true"),
    (False, "false"),
    (0, "0"),
    (8589934592, "8589934592"),
    (0.9, "0.9"),
    (1e-05, "1e-05"),
    (256.0, "256.0"),
    ("AVX2", "AVX2"),
    ("", ""),
    (["allreduce", "allgather"], "allreduce,allgather"),
    (("SIMPLE",), "SIMPLE"),
])
def test_render_value(value, text):
    assert render_value(value) == text


@pytest.mark.parametrize(("text", "tokens"), [
    ("", []),
    ("   ", []),
    ("--xla_cpu_enable_fast_math=true", [(FAST_MATH, "true")]),
    ("  --a=1 \t\n --b  --c=  ", [("a", "1"), ("b", None), ("c", "")]),
    ("--xla_dump_hlo_pass_re=a=b", [("xla_dump_hlo_pass_re", "a=b")]),
])
def test_parse_flag_string(text, tokens):
    assert parse_flag_string(text) == tokens


@pytest.mark.parametrize(("text", "words"), [
    ("--a=1 xla_b=2", "token 'xla_b=2' does not start with '--'"),
    ("-a=1", "token '-a=1' does not start with '--'"),
    ("--", "token '--' has no flag name"),
    ("--=3", "token '--=3' has no flag name"),
])
def test_parse_flag_string_rejects_malformed_tokens(text, words):
    with pytest.raises(UsageError) as info:
        parse_flag_string(text)
    assert words in str(info.value)


def test_a_token_without_dashes_is_told_how_to_write_flags():
    with pytest.raises(UsageError) as info:
        parse_flag_string("fast_math=true")
    assert str(info.value) == (
        "flag string token 'fast_math=true' does not start with '--': write each flag as "
        "--name=value (or --name), separated by spaces; values cannot contain spaces")


@given(st.text())
def test_parse_flag_string_raises_only_project_errors(text):
    try:
        tokens = parse_flag_string(text)
    except AutotuneError:
        return
    assert all(name and not any(c.isspace() for c in name) for name, _ in tokens)


names = st.text(st.characters(categories=["Ll", "Nd"], include_characters="_"), min_size=1)
values = st.none() | st.text(st.characters(categories=["L", "N", "P"]))


@given(st.lists(st.tuples(names, values)))
def test_format_and_parse_round_trip(tokens):
    assert parse_flag_string(format_tokens(tokens)) == tokens


# --- compose_env ---------------------------------------------------------------------


@pytest.mark.parametrize(("config", "base_env", "expected"), [
    pytest.param({}, {"XLA_FLAGS": "--xla_dump_to=/tmp/d"}, {}, id="no-config-no-change"),
    pytest.param({FAST_MATH: True}, {}, {"XLA_FLAGS": f"--{FAST_MATH}=true"}, id="no-user-flags"),
    pytest.param(
        {FAST_MATH: True}, {"XLA_FLAGS": f"--{FAST_MATH}=false --xla_dump_to=/tmp/d"},
        {"XLA_FLAGS": f"--xla_dump_to=/tmp/d --{FAST_MATH}=true"}, id="config-wins"),
    pytest.param(
        {FAST_MATH: False}, {"XLA_FLAGS": f"--b=2  --{FAST_MATH} --a"},
        {"XLA_FLAGS": f"--b=2 --a --{FAST_MATH}=false"}, id="user-tokens-kept-in-order"),
    pytest.param(
        {"NCCL_PROTO": "SIMPLE,LL"}, {"XLA_FLAGS": "--a=1"}, {"NCCL_PROTO": "SIMPLE,LL"},
        id="env-flag-is-its-own-variable"),
    pytest.param(
        {"xla_tpu_enable_async_collective_fusion": True, FAST_MATH: True},
        {"LIBTPU_INIT_ARGS": "--xla_tpu_enable_async_collective_fusion=false --t=1"},
        {"XLA_FLAGS": f"--{FAST_MATH}=true",
         "LIBTPU_INIT_ARGS": "--t=1 --xla_tpu_enable_async_collective_fusion=true"},
        id="libtpu-flags-merge-the-same-way"),
])
def test_compose_env(config, base_env, expected):
    assert compose_env(config, base_env, TEST_CATALOG) == expected


def test_compose_env_with_the_packaged_catalog():
    config = {LHS: True, AR: 2**30, "CUDA_DEVICE_MAX_CONNECTIONS": 1}
    assert compose_env(config, {"XLA_FLAGS": "--xla_dump_to=/d"}, load_catalog()) == {
        "XLA_FLAGS": f"--xla_dump_to=/d --{LHS}=true --{AR}=1073741824",
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
    }


def test_value_with_whitespace_is_refused():
    with pytest.raises(UsageError) as info:
        compose_env({"xla_dump_to": "/tmp/my dumps"}, {}, TEST_CATALOG)
    assert "contains whitespace, which XLA_FLAGS cannot carry" in str(info.value)


def test_malformed_user_flags_are_refused():
    with pytest.raises(UsageError, match="token 'fast_math' does not start with '--'"):
        compose_env({FAST_MATH: True}, {"XLA_FLAGS": "fast_math"}, TEST_CATALOG)


def test_unknown_flag_in_a_configuration():
    with pytest.raises(UnknownFlagError, match="unknown flag 'nope'"):
        compose_env({"nope": True}, {}, TEST_CATALOG)


def test_a_flag_outside_the_catalog_goes_through_xla_flags():
    env = compose_env({"xla_nope": True}, {"XLA_FLAGS": "--xla_mine=1"}, TEST_CATALOG)
    assert env == {"XLA_FLAGS": "--xla_mine=1 --xla_nope=true"}
    assert compiler_options({"xla_nope": True}, TEST_CATALOG) is None  # never per compile


def test_xla_flags_string_holds_only_the_configuration_tokens():
    config = {FAST_MATH: True, "NCCL_PROTO": "LL", "xla_dump_to": "/d"}
    assert xla_flags_string(config, TEST_CATALOG) == f"--{FAST_MATH}=true --xla_dump_to=/d"


# --- effective_config and config_key ---------------------------------------------------

DEFAULTS = Catalog([
    flag("b_on", default=True),
    flag("b_off", default=False),
    flag("level", type="int", default=1),
    flag("zero", type="int", default=0),
    flag("frac", type="float", default=0.5),
    flag("isa", type="string", default="AVX2"),
    flag("nodefault", type="int"),
])


@pytest.mark.parametrize(("config", "effective"), [
    pytest.param({"b_on": True, "level": 1, "frac": 0.5, "isa": "AVX2"}, {},
                 id="defaults-spelled-out-go"),
    pytest.param({"b_on": False, "level": 2, "isa": "AVX512"},
                 {"b_on": False, "level": 2, "isa": "AVX512"}, id="changes-stay"),
    pytest.param({"level": True}, {"level": True}, id="True-is-not-the-int-1"),
    pytest.param({"b_on": 1}, {"b_on": 1}, id="1-is-not-the-bool-True"),
    pytest.param({"zero": False, "b_off": 0}, {"zero": False, "b_off": 0},
                 id="False-and-0-differ"),
    pytest.param({"zero": 0, "b_off": False}, {}, id="same-type-zeros-are-defaults"),
    pytest.param({"frac": 0.5000001}, {"frac": 0.5000001}, id="near-is-not-equal"),
    pytest.param({"nodefault": 3, "not_in_catalog": 1},
                 {"nodefault": 3, "not_in_catalog": 1}, id="no-stated-default-stays"),
])
def test_effective_config_drops_only_values_equal_to_the_default(config, effective):
    assert effective_config(config, DEFAULTS) == effective


def test_config_key_is_sorted_and_rendered_so_equal_configs_share_it():
    assert config_key({"zero": 2, "b_on": False}) == "--b_on=false --zero=2"
    assert config_key({"b_on": False, "zero": 2}) == config_key({"zero": 2, "b_on": False})
    assert config_key({"level": True}) != config_key({"level": 1})
    assert config_key({}) == ""


# --- compiler_options ----------------------------------------------------------------


@pytest.mark.parametrize(("config", "expected"), [
    pytest.param({}, {}, id="empty"),
    pytest.param({FAST_MATH: True, "xla_dump_to": "/d"}, {FAST_MATH: True, "xla_dump_to": "/d"},
                 id="typed-values"),
    pytest.param({"xla_gpu_disable_async_collectives": "allreduce,allgather"},
                 {"xla_gpu_disable_async_collectives": "ALLREDUCE,ALLGATHER"},
                 id="list-flags-use-proto-names"),
    pytest.param({FAST_MATH: True, "xla_gpu_enable_cudnn_fmha": False}, None,
                 id="not-per-compile"),
    pytest.param({FAST_MATH: True, "NCCL_PROTO": "LL"}, None, id="env-channel"),
    pytest.param({"xla_tpu_enable_async_collective_fusion": True}, None, id="libtpu-channel"),
])
def test_compiler_options(config, expected):
    assert compiler_options(config, TEST_CATALOG) == expected


def test_compiler_options_for_the_builtin_spaces_are_typed():
    space = load_space("gpu-collectives")
    options = compiler_options(space.recommended_config() or {}, load_catalog())
    assert options is not None and options[LHS] is True and options[AR] == 8589934592


# --- against the installed XLA (subprocesses, seconds) ----------------------------------

PROBE = """
import json, sys
import jax, jax.numpy as jnp
options = json.loads(sys.argv[1])
lowered = jax.jit(lambda x: jnp.tanh(x @ x).sum()).lower(jnp.ones((8, 8)))
lowered.compile(compiler_options=options)
print("compiled")
"""


def xla_flags_of_catalog() -> dict[str, object]:
    catalog = load_catalog()
    return {
        spec.name: spec.recommended if spec.recommended is not None else spec.default
        for spec in catalog
        if spec.channel is Channel.XLA_FLAGS and spec.obsolete is None
        and (spec.recommended is not None or spec.default is not None)
    }


@pytest.mark.slow
def test_installed_xla_accepts_the_catalog_flags_in_xla_flags_and_per_compile():
    pytest.importorskip("jax")
    config = xla_flags_of_catalog()
    env = {**os.environ, **compose_env(config, {}, load_catalog()), "JAX_PLATFORMS": "cpu"}
    options = compiler_options(config, load_catalog())
    assert options is not None
    run = subprocess.run([sys.executable, "-c", PROBE, json.dumps(options)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "compiled" in run.stdout


# --- lint: what `flags check` counts and says (in-process, no probe) --------------------

OVERRIDING_CATALOG = Catalog([
    flag("xla_pipeline_all", overrides=["xla_pipeline_one"], overrides_when=True),
    flag("xla_pipeline_old", overrides=["xla_pipeline_one"], overrides_when=True,
         obsolete={"since": "test", "note": "set xla_pipeline_one"}),
    flag("xla_pipeline_one"),
])


def lint_text(text: str, catalog: Catalog | None = None, libtpu: str = "") -> list:
    from autotune.flags.lint import lint, parse_uses

    return lint(parse_uses(text, libtpu), catalog or load_catalog(), None)


@pytest.mark.parametrize(
    ("xla_flags", "libtpu", "flag_name", "words"),
    [
        ("--NCCL_PROTO=SIMPLE", "", "NCCL_PROTO",
         "--NCCL_PROTO is an environment variable, not an XLA_FLAGS flag"),
        ("--xla_tpu_enable_async_all_to_all=true", "", "xla_tpu_enable_async_all_to_all",
         "--xla_tpu_enable_async_all_to_all is a libtpu flag, not an XLA_FLAGS flag"),
        ("", "--NCCL_PROTO=SIMPLE", "NCCL_PROTO",
         "--NCCL_PROTO is an environment variable, not a LIBTPU_INIT_ARGS flag"),
    ],
)
def test_a_flag_on_the_wrong_channel_would_abort_the_job(xla_flags, libtpu, flag_name, words):
    from autotune.flags.lint import FindingKind

    [finding] = lint_text(xla_flags, libtpu=libtpu)

    assert (finding.kind, finding.flag) == (FindingKind.WRONG_CHANNEL, flag_name)
    assert finding.would_abort
    assert finding.message.startswith(words), finding.message


@pytest.mark.parametrize(
    ("text", "fix"),
    [
        ("--xla_backend_optimization_level=7", "give an int value"),
        ("--xla_cpu_enable_fast_math=maybe", "give a bool value"),
    ],
)
def test_a_bad_value_is_told_which_type_to_give_with_the_right_article(text, fix):
    [finding] = lint_text(text)
    assert finding.fix == fix


def test_no_flag_is_overridden_by_a_flag_that_must_be_removed_anyway():
    from autotune.flags.lint import FindingKind

    obsolete = lint_text("--xla_pipeline_old=true --xla_pipeline_one=false", OVERRIDING_CATALOG)
    live = lint_text("--xla_pipeline_all=true --xla_pipeline_one=false", OVERRIDING_CATALOG)

    assert [f.kind for f in obsolete] == [FindingKind.OBSOLETE]
    assert [(f.kind, f.flag) for f in live] == [(FindingKind.OVERRIDDEN, "xla_pipeline_one")]
    # the packaged catalog's one overriding flag is obsolete: only that finding is left
    packaged = lint_text("--xla_gpu_enable_pipelined_collectives=true "
                         "--xla_gpu_enable_pipelined_all_gather=false")
    assert FindingKind.OVERRIDDEN not in {f.kind for f in packaged}


def test_split_per_compile_keeps_what_only_the_environment_carries_apart():
    from autotune.flags.compose import split_per_compile

    options, rest = split_per_compile({"xla_cpu_enable_fast_math": True,
                                       "TF_CPP_MIN_LOG_LEVEL": 2}, load_catalog())
    assert options == {"xla_cpu_enable_fast_math": True}
    assert rest == {"TF_CPP_MIN_LOG_LEVEL": 2}


def test_shell_exports_quote_every_value_and_refuse_a_name_no_shell_can_set():
    from autotune.flags.compose import shell_exports
    from autotune.ground.errors import UsageError

    assert shell_exports({"XLA_FLAGS": "--a=1 --b=$(x)", "N": "it's"}) == [
        "export XLA_FLAGS='--a=1 --b=$(x)'", "export N='it'\"'\"'s'"]
    for bad in ("1X", "A-B", "A B", ""):
        with pytest.raises(UsageError) as caught:
            shell_exports({bad: "v"})
        assert caught.value.message == (f"variable name {bad!r} cannot be set by a shell; "
                                        "use the YAML or JSON form instead")


CMD = "xla_gpu_enable_command_buffer"


def test_only_effective_after_hlo_flags_enter_the_text():
    """The flags a program's fingerprint adds to the dump (`tests/test_after_hlo.py`)."""
    catalog = load_catalog()
    assert after_hlo_text({CMD: "", "xla_gpu_enable_triton_gemm": False}, catalog) == (
        f"--{CMD}=")
    assert after_hlo_text({CMD: "FUSION"}, catalog) == f"--{CMD}=FUSION"
    # XLA's own default asks for the same executable as leaving the flag out
    assert after_hlo_text({CMD: catalog.get(CMD).default}, catalog) == ""
    assert after_hlo_text({"xla_gpu_enable_triton_gemm": False}, catalog) == ""
    # every such flag, in config_key's order, whatever the configuration's order
    assert after_hlo_text({"xla_gpu_graph_level": 0, CMD: "", "xla_cpu_use_xnnpack": False},
                          catalog) == f"--{CMD}= --xla_gpu_graph_level=0"
    assert after_hlo_text({}, catalog) == ""
    # a flag outside the catalog is not known to act after the HLO
    assert after_hlo_text({"xla_gpu_enable_cublaslt": True}, catalog) == ""
