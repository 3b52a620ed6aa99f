"""Search spaces: built-in files, validation messages, sampling with Optuna."""

from __future__ import annotations

import itertools
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.flags import load_catalog
from autotune.ground.errors import AutotuneError, SpaceValidationError, UnknownSpaceError
from autotune.spaces import (
    GROUP_PREFIX,
    UNSET,
    Space,
    list_spaces,
    load_space,
    load_space_text,
    parse_size,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)

HEADER = "schema_version: 1\nname: t\nbackend: gpu\n"
LHS = "xla_gpu_enable_latency_hiding_scheduler"
AR = "xla_gpu_all_reduce_combine_threshold_bytes"
DB = "xla_gpu_enable_while_loop_double_buffering"
PAG = "xla_gpu_enable_pipelined_all_gather"


def write_space(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


def study() -> optuna.Study:
    return optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))


def samples(space: Space, n: int) -> list[dict]:
    s = study()
    return [space.sample(s.ask()) for _ in range(n)]


# --- built-in spaces -----------------------------------------------------------------


def test_list_spaces_names_the_builtin_files():
    assert list_spaces() == [
        "cpu", "gpu-collective-matmul", "gpu-collectives", "gpu-fsdp", "gpu-p2p", "gpu-pgle",
        "gpu-runtime", "tpu-collectives", "tpu-latency-bound", "tpu-memory"]


@pytest.mark.parametrize("name", ["cpu", "gpu-collectives"])
def test_builtin_space_loads_with_provenance_for_every_param(name):
    space = load_space(name)
    assert space.name == name
    assert space.path is not None and space.path.name == f"{name}.yaml"
    assert all(p.source for p in space.params.values())
    assert space.flags() <= set(load_catalog().names())


@pytest.mark.parametrize(("name", "backend", "size"), [
    # 3 (LHS or unset) * 11**3 (10 powers of two or unset) * 2**6 booleans
    ("gpu-collectives", "gpu", 3 * 11**3 * 2**6),
    # fast math off: 5 levels * 3 xnnpack * 3 widths * 2 eigen; on: twice that (group on/off)
    ("cpu", "cpu", 180),
])
def test_builtin_space_backend_and_size(name, backend, size):
    space = load_space(name)
    assert space.backend == backend
    assert space.size() == size


def test_gpu_collectives_recommended_is_the_documented_configuration():
    space = load_space("gpu-collectives")
    assert space.recommended_config() == {
        LHS: True, AR: 8589934592,
        "xla_gpu_all_gather_combine_threshold_bytes": 8589934592,
        "xla_gpu_reduce_scatter_combine_threshold_bytes": 8589934592,
        PAG: True, "xla_gpu_enable_pipelined_reduce_scatter": True,
        "xla_gpu_enable_pipelined_all_reduce": True,
        "xla_gpu_enable_all_gather_combine_by_dim": False,
        "xla_gpu_enable_reduce_scatter_combine_by_dim": False,
        DB: True,
    }
    assert space.params[AR].values() == tuple(2**k for k in range(24, 34))


def test_cpu_space_has_no_recommended_trial():
    space = load_space("cpu")
    assert space.recommended_params() is None
    assert space.recommended_config() is None


def test_load_space_by_path(tmp_path):
    path = write_space(tmp_path, HEADER + f"params:\n  {LHS}: {{type: bool}}\n")
    space = load_space(str(path))
    assert space.path == path and space.flags() == {LHS}


# --- unknown spaces ------------------------------------------------------------------


@pytest.mark.parametrize(("name", "words"), [
    ("gpu-colectives", "Did you mean 'gpu-collectives'?"),
    ("tpu", "Known spaces: cpu, gpu-collective-matmul, gpu-collectives, gpu-fsdp,"),
    ("nowhere/space.yaml", "no search space file 'nowhere/space.yaml'"),
])
def test_unknown_space_lists_known_spaces_and_mentions_paths(name, words):
    with pytest.raises(UnknownSpaceError) as info:
        load_space(name)
    assert words in str(info.value)
    assert "cpu, gpu-collective-matmul, gpu-collectives, gpu-fsdp" in str(info.value)
    assert info.value.exit_code == 2


def test_unknown_space_says_a_file_path_works_too():
    with pytest.raises(UnknownSpaceError, match="A path to a space .yaml file works too"):
        load_space("tpu")


# --- validation errors: file, line, key path -----------------------------------------

INVALID = [
    pytest.param(
        "schema_version: 2\nname: t\nbackend: gpu\nparams: {}\n",
        1, "schema_version", "schema_version 2 is not supported", id="schema-version"),
    pytest.param(
        "name: t\nbackend: gpu\n",
        1, "(top level)", "schema_version is missing", id="no-schema-version"),
    pytest.param(
        HEADER + f"parms:\n  {LHS}: {{type: bool}}\n",
        4, "parms", "unknown key 'parms'. Did you mean 'params'?", id="unknown-top-key"),
    pytest.param(
        HEADER + f"params:\n  {AR}:\n    type: int\n    lo: 1\n    high: 2\n",
        7, f"params.{AR}.lo", "unknown key 'lo'", id="unknown-param-key"),
    pytest.param(
        HEADER + f"params:\n  {LHS}:\n    type: bool\n    allow_unset: 'yes'\n",
        7, f"params.{LHS}.allow_unset", "Input should be a valid boolean, got 'yes'",
        id="wrong-type"),
    pytest.param(
        HEADER + f"params:\n  {LHS}:\n    type: boolean\n",
        6, f"params.{LHS}.type", "Input should be 'bool', 'int', 'float', 'categorical' or "
        "'pow2_bytes'", id="unknown-param-type"),
    pytest.param(
        HEADER + f"params:\n  {AR}:\n    type: int\n    low: 8\n    high: 2\n",
        7, f"params.{AR}.low", "low (8) is greater than high (2). Swap low and high.",
        id="low-above-high"),
    pytest.param(
        HEADER + f"params:\n  {AR}:\n    type: pow2_bytes\n    min: 1GiB\n    max: 16MiB\n",
        7, f"params.{AR}.min", "min (1073741824) is greater than max (16777216)",
        id="min-above-max"),
    pytest.param(
        HEADER + f"params:\n  {AR}:\n    type: pow2_bytes\n    min: 16XB\n    max: 1GiB\n",
        7, f"params.{AR}.min", "'16XB' is not a size", id="size-does-not-parse"),
    pytest.param(
        HEADER + f"params:\n  {AR}:\n    type: pow2_bytes\n    min: 16MB\n    max: 1GiB\n",
        7, f"params.{AR}.min", "'16MB' = 16000000 bytes is not a power of two (MB is 10**6 "
        "bytes: did you mean MiB?)", id="size-not-power-of-two"),
    pytest.param(
        HEADER + f"params:\n  {AR}:\n    type: int\n    high: 2\n",
        5, f"params.{AR}", "a int param needs 'low'", id="range-without-low"),
    pytest.param(
        HEADER + f"params:\n  {LHS}:\n    type: bool\n    choices: [true]\n",
        7, f"params.{LHS}.choices", "'choices' does not apply to a bool param",
        id="key-of-another-type"),
    pytest.param(
        # a name outside the catalog must at least be spelled like an XLA flag (whether
        # XLA knows one that is is the probe's answer: `spaces validate`, the study)
        HEADER + "params:\n  gpu_enable_latency_hiding_scheduler: {type: bool}\n",
        5, "params.gpu_enable_latency_hiding_scheduler",
        "flag 'gpu_enable_latency_hiding_scheduler' is neither in the flag catalog nor "
        f"spelled like an XLA flag. Did you mean '{LHS}'?", id="param-flag-not-xla-spelled"),
    pytest.param(
        HEADER + "params:\n  lhs:\n    type: bool\n    flag: XLA_GPU_ENABLE_LHS\n",
        7, "params.lhs.flag", "flag 'XLA_GPU_ENABLE_LHS' is neither in the flag catalog",
        id="explicit-flag-not-xla-spelled"),
    pytest.param(
        HEADER + "params:\n  xla_cpu_enable_fast_math: {type: bool}\n",
        5, "params.xla_cpu_enable_fast_math", "acts on cpu, but this space is for gpu",
        id="flag-of-another-backend"),
    pytest.param(
        HEADER + f"params:\n  {LHS}:\n    type: int\n    low: 0\n    high: 1\n",
        6, f"params.{LHS}.type", f"a int param cannot set flag '{LHS}' of type bool",
        id="param-type-does-not-fit-flag"),
    pytest.param(
        HEADER + "params:\n  NCCL_PROTO:\n    type: categorical\n    choices: [LL]\n"
        "    channel: xla_flags\n",
        8, "params.NCCL_PROTO.channel", "flag 'NCCL_PROTO' is delivered through env, not "
        "xla_flags", id="channel-disagrees-with-catalog"),
    pytest.param(
        "schema_version: 1\nname: t\nbackend: cpu\nparams:\n  xla_cpu_max_isa:\n"
        "    type: categorical\n    choices:\n      - AVX2\n      - AVX9\n",
        9, "params.xla_cpu_max_isa.choices[1]", "xla_cpu_max_isa expects one of SSE4_2, AVX,",
        id="choice-outside-enum"),
    pytest.param(
        "schema_version: 1\nname: t\nbackend: cpu\nparams:\n  xla_backend_optimization_level:\n"
        "    type: categorical\n    choices: [1, 4]\n",
        7, "params.xla_backend_optimization_level.choices[1]",
        "xla_backend_optimization_level is at most 3, got 4", id="choice-above-flag-max"),
    pytest.param(
        HEADER + f"params:\n  {LHS}:\n    type: categorical\n    choices: [true, unset]\n",
        7, f"params.{LHS}.choices[1]", "'unset' is reserved for XLA's default",
        id="unset-as-a-choice"),
    pytest.param(
        HEADER + f"params:\n  {LHS}: {{type: bool}}\nfixed:\n  {DB}: 3\n",
        7, f"fixed.{DB}", f"{DB} expects true or false, got 3", id="fixed-value-wrong-type"),
    pytest.param(
        HEADER + f"params:\n  {LHS}: {{type: bool}}\nfixed:\n  {LHS}: true\n",
        7, f"fixed.{LHS}", f"flag '{LHS}' is both fixed and tuned by param '{LHS}'",
        id="fixed-and-tuned"),
    pytest.param(
        HEADER + f"params:\n  {LHS}: {{type: bool}}\n  {DB}: {{type: bool}}\ngroups:\n  g:\n"
        f"    params: [{LHS}, {DB}]\n    values:\n      {LHS}: true\n      {DB}: 5\n",
        12, f"groups.g.values.{DB}", f"{DB} expects true or false, got 5",
        id="group-value-wrong-type"),
    pytest.param(
        HEADER + f"params:\n  {LHS}: {{type: bool}}\ngroups:\n  g:\n    params:\n"
        f"      - {LHS}\n      - lsh\n    values: {{{LHS}: true}}\n",
        10, "groups.g.params[1]", "'lsh' is not a param of this space", id="group-member-unknown"),
    pytest.param(
        HEADER + f"params:\n  {LHS}: {{type: bool}}\nconditions:\n  - param: {DB}\n"
        f"    when: {{{LHS}: true}}\n",
        7, "conditions[0].param", f"'{DB}' is not a param of this space",
        id="condition-on-unknown-param"),
    pytest.param(
        HEADER + f"params:\n  {LHS}: {{type: bool}}\nconditions:\n  - param: {LHS}\n"
        "    when:\n      lsh: true\n",
        9, "conditions[0].when.lsh", "'lsh' is not a param of this space",
        id="condition-reads-unknown-param"),
    pytest.param(
        HEADER + f"params:\n  {LHS}: {{type: bool}}\n  {DB}: {{type: bool}}\nconditions:\n"
        f"  - param: {DB}\n    when:\n      {LHS}: 1\n",
        10, f"conditions[0].when.{LHS}", f"1 is not a candidate of param '{LHS}'",
        id="condition-value-never-taken"),
    pytest.param(
        HEADER + f"params:\n  {LHS}: {{type: bool}}\n  {DB}: {{type: bool}}\n"
        f"  {PAG}: {{type: bool}}\ngroups:\n  g:\n    params:\n      - {DB}\n      - {PAG}\n"
        f"    values: {{{DB}: true, {PAG}: true}}\nconditions:\n  - param: {DB}\n"
        f"    when: {{{LHS}: true}}\n",
        12, "groups.g.params[1]", f"member '{PAG}' is conditioned differently from '{DB}'",
        id="group-split-across-conditions"),
    pytest.param(
        HEADER + f"params:\n  {LHS}: {{type: bool}}\n  {DB}: {{type: bool}}\nconditions:\n"
        f"  - param: {DB}\n    when: {{{LHS}: true}}\n  - param: {LHS}\n"
        f"    when: {{{DB}: true}}\n",
        10, "conditions[1]", "the conditions form a cycle", id="condition-cycle"),
    pytest.param(
        HEADER + f"params:\n  {AR}:\n    type: pow2_bytes\n    min: 16MiB\n    max: 1GiB\n"
        f"recommended:\n  {AR}: 1000\n",
        10, f"recommended.{AR}", f"1000 is not a candidate of param '{AR}' (16777216,",
        id="recommended-not-a-candidate"),
    pytest.param(
        HEADER + f"params:\n  {LHS}: {{type: bool}}\nrecommended:\n  {LHS}: 'yes'\n",
        7, f"recommended.{LHS}", f"'yes' is not a candidate of param '{LHS}'",
        id="recommended-wrong-type"),
    pytest.param(
        HEADER + f"params:\n  {LHS}: {{type: bool}}\n  {DB}: {{type: bool}}\n"
        f"recommended:\n  {LHS}: true\n",
        7, "recommended", f"recommended leaves out param '{DB}', which cannot be unset",
        id="recommended-leaves-out-a-param"),
    pytest.param(
        HEADER + f"params:\n  {LHS}: {{type: bool}}\n  {DB}: {{type: bool, allow_unset: true}}\n"
        f"conditions:\n  - param: {DB}\n    when: {{{LHS}: true}}\n"
        f"recommended:\n  {LHS}: false\n  {DB}: true\n",
        12, f"recommended.{DB}", f"'{DB}' is sampled only when {LHS} = True",
        id="recommended-breaks-a-condition"),
    pytest.param(
        HEADER + f"params:\n  {LHS}: {{type: bool}}\n  {DB}: {{type: bool}}\ngroups:\n  g:\n"
        f"    params: [{LHS}, {DB}]\n    values: {{{LHS}: true, {DB}: true}}\n"
        f"recommended:\n  {LHS}: true\n",
        12, f"recommended.{LHS}", "recommended sets only part of group 'g'",
        id="recommended-splits-a-group"),
    pytest.param(
        HEADER + f"params:\n  {LHS}: {{type: bool}}\n  {LHS}: {{type: bool}}\n",
        6, f"params.{LHS}", f"key '{LHS}' appears twice", id="duplicate-key"),
    pytest.param(
        HEADER + f"params:\n  {LHS}: {{type: bool\nfixed: {{}}\n",
        6, "(yaml)", "expected ',' or '}'", id="yaml-syntax-error"),
    pytest.param(
        "- schema_version: 1\n- name: t\n",
        1, "(top level)", "the file is a list, not a mapping", id="not-a-mapping"),
    pytest.param(
        "", 1, "(top level)", "the file is empty", id="empty-file"),
]


@pytest.mark.parametrize(("text", "line", "path", "words"), INVALID)
def test_validation_error_names_file_line_and_key_path(tmp_path, text, line, path, words):
    file = write_space(tmp_path, text)
    with pytest.raises(SpaceValidationError) as info:
        load_space(str(file))
    message = str(info.value)
    assert message.startswith(f"{file}:{line}: {path}: "), message
    assert words in message
    assert info.value.exit_code == 2


def test_a_space_whose_aliases_expand_past_the_bound_is_refused_at_once(tmp_path):
    """A 417-byte alias bomb kept `spaces validate` busy past 90 s (issue 31)."""
    from test_apply import BOMB

    path = tmp_path / "bomb.yaml"
    path.write_text("schema_version: 1\nname: bomb\nbackend: cpu\n" + BOMB
                    + "params:\n  xla_cpu_enable_fast_math:\n    type: bool\n")
    done = subprocess.run([sys.executable, "-m", "autotune", "spaces", "validate", str(path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr == (f"error: {path}: (yaml): the YAML stands for more than 100000 values "
                           "once its aliases (*name) are expanded: write the values out instead "
                           "of repeating anchors.\n")
    recursive = tmp_path / "self.yaml"
    recursive.write_text("schema_version: 1\nname: self\nbackend: cpu\nloop: &l [*l]\n")
    with pytest.raises(SpaceValidationError, match="more than 100000 values"):
        load_space(str(recursive))


def test_every_validation_error_carries_a_hint(tmp_path):
    file = write_space(tmp_path, HEADER + f"params:\n  {AR}:\n    type: int\n    low: 8\n"
                       "    high: 2\n")
    with pytest.raises(SpaceValidationError) as info:
        load_space(str(file))
    problem, hint = str(info.value).split(". ", 1)
    assert problem.endswith("low (8) is greater than high (2)") and hint == "Swap low and high."


def test_several_problems_report_the_first_and_count_the_rest(tmp_path):
    file = write_space(tmp_path, HEADER + "params:\n  a: {type: bool}\n  b: {type: bool}\n")
    with pytest.raises(SpaceValidationError) as info:
        load_space(str(file))
    assert str(info.value).startswith(f"{file}:5: params.a: flag 'a' is neither in the flag "
                                      "catalog")
    assert str(info.value).endswith("(1 more problem after this one.)")


@pytest.mark.parametrize(("text", "size"), [
    ("64", 64), (4096, 4096), ("16MiB", 2**24), ("8GiB", 2**33), ("1 KiB", 1024),
    ("512KB", 512_000), ("2TiB", 2**41),
])
def test_parse_size(text, size):
    assert parse_size(text) == size


# --- sampling ------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cpu", "gpu-collectives"])
def test_samples_stay_within_the_space_and_never_hold_unset(name):
    space = load_space(name)
    by_flag = {p.flag: p for p in space.params.values()}
    for config in samples(space, 200):
        assert set(config) <= space.flags()
        for flag, value in config.items():
            assert not (isinstance(value, str) and value == UNSET)
            assert by_flag[flag].contains(value), (flag, value)


def test_cpu_samples_respect_the_fast_math_condition_and_group():
    space = load_space("cpu")
    honor = {f"xla_cpu_fast_math_honor_{g}" for g in ("nans", "infs", "division", "functions")}
    seen_group = set()
    for config in samples(space, 300):
        present = honor & set(config)
        assert present in (set(), honor)  # a group is all or nothing
        if present:
            assert config["xla_cpu_enable_fast_math"] is True
            assert all(config[flag] is False for flag in honor)
        seen_group.add(bool(present))
    assert seen_group == {True, False}


def test_conditional_params_are_not_suggested_when_inactive():
    space = load_space("cpu")
    s = study()
    for _ in range(50):
        trial = s.ask()
        config = space.sample(trial)
        assert (GROUP_PREFIX + "fast-math-relaxed" in trial.params) == config[
            "xla_cpu_enable_fast_math"]


def test_unset_choice_is_the_string_unset_in_optuna(tmp_path):
    space = load_space_text(HEADER + f"params:\n  {LHS}: {{type: bool, allow_unset: true}}\n")
    s = study()
    s.enqueue_trial({LHS: UNSET})
    trial = s.ask()
    assert space.sample(trial) == {}
    assert trial.params == {LHS: "unset"}


def test_fixed_flags_are_in_every_sample():
    space = load_space_text(HEADER + f"params:\n  {LHS}: {{type: bool}}\nfixed:\n  {DB}: true\n")
    assert all(config[DB] is True for config in samples(space, 10))


@pytest.mark.parametrize("name", ["gpu-collectives"])
def test_recommended_params_enqueued_give_exactly_the_recommended_config(name):
    space = load_space(name)
    s = study()
    s.enqueue_trial(space.recommended_params())
    assert space.sample(s.ask()) == space.recommended_config()


RECOMMENDED_WITH_GROUP_AND_CONDITION = HEADER + f"""\
params:
  {LHS}: {{type: bool}}
  {DB}: {{type: bool}}
  {PAG}: {{type: bool}}
  {AR}: {{type: pow2_bytes, min: 16MiB, max: 64MiB, allow_unset: true}}
groups:
  overlap:
    params: [{DB}, {PAG}]
    values: {{{DB}: true, {PAG}: true}}
conditions:
  - {{param: {DB}, when: {{{LHS}: true}}}}
  - {{param: {PAG}, when: {{{LHS}: true}}}}
fixed:
  xla_gpu_enable_reduce_scatter_combine_by_dim: false
recommended:
  {LHS}: true
  {DB}: true
  {PAG}: true
"""


def test_recommended_params_switch_groups_and_unset_the_rest():
    space = load_space_text(RECOMMENDED_WITH_GROUP_AND_CONDITION)
    params = space.recommended_params()
    assert params == {LHS: True, "group:overlap": True, AR: "unset"}
    s = study()
    s.enqueue_trial(params)
    assert space.sample(s.ask()) == {
        LHS: True, DB: True, PAG: True, "xla_gpu_enable_reduce_scatter_combine_by_dim": False}


SMALL = HEADER + f"""\
params:
  {LHS}: {{type: bool}}
  {AR}: {{type: pow2_bytes, min: 16MiB, max: 64MiB, allow_unset: true}}
  {DB}: {{type: bool}}
  {PAG}: {{type: bool}}
groups:
  overlap:
    params: [{DB}, {PAG}]
    values: {{{DB}: true, {PAG}: false}}
conditions:
  - {{param: {DB}, when: {{{LHS}: true}}}}
  - {{param: {PAG}, when: {{{LHS}: true}}}}
"""


def test_size_counts_distinct_configurations_and_sampling_finds_them_all():
    space = load_space_text(SMALL)
    # LHS false: 4 thresholds (3 sizes or unset); LHS true: 4 * group on/off
    assert space.size() == 4 + 4 * 2
    distinct = {tuple(sorted(c.items())) for c in samples(space, 400)}
    assert len(distinct) == space.size()


@pytest.mark.parametrize(("spec", "size"), [
    ("{type: int, low: 0, high: 10, step: 5}", 3),
    ("{type: int, low: 1, high: 8, log: true}", 8),
    ("{type: int, low: 0, high: 3, allow_unset: true}", 5),
    ("{type: float, low: 0.5, high: 1.0, step: 0.25}", 3),
    ("{type: float, low: 0.5, high: 1.0}", None),
])
def test_size_of_ranges(spec, size):
    space = load_space_text(
        "schema_version: 1\nname: t\nbackend: gpu\n"
        f"params:\n  XLA_CLIENT_MEM_FRACTION: {spec}\n"
        if "float" in spec else HEADER + f"params:\n  {AR}: {spec}\n")
    assert space.size() == size


def test_ranges_sample_inside_their_bounds():
    space = load_space_text(HEADER + f"params:\n  {AR}: {{type: int, low: 1, high: 1024, "
                            "log: true}\n  XLA_CLIENT_MEM_FRACTION: {type: float, "
                            "low: 0.5, high: 0.95}\n")
    for config in samples(space, 50):
        assert 1 <= config[AR] <= 1024 and isinstance(config[AR], int)
        assert 0.5 <= config["XLA_CLIENT_MEM_FRACTION"] <= 0.95


# --- robustness: only SpaceValidationError comes out -------------------------------

CATALOG_NAMES = load_catalog().names()
KEYS = ["schema_version", "name", "backend", "params", "groups", "conditions", "fixed",
        "recommended", "sources", "type", "flag", "low", "high", "step", "log", "choices", "min",
        "max", "allow_unset", "source", "values", "param", "when", "description"]
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(allow_nan=False),
    st.text(max_size=10), st.sampled_from(["16MiB", "8GiB", "bool", "int", "float",
                                            "categorical", "pow2_bytes", "gpu", "cpu", "unset"]),
    st.sampled_from(CATALOG_NAMES),
)
keys = st.one_of(st.sampled_from(KEYS + CATALOG_NAMES), st.text(max_size=8), st.integers(0, 3))
yamlish = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=25,
)
param_specs = st.fixed_dictionaries({"type": st.sampled_from(
    ["bool", "int", "float", "categorical", "pow2_bytes", "other"])}, optional={
    k: yamlish for k in ("flag", "low", "high", "step", "log", "choices", "min", "max",
                         "allow_unset")})
spaces = st.fixed_dictionaries(
    {"schema_version": st.just(1) | yamlish, "name": st.text(max_size=5),
     "backend": st.sampled_from(["gpu", "cpu", "any", "x"]),
     "params": st.dictionaries(st.sampled_from(CATALOG_NAMES), param_specs, max_size=4)},
    optional={k: yamlish for k in ("groups", "conditions", "fixed", "recommended", "sources")},
)


def assert_only_space_errors(text: str) -> None:
    try:
        load_space_text(text, source="fuzz.yaml")
    except SpaceValidationError as exc:
        assert str(exc).startswith("fuzz.yaml:")
    except AutotuneError as exc:  # pragma: no cover - would be a wrong error class
        pytest.fail(f"unexpected {type(exc).__name__}: {exc}")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_arbitrary_text_gives_only_space_validation_errors(text):
    assert_only_space_errors(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(yamlish, spaces))
def test_arbitrary_mappings_give_only_space_validation_errors(data):
    assert_only_space_errors(yaml.safe_dump(data, sort_keys=False))


BOOLS = [LHS, DB, PAG, "xla_gpu_enable_pipelined_all_reduce"]


@st.composite
def small_spaces(draw) -> dict:
    """Valid-looking spaces of 1-5 params with a group (and its variants), conditions and a
    recommendation."""
    names = draw(st.lists(st.sampled_from([*BOOLS, AR]), min_size=1, max_size=5, unique=True))
    value = {n: st.sampled_from([2**24, 2**25]) if n == AR else st.booleans() for n in names}
    pick = st.sampled_from(names)
    members = draw(st.lists(pick, max_size=3, unique=True))
    conditioned = draw(st.lists(pick, max_size=2, unique=True))
    return {
        "schema_version": 1, "name": "s", "backend": "gpu",
        "params": {n: {"type": "pow2_bytes", "min": "16MiB", "max": "32MiB"} if n == AR
                   else {"type": "bool"} for n in names} | {
            n: {"type": "bool", "allow_unset": True} for n in draw(st.lists(
                st.sampled_from([b for b in BOOLS if b in names] or [LHS]), unique=True))
            if n in names},
        "groups": {"g": {"params": members, "values": {m: draw(value[m]) for m in members},
                         "variants": {v: {m: draw(value[m]) for m in members}
                                      for v in draw(st.lists(st.sampled_from(["a", "b"]),
                                                             unique=True))}}}
        if members else {},
        "conditions": [{"param": n, "when": {(o := draw(pick)): draw(value[o])}}
                       for n in conditioned],
        "recommended": {n: draw(value[n]) for n in draw(st.lists(pick, unique=True))},
    }


def every_configuration(space: Space) -> set[tuple]:
    """Run `sample` on every combination of Optuna choices (FixedTrial, no sampler)."""
    choices = {
        unit.key: unit.group.choices() if unit.group else [
            *space.params[unit.key].values(), *([UNSET] if space.params[unit.key].allow_unset
                                                 else [])]
        for unit in space.units
    }
    combos = itertools.product(*choices.values())
    trials = (optuna.trial.FixedTrial(dict(zip(choices, combo, strict=True))) for combo in combos)
    return {tuple(sorted(space.sample(trial).items())) for trial in trials}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_spaces())
def test_size_sampling_and_recommended_agree_on_valid_spaces(data):
    try:
        space = load_space_text(yaml.safe_dump(data, sort_keys=False))
    except SpaceValidationError:
        return
    assert len(every_configuration(space)) == space.size()
    points = space.grid()
    configs = {tuple(sorted(space.sample(optuna.trial.FixedTrial(p)).items())) for p in points}
    assert len(points) == len(configs) == space.size()
    if (params := space.recommended_params()) is not None:
        s = study()
        s.enqueue_trial(params)
        assert space.sample(s.ask()) == space.recommended_config()


# --- imports -------------------------------------------------------------------------


def test_importing_spaces_and_flags_loads_neither_jax_nor_optuna():
    code = ("import sys, autotune.spaces, autotune.flags; "
            "print(sorted(m for m in ('jax', 'optuna') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_a_file_that_is_no_space_points_at_an_example_that_exists():
    with pytest.raises(SpaceValidationError) as caught:
        load_space_text("just a string\n", "mine.yaml")
    message = str(caught.value)
    assert message.startswith("mine.yaml:1: (top level): the file is a single str value")
    example = Path(message.split("See ", 1)[1].removesuffix(" for a complete example."))
    assert example.is_absolute() and example.is_file()  # found from any folder
    assert load_space(str(example)).name == "gpu-collectives"
