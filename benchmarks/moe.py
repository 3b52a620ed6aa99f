"""Training step of a mixture-of-experts classifier, experts sharded over an "expert" axis.

One SGD step in float32 of a stack of mixture-of-experts (MoE) feed-forward
layers (pre-LayerNorm, residual) and a linear classifier, trained with softmax
cross-entropy plus the Switch Transformer's load-balancing loss on a
deterministic synthetic batch (Gaussian tokens, labels from a fixed random
linear "teacher"). The step returns ``(new_params, loss)``.

Each layer routes every token to its top-2 experts (softmax router, the two
gates renormalised) with a fixed capacity per expert (GShard: an expert takes
at most ``capacity`` tokens from each device, the first choices before the
second; a token over capacity skips that expert). Expert parallelism over a 1-D
``("expert",)`` mesh of all ``jax.devices()``: each device holds
``experts_per_device`` experts' weights and a shard of the tokens; the router
and the classifier are replicated. Inside ``jax.shard_map`` the dispatch sends
each expert its tokens with ``jax.lax.all_to_all`` and the combine brings the
results back with another; autodiff transposes each into one more
all-to-all. The compiled step therefore holds **all-to-all** ops (four per
layer, but the first layer's dispatch needs no transpose: its tokens are the
input) and **all-reduce** ops (the loss and the replicated weights' gradients,
combined into one).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from autotune.bench import Workload

PRESETS = ("tiny", "small", "large")
DESCRIPTION = ("mixture-of-experts training step: top-2 routing with a capacity, "
               "tokens dispatched to the experts and back with all-to-all")

# Sizes per preset: model width, each expert's hidden width, MoE layers, classes,
# experts on each device and tokens each device holds (both grow with the devices).
CONFIGS = {
    "tiny": dict(d_model=32, d_ff=64, layers=2, classes=8, experts_per_device=1,
                 tokens_per_device=64),
    "small": dict(d_model=128, d_ff=256, layers=2, classes=16, experts_per_device=2,
                  tokens_per_device=256),
    "large": dict(d_model=2048, d_ff=8192, layers=4, classes=1024, experts_per_device=2,
                  tokens_per_device=4096),
}
SEED = 1701
LEARNING_RATE = 0.1
AXIS = "expert"
TOP_K = 2
CAPACITY_FACTOR = 1.25
AUX_WEIGHT = 0.01
INIT_SCALE = 0.02
#: The experts' weights, sharded along their leading (expert) axis; the rest is replicated.
EXPERT_PARAMS = ("w1", "b1", "w2", "b2")


def layer_norm(x: jax.Array) -> jax.Array:
    """Normalise the last axis of ``x`` (no scale or bias)."""
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5)


def route(x: jax.Array, router: jax.Array, capacity: int):
    """Top-2 routing of ``x`` (tokens, d) with ``capacity`` slots per expert.

    Returns the dispatch mask and the combine weights, both (tokens, experts,
    capacity), and the load-balancing loss. Slots are taken in order: every
    token's first choice before any second choice, earlier tokens first.
    """
    probs = jax.nn.softmax(x @ router, axis=-1)
    tokens, experts = probs.shape
    gates, chosen = jax.lax.top_k(probs, TOP_K)  # (tokens, k)
    gates = gates / jnp.sum(gates, axis=-1, keepdims=True)
    onehot = jax.nn.one_hot(chosen, experts, dtype=x.dtype)  # (tokens, k, experts)
    by_choice = onehot.transpose(1, 0, 2).reshape(TOP_K * tokens, experts)
    slot = jnp.sum((jnp.cumsum(by_choice, axis=0) - 1.0) * by_choice, axis=-1)
    slot = slot.reshape(TOP_K, tokens).T.astype(jnp.int32)  # (tokens, k)
    in_slot = jax.nn.one_hot(slot, capacity, dtype=x.dtype)  # zeros past capacity
    dispatch = jnp.einsum("tke,tkc->tec", onehot, in_slot)
    combine = jnp.einsum("tke,tkc,tk->tec", onehot, in_slot, gates)
    balance = experts * jnp.sum(jnp.mean(onehot[:, 0], axis=0) * jnp.mean(probs, axis=0))
    return dispatch, combine, balance


def experts_ffn(layer: dict, x: jax.Array) -> jax.Array:
    """This device's experts on their tokens: (experts_per_device, slots, d)."""
    hidden = jnp.einsum("esd,edf->esf", x, layer["w1"]) + layer["b1"][:, None]
    hidden = jax.nn.gelu(hidden, approximate=True)
    return jnp.einsum("esf,efd->esd", hidden, layer["w2"]) + layer["b2"][:, None]


def moe_layer(layer: dict, x: jax.Array, capacity: int) -> tuple[jax.Array, jax.Array]:
    """One MoE layer on this device's tokens (inside ``shard_map``); (output, balance loss).

    The dispatched tokens (experts, capacity, d) are split by expert owner and
    exchanged with ``all_to_all``: each device then holds, for each of its
    experts, the slots every device filled (devices x capacity of them); the
    experts' outputs go back the same way.
    """
    dispatch, combine, balance = route(x, layer["router"], capacity)
    local = layer["w1"].shape[0]
    sent = jnp.einsum("tec,td->ecd", dispatch, x)  # (experts, capacity, d)
    got = jax.lax.all_to_all(sent, AXIS, 0, 0, tiled=True)  # (devices * local, capacity, d)
    devices = got.shape[0] // local
    mine = got.reshape(devices, local, capacity, -1).transpose(1, 0, 2, 3)
    done = experts_ffn(layer, mine.reshape(local, devices * capacity, -1))
    back = done.reshape(local, devices, capacity, -1).transpose(1, 0, 2, 3)
    back = jax.lax.all_to_all(back.reshape(devices * local, capacity, -1), AXIS, 0, 0,
                              tiled=True)  # (experts, capacity, d), this device's tokens
    return jnp.einsum("tec,ecd->td", combine, back), balance


def loss_fn(params: dict, x: jax.Array, labels: jax.Array, capacity: int) -> jax.Array:
    """Cross-entropy of this device's tokens plus the weighted load-balancing loss."""
    balance = jnp.zeros((), x.dtype)
    for layer in params["layers"]:
        out, aux = moe_layer(layer, layer_norm(x), capacity)
        x, balance = x + out, balance + aux
    logp = jax.nn.log_softmax(layer_norm(x) @ params["head"], axis=-1)
    cross_entropy = -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))
    return cross_entropy + AUX_WEIGHT * balance / len(params["layers"])


def local_step(params: dict, x: jax.Array, labels: jax.Array, capacity: int):
    """Per-device SGD step; returns (new_params, global mean loss)."""

    def global_loss(params: dict) -> jax.Array:
        return jax.lax.pmean(loss_fn(params, x, labels, capacity), AXIS)

    loss, grads = jax.value_and_grad(global_loss)(params)
    new_params = jax.tree.map(lambda p, g: p - LEARNING_RATE * g, params, grads)
    return new_params, loss


def param_spec(path: tuple, leaf: jax.Array) -> P:
    """Experts' weights sharded along their expert axis, everything else replicated."""
    return P(AXIS) if getattr(path[-1], "key", None) in EXPERT_PARAMS else P()


def make_step(mesh: Mesh, specs: dict, capacity: int):
    """Return the jitted ``step(params, x, labels) -> (new_params, loss)``."""
    mapped = jax.shard_map(
        functools.partial(local_step, capacity=capacity),
        mesh=mesh,
        in_specs=(specs, P(AXIS), P(AXIS)),
        out_specs=(specs, P()),
    )
    shardings = jax.tree.map(lambda spec: NamedSharding(mesh, spec), specs,
                             is_leaf=lambda s: isinstance(s, P))
    batch = NamedSharding(mesh, P(AXIS))
    return jax.jit(mapped, in_shardings=(shardings, batch, batch),
                   out_shardings=(shardings, NamedSharding(mesh, P())))


def check_preset(preset: str) -> None:
    """Raise ValueError naming the known presets when ``preset`` is not one of them."""
    if preset not in CONFIGS:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(PRESETS)}")


def resolve_config(preset: str, n_devices: int) -> dict:
    """The sizes of ``preset`` on ``n_devices``: experts, tokens and per-device capacity."""
    check_preset(preset)
    cfg = dict(CONFIGS[preset])
    # top-2 routing needs two experts at least: a device alone holds both
    cfg["experts_per_device"] = max(cfg["experts_per_device"], math.ceil(TOP_K / n_devices))
    cfg["experts"] = cfg["experts_per_device"] * n_devices
    cfg["tokens"] = cfg["tokens_per_device"] * n_devices
    cfg["capacity"] = math.ceil(CAPACITY_FACTOR * TOP_K * cfg["tokens_per_device"]
                                / cfg["experts"])
    return cfg


def host_data(cfg: dict) -> tuple[dict, np.ndarray, np.ndarray]:
    """Parameters, tokens and labels in numpy (fixed seed)."""
    rng = np.random.default_rng(SEED)
    d, f, e = cfg["d_model"], cfg["d_ff"], cfg["experts"]

    def normal(*shape: int, scale: float = INIT_SCALE) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    layers = [{"router": normal(d, e), "w1": normal(e, d, f, scale=1 / math.sqrt(d)),
               "b1": np.zeros((e, f), np.float32), "w2": normal(e, f, d, scale=1 / math.sqrt(f)),
               "b2": np.zeros((e, d), np.float32)} for _ in range(cfg["layers"])]
    params = {"layers": layers, "head": normal(d, cfg["classes"], scale=1 / math.sqrt(d))}
    x = rng.standard_normal((cfg["tokens"], d)).astype(np.float32)
    teacher = rng.standard_normal((d, cfg["classes"])).astype(np.float32)
    labels = np.argmax(x @ teacher, axis=-1).astype(np.int32)
    return params, x, labels


def workload(preset: str = "small") -> Workload:
    """Return the expert-parallel MoE training step and its inputs for ``preset``."""
    check_preset(preset)  # before JAX starts a backend
    devices = jax.devices()
    cfg = resolve_config(preset, len(devices))
    mesh = Mesh(np.array(devices), (AXIS,))
    params, x, labels = host_data(cfg)
    specs = jax.tree_util.tree_map_with_path(param_spec, params)
    step = make_step(mesh, specs, cfg["capacity"])
    shardings = jax.tree.map(lambda spec: NamedSharding(mesh, spec), specs,
                             is_leaf=lambda s: isinstance(s, P))
    batch = NamedSharding(mesh, P(AXIS))
    args = (jax.device_put(params, shardings), jax.device_put(x, batch),
            jax.device_put(labels, batch))
    count = int(sum(leaf.size for leaf in jax.tree.leaves(params)))
    meta = dict(cfg, preset=preset, device_count=len(devices), parameter_count=count)
    return Workload(step=step, args=args, name=f"moe-{preset}", meta=meta)
