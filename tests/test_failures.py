"""Failure classification, in-process: what XLA printed or raised, and how a child ended.

The stderr lines are XLA's own, copied from jaxlib 0.10.2 processes started
with those `XLA_FLAGS`; the exceptions are raised by a real in-process
compile. One end-to-end test per kind through a real child is in
test_launcher.py.
"""

from __future__ import annotations

import signal

import pytest

from autotune.ground.records import OutcomeKind
from autotune.rules.failures import (
    classify_exception,
    classify_exit,
    classify_stderr,
    looks_like_oom,
    signal_name,
    size_words,
)

UNKNOWN = ("F1123 10:26:05.528674   11085 parse_flags_from_env.cc:234] Unknown flags in "
           "XLA_FLAGS: --xla_nope=1 --xla_other\n")
ILLEGAL = ("E1123 10:26:06.075992   11095 debug_options_flags.cc:145] Illegal value for "
           "--xla_gpu_enable_command_buffer '0'\n")
UNINTERPRETABLE = ("E1123 10:26:06.749332   11102 command_line_flags.cc:93] Couldn't interpret "
                   "value maybe for flag xla_cpu_enable_fast_math.\n")
LOGS = "W1122 some warning\nI1122 all fine\n"

# --- XLA's flag aborts in stderr --------------------------------------------------------------


def test_an_unknown_flag_names_every_flag_xla_listed():
    assert classify_stderr(LOGS + UNKNOWN) == (
        OutcomeKind.UNKNOWN_FLAG, "XLA does not know: --xla_nope=1 --xla_other")


def test_an_unknown_libtpu_flag_is_unknown_too():
    text = "Unknown flag in LIBTPU_INIT_ARGS: --xla_tpu_nope=true"
    assert classify_stderr(text) == (
        OutcomeKind.UNKNOWN_FLAG, "XLA does not know: --xla_tpu_nope=true")


def test_an_illegal_value_is_invalid_value_not_a_compile_error():
    assert classify_stderr(LOGS + ILLEGAL) == (
        OutcomeKind.INVALID_VALUE, "illegal value '0' for --xla_gpu_enable_command_buffer")


def test_a_value_xla_cannot_interpret_is_invalid_value():
    assert classify_stderr(UNINTERPRETABLE) == (
        OutcomeKind.INVALID_VALUE, "illegal value 'maybe' for --xla_cpu_enable_fast_math")


def test_an_unknown_flag_is_named_before_an_illegal_value():
    assert classify_stderr(ILLEGAL + UNKNOWN)[0] is OutcomeKind.UNKNOWN_FLAG


def test_ordinary_logs_are_no_flag_abort():
    assert classify_stderr(LOGS) is None
    assert classify_stderr("") is None


@pytest.mark.parametrize("line", [
    "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 8.00GiB",
    "terminate called after throwing an instance of 'std::bad_alloc'",
    "MemoryError",
    "Cannot allocate memory",
    "jaxlib.xla_extension.XlaRuntimeError: Out of memory allocating 123 bytes",
])
def test_out_of_memory_lines_are_recognised(line):
    assert looks_like_oom(LOGS + "  " + line + "  \nafter\n") == line


def test_the_oom_line_is_cut_to_300_characters():
    line = "RESOURCE_EXHAUSTED: " + "x" * 400
    assert looks_like_oom(line) == line[:300]


def test_no_oom_line_is_none():
    assert looks_like_oom(LOGS) is None
    assert looks_like_oom("out of memory") is None  # the patterns are XLA's spellings


def test_signal_names():
    assert signal_name(9) == "SIGKILL"
    assert signal_name(11) == "SIGSEGV"
    assert signal_name(999) == "signal 999"


# --- how a child process ended -----------------------------------------------------------------


def test_a_timeout_decides_before_anything_printed():
    assert classify_exit(None, True, UNKNOWN, 600.0) == (
        OutcomeKind.TIMEOUT, "no result within 600 s; the process group was killed")
    assert classify_exit(None, True, "", 2.5)[1].startswith("no result within 2.5 s;")


def test_a_flag_abort_decides_whatever_the_exit_code():
    assert classify_exit(-6, False, UNKNOWN, 60)[0] is OutcomeKind.UNKNOWN_FLAG
    assert classify_exit(1, False, ILLEGAL, 60)[0] is OutcomeKind.INVALID_VALUE
    assert classify_exit(0, False, UNINTERPRETABLE, 60)[0] is OutcomeKind.INVALID_VALUE


def test_an_oom_line_decides_only_when_the_child_failed():
    line = "RESOURCE_EXHAUSTED: Out of memory"
    assert classify_exit(1, False, line, 60) == (OutcomeKind.OOM, f"out of memory: {line}")
    assert classify_exit(-9, False, line, 60) == (OutcomeKind.OOM, f"out of memory: {line}")
    assert classify_exit(0, False, line, 60) is None  # a workload that recovered: its file says


def test_a_signal_is_a_crash_that_names_it():
    assert classify_exit(-signal.SIGSEGV, False, LOGS, 60) == (
        OutcomeKind.CRASHED, "the child was killed by SIGSEGV")
    kind, message = classify_exit(-signal.SIGKILL, False, LOGS, 60)
    assert kind is OutcomeKind.CRASHED
    assert message == ("the child was killed by SIGKILL "
                       "(the kernel's out-of-memory killer sends this too)")


def test_an_ordinary_exit_leaves_the_verdict_to_the_result_file():
    assert classify_exit(0, False, LOGS, 60) is None
    assert classify_exit(1, False, LOGS, 60) is None


# What a trial child printed under RLIMIT_AS, verbatim (CPython 3.11, x86-64 Linux,
# `python -m autotune.child` through the subprocess launcher): at 1 KiB the kernel
# killed the exec with SIGSEGV and stderr stayed empty; at 1 MiB the loader
# exited 127 with this line.
LOADER = ("/work/main/.venv/bin/python: error while loading shared libraries: "
          "libpython3.11.so.1.0: failed to map segment from shared object\n")
KiB, MiB, GiB = 2**10, 2**20, 2**30


def test_a_child_killed_at_exec_under_a_tiny_limit_is_oom_naming_the_limit():
    assert classify_exit(-signal.SIGSEGV, False, "", 60, memory_limit_bytes=KiB) == (
        OutcomeKind.OOM, "the trial memory limit (1 KiB) is too small for the child to start: "
                         "killed by SIGSEGV, nothing printed; raise --trial-memory-limit")
    # the same end without a limit, or under a limit a child starts in, is a crash
    assert classify_exit(-signal.SIGSEGV, False, "", 60)[0] is OutcomeKind.CRASHED
    assert classify_exit(-signal.SIGSEGV, False, "", 60, 16 * GiB)[0] is OutcomeKind.CRASHED


def test_the_loader_failing_to_map_a_library_is_oom_naming_the_limit():
    assert classify_exit(127, False, LOADER, 60, MiB) == (
        OutcomeKind.OOM, f"the trial memory limit (1 MiB) is too small for the child to start: "
                         f"{LOADER.strip()}; raise --trial-memory-limit")
    kind, message = classify_exit(127, False, LOGS + LOADER, 60, 16 * GiB)  # whatever the limit
    assert kind is OutcomeKind.OOM and "(16 GiB) is too small" in message


def test_a_failure_under_a_limit_too_small_to_start_quotes_what_it_printed():
    kind, message = classify_exit(120, False, LOGS + "MemoryError\n", 60, 12 * MiB)
    assert (kind, message.split(": ", 1)[1]) == (
        OutcomeKind.OOM, "MemoryError; raise --trial-memory-limit")
    assert classify_exit(3, False, "I1122 all fine\n", 60, 1000)[1].endswith(
        "(1000 bytes) is too small for the child to start: exit code 3, "
        "last printed: I1122 all fine; raise --trial-memory-limit")


def test_a_child_that_succeeded_under_a_small_limit_is_judged_by_its_result_file():
    assert classify_exit(0, False, "", 60, KiB) is None
    assert classify_exit(0, False, LOADER, 60, KiB) is None


def test_size_words_are_what_a_user_writes():
    assert [size_words(n) for n in (KiB, 3 * MiB, 16 * GiB, 2**40, 1500, 0)] == [
        "1 KiB", "3 MiB", "16 GiB", "1 TiB", "1500 bytes", "0 bytes"]


# --- what a real in-process compile raises ----------------------------------------------------


@pytest.fixture(scope="module")
def lowered():
    jax = pytest.importorskip("jax")
    jnp = jax.numpy
    return jax.jit(lambda x: jnp.tanh(x @ x).sum()).lower(jnp.ones((4, 4)))


def raised(lowered, options):
    with pytest.raises(Exception) as info:  # noqa: B017 - XLA's exception type is private
        lowered.compile(compiler_options=options)
    return info.value


def test_a_compile_option_xla_lacks_is_an_unknown_flag(lowered):
    kind, message = classify_exception(raised(lowered, {"xla_nope": True}))
    assert kind is OutcomeKind.UNKNOWN_FLAG
    assert "No such compile option: 'xla_nope'" in message


@pytest.mark.parametrize(("name", "value"), [
    ("xla_cpu_enable_fast_math", "maybe"),
    ("xla_backend_optimization_level", "high"),
    ("xla_gpu_disable_async_collectives", "nope"),
])
def test_an_option_value_xla_rejects_is_an_invalid_value(lowered, name, value):
    kind, message = classify_exception(raised(lowered, {name: value}))
    assert kind is OutcomeKind.INVALID_VALUE
    assert f"While setting option {name}, '{value}' is not a valid" in message


def test_xlas_option_messages_are_told_apart_by_their_words():
    """The words of the two messages above (jaxlib 0.10.2), without compiling: the
    mutation run selects in-process tests by coverage."""
    unknown = RuntimeError("INVALID_ARGUMENT: No such compile option: 'xla_nope'")
    assert classify_exception(unknown) == (
        OutcomeKind.UNKNOWN_FLAG, "RuntimeError: INVALID_ARGUMENT: No such compile option: "
        "'xla_nope'")
    bad = RuntimeError("INVALID_ARGUMENT: While setting option xla_cpu_enable_fast_math, "
                       "'maybe' is not a valid bool value.")
    assert classify_exception(bad)[0] is OutcomeKind.INVALID_VALUE
    assert classify_exception(RuntimeError("INVALID_ARGUMENT: bad Option"))[0] \
        is OutcomeKind.INVALID_VALUE  # any case
    assert classify_exception(RuntimeError("While setting option x, 'y' is not valid"))[0] \
        is OutcomeKind.COMPILE_ERROR  # an option, but not an INVALID_ARGUMENT


def test_memory_exhaustion_is_oom_by_message_or_by_type():
    assert classify_exception(RuntimeError("RESOURCE_EXHAUSTED: 8GiB"))[0] is OutcomeKind.OOM
    # importing jaxlib under a 24-100 MB --trial-memory-limit (jaxlib 0.10.2)
    loader = ImportError("libjax_common.so: failed to map segment from shared object")
    assert classify_exception(loader) == (
        OutcomeKind.OOM, "ImportError: libjax_common.so: failed to map segment from shared object")
    assert classify_exception(RuntimeError("Out of memory"))[0] is OutcomeKind.OOM
    assert classify_exception(MemoryError())[0] is OutcomeKind.OOM


def test_anything_else_is_a_compile_error_with_the_type_in_the_message():
    assert classify_exception(TypeError("bad shapes")) == (
        OutcomeKind.COMPILE_ERROR, "TypeError: bad shapes")
    # INVALID_ARGUMENT alone is the program's fault, not an option's
    assert classify_exception(ValueError("INVALID_ARGUMENT: dot shapes differ"))[0] \
        is OutcomeKind.COMPILE_ERROR


def test_a_limit_at_the_startup_floor_is_not_blamed_for_a_silent_crash():
    from autotune.rules.failures import STARTUP_FLOOR_BYTES, limit_too_small

    assert limit_too_small(-11, "", STARTUP_FLOOR_BYTES) is None  # enough to start: a real crash
    assert limit_too_small(-11, "", STARTUP_FLOOR_BYTES - 1) is not None
