"""Data-parallel MLP training step over several processes: gradients all-reduced across them.

The multi-process benchmark, for trials run through a launcher
(``--launcher "srun -N 2 --ntasks-per-node 1 {cmd}"``, ``"mpirun -n 2 {cmd}"``
or ``"python -m autotune.ground.local_launch -n 2 -- {cmd}"``). When the launcher's
variables say several processes run (``autotune.child.ranks.process_total``:
JAX_NUM_PROCESSES, OMPI_COMM_WORLD_SIZE, PMI_SIZE or SLURM_NTASKS above 1),
``workload()`` first joins them with ``jax.distributed.initialize``: with
JAX_COORDINATOR_ADDRESS and the process count and rank where that address is
set (``autotune.ground.local_launch`` sets it, with JAX_NUM_PROCESSES and
JAX_PROCESS_ID), else with no arguments (JAX's own Slurm and Open MPI
detection). That must come before anything starts a JAX backend; the trial
child builds the workload first for this reason. On CPU the processes'
collectives go through gloo (set here where the installed jax has none by
default). Alone (no launcher, one process) it runs on the local devices like
``mlp-dp``.

One SGD step in float32 of a multi-layer perceptron (tanh-GELU between dense
layers, softmax cross-entropy) on a deterministic synthetic batch that every
process builds alike with numpy; each process holds the rows of its own
devices. The mesh is 1-D, ``("data",)``, over every device of every process:
inside ``jax.shard_map`` each device computes the loss of its shard, the loss
differentiated is their mean (``jax.lax.pmean``) and autodiff sums the
replicated parameters' gradients over the axis, so the compiled step holds an
all-reduce across processes. The step returns ``(new_params, loss)``, both
replicated on every device.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from autotune.bench import Workload
from autotune.child.ranks import process_rank, process_total

PRESETS = ("tiny", "small", "large")
DESCRIPTION = ("multi-process data-parallel MLP step (jax.distributed): gradients "
               "all-reduced across processes")

# Sizes per preset: input features, hidden width, hidden layers, classes, and the rows
# of the global batch each device holds (the batch grows with the devices of all processes).
CONFIGS = {
    "tiny": dict(features=32, hidden=64, layers=2, classes=8, batch_per_device=16),
    "small": dict(features=256, hidden=512, layers=3, classes=16, batch_per_device=128),
    "large": dict(features=2048, hidden=4096, layers=6, classes=512, batch_per_device=1024),
}
SEED = 1701
AXIS = "data"
#: Where the processes meet, when the launcher says (`autotune.ground.local_launch` does).
COORDINATOR = "JAX_COORDINATOR_ADDRESS"


def join_processes(environ: Mapping[str, str] = os.environ) -> bool:
    """Call ``jax.distributed.initialize`` when the launcher started several processes.

    Returns whether this is a multi-process run. Where JAX_COORDINATOR_ADDRESS
    is set (the local launcher sets it, with JAX_NUM_PROCESSES and
    JAX_PROCESS_ID), the arguments are explicit: that address, and the number
    of processes and this one's rank by the child's rules
    (`autotune.child.ranks`); otherwise there are none and JAX detects Slurm
    or Open MPI itself. Call before anything starts a JAX backend; a second
    call does nothing.
    """
    if process_total(environ) <= 1:
        return False
    if getattr(jax.distributed, "is_initialized", lambda: False)():
        return True
    _cpu_collectives()
    if address := environ.get(COORDINATOR):
        jax.distributed.initialize(coordinator_address=address,
                                   num_processes=process_total(environ),
                                   process_id=process_rank(environ))
    else:
        jax.distributed.initialize()
    return True


def _cpu_collectives() -> None:
    """CPU collectives between processes need an implementation: gloo, where none is set."""
    try:
        current = jax.config.jax_cpu_collectives_implementation
    except AttributeError:  # a jax without the option
        return
    if current in (None, "", "none"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")


def _sibling(name: str):
    """The built-in workload file `name`.py beside this one, loaded by path (the file
    names have hyphens: they are not importable modules)."""
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_autotune_benchmark_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The model and its step are mlp-dp's: the same MLP, its gradients all-reduced over
#: every device, here of every process.
_MLP = _sibling("mlp-dp")
forward, loss_fn, local_step, make_step = (_MLP.forward, _MLP.loss_fn, _MLP.local_step,
                                           _MLP.make_step)


def host_data(cfg: dict, rows: int) -> tuple[list[dict], np.ndarray, np.ndarray]:
    """Parameters, inputs and labels in numpy, the same in every process (fixed seed)."""
    rng = np.random.default_rng(SEED)
    widths = [cfg["features"], *[cfg["hidden"]] * cfg["layers"], cfg["classes"]]
    params = [
        {"w": (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2.0 / fan_in)).astype(np.float32),
         "b": np.zeros((fan_out,), np.float32)}
        for fan_in, fan_out in zip(widths[:-1], widths[1:], strict=True)
    ]
    x = rng.standard_normal((rows, cfg["features"])).astype(np.float32)
    teacher = rng.standard_normal((cfg["features"], cfg["classes"])).astype(np.float32)
    labels = np.argmax(x @ teacher, axis=-1).astype(np.int32)
    return params, x, labels


def global_array(host: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """A global array laid out by ``sharding``; each process places only its own shards."""
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def workload(preset: str = "small") -> Workload:
    """Join the other processes (if any), then return the data-parallel step and its inputs."""
    if preset not in CONFIGS:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(PRESETS)}")
    join_processes()
    devices = jax.devices()  # every process's, in process order
    cfg = dict(CONFIGS[preset])
    cfg["batch"] = cfg.pop("batch_per_device") * len(devices)
    mesh = Mesh(np.array(devices), (AXIS,))
    params, x, labels = host_data(cfg, cfg["batch"])
    replicated, batch = NamedSharding(mesh, P()), NamedSharding(mesh, P(AXIS))
    args = (jax.tree.map(lambda a: global_array(a, replicated), params),
            global_array(x, batch), global_array(labels, batch))
    count = int(sum(leaf.size for leaf in jax.tree.leaves(params)))
    meta = dict(cfg, preset=preset, device_count=len(devices), parameter_count=count,
                process_count=jax.process_count(), process_index=jax.process_index())
    return Workload(step=make_step(mesh), args=args, name=f"distributed-mlp-{preset}", meta=meta)
