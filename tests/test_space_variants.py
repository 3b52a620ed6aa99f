"""Group variants: a group's values beyond on and off (e.g. kAuto where on is kEnabled)."""

from __future__ import annotations

import textwrap
from collections import Counter
from pathlib import Path

import optuna
import pytest
from cli_runner import invoke

from autotune.ground.errors import SpaceValidationError
from autotune.spaces import GROUP_PREFIX, load_space, load_space_text
from autotune.spaces.prune import without_flags, without_values

optuna.logging.set_verbosity(optuna.logging.WARNING)

ALLOW = "xla_should_allow_loop_variant_parameter_in_chain"
ADD = "xla_should_add_loop_invariant_op_in_chain"
ICI = "xla_tpu_enable_ici_ag_pipelining"
A2A = "xla_tpu_enable_async_all_to_all"
AG = "xla_enable_async_all_gather"
FUSE_AG = "xla_tpu_enable_async_collective_fusion_fuse_all_gather"
KEY = GROUP_PREFIX + "pipe"

#: One group of the three ICI pipelining flags, on = kEnabled, variant auto = kAuto.
SPACE = f"""\
schema_version: 1
name: t
backend: tpu
params:
  {ALLOW}: {{type: categorical, choices: [kDisabled, kEnabled, kAuto]}}
  {ADD}: {{type: categorical, choices: [kDisabled, kEnabled, kAuto]}}
  {ICI}: {{type: bool}}
  {A2A}: {{type: bool}}
groups:
  pipe:
    params: [{ALLOW}, {ADD}, {ICI}]
    values: {{{ALLOW}: kEnabled, {ADD}: kEnabled, {ICI}: true}}
    variants:
      auto: {{{ALLOW}: kAuto, {ADD}: kAuto, {ICI}: true}}
"""
ON = {ALLOW: "kEnabled", ADD: "kEnabled", ICI: True}
AUTO = {ALLOW: "kAuto", ADD: "kAuto", ICI: True}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def sample(space, params: dict) -> dict:
    return space.sample(optuna.trial.FixedTrial(params))


# --- the file's shape and its values, refused with file, line and key path ------------

VARIANT_LINE = f"      auto: {{{ALLOW}: kAuto, {ADD}: kAuto, {ICI}: true}}\n"


def with_variants(block: str) -> str:
    return SPACE.replace("    variants:\n" + VARIANT_LINE, block)


REFUSED = [
    pytest.param(
        with_variants(f"    variants:\n      auto:\n        {ALLOW}: kAutomatic\n"
                      f"        {ADD}: kAuto\n        {ICI}: true\n"),
        15, f"groups.pipe.variants.auto.{ALLOW}",
        f"{ALLOW} expects one of kDisabled, kEnabled, kAuto, got 'kAutomatic'. "
        "Allowed: kDisabled, kEnabled, kAuto.", id="value-not-legal-for-the-flag"),
    pytest.param(
        with_variants(f"    variants:\n      auto: {{{ALLOW}: kAuto, {ADD}: kAuto, {ICI}: 1}}\n"),
        14, f"groups.pipe.variants.auto.{ICI}", f"{ICI} expects true or false, got 1",
        id="value-of-the-wrong-type"),
    pytest.param(
        with_variants(f"    variants:\n      auto: {{{ALLOW}: kAuto, {ADD}: kAuto}}\n"),
        14, "groups.pipe.variants.auto", f"no value for member '{ICI}'. Give every member "
        "the value it takes in variant 'auto'.", id="member-left-out"),
    pytest.param(
        with_variants(f"    variants:\n      auto: {{{ALLOW}: kAuto, {ADD}: kAuto, {ICI}: true, "
                      f"{A2A}: true}}\n"),
        14, f"groups.pipe.variants.auto.{A2A}", f"'{A2A}' is not a member of the group",
        id="not-a-member"),
    pytest.param(
        with_variants(f"    variants:\n      'off': {{{ALLOW}: kAuto, {ADD}: kAuto, "
                      f"{ICI}: true}}\n"),
        14, "groups.pipe.variants.off", "a variant cannot be called 'off'",
        id="reserved-name"),
    pytest.param(
        with_variants(f"    variants:\n      '2 ways': {{{ALLOW}: kAuto, {ADD}: kAuto, "
                      f"{ICI}: true}}\n"),
        14, "groups.pipe.variants.2 ways", "variant name '2 ways' is not a word",
        id="name-not-a-word"),
    pytest.param(
        with_variants(f"    variants:\n      same: {{{ALLOW}: kEnabled, {ADD}: kEnabled, "
                      f"{ICI}: true}}\n"),
        14, "groups.pipe.variants.same", "variant 'same' sets the same values as the "
        "group's values (on)", id="same-as-on"),
    pytest.param(
        SPACE + f"      again: {{{ALLOW}: kAuto, {ADD}: kAuto, {ICI}: true}}\n",
        15, "groups.pipe.variants.again", "variant 'again' sets the same values as variant "
        "'auto'", id="same-as-another-variant"),
    pytest.param(
        with_variants("    variants:\n      auto: kAuto\n"),
        14, "groups.pipe.variants.auto", "Input should be a valid dictionary, got 'kAuto'",
        id="variant-not-a-mapping"),
    pytest.param(
        SPACE.replace("    variants:", "    variant:"),
        13, "groups.pipe.variant", "unknown key 'variant'. Did you mean 'variants'?",
        id="misspelled-key"),
    pytest.param(
        SPACE + f"conditions:\n  - param: {A2A}\n    when: {{{ALLOW}: kDisabled}}\n",
        17, f"conditions[0].when.{ALLOW}", f"'kDisabled' is never a value of '{ALLOW}': its "
        "group sets it to one of 'kEnabled', 'kAuto'", id="condition-on-a-value-never-set"),
    pytest.param(
        SPACE + f"recommended:\n  {ALLOW}: kAuto\n  {ADD}: kEnabled\n  {ICI}: true\n"
        f"  {A2A}: true\n",
        16, f"recommended.{ALLOW}", "recommended mixes the values of group 'pipe' and its "
        "variants", id="recommended-mixes-on-and-a-variant"),
]


@pytest.mark.parametrize(("text", "line", "path", "words"), REFUSED)
def test_a_bad_variant_is_refused_naming_file_line_group_and_value(tmp_path, text, line, path,
                                                                    words):
    file = write(tmp_path, text)
    with pytest.raises(SpaceValidationError) as info:
        load_space(str(file))
    message = str(info.value)
    assert message.startswith(f"{file}:{line}: {path}: "), message
    assert words in message
    assert info.value.exit_code == 2


def test_variants_null_or_empty_is_a_group_without_variants():
    for block in ("    variants:\n", "    variants: {}\n"):
        space = load_space_text(with_variants(block))
        assert space.groups["pipe"].variants == {}
        assert space.size() == 2 * 2


# --- sampling, size, grid ------------------------------------------------------------


def test_the_switch_is_one_categorical_of_off_on_and_each_variant():
    space = load_space_text(SPACE)
    assert space.groups["pipe"].choices() == [False, True, "auto"]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    trial = study.ask()
    space.sample(trial)
    assert trial.distributions[KEY] == optuna.distributions.CategoricalDistribution(
        [False, True, "auto"])


@pytest.mark.parametrize(("choice", "values"), [
    ("auto", AUTO), (True, ON), (False, {}),
])
def test_sampling_a_choice_gives_exactly_its_values(choice, values):
    space = load_space_text(SPACE)
    assert sample(space, {KEY: choice, A2A: False}) == {**values, A2A: False}


def test_size_and_grid_count_each_variant():
    space = load_space_text(SPACE)
    assert space.size() == 3 * 2
    points = space.grid()
    assert len(points) == 6
    assert Counter(p[KEY] for p in points) == {True: 2, False: 2, "auto": 2}
    configs = {tuple(sorted(sample(space, p).items())) for p in points}
    assert len(configs) == 6


def test_random_sampling_reaches_every_configuration_variants_included():
    space = load_space_text(SPACE)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = {tuple(sorted(space.sample(study.ask()).items())) for _ in range(200)}
    assert len(seen) == space.size()


def test_a_condition_may_ask_for_a_variant_value():
    space = load_space_text(
        SPACE + f"conditions:\n  - param: {A2A}\n    when: {{{ALLOW}: kAuto}}\n")
    # off and on: the all-to-all flag is never sampled; auto: true or false
    assert space.size() == 1 + 1 + 2
    assert sample(space, {KEY: True}) == ON
    assert sample(space, {KEY: "auto", A2A: True}) == {**AUTO, A2A: True}


def test_a_recommended_variant_is_enqueued_by_its_name():
    space = load_space_text(SPACE + "recommended:\n" + "".join(
        f"  {flag}: {'true' if value is True else value}\n"
        for flag, value in {**AUTO, A2A: True}.items()))
    assert space.recommended_params() == {KEY: "auto", A2A: True}
    study = optuna.create_study()
    study.enqueue_trial(space.recommended_params())
    assert space.sample(study.ask()) == space.recommended_config() == {**AUTO, A2A: True}


def test_a_group_without_variants_is_still_the_boolean_switch():
    space = load_space("cpu")  # fast-math-relaxed has no variants
    group = space.groups["fast-math-relaxed"]
    assert group.variants == {} and group.choices() == [False, True]
    assert space.size() == 180
    assert {p[GROUP_PREFIX + group.name] for p in space.grid()
            if GROUP_PREFIX + group.name in p} == {False, True}


# --- the shipped variants --------------------------------------------------------------


def test_tpu_collectives_ships_the_documented_variants():
    space = load_space("tpu-collectives")
    pipelining = space.groups["ici-all-gather-pipelining"]
    assert dict(pipelining.values) == ON
    assert {k: dict(v) for k, v in pipelining.variants.items()} == {"auto": AUTO}
    async_ag = space.groups["v5e-async-all-gather"]
    assert dict(async_ag.values) == {AG: "kAuto", FUSE_AG: True}
    assert {k: dict(v) for k, v in async_ag.variants.items()} == {
        "enabled": {AG: "kEnabled", FUSE_AG: True}}
    assert space.groups["v5e-async-all-reduce"].variants == {}
    config = sample(space, {GROUP_PREFIX + "ici-all-gather-pipelining": "auto",
                            "xla_tpu_enable_async_collective_fusion": True,
                            GROUP_PREFIX + "v5e-async-all-gather": "enabled",
                            GROUP_PREFIX + "v5e-async-all-reduce": False,
                            A2A: False, "xla_enable_async_collective_permute": "kAuto"})
    assert config == {**AUTO, "xla_tpu_enable_async_collective_fusion": True,
                      AG: "kEnabled", FUSE_AG: True, A2A: False,
                      "xla_enable_async_collective_permute": "kAuto"}


def test_spaces_show_lists_each_choice_of_a_group(tmp_path):
    shown = invoke("spaces", "show", "tpu-collectives", cwd=tmp_path)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert f"auto: {ADD}=kAuto {ALLOW}=kAuto {ICI}=true" in text
    assert f"on: {ADD}=kEnabled {ALLOW}=kEnabled {ICI}=true" in text
    assert f"enabled: {AG}=kEnabled {FUSE_AG}=true" in text
    assert "off: XLA's defaults (every member unset)" in text
    assert "set by group ici-all-gather-pipelining" in text


# --- pruning for this XLA ------------------------------------------------------------------


def test_removing_a_member_trims_the_variants_and_drops_one_left_equal_to_on():
    space = load_space_text(SPACE)
    pruned = without_flags(space, [ALLOW, ADD])
    group = pruned.groups["pipe"]
    assert group.params == (ICI,) and group.variants == {}  # auto left = on: {ICI: true}
    assert pruned.size() == 2 * 2


def test_a_variant_with_a_value_this_xla_rejects_goes():
    space = load_space_text(SPACE)
    pruned = without_values(space, {ALLOW: ["kAuto"]})
    assert pruned.groups["pipe"].variants == {}
    assert pruned.size() == 2 * 2


def test_preflight_drops_a_variant_whose_value_the_probe_rejected():
    from autotune.flags import load_catalog
    from autotune.flags.probe import ProbeReport
    from autotune.study.preflight import check

    report = ProbeReport(
        jax_version="0", jaxlib_version="0", backend="tpu", device_kind="tpu", libtpu=True,
        accepted=frozenset({ALLOW, ADD, ICI, A2A}), unknown=frozenset(),
        rejected_values={ALLOW: {"kAuto": "bad value"}},
        checked_values={ALLOW: ("kDisabled", "kEnabled", "kAuto")},
        per_compile={}, usage_defaults={})
    # the param's own choices lack kAuto: only the variant sets it
    space = load_space_text(SPACE.replace(
        f"{ALLOW}: {{type: categorical, choices: [kDisabled, kEnabled, kAuto]}}",
        f"{ALLOW}: {{type: categorical, choices: [kEnabled]}}"))
    checked = check(space, load_catalog(), report, drop_unknown=False,
                    allow_backend_mismatch=False)
    assert checked.dropped_values == {ALLOW: ["kAuto"]}
    assert checked.space.groups["pipe"].variants == {}
    assert all(c.get(ALLOW) != "kAuto" for c in (
        sample(checked.space, p) for p in checked.space.grid()))


# --- neighbours: one decision away (the local search's moves) --------------------------------

NEAR_SPACE = """\
schema_version: 1
name: near
backend: any
params:
  xla_backend_optimization_level: {type: categorical, choices: [0, 1, 2, 3], allow_unset: true}
  xla_cpu_enable_fast_math: {type: bool}
  xla_cpu_fast_math_honor_nans: {type: bool}
  xla_cpu_fast_math_honor_infs: {type: bool}
  xla_gpu_all_reduce_combine_threshold_bytes:
    {type: pow2_bytes, min: 1024, max: 1073741824, allow_unset: true}
groups:
  relaxed:
    params: [xla_cpu_fast_math_honor_nans, xla_cpu_fast_math_honor_infs]
    values: {xla_cpu_fast_math_honor_nans: false, xla_cpu_fast_math_honor_infs: false}
conditions:
  - param: xla_cpu_fast_math_honor_nans
    when: {xla_cpu_enable_fast_math: true}
  - param: xla_cpu_fast_math_honor_infs
    when: {xla_cpu_enable_fast_math: true}
"""
LEVEL, FAST, COMBINE = ("xla_backend_optimization_level", "xla_cpu_enable_fast_math",
                        "xla_gpu_all_reduce_combine_threshold_bytes")


def _differs(a: dict, b: dict) -> set[str]:
    return {k for k in {*a, *b} if a.get(k, "gone") != b.get(k, "gone")}


def test_neighbours_change_one_decision_and_bring_what_it_switches_on():
    space = load_space_text(NEAR_SPACE)
    centre = {LEVEL: "unset", FAST: False, COMBINE: 1 << 20}
    near = space.neighbours(centre)
    assert centre not in near
    assert len({repr(sorted(p.items())) for p in near}) == len(near)  # each once
    for point in near:  # one decision, or fast math with the group it switches on
        assert len(_differs(point, centre)) == 1 or _differs(point, centre) == {
            FAST, GROUP_PREFIX + "relaxed"}
    levels = {p[LEVEL] for p in near if _differs(p, centre) == {LEVEL}}
    assert levels == {0, 1, 2, 3}
    fast = [p for p in near if p[FAST] is True]
    assert {p[GROUP_PREFIX + "relaxed"] for p in fast} == {True, False}
    # a long range moves 2 candidates each side (and may go back to unset), not everywhere
    combine = sorted(p[COMBINE] for p in near if _differs(p, centre) == {COMBINE}
                     if p[COMBINE] != "unset")
    assert combine == [1 << 18, 1 << 19, 1 << 21, 1 << 22]
    assert any(p[COMBINE] == "unset" for p in near)


def test_neighbours_drop_what_a_change_switches_off():
    space = load_space_text(NEAR_SPACE)
    centre = {LEVEL: 2, FAST: True, GROUP_PREFIX + "relaxed": True, COMBINE: "unset"}
    off = [p for p in space.neighbours(centre) if p[FAST] is False]
    assert off == [{LEVEL: 2, FAST: False, COMBINE: "unset"}]  # the group goes with fast math
    # from "unset", a long range offers the candidates at both of its ends
    ends = sorted(p[COMBINE] for p in space.neighbours(centre)
                  if _differs(p, centre) == {COMBINE})
    assert ends == [1 << 10, 1 << 11, 1 << 29, 1 << 30]
