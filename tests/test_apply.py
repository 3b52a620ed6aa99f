"""`autotune apply` and `autotune.load_config`: an exported configuration on a real command.

The export files are fixtures written by hand in the shape of export schema
version 2 (the exporter itself is tested in `test_cli`). The flag check asks
the installed XLA (one probe per test session, cached); the commands run are
real processes, never mocks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_runner import invoke

import autotune
from autotune.ground.errors import BackendStartedError, ConfigFileError
from autotune.results.export import EXPORT_SCHEMA_VERSION

FAST_MATH = "xla_cpu_enable_fast_math"
# The command line of `autotune` in a fresh interpreter of this checkout.
AUTOTUNE = [sys.executable, "-c",
            "import sys; from autotune.cli import main; sys.argv[0] = 'autotune'; main()"]
# A value no shell may interpret: quotes, expansions, separators, a newline, a tab.
HOSTILE_VALUE = "it's \"x\" $(touch pwned1) `touch pwned2`; touch pwned3 & | > <\n\t$HOME \\"


def export_fixture(folder: Path, flags: dict[str, Any] | None = None, name: str = "best.yaml",
                   **changes: Any) -> Path:
    """Write an export document of this machine's facts, v2 shape, with `changes` applied."""
    measured_on = {"backend": "cpu", "device_kind": "cpu", "device_count": 1,
                   "jax": version("jax"), "jaxlib": version("jaxlib"), "host": "h",
                   "benchmark": "matmul", "preset": "tiny", "space": "cpu",
                   "space_backend": "cpu"} | changes.pop("measured_on", {})
    flags = {FAST_MATH: True} if flags is None else flags
    document = {"schema_version": EXPORT_SCHEMA_VERSION, "study": "cpu-matmul-tiny",
                "recommended": True, "reason": "confirmed faster than XLA's defaults",
                "trial": 3, "flags": flags, "env": {}, "xla_flags": "",
                "measured_on": measured_on, "measured": {"speedup": 1.2}} | changes
    path = folder / name
    path.write_text(yaml.safe_dump({k: v for k, v in document.items() if v is not ...}),
                    encoding="utf-8")
    return path


@pytest.fixture
def no_user_flags(monkeypatch):
    for variable in ("XLA_FLAGS", "LIBTPU_INIT_ARGS", "TF_CPP_VMODULE", "TF_CPP_MIN_LOG_LEVEL"):
        monkeypatch.delenv(variable, raising=False)


# --- 1. the command runs with the configuration, merged with the user's flags ----------------

SHOW_ENV_AND_EXIT_3 = ("import os, sys; print(os.environ['XLA_FLAGS']); "
                       "print(os.environ['TF_CPP_MIN_LOG_LEVEL']); sys.exit(3)")


@pytest.mark.slow
def test_the_command_sees_the_merged_flags_and_its_exit_code_is_apply_s(tmp_path):
    config = export_fixture(tmp_path, {FAST_MATH: True, "TF_CPP_MIN_LOG_LEVEL": 1})
    env = dict(os.environ, XLA_FLAGS=f"--xla_backend_optimization_level=2 --{FAST_MATH}=false")

    done = subprocess.run(
        [*AUTOTUNE, "apply", str(config), "--", sys.executable, "-c", SHOW_ENV_AND_EXIT_3],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)

    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == [
        f"--xla_backend_optimization_level=2 --{FAST_MATH}=true", "1"]
    assert done.stderr.splitlines() == [
        f"warning: your XLA_FLAGS sets --{FAST_MATH}=false; the configuration's "
        f"--{FAST_MATH}=true wins"]


@pytest.mark.slow
def test_a_command_killed_by_a_signal_ends_apply_the_same_way(tmp_path, no_user_flags):
    config = export_fixture(tmp_path)
    kill_self = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"

    done = subprocess.run([*AUTOTUNE, "apply", str(config), "--", sys.executable, "-c",
                           kill_self], cwd=tmp_path, capture_output=True, timeout=300)

    assert done.returncode == -15  # the job's own death: apply was replaced by it


# --- 2. --print: lines a shell sources, byte for byte ------------------------------------------


def test_print_gives_lines_a_shell_sources_exactly_and_runs_nothing(tmp_path, no_user_flags):
    config = export_fixture(tmp_path, {FAST_MATH: True, "TF_CPP_VMODULE": HOSTILE_VALUE})

    result = invoke("apply", str(config), "--print", cwd=tmp_path)

    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    (tmp_path / "env.sh").write_text(result.stdout, encoding="utf-8")
    shown = subprocess.run(
        ["sh", "-c", '. ./env.sh; printf %s "$TF_CPP_VMODULE"; printf "|%s" "$XLA_FLAGS"'],
        cwd=tmp_path, capture_output=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == f"{HOSTILE_VALUE}|--{FAST_MATH}=true".encode()
    assert not list(tmp_path.glob("pwned*"))


def test_print_keeps_the_user_s_own_flags_and_lists_the_conflicts(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", f"--{FAST_MATH}=false --xla_backend_optimization_level=2")
    config = export_fixture(tmp_path)

    result = invoke("apply", str(config), "--print", cwd=tmp_path)

    assert result.exit_code == 0, result.output
    assert result.stdout == (f"export XLA_FLAGS='--xla_backend_optimization_level=2 "
                             f"--{FAST_MATH}=true'\n")
    assert result.stderr == (f"warning: your XLA_FLAGS sets --{FAST_MATH}=false; the "
                             f"configuration's --{FAST_MATH}=true wins\n")


def test_xla_s_defaults_print_nothing_to_set(tmp_path, no_user_flags):
    config = export_fixture(tmp_path, {}, trial=None, recommended=False)

    result = invoke("apply", str(config), "--print", cwd=tmp_path)

    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("# autotune apply: nothing to set")


def test_another_machine_is_one_warning_line_per_difference(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    config = export_fixture(tmp_path, measured_on={"device_count": 8, "jax": "0.0.1"})

    result = invoke("apply", str(config), "--print", cwd=tmp_path)

    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "warning: measured with device count 8, this machine has 2: the measured speedup "
        "may not hold here (a CPU's devices are what XLA_FLAGS gives the job: "
        "--xla_force_host_platform_device_count=8 as the study had)",
        f"warning: measured with jax 0.0.1, this machine has {version('jax')}: the measured "
        "speedup may not hold here"]


# --- 3. what apply refuses: one line, exit 2, nothing run ------------------------------------


def _write(folder: Path, text: str) -> Path:
    path = folder / "best.yaml"
    path.write_text(text, encoding="utf-8")
    return path


#: 417 bytes that stand for 9**9 values once the aliases are expanded ("billion laughs").
BOMB = "a: &a [" + ",".join(["x"] * 9) + "]\n" + "".join(
    f"{n}: &{n} [" + ",".join([f"*{p}"] * 9) + "]\n"
    for p, n in zip("abcdefgh", "bcdefghi", strict=True))

BAD_INPUTS = {
    "missing file": (lambda d: d / "nope.yaml", ["nope.yaml: no such file"]),
    "folder": (lambda d: d, ["is a folder, not an export file"]),
    "not YAML": (lambda d: _write(d, "flags: [unclosed\n"), ["best.yaml:2: neither YAML nor JSON"]),
    "a list": (lambda d: _write(d, "- a\n- b\n"),
               ["is not an autotune export: it holds a list"]),
    "a space file": (lambda d: _write(d, "schema_version: 1\nname: x\nbackend: cpu\n"),
                     ["is not an autotune export: it has no 'study' or 'flags' key"]),
    "older schema": (lambda d: export_fixture(d, schema_version=1),
                     ["is an export of schema version 1 (an older autotune wrote it); this "
                      f"autotune reads version {EXPORT_SCHEMA_VERSION}: re-export it",
                      "autotune export cpu-matmul-tiny -o best.yaml"]),
    "newer schema": (lambda d: export_fixture(d, schema_version=99),
                     ["schema version 99 (a newer autotune wrote it)"]),
    "missing key": (lambda d: export_fixture(d, recommended=...),
                    ["best.yaml: missing key recommended; the file does not follow export schema"]),
    # spelled like an XLA flag: outside the catalog, so the installed XLA is asked, and
    # refuses it with the words every path uses (`lint.xla_refusals`)
    "unknown flag": (lambda d: export_fixture(d, {"xla_cpu_enable_fast_maths": True}),
                     ["this XLA does not know --xla_cpu_enable_fast_maths: a job with it "
                      "aborts at start; did you mean --xla_cpu_enable_fast_math?"]),
    "not a flag": (lambda d: export_fixture(d, {"cpu_enable_fast_math": True}),
                   ["flags.cpu_enable_fast_math: neither in autotune's flag catalog nor "
                    "spelled like an XLA flag (xla_...) (did you mean xla_cpu_enable_fast_math?)"]),
    "alias bomb": (lambda d: _write(d, BOMB),
                   ["neither YAML nor JSON (the YAML stands for more than 100000 values once "
                    "its aliases (*name) are expanded"]),
    "bad value": (lambda d: export_fixture(d, {FAST_MATH: "maybe"}),
                  [f"flags.{FAST_MATH}: {FAST_MATH} expects true or false, got 'maybe'"]),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_a_file_that_is_not_a_usable_export_exits_2_naming_the_problem(tmp_path, case):
    make, words = BAD_INPUTS[case]
    path = make(tmp_path)

    result = invoke("apply", str(path), "--", "true", cwd=tmp_path)

    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(f"error: {path}")
    assert all(w in result.stderr for w in words), result.stderr
    assert result.stderr.count("\n") == 1 and result.stdout == ""
    with pytest.raises(ConfigFileError):  # the Python API says the same
        autotune.load_config(path)


@pytest.mark.parametrize(
    ("flags", "measured_on", "user_flags", "words"),
    [
        ({FAST_MATH: True}, {"backend": "gpu", "device_kind": "NVIDIA H100"}, "",
         "best.yaml was measured on gpu, but JAX reports cpu here"),
        ({FAST_MATH: True}, {"space": "gpu-collectives", "space_backend": "gpu"}, "",
         "best.yaml was made for gpu (space gpu-collectives), but JAX reports cpu here"),
        ({"xla_gpu_enable_pipelined_collectives": True}, {}, "",
         "best.yaml cannot run as it is on this XLA (jaxlib {jaxlib}): "
         "--xla_gpu_enable_pipelined_collectives is obsolete"),
        ({FAST_MATH: True}, {}, "--NCCL_PROTO=SIMPLE",
         "--NCCL_PROTO is an environment variable, not an XLA_FLAGS flag"),
    ],
    ids=["measured-on-gpu", "space-for-gpu", "obsolete-flag", "wrong-channel-user-flag"],
)
def test_a_configuration_this_machine_cannot_run_exits_2_unless_forced(
    tmp_path, monkeypatch, flags, measured_on, user_flags, words
):
    monkeypatch.setenv("XLA_FLAGS", user_flags)
    config = export_fixture(tmp_path, flags, measured_on=measured_on)

    refused = invoke("apply", str(config), "--", "true", cwd=tmp_path)
    forced = invoke("apply", str(config), "--print", "--force", cwd=tmp_path)

    assert refused.exit_code == 2, refused.output
    assert refused.stderr.startswith("error: ") and refused.stderr.count("\n") == 1
    assert words.format(jaxlib=version("jaxlib")) in refused.stderr
    assert "pass --force to run it anyway" in refused.stderr
    assert forced.exit_code == 0, forced.output
    assert "warning: --force: running anyway although" in forced.stderr
    assert forced.stdout.startswith("export XLA_FLAGS=")


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        ((), 2, "error: no command to run: write it after --, e.g. autotune apply "),
        (("--print", "--", "true"), 2, "error: give either --print or a command to run"),
        (("--", "autotune-no-such-command", "x"), 127,
         "error: command 'autotune-no-such-command' is not found on PATH"),
        (("--", "./missing.sh"), 127, "error: command './missing.sh' does not exist"),
    ],
)
def test_a_command_line_apply_cannot_run_is_one_clear_line(tmp_path, no_user_flags, args, code,
                                                           words):
    config = export_fixture(tmp_path)

    result = invoke("apply", str(config), *args, cwd=tmp_path)

    assert result.exit_code == code, result.output
    assert result.stderr.startswith(words) and result.stderr.count("\n") == 1, result.stderr
    # a failed exec leaves this process as it was: SIGPIPE still ignored, so a later write
    # to a closed socket raises BrokenPipeError instead of killing it (the test runner)
    import signal
    assert signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN


def test_your_own_malformed_xla_flags_are_named_as_yours(tmp_path, monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "xla_no_dashes=1")
    config = export_fixture(tmp_path)

    result = invoke("apply", str(config), "--print", cwd=tmp_path)

    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: your own XLA_FLAGS or LIBTPU_INIT_ARGS cannot be "
                                    f"merged with {config}: flag string token 'xla_no_dashes=1'")
    assert result.stdout == ""


# --- 4. the Python API ----------------------------------------------------------------------


def test_load_config_reads_what_apply_needs(tmp_path):
    config = autotune.load_config(export_fixture(tmp_path, {FAST_MATH: True}, trial=7))

    assert (config.study, config.trial, config.recommended) == ("cpu-matmul-tiny", 7, True)
    assert config.flags == {FAST_MATH: True}
    assert config.measured_on.backend == "cpu" and config.measured_on.device_count == 1


def test_a_json_export_loads_like_a_yaml_one(tmp_path):
    import json

    path = export_fixture(tmp_path)
    as_json = tmp_path / "best.json"
    as_json.write_text(json.dumps(yaml.safe_load(path.read_text())), encoding="utf-8")

    assert autotune.load_config(as_json).flags == autotune.load_config(path).flags


def test_environ_merges_with_the_base_and_conflicts_name_both_values(tmp_path):
    config = autotune.load_config(export_fixture(
        tmp_path, {FAST_MATH: True, "TF_CPP_MIN_LOG_LEVEL": 1}))
    base = {"XLA_FLAGS": f"--{FAST_MATH} --xla_backend_optimization_level=2",
            "TF_CPP_MIN_LOG_LEVEL": "3", "HOME": "/h"}

    assert config.environ(base) == {
        "XLA_FLAGS": f"--xla_backend_optimization_level=2 --{FAST_MATH}=true",
        "TF_CPP_MIN_LOG_LEVEL": "1"}
    # a bare --flag is true: the same value as the configuration's, no conflict
    assert [(c.name, c.variable, c.user_value, c.config_value)
            for c in config.conflicts(base)] == [
        ("TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MIN_LOG_LEVEL", "3", "1")]
    assert config.environ({}) == {"XLA_FLAGS": f"--{FAST_MATH}=true",
                                  "TF_CPP_MIN_LOG_LEVEL": "1"}


def test_compiler_options_hold_the_per_compile_flags_and_env_only_the_rest(tmp_path):
    config = autotune.load_config(export_fixture(
        tmp_path, {FAST_MATH: True, "xla_gpu_enable_cudnn_fmha": False,
                   "TF_CPP_MIN_LOG_LEVEL": 0}, measured_on={}))

    assert config.compiler_options() == {FAST_MATH: True}
    assert config.env_only() == {"xla_gpu_enable_cudnn_fmha": False, "TF_CPP_MIN_LOG_LEVEL": 0}


APPLY_IN_A_JAX_PROGRAM = """
import os, sys
import jax
if sys.argv[2] == "started":
    jax.devices()
import autotune
from autotune.ground.errors import BackendStartedError
try:
    autotune.load_config(sys.argv[1]).apply()
except BackendStartedError as exc:
    print("refused", exc.exit_code, exc)
else:
    print("set", os.environ["XLA_FLAGS"], os.environ["TF_CPP_MIN_LOG_LEVEL"])
"""


@pytest.mark.slow
@pytest.mark.parametrize("jax_state", ["started", "imported"])
def test_apply_in_a_jax_program_works_until_jax_starts_a_backend(tmp_path, jax_state):
    config = export_fixture(tmp_path, {FAST_MATH: True, "TF_CPP_MIN_LOG_LEVEL": 1})
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "TF_CPP_MIN_LOG_LEVEL")}

    done = subprocess.run([sys.executable, "-c", APPLY_IN_A_JAX_PROGRAM, str(config), jax_state],
                          env=env | {"JAX_PLATFORMS": "cpu"}, capture_output=True, text=True,
                          timeout=300)

    assert done.returncode == 0, done.stderr
    if jax_state == "started":
        assert done.stdout.startswith(f"refused {BackendStartedError.exit_code} JAX has "
                                      "already started its backend in this process")
    else:
        assert done.stdout == f"set --{FAST_MATH}=true 1\n"


def test_jax_backend_started_is_false_without_jax_and_imports_nothing():
    code = ("import sys, autotune.api.config as c; print(c.jax_backend_started(), "
            "'jax' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.split() == ["False", "False"], done.stderr
