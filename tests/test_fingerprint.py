"""Program fingerprints name the compiled program, not where its Python came from."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.child.program import without_source
from autotune.ground.protocol import JOB_ENV, RESULT_ENV, Job, Phase, parse_result

ROOT = Path(__file__).resolve().parents[1]
TOY = ROOT / "tests" / "workloads" / "toy.py"

HLO = b'''HloModule m

ENTRY %main (a: f32[2]) -> f32[2] {
  %a = f32[2]{0} parameter(0), metadata={op_name="jit(f)/x{y}" source_file="/a/b.py" source_line=3}
  ROOT %n = f32[2]{0} negate(%a), metadata={op_name="neg \\"q\\"" stack_frame_id=2}
}

FileNames
1 "/a/b.py"

StackFrames
1 1 2
'''


def test_the_source_metadata_is_left_out_and_the_program_kept():
    bare = without_source(HLO)
    assert b"metadata" not in bare and b"/a/b.py" not in bare and b"StackFrames" not in bare
    assert b"%a = f32[2]{0} parameter(0)\n" in bare
    assert b"ROOT %n = f32[2]{0} negate(%a)\n}" in bare
    moved = HLO.replace(b"/a/b.py", b"/elsewhere/c.py").replace(b"source_line=3",
                                                                b"source_line=40")
    assert without_source(moved) == bare
    other = HLO.replace(b"negate(%a)", b"abs(%a)")
    assert without_source(other) != bare
    assert without_source(b"HloModule m\n") == b"HloModule m\n"


def _fingerprint(workload: Path, tmp_path: Path, options: dict) -> str:
    env = {k: v for k, v in os.environ.items() if k != RESULT_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    tmp_path.mkdir(parents=True, exist_ok=True)
    env[JOB_ENV] = Job(phases=(Phase.COMPILE,), compiler_options=options,
                       artifact_dir=str(tmp_path / "dump")).to_json()
    done = subprocess.run([sys.executable, "-m", "autotune.child", str(workload), "--preset",
                           "tiny"], env=env, capture_output=True, text=True, timeout=300,
                          check=True, cwd=tmp_path)
    result = parse_result(done.stdout)
    assert result.status == "ok" and result.fingerprint, json.dumps(result.message)
    return result.fingerprint


@pytest.mark.slow
def test_one_program_traced_from_two_paths_has_one_fingerprint(tmp_path):
    """The same workload file at another path, with lines added above its step, compiles to
    the same program: one fingerprint. Another program gets another."""
    moved = tmp_path / "elsewhere" / "moved_toy.py"
    moved.parent.mkdir()
    shutil.copy(TOY, moved)
    moved.write_text("# a comment that moves every line down\n\n" + moved.read_text())
    here = _fingerprint(TOY, tmp_path / "a", {})
    there = _fingerprint(moved, tmp_path / "b", {})
    assert here == there
    level0 = _fingerprint(TOY, tmp_path / "c", {"xla_backend_optimization_level": 0})
    assert level0 != here
    # on the CPU, XLA dumps its generated kernels' object code, which the hash includes
    assert list((tmp_path / "a" / "dump").rglob("*.o"))


def test_the_generated_object_code_is_part_of_the_fingerprint(tmp_path):
    """Two dumps with the same HLO but other object code are two programs; the module
    number in the file names is not part of the program."""
    from autotune.child.program import program_fingerprint

    def dump(name: str, module: str, code: bytes) -> str:
        folder = tmp_path / name
        folder.mkdir()
        (folder / f"module_{module}.jit_f.cpu_after_optimizations.txt").write_bytes(HLO)
        (folder / f"module_{module}.jit_f.obj-file.fusion_kernel_module.o").write_bytes(code)
        (folder / f"module_{module}.jit_f.debug_options").write_bytes(module.encode())
        return str(folder)

    first = program_fingerprint(dump("a", "0004", b"\x7fELF one"))
    assert first == program_fingerprint(dump("b", "0010", b"\x7fELF one"))
    assert first != program_fingerprint(dump("c", "0004", b"\x7fELF two"))
