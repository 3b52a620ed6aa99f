"""What a workload's compiled program must hold for a flag to have something to act on.

A space's param may name the built-in benchmarks that exercise its flag
(`exercised_by` in the YAML, `Param.exercised_by`). This module says what that
claim means, so a test can hold each named benchmark's compiled program to it:
a collective of one of the flag's kinds, inside a while loop where the flag
acts only there. It reads `fit.FLAG_USES` (one kind per flag, by rule) and adds
the flags that act on the scheduling of every kind (`SCHEDULING`), which the fit
never drops, or on the all-gather and reduce-scatter a windowed einsum splits.
Pure: no jax, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from autotune.ground.records import CollectiveStats
from autotune.rules.collectives import KINDS
from autotune.spaces.fit import FLAG_USES, Rule


@dataclass(frozen=True)
class Needs:
    """What a program must hold for a flag to act: a collective of one of `kinds`,
    and one inside a while loop when `in_loop`."""

    kinds: tuple[str, ...]
    in_loop: bool = False

    def met_by(self, profile: Mapping[str, CollectiveStats]) -> bool:
        """Whether a program with these collectives (`collective_profile`) has it."""
        found = [profile[kind] for kind in self.kinds if kind in profile]
        return any(s.count > 0 and (s.in_loop or not self.in_loop) for s in found)

    def describe(self) -> str:
        """`an all-gather inside a while loop`, `a collective of any kind`."""
        kinds = ("a collective of any kind" if set(self.kinds) == set(KINDS)
                 else " or ".join(f"an {k}" if k[0] in "aeiou" else f"a {k}" for k in self.kinds))
        return kinds + (" inside a while loop" if self.in_loop else "")


#: flag -> what it needs, for the flags `FLAG_USES` leaves out: the latency hiding
#: scheduler overlaps every kind of asynchronous collective, double buffering and the
#: TPU's pipelining chain unroll while loops holding them, and a windowed einsum splits
#: an all-gather or a reduce-scatter beside a matmul (`fit.CREATES`).
SCHEDULING: dict[str, Needs] = {
    "xla_gpu_enable_latency_hiding_scheduler": Needs(KINDS),
    "xla_tpu_enable_latency_hiding_scheduler": Needs(KINDS),
    "xla_latency_hiding_scheduler_rerun": Needs(KINDS),
    "xla_gpu_enable_highest_priority_async_stream": Needs(KINDS),
    "xla_gpu_enable_while_loop_double_buffering": Needs(KINDS, in_loop=True),
    "xla_should_allow_loop_variant_parameter_in_chain": Needs(("all-gather",), in_loop=True),
    "xla_should_add_loop_invariant_op_in_chain": Needs(("all-gather",), in_loop=True),
    "xla_tpu_enable_async_collective_fusion": Needs(("all-gather", "all-reduce")),
    "xla_gpu_threshold_for_windowed_einsum_mib": Needs(("all-gather", "reduce-scatter")),
    "xla_gpu_multi_streamed_windowed_einsum": Needs(("all-gather", "reduce-scatter")),
    "xla_jf_spmd_threshold_for_windowed_einsum_mib": Needs(("all-gather", "reduce-scatter")),
}


def needs(flag: str) -> Needs | None:
    """What `flag` acts on (None: autotune does not know it to act on collectives)."""
    use = FLAG_USES.get(flag)
    if use is not None:
        return Needs((use.kind,), in_loop=use.rule is Rule.IN_LOOP)
    return SCHEDULING.get(flag)
