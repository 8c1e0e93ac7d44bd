"""evaluate(system, model, plan) -> Breakdown: one training step as a schedule of tasks.

The step model (step_model) runs in four rooms, each a module of pure functions:

  cost/traffic.py   the bytes each collective and memory stream moves, and each collective's time
  cost/schedule.py  how the streams overlap: compute, communication, interference, the critical path
  cost/memory.py    HBM and host memory per device
  here              the figures: samples/s, MFU, cost and energy per sample, into a Breakdown
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np

from .cache import jit, traced
from .cost import collectives as coll
from .cost.arrays import lead, xp_of
from .cost.compute import dense_flops, peak_flops
from .cost.embedding import EmbeddingCosts
from .cost.memory import activation_bytes, dense_shards, dense_state_bytes
from .cost.schedule import step_schedule
from .cost.smooth import reduce_max
from .cost.traffic import collective_times, plan_traffic
from .config import ConfigError
from .hardware import System, capacity_bytes, load_system, whole_system
from .pytree import pytree, static
from .plan import Plan, PlanArrays, check_arrays, group_problem, load_plan, to_arrays, validate_plan
from .workload import RankingModel, load_model

PHASES = ("input_dist", "bottom_fwd", "emb_fwd", "output_dist", "top_fwd", "top_bwd", "grad_dist",
          "bottom_bwd", "emb_bwd", "dense_sync", "optimizer", "overhead")
COMM_PHASES = ("input_dist", "output_dist", "grad_dist", "dense_sync")


@pytree
@dataclass(frozen=True)
class Breakdown:
    """Everything one evaluation says about a step. Arrays of shape [D] are per device."""

    step_s: jax.Array
    samples_per_s: jax.Array
    phase_s: dict                 # phase -> [D] busy time of that phase (no interference)
    start_s: dict                 # phase -> [D] start time in the step's timeline
    end_s: dict                   # phase -> [D] end time
    compute_s: jax.Array          # [D] compute busy time, interference included
    comm_s: jax.Array             # communication stream busy time
    exposed_comm_s: jax.Array     # step time not covered by the slowest device's compute
    interference_s: jax.Array     # [D] compute time added by overlapping collectives
    slowdown: jax.Array           # [D] compute busy with / without interference
    mfu: jax.Array                # dense model FLOPs / (step x chips x peak)
    memory_bytes: jax.Array       # [D] HBM used
    memory_parts: dict            # part -> [D] bytes
    capacity_bytes: jax.Array
    host_memory_bytes: jax.Array  # [D] host DRAM used by offloaded tables
    feasible: jax.Array           # bool: fits HBM and host DRAM on every device
    usd_per_million_samples: jax.Array
    joules_per_sample: jax.Array
    comm_bytes: dict              # collective -> bytes per device (max over devices)
    contention: dict              # overlap -> how much slower its dense compute runs next to the collective
    num_chips: int = static(default=1)   # devices of the per-device arrays (a 2D plan: one sharding group's)
    replicas: int = static(default=1)    # a 2D plan's sharding groups: the system has num_chips x replicas chips


def as_loaded(value, cls, load, field: str, allowed: str):
    """`value` if it is a `cls`; load(value) if it is a name or path; else a ConfigError naming `field`."""
    if isinstance(value, (str, Path)):
        return load(value)
    if not isinstance(value, cls):
        raise ConfigError("", field, f"must be {allowed}; got {type(value).__name__}")
    return value


def as_system(system: System | str | Path) -> System:
    """A System, or one loaded from a preset name or TOML path; anything else is a ConfigError."""
    return as_loaded(system, System, load_system, "system", "a System, a preset name (e.g. 'mtia300-64') or a TOML path")


def as_model(model: RankingModel | str | Path) -> RankingModel:
    """A RankingModel, or one loaded from a preset name or TOML/JSON path; anything else is a ConfigError."""
    return as_loaded(model, RankingModel, load_model, "model",
                   "a RankingModel, a preset name (e.g. 'dlrm-dcnv2-mlperf') or a TOML/JSON path")


def resolve(system: System | str | Path, model: RankingModel | str | Path,
            plan: Plan | PlanArrays | str | Path | None = None, plan_required: bool = False):
    """(system, model, plan) as objects: each one given as an object, or as a preset name or file
    path that is loaded (the plan: a plan JSON). Anything else, or no plan where plan_required, is a
    ConfigError naming the argument."""
    system, model = as_system(system), as_model(model)
    if isinstance(plan, (str, Path)):
        plan = load_plan(plan, system, model)
    elif plan is None and plan_required:
        raise ConfigError("", "plan", "is required (a Plan, PlanArrays or a plan JSON path)")
    elif plan is not None and not isinstance(plan, (Plan, PlanArrays)):
        raise ConfigError("", "plan", f"must be a Plan, PlanArrays or a plan JSON path; got {type(plan).__name__}")
    return system, model, plan


def evaluate(system: System | str, model: RankingModel | str, plan: Plan | PlanArrays | str, *,
             temperature: float = 0.0) -> Breakdown:
    """Step time, breakdown, memory and cost of `plan` on `system` for `model`.

    `plan` may be a discrete Plan (checked, then turned one-hot) or PlanArrays (one-hot or relaxed),
    or a plan JSON's path; `system` and `model` objects, or preset names or file paths.
    temperature = 0 uses exact max/min; > 0 smooth ones (for gradient search over relaxed plans).
    Pure jnp: jit, vmap and grad go through it (with PlanArrays).
    """
    if not (isinstance(system, System) and isinstance(model, RankingModel) and isinstance(plan, (Plan, PlanArrays))):
        system, model, plan = resolve(system, model, plan, plan_required=True)
    if isinstance(plan, Plan):
        validate_plan(plan, system, model)
        plan = to_arrays(plan, system, model)
    tau = check_temperature(temperature)
    if traced((system, model, plan)):
        return _evaluate_nested(system, model, plan, tau)
    check_arrays(plan, system, model)
    return _evaluate_jit(system, model, plan, tau)


MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-6, 1e3


def check_temperature(temperature) -> float:
    """`temperature` as a float: 0 (exact max and min), or a relative temperature in
    [MIN_TEMPERATURE, MAX_TEMPERATURE] (below it the smooth max's scale, temperature x the mean
    argument, can underflow float32 to 0 and the step be NaN; a negative one makes the max a min)."""
    ok = isinstance(temperature, (int, float, np.integer, np.floating)) and not isinstance(temperature, bool)
    t = float(temperature) if ok else math.nan
    if not (t == 0.0 or MIN_TEMPERATURE <= t <= MAX_TEMPERATURE):
        raise ConfigError("", "temperature", f"must be 0 (exact) or a number from {MIN_TEMPERATURE:g} to "
                          f"{MAX_TEMPERATURE:g} (smooth max and min), got {temperature!r}")
    return t


def evaluate_arrays(system: System, model: RankingModel, pa: PlanArrays, tau: float) -> Breakdown:
    """The Breakdown of plan arrays at temperature tau, traceable (jit, vmap, grad): what evaluate
    compiles, and what the searches and fits trace through."""
    return step_model(system, model, pa, tau)[0]


# compiled once per problem shape (System, model and plan structures), reused by every call, with
# perfmodel's quick compile options (cache.jit: about half the compile time, the same run time for
# one plan; benchmarks/bench_compile.py). jax allows compile options only on a top-level jit:
# evaluate() called under a transformation (inside a jit, vmap or grad: its inputs are tracers), as
# sweeps do, uses a plain one
_evaluate_jit = jit(evaluate_arrays, static_argnums=3, quick=True)
_evaluate_nested = jax.jit(evaluate_arrays, static_argnums=3)


def step_model(system: System, model: RankingModel, pa: PlanArrays, tau: float) -> tuple[Breakdown, EmbeddingCosts]:
    """The step's Breakdown, and the embedding costs it was built from (the plan search reads the
    per-device all-to-all volumes from them): the plan's traffic (cost/traffic.py), its collectives'
    times, their schedule with the compute (cost/schedule.py), memory and the figures. Traced for one
    plan (vmap over plans); in numpy, of a batch of discrete plans (PlanArrays with a leading batch
    axis, as every output then has: cost.arrays; tau must be 0).

    A 2D plan (PlanArrays.replicas > 1) is priced on one sharding group (plan.group_problem: every
    group does the same work at the same time): its per-device figures are the group's devices';
    the step adds the replicas' sync, the dense sync spans every chip, and samples/s, cost and
    energy are the whole system's."""
    system, model = group_problem(system, model, pa)
    net = coll.make_net(system, pa.offload)
    tr = plan_traffic(system, model, pa)
    comm = collective_times(system, pa, tr, net, lambda x: reduce_max(x, -1, tau))
    sc = step_schedule(system, model, pa, tr, comm, net, tau)
    mem, parts, cap, feasible = _memory(system, model, pa, tr)
    rep = system.replication
    whole, R = (system, 1) if rep is None else (rep.whole, rep.replicas)
    D, B, step = system.num_chips, model.global_batch * R, sc.step
    bd = Breakdown(
        step_s=step, samples_per_s=B / step, phase_s=sc.phase, start_s=sc.start, end_s=sc.end, compute_s=sc.compute,
        comm_s=sc.comm_busy, exposed_comm_s=xp_of(step).maximum(step - reduce_max(sc.compute, -1, tau), 0.0),
        interference_s=sc.interference, slowdown=sc.compute / sc.compute_plain, mfu=_mfu(system, model, step),
        memory_bytes=mem, memory_parts=parts, capacity_bytes=cap, host_memory_bytes=tr.emb.host_bytes,
        feasible=feasible, **_prices(whole, B, step), comm_bytes=tr.sent, contention=sc.slowdown, num_chips=D,
        replicas=R,
    )
    return bd, tr.emb


def _memory(system: System, model: RankingModel, pa: PlanArrays, tr):
    """(HBM bytes [D], its parts, the capacity, whether HBM and host DRAM hold it on every device)."""
    emb, D, B = tr.emb, system.num_chips, model.global_batch
    xp = xp_of(pa.shard_type)
    zero = xp.zeros(np.shape(pa.offload) + (D,), np.float32)
    dv = lambda x: lead(x, zero)          # a per-plan value against per-device ones (numpy: [N] -> [N, 1])
    whole = whole_system(system)          # a 2D plan's dense state is sharded over every group's chips
    dense_mem = dv(dense_state_bytes(model, dense_shards(pa, whole.num_chips, whole.domain_size))) + zero
    act = activation_bytes(model, B / D, emb.pooled_bytes) + zero
    buffers = (xp.sum(emb.out_send + emb.out_recv, axis=-1) + 2.0 * tr.tr_moved + xp.sum(emb.in_send + emb.in_recv, axis=-1)
               + dv((B * emb.rw_bytes / B) * 2.0) + dv(tr.grad_bytes / pa.grad_buckets))
    parts = {"embeddings": emb.hbm_bytes, "dense": dense_mem, "activations": act, "buffers": buffers}
    mem = emb.hbm_bytes + dense_mem + act + buffers
    cap = capacity_bytes(system)
    feasible = xp.all(mem <= cap, axis=-1) & xp.all(emb.host_bytes <= system.chip.host_dram_bytes, axis=-1)
    return mem, parts, cap, feasible


def _mfu(system: System, model: RankingModel, step):
    """Dense model FLOPs / (step x chips x peak)."""
    peak = peak_flops(system.chip, model.dense_dtype)
    return dense_flops(model) * model.global_batch / (step * system.num_chips * peak)


def _prices(system: System, B, step) -> dict:
    """Dollars per million samples and joules per sample at `step` seconds a step of B samples."""
    D, chip = system.num_chips, system.chip
    hosts = system.num_hosts if D % system.chips_per_host else D / system.chips_per_host   # a partial host costs a whole one
    usd = (D * chip.usd_per_hour + hosts * system.host_usd_per_hour) * step / 3600.0 / B * 1e6
    joules = hosts * system.host_power_W * step / B      # host power includes its accelerators (Table III)
    return {"usd_per_million_samples": usd, "joules_per_sample": joules}
