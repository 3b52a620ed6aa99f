"""Removing flags from a space keeps it consistent (`--drop-unknown`)."""

from __future__ import annotations

from autotune.spaces import load_space
from autotune.spaces.prune import without_flags


def test_dropping_a_condition_controller_drops_what_depends_on_it():
    cpu = load_space("cpu")
    pruned = without_flags(cpu, ["xla_cpu_enable_fast_math"])
    assert "xla_cpu_enable_fast_math" not in pruned.flags()
    assert not any(f.startswith("xla_cpu_fast_math_honor") for f in pruned.flags())
    assert pruned.groups == {} and pruned.conditions == {}
    assert pruned.size() == cpu.size() // 3  # fast math had 3 outcomes: off, on, on+relaxed


def test_dropping_a_group_member_keeps_the_rest_of_the_group():
    tpu = load_space("tpu-collectives")
    pruned = without_flags(tpu, ["xla_tpu_enable_ici_ag_pipelining"])
    group = pruned.groups["ici-all-gather-pipelining"]
    assert "xla_tpu_enable_ici_ag_pipelining" not in group.params
    assert len(group.params) == 2 and set(group.values) == set(group.params)


def test_recommended_configuration_is_dropped_when_it_named_a_removed_flag():
    space = load_space("gpu-collectives")
    assert space.recommended_params() is not None
    pruned = without_flags(space, ["xla_gpu_enable_latency_hiding_scheduler"])
    assert pruned.recommended_params() is None
    untouched = without_flags(space, ["xla_not_in_this_space"])
    assert untouched.recommended_config() == space.recommended_config()
