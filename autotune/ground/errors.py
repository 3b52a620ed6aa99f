"""The one exception root of autotune, and the exit code of each fault.

Exceptions are for faults of the tool or of the user's input. A bad flag
configuration is *not* an exception: it is a `TrialOutcome` with a kind.
Every message says what is wrong and what to do next; the CLI prints it on
one line and exits with `exit_code`.
"""

from __future__ import annotations


class AutotuneError(Exception):
    """Root of every error autotune raises on purpose.

    Attributes:
        exit_code: the process exit code the CLI uses for this error.
    """

    exit_code: int = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class UsageError(AutotuneError):
    """The user asked for something that does not exist or does not parse."""

    exit_code = 2


class UnknownSpaceError(UsageError):
    """No search space of that name (or no such file)."""


class UnknownBenchmarkError(UsageError):
    """No benchmark of that name."""


class SpaceValidationError(UsageError):
    """A search space file is malformed; the message names file, key path and line."""


class StorageError(UsageError):
    """The storage URL is malformed or the database cannot be reached or opened."""


class StudyNotFoundError(UsageError):
    """A study name that the storage does not hold."""


class StudyMismatchError(UsageError):
    """Resuming a study with settings that differ from the ones it was created with."""


class WorkloadError(UsageError):
    """A workload file does not follow the contract (no `workload` function, ...)."""


class ExportError(UsageError):
    """An export file cannot be written or read."""


class BaselineFailedError(AutotuneError):
    """The workload fails with XLA's defaults: nothing can be compared against it."""


class UnknownFlagsInSpaceError(UsageError):
    """A space sets flags the installed XLA does not know; the study would waste trials."""


class BackendMismatchError(UsageError):
    """A space for one backend asked for on a machine where JAX reports another."""


class ConfigFileError(ExportError):
    """An exported configuration cannot be loaded (`autotune.load_config`, `autotune apply`).

    The file is missing or unreadable, is neither YAML nor JSON, is not an
    export, holds another export schema version, or sets a flag the catalog
    does not know; the message names the file and the key.
    """


class ConfigRefusedError(UsageError):
    """`autotune apply` refuses a configuration the installed XLA would abort on, or a
    command line it cannot run (no command given); `--force` overrides the former."""


class BackendStartedError(UsageError):
    """Flags set through the environment after JAX started a backend would be ignored."""


class CommandNotFoundError(AutotuneError):
    """`autotune apply ... -- CMD`: CMD is not found or cannot be executed (exit 127,
    as a shell reports it)."""

    exit_code = 127
