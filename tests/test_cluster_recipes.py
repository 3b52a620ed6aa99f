"""The cluster recipes in docs/cluster/: what Slurm and Kubernetes would read, and the
worker command itself, run here as the sbatch script runs it.

The slow test needs `autotune worker`; until that command exists it fails with
"No such command 'worker'".
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "docs" / "cluster"
SBATCH = CLUSTER / "slurm-workers.sbatch"
K8S = CLUSTER / "k8s-workers.yaml"
WORKER = "autotune worker --study"


# --- the Slurm array script -------------------------------------------------------------


def sbatch_directives(text: str) -> dict[str, str]:
    """The `#SBATCH` options of a script as Slurm reads them: long options only, up to
    the first line that is neither blank nor a comment (Slurm stops reading there)."""
    options: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        if not stripped.startswith("#SBATCH"):
            continue
        (option, *rest) = shlex.split(stripped[len("#SBATCH"):], comments=True)
        name, _, value = option.partition("=")
        assert name.startswith("--"), f"use long options in the recipe: {line!r}"
        options[name[2:]] = value or (rest[0] if rest else "")
    return options


def array_indices(spec: str) -> list[int]:
    """The task ids of `--array` (`0-7`, `1,3,5`, `0-15:2`, `0-31%4`)."""
    spec = spec.split("%", 1)[0]
    indices: list[int] = []
    for part in spec.split(","):
        span, _, step = part.partition(":")
        first, _, last = span.partition("-")
        indices.extend(range(int(first), int(last or first) + 1, int(step or 1)))
    return indices


def worker_line(text: str) -> str:
    """The one line of the script that runs `autotune worker` (comments left out)."""
    lines = [line.strip() for line in text.splitlines()
             if WORKER in line and not line.lstrip().startswith("#")]
    assert len(lines) == 1, f"expected one line running `{WORKER}`, found {lines}"
    return lines[0]


def test_array_parsing() -> None:
    assert array_indices("0-7") == list(range(8))
    assert array_indices("1,3,5-6") == [1, 3, 5, 6]
    assert array_indices("0-15:4%2") == [0, 4, 8, 12]


def test_sbatch_directives_start_several_gpu_workers() -> None:
    text = SBATCH.read_text()
    options = sbatch_directives(text)
    assert len(array_indices(options["array"])) >= 2, options
    assert re.fullmatch(r"gpu(:[\w.-]+)?:[1-9]\d*", options["gres"]), options
    assert re.fullmatch(r"(\d+-)?\d+(:\d+){0,2}", options["time"]), options
    assert "%a" in options["output"]  # one file per array task
    # Every directive is where Slurm looks: a `#SBATCH` after the first command is ignored.
    directives = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert len(directives) == len(sbatch_directives(text))


def test_sbatch_runs_one_worker_until_the_study_is_done() -> None:
    text = SBATCH.read_text()
    argv = shlex.split(worker_line(text))
    start = argv.index("autotune")
    assert argv[start:start + 2] == ["autotune", "worker"]
    assert argv[:start] in ([], ["exec"]), argv  # runs without Slurm (no srun) too
    worker = argv[start:]
    assert worker[worker.index("--study") + 1] == "$STUDY"
    assert worker[worker.index("--storage") + 1] == "$AUTOTUNE_STORAGE"
    assert "--until-done" in worker
    # The variables have defaults the environment overrides.
    assert re.search(r'^AUTOTUNE_STORAGE="\$\{AUTOTUNE_STORAGE:-postgresql', text, re.M)
    assert re.search(r'^STUDY="\$\{STUDY:-[^}]+\}"', text, re.M)


def _stub_autotune(folder: Path) -> Path:
    """A folder whose `autotune` prints the arguments it got, one a line."""
    folder.mkdir(parents=True, exist_ok=True)
    stub = folder / "autotune"
    stub.write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done\n')
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    return folder


def _run_script(env: dict[str, str]) -> list[str]:
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("SLURM_") and k not in ("STUDY", "AUTOTUNE_STORAGE",
                                                        "AUTOTUNE_VENV")}
    done = subprocess.run(["bash", str(SBATCH)], env={**clean, **env}, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_sbatch_script_runs_outside_slurm_with_defaults_or_the_environment(
        tmp_path: Path) -> None:
    path = f"{_stub_autotune(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}"
    defaults = _run_script({"PATH": path})
    start = defaults.index("worker")
    assert defaults[start:start + 2] == ["worker", "--study"]
    assert defaults[start + 3] == "--storage"
    assert defaults[start + 4].startswith("postgresql")
    assert defaults[start + 5:] == ["--until-done"]
    given = _run_script({"PATH": path, "STUDY": "my study",
                         "AUTOTUNE_STORAGE": "sqlite:////tmp/a b.db"})
    assert given[given.index("worker"):] == ["worker", "--study", "my study", "--storage",
                                             "sqlite:////tmp/a b.db", "--until-done"]


def test_sbatch_script_activates_the_venv_it_is_given(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _stub_autotune(venv / "bin")
    (venv / "bin" / "activate").write_text(f'PATH="{venv / "bin"}:$PATH"\n')
    printed = _run_script({"PATH": "/usr/bin:/bin", "AUTOTUNE_VENV": str(venv),
                           "STUDY": "s"})
    assert printed[printed.index("worker"):][:3] == ["worker", "--study", "s"]


# --- the Kubernetes Job -----------------------------------------------------------------


def _job() -> dict[str, Any]:
    (job,) = list(yaml.safe_load_all(K8S.read_text()))
    return job


def _container(job: dict[str, Any]) -> dict[str, Any]:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return container


def test_k8s_job_runs_several_workers_to_completion() -> None:
    job = _job()
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    spec = job["spec"]
    assert spec["parallelism"] == spec["completions"] >= 2
    assert isinstance(spec["backoffLimit"], int) and spec["backoffLimit"] >= 0
    assert spec["template"]["spec"]["restartPolicy"] in ("Never", "OnFailure")


def test_k8s_container_runs_the_worker_with_the_secret_url_and_a_gpu() -> None:
    container = _container(_job())
    argv = [*container.get("command", []), *container.get("args", [])]
    line = " ".join(argv)
    assert WORKER in line and "--until-done" in argv
    env = {item["name"]: item for item in container["env"]}
    secret = env["AUTOTUNE_STORAGE"]["valueFrom"]["secretKeyRef"]
    assert secret["name"] and secret["key"]
    assert "value" not in env["AUTOTUNE_STORAGE"]  # the URL, password and all, stays secret
    assert env["STUDY"]["value"]
    # Kubernetes expands $(NAME) only for variables the container defines.
    for name in re.findall(r"\$\((\w+)\)", line):
        assert name in env, f"$({name}) is not defined in the container's env"
    assert argv[argv.index("--study") + 1] == "$(STUDY)"
    if "--storage" in argv:
        assert argv[argv.index("--storage") + 1] == "$(AUTOTUNE_STORAGE)"
    assert int(container["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    assert container["image"]


def test_cluster_readme_names_the_recipes_and_the_worker_command() -> None:
    readme = (CLUSTER / "README.md").read_text()
    for name in (SBATCH.name, K8S.name):
        assert f"]({name})" in readme
    assert 'autotune worker --study "$STUDY" --storage "$AUTOTUNE_STORAGE" --until-done' in readme
    assert 'pip install "xla-autotune[postgres]"' in readme
    assert "postgresql+psycopg://" in readme


# --- the standing pool's recipes -------------------------------------------------------

POOL_SBATCH = CLUSTER / "slurm-pool.sbatch"
POOL_K8S = CLUSTER / "pool-deployment.yaml"


def test_the_pool_sbatch_serves_every_open_study_until_none_is_left() -> None:
    text = POOL_SBATCH.read_text()
    directives = sbatch_directives(text)
    assert len(array_indices(directives["array"])) > 1 and directives["gres"] == "gpu:1"
    assert directives["signal"] == "B:TERM@120"
    last = [ln for ln in text.splitlines() if ln.startswith("exec ")][-1]
    assert shlex.split(last)[1:] == ["autotune", "worker", "--storage", "$AUTOTUNE_STORAGE",
                                     "--studies", "$STUDIES", "--until-idle"]
    assert os.stat(POOL_SBATCH).st_mode & stat.S_IXUSR
    done = subprocess.run(["bash", "-n", str(POOL_SBATCH)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_the_pool_deployment_stays_up_serving_every_study_with_a_gpu_each() -> None:
    doc = yaml.safe_load(POOL_K8S.read_text())
    assert (doc["apiVersion"], doc["kind"]) == ("apps/v1", "Deployment")
    spec = doc["spec"]
    assert spec["replicas"] > 1
    assert spec["selector"]["matchLabels"] == spec["template"]["metadata"]["labels"]
    (container,) = spec["template"]["spec"]["containers"]
    assert container["command"] == ["autotune", "worker", "--storage", "$(AUTOTUNE_STORAGE)"]
    env = {e["name"]: e for e in container["env"]}
    assert env["AUTOTUNE_STORAGE"]["valueFrom"]["secretKeyRef"] == {"name": "autotune-db",
                                                                    "key": "url"}
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_the_cluster_readme_names_the_pool_recipes_and_submit() -> None:
    readme = (CLUSTER / "README.md").read_text()
    for name in (POOL_SBATCH.name, POOL_K8S.name):
        assert f"]({name})" in readme
    assert "--submit" in readme and "`autotune studies`" in readme


# --- the worker command, run here -------------------------------------------------------


STUDY_NAME = "cluster-recipe"
TARGET = 4
STUDY_ARGS = ["study", "--space", "cpu", "--benchmark", "matmul", "--preset", "tiny",
              "--devices", "1", "--steps", "5", "--warmup", "1", "--seed", "3",
              "--confirm", "0", "--no-shrink", "--no-fit", "--no-racing",
              "--trials", str(TARGET), "--name", STUDY_NAME]
MEASURED = ("baseline", "recommended", "search")  # one run per trial number each
BUDGET = (*MEASURED, "race")  # what `--trials` counts


def _autotune_on_path(folder: Path) -> Path:
    """A folder whose `autotune` is this checkout's CLI under this interpreter."""
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "autotune"
    shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -c '
                    f'"from autotune.cli import main; main()" "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return folder


def _runs(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db) as conn:
            return int(conn.execute("select count(*) from autotune_runs").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


@pytest.mark.slow
def test_sbatch_worker_line_finishes_a_study_left_unfinished(tmp_path: Path) -> None:
    """A study stopped after its baseline; the script's worker line, run as it is,
    measures the rest: the study ends holding its trials, each measured once."""
    db = tmp_path / "a.db"
    url = f"sqlite:///{db}"
    env = {**os.environ,
           "PATH": f"{_autotune_on_path(tmp_path / 'bin')}{os.pathsep}{os.environ['PATH']}"}
    first = subprocess.Popen(["autotune", *STUDY_ARGS, "--storage", url], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and first.poll() is None and _runs(db) < 1:
        time.sleep(0.2)
    first.send_signal(signal.SIGINT)  # the first machine goes away; the workers go on
    _, stderr = first.communicate(timeout=60)
    assert first.returncode in (0, 130), stderr  # 0: it finished before the signal came
    assert _runs(db) >= 1

    worker = subprocess.run(["bash", "-c", worker_line(SBATCH.read_text())], cwd=tmp_path,
                            env={**env, "STUDY": STUDY_NAME, "AUTOTUNE_STORAGE": url},
                            capture_output=True, text=True, timeout=300)
    assert worker.returncode == 0, worker.stdout + worker.stderr

    shown = subprocess.run(["autotune", "trials", STUDY_NAME, "--storage", url,
                            "--format", "json"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)
    assert len({row["run"] for row in rows}) == len(rows)
    assert [row["role"] for row in rows].count("baseline") == 1
    measured = [(row["trial"], row["role"]) for row in rows if row["role"] in MEASURED]
    assert all(trial is not None for trial, _ in measured)
    assert len(measured) == len(set(measured)), measured  # no trial measured twice
    assert len({trial for trial, _ in measured}) == len(measured)
    assert sum(row["role"] in BUDGET for row in rows) == TARGET, rows
    with sqlite3.connect(db) as conn:  # Optuna's side: nothing left running
        states = [state for (state,) in conn.execute("select state from trials")]
    assert "RUNNING" not in states
