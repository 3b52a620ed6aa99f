"""A launcher that answers from a recorded table instead of running JAX.

The double for hardware and time we do not have: tests of the study logic
(confirmation, ranking, failures) and, later, search benchmarks run against a
table of configuration -> recorded outcomes. Each configuration's outcomes are
handed out in order and then cycled, so a table with several repeats per
configuration reproduces their spread.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import cycle

from autotune.launcher import Launcher, TrialRequest
from autotune.records import FlagValue, OutcomeKind, TrialOutcome

ConfigKey = frozenset[tuple[str, FlagValue]]


def config_key(flags: Mapping[str, FlagValue]) -> ConfigKey:
    """A hashable key of a configuration."""
    return frozenset(flags.items())


class ReplayLauncher(Launcher):
    """Replays recorded outcomes per configuration (see the module docstring).

    Args:
        table: configuration key -> the outcomes recorded for it, in order.
        default: outcomes for configurations missing from the table; None makes
            a missing configuration a CRASHED outcome that names it.
    """

    def __init__(self, table: Mapping[ConfigKey, Sequence[TrialOutcome]],
                 default: Sequence[TrialOutcome] | None = None) -> None:
        self._streams: dict[ConfigKey, Iterator[TrialOutcome]] = {
            key: cycle(list(outcomes)) for key, outcomes in table.items() if outcomes}
        self._default = cycle(list(default)) if default else None
        self.launched: list[Mapping[str, FlagValue]] = []

    def launch(self, request: TrialRequest) -> TrialOutcome:
        self.launched.append(dict(request.flags))
        stream = self._streams.get(config_key(request.flags), self._default)
        if stream is None:
            return TrialOutcome(OutcomeKind.CRASHED,
                                f"no recorded outcome for {dict(request.flags)}")
        return next(stream)
