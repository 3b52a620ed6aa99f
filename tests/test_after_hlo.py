"""Flags that act after the optimised HLO are part of a program's identity.

Seen on an H200 (`benchmarks/scripts/gpu_check.sh`): every value of
`xla_gpu_enable_command_buffer` compiled to one optimised HLO, so configurations
that differed only there had one fingerprint, yet CUDA graphs off ran the
attention step about 1.3x slower (`benchmarks/tables/attention-small-gpu.json.gz`).
The study's fit then dropped the flag as having "no effect on the compiled
program". The CPU compiler ignores GPU flags, so on this machine a command-buffer
value changes nothing either: exactly the case of a flag the dump does not show.

The text itself is tested in test_flags.py, the job's fields in test_protocol.py (the
files mutation testing runs).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_runner import invoke

from autotune.child.program import program_fingerprint
from autotune.ground.records import Role
from autotune.storage import Store

CMD = "xla_gpu_enable_command_buffer"


def test_the_after_hlo_text_separates_programs_of_one_dump(tmp_path: Path):
    (tmp_path / "module_0001.jit_f.gpu_after_optimizations.txt").write_text("HloModule f\n")
    plain = program_fingerprint(str(tmp_path))
    assert plain is not None and program_fingerprint(str(tmp_path), "") == plain
    off = program_fingerprint(str(tmp_path), f"--{CMD}=")
    assert off not in (None, plain)
    assert off == program_fingerprint(str(tmp_path), f"--{CMD}=")
    assert off != program_fingerprint(str(tmp_path), f"--{CMD}=FUSION")
    # no dump, no fingerprint, whatever the flags
    assert program_fingerprint(str(tmp_path / "absent"), f"--{CMD}=") is None


SPACE = f"""\
schema_version: 1
name: after-hlo
backend: gpu
params:
  {CMD}:
    type: categorical
    choices: ["", FUSION]
    allow_unset: true
  xla_gpu_enable_triton_gemm:
    type: bool
groups: {{}}
conditions: []
fixed: {{}}
recommended: {{}}
"""


@pytest.mark.slow
def test_the_fit_keeps_a_flag_that_acts_after_the_hlo(tmp_path: Path):
    """Both flags leave the CPU's HLO as it is: the fit drops the one whose effect the
    HLO would show, and keeps the one it cannot see, whose programs stay apart."""
    (tmp_path / "space.yaml").write_text(SPACE)
    result = invoke("study", "--space", "space.yaml", "--benchmark", "matmul",
                    "--preset", "tiny", "--devices", "1", "--steps", "5", "--warmup", "1",
                    "--trials", "3", "--confirm", "0", "--allow-backend-mismatch",
                    "--name", "s", cwd=tmp_path)
    assert result.exit_code == 0, result.output
    assert "dropped xla_gpu_enable_triton_gemm: no effect" in result.output
    assert f"dropped {CMD}" not in result.output
    runs = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}").runs("s")
    programs: dict[str, set[str | None]] = {}
    for run in runs:
        value = run.flags.get(CMD, "unset")
        programs.setdefault(value, set()).add(run.outcome.measurement.fingerprint)
        if run.role is Role.SEARCH:
            assert run.outcome.measurement.same_program_as_baseline is (value == "unset")
    # one program per command-buffer value, each its own, though the HLO is the same
    assert programs.keys() >= {"unset", ""} and all(len(p) == 1 for p in programs.values())
    assert len(set().union(*programs.values())) == len(programs)
