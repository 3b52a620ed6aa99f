"""One tunable parameter of a search space: its candidates and its Optuna distribution."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.ground.records import FlagValue
from autotune.spaces.schema import ParamSpec

if TYPE_CHECKING:
    import optuna

#: How "leave XLA's default" appears among the choices of an Optuna categorical.
UNSET = "unset"
#: Most candidates an int or float range may have when it also allows "unset"
#: (it is then sampled as one categorical).
MAX_UNSET_RANGE = 1024


def same_value(a: object, b: object) -> bool:
    """Equality that keeps booleans apart from numbers (`True` is not `1` here)."""
    return a == b and isinstance(a, bool) == isinstance(b, bool)


@dataclass(frozen=True)
class Param:
    """A validated parameter.

    Attributes:
        name: the parameter's name (also its Optuna name).
        flag: the catalog flag it sets.
        type: bool, int, float, categorical or pow2_bytes.
        low, high, step, log: the range of an int or float param.
        choices: the candidates of a bool, categorical or pow2_bytes param.
        allow_unset: whether "leave XLA's default" is a candidate too.
        source: one line of provenance.
        exercised_by: the built-in benchmarks whose compiled program has what the
            flag acts on (`autotune.spaces.exercise`); empty when the file names none.
    """

    name: str
    flag: str
    type: str
    low: int | float | None = None
    high: int | float | None = None
    step: int | float | None = None
    log: bool = False
    choices: tuple[FlagValue, ...] | None = None
    allow_unset: bool = False
    source: str | None = None
    exercised_by: tuple[str, ...] = ()

    @classmethod
    def from_spec(cls, name: str, spec: ParamSpec) -> Param:
        """Build a param from its (already checked) YAML spec."""
        choices: tuple[FlagValue, ...] | None = None
        if spec.type == "bool":
            choices = (False, True)
        elif spec.type == "categorical":
            choices = tuple(spec.choices or ())
        elif spec.type == "pow2_bytes" and spec.min and spec.max:
            choices = tuple(1 << k for k in range(spec.min.bit_length() - 1, spec.max.bit_length()))
        return cls(
            name=name, flag=spec.flag or name, type=spec.type, low=spec.low, high=spec.high,
            step=spec.step, log=spec.log, choices=choices, allow_unset=spec.allow_unset,
            source=spec.source, exercised_by=tuple(spec.exercised_by or ()),
        )

    def values(self) -> tuple[FlagValue, ...] | None:
        """The candidates other than "unset", or None for a continuous float range."""
        if self.choices is not None:
            return self.choices
        assert self.low is not None and self.high is not None
        if self.type == "int":
            return tuple(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        if self.step is None:
            return None
        count = self._grid_count()
        return tuple(round(self.low + i * self.step, 12) for i in range(count))

    def count(self) -> int | None:
        """How many candidates, "unset" included; None for a continuous range."""
        if self.choices is not None:
            size = len(self.choices)
        elif self.type == "int" or self.step is not None:
            size = self._grid_count()
        else:
            return None
        return size + int(self.allow_unset)

    def _grid_count(self) -> int:
        assert self.low is not None and self.high is not None
        step = self.step or 1
        return math.floor((self.high - self.low) / step + 1e-9) + 1

    def contains(self, value: object) -> bool:
        """Whether `value` is one of the candidates (the "unset" choice aside)."""
        if self.choices is not None:
            return any(same_value(value, choice) for choice in self.choices)
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if self.type == "int" and not isinstance(value, int):
            return False
        assert self.low is not None and self.high is not None
        if not self.low <= value <= self.high:
            return False
        k = (value - self.low) / self.step if self.step is not None else 0
        return abs(k - round(k)) < 1e-9

    def describe(self) -> str:
        """The candidates in words, for error messages."""
        if self.choices is not None:
            text = ", ".join(repr(choice) for choice in self.choices)
        else:
            text = f"{self.type} range [{self.low}, {self.high}]"
            text += f" step {self.step}" if self.step is not None else ""
        return text + (", or unset" if self.allow_unset else "")

    def _as_categorical(self) -> list[Any] | None:
        if self.choices is None and not self.allow_unset:
            return None
        return [*(self.values() or ()), *([UNSET] if self.allow_unset else [])]

    def suggest(self, trial: optuna.trial.BaseTrial) -> FlagValue | None:
        """Ask the trial for this param's value; None means "unset"."""
        choices = self._as_categorical()
        if choices is not None:
            choice = trial.suggest_categorical(self.name, choices)
            return None if isinstance(choice, str) and choice == UNSET else choice
        assert self.low is not None and self.high is not None
        if self.type == "int":
            step = int(self.step or 1)
            return trial.suggest_int(self.name, int(self.low), int(self.high), step=step,
                                     log=self.log)
        return trial.suggest_float(self.name, float(self.low), float(self.high), step=self.step,
                                   log=self.log)

    def distribution(self) -> Any:
        """The Optuna distribution `suggest` asks with (for `study.add_trial`)."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        choices = self._as_categorical()
        if choices is not None:
            return CategoricalDistribution(choices)
        assert self.low is not None and self.high is not None
        if self.type == "int":
            return IntDistribution(int(self.low), int(self.high), step=int(self.step or 1),
                                   log=self.log)
        return FloatDistribution(float(self.low), float(self.high), step=self.step, log=self.log)

    def to_optuna(self, value: FlagValue | None) -> Any:
        """The Optuna param value that makes `suggest` return `value`."""
        return UNSET if value is None else value
