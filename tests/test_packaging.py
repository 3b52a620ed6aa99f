"""A non-editable install carries the spaces, benchmarks and migrations; imports stay light."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """`pip install --no-deps .` (a real wheel build) into a fresh target folder."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile",
         "--target", str(target), str(ROOT)],
        check=True, timeout=300,
    )
    return target


def run_installed(target: Path, cwd: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=120)


@pytest.mark.slow
def test_wheel_carries_spaces_benchmarks_and_migrations(installed, tmp_path):
    code = (
        "import json, autotune\n"
        "from autotune.ground.resources import data_dir\n"
        "from autotune.spaces import list_spaces\n"
        "from autotune.launch.workloads import list_benchmarks\n"
        "from autotune.storage import Store\n"
        "s = Store.open('sqlite:///x.db')\n"
        "print(json.dumps({'pkg': autotune.__file__, 'spaces': list_spaces(),\n"
        "  'benchmarks': [b.name for b in list_benchmarks()],\n"
        "  'alembic': str(data_dir('alembic')), 'rev': s.current_revision()}))\n"
    )
    done = run_installed(installed, tmp_path, code)
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    assert facts["pkg"].startswith(str(installed))
    assert facts["alembic"].startswith(str(installed))
    assert {"cpu", "gpu-collectives"} <= set(facts["spaces"])
    assert {"matmul", "transformer"} <= set(facts["benchmarks"])
    assert facts["rev"] is not None
    shipped = installed / "autotune" / "_data" / "benchmarks"
    assert (shipped / "examples" / "my_step.py").is_file()
    assert not (shipped / "scripts").exists() and not (shipped / "tables").exists()


def test_every_workload_is_in_the_wheel_and_no_script_or_table_is():
    """force-include names each workload (it ignores excludes): a new one must be added."""
    import tomllib

    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"][
        "targets"]["wheel"]["force-include"]
    workloads = {f"benchmarks/{p.name}" for p in (ROOT / "benchmarks").glob("*.py")}
    assert workloads | {"benchmarks/examples"} <= set(wheel)
    assert not [source for source in wheel if "scripts" in source or "tables" in source]


@pytest.mark.slow
def test_installed_cli_lists_spaces_from_any_directory(installed, tmp_path):
    done = run_installed(installed, tmp_path,
                         "import sys; sys.argv = ['autotune', 'spaces', 'list']\n"
                         "from autotune.cli import main; main()")
    assert done.returncode == 0, done.stderr
    assert "gpu-collectives" in done.stdout


@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        ("autotune.cli", {"jax", "jaxlib", "starlette", "uvicorn", "jinja2", "matplotlib",
                          "plotly"}),
        ("autotune.dashboard.app", {"jax", "optuna", "typer", "matplotlib"}),
        ("autotune.dashboard.report",
         {"jax", "optuna", "typer", "starlette", "uvicorn", "matplotlib"}),
        ("autotune.results.view", {"jax", "optuna", "sqlalchemy", "starlette", "jinja2"}),
        ("autotune.study", {"jax", "jaxlib"}),
        ("autotune.study.samplers", {"jax", "optuna", "sqlalchemy"}),
        ("autotune.launch.replay", {"jax", "optuna", "sqlalchemy"}),
        ("autotune.results.importance", {"jax", "optuna"}),
        ("autotune.bench", {"jax", "numpy", "optuna", "sqlalchemy", "typer"}),
        ("autotune.child.run", {"jax", "numpy", "optuna", "sqlalchemy", "typer"}),
        ("autotune.ground.protocol", {"jax", "numpy", "optuna", "sqlalchemy", "typer", "yaml"}),
        ("autotune.launch.launcher", {"jax", "optuna", "sqlalchemy"}),
        ("autotune", {"jax", "optuna", "sqlalchemy", "typer", "yaml"}),
    ],
)
def test_heavy_modules_stay_off_the_import_path(module, forbidden):
    names = sorted(forbidden)
    code = f"import sys, {module}; print(sorted(m for m in {names!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """`lint-imports` with the contracts of pyproject.toml, on the package found in `root`."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(Path(sys.executable).with_name("lint-imports")),
                           "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          capture_output=True, text=True, timeout=120, cwd=root, env=env)


def test_every_import_keeps_the_layer_contracts():
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("results/notes.py", "from autotune.storage import store", "The read model works"),
    ("ground/records.py", "from autotune.study import plan", "Every import points down"),
    ("study/plan.py", "from autotune.study import runner", "No import cycle"),
    ("study/search.py", "import jax", "The parent never imports jax"),
])
def test_an_import_against_the_layers_breaks_a_contract(tmp_path, module, line, contract):
    """The contracts bite: one import that runs up, sideways into storage or in a circle,
    inside a function as at the top, fails `lint-imports` and names the contract."""
    shutil.copytree(ROOT / "autotune", tmp_path / "autotune",
                    ignore=shutil.ignore_patterns("__pycache__", "_data"))
    target = tmp_path / "autotune" / module
    target.write_text(target.read_text() + f"\n\ndef _up() -> None:\n    {line}  # noqa\n")
    done = lint_imports(tmp_path)
    assert done.returncode != 0
    broken = [row for row in done.stdout.splitlines() if "BROKEN" in row]
    assert broken and broken[0].startswith(contract), done.stdout


def test_only_the_dashboard_imports_the_web_framework():
    """Starlette and uvicorn belong to `autotune.dashboard.app` (and the command that starts
    it); jinja2 to the dashboard's templates, which the report reuses."""
    allowed = {"starlette": {"dashboard/app.py"}, "uvicorn": {"cli/dashboard.py"},
               "jinja2": {"dashboard/render.py"}}
    for path in (ROOT / "autotune").rglob("*.py"):
        text = path.read_text()
        rel = path.relative_to(ROOT / "autotune").as_posix()
        for library, owners in allowed.items():
            if f"import {library}" in text or f"from {library}" in text:
                assert rel in owners, f"{rel} imports {library}"


def test_the_mutation_testing_configuration_names_files_that_exist():
    """A module moved without updating `[tool.mutmut]` would silently drop out of the run."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
    assert config["source_paths"] == ["autotune"]
    for path in config["only_mutate"]:
        assert (ROOT / path).is_file(), f"[tool.mutmut] only_mutate names {path}, which is gone"
    selected = [a for a in config["pytest_add_cli_args_test_selection"] if a.startswith("tests/")]
    assert selected, "no test files selected for mutation testing"
    for path in selected:
        text = (ROOT / path).read_text()
        assert "SubprocessLauncher" not in text and "CliRunner" not in text, (
            f"{path} drives trial children, whose code mutmut cannot see: keep it out")
    for folder in config["also_copy"]:
        assert (ROOT / folder).is_dir()
    modules = {p.removesuffix(".py").replace("/", ".") for p in config["only_mutate"]}
    for line in (ROOT / "mutmut-equivalent.txt").read_text().splitlines():
        name = line.split("#")[0].strip()
        if name:
            assert "  # " in line, f"equivalent mutant {name} needs a reason after '  # '"
            assert any(name.startswith(m + ".x") for m in modules), f"{name}: not a mutated module"


def _requires(installed: Path) -> tuple[str, list[str]]:
    """(the distribution's name, its Requires-Dist lines) from the installed metadata."""
    [info] = installed.glob("*.dist-info")
    lines = (info / "METADATA").read_text().splitlines()
    name = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("Name:"))
    return name, [line.split(":", 1)[1].strip() for line in lines
                  if line.startswith("Requires-Dist:")]


@pytest.mark.slow
def test_the_core_install_has_no_dashboard_library_and_the_extra_has_them(installed):
    """The index's `autotune` is another project: this one installs as xla-autotune, and a
    training script that only calls `load_config` does not pay for plotly, matplotlib or
    Pillow (issue 32)."""
    import re

    name, requires = _requires(installed)
    assert name == "xla-autotune"

    def project(line: str) -> str:
        return re.split(r"[\s\[<>=!~;]", line, maxsplit=1)[0].lower()

    core = {project(r) for r in requires if "extra ==" not in r}
    dashboard = {project(r) for r in requires if re.search(r"extra == .dashboard.", r)}
    assert {"optuna", "sqlalchemy", "typer", "jax"} <= core
    assert not core & {"plotly", "matplotlib", "pillow", "starlette", "uvicorn", "jinja2"}
    assert {"plotly", "matplotlib", "starlette", "uvicorn", "jinja2"} <= dashboard


def test_version_names_the_version_and_the_distribution(tmp_path):
    from cli_runner import invoke

    from autotune import __version__

    done = invoke("--version", cwd=tmp_path)
    assert done.exit_code == 0
    assert done.stdout.strip() == f"autotune {__version__} (xla-autotune)"


@pytest.mark.parametrize(("args", "missing"), [
    (["dashboard"], "plotly"), (["report", "s"], "jinja2"), (["report", "s"], "matplotlib"),
    (["report", "s", "--format", "md"], "matplotlib")])
def test_a_command_of_the_dashboard_extra_without_it_names_the_extra(
        args, missing, tmp_path, monkeypatch):
    import importlib.util

    from cli_runner import invoke

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *rest: None if name == missing else found(name, *rest))
    done = invoke(*args, cwd=tmp_path)
    assert done.exit_code == 2
    assert f"needs the dashboard extra ({missing} not installed)" in done.output
    assert "pip install 'xla-autotune[dashboard]'" in done.output
    assert not (tmp_path / "autotune.db").exists()  # refused before anything was opened


@pytest.mark.slow
def test_the_installed_package_says_it_is_typed(installed):
    """`py.typed` ships, so a type checker reads autotune's annotations (issue 32)."""
    assert (installed / "autotune" / "py.typed").is_file()


def test_no_upper_caps_and_ci_tests_the_lower_bounds():
    """Issue 32: autotune lives in the training environment, so an upper cap blocks the
    user's upgrades; the lower bounds of jax, jaxlib, optuna and sqlalchemy are what
    `.ci/run` installs (scripts/oldest.txt) for the fast tests, so they cannot drift."""
    import re
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    shipped = project["dependencies"] + [
        d for extra in ("dashboard", "postgres") for d in project["optional-dependencies"][extra]]
    assert [d for d in shipped if "<" in d] == []
    lower = {m.group(1): m.group(2) for d in project["dependencies"]
             if (m := re.fullmatch(r"([a-z]+)>=([\d.]+)", d))}
    pinned = dict(line.split("==") for line in
                  (ROOT / "scripts/oldest.txt").read_text(encoding="utf-8").splitlines()
                  if line and not line.startswith("#"))
    assert set(pinned) == {"jax", "jaxlib", "optuna", "sqlalchemy"}
    assert all(lower[name] == version for name, version in pinned.items()), (lower, pinned)
    assert "-c scripts/oldest.txt" in (ROOT / ".ci/run").read_text(encoding="utf-8")
