"""Fitting a search space to the workload (`autotune.spaces.fit`): the rules, in-process.

The profiles are stated by hand; `test_collectives.py` reads real ones from
compiled benchmarks, and `test_fit_study.py` runs the fit inside a study.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from autotune.flags.catalog import load_catalog
from autotune.ground.records import CollectiveStats, FlagValue
from autotune.spaces import load_space, load_space_text
from autotune.spaces.fit import (
    CREATES,
    FLAG_USES,
    Action,
    FitChange,
    FlagUse,
    ProbeCase,
    Rule,
    SpaceFit,
    apply_fit,
    clip_choices,
    collective_changes,
    probe_cases,
    run_probe,
    settle,
    useful_range,
)

MiB, GiB = 1 << 20, 1 << 30
AR = "xla_gpu_all_reduce_combine_threshold_bytes"
AG = "xla_gpu_all_gather_combine_threshold_bytes"
RS = "xla_gpu_reduce_scatter_combine_threshold_bytes"
PIPE_AR = "xla_gpu_enable_pipelined_all_reduce"
A2A_ASYNC = "xla_tpu_enable_async_all_to_all"
A2A_BOUND = "xla_all_to_all_latency_bound_threshold_in_bytes"

#: A data-parallel model whose gradients are 0.74 GB, all-reduced outside any loop.
GRADIENTS = {"all-reduce": CollectiveStats(count=40, bytes=740_000_000,
                                           smallest_bytes=70_000_000, largest_bytes=400_000_000)}

TPU_SPACE = """
schema_version: 1
name: tpu-fit
backend: tpu
params:
  xla_tpu_enable_async_all_to_all:
    type: bool
  xla_all_to_all_latency_bound_threshold_in_bytes:
    type: pow2_bytes
    min: 4MiB
    max: 16MiB
    allow_unset: true
  xla_all_reduce_latency_bound_threshold_in_bytes:
    type: pow2_bytes
    min: 4MiB
    max: 16MiB
recommended:
  xla_tpu_enable_async_all_to_all: true
  xla_all_to_all_latency_bound_threshold_in_bytes: 8388608
  xla_all_reduce_latency_bound_threshold_in_bytes: 16777216
"""


def pow2(low: int, high: int) -> tuple[int, ...]:
    return tuple(1 << k for k in range(low.bit_length() - 1, high.bit_length()))


# --- the range a threshold is useful in ---------------------------------------------------


def test_a_combine_threshold_is_useful_up_to_the_first_power_of_two_above_the_total():
    low, high = useful_range(FlagUse("all-reduce", Rule.COMBINE), GRADIENTS["all-reduce"])
    assert (low, high) == (64 * MiB, 1 * GiB)  # 70 MB smallest, 0.74 GB in all


def test_arrays_inside_a_loop_count_twice_and_a_per_op_threshold_reads_the_largest():
    looped = CollectiveStats(count=4, bytes=3 * MiB, loop_count=2, loop_bytes=2 * MiB,
                             smallest_bytes=MiB, largest_bytes=MiB + 1)
    assert useful_range(FlagUse("all-gather", Rule.COMBINE), looped) == (MiB // 2, 8 * MiB)
    assert useful_range(FlagUse("all-gather", Rule.PER_OP), looped) == (MiB // 2, 2 * MiB)
    exact = CollectiveStats(count=1, bytes=MiB, smallest_bytes=MiB, largest_bytes=MiB)
    assert useful_range(FlagUse("all-gather", Rule.PER_OP), exact) == (MiB // 2, 2 * MiB)
    tiny = CollectiveStats(count=1, bytes=1, smallest_bytes=1, largest_bytes=1)
    assert useful_range(FlagUse("all-reduce", Rule.COMBINE), tiny) == (0, 2)


@pytest.mark.parametrize(("choices", "low", "high", "kept"), [
    (pow2(16 * MiB, 8 * GiB), 64 * MiB, GiB, pow2(64 * MiB, GiB)),
    (pow2(16 * MiB, 8 * GiB), 0, 64 * 1024, (16 * MiB,)),  # all above: the smallest stays
    (pow2(16 * MiB, 8 * GiB), 16 * GiB, 32 * GiB, (8 * GiB,)),  # all below: the largest stays
    ((100, 300, 1000), 200, 500, (100, 300, 1000)),  # the values just outside stand for the rest
    ((100, 300, 1000, 3000), 300, 300, (300,)),
])
def test_clipping_keeps_one_value_on_each_side_and_never_empties(choices, low, high, kept):
    assert clip_choices(choices, low, high) == kept


# --- the collectives' rules ---------------------------------------------------------------


def test_thresholds_of_016_mib_to_8_gib_are_clipped_to_a_074_gb_model():
    changes = {c.param: c for c in collective_changes(load_space("gpu-collectives"), GRADIENTS)}

    clipped = changes[AR]
    assert clipped.action is Action.CLIPPED and clipped.evidence == "collectives"
    assert clipped.new == pow2(64 * MiB, GiB)
    assert clipped.reason == (
        "its 40 all-reduces hold 705.7 MiB in all: every threshold below its smallest array "
        "(66.8 MiB) is below each of them alike; every threshold from 1 GiB up combines all of "
        "them alike")
    assert changes[AG].action is Action.DROPPED
    assert changes[AG].reason == "the program has no all-gather: nothing for it to act on"
    assert changes[PIPE_AR].reason == ("none of the program's 40 all-reduces runs inside a "
                                       "while loop, the only place it acts")
    assert "xla_gpu_enable_latency_hiding_scheduler" not in changes  # acts on no one kind


def test_a_flag_of_a_kind_inside_a_loop_is_kept_and_a_range_inside_the_sizes_untouched():
    profile = {"all-reduce": CollectiveStats(count=2, bytes=64 * GiB, loop_count=1,
                                             loop_bytes=GiB, smallest_bytes=MiB,
                                             largest_bytes=32 * GiB)}
    changes = {c.param for c in collective_changes(load_space("gpu-collectives"), profile)}
    assert PIPE_AR not in changes and AR not in changes


def test_params_of_an_absent_kind_are_dropped_and_the_rest_clipped():
    space = load_space_text(TPU_SPACE)
    profile = {"all-reduce": CollectiveStats(count=1, bytes=6 * MiB, smallest_bytes=4,
                                             largest_bytes=6 * MiB)}
    fit = settle(space, collective_changes(space, profile), collectives=profile)

    assert [(c.param, c.action) for c in fit.changes] == [
        (A2A_ASYNC, Action.DROPPED), (A2A_BOUND, Action.DROPPED),
        ("xla_all_reduce_latency_bound_threshold_in_bytes", Action.CLIPPED)]
    assert fit.changes[0].old == (False, True) and fit.changes[1].old == pow2(4 * MiB, 16 * MiB)
    fitted = apply_fit(space, fit)
    assert list(fitted.params) == ["xla_all_reduce_latency_bound_threshold_in_bytes"]
    assert fitted.params["xla_all_reduce_latency_bound_threshold_in_bytes"].choices == (
        4 * MiB, 8 * MiB)
    # the recommended trial: the dropped flags leave it, 16 MiB (above every all-reduce,
    # like 8 MiB) moves to the nearest value left
    assert fitted.recommended == {"xla_all_reduce_latency_bound_threshold_in_bytes": 8 * MiB}
    assert fitted.recommended_params() == {
        "xla_all_reduce_latency_bound_threshold_in_bytes": 8 * MiB}
    assert fit.recommended == {A2A_ASYNC: None, A2A_BOUND: None,
                               "xla_all_reduce_latency_bound_threshold_in_bytes": 8 * MiB}


PERMUTE_SPACE = """
schema_version: 1
name: permute
backend: tpu
params:
  xla_collective_permute_latency_bound_threshold_in_bytes:
    type: pow2_bytes
    min: 4MiB
    max: 16MiB
    allow_unset: true
  xla_jf_spmd_threshold_for_windowed_einsum_mib:
    type: categorical
    choices: [16, 32]
    allow_unset: true
"""


def test_a_flag_that_creates_a_kind_keeps_that_kinds_params():
    """Windowed einsum turns all-gathers into loops of collective-permutes: a program
    without any may get some, so the permute threshold stays, unclipped."""
    permute = "xla_collective_permute_latency_bound_threshold_in_bytes"
    profile = {"all-gather": CollectiveStats(count=1, bytes=MiB, smallest_bytes=MiB,
                                             largest_bytes=MiB)}
    with_einsum = load_space_text(PERMUTE_SPACE)
    assert collective_changes(with_einsum, profile) == []
    alone = load_space_text(PERMUTE_SPACE.split("  xla_jf_spmd")[0])
    assert [(c.param, c.action) for c in collective_changes(alone, profile)] == [
        (permute, Action.DROPPED)]


def test_group_members_are_left_as_documented():
    space = load_space("tpu-collectives")
    grouped = {m for g in space.groups.values() for m in g.params}
    changed = {c.param for c in collective_changes(space, {})}
    assert changed and not changed & grouped


def test_every_catalog_flag_that_names_a_kind_says_how_it_acts():
    """The one explicit mapping stays complete: a flag added to the catalog whose name
    names a collective must say what it acts on (obsolete flags aside)."""
    catalog = load_catalog()
    kinds = re.compile(r"all_reduce|all_gather|reduce_scatter|collective_permute|all_to_all")
    named = {s.name for s in catalog if kinds.search(s.name) and s.obsolete is None}
    assert named - set(FLAG_USES) == set()
    assert set(FLAG_USES) | set(CREATES) <= set(catalog.names())


# --- the compile-only probe ---------------------------------------------------------------


class Compiler:
    """Fingerprints from a table: configuration -> program (unlisted: "base"); what was
    compiled, in order, and each round (one call) apart."""

    def __init__(self, programs: Mapping[str, str | None]) -> None:
        self.programs = programs
        self.compiled: list[dict[str, FlagValue]] = []
        self.rounds: list[list[dict[str, FlagValue]]] = []

    def __call__(self, configs: Sequence[Mapping[str, FlagValue]]) -> list[str | None]:
        self.rounds.append([dict(config) for config in configs])
        self.compiled += self.rounds[-1]
        return [self.programs.get(",".join(f"{k}={v}" for k, v in sorted(config.items())),
                                  "base") for config in configs]


CPU_SPACE = """
schema_version: 1
name: cpu-lone
backend: cpu
params:
  xla_backend_optimization_level:
    type: categorical
    choices: [0, 1, 2, 3]
    allow_unset: true
  xla_cpu_use_fusion_emitters:
    type: bool
    allow_unset: true
  xla_cpu_prefer_vector_width:
    type: categorical
    choices: [128, 256, 512]
  xla_cpu_enable_fast_math:
    type: bool
  xla_cpu_fast_math_honor_nans:
    type: bool
  xla_cpu_fast_math_honor_infs:
    type: bool
conditions:
  - param: xla_cpu_fast_math_honor_nans
    when: {xla_cpu_enable_fast_math: true}
  - param: xla_cpu_fast_math_honor_infs
    when: {xla_cpu_enable_fast_math: true}
"""


def test_the_probe_drops_a_flag_whose_every_value_compiles_to_the_baseline():
    space = load_space_text(CPU_SPACE)
    cases = {c.param: c for c in probe_cases(space, load_catalog())}
    assert cases["xla_cpu_prefer_vector_width"].values == (128, 512)  # 256 is the default
    assert cases["xla_backend_optimization_level"].values == (0, 1, 2)
    honor = cases["xla_cpu_fast_math_honor_nans"]
    assert honor.reference == {"xla_cpu_enable_fast_math": True} and honor.values == (False,)

    compiler = Compiler({"xla_cpu_prefer_vector_width=128": "narrow",
                         "xla_backend_optimization_level=0": "o0",
                         "xla_cpu_enable_fast_math=True": "fast",
                         "xla_cpu_enable_fast_math=True,xla_cpu_fast_math_honor_nans=False":
                             "fast-nans",
                         "xla_cpu_enable_fast_math=True,xla_cpu_fast_math_honor_infs=False":
                             "fast"})
    changes = run_probe(list(cases.values()), compiler)

    assert {c.param: c.reason for c in changes} == {
        "xla_cpu_use_fusion_emitters": "no effect on the compiled program: its value "
                                       "compiled to the baseline's program",
        "xla_cpu_fast_math_honor_infs": "no effect on the compiled program: its value compiled "
                                        "to the program of xla_cpu_enable_fast_math=True alone"}
    assert all(c.evidence == "probe" and c.action is Action.DROPPED for c in changes)
    # a param stops at its first value with another program: optimisation levels 1 and 2
    # were never compiled, nor vector width 512; each configuration is compiled when asked
    assert {"xla_backend_optimization_level": 1} not in compiler.compiled
    assert {"xla_cpu_prefer_vector_width": 512} not in compiler.compiled
    # in rounds, one call each: the baseline and every unconditioned param's first value;
    # then the params under way and those whose condition is now decided (their reference
    # asked again: the caller keeps what it compiled)
    fast = {"xla_cpu_enable_fast_math": True}
    assert compiler.rounds[0] == [{}, {"xla_backend_optimization_level": 0},
                                  {"xla_cpu_use_fusion_emitters": False},
                                  {"xla_cpu_prefer_vector_width": 128}, fast]
    assert compiler.rounds[1:] == [[fast, {**fast, "xla_cpu_fast_math_honor_nans": False},
                                    {**fast, "xla_cpu_fast_math_honor_infs": False}]]


def test_a_param_whose_condition_reads_a_param_the_probe_dropped_is_not_probed():
    space = load_space_text(CPU_SPACE)
    compiler = Compiler({})  # nothing changes the program
    changes = run_probe(probe_cases(space, load_catalog()), compiler)
    assert "xla_cpu_enable_fast_math" in {c.param for c in changes}
    assert not [c for c in compiler.compiled if "xla_cpu_fast_math_honor_nans" in c]
    # a param skipped with the one it reads asks for no round of its own
    fast, nans = "xla_cpu_enable_fast_math", "xla_cpu_fast_math_honor_nans"
    alone = Compiler({})
    changes = run_probe([ProbeCase(fast, fast, {}, (True,)),
                         ProbeCase(nans, nans, {fast: True}, (False,))], alone)
    assert [c.param for c in changes] == [fast] and alone.rounds == [[{}, {fast: True}]]
    assert "xla_cpu_fast_math_honor_nans" not in apply_fit(space, settle(space, changes)).params


def test_the_probe_keeps_what_it_cannot_judge():
    catalog = load_catalog()
    runtime = probe_cases(load_space("gpu-runtime"), catalog)
    assert {c.flag for c in runtime} & {"NCCL_PROTO", "CUDA_DEVICE_MAX_CONNECTIONS"} == set()
    assert probe_cases(load_space("tpu-collectives"), catalog) == []  # libtpu flags
    assert probe_cases(load_space("gpu-collectives"), catalog, limit=4) == [
        c for c in probe_cases(load_space("gpu-collectives"), catalog)
        if c.flag not in (AR, AG, RS)]  # ranges of 10 values, over the limit of 4
    failing = run_probe([ProbeCase("p", AR, {}, (1,))], Compiler({f"{AR}=1": None}))
    assert failing == []  # did not compile: not "no effect"
    assert run_probe([ProbeCase("p", AR, {}, (1,))], Compiler({"": None})) == []  # no baseline
    # a param without values to compile is dropped once its reference compiled, not before
    assert run_probe([ProbeCase("p", AR, {}, ())], Compiler({"": None})) == []
    assert [c.param for c in run_probe([ProbeCase("p", AR, {}, ())], Compiler({}))] == ["p"]


def test_a_param_whose_condition_reads_a_dropped_param_goes_with_it():
    space = load_space("cpu")
    fit = settle(space, [FitChange("xla_cpu_enable_fast_math", "xla_cpu_enable_fast_math",
                                   Action.DROPPED, "no effect", evidence="probe")])
    assert [(c.param, c.evidence) for c in fit.changes] == [
        ("xla_cpu_enable_fast_math", "probe"),
        *((f"xla_cpu_fast_math_honor_{n}", "condition")
          for n in ("nans", "infs", "division", "functions"))]
    assert fit.changes[1].reason == ("it is sampled only when xla_cpu_enable_fast_math=true, "
                                     "and xla_cpu_enable_fast_math was dropped")
    assert "xla_cpu_fast_math_honor_nans" not in apply_fit(space, fit).params


# --- the stored document ------------------------------------------------------------------


def test_a_fit_reads_back_from_its_json_and_refuses_another_version(tmp_path: Path):
    space = load_space("gpu-collectives")
    fit = settle(space, collective_changes(space, GRADIENTS), probes=3, collectives=GRADIENTS)
    document = fit.to_json()
    assert document["schema_version"] == 1 and document["probes"] == 3
    assert SpaceFit.from_json(document) == fit
    assert apply_fit(space, SpaceFit.from_json(document)) == apply_fit(space, fit)
    with pytest.raises(ValueError, match="space fit schema_version 2 is not 1"):
        SpaceFit.from_json({**document, "schema_version": 2})


def test_an_empty_fit_leaves_the_space_as_documented():
    space = load_space("gpu-collectives")
    assert apply_fit(space, SpaceFit()) == space


def test_a_range_clipped_then_dropped_by_the_probe_keeps_both_reasons():
    space = load_space("gpu-collectives")
    clipped = [c for c in collective_changes(space, GRADIENTS) if c.param == AR]
    probed = FitChange(AR, AR, Action.DROPPED, "no effect on the compiled program: each of its "
                       "5 values compiled to the baseline's program", evidence="probe")
    fit = settle(space, [*clipped, probed])
    (change,) = fit.changes
    assert change.action is Action.DROPPED and change.evidence == "probe"
    assert change.reason == (f"{probed.reason} (its range was clipped first: "
                             f"{clipped[0].reason})")
    assert change.old == pow2(16 * MiB, 8 * GiB) and change.new == ()
    assert AR not in apply_fit(space, fit).params
