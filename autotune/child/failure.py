"""A classified failure of the configuration under test: a result, not a fault of the tool."""

from __future__ import annotations

from autotune.rules.failures import classify_exception


class Failure(Exception):
    """The configuration failed; `kind` is a failure-taxonomy value (`OutcomeKind`)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def classified(exc: BaseException) -> Failure:
    """What JAX/XLA raised while compiling or running, as a Failure (`autotune.rules.failures`)."""
    kind, message = classify_exception(exc)
    return Failure(kind.value, message)
